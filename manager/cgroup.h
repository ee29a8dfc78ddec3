/* SPDX-License-Identifier: Apache-2.0 */
/* Resource limits of sandboxes: cgroup v2 (delegated subtree) with a v1 /
 * hybrid fallback. nsboxd works inside the cgroup it was started in. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "policy.h"

enum cgroup_mode { CGROUP_NONE, CGROUP_V1, CGROUP_V2 };

struct sandbox_cgroup;

/* Find nsboxd's own cgroup(s), move nsboxd into a leaf of its own where v2
 * needs it, enable the controllers. With allow_degraded, a host without
 * usable controllers runs sandboxes unlimited (and says so); without it,
 * init fails naming what is missing. */
int cgroup_init(bool allow_degraded, nsbox_error_t **err);
/* Set before cgroup_init: the stale sandbox cgroups (a previous run's)
 * that `keep` names are left as they are (thawed) for live restore to
 * adopt; the others are killed and removed. */
typedef bool (*cgroup_keep_fn)(const char *sandbox_id);
void cgroup_keep_when(cgroup_keep_fn keep);
/* Set before cgroup_init: under systemd (cgroup v2, root), the sandboxes'
 * cgroups go in a transient scope of their own beside nsboxd's unit, which
 * a stop of the unit leaves alone; off, a scope a previous nsboxd left is
 * removed with its sandboxes. Without a scope (systemd refused it) nsboxd
 * works in its unit's cgroup (cgroup_in_unit_cgroup). */
void cgroup_sandboxes_in_scope(bool on);
enum cgroup_mode cgroup_mode(void);
const char *cgroup_mode_name(void);       /* "v2", "v1" or "none" */
bool cgroup_degraded(void);               /* limits are not enforced */
const char *cgroup_degraded_reason(void); /* why (NULL when they are) */
/* nsboxd started in the cgroup systemd delegated to its unit and works
 * there (no DelegateSubgroup=, no scope): while sandboxes' cgroups live under it, the kernel
 * refuses systemd's start of the next nsboxd there. */
bool cgroup_in_unit_cgroup(void);

/* What a sandbox's memory cgroup may hold: its processes' memory_bytes,
 * plus the files it keeps in RAM, its disk (a tmpfs of disk_bytes) and its
 * /dev/shm. Filling a tmpfs is then ENOSPC at the tmpfs's size, never an
 * OOM kill, and a full disk leaves the processes all of memory_bytes. Its
 * memory limit and the host's memory commit both count this; 0 when
 * memory_bytes is 0 (no limit). */
uint64_t cgroup_memory_max(const struct sandbox_limits *limits);

/* Before clone: the sandbox's cgroup(s) with limits applied. *clone_fd is a
 * v2 directory fd for clone3(CLONE_INTO_CGROUP), or -1 (then the procs
 * files below). */
int cgroup_sandbox_create(const char *id, const struct sandbox_limits *limits, struct sandbox_cgroup **out,
                          int *clone_fd, nsbox_error_t **err);
/* The cgroups a previous run made for sandbox `id` (live restore): an
 * error when one of them is missing. *out NULL when there are none. */
int cgroup_sandbox_adopt(const char *id, struct sandbox_cgroup **out, nsbox_error_t **err);
/* Where CLONE_INTO_CGROUP cannot be used (v1), the sandbox's process moves
 * itself in, and it runs where host paths do not resolve: nsboxd opens the
 * cgroup.procs files (*n of them, 0 on v2) and the child writes itself into
 * each (cgroup_procs_join). A v1 move waits a whole RCU grace period; it is
 * the child's wait, not the event loop's. */
#define CGROUP_MAX_HIERARCHIES 4
int cgroup_sandbox_procs_open(struct sandbox_cgroup *cg, int fds[CGROUP_MAX_HIERARCHIES], size_t *n,
                              nsbox_error_t **err);
int cgroup_procs_join(const int *fds, size_t n, nsbox_error_t **err);
/* SIGKILL every process of the sandbox (cgroup.kill on v2). */
void cgroup_sandbox_kill(struct sandbox_cgroup *cg);
/* Pausing: whether the host's cgroups can freeze this sandbox (*why says
 * why not). freeze starts freezing every task of the sandbox (v1: moving
 * them into its freezer dir, made at the first pause, frozen on arrival);
 * frozen says whether that is done (1), still going (0) or failed (<0);
 * thaw undoes it, at any point. */
bool cgroup_freezer_available(void);
bool cgroup_sandbox_can_freeze(const struct sandbox_cgroup *cg, const char **why);
int cgroup_sandbox_freeze(struct sandbox_cgroup *cg, nsbox_error_t **err);
int cgroup_sandbox_frozen(struct sandbox_cgroup *cg);
void cgroup_sandbox_thaw(struct sandbox_cgroup *cg);
/* Once every process is gone: remove the directories, free cg. */
void cgroup_sandbox_destroy(struct sandbox_cgroup *cg);
/* Sandbox cgroup dirs whose removal is still being retried. */
unsigned cgroup_removals_pending(void);
/* {memory_bytes, memory_peak_bytes, cpu_usage_us, pids, oom_kills}; nulls where unknown. */
json_t *cgroup_sandbox_stats(struct sandbox_cgroup *cg);
uint64_t cgroup_sandbox_oom_kills(struct sandbox_cgroup *cg);
