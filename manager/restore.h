/* SPDX-License-Identifier: Apache-2.0 */
/* Live restore: a new nsboxd adopts the sandboxes its predecessor left
 * running (docs/design/live-restore.md). */
#pragma once

#include <stdbool.h>

/* Whether sandbox `sandbox_id` of a previous run is one to adopt: live
 * restore is on, its record says it was leased and is no warm pool's, and
 * its init is alive and is that process (start time, cgroup). cgroup_init
 * asks this before it removes stale cgroups. */
bool restore_keep(const char *sandbox_id);

/* At startup, before state_recover: adopt every sandbox that can be;
 * kill the init and cgroups of one that was leased but cannot (each with a
 * log line saying why), leaving its dir to state_recover. */
void restore_adopt_all(void);

/* After egress_init: the adopted sandboxes that had a network get it back
 * (egress_reattach); one that cannot is removed, with a log line why. */
void restore_networks(void);
