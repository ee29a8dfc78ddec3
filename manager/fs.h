/* SPDX-License-Identifier: Apache-2.0 */
/* File access into a sandbox from the manager: fs.* methods and helpers for
 * python.run. Resolution never leaves the sandbox's root. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "rpc.h"

struct sandbox;

void fs_method_list(struct rpc_request *req, struct sandbox *sb);
void fs_method_read(struct rpc_request *req, struct sandbox *sb);
void fs_method_write(struct rpc_request *req, struct sandbox *sb);
void fs_method_remove(struct rpc_request *req, struct sandbox *sb);
void fs_method_mkdir(struct rpc_request *req, struct sandbox *sb);
void fs_method_stat(struct rpc_request *req, struct sandbox *sb);
void fs_method_rename(struct rpc_request *req, struct sandbox *sb);
void fs_method_symlink(struct rpc_request *req, struct sandbox *sb);
void fs_method_chmod(struct rpc_request *req, struct sandbox *sb);

/* Content larger than this is read, decoded and written by a forked worker,
 * not on the event loop. */
#define FS_INLINE_BYTES (1 << 20)

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
