/* SPDX-License-Identifier: Apache-2.0 */
/* The file primitives under a sandbox's root: each call pins the root
 * (struct fs_ctx) and resolves every path with openat2 inside it, never by
 * string checks. fs_api.c (the fs.* methods) and fs_files.c (python.run's
 * files) are built on these; nothing here knows JSON or a request. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "error.h"
#include "fs_path.h"
#include "fs_worker.h"

struct sandbox;

/* Content larger than this is read, decoded and written by a forked worker,
 * not on the event loop. */
#define FS_INLINE_BYTES (1 << 20)

/* A worker's answer for content that is not valid base64: a client error,
 * like the same finding on the loop. */
#define FS_JOB_INVALID_CONTENT EBADMSG

/* As POLICY_MAX_MOUNTS (checked in fs_ops.c). */
#define FS_MAX_MOUNTS 8

/* One call's view of a sandbox, or of a volume without a sandbox: its
 * pinned root and the sandbox user. */
struct fs_ctx {
        int root;
        /* openat2's resolve flags under root: a sandbox's root is walked
         * IN_ROOT (its absolute symlinks are its own); a volume's BENEATH,
         * following no symlink at all (fs_ctx_open_volume). */
        uint64_t resolve;
        const char *volume; /* the volume's name, for messages; NULL for a sandbox */
        /* The mounts fs.* may end on: the root's, then the sandbox's volumes
         * and host directories (fs_ops.c). */
        uint64_t mounts[1 + FS_MAX_MOUNTS];
        unsigned n_mounts;
        const char *mount_paths[FS_MAX_MOUNTS]; /* where those are attached ("/data"), in its policy */
        unsigned n_mount_paths;
        uid_t uid;
        gid_t gid;
        uid_t uid_base;
        unsigned long long disk_bytes;
        int watch_fd; /* in a worker: the init's pidfd, to stop when the sandbox goes; else -1 */
};

/* Pin the sandbox's root for one call (refused unless it is running). */
int fs_ctx_open(struct sandbox *sb, struct fs_ctx *ctx, nsbox_error_t **err);
/* Pin a volume's root (the mount fd `root`, taken) for one call: paths
 * resolve beneath it following no symlink, what is made is the sandbox
 * user's as the volume stores it (uid 1000 on disk, what each sandbox's
 * idmapped mount shows as its user), and a full volume says its size. */
int fs_ctx_open_volume(int root, const char *name, unsigned long long size_bytes, struct fs_ctx *ctx,
                       nsbox_error_t **err);
void fs_ctx_close(struct fs_ctx *ctx);
/* Fork a worker that runs `run` on `data` with the root `ctx` (open;
 * closed here, the worker keeps its copy), watching the sandbox if any
 * (sb NULL: a volume's). */
int fs_ctx_fork(struct fs_ctx *ctx, struct sandbox *sb, fs_worker_run_fn run, fs_worker_done_fn done,
                void *data, struct fs_worker **worker, nsbox_error_t **err);

struct fs_read_result {
        char *data;
        size_t len;
        unsigned long long size; /* of the whole file */
        bool truncated;
};

/* At most max_bytes of the regular file p from `offset` on (beyond the end:
 * nothing); out->data is malloc'd. */
int fs_read_at(const struct fs_ctx *ctx, const struct fs_path *p, uint64_t offset, size_t max_bytes,
               struct fs_read_result *out, nsbox_error_t **err);
/* Whether what is to read of the regular file at p from `offset` on is
 * more than what is read on the loop. */
bool fs_read_is_large(const struct fs_ctx *ctx, const struct fs_path *p, uint64_t offset);

struct fs_write_options {
        mode_t mode;
        bool mode_set;
        bool append;
        bool parents;
};

/* Write (or append to) the regular file p, created owned by the sandbox
 * user; a final symlink is refused, a failed write leaves no half file. */
int fs_write_at(const struct fs_ctx *ctx, const struct fs_path *p, const void *data, size_t len,
                const struct fs_write_options *opts, nsbox_error_t **err);
/* fs_write_at of the sandbox path `path` (parsed here), parents created. */
int fs_write_path(struct fs_ctx *ctx, const char *path, const void *data, size_t len, mode_t mode,
                  nsbox_error_t **err);

/* Remove p (a final symlink itself, never its target); a directory only
 * when empty, or with everything under it when recursive. */
int fs_remove_at(const struct fs_ctx *ctx, const struct fs_path *p, bool recursive, nsbox_error_t **err);
/* In a worker about to remove a tree: an fd limit of one open directory
 * per level of the deepest tree fs_remove_at takes apart. */
void fs_tree_raise_fd_limit(void);

int fs_mkdir_at(const struct fs_ctx *ctx, const struct fs_path *p, bool parents, bool *created,
                nsbox_error_t **err);

/* All names of directory p (up to a bound; *scan_cut when more were left),
 * sorted, and in *dir the directory's fd to stat them in. For a worker:
 * the names are not freed one by one, the child exits right after. */
int fs_list_names(const struct fs_ctx *ctx, const struct fs_path *p, int *dir, char ***names, size_t *n,
                  bool *scan_cut, nsbox_error_t **err);
/* Stat p without following a final symlink; *out is its O_PATH fd (to read
 * a symlink's target). */
int fs_stat_at(const struct fs_ctx *ctx, const struct fs_path *p, int *out, struct stat *st,
               nsbox_error_t **err);

int fs_rename_at(const struct fs_ctx *ctx, const struct fs_path *from, const struct fs_path *to,
                 bool overwrite, nsbox_error_t **err);
int fs_symlink_at(const struct fs_ctx *ctx, const char *target, const struct fs_path *p, bool overwrite,
                  nsbox_error_t **err);
/* chmod of a regular file or directory (a final symlink followed, inside
 * the root). */
int fs_chmod_at(const struct fs_ctx *ctx, const struct fs_path *p, mode_t mode, nsbox_error_t **err);
