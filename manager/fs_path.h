/* SPDX-License-Identifier: Apache-2.0 */
/* Sandbox paths as fs.* takes them from clients: normalized and bounded by
 * pure string work, before the kernel resolves anything. Kept apart from
 * fs_ops.c so that it is fuzzed without a sandbox (tests/fuzz/fuzz_fs_path.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* The longest path fs.* takes, as the kernel's PATH_MAX. */
#define FS_PATH_MAX 4096
/* The most components a path may have after normalization. Each missing
 * directory of an fs.mkdir/fs.write with parents costs a resolution from
 * the root, so this bounds that work; real paths are far shorter. */
#define FS_PATH_MAX_COMPONENTS 256

/* A sandbox path, normalized: `rel` is relative to the sandbox root ("."
 * for the root itself), `parent` + `name` split off its last component. */
struct fs_path {
        char rel[FS_PATH_MAX + 16];
        char parent[FS_PATH_MAX + 16];
        const char *name;             /* in rel; NULL when the path is the root or ends in ".." */
        bool dir_only;                /* written with a trailing "/", "." or ".." */
        unsigned components;          /* in rel, ".." included; 0 for the root */
        char shown[FS_PATH_MAX + 16]; /* "/" + rel, for messages and replies */
};

/* The directory a relative path of a sandbox starts from. */
#define FS_PATH_WORKSPACE "workspace"

/* Normalize a path of `len` bytes: absolute = from the root, relative = from
 * `base` (a name of at most 14 bytes under the root: FS_PATH_WORKSPACE for
 * a sandbox's paths) or, when base is NULL, from the root too (a volume's
 * paths). Empty and "." components go; ".." stays for
 * the kernel to resolve (physically, inside the root). Refuses (EINVAL or
 * ENAMETOOLONG, with a message for the client) an empty path, a NUL byte,
 * more than FS_PATH_MAX bytes, a component over NAME_MAX and more than
 * FS_PATH_MAX_COMPONENTS components. */
int fs_path_parse(const char *text, size_t len, const char *base, struct fs_path *out, nsbox_error_t **err);

/* Length of the prefix of `rel` made of its first `n` components (n >= 1),
 * or 0 when rel has fewer: walks that create one level at a time open each
 * prefix without building strings. */
size_t fs_path_prefix_len(const char *rel, unsigned n);
