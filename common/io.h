/* SPDX-License-Identifier: Apache-2.0 */
/* Small fd helpers every program shares. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Write all of data to fd, through EINTR and short writes: 0, or -errno
 * (-EIO where write wrote nothing). */
int io_write_all(int fd, const void *data, size_t len);

/* Read exactly len bytes from fd, through EINTR and short reads: len, the
 * bytes read before the end of the stream (fewer than len), or -errno. */
ssize_t io_read_full(int fd, void *data, size_t len);

/* A copy of fd number `target` of the process behind pidfd
 * (pidfd_getfd(2), close-on-exec): the fd, or -1 with errno set. */
int io_pidfd_take(int pidfd, int target);

/* Whether fd is a socket of this domain and type. */
bool io_socket_is(int fd, int domain, int type);

/* Seal a memfd against every later write, resize and seal (F_SEAL_SEAL,
 * _SHRINK, _GROW, _WRITE): 0, or -errno. The kernel refuses the write seal
 * (EBUSY) while a page of the file is still referenced after its own wait
 * (a page a writer just filled, not yet off the CPU's LRU batch, or taken
 * for a moment by the kernel's memory scanners on a busy host): that is
 * tried again, for up to IO_SEAL_TRIES times IO_SEAL_PAUSE_MS. */
#define IO_SEAL_TRIES    20
#define IO_SEAL_PAUSE_MS 10
int io_memfd_seal(int fd);
