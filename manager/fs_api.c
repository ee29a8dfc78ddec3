/* SPDX-License-Identifier: Apache-2.0 */
/* The file API of nsboxd, the fs.* JSON-RPC methods: their params, their
 * replies and error kinds, and which calls run in a forked worker
 * (fs_worker.c) rather than on the loop. The file work itself, under the
 * sandbox's pinned root, is fs_ops.c's. */
#include "fs_api.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "fs_ops.h"
#include "fs_path.h"
#include "fs_staging.h"
#include "fs_worker.h"
#include "params.h"
#include "sandbox.h"
#include "textenc.h"
#include "volumes.h"

#define FS_READ_DEFAULT_BYTES (10u << 20)
#define FS_READ_MAX_BYTES     (64u << 20)
/* fs.list answers at most max_entries (default 10000, at most 100000)
 * entries, sorted by name, with truncated and total_entries saying what
 * was left out; a directory is read to at most FS_LIST_SCAN_MAX (fs_ops.c)
 * names. */
#define FS_LIST_DEFAULT_ENTRIES 10000
#define FS_LIST_MAX_ENTRIES     100000

/* ---- JSON ---- */

static const char *fs_type_name(mode_t mode)
{
        if (S_ISREG(mode))
                return "file";
        if (S_ISDIR(mode))
                return "dir";
        if (S_ISLNK(mode))
                return "symlink";
        return "other";
}

static json_t *fs_json_string(const char *text, size_t len)
{
        size_t valid_len;
        _cleanup_free_ char *valid = utf8_make_valid(text, len, &valid_len);
        return valid ? json_stringn(valid, valid_len) : json_string("");
}

static json_t *fs_json_time(const struct timespec *ts)
{
        char buf[64];
        format_timestamp((long long)ts->tv_sec * 1000 + ts->tv_nsec / 1000000, buf, sizeof(buf));
        return json_string(buf);
}

/* Ids as the sandbox sees them: 65534 (nobody) for what it cannot map. */
static json_int_t fs_sandbox_id(const struct fs_ctx *ctx, unsigned host_id)
{
        if (host_id >= ctx->uid_base && host_id - ctx->uid_base < 65536)
                return host_id - ctx->uid_base;
        return 65534;
}

static json_t *fs_stat_json(const struct fs_ctx *ctx, const char *name, size_t name_len,
                            const struct stat *st)
{
        return json_pack("{s:o, s:s, s:I, s:I, s:o, s:o, s:o, s:I, s:I}", "name",
                         fs_json_string(name, name_len), "type", fs_type_name(st->st_mode), "size",
                         (json_int_t)st->st_size, "mode", (json_int_t)(st->st_mode & 07777), "mtime",
                         fs_json_time(&st->st_mtim), "atime", fs_json_time(&st->st_atim), "ctime",
                         fs_json_time(&st->st_ctim), "uid", fs_sandbox_id(ctx, st->st_uid), "gid",
                         fs_sandbox_id(ctx, st->st_gid));
}

/* ---- request plumbing ---- */

static const char *fs_error_kind(int errnum)
{
        switch (errnum) {
        case ENOENT:
                return "not_found";
        case EACCES:
        case EPERM:
        case EROFS:
                return "permission_denied";
        case ENOSPC:
        case EDQUOT:
        case EFBIG:
                return "limit_reached";
        case ESRCH:
        case ENOTSUP: /* volume.fs.* of an nsboxd in a user namespace */
                return "unavailable";
        case EAGAIN:
                return "busy";
        case EXDEV:
        case ELOOP:
        case ENOTDIR:
        case EISDIR:
        case EEXIST:
        case ENOTEMPTY:
        case ENAMETOOLONG:
        case EINVAL:
        case EBUSY:
        case ENXIO:
                return "invalid_params";
        default:
                return "internal";
        }
}

void fs_reply_failure(struct rpc_request *req, int r, nsbox_error_t *err)
{
        rpc_reply_fail_errno(req, fs_error_kind(-r), -r, "%s",
                             err && err->message ? err->message : strerror(-r));
}

/* encoding: "utf-8" (default) or "base64". */
static bool fs_get_base64(struct rpc_request *req, bool *base64)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (params_get_encoding(req->msg.params, base64, &err) == 0)
                return true;
        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
        return false;
}

/* The fields a method knows: a sandbox's fs.* name it by sandbox_id, a
 * volume's volume.fs.* (sb NULL) by volume and, for root, owner. */
static bool fs_check_fields(struct rpc_request *req, struct sandbox *sb, const char *const *known)
{
        const char *fields[16];
        size_t n = 0;
        for (; *known != NULL && n + 3 < ARRAY_SIZE(fields); known++)
                if (sb != NULL || strcmp(*known, "sandbox_id") != 0)
                        fields[n++] = *known;
        if (sb == NULL) {
                fields[n++] = "volume";
                fields[n++] = "owner";
        }
        fields[n] = NULL;
        return rpc_check_fields(req, fields);
}

/* Pin the root the call works in: the sandbox's, or (sb NULL) the volume
 * params.volume names among the caller's; root may name another owner's
 * with params.owner. Another user's volume is not found, as a missing one. */
static int fs_open_target(struct rpc_request *req, struct sandbox *sb, struct fs_ctx *ctx,
                          nsbox_error_t **err)
{
        if (sb != NULL)
                return fs_ctx_open(sb, ctx, err);
        ctx->root = -1;
        json_t *volume = json_object_get(req->msg.params, "volume");
        if (!json_is_string(volume) || strlen(json_string_value(volume)) != json_string_length(volume))
                return nsbox_refuse(err, EINVAL, "volume must be the name of one of your volumes");
        uid_t owner = req->uid;
        json_t *o = json_object_get(req->msg.params, "owner");
        if (o != NULL && !json_is_null(o)) {
                if (!json_is_integer(o) || json_integer_value(o) < 0 ||
                    json_integer_value(o) > UINT32_MAX - 1)
                        return nsbox_refuse(err, EINVAL, "owner must be a uid");
                if (req->uid != 0 && (uid_t)json_integer_value(o) != req->uid)
                        return nsbox_refuse(err, ENOENT, "no volume \"%.64s\"", json_string_value(volume));
                owner = (uid_t)json_integer_value(o);
        }
        return volume_fs_open(owner, json_string_value(volume), ctx, err);
}

/* Parse params[key] (default: `fallback`, or required when NULL). Replies
 * and returns false on failure. A volume's relative path is from its root. */
static bool fs_get_path(struct rpc_request *req, struct sandbox *sb, const char *key, const char *fallback,
                        struct fs_path *path)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *v = json_object_get(req->msg.params, key);
        const char *text = fallback;
        size_t len = fallback ? strlen(fallback) : 0;
        if (v != NULL && !json_is_null(v)) {
                if (!json_is_string(v)) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s must be a string",
                                        key);
                        return false;
                }
                text = json_string_value(v);
                len = json_string_length(v);
        } else if (text == NULL) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s is required", key);
                return false;
        }
        int r = fs_path_parse(text, len, sb != NULL ? FS_PATH_WORKSPACE : NULL, path, &err);
        if (r < 0) {
                /* Methods with one path keep the message they always had. */
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s%s%s",
                                strcmp(key, "path") == 0 ? "" : key, strcmp(key, "path") == 0 ? "" : ": ",
                                err->message);
                return false;
        }
        return true;
}

/* Parse params.path (default: `fallback`, or required when NULL) and pin the
 * sandbox's root. Replies and returns false on failure. */
static bool fs_begin(struct rpc_request *req, struct sandbox *sb, const char *fallback, struct fs_path *path,
                     struct fs_ctx *ctx)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!fs_get_path(req, sb, "path", fallback, path))
                return false;
        int r = fs_open_target(req, sb, ctx, &err);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return false;
        }
        return true;
}

/* ---- work done by a forked worker (fs_worker.c) ---- */

/* One fs.* request handed to a worker. The child runs on its own copy of
 * this (and of the request's params, so content is not copied); nsboxd
 * keeps the request until the worker answers. */
struct fs_job {
        struct rpc_request *req;
        struct fs_ctx ctx;
        struct fs_path path;
        size_t max_entries;           /* list */
        size_t max_bytes;             /* read */
        uint64_t offset;              /* read */
        bool base64;                  /* read, write */
        const char *content;          /* write: as sent, decoded in the worker */
        size_t content_len;           /* write */
        struct fs_write_options opts; /* write */
        /* The sandbox's id when the connection's temporary files
         * (fs_staging.h) hear of the job: a write of one (staging_write), a
         * remove of anything; "" for a volume's job or another write. */
        char staging_id[sizeof(((struct sandbox *)NULL)->id)];
        bool staging_write;
};

static void fs_job_done(void *data, int r, json_t *result, const char *message)
{
        struct fs_job *job = data;
        /* Before the answer, which may end the connection (fs_staging.c). */
        if (r == 0 && job->staging_id[0] != '\0' && job->staging_write)
                fs_staging_wrote(job->req, job->staging_id, &job->path, false);
        else if (r == 0 && job->staging_id[0] != '\0')
                fs_staging_moved(job->req, job->staging_id, &job->path, NULL);
        if (r == -FS_JOB_INVALID_CONTENT)
                rpc_reply_error(job->req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", message);
        else if (r < 0)
                rpc_reply_fail_errno(job->req, fs_error_kind(-r), -r, "%s", message);
        else
                rpc_reply_result(job->req, result);
        free(job);
}

static void fs_job_client_gone(struct rpc_request *req, void *worker)
{
        fs_worker_cancel(worker);
}

static int fs_list_run(void *data, struct fs_worker_output *out, nsbox_error_t **err);
static int fs_read_run(void *data, struct fs_worker_output *out, nsbox_error_t **err);

/* Start `run` in a worker on a job whose ctx is open; the job is the
 * worker's from here on (answered and freed by fs_job_done). */
static void fs_job_start(struct fs_job *job, struct sandbox *sb, fs_worker_run_fn run)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_worker *worker;
        int r = fs_ctx_fork(&job->ctx, sb, run, fs_job_done, job, &worker, &err);
        if (r < 0) {
                rpc_reply_fail(job->req, "busy", "%s: %s", job->path.shown,
                               err ? err->message : strerror(-r));
                free(job);
                return;
        }
        /* Nobody will read a listing or a file whose client has gone: stop
         * the worker. Writes and removes run to their end. */
        if (run == fs_list_run || run == fs_read_run)
                rpc_request_on_disconnect(job->req, fs_job_client_gone, worker);
}

static struct fs_job *fs_job_new(struct rpc_request *req, const struct fs_path *path,
                                 const struct fs_ctx *ctx)
{
        struct fs_job *job = calloc(1, sizeof(*job));
        if (job == NULL) {
                struct fs_ctx copy = *ctx;
                fs_ctx_close(&copy);
                rpc_reply_fail(req, "internal", "out of memory");
                return NULL;
        }
        job->req = req;
        job->path = *path;
        job->ctx = *ctx;
        return job;
}

/* ---- list ---- */

/* All names of a directory (up to FS_LIST_SCAN_MAX), sorted; the first
 * max_entries of them described. Sorting the whole directory makes a
 * truncated listing the same prefix each time, not a random hash order. */
static int fs_list_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_job *job = data;
        const struct fs_path *p = &job->path;
        _cleanup_close_ int fd = -1;
        char **names;
        size_t n;
        bool scan_cut;
        int r = fs_list_names(&job->ctx, p, &fd, &names, &n, &scan_cut, err);
        if (r < 0)
                return r;
        json_t *list = json_array();
        for (size_t i = 0; i < n && json_array_size(list) < job->max_entries; i++) {
                struct stat st;
                /* lstat semantics: a symlink is listed, never followed. */
                if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* removed meanwhile */
                json_array_append_new(list, fs_stat_json(&job->ctx, names[i], strlen(names[i]), &st));
        }
        out->result =
            json_pack("{s:s, s:b, s:I, s:I}", "path", p->shown, "truncated", scan_cut || n > job->max_entries,
                      "total_entries", (json_int_t)n, "max_entries", (json_int_t)job->max_entries);
        out->parts_key = "entries";
        out->parts = list;
        return out->result ? 0 : nsbox_error(err, ENOMEM, "list %s", p->shown);
}

void fs_method_list(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "max_entries", NULL };
        if (!fs_check_fields(req, sb, known))
                return;
        size_t max_entries = FS_LIST_DEFAULT_ENTRIES;
        json_t *v = json_object_get(req->msg.params, "max_entries");
        if (v != NULL && !json_is_null(v)) {
                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    json_integer_value(v) > FS_LIST_MAX_ENTRIES) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "max_entries must be an integer from 0 to %d", FS_LIST_MAX_ENTRIES);
                        return;
                }
                max_entries = (size_t)json_integer_value(v);
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, ".", &path, &ctx))
                return;
        /* A directory can hold millions of entries: never read on the loop. */
        struct fs_job *job = fs_job_new(req, &path, &ctx);
        if (job == NULL)
                return;
        job->max_entries = max_entries;
        fs_job_start(job, sb, fs_list_run);
}

/* ---- read ---- */

static json_t *fs_read_result_json(const struct fs_read_result *res, bool base64)
{
        return json_pack("{s:s, s:I, s:b}", "encoding", base64 ? "base64" : "utf-8", "size",
                         (json_int_t)res->size, "truncated", res->truncated);
}

static int fs_read_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_job *job = data;
        struct fs_read_result res = { 0 };
        int r = fs_read_at(&job->ctx, &job->path, job->offset, job->max_bytes, &res, err);
        if (r < 0)
                return r;
        size_t out_len;
        char *text = job->base64 ? base64_encode(res.data, res.len, &out_len)
                                 : utf8_make_valid(res.data, res.len, &out_len);
        if (text == NULL)
                return nsbox_error(err, ENOMEM, "encode %s", job->path.shown);
        out->result = fs_read_result_json(&res, job->base64);
        out->raw_key = "content";
        out->raw = text;
        out->raw_len = out_len;
        return 0;
}

void fs_method_read(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "encoding", "max_bytes", "offset", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool base64;
        if (!fs_check_fields(req, sb, known) || !fs_get_base64(req, &base64))
                return;
        uint64_t offset = 0;
        json_t *o = json_object_get(req->msg.params, "offset");
        if (o != NULL && !json_is_null(o)) {
                if (!json_is_integer(o) || json_integer_value(o) < 0) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "offset must be a non-negative integer");
                        return;
                }
                offset = (uint64_t)json_integer_value(o);
        }
        uint64_t max_bytes = FS_READ_DEFAULT_BYTES;
        _cleanup_error_ nsbox_error_t *size_err = NULL;
        if (params_get_size(req->msg.params, "max_bytes", "max_bytes", NULL, 0, FS_READ_MAX_BYTES, &max_bytes,
                            &size_err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", size_err->message);
                return;
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        if (max_bytes > FS_INLINE_BYTES && fs_read_is_large(&ctx, &path, offset)) {
                struct fs_job *job = fs_job_new(req, &path, &ctx);
                if (job == NULL)
                        return;
                job->max_bytes = max_bytes;
                job->offset = offset;
                job->base64 = base64;
                fs_job_start(job, sb, fs_read_run);
                return;
        }
        struct fs_read_result res = { 0 };
        int r = fs_read_at(&ctx, &path, offset, max_bytes, &res, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        _cleanup_free_ char *data = res.data;
        size_t out_len;
        _cleanup_free_ char *text =
            base64 ? base64_encode(data, res.len, &out_len) : utf8_make_valid(data, res.len, &out_len);
        if (text == NULL) {
                rpc_reply_fail(req, "internal", "out of memory encoding %s", path.shown);
                return;
        }
        json_t *result = fs_read_result_json(&res, base64);
        json_object_set_new(result, "content", json_stringn(text, out_len));
        rpc_reply_result(req, result);
}

/* ---- write ---- */

/* fs_begin for a write, or an fs.mkdir: a temporary file of a writer in
 * pieces is kept for its connection, which has room for it. */
static bool fs_begin_write(struct rpc_request *req, struct sandbox *sb, struct fs_path *path,
                           struct fs_ctx *ctx)
{
        if (!fs_begin(req, sb, NULL, path, ctx))
                return false;
        if (!fs_staging_is(sb, path) || fs_staging_room(req, path))
                return true;
        fs_ctx_close(ctx);
        return false;
}

static int fs_write_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_job *job = data;
        const char *content = job->content;
        size_t len = job->content_len;
        char *decoded = NULL;
        if (job->base64) {
                decoded = base64_decode(content, len, &len);
                if (decoded == NULL)
                        return nsbox_refuse(err, FS_JOB_INVALID_CONTENT, "content is not valid base64");
                content = decoded;
        }
        int r = fs_write_at(&job->ctx, &job->path, content, len, &job->opts, err);
        if (r < 0)
                return r;
        out->result = json_pack("{s:s, s:I}", "path", job->path.shown, "bytes_written", (json_int_t)len);
        return 0;
}

void fs_method_write(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path",   "content", "encoding",
                                             "mode",       "append", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_write_options opts = { .parents = true };
        bool base64;
        if (!fs_check_fields(req, sb, known) || !fs_get_base64(req, &base64) ||
            !rpc_get_bool(req, "append", &opts.append))
                return;
        json_t *content = json_object_get(req->msg.params, "content");
        if (!json_is_string(content)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "content must be a string");
                return;
        }
        json_t *mode = json_object_get(req->msg.params, "mode");
        if (mode != NULL && !json_is_null(mode)) {
                if (!json_is_integer(mode) || json_integer_value(mode) < 0 ||
                    json_integer_value(mode) > 07777) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "mode must be an integer from 0 to 0o7777");
                        return;
                }
                opts.mode = (mode_t)json_integer_value(mode);
                opts.mode_set = true;
        }
        const char *data = json_string_value(content);
        size_t len = json_string_length(content);
        if (len > FS_INLINE_BYTES) {
                /* Decoding and writing tens of MB: in a worker. */
                struct fs_path path;
                struct fs_ctx ctx;
                if (!fs_begin_write(req, sb, &path, &ctx))
                        return;
                struct fs_job *job = fs_job_new(req, &path, &ctx);
                if (job == NULL)
                        return;
                job->content = data;
                job->content_len = len;
                job->base64 = base64;
                job->opts = opts;
                if (fs_staging_is(sb, &path)) {
                        snprintf(job->staging_id, sizeof(job->staging_id), "%s", sb->id);
                        job->staging_write = true;
                }
                fs_job_start(job, sb, fs_write_run);
                return;
        }
        _cleanup_free_ char *decoded = NULL;
        if (base64) {
                decoded = base64_decode(data, len, &len);
                if (decoded == NULL) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "content is not valid base64");
                        return;
                }
                data = decoded;
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin_write(req, sb, &path, &ctx))
                return;
        int r = fs_write_at(&ctx, &path, data, len, &opts, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        if (fs_staging_is(sb, &path))
                fs_staging_wrote(req, sb->id, &path, false);
        rpc_reply_result(req, json_pack("{s:s, s:I}", "path", path.shown, "bytes_written", (json_int_t)len));
}

/* ---- remove ---- */

/* A tree can be any size or depth: its walk has a worker to itself, whose
 * fd limit allows one open directory per level. */
static int fs_remove_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_job *job = data;
        fs_tree_raise_fd_limit();
        int r = fs_remove_at(&job->ctx, &job->path, true, err);
        if (r < 0)
                return r;
        out->result = json_pack("{s:s, s:b}", "path", job->path.shown, "removed", 1);
        return 0;
}

void fs_method_remove(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "recursive", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool recursive;
        if (!fs_check_fields(req, sb, known) || !rpc_get_bool(req, "recursive", &recursive))
                return;
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        if (recursive) {
                struct fs_job *job = fs_job_new(req, &path, &ctx);
                if (job == NULL)
                        return;
                if (sb != NULL)
                        snprintf(job->staging_id, sizeof(job->staging_id), "%s", sb->id);
                fs_job_start(job, sb, fs_remove_run);
                return;
        }
        int r = fs_remove_at(&ctx, &path, false, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        if (sb != NULL)
                fs_staging_moved(req, sb->id, &path, NULL);
        rpc_reply_result(req, json_pack("{s:s, s:b}", "path", path.shown, "removed", 1));
}

void fs_method_mkdir(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "parents", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool parents;
        if (!fs_check_fields(req, sb, known) || !rpc_get_bool(req, "parents", &parents))
                return;
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin_write(req, sb, &path, &ctx))
                return;
        bool created;
        int r = fs_mkdir_at(&ctx, &path, parents, &created, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        /* nsbox cp's tree, written under a temporary name */
        if (created && fs_staging_is(sb, &path))
                fs_staging_wrote(req, sb->id, &path, true);
        rpc_reply_result(req, json_pack("{s:s, s:b}", "path", path.shown, "created", created));
}

void fs_method_stat(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_check_fields(req, sb, known) || !fs_begin(req, sb, NULL, &path, &ctx))
                return;
        _cleanup_close_ int fd = -1;
        struct stat st;
        int r = fs_stat_at(&ctx, &path, &fd, &st, &err);
        if (r < 0) {
                fs_ctx_close(&ctx);
                fs_reply_failure(req, r, err);
                return;
        }
        const char *name = path.name ? path.name : (strcmp(path.rel, ".") == 0 ? "/" : path.rel);
        json_t *result = fs_stat_json(&ctx, name, strlen(name), &st);
        json_object_set_new(result, "path", json_string(path.shown));
        if (S_ISLNK(st.st_mode)) {
                char target[FS_PATH_MAX + 1];
                ssize_t n = readlinkat(fd, "", target, sizeof(target) - 1);
                if (n >= 0)
                        json_object_set_new(result, "target", fs_json_string(target, (size_t)n));
        }
        fs_ctx_close(&ctx);
        rpc_reply_result(req, result);
}

/* ---- rename, symlink, chmod ---- */

void fs_method_rename(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "from", "to", "overwrite", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool overwrite;
        struct fs_path from, to;
        struct fs_ctx ctx;
        if (!fs_check_fields(req, sb, known) || !rpc_get_bool(req, "overwrite", &overwrite) ||
            !fs_get_path(req, sb, "from", NULL, &from) || !fs_get_path(req, sb, "to", NULL, &to))
                return;
        int r = fs_open_target(req, sb, &ctx, &err);
        if (r == 0)
                r = fs_rename_at(&ctx, &from, &to, overwrite, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        if (sb != NULL)
                fs_staging_moved(req, sb->id, &from, &to);
        rpc_reply_result(req, json_pack("{s:s, s:s}", "from", from.shown, "to", to.shown));
}

void fs_method_symlink(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "target", "path", "overwrite", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool overwrite;
        if (!fs_check_fields(req, sb, known) || !rpc_get_bool(req, "overwrite", &overwrite))
                return;
        json_t *target = json_object_get(req->msg.params, "target");
        if (!json_is_string(target)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "target must be a string");
                return;
        }
        size_t len = json_string_length(target);
        if (len == 0 || len >= FS_PATH_MAX || memchr(json_string_value(target), '\0', len) != NULL) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "target must be 1 to %d bytes without a NUL byte", FS_PATH_MAX - 1);
                return;
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        int r = fs_symlink_at(&ctx, json_string_value(target), &path, overwrite, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        rpc_reply_result(req, json_pack("{s:s, s:O}", "path", path.shown, "target", target));
}

/* setuid and setgid bits are refused: on a file of the sandbox's root they
 * would hand the sandbox user that root, which the client may not mean. */
#define FS_CHMOD_ALLOWED 01777

void fs_method_chmod(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "mode", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!fs_check_fields(req, sb, known))
                return;
        json_t *mode = json_object_get(req->msg.params, "mode");
        if (!json_is_integer(mode) || json_integer_value(mode) < 0 ||
            (json_integer_value(mode) & ~(json_int_t)FS_CHMOD_ALLOWED) != 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "mode must be an integer from 0 to 0o1777 (setuid and setgid are refused)");
                return;
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        int r = fs_chmod_at(&ctx, &path, (mode_t)json_integer_value(mode), &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        rpc_reply_result(req, json_pack("{s:s, s:I}", "path", path.shown, "mode", json_integer_value(mode)));
}
