/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox cp's tree copy: a source walks a tree (a host directory, a sandbox
 * directory through fs.*, or a tar stream) and hands each entry to a sink
 * (a host directory, a sandbox directory, or a tar stream). Paths handed to
 * a sink are relative to the copy's root: "" is the root itself, "a/b" an
 * entry below it, never absolute and never with a ".." component. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "failure.h"

struct cp_sink;

struct cp_sink_ops {
        int (*dir)(struct cp_sink *sink, const char *rel, mode_t mode);
        /* A regular file of `size` bytes: begin, data in any number of pieces, end. */
        int (*file_begin)(struct cp_sink *sink, const char *rel, mode_t mode, unsigned long long size);
        int (*file_data)(struct cp_sink *sink, const void *data, size_t len);
        int (*file_end)(struct cp_sink *sink);
        int (*symlink)(struct cp_sink *sink, const char *rel, const char *target);
};

/* Each sink embeds this first. Every op returns 0, or an exit code after
 * printing why. */
struct cp_sink {
        const struct cp_sink_ops *ops;
        unsigned long long bytes; /* of file data, for the summary */
};

/* A tar (pax) stream on fd of everything the sink is given, the root entry
 * named root_name; NULL, having said why, if it cannot start. */
struct cp_sink *tar_sink_new(int fd, const char *root_name);
/* Write the end of the archive. 0, or an exit code. */
int tar_sink_finish(struct cp_sink *sink);
void tar_sink_free(struct cp_sink *sink);

/* Read a tar stream (plain or compressed) from fd into sink, entry by entry.
 * Entries with an absolute path lose their leading "/"; a ".." component
 * fails the copy. 0, or an exit code. */
int tar_source_copy(int fd, struct cp_sink *sink);
