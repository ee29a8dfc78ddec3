/* SPDX-License-Identifier: Apache-2.0 */
/* Checks of a path a client gives for a file under a sandbox's working
 * directory (nsbox-http's /execute files and /upload names), and the
 * temporary names an upload is written under before its rename. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define RELPATH_MAX 4096

enum relpath_flags {
        /* A leading "/": a sandbox path rather than one under the working directory. */
        RELPATH_ABSOLUTE = 1 << 0,
        /* Empty and "." parts ("a//b", "a/", "./a"), which a path walk skips. */
        RELPATH_LOOSE = 1 << 1,
};

/* True when path is 1 to RELPATH_MAX bytes, has no ".." part and no control
 * character (below 0x20, or 0x7f), and is relative with neither empty nor
 * "." parts unless flags allow them. */
bool relpath_ok(const char *path, unsigned flags);

/* An upload written in pieces goes to a temporary file beside its target,
 * renamed into place once whole (removed on failure): a copy cut short never
 * leaves a part of the new file under the target's name. nsboxd removes one
 * whose writer's connection closes before its rename (manager/fs_staging.c). */
#define STAGING_PREFIX ".nsbox-upload-"
/* fs.write's whole-file writes, and nsbox cp's trees, go the same way. */
#define STAGING_WRITE_PREFIX ".nsbox-write-"
#define STAGING_CP_PREFIX    ".nsbox-cp-"
/* Whether a file name (no '/') is one of those temporary names: PREFIX
 * and 16 hex digits, as staging_name makes them. */
bool staging_name_is(const char *name);
/* PREFIX followed by 16 random hex digits, into out: 0, or -errno. */
int staging_name(const char *prefix, char *out, size_t size);
/* The temporary path beside `path` (a sandbox path of a file): its
 * directory, then a staging_name of STAGING_PREFIX. 0, or -errno
 * (-ENAMETOOLONG when it does not fit in size). */
int staging_path(const char *path, char *out, size_t size);
