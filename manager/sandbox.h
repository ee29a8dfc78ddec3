/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox registry: struct sandbox, lookup by id, prefix or session for
 * an owner, its JSON, waiters; removals remembered are in removals.h. The
 * lifecycle is in sandbox_life.h, pause in sandbox_pause.h, idle reaping in idle.h. */
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
        /* Live restore: our end of the init's lease (its hangup tells the
         * init we are gone, see runtime/proto.h CTL_LEASE), or -1. */
        int lease_fd;
        struct sandbox_cgroup *cgroup;
        struct sandbox_egress *egress; /* its network, when it has one (egress.c) */
        bool pooled;                   /* pre-created with the default policy, not yet given to anyone */
        /* Removed as its clients see it (sandbox_release): out of lookups,
         * lists and counts; its processes may still be ending. */
        bool released;
        bool removal_recorded; /* in the record of removals (removals.h) */
        uint64_t committed;    /* its share of the memory commit (memory_commit_bytes) */
        unsigned uid_slot;
        uid_t host_uid_base;
        char *dir;
        /* Its writable layer's tmpfs, kept open once the host side of the
         * mounts is detached: sandbox.snapshot and image.commit copy it. */
        int disk_fd;
        /* Live restore: the memfd of its secrets its init keeps too
         * (egress_keep_secrets), or -1. */
        int secrets_fd;
        char snapshot_id[37]; /* the snapshot it was created from, or "" */
        /* The mounts of its volumes and host directories (statx's mount
         * ids, kept as they were attached): fs.* crosses into these and
         * into no other mount of the sandbox (fs_ops.c). */
        uint64_t mount_ids[POLICY_MAX_MOUNTS];
        unsigned n_mount_ids;
        /* Its journal of temporary files (fs_staging.c): how many it holds
         * open, and how many lines it has. */
        unsigned staging_open;
        unsigned staging_lines;

        struct sandbox_waiter *create_waiters; /* requests answered when the create ends */
        struct sandbox_waiter *remove_waiters;
        struct exec_sandbox *exec;    /* its execs (exec.c) */
        struct python_interp *python; /* the stateful interpreter, when started */
        unsigned running_execs;       /* client execs not finished (exec.c counts) */
        char *failure;                /* why a create failed */
        char *end_reason;             /* why it is being removed (sandbox_remove's why) */

        /* sandbox.pause: its cgroup frozen, every process of it stopped
         * (the init and the supervisors too: nothing may wait for them).
         * The state stays SANDBOX_RUNNING; paused is shown instead. */
        bool paused;
        long long paused_at_ms;         /* wall clock */
        long long paused_mono;          /* monotonic */
        struct loop_timer *pause_timer; /* while freezing: polls until frozen */
        long long pause_deadline_mono;  /* gives up freezing (thaws) after this */
        long long pause_retry_mono;     /* asks the freezer again at this time */
        struct sandbox_waiter *pause_waiters;
        const char *pause_error_kind; /* for the waiters of a pause that failed */

        struct sandbox *next;
};

typedef void (*sandbox_ready_cb)(struct sandbox *sb, const char *error, void *data);

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

void sandbox_touch(struct sandbox *sb);

/* Requests that wait for an event of a sandbox (created, removed, paused):
 * each `done` runs once, in the order added, when the event's list is run. */
void sandbox_waiter_add(struct sandbox_waiter **list, sandbox_ready_cb done, void *data);
void sandbox_waiters_run(struct sandbox_waiter **list, struct sandbox *sb, const char *error);

json_t *sandbox_to_json(const struct sandbox *sb, bool existing);
const char *sandbox_state_name(enum sandbox_state state);

/* Execs running in every sandbox (server.info's load). */
unsigned sandbox_running_execs(void);
/* Sandboxes removed as clients see them whose teardown (processes,
 * namespaces, cgroups) still runs after the remove's answer. */
unsigned sandbox_ending(void);
