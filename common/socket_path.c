/* SPDX-License-Identifier: Apache-2.0 */
/* The operator socket's path beside a given socket. */
#include "socket_path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int operator_socket_path(const char *socket_path, char *out, size_t size)
{
        const char *slash = strrchr(socket_path, '/');
        int dir_len = slash != NULL ? (int)(slash - socket_path) : 1;
        const char *dir = slash != NULL ? socket_path : ".";
        const char *name = slash != NULL ? slash + 1 : socket_path;
        int n = snprintf(out, size, "%.*s/%s/%s", dir_len, dir, OPERATOR_SOCKET_DIR, name);
        return n >= 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}
