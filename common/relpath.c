/* SPDX-License-Identifier: Apache-2.0 */
/* Checks of client-given relative paths under a sandbox's working directory. */
#include "relpath.h"

#include <string.h>

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
