/* SPDX-License-Identifier: Apache-2.0 */
/* Checks of a path a client gives for a file under a sandbox's working
 * directory (nsbox-http's /execute files and /upload names). */
#pragma once

#include <stdbool.h>

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
