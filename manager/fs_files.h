/* SPDX-License-Identifier: Apache-2.0 */
/* python.run's file helpers: its `files` written into the sandbox, and the
 * one-file write, read and remove of its script and report. Resolution
 * never leaves the sandbox's root (fs_ops.h). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

struct sandbox;

/* python.run's `files`, {path: text | {content, encoding?: "base64"}},
 * written as fs_write_file writes: on the loop when small, else by a worker.
 * `done` runs once (possibly before this returns) with NULL, or an error
 * and whether the client's content was at fault (invalid base64, which the
 * caller checks only when fs_files_inline). */
typedef void (*fs_files_done_fn)(void *data, const char *error, bool invalid_content);
/* Whether fs_write_files writes them on the loop (then the caller checks
 * their base64 first), by their total size. */
bool fs_files_inline(json_t *files);
void fs_write_files(struct sandbox *sb, json_t *files, fs_files_done_fn done, void *data);

/* Write a regular file (created or truncated, parents created) owned by the
 * sandbox user. `path` is a sandbox path (relative = under /workspace). */
int fs_write_file(struct sandbox *sb, const char *path, const void *data, size_t len, mode_t mode,
                  nsbox_error_t **err);
/* Remove a file (not recursively); a missing one is no error. */
int fs_remove_file(struct sandbox *sb, const char *path, nsbox_error_t **err);
/* Read a regular file of at most max_bytes (larger: EFBIG); *data is malloc'd. */
int fs_read_file(struct sandbox *sb, const char *path, size_t max_bytes, char **data, size_t *len,
                 nsbox_error_t **err);
