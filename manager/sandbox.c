/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox registry: every sandbox nsboxd holds, found by id, prefix or
 * session for the uid asking, its JSON, the waiters of its events, and the
 * removals it remembers. No feature is called from here. */
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

/* Removals remembered: a small table, the oldest entry overwritten, at
 * most REMOVALS_PER_OWNER per owner (one user cannot push out the others'
 * entries) and none older than REMOVAL_KEPT_MS. */
#define REMOVALS_MAX       256
#define REMOVALS_PER_OWNER 32
#define REMOVAL_KEPT_MS    (7LL * 24 * 3600 * 1000)

static struct sandbox_removal removals[REMOVALS_MAX];
static unsigned long long removals_recorded;

static bool removal_live(const struct sandbox_removal *r, long long now)
{
        return r->when_mono != 0 && now - r->when_mono < REMOVAL_KEPT_MS;
}

void sandbox_removal_record(const struct sandbox *sb, const char *fmt, ...)
{
        if (sb->pooled)
                return;
        long long now = now_monotonic_ms();
        struct sandbox_removal *victim = NULL, *own_oldest = NULL;
        unsigned own = 0;
        for (size_t i = 0; i < REMOVALS_MAX; i++) {
                struct sandbox_removal *r = &removals[i];
                if (!removal_live(r, now))
                        *r = (struct sandbox_removal){ 0 };
                if (r->when_mono != 0 && r->owner == sb->owner) {
                        own++;
                        if (own_oldest == NULL || r->seq < own_oldest->seq)
                                own_oldest = r;
                }
                if (victim == NULL || r->seq < victim->seq)
                        victim = r;
        }
        if (own >= REMOVALS_PER_OWNER)
                victim = own_oldest;
        *victim = (struct sandbox_removal){ .owner = sb->owner,
                                            .when_mono = now,
                                            .seq = ++removals_recorded,
                                            .removed_at_ms = now_realtime_ms() };
        snprintf(victim->sandbox_id, sizeof(victim->sandbox_id), "%s", sb->id);
        snprintf(victim->session_id, sizeof(victim->session_id), "%s", sb->policy.session_id);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(victim->reason, sizeof(victim->reason), fmt, ap);
        va_end(ap);
}

/* The newer of two entries, either possibly NULL. */
static const struct sandbox_removal *removal_newer(const struct sandbox_removal *a,
                                                   const struct sandbox_removal *b)
{
        return a == NULL || (b != NULL && b->seq > a->seq) ? b : a;
}

const struct sandbox_removal *sandbox_removal_find(const char *ref, uid_t uid)
{
        long long now = now_monotonic_ms();
        size_t len = strlen(ref), prefixed = 0;
        const struct sandbox_removal *by_prefix = NULL, *by_session = NULL;
        for (size_t i = 0; i < REMOVALS_MAX; i++) {
                const struct sandbox_removal *r = &removals[i];
                if (!removal_live(r, now))
                        continue;
                if (strcmp(r->sandbox_id, ref) == 0 && (uid == 0 || r->owner == uid))
                        return r;
                if (r->owner != uid)
                        continue;
                if (len >= SANDBOX_ID_PREFIX_MIN && strncmp(r->sandbox_id, ref, len) == 0) {
                        by_prefix = r;
                        prefixed++;
                }
                if (r->session_id[0] != '\0' && strcmp(r->session_id, ref) == 0)
                        by_session = removal_newer(by_session, r);
        }
        if (prefixed == 1)
                return by_prefix;
        /* A session whose sandbox is live again names that one, not this. */
        if (by_session != NULL && sandbox_find_session(ref, uid) == NULL)
                return by_session;
        return NULL;
}

const struct sandbox_removal *sandbox_removal_of_session(const char *session_id, uid_t owner)
{
        long long now = now_monotonic_ms();
        struct sandbox_removal *last = NULL;
        for (size_t i = 0; i < REMOVALS_MAX; i++) {
                struct sandbox_removal *r = &removals[i];
                if (removal_live(r, now) && r->owner == owner && strcmp(r->session_id, session_id) == 0 &&
                    (last == NULL || r->seq > last->seq))
                        last = r;
        }
        if (last == NULL || last->recreated)
                return NULL;
        last->recreated = true;
        return last;
}

void sandbox_removal_message(const struct sandbox_removal *r, char *buf, size_t len)
{
        char ago[32];
        format_duration((now_monotonic_ms() - r->when_mono) / 1000, ago, sizeof(ago));
        time_t secs = (time_t)(r->removed_at_ms / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        char at[40];
        strftime(at, sizeof(at), "%Y-%m-%d %H:%M:%S UTC", &tm);
        if (r->session_id[0] != '\0')
                snprintf(buf, len,
                         "sandbox %s (session %s) was removed at %s, %s ago: %s; its files are gone (a call "
                         "with session_id %s makes a new sandbox)",
                         r->sandbox_id, r->session_id, at, ago, r->reason, r->session_id);
        else
                snprintf(buf, len, "sandbox %s was removed at %s, %s ago: %s; its files are gone",
                         r->sandbox_id, at, ago, r->reason);
}

json_t *sandbox_removal_to_json(const struct sandbox_removal *r)
{
        char at[40];
        format_timestamp(r->removed_at_ms, at, sizeof(at));
        return json_pack("{s:s, s:s, s:s?, s:s, s:s, s:I, s:I}", "sandbox_id", r->sandbox_id, "state",
                         "removed", "session_id", r->session_id[0] ? r->session_id : NULL, "removed_at", at,
                         "reason", r->reason, "owner", (json_int_t)r->owner, "removed_seconds_ago",
                         (json_int_t)((now_monotonic_ms() - r->when_mono) / 1000));
}

json_t *sandbox_removals_json(uid_t uid)
{
        long long now = now_monotonic_ms();
        const struct sandbox_removal *seen[REMOVALS_MAX];
        size_t n = 0;
        for (size_t i = 0; i < REMOVALS_MAX; i++)
                if (removal_live(&removals[i], now) && (uid == 0 || removals[i].owner == uid))
                        seen[n++] = &removals[i];
        json_t *list = json_array();
        /* Newest first: a selection, n is at most REMOVALS_MAX. */
        for (size_t k = 0; k < n; k++) {
                size_t newest = k;
                for (size_t j = k + 1; j < n; j++)
                        if (seen[j]->seq > seen[newest]->seq)
                                newest = j;
                const struct sandbox_removal *t = seen[k];
                seen[k] = seen[newest];
                seen[newest] = t;
                json_array_append_new(list, sandbox_removal_to_json(seen[k]));
        }
        return list;
}

void sandbox_removal_note_recreated(json_t *reply, const struct sandbox_removal *r)
{
        if (reply == NULL || r == NULL)
                return;
        char message[512];
        sandbox_removal_message(r, message, sizeof(message));
        json_t *previous = sandbox_removal_to_json(r);
        json_object_set_new(previous, "message", json_string(message));
        json_object_set_new(reply, "recreated", json_true());
        json_object_set_new(reply, "reason", json_string(r->reason));
        json_object_set_new(reply, "previous", previous);
}
