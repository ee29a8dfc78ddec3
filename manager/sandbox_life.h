/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox lifecycle: create (clone, id maps, overlay, handshake with
 * the init), the warm pool, remove, and the end of a sandbox. */
#pragma once

#include "sandbox.h"

/* Start creating a sandbox for `owner` with `policy` (taken over). `done`
 * runs once it is running or has failed (then error says why and the
 * sandbox is gone by the time done returns). */
int sandbox_create(uid_t owner, struct sandbox_policy *policy, sandbox_ready_cb done, void *data,
                   struct sandbox **out, nsbox_error_t **err);
/* The same, with the files of snapshot `snapshot_id` (snapshot.h) as a
 * read-only layer over the image (NULL: none, as sandbox_create). */
int sandbox_create_from(uid_t owner, struct sandbox_policy *policy, const char *snapshot_id,
                        sandbox_ready_cb done, void *data, struct sandbox **out, nsbox_error_t **err);
/* Live restore: what a record and the running init of a sandbox that a
 * previous nsboxd made give the registry. */
struct sandbox_adoption {
        const char *id;
        uid_t owner;
        struct sandbox_policy policy; /* taken over */
        uid_t host_uid_base;
        long long created_at_ms;
        const char *snapshot_id; /* "" when none */
        pid_t pid;               /* the init's, checked */
        int pidfd;               /* taken over (set to -1) once watched */
        int ctl_fd;              /* the manager's end of its control socket, likewise */
        int disk_fd;             /* its writable layer, or -1 (then no snapshot of it); taken over likewise */
        int secrets_fd;          /* its kept secrets (policy.secrets as read from it), or -1; likewise */
        struct sandbox_cgroup *cgroup; /* taken over */
        long long last_active_ms;      /* wall clock; 0: unknown (its idle timer starts now) */
        long long paused_at_ms;        /* wall clock; 0: it was not paused */
        const uint64_t *mount_ids;     /* of its volumes and host directories (sandbox.h) */
        unsigned n_mount_ids;
};
/* Make the sandbox live in the registry again under its id, with a new
 * lease for its init and a slot for its next exec. On failure its init and
 * cgroup are killed; its dir is left for state_recover. */
int sandbox_adopt(struct sandbox_adoption *a, nsbox_error_t **err);

/* Run `done` when `sb` (being created) is ready or failed. */
void sandbox_when_ready(struct sandbox *sb, sandbox_ready_cb done, void *data);

/* Kill everything in the sandbox and release it; `done` runs when gone.
 * `why` (asked by whom, idle, the daemon stopping, ...) is kept with the
 * sandbox and logged once it is gone: every end of a sandbox says why.
 * The first reason given is the one kept. */
void sandbox_remove(struct sandbox *sb, const char *why, sandbox_ready_cb done, void *data);

/* Keep config.warm_pool sandboxes with the default policy ready, so that a
 * create with that policy is a hand-over instead of a clone. */
void sandbox_pool_fill(void);

/* Called with each sandbox that runs and is a client's (created, or handed
 * from the warm pool): how a feature above starts work ahead without the
 * lifecycle calling it by name. One hook, set at start. */
typedef void (*sandbox_hook_fn)(struct sandbox *sb);
void sandbox_on_ready(sandbox_hook_fn hook);

/* At start: the uid pool, the snapshot store, the fd slots of setup children. */
int sandbox_life_init(nsbox_error_t **err);
/* nsboxd's RLIMIT_NOFILE raised to what max_sandboxes and max_connections
 * need; a warning when max_sandboxes x the default memory overcommit the
 * host. At start and after a reload of the configuration. */
void sandbox_ensure_fd_limit(void);
void sandbox_warn_overcommit(void);
/* The sum of the memory limits of live sandboxes (pooled ones included),
 * which memory_commit_bytes bounds. */
uint64_t sandbox_memory_committed(void);
