/* SPDX-License-Identifier: Apache-2.0 */
/* The temporary files of writers in pieces, kept per connection and removed
 * at its end (fs_staging.h). The removal waits for the last request of the
 * connection (a piece still being written would make the file again after
 * it) and runs in a worker, as fs.remove's: a tree (nsbox cp's) can be any
 * size, and every path is resolved inside the sandbox's root, a final
 * symlink removed itself, never followed. */
#include "fs_staging.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "daemon.h"
#include "fs_ops.h"
#include "fs_worker.h"
#include "log.h"
#include "relpath.h"
#include "sandbox.h"

/* Another try when every worker is busy. */
#define FS_STAGING_RETRY_MS 200

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
        fs_staging_free_list(batch->files);
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
                        fs_staging_free_list(files);
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
                        fs_staging_free_list(files);
                        free(batch);
                }
        }
}
