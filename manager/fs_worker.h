/* SPDX-License-Identifier: Apache-2.0 */
/* File work that may take long (a recursive remove, the listing of a huge
 * directory, a large read or write) runs in a forked child of nsboxd and
 * reports back through a pipe watched by the event loop, so the loop keeps
 * serving every other client meanwhile (STYLE: work that must block runs
 * elsewhere). A fork, not a thread: nsboxd clones sandboxes with raw
 * clone3 and relies on being single-threaded for that. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* What the child produced. raw_key, when set, names a string member of
 * `result` whose (valid UTF-8) bytes are raw/raw_len: sent unparsed, so a
 * 64 MiB file's content is copied once, not re-parsed by the loop. */
struct fs_worker_output {
        json_t *result;
        const char *raw_key;
        char *raw;
        size_t raw_len;
        /* Or: an array appended to result[parts_key], sent as lines of a few
         * hundred items that nsboxd parses one per wakeup, so a 100k-entry
         * listing is never parsed in one go on the loop. */
        const char *parts_key;
        json_t *parts;
};

/* Runs in the child. Returns 0 and fills out, or a negative errno with err. */
typedef int (*fs_worker_run_fn)(void *data, struct fs_worker_output *out, nsbox_error_t **err);
/* Runs in nsboxd once the child has answered or died: r < 0 with message,
 * or r == 0 with result (a reference handed over). Frees data. */
typedef void (*fs_worker_done_fn)(void *data, int r, json_t *result, const char *message);

struct fs_worker;

/* At most this many workers run at once (each is a fork of nsboxd); a
 * start beyond it fails with EBUSY. */
#define FS_WORKERS_MAX 32

/* Fork the child. It keeps only the fds in keep[] (and its pipe), so it
 * holds no client socket or lock of nsboxd's. On failure nothing ran and
 * `done` is not called; on success *out (if not NULL) is the worker until
 * `done` runs. */
int fs_worker_start(const int *keep, size_t n_keep, fs_worker_run_fn run, fs_worker_done_fn done, void *data,
                    struct fs_worker **out, nsbox_error_t **err);
/* In the child: how far its work is (done of total, in the work's own
 * unit: bytes, steps), sent at once (the caller keeps the rate sane);
 * nsboxd hands it to the worker's progress callback, if any. */
void fs_worker_progress(uint64_t done, uint64_t total);
typedef void (*fs_worker_progress_fn)(void *data, uint64_t done, uint64_t total);
/* In nsboxd: call fn(data, ...) for each progress line of w's child until
 * `done` runs. */
void fs_worker_on_progress(struct fs_worker *w, fs_worker_progress_fn fn, void *data);
/* Kill the child now; `done` runs with -ECANCELED. */
void fs_worker_cancel(struct fs_worker *w);
