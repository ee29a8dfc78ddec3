/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox registry: every sandbox nsboxd holds, found by id, prefix or
 * session for the uid asking, its JSON, the waiters of its events (the
 * removals it remembers are in removals.c). No feature is called from here. */
#include "sandbox.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cgroup.h"
#include "daemon.h"
#include "log.h"
#include "secrets.h"

struct sandbox_waiter {
        sandbox_ready_cb done;
        void *data;
        struct sandbox_waiter *next;
};

const char *sandbox_state_name(enum sandbox_state state)
{
        switch (state) {
        case SANDBOX_CREATING:
                return "creating";
        case SANDBOX_RUNNING:
                return "running";
        case SANDBOX_STOPPING:
                return "stopping";
        case SANDBOX_EXITED:
                return "exited";
        }
        return "unknown";
}

unsigned sandbox_running_execs(void)
{
        unsigned n = 0;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next)
                n += sb->running_execs;
        return n;
}

unsigned sandbox_ending(void)
{
        unsigned n = cgroup_removals_pending();
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next)
                n += sb->released;
        return n;
}

void sandbox_waiter_add(struct sandbox_waiter **list, sandbox_ready_cb done, void *data)
{
        struct sandbox_waiter *w = calloc(1, sizeof(*w));
        if (w == NULL) {
                log_error("out of memory queueing a sandbox waiter");
                return;
        }
        w->done = done;
        w->data = data;
        w->next = *list;
        *list = w;
}

void sandbox_waiters_run(struct sandbox_waiter **list, struct sandbox *sb, const char *error)
{
        struct sandbox_waiter *w = *list;
        *list = NULL;
        while (w != NULL) {
                struct sandbox_waiter *next = w->next;
                w->done(sb, error, w->data);
                free(w);
                w = next;
        }
}

void sandbox_touch(struct sandbox *sb)
{
        sb->last_used_ms = now_realtime_ms();
        sb->last_active_mono = now_monotonic_ms();
}

static bool sandbox_visible(const struct sandbox *sb)
{
        return sb->state != SANDBOX_EXITED && !sb->pooled && !sb->released;
}

struct sandbox *sandbox_resolve(const char *id, uid_t uid, size_t *matched)
{
        *matched = 0;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if (strcmp(sb->id, id) == 0 && (uid == 0 || sb->owner == uid) && sandbox_visible(sb)) {
                        *matched = 1;
                        return sb;
                }
        }
        /* A prefix only ever matches the caller's own sandboxes, root's
         * included: guessing prefixes must not tell one user that another
         * user's sandbox exists, nor how many there are. */
        size_t len = strlen(id);
        if (len < SANDBOX_ID_PREFIX_MIN || len >= sizeof(((struct sandbox *)0)->id))
                return NULL;
        struct sandbox *found = NULL;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if (sb->owner == uid && sandbox_visible(sb) && strncmp(sb->id, id, len) == 0) {
                        found = sb;
                        (*matched)++;
                }
        }
        return *matched == 1 ? found : NULL;
}

struct sandbox *sandbox_lookup(const char *id, uid_t uid)
{
        size_t matched;
        return sandbox_resolve(id, uid, &matched);
}

struct sandbox *sandbox_find_session(const char *session_id, uid_t owner)
{
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if (sb->owner == owner && !sb->pooled && strcmp(sb->policy.session_id, session_id) == 0 &&
                    (sb->state == SANDBOX_CREATING || sb->state == SANDBOX_RUNNING))
                        return sb;
        }
        return NULL;
}

json_t *sandbox_to_json(const struct sandbox *sb, bool existing)
{
        char created[40], used[40];
        format_timestamp(sb->created_at_ms, created, sizeof(created));
        format_timestamp(sb->last_used_ms, used, sizeof(used));
        bool paused = sb->paused && sb->state == SANDBOX_RUNNING;
        json_t *j =
            json_pack("{s:s, s:s?, s:s, s:s, s:s, s:s, s:o, s:b, s:i, s:s, s:i}", "sandbox_id", sb->id,
                      "session_id", sb->policy.session_id[0] ? sb->policy.session_id : NULL, "state",
                      paused ? "paused" : sandbox_state_name(sb->state), "created_at", created, "last_used",
                      used, "image", sb->policy.image, "limits", policy_limits_to_json(&sb->policy.limits),
                      "existing", existing, "idle_timeout_seconds", (int)sb->policy.idle_timeout_seconds,
                      "network", sb->policy.network, "running_execs", (int)sb->running_execs);
        if (j != NULL)
                json_object_set_new(j, "owner", json_integer((json_int_t)sb->owner));
        if (j != NULL)
                json_object_set_new(j, "labels",
                                    sb->policy.labels ? json_deep_copy(sb->policy.labels) : json_object());
        /* Names only: the values are nsbox-egress's. */
        if (j != NULL && sb->policy.secrets != NULL)
                json_object_set_new(j, "secrets", policy_secrets_names(sb->policy.secrets));
        if (j != NULL && paused) {
                char when[40];
                format_timestamp(sb->paused_at_ms, when, sizeof(when));
                json_object_set_new(j, "paused_at", json_string(when));
        }
        if (j != NULL && sb->snapshot_id[0] != '\0')
                json_object_set_new(j, "from_snapshot", json_string(sb->snapshot_id));
        if (j != NULL && sb->policy.mounts != NULL)
                json_object_set_new(j, "mounts", json_deep_copy(sb->policy.mounts));
        /* The limits above are what was asked; whether the host holds the
         * sandbox to them is said here, never implied. */
        if (j != NULL)
                json_object_set_new(j, "limits_enforced", json_boolean(!cgroup_degraded()));
        if (j != NULL && cgroup_degraded())
                json_object_set_new(j, "limits_note",
                                    json_sprintf("limits-not-enforced: %s", cgroup_degraded_reason()));
        return j;
}
