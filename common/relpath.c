/* SPDX-License-Identifier: Apache-2.0 */
/* Checks of client-given relative paths under a sandbox's working directory;
 * the temporary names of uploads. */
#include "relpath.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

bool relpath_ok(const char *path, unsigned flags)
{
        if (path == NULL || path[0] == '\0' || strlen(path) > RELPATH_MAX)
                return false;
        const char *p = path;
        if (*p == '/') {
                if (!(flags & RELPATH_ABSOLUTE))
                        return false;
                p++;
        }
        for (;;) {
                size_t n = strcspn(p, "/");
                bool skipped = n == 0 || (n == 1 && p[0] == '.');
                if (skipped && !(flags & RELPATH_LOOSE))
                        return false;
                if (n == 2 && p[0] == '.' && p[1] == '.')
                        return false;
                for (size_t i = 0; i < n; i++)
                        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
                                return false;
                if (p[n] == '\0')
                        return true;
                p += n + 1;
        }
}

int staging_name(const char *prefix, char *out, size_t size)
{
        unsigned long long nonce;
        if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
                return -errno;
        if ((size_t)snprintf(out, size, "%s%016llx", prefix, nonce) >= size)
                return -ENAMETOOLONG;
        return 0;
}

bool staging_name_is(const char *name)
{
        static const char *const prefixes[] = { STAGING_PREFIX, STAGING_WRITE_PREFIX, STAGING_CP_PREFIX };
        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
                size_t n = strlen(prefixes[i]);
                if (strncmp(name, prefixes[i], n) == 0 && strlen(name + n) == 16 &&
                    strspn(name + n, "0123456789abcdef") == 16)
                        return true;
        }
        return false;
}

int staging_path(const char *path, char *out, size_t size)
{
        const char *slash = strrchr(path, '/');
        int dir_len = slash != NULL ? (int)(slash - path + 1) : 0;
        if ((size_t)dir_len >= size)
                return -ENAMETOOLONG;
        memcpy(out, path, (size_t)dir_len);
        return staging_name(STAGING_PREFIX, out + dir_len, size - (size_t)dir_len);
}
