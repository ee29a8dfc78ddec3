/* SPDX-License-Identifier: Apache-2.0 */
/* The file helpers of python.run: its `files` written into the sandbox
 * (on the loop when small, else by a worker), and the one-file write, read
 * and remove of its script and report, on fs_ops.c's primitives. */
#include "fs_files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "fs_ops.h"
#include "fs_path.h"
#include "fs_worker.h"
#include "textenc.h"

/* A value of `files`: text, or {content, encoding?} whose content may be
 * base64. */
static json_t *fs_files_content(json_t *v)
{
        return json_is_object(v) ? json_object_get(v, "content") : v;
}

static int fs_files_write(struct fs_ctx *ctx, json_t *files, nsbox_error_t **err)
{
        const char *key;
        json_t *v;
        json_object_foreach(files, key, v)
        {
                const char *text = json_string_value(fs_files_content(v));
                size_t len = json_string_length(fs_files_content(v));
                const char *encoding = json_string_value(json_object_get(v, "encoding"));
                _cleanup_free_ char *decoded = NULL;
                if (json_is_object(v) && encoding != NULL && strcmp(encoding, "base64") == 0) {
                        decoded = base64_decode(text, len, &len);
                        if (decoded == NULL)
                                return base64_valid(text, len)
                                           ? nsbox_error(err, ENOMEM, "files[\"%.200s\"]: decode", key)
                                           : nsbox_refuse(err, FS_JOB_INVALID_CONTENT,
                                                          "files[\"%.100s\"]: content is not valid base64",
                                                          key);
                        text = decoded;
                }
                int r = fs_write_path(ctx, key, text, len, 0644, err);
                if (r < 0) {
                        nsbox_error_wrap(err, "write files[\"%.200s\"]", key);
                        return r;
                }
        }
        return 0;
}

struct fs_files_job {
        struct fs_ctx ctx;
        json_t *files;
        fs_files_done_fn done;
        void *data;
};

static int fs_files_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_files_job *job = data;
        int r = fs_files_write(&job->ctx, job->files, err);
        if (r == 0 && (out->result = json_object()) == NULL)
                r = nsbox_error(err, ENOMEM, "files");
        return r;
}

static void fs_files_job_done(void *data, int r, json_t *result, const char *message)
{
        struct fs_files_job *job = data;
        json_decref(result);
        json_decref(job->files);
        job->done(job->data, r < 0 ? message : NULL, r == -FS_JOB_INVALID_CONTENT);
        free(job);
}

bool fs_files_inline(json_t *files)
{
        size_t total = 0;
        const char *key;
        json_t *v;
        json_object_foreach(files, key, v) total += json_string_length(fs_files_content(v));
        return total <= FS_INLINE_BYTES;
}

void fs_write_files(struct sandbox *sb, json_t *files, fs_files_done_fn done, void *data)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_ctx ctx;
        int r = fs_ctx_open(sb, &ctx, &err);
        if (r == 0 && fs_files_inline(files)) {
                r = fs_files_write(&ctx, files, &err);
                fs_ctx_close(&ctx);
        } else if (r == 0) {
                /* Decoding and writing tens of MB: in a worker. */
                struct fs_files_job *job = calloc(1, sizeof(*job));
                if (job == NULL) {
                        fs_ctx_close(&ctx);
                        r = nsbox_error(&err, ENOMEM, "files");
                } else {
                        *job = (struct fs_files_job){ ctx, json_incref(files), done, data };
                        r = fs_ctx_fork(&job->ctx, sb, fs_files_run, fs_files_job_done, job, NULL, &err);
                        if (r == 0)
                                return;
                        json_decref(job->files);
                        free(job);
                }
        }
        done(data, r < 0 ? (err ? err->message : strerror(-r)) : NULL, r == -FS_JOB_INVALID_CONTENT);
}

static int fs_begin_internal(struct sandbox *sb, const char *path, struct fs_path *p, struct fs_ctx *ctx,
                             nsbox_error_t **err)
{
        int r = fs_path_parse(path, strlen(path), FS_PATH_WORKSPACE, p, err);
        if (r < 0)
                return r;
        return fs_ctx_open(sb, ctx, err);
}

int fs_write_file(struct sandbox *sb, const char *path, const void *data, size_t len, mode_t mode,
                  nsbox_error_t **err)
{
        struct fs_ctx ctx;
        int r = fs_ctx_open(sb, &ctx, err);
        if (r < 0)
                return r;
        r = fs_write_path(&ctx, path, data, len, mode, err);
        fs_ctx_close(&ctx);
        return r;
}

int fs_read_file(struct sandbox *sb, const char *path, size_t max_bytes, char **data, size_t *len,
                 nsbox_error_t **err)
{
        struct fs_path p;
        struct fs_ctx ctx;
        int r = fs_begin_internal(sb, path, &p, &ctx, err);
        if (r < 0)
                return r;
        struct fs_read_result res = { 0 };
        r = fs_read_at(&ctx, &p, 0, max_bytes, &res, err);
        fs_ctx_close(&ctx);
        if (r < 0)
                return r;
        if (res.truncated) {
                /* A cut report or PNG is worse than none: callers skip it. */
                free(res.data);
                return nsbox_error(err, EFBIG, "%s is larger than %zu bytes", path, max_bytes);
        }
        *data = res.data;
        *len = res.len;
        return 0;
}

int fs_remove_file(struct sandbox *sb, const char *path, nsbox_error_t **err)
{
        struct fs_path p;
        struct fs_ctx ctx;
        int r = fs_begin_internal(sb, path, &p, &ctx, err);
        if (r < 0)
                return r;
        r = fs_remove_at(&ctx, &p, false, err);
        fs_ctx_close(&ctx);
        return r == -ENOENT ? 0 : r;
}
