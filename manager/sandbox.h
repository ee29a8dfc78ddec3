/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox registry and lifecycle: create (clone, id maps, overlay,
 * handshake with the init), lookup by owner, remove, idle reaping. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "loop.h"
#include "policy.h"
#include "rpc.h"

enum sandbox_state { SANDBOX_CREATING, SANDBOX_RUNNING, SANDBOX_STOPPING, SANDBOX_EXITED };

struct sandbox_waiter;

struct sandbox {
        char id[37];
        uid_t owner;
        enum sandbox_state state;
        struct sandbox_policy policy;
        long long created_at_ms;    /* wall clock */
        long long last_used_ms;     /* wall clock */
        long long last_active_mono; /* monotonic, for idle reaping */

        pid_t pid; /* host pid of the init */
        struct loop_source *pidfd;
        struct loop_source *ctl;
        struct sandbox_cgroup *cgroup;
        struct sandbox_egress *egress; /* its network, when it has one (egress.c) */
        bool pooled;                   /* pre-created with the default policy, not yet given to anyone */
        uint64_t committed;            /* its share of the memory commit (memory_commit_bytes) */
        unsigned uid_slot;
        uid_t host_uid_base;
        char *dir;
        /* Its writable layer's tmpfs, kept open once the host side of the
         * mounts is detached: sandbox.snapshot and image.commit copy it. */
        int disk_fd;
        char snapshot_id[37]; /* the snapshot it was created from, or "" */

        struct sandbox_waiter *create_waiters; /* requests answered when the create ends */
        struct sandbox_waiter *remove_waiters;
        struct exec_sandbox *exec;    /* its execs (exec.c) */
        struct python_interp *python; /* the stateful interpreter, when started */
        unsigned running_execs;       /* client execs not finished (exec.c counts) */
        char *failure;                /* why a create failed */

        /* sandbox.pause: its cgroup frozen, every process of it stopped
         * (the init and the supervisors too: nothing may wait for them).
         * The state stays SANDBOX_RUNNING; paused is shown instead. */
        bool paused;
        long long paused_at_ms;          /* wall clock */
        long long paused_mono;           /* monotonic */
        struct loop_source *pause_timer; /* while freezing: polls until frozen */
        long long pause_deadline_mono;   /* gives up freezing (thaws) after this */
        struct sandbox_waiter *pause_waiters;
        const char *pause_error_kind; /* for the waiters of a pause that failed */

        struct sandbox *next;
};

typedef void (*sandbox_ready_cb)(struct sandbox *sb, const char *error, void *data);

/* Start creating a sandbox for `owner` with `policy` (taken over). `done`
 * runs once it is running or has failed (then error says why and the
 * sandbox is gone by the time done returns). */
int sandbox_create(uid_t owner, struct sandbox_policy *policy, sandbox_ready_cb done, void *data,
                   struct sandbox **out, nsbox_error_t **err);
/* The same, with the files of snapshot `snapshot_id` (snapshot.h) as a
 * read-only layer over the image (NULL: none, as sandbox_create). */
int sandbox_create_from(uid_t owner, struct sandbox_policy *policy, const char *snapshot_id,
                        sandbox_ready_cb done, void *data, struct sandbox **out, nsbox_error_t **err);
/* Run `done` when `sb` (being created) is ready or failed. */
void sandbox_when_ready(struct sandbox *sb, sandbox_ready_cb done, void *data);

/* The shortest id prefix that names a sandbox (as docker's short ids). */
#define SANDBOX_ID_PREFIX_MIN 4

/* A live sandbox that `uid` may see (root sees all) named by its full id
 * or by a unique prefix of the id of one of uid's own sandboxes, or NULL:
 * a sandbox of another user is indistinguishable from a missing one.
 * *matched counts the candidates (more than 1: the prefix is ambiguous). */
struct sandbox *sandbox_resolve(const char *id, uid_t uid, size_t *matched);
/* sandbox_resolve without the count: NULL when missing or ambiguous. */
struct sandbox *sandbox_lookup(const char *id, uid_t uid);
struct sandbox *sandbox_find_session(const char *session_id, uid_t owner);

/* Kill everything in the sandbox and release it; `done` runs when gone. */
void sandbox_remove(struct sandbox *sb, sandbox_ready_cb done, void *data);
void sandbox_touch(struct sandbox *sb);
/* Freeze every process of the sandbox. `done` (may be NULL) runs once it is
 * frozen, or with why not, the kind in sb->pause_error_kind (the sandbox
 * then runs on); at once when already paused. Fails at once (-ENOTSUP)
 * where the host's cgroups cannot freeze. */
int sandbox_pause(struct sandbox *sb, sandbox_ready_cb done, void *data, nsbox_error_t **err);
/* Thaw it; true when it was paused or being paused. */
bool sandbox_resume(struct sandbox *sb);
void sandbox_reap_idle(void);
/* The idle reaper removed the sandbox of this session of `owner` (and it
 * was not recreated since): true once, the entry is then forgotten. */
bool sandbox_session_reaped(const char *session_id, uid_t owner);

json_t *sandbox_to_json(const struct sandbox *sb, bool existing);
const char *sandbox_state_name(enum sandbox_state state);

int sandbox_registry_init(nsbox_error_t **err);
/* nsboxd's RLIMIT_NOFILE raised to what max_sandboxes and max_connections
 * need; a warning when max_sandboxes x the default memory overcommit the
 * host. At start and after a reload of the configuration. */
void sandbox_ensure_fd_limit(void);
void sandbox_warn_overcommit(void);
/* The sum of the memory limits of live sandboxes (pooled ones included),
 * which memory_commit_bytes bounds. */
uint64_t sandbox_memory_committed(void);
/* Execs running in every sandbox (server.info's load). */
unsigned sandbox_running_execs(void);
/* Keep config.warm_pool sandboxes with the default policy ready, so that a
 * create with that policy is a hand-over instead of a clone. */
void sandbox_pool_fill(void);
