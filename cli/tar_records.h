/* SPDX-License-Identifier: Apache-2.0 */
/* The records nsbox cp and its tar helper (nsbox-tar) exchange over a pipe:
 * a tree as entries, the same steps as a cp_sink's ops. The helper turns tar
 * into records and records into tar, so that libarchive (and the libraries it
 * loads) live in the helper and the CLI can be a static binary. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum tar_record_kind {
        TAR_RECORD_DIR = 1,
        TAR_RECORD_FILE,     /* a regular file of `size` bytes begins */
        TAR_RECORD_DATA,     /* `size` bytes of the current file follow */
        TAR_RECORD_FILE_END, /* the current file ends */
        TAR_RECORD_SYMLINK,  /* a target follows the path */
        TAR_RECORD_END,      /* the tree is whole */
};

/* Paths and symlink targets are at most this long, data pieces at most
 * TAR_RECORD_DATA_MAX bytes: a record over either is malformed. */
#define TAR_RECORD_PATH_MAX 4095
#define TAR_RECORD_DATA_MAX (4u << 20)

struct tar_record {
        uint32_t kind;
        uint32_t mode;
        uint64_t size;
        uint32_t path_len;   /* bytes of path after the header, no NUL */
        uint32_t target_len; /* bytes of target after the path */
};

/* One record on fd: 0, or -errno. */
int tar_record_write(int fd, enum tar_record_kind kind, mode_t mode, uint64_t size, const char *path,
                     const char *target, const void *data);

/* One record from fd into rec, its path and target NUL-terminated into path
 * and target (TAR_RECORD_PATH_MAX + 1 bytes each), a DATA record's bytes into
 * data (TAR_RECORD_DATA_MAX bytes): 0, 1 at the end of the stream before a
 * record, -EPROTO for a malformed or cut record or one out of order, or
 * -errno. *in_file (false before the first record) says whether a file is
 * open: DATA and FILE_END come within one, every other record outside. */
int tar_record_read(int fd, struct tar_record *rec, char *path, char *target, void *data, bool *in_file);
