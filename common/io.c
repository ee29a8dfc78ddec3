/* SPDX-License-Identifier: Apache-2.0 */
/* Small fd helpers every program shares. */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

int io_write_all(int fd, const void *data, size_t len)
{
        const char *p = data;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : -EIO;
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

ssize_t io_read_full(int fd, void *data, size_t len)
{
        char *p = data;
        size_t got = 0;
        while (got < len) {
                ssize_t n = read(fd, p + got, len - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        return (ssize_t)got;
}

int io_pidfd_take(int pidfd, int target)
{
        return (int)syscall(SYS_pidfd_getfd, pidfd, target, 0);
}

bool io_socket_is(int fd, int domain, int type)
{
        int t = 0, d = 0;
        socklen_t len = sizeof(t);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &len) < 0 || t != type)
                return false;
        len = sizeof(d);
        return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &d, &len) == 0 && d == domain;
}

int io_memfd_seal(int fd)
{
        for (int tries = 1;; tries++) {
                if (fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) == 0)
                        return 0;
                if (errno != EBUSY || tries >= IO_SEAL_TRIES)
                        return -errno;
                struct timespec pause = { .tv_nsec = IO_SEAL_PAUSE_MS * 1000000L };
                nanosleep(&pause, NULL);
        }
}
