/* SPDX-License-Identifier: Apache-2.0 */
/* The record of removed sandboxes: what a call naming one (or one of its
 * execs) is told, `ls -a`, a session's next sandbox saying it is new; kept
 * under the state dir so that a restart of nsboxd forgets none of it. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "rpc.h"
#include "sandbox.h"

/* What the record keeps: at most REMOVALS_MAX entries, REMOVALS_PER_OWNER
 * per owner (one user cannot push out the others' entries), none older
 * than REMOVAL_KEPT_MS; per entry, the ids of its sandbox's newest
 * REMOVAL_EXECS_MAX execs. */
#define REMOVALS_MAX       256
#define REMOVALS_PER_OWNER 32
#define REMOVAL_KEPT_MS    (7LL * 24 * 3600 * 1000)
#define REMOVAL_EXECS_MAX  32

/* A sandbox that was removed, as the registry remembers it for a while.
 * Only its owner (and root) ever learn of it. */
struct sandbox_removal {
        uid_t owner;
        unsigned long long seq;  /* order of recording: newer is larger; 0: a free entry */
        long long when_mono;     /* monotonic (negative for one recorded before the host's boot) */
        long long removed_at_ms; /* wall clock */
        bool recreated;          /* its session has had a new sandbox since */
        char sandbox_id[37];
        char session_id[sizeof(((struct sandbox_policy *)0)->session_id)];
        char reason[160];
        char (*exec_ids)[37]; /* its execs' ids, newest first */
        unsigned n_exec_ids;
};

/* Remember that `sb` was removed and why (its end_reason: "idle for 5 min
 * (idle_timeout_seconds)", "asked by uid 1000"), saved to the state dir
 * soon after. Called once per client sandbox by the lifecycle as its
 * removal starts; NULL for a pooled one. */
struct sandbox_removal *sandbox_removal_record(const struct sandbox *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same for a sandbox a previous run of nsboxd left, which recovery
 * removes (state_recover): known by its record alone. */
void sandbox_removal_record_left(const char *id, uid_t owner, const char *session_id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* One of its execs' ids, newest first; past REMOVAL_EXECS_MAX, ignored. */
void sandbox_removal_add_exec(struct sandbox_removal *r, const char *exec_id);
/* The removed sandbox `ref` names for `uid` (its full id, a unique prefix
 * of the id of one of uid's own, or one of uid's session names), when no
 * live sandbox has it; NULL otherwise. Root finds any full id. */
const struct sandbox_removal *sandbox_removal_find(const char *ref, uid_t uid);
/* The removed sandbox whose exec `ref` names for `uid` (its full id, or a
 * unique prefix among uid's own); NULL otherwise. */
const struct sandbox_removal *sandbox_removal_of_exec(const char *ref, uid_t uid);
/* The last removal of `owner`'s session not followed by a new sandbox of
 * it, marked as followed now (a session's next sandbox says it is new);
 * NULL when there is none. */
const struct sandbox_removal *sandbox_removal_of_session(const char *session_id, uid_t owner);
/* "sandbox X (session S) was removed at ..., N ago: REASON; ..." */
void sandbox_removal_message(const struct sandbox_removal *r, char *buf, size_t len);
/* Its JSON (sandbox.list's "removed", the gone error's data). */
json_t *sandbox_removal_to_json(const struct sandbox_removal *r);
/* The removals `uid` may see (root: all), newest first. */
json_t *sandbox_removals_json(uid_t uid);
/* A reply of a session's new sandbox says the last one went and why. */
void sandbox_removal_note_recreated(json_t *reply, const struct sandbox_removal *r);
/* Answer req with error kind "gone": when and why r's sandbox went (and,
 * with exec_id, that the exec went with it). */
void sandbox_removal_reply_gone(struct rpc_request *req, const struct sandbox_removal *r,
                                const char *exec_id);

/* At start, before serving: the record a previous run saved. A file that
 * cannot be read or parsed, or entries that are not what nsboxd writes,
 * are ignored with a log line. */
void sandbox_removals_load(void);
/* At a stop: save what is not saved yet, now. */
void sandbox_removals_save(void);
