/* SPDX-License-Identifier: Apache-2.0 */
/* Small fd helpers every program shares. */
#pragma once

#include <stddef.h>
#include <sys/types.h>

/* Write all of data to fd, through EINTR and short writes: 0, or -errno
 * (-EIO where write wrote nothing). */
int io_write_all(int fd, const void *data, size_t len);

/* Read exactly len bytes from fd, through EINTR and short reads: len, the
 * bytes read before the end of the stream (fewer than len), or -errno. */
ssize_t io_read_full(int fd, void *data, size_t len);
