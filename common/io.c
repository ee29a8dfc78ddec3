/* SPDX-License-Identifier: Apache-2.0 */
/* Small fd helpers every program shares. */
#include "io.h"

#include <errno.h>
#include <unistd.h>

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
