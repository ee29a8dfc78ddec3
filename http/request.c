/* SPDX-License-Identifier: Apache-2.0 */
/* The front's settings and the growing buffer of a request's body
 * (request.h). */
#include "request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct http_config http_config;

int http_buffer_append(char **data, size_t *len, size_t *cap, const void *more, size_t n)
{
        if (*len + n > *cap) {
                size_t grown_cap = *cap ? *cap : 16384;
                while (grown_cap < *len + n)
                        grown_cap *= 2;
                /* a body is at most this: no room beyond it */
                if (grown_cap > HTTP_MAX_BODY && *len + n <= HTTP_MAX_BODY)
                        grown_cap = HTTP_MAX_BODY;
                char *grown = realloc(*data, grown_cap);
                if (grown == NULL)
                        return -ENOMEM;
                *data = grown;
                *cap = grown_cap;
        }
        memcpy(*data + *len, more, n);
        *len += n;
        return 0;
}
