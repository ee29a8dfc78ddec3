/* SPDX-License-Identifier: Apache-2.0 */
/* Forked workers of the file API (see fs_worker.h).
 *
 * The child writes progress lines, {"progress":[done,total]}, if its work
 * says how far it is, then one header line, {"r":0,"result":{...},"raw_key":k}
 * or {"r":-errno,"message":"..."}, then the raw bytes of result[k], and exits.
 * nsboxd reads the pipe as data arrives, without blocking. */
#include "fs_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "io.h"
#include "daemon.h"
#include "json_cleanup.h"
#include "log.h"

#define FS_WORKER_PART_ITEMS 500
/* A 64 MiB read, base64-encoded, plus its header. */
#define FS_WORKER_MAX_OUTPUT (100u << 20)
#define FS_WORKER_CHUNK      (1u << 20)

static unsigned live_workers;

struct fs_worker {
        pid_t pid;
        struct loop_source *source;
        char *buf;
        size_t len, cap;
        size_t consumed; /* bytes of buf already taken as lines */
        json_t *header;  /* once its line arrived */
        json_t *parts;   /* header.result[parts_key], filled line by line */
        fs_worker_done_fn done;
        void *data;
        fs_worker_progress_fn progress;
        void *progress_data;
};

/* In the child: its end of the pipe, for fs_worker_progress. */
static int child_out = -1;

void fs_worker_progress(uint64_t done, uint64_t total)
{
        if (child_out < 0)
                return;
        char line[80];
        int len = snprintf(line, sizeof(line), "{\"progress\":[%llu,%llu]}\n", (unsigned long long)done,
                           (unsigned long long)total);
        if (io_write_all(child_out, line, (size_t)len) < 0)
                _exit(3);
}

void fs_worker_on_progress(struct fs_worker *w, fs_worker_progress_fn fn, void *data)
{
        w->progress = fn;
        w->progress_data = data;
}

static int fs_worker_compare_fds(const void *a, const void *b)
{
        return *(const int *)a - *(const int *)b;
}

/* Close every fd but the ones in keep[] (sorted here). */
static void fs_worker_close_others(int *keep, size_t n)
{
        qsort(keep, n, sizeof(*keep), fs_worker_compare_fds);
        unsigned first = 3;
        for (size_t i = 0; i < n; i++) {
                if (keep[i] < 0 || (unsigned)keep[i] < first)
                        continue;
                if ((unsigned)keep[i] > first)
                        close_range(first, (unsigned)keep[i] - 1, 0);
                first = (unsigned)keep[i] + 1;
        }
        close_range(first, ~0u, 0);
}

static __attribute__((noreturn)) void fs_worker_child(pid_t parent, int out, const int *keep, size_t n_keep,
                                                      fs_worker_run_fn run, void *data)
{
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
                _exit(1); /* nsboxd died before the death signal was set */
        int fds[n_keep + 1];
        memcpy(fds, keep, n_keep * sizeof(*keep));
        fds[n_keep] = out;
        fs_worker_close_others(fds, n_keep + 1);
        signal(SIGPIPE, SIG_IGN);
        child_out = out;
        struct fs_worker_output output = { 0 };
        nsbox_error_t *err = NULL;
        int r = run(data, &output, &err);
        json_t *header;
        if (r < 0)
                header = json_pack("{s:i, s:s}", "r", r, "message",
                                   err && err->message ? err->message : strerror(-r));
        else
                header = json_pack("{s:i, s:o?, s:s?, s:s?}", "r", 0, "result", output.result, "raw_key",
                                   output.raw_key, "parts_key", output.parts ? output.parts_key : NULL);
        char *text = header ? json_dumps(header, JSON_COMPACT) : NULL;
        if (text == NULL)
                _exit(2);
        if (io_write_all(out, text, strlen(text)) < 0 || io_write_all(out, "\n", 1) < 0 ||
            (output.raw_key != NULL && io_write_all(out, output.raw, output.raw_len) < 0))
                _exit(3);
        size_t total = output.parts ? json_array_size(output.parts) : 0;
        for (size_t i = 0; i < total; i += FS_WORKER_PART_ITEMS) {
                json_t *part = json_array();
                for (size_t j = i; j < total && j < i + FS_WORKER_PART_ITEMS; j++)
                        json_array_append(part, json_array_get(output.parts, j));
                char *line = json_dumps(part, JSON_COMPACT);
                if (line == NULL || io_write_all(out, line, strlen(line)) < 0 ||
                    io_write_all(out, "\n", 1) < 0)
                        _exit(3);
                free(line);
                json_decref(part);
        }
        _exit(0);
}

static void fs_worker_finish(struct fs_worker *w, int r, json_t *result, const char *message)
{
        if (w->source != NULL)
                loop_remove(nsboxd.loop, w->source);
        if (w->pid > 0) {
                if (r < 0)
                        kill(w->pid, SIGKILL);
                while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        live_workers--;
        w->done(w->data, r, result, message);
        json_decref(w->header);
        free(w->buf);
        free(w);
}

void fs_worker_cancel(struct fs_worker *w)
{
        fs_worker_finish(w, -ECANCELED, NULL, "cancelled");
}

/* The child closed its end and every line is taken: it is done (or died;
 * then the header is missing). */
static void fs_worker_complete(struct fs_worker *w)
{
        int status = 0;
        while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
                ;
        w->pid = 0;
        json_t *header = w->header;
        if (header == NULL) {
                char why[96];
                if (WIFSIGNALED(status))
                        snprintf(why, sizeof(why), "the file worker was killed by signal %d",
                                 WTERMSIG(status));
                else
                        snprintf(why, sizeof(why), "the file worker exited with status %d without an answer",
                                 WEXITSTATUS(status));
                log_warn("%s", why);
                fs_worker_finish(w, -EIO, NULL, why);
                return;
        }
        int r = (int)json_integer_value(json_object_get(header, "r"));
        if (r < 0) {
                const char *message = json_string_value(json_object_get(header, "message"));
                fs_worker_finish(w, r, NULL, message ? message : strerror(-r));
                return;
        }
        json_t *result = json_incref(json_object_get(header, "result"));
        const char *raw_key = json_string_value(json_object_get(header, "raw_key"));
        if (result != NULL && raw_key != NULL)
                json_object_set_new(result, raw_key,
                                    json_stringn_nocheck(w->buf + w->consumed, w->len - w->consumed));
        if (result == NULL)
                fs_worker_finish(w, -EIO, NULL, "the file worker sent no result");
        else
                fs_worker_finish(w, 0, result, NULL);
}

/* Take the complete lines that arrived: the header, then parts. Returns
 * false when the answer is malformed (then the worker is finished). */
static bool fs_worker_take_lines(struct fs_worker *w)
{
        for (;;) {
                if (w->header != NULL && w->parts == NULL)
                        return true; /* the rest is raw bytes, taken at the end */
                if (w->consumed >= w->len)
                        return true;
                char *start = w->buf + w->consumed;
                char *newline = memchr(start, '\n', w->len - w->consumed);
                if (newline == NULL)
                        return true;
                json_t *line = json_loadb(start, (size_t)(newline - start), JSON_ALLOW_NUL, NULL);
                w->consumed = (size_t)(newline - w->buf) + 1;
                if (w->header == NULL) {
                        if (line == NULL)
                                break;
                        json_t *progress = json_object_get(line, "progress");
                        if (progress != NULL) {
                                if (w->progress != NULL && json_array_size(progress) == 2)
                                        w->progress(
                                            w->progress_data,
                                            (uint64_t)json_integer_value(json_array_get(progress, 0)),
                                            (uint64_t)json_integer_value(json_array_get(progress, 1)));
                                json_decref(line);
                                continue;
                        }
                        w->header = line;
                        const char *key = json_string_value(json_object_get(w->header, "parts_key"));
                        json_t *result = json_object_get(w->header, "result");
                        if (key != NULL && json_is_object(result)) {
                                w->parts = json_array();
                                json_object_set_new(result, key, w->parts);
                        }
                        continue;
                }
                if (!json_is_array(line) || json_array_extend(w->parts, line) < 0) {
                        json_decref(line);
                        break;
                }
                json_decref(line);
                /* One part per wakeup: other clients are served in between. */
                return true;
        }
        fs_worker_finish(w, -EIO, NULL, "the file worker sent a malformed answer");
        return false;
}

static void fs_worker_event(struct loop_source *source, uint32_t events)
{
        struct fs_worker *w = source->data;
        /* A bounded slice per wakeup: other clients run in between. */
        for (int slice = 0; slice < 8; slice++) {
                if (w->cap - w->len < FS_WORKER_CHUNK) {
                        if (w->cap >= FS_WORKER_MAX_OUTPUT) {
                                fs_worker_finish(w, -EFBIG, NULL,
                                                 "the answer of the file worker is too large");
                                return;
                        }
                        size_t grown = w->cap ? w->cap * 2 : 2 * FS_WORKER_CHUNK;
                        char *bigger = realloc(w->buf, grown);
                        if (bigger == NULL) {
                                fs_worker_finish(w, -ENOMEM, NULL, "out of memory reading the file worker");
                                return;
                        }
                        w->buf = bigger;
                        w->cap = grown;
                }
                ssize_t n = read(source->fd, w->buf + w->len, w->cap - w->len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n < 0) {
                        fs_worker_finish(w, -errno, NULL, "read the file worker's answer");
                        return;
                }
                if (n == 0) {
                        /* Lines left: one per wakeup; the end of file keeps the fd ready. */
                        size_t before = w->consumed;
                        if (!fs_worker_take_lines(w))
                                return;
                        if (w->consumed != before)
                                return;
                        loop_remove(nsboxd.loop, w->source);
                        w->source = NULL;
                        fs_worker_complete(w);
                        return;
                }
                w->len += (size_t)n;
                if (!fs_worker_take_lines(w))
                        return;
        }
}

int fs_worker_start(const int *keep, size_t n_keep, fs_worker_run_fn run, fs_worker_done_fn done, void *data,
                    struct fs_worker **out, nsbox_error_t **err)
{
        if (live_workers >= FS_WORKERS_MAX)
                return nsbox_refuse(err, EBUSY, "%u large file operations are running already; try again",
                                    live_workers);
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return nsbox_error(err, errno, "pipe for a file worker");
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int saved = errno;
                close(fds[0]);
                close(fds[1]);
                return nsbox_error(err, saved, "fork a file worker");
        }
        if (pid == 0) {
                close(fds[0]);
                fs_worker_child(parent, fds[1], keep, n_keep, run, data);
        }
        close(fds[1]);
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        fcntl(fds[0], F_SETPIPE_SZ, FS_WORKER_CHUNK);
        struct fs_worker *w = calloc(1, sizeof(*w));
        if (w != NULL)
                w->source = loop_add(nsboxd.loop, fds[0], EPOLLIN, fs_worker_event, w);
        if (w == NULL || w->source == NULL) {
                close(fds[0]);
                kill(pid, SIGKILL);
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                free(w);
                return nsbox_error(err, ENOMEM, "watch a file worker");
        }
        w->pid = pid;
        w->done = done;
        w->data = data;
        live_workers++;
        if (out != NULL)
                *out = w;
        return 0;
}
