/* SPDX-License-Identifier: Apache-2.0 */
/* The record of removed sandboxes: a small bounded table, what it tells a
 * call that names a removed sandbox or exec, and its file under the state
 * dir, replaced whole after each change and read back at start. */
#include "removals.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "json_cleanup.h"
#include "json_file.h"
#include "log.h"

#define REMOVALS_FILE "removed-sandboxes.json"
/* A file nsboxd writes is under 1 MiB at the bounds above: one far larger
 * is not ours, and is not read. */
#define REMOVALS_FILE_MAX (4u << 20)

static struct sandbox_removal removals[REMOVALS_MAX];
static unsigned long long removals_recorded;
static struct loop_timer *save_timer;

static bool removal_live(const struct sandbox_removal *r, long long now)
{
        return r->seq != 0 && now - r->when_mono < REMOVAL_KEPT_MS;
}

static void removal_clear(struct sandbox_removal *r)
{
        free(r->exec_ids);
        *r = (struct sandbox_removal){ 0 };
}

static void save_due(struct loop *loop, struct loop_timer *timer, void *data)
{
        save_timer = NULL;
        sandbox_removals_save();
}

/* Saved REMOVALS_SAVE_DELAY_MS after the first change not saved yet: the
 * changes meanwhile ride along, so a burst of removals (nsboxd's stop, a
 * client removing in a loop) is a write or a few, not one each. A write
 * is a new file on the state dir's file system, which costs a remove
 * about 1 ms and up to 10 ms (ext4 without a journal scans the inodes
 * freed lately for a free one); the price is that a crash of nsboxd in
 * that window forgets the last removals. Without a loop (unit tests):
 * never. */
#define REMOVALS_SAVE_DELAY_MS 200

static void save_soon(void)
{
        if (save_timer == NULL && nsboxd.loop != NULL && nsboxd.config.state_dir != NULL)
                save_timer = loop_timer_add_in(nsboxd.loop, REMOVALS_SAVE_DELAY_MS, save_due, NULL);
}

/* A free entry for a removal of `owner`, the oldest one overwritten. */
static struct sandbox_removal *removal_slot(uid_t owner, long long now)
{
        struct sandbox_removal *victim = NULL, *own_oldest = NULL;
        unsigned own = 0;
        for (size_t i = 0; i < REMOVALS_MAX; i++) {
                struct sandbox_removal *r = &removals[i];
                if (!removal_live(r, now))
                        removal_clear(r);
                if (r->seq != 0 && r->owner == owner) {
                        own++;
                        if (own_oldest == NULL || r->seq < own_oldest->seq)
                                own_oldest = r;
                }
                if (victim == NULL || r->seq < victim->seq)
                        victim = r;
        }
        if (own >= REMOVALS_PER_OWNER)
                victim = own_oldest;
        removal_clear(victim);
        victim->seq = ++removals_recorded;
        victim->owner = owner;
        return victim;
}

static struct sandbox_removal *removal_add(const char *id, uid_t owner, const char *session_id,
                                           const char *fmt, va_list ap)
{
        long long now = now_monotonic_ms();
        struct sandbox_removal *r = removal_slot(owner, now);
        r->when_mono = now;
        r->removed_at_ms = now_realtime_ms();
        snprintf(r->sandbox_id, sizeof(r->sandbox_id), "%s", id);
        snprintf(r->session_id, sizeof(r->session_id), "%s", session_id);
        vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
        save_soon();
        return r;
}

struct sandbox_removal *sandbox_removal_record(const struct sandbox *sb, const char *fmt, ...)
{
        if (sb->pooled)
                return NULL;
        va_list ap;
        va_start(ap, fmt);
        struct sandbox_removal *r = removal_add(sb->id, sb->owner, sb->policy.session_id, fmt, ap);
        va_end(ap);
        return r;
}

void sandbox_removal_record_left(const char *id, uid_t owner, const char *session_id, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        removal_add(id, owner, session_id, fmt, ap);
        va_end(ap);
}

void sandbox_removal_add_exec(struct sandbox_removal *r, const char *exec_id)
{
        if (r == NULL || r->n_exec_ids >= REMOVAL_EXECS_MAX || strlen(exec_id) >= sizeof(r->exec_ids[0]))
                return;
        if (r->exec_ids == NULL && (r->exec_ids = calloc(REMOVAL_EXECS_MAX, sizeof(r->exec_ids[0]))) == NULL)
                return;
        snprintf(r->exec_ids[r->n_exec_ids++], sizeof(r->exec_ids[0]), "%s", exec_id);
        save_soon();
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

const struct sandbox_removal *sandbox_removal_of_exec(const char *ref, uid_t uid)
{
        long long now = now_monotonic_ms();
        size_t len = strlen(ref), prefixed = 0;
        const struct sandbox_removal *by_prefix = NULL;
        for (size_t i = 0; i < REMOVALS_MAX; i++) {
                const struct sandbox_removal *r = &removals[i];
                if (!removal_live(r, now) || (uid != 0 && r->owner != uid))
                        continue;
                for (unsigned k = 0; k < r->n_exec_ids; k++) {
                        if (strcmp(r->exec_ids[k], ref) == 0)
                                return r;
                        /* A prefix, as for live execs: the caller's own only. */
                        if (len >= SANDBOX_ID_PREFIX_MIN && r->owner == uid &&
                            strncmp(r->exec_ids[k], ref, len) == 0) {
                                by_prefix = r;
                                prefixed++;
                        }
                }
        }
        return prefixed == 1 ? by_prefix : NULL;
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
        save_soon();
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

/* The live entries `uid` may see (root: all), newest first, into seen;
 * their count. */
static size_t removals_newest_first(uid_t uid, bool everyone, const struct sandbox_removal **seen)
{
        long long now = now_monotonic_ms();
        size_t n = 0;
        for (size_t i = 0; i < REMOVALS_MAX; i++)
                if (removal_live(&removals[i], now) && (everyone || uid == 0 || removals[i].owner == uid))
                        seen[n++] = &removals[i];
        /* A selection: n is at most REMOVALS_MAX. */
        for (size_t k = 0; k < n; k++) {
                size_t newest = k;
                for (size_t j = k + 1; j < n; j++)
                        if (seen[j]->seq > seen[newest]->seq)
                                newest = j;
                const struct sandbox_removal *t = seen[k];
                seen[k] = seen[newest];
                seen[newest] = t;
        }
        return n;
}

json_t *sandbox_removals_json(uid_t uid)
{
        const struct sandbox_removal *seen[REMOVALS_MAX];
        size_t n = removals_newest_first(uid, false, seen);
        json_t *list = json_array();
        for (size_t k = 0; k < n; k++)
                json_array_append_new(list, sandbox_removal_to_json(seen[k]));
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

void sandbox_removal_reply_gone(struct rpc_request *req, const struct sandbox_removal *r, const char *exec_id)
{
        char message[512];
        sandbox_removal_message(r, message, sizeof(message));
        json_t *data = sandbox_removal_to_json(r);
        if (exec_id == NULL) {
                rpc_reply_fail_data(req, "gone", data, "%s", message);
                return;
        }
        json_object_set_new(data, "exec_id", json_string(exec_id));
        rpc_reply_fail_data(req, "gone", data, "exec %s ended with its sandbox: %s", exec_id, message);
}

/* --- the file ------------------------------------------------------------ */

static void removals_path(char *buf, size_t len)
{
        snprintf(buf, len, "%s/%s", nsboxd.config.state_dir, REMOVALS_FILE);
}

void sandbox_removals_save(void)
{
        if (nsboxd.config.state_dir == NULL)
                return;
        if (save_timer != NULL) {
                loop_timer_cancel(nsboxd.loop, save_timer);
                save_timer = NULL;
        }
        const struct sandbox_removal *seen[REMOVALS_MAX];
        size_t n = removals_newest_first(0, true, seen);
        _cleanup_json_ json_t *list = json_array();
        for (size_t k = n; k-- > 0;) { /* oldest first: read back in the order recorded */
                const struct sandbox_removal *r = seen[k];
                json_t *execs = json_array();
                for (unsigned e = 0; e < r->n_exec_ids; e++)
                        json_array_append_new(execs, json_string(r->exec_ids[e]));
                json_array_append_new(list, json_pack("{s:s, s:I, s:s, s:s, s:I, s:b, s:o}", "sandbox_id",
                                                      r->sandbox_id, "owner", (json_int_t)r->owner,
                                                      "session_id", r->session_id, "reason", r->reason,
                                                      "removed_at_ms", (json_int_t)r->removed_at_ms,
                                                      "recreated", r->recreated, "exec_ids", execs));
        }
        _cleanup_json_ json_t *doc = json_pack("{s:i, s:O}", "version", 1, "removals", list);
        char path[4096];
        removals_path(path, sizeof(path));
        _cleanup_error_ nsbox_error_t *err = NULL;
        /* Not synced: it must outlive a crash of nsboxd, which the page
         * cache does; after a crash of the host a torn file is ignored. */
        if (doc == NULL || json_file_replace(path, doc, JSON_COMPACT, false, &err) < 0)
                log_warn("the record of removed sandboxes was not saved: %s",
                         err ? err->message : "out of memory");
}

/* A string of at most max - 1 bytes with no NUL in it, or NULL. */
static const char *bounded_string(json_t *v, size_t max)
{
        if (!json_is_string(v) || json_string_length(v) >= max ||
            strlen(json_string_value(v)) != json_string_length(v))
                return NULL;
        return json_string_value(v);
}

/* Whether s is an id as nsboxd makes them: 36 of [0-9a-f-]. */
static bool plausible_id(const char *s)
{
        if (s == NULL || strlen(s) != 36)
                return false;
        return strspn(s, "0123456789abcdef-") == 36;
}

/* One entry of the file into the table: false when it is not one nsboxd
 * writes (then nothing of it is kept). */
static bool load_entry(json_t *e, long long now_mono, long long now_real)
{
        json_t *owner = json_object_get(e, "owner"), *at = json_object_get(e, "removed_at_ms");
        json_t *recreated = json_object_get(e, "recreated"), *execs = json_object_get(e, "exec_ids");
        const char *id = bounded_string(json_object_get(e, "sandbox_id"), 37);
        const char *session = bounded_string(json_object_get(e, "session_id"),
                                             sizeof(((struct sandbox_removal *)0)->session_id));
        const char *reason = bounded_string(json_object_get(e, "reason"), 4096);
        if (!json_is_object(e) || !plausible_id(id) || session == NULL || reason == NULL ||
            !json_is_integer(owner) || json_integer_value(owner) < 0 ||
            json_integer_value(owner) >= (json_int_t)(uid_t)-1 || !json_is_integer(at) ||
            (recreated != NULL && !json_is_boolean(recreated)) || (execs != NULL && !json_is_array(execs)))
                return false;
        long long age = now_real - (long long)json_integer_value(at);
        if (age >= REMOVAL_KEPT_MS)
                return true; /* aged out while nsboxd was away: dropped, as it would have been */
        if (age < 0)
                age = 0; /* the clock was set back: taken as just now */
        if (sandbox_removal_find(id, 0) != NULL)
                return false;
        struct sandbox_removal *r = removal_slot((uid_t)json_integer_value(owner), now_mono);
        r->when_mono = now_mono - age;
        r->removed_at_ms = now_real - age;
        r->recreated = json_is_true(recreated);
        snprintf(r->sandbox_id, sizeof(r->sandbox_id), "%s", id);
        snprintf(r->session_id, sizeof(r->session_id), "%s", session);
        snprintf(r->reason, sizeof(r->reason), "%s", reason);
        size_t i;
        json_t *x;
        json_array_foreach(execs, i, x)
        {
                const char *exec_id = bounded_string(x, 37);
                if (plausible_id(exec_id))
                        sandbox_removal_add_exec(r, exec_id);
        }
        return true;
}

void sandbox_removals_load(void)
{
        char path[4096];
        removals_path(path, sizeof(path));
        _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                if (errno != ENOENT)
                        log_warn("the record of removed sandboxes %s was ignored: open: %s", path,
                                 strerror(errno));
                return;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > REMOVALS_FILE_MAX) {
                log_warn("the record of removed sandboxes %s was ignored: not a regular file of at most %u "
                         "MiB",
                         path, REMOVALS_FILE_MAX >> 20);
                return;
        }
        json_error_t jerr;
        _cleanup_json_ json_t *doc = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
        json_t *list = json_object_get(doc, "removals");
        if (doc == NULL || !json_is_array(list)) {
                log_warn("the record of removed sandboxes %s was ignored: %s", path,
                         doc == NULL ? jerr.text : "no \"removals\" list");
                return;
        }
        long long now_mono = now_monotonic_ms(), now_real = now_realtime_ms();
        size_t i, bad = 0;
        json_t *e;
        json_array_foreach(list, i, e)
        {
                if (!load_entry(e, now_mono, now_real))
                        bad++;
        }
        if (bad > 0)
                log_warn("the record of removed sandboxes %s: %zu of its %zu entries were ignored (not as "
                         "nsboxd writes them)",
                         path, bad, json_array_size(list));
        /* What was dropped (aged out, past the bounds) is dropped from the file too. */
        save_soon();
}
