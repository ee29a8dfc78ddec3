/* SPDX-License-Identifier: Apache-2.0 */
/* The transient systemd scope the sandboxes' cgroups live in under systemd
 * with live restore: asked of systemd over D-Bus, kept alive by a holder. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

/* nsboxd runs as a systemd service on a host booted with systemd. */
bool cgroup_scope_under_systemd(void);
/* A process that does nothing but keep a scope from being empty (systemd
 * stops an empty scope): detached from nsboxd (its parent is PID 1), with no
 * fd of nsboxd's, ended by SIGTERM or SIGKILL. */
int cgroup_scope_holder(pid_t *out, nsbox_error_t **err);
/* Ask systemd for the transient scope `unit` in `slice`, delegated
 * (Delegate=yes), with `pid` moved into it. -EEXIST when the unit exists. */
int cgroup_scope_start(const char *unit, const char *slice, pid_t pid, nsbox_error_t **err);
