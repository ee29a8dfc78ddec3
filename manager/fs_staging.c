/* SPDX-License-Identifier: Apache-2.0 */
/* The temporary files of writers in pieces, kept per connection and removed
 * at its end (fs_staging.h). The removal waits for the last request of the
 * connection (a piece still being written would make the file again after
 * it) and runs in a worker, as fs.remove's: a tree (nsbox cp's) can be any
 * size, and every path is resolved inside the sandbox's root, a final
 * symlink removed itself, never followed. Each sandbox's journal, in its
 * state dir, says which are kept, so that the nsboxd that adopts it after
 * a kill -9 removes those its predecessor still kept. */
#include "fs_staging.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "fs_ops.h"
#include "fs_worker.h"
#include "io.h"
#include "json_cleanup.h"
#include "json_file.h"
#include "jsonrpc.h"
#include "log.h"
#include "relpath.h"
#include "sandbox.h"

/* Another try when every worker is busy. */
#define FS_STAGING_RETRY_MS 200

/* In the sandbox's dir: a line `["+",uid,tree,path]` when a connection
 * starts keeping a file, `["-",path]` when it stops (renamed, removed, or
 * removed at its end); emptied whenever none is kept, rewritten with only
 * those kept when it has more than twice their number of lines and
 * FS_STAGING_JOURNAL_SLACK more. Not synced: it only has to outlive a
 * kill of nsboxd, which the page cache does; the sandbox does not outlive
 * the machine. */
#define FS_STAGING_JOURNAL       "staging.journal"
#define FS_STAGING_JOURNAL_SLACK 256
/* What a journal's replay reads at most: far more than one so rewritten holds. */
#define FS_STAGING_JOURNAL_MAX (64u << 20)

struct fs_staging_file {
        struct fs_staging_file *next;
        char sandbox_id[sizeof(((struct sandbox *)NULL)->id)];
        uid_t uid; /* the writer's, to find the sandbox as it did */
        bool tree;
        char path[]; /* fs_path.shown: "/" and the normalized path */
};

/* A connection's files, in its rpc_conn_state. */
struct fs_staging_conn {
        struct rpc_conn_state base;
        struct fs_staging_file *files;
        size_t n;
};

static const char fs_staging_key;

/* Files of ended connections not yet handed to a worker, and the timer that will. */
static struct fs_staging_file *fs_staging_due;
static struct loop_timer *fs_staging_timer;

/* One sandbox's files, removed by a worker. */
struct fs_staging_batch {
        struct fs_ctx ctx;
        char sandbox_id[sizeof(((struct sandbox *)NULL)->id)];
        struct fs_staging_file *files;
};

static void fs_staging_free_list(struct fs_staging_file *f)
{
        while (f != NULL) {
                struct fs_staging_file *next = f->next;
                free(f);
                f = next;
        }
}

/* ---- the journal ---- */

static void fs_staging_journal_path(const struct sandbox *sb, char *path, size_t size)
{
        snprintf(path, size, "%s/%s", sb->dir, FS_STAGING_JOURNAL);
}

/* The files a journal keeps: path -> [uid, tree, how many keep it]. A line that is no journal's (torn by a
 * kill) is skipped. */
static json_t *fs_staging_journal_read(const char *path)
{
        json_t *kept = json_object();
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        FILE *f = fd >= 0 && kept != NULL ? fdopen(fd, "r") : NULL;
        if (f == NULL)
                return kept;
        steal_fd(&fd);
        _cleanup_free_ char *line = NULL;
        size_t cap = 0, total = 0;
        ssize_t n;
        while (total < FS_STAGING_JOURNAL_MAX && (n = getline(&line, &cap, f)) > 0) {
                total += (size_t)n;
                _cleanup_json_ json_t *entry = json_loadb(line, (size_t)n, 0, NULL);
                const char *op = json_string_value(json_array_get(entry, 0));
                json_t *at = json_array_get(entry, json_array_size(entry) - 1);
                const char *file = json_string_value(at);
                /* Only ever a temporary name's file is removed. */
                if (op == NULL || file == NULL || file[0] != '/' || !staging_name_is(strrchr(file, '/') + 1))
                        continue;
                json_t *was = json_object_get(kept, file);
                json_int_t count = json_integer_value(json_array_get(was, 2));
                if (strcmp(op, "+") == 0 && json_array_size(entry) == 4 &&
                    json_is_integer(json_array_get(entry, 1)) && json_is_boolean(json_array_get(entry, 2)))
                        json_object_set_new(kept, file,
                                            json_pack("[O, O, I]", json_array_get(entry, 1),
                                                      json_array_get(entry, 2), count + 1));
                else if (strcmp(op, "-") == 0 && was != NULL && count > 1)
                        json_array_set_new(was, 2, json_integer(count - 1));
                else if (strcmp(op, "-") == 0 && was != NULL)
                        json_object_del(kept, file);
        }
        fclose(f);
        return kept;
}

static json_t *fs_staging_journal_line(const char *op, uid_t uid, bool tree, const char *path)
{
        if (strcmp(op, "+") == 0)
                return json_pack("[s, I, b, s]", op, (json_int_t)uid, tree, path);
        return json_pack("[s, s]", op, path);
}

/* Append a line to fd, in one write: a kill leaves the line whole or
 * missing (or torn last, which a replay skips). */
static int fs_staging_journal_put(int fd, json_t *line)
{
        size_t len;
        _cleanup_free_ char *text = line ? jsonrpc_serialize(line, &len) : NULL;
        return text ? io_write_all(fd, text, len) : -ENOMEM;
}

/* Rewrite sb's journal with only the files `kept` (as fs_staging_journal_read
 * gives them), replacing it whole. */
static void fs_staging_journal_rewrite(struct sandbox *sb, json_t *kept)
{
        char path[4096];
        fs_staging_journal_path(sb, path, sizeof(path));
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        FILE *out = kept != NULL ? open_memstream(&text, &len) : NULL;
        if (out == NULL)
                return;
        bool whole = true;
        unsigned written = 0;
        const char *file;
        json_t *k;
        json_object_foreach(kept, file, k)
        {
                for (json_int_t i = 0; whole && i < json_integer_value(json_array_get(k, 2));
                     i++, written++) {
                        _cleanup_json_ json_t *entry =
                            fs_staging_journal_line("+", (uid_t)json_integer_value(json_array_get(k, 0)),
                                                    json_is_true(json_array_get(k, 1)), file);
                        size_t n;
                        _cleanup_free_ char *line = entry ? jsonrpc_serialize(entry, &n) : NULL;
                        whole = line != NULL && fwrite(line, 1, n, out) == n;
                }
        }
        whole = fclose(out) == 0 && whole;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!whole || file_replace(path, text, len, false, &err) < 0) {
                log_warn("sandbox %s: rewrite %s: %s", sb->id, path, err ? err->message : strerror(ENOMEM));
                return;
        }
        sb->staging_lines = written;
}

static void fs_staging_journal_compact(struct sandbox *sb)
{
        char path[4096];
        fs_staging_journal_path(sb, path, sizeof(path));
        _cleanup_json_ json_t *kept = fs_staging_journal_read(path);
        fs_staging_journal_rewrite(sb, kept);
}

/* A line in the journal of sandbox_id (gone: its journal went with it). A
 * sandbox no next nsboxd adopts (no live restore) keeps none. */
static void fs_staging_journal_note(const char *sandbox_id, const char *op, uid_t uid, bool tree,
                                    const char *path)
{
        struct sandbox *sb = sandbox_lookup(sandbox_id, 0);
        if (sb == NULL || sb->dir == NULL)
                return;
        if (op[0] == '+' && (!nsboxd.config.live_restore || sb->lease_fd < 0))
                return;
        if (op[0] == '-' && sb->staging_open == 0)
                return;
        char journal[4096];
        fs_staging_journal_path(sb, journal, sizeof(journal));
        if (op[0] == '-' && --sb->staging_open == 0) {
                /* None kept: nothing in it says anything. */
                if (truncate(journal, 0) < 0 && errno != ENOENT)
                        log_warn("sandbox %s: empty %s: %s", sb->id, journal, strerror(errno));
                sb->staging_lines = 0;
                return;
        }
        _cleanup_close_ int fd =
            open(journal, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
        _cleanup_json_ json_t *line = fs_staging_journal_line(op, uid, tree, path);
        int r = fd < 0 ? -errno : fs_staging_journal_put(fd, line);
        if (r < 0) {
                log_warn("sandbox %s: %s: %s (a temporary file a kill of nsboxd leaves may stay)", sb->id,
                         journal, strerror(-r));
                return;
        }
        if (op[0] == '+')
                sb->staging_open++;
        if (++sb->staging_lines > 2 * sb->staging_open + FS_STAGING_JOURNAL_SLACK)
                fs_staging_journal_compact(sb);
}

static void fs_staging_forgot(const struct fs_staging_file *f)
{
        fs_staging_journal_note(f->sandbox_id, "-", f->uid, f->tree, f->path);
}

static void fs_staging_free_forgotten(struct fs_staging_file *f)
{
        for (struct fs_staging_file *at = f; at != NULL; at = at->next)
                fs_staging_forgot(at);
        fs_staging_free_list(f);
}

bool fs_staging_is(const struct sandbox *sb, const struct fs_path *p)
{
        return sb != NULL && p->name != NULL && staging_name_is(p->name);
}

static struct fs_staging_conn *fs_staging_of(const struct rpc_request *req)
{
        return (struct fs_staging_conn *)rpc_conn_state_get(req, &fs_staging_key);
}

static struct fs_staging_file **fs_staging_find(struct fs_staging_conn *conn, const char *sandbox_id,
                                                const char *path)
{
        for (struct fs_staging_file **at = &conn->files; *at != NULL; at = &(*at)->next)
                if (strcmp((*at)->sandbox_id, sandbox_id) == 0 && strcmp((*at)->path, path) == 0)
                        return at;
        return NULL;
}

bool fs_staging_room(struct rpc_request *req, const struct fs_path *p)
{
        struct fs_staging_conn *conn = fs_staging_of(req);
        if (conn == NULL || conn->n < FS_STAGING_MAX)
                return true;
        for (struct fs_staging_file *f = conn->files; f != NULL; f = f->next)
                if (strcmp(f->path, p->shown) == 0)
                        return true;
        rpc_reply_fail(
            req, "limit_reached",
            "%s: this connection holds %d temporary files (.nsbox-upload-... and the like) not yet "
            "renamed or removed; rename or remove one first",
            p->shown, FS_STAGING_MAX);
        return false;
}

static void fs_staging_run(struct loop *loop, struct loop_timer *timer, void *data);

/* Put a list of files (not empty) back at the head of the due ones. */
static void fs_staging_requeue(struct fs_staging_file *files)
{
        struct fs_staging_file *last = files;
        while (last->next != NULL)
                last = last->next;
        last->next = fs_staging_due;
        fs_staging_due = files;
}

static void fs_staging_arm(long long delay_ms)
{
        if (fs_staging_timer == NULL)
                fs_staging_timer = loop_timer_add_in(nsboxd.loop, delay_ms, fs_staging_run, NULL);
}

static void fs_staging_conn_end(struct rpc_conn_state *state)
{
        struct fs_staging_conn *conn = (struct fs_staging_conn *)state;
        if (conn->files != NULL) {
                fs_staging_requeue(conn->files);
                /* From the loop, not from inside the answer that ended the connection. */
                fs_staging_arm(0);
        }
        free(conn);
}

void fs_staging_wrote(struct rpc_request *req, const char *sandbox_id, const struct fs_path *p, bool tree)
{
        struct fs_staging_conn *conn = fs_staging_of(req);
        if (conn != NULL && fs_staging_find(conn, sandbox_id, p->shown) != NULL)
                return;
        size_t len = strlen(p->shown);
        struct fs_staging_file *f = calloc(1, sizeof(*f) + len + 1);
        if (conn == NULL && (conn = calloc(1, sizeof(*conn))) != NULL) {
                conn->base.key = &fs_staging_key;
                conn->base.end = fs_staging_conn_end;
                rpc_conn_state_add(req, &conn->base);
        }
        if (f == NULL || conn == NULL) {
                free(f);
                log_warn("out of memory: %s will not be removed if its writer goes", p->shown);
                return;
        }
        snprintf(f->sandbox_id, sizeof(f->sandbox_id), "%s", sandbox_id);
        f->uid = req->uid;
        f->tree = tree;
        memcpy(f->path, p->shown, len + 1);
        f->next = conn->files;
        conn->files = f;
        conn->n++;
        fs_staging_journal_note(sandbox_id, "+", f->uid, tree, f->path);
}

/* Whether path is at or under `top`. */
static bool fs_staging_under(const char *path, const char *top)
{
        size_t n = strlen(top);
        return strncmp(path, top, n) == 0 && (path[n] == '\0' || path[n] == '/' || (n == 1 && top[0] == '/'));
}

void fs_staging_moved(struct rpc_request *req, const char *sandbox_id, const struct fs_path *from,
                      const struct fs_path *to)
{
        struct fs_staging_conn *conn = fs_staging_of(req);
        if (conn == NULL)
                return;
        bool kept = false, tree = false;
        for (struct fs_staging_file **at = &conn->files; *at != NULL;) {
                struct fs_staging_file *f = *at;
                if (strcmp(f->sandbox_id, sandbox_id) != 0 || !fs_staging_under(f->path, from->shown)) {
                        at = &f->next;
                        continue;
                }
                if (strcmp(f->path, from->shown) == 0) {
                        kept = true;
                        tree = f->tree;
                }
                *at = f->next;
                fs_staging_forgot(f);
                free(f);
                conn->n--;
        }
        /* A temporary file moved to another temporary name is still one. */
        if (kept && to != NULL && to->name != NULL && staging_name_is(to->name))
                fs_staging_wrote(req, sandbox_id, to, tree);
}

/* ---- removal, at a connection's end ---- */

/* In the worker: each file, or tree, that is still there. */
static int fs_staging_remove_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_staging_batch *batch = data;
        fs_tree_raise_fd_limit();
        json_int_t removed = 0;
        json_t *failed = json_array();
        for (struct fs_staging_file *f = batch->files; f != NULL; f = f->next) {
                _cleanup_error_ nsbox_error_t *why = NULL;
                struct fs_path p;
                int r = fs_path_parse(f->path, strlen(f->path), NULL, &p, &why); /* absolute */
                if (r == 0)
                        r = fs_remove_at(&batch->ctx, &p, f->tree, &why);
                if (r == 0)
                        removed++;
                else if (r != -ENOENT)
                        json_array_append_new(failed, json_string(why ? why->message : f->path));
        }
        out->result = json_pack("{s:I, s:o}", "removed", removed, "failed", failed);
        return out->result ? 0 : nsbox_error(err, ENOMEM, "remove temporary files");
}

static void fs_staging_remove_done(void *data, int r, json_t *result, const char *message)
{
        struct fs_staging_batch *batch = data;
        if (r < 0) {
                log_warn("sandbox %s: the temporary files of a closed connection: %s", batch->sandbox_id,
                         message);
        } else {
                json_int_t removed = json_integer_value(json_object_get(result, "removed"));
                if (removed > 0)
                        log_info("sandbox %s: removed %lld temporary file(s) a closed connection left "
                                 "(its writer went mid-way)",
                                 batch->sandbox_id, (long long)removed);
                size_t i;
                json_t *why;
                json_array_foreach(json_object_get(result, "failed"), i, why)
                    log_warn("sandbox %s: a temporary file a closed connection left stays: %s",
                             batch->sandbox_id, json_string_value(why));
        }
        json_decref(result);
        fs_staging_free_forgotten(batch->files);
        free(batch);
}

/* Take the due files of the first one's sandbox and writer out of the list. */
static struct fs_staging_file *fs_staging_take_batch(void)
{
        struct fs_staging_file *first = fs_staging_due, *taken = NULL;
        for (struct fs_staging_file **at = &fs_staging_due; *at != NULL;) {
                struct fs_staging_file *f = *at;
                if (strcmp(f->sandbox_id, first->sandbox_id) != 0 || f->uid != first->uid) {
                        at = &f->next;
                        continue;
                }
                *at = f->next;
                f->next = taken;
                taken = f;
        }
        return taken;
}

static void fs_staging_run(struct loop *loop, struct loop_timer *timer, void *data)
{
        fs_staging_timer = NULL;
        while (fs_staging_due != NULL) {
                struct fs_staging_file *files = fs_staging_take_batch();
                struct sandbox *sb = sandbox_lookup(files->sandbox_id, files->uid);
                struct fs_staging_batch *batch = sb ? calloc(1, sizeof(*batch)) : NULL;
                _cleanup_error_ nsbox_error_t *err = NULL;
                if (batch == NULL || fs_ctx_open(sb, &batch->ctx, &err) < 0) {
                        /* The sandbox went (and its files with it), or is going. */
                        fs_staging_free_forgotten(files);
                        free(batch);
                        continue;
                }
                snprintf(batch->sandbox_id, sizeof(batch->sandbox_id), "%s", sb->id);
                batch->files = files;
                int r = fs_ctx_fork(&batch->ctx, sb, fs_staging_remove_run, fs_staging_remove_done, batch,
                                    NULL, &err);
                if (r == -EBUSY) {
                        /* Every worker is taken: again a little later. */
                        fs_staging_requeue(files);
                        free(batch);
                        fs_staging_arm(FS_STAGING_RETRY_MS);
                        return;
                }
                if (r < 0) {
                        log_warn("sandbox %s: the temporary files of a closed connection stay: %s", sb->id,
                                 err ? err->message : strerror(-r));
                        fs_staging_free_forgotten(files);
                        free(batch);
                }
        }
}

/* ---- after a restart ---- */

void fs_staging_restore(struct sandbox *sb)
{
        char journal[4096];
        if (sb->dir == NULL)
                return;
        fs_staging_journal_path(sb, journal, sizeof(journal));
        _cleanup_json_ json_t *kept = fs_staging_journal_read(journal);
        struct fs_staging_file *files = NULL;
        unsigned n = 0;
        const char *file;
        json_t *k;
        json_object_foreach(kept, file, k)
        {
                size_t len = strlen(file);
                struct fs_staging_file *f = calloc(1, sizeof(*f) + len + 1);
                if (f == NULL)
                        break;
                snprintf(f->sandbox_id, sizeof(f->sandbox_id), "%s", sb->id);
                f->uid = (uid_t)json_integer_value(json_array_get(k, 0));
                f->tree = json_is_true(json_array_get(k, 1));
                memcpy(f->path, file, len + 1);
                json_array_set_new(k, 2, json_integer(1)); /* one removal forgets it */
                f->next = files;
                files = f;
                n++;
        }
        if (files == NULL) {
                if (truncate(journal, 0) < 0 && errno != ENOENT)
                        log_warn("sandbox %s: empty %s: %s", sb->id, journal, strerror(errno));
                return;
        }
        /* Each is forgotten once, as its removal ends: the journal keeps it
         * until then, for a next nsboxd should this one be killed too. */
        fs_staging_journal_rewrite(sb, kept);
        sb->staging_open = n;
        log_info("sandbox %s: %u temporary file(s) its previous nsboxd kept are removed", sb->id, n);
        fs_staging_requeue(files);
        fs_staging_arm(0);
}
