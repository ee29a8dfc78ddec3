/* SPDX-License-Identifier: Apache-2.0 */
/* Idle sandboxes: what counts as work, and the reaper. */
#pragma once

#include <stdbool.h>

#include "sandbox.h"

/* An exec, python.run, package.install or shell command runs in it. */
bool sandbox_working(struct sandbox *sb);
/* Pause or remove the sandboxes idle longer than their idle timeout (and
 * paused ones past paused_timeout_seconds). From the daemon's tick. */
void sandbox_reap_idle(void);
/* What the reaper will do to sb and when, into its JSON `j`: last_active,
 * idle_action, paused_timeout_seconds and expires ({action, at,
 * in_seconds, reason}, or null while nothing is due: work running, or
 * paused for ever). */
void sandbox_expiry_to_json(struct sandbox *sb, json_t *j);
