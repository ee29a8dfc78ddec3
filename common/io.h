/* SPDX-License-Identifier: Apache-2.0 */
/* Small fd helpers every program shares. */
#pragma once

#include <stddef.h>

/* Write all of data to fd, through EINTR and short writes: 0, or -errno
 * (-EIO where write wrote nothing). */
int io_write_all(int fd, const void *data, size_t len);
