/* SPDX-License-Identifier: Apache-2.0 */
/* The one parser and formatter of sizes with units, shared by the CLI's
 * options, nsboxd's JSON-RPC params and every message that names a size. */
#include "size.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char units[] = "KMGT";

int size_parse(const char *text, uint64_t *out)
{
        if (text == NULL)
                return -EINVAL;
        const char *p = text;
        while (*p == ' ')
                p++;
        /* Digits, at most one '.', digits: no sign, exponent, hex or inf. */
        uint64_t whole = 0, frac_num = 0, frac_den = 1;
        bool digits = false, dot = false;
        for (; isdigit((unsigned char)*p) || (*p == '.' && !dot); p++) {
                if (*p == '.') {
                        dot = true;
                        continue;
                }
                digits = true;
                unsigned d = (unsigned)(*p - '0');
                if (!dot) {
                        if (whole > (UINT64_MAX - d) / 10)
                                return -EINVAL;
                        whole = whole * 10 + d;
                } else if (frac_den < 1000000000ull) {
                        frac_num = frac_num * 10 + d;
                        frac_den *= 10;
                }
        }
        if (!digits)
                return -EINVAL;
        while (*p == ' ')
                p++;
        unsigned shift = 0;
        const char *u = *p != '\0' ? strchr(units, toupper((unsigned char)*p)) : NULL;
        if (u != NULL) {
                shift = 10 * (unsigned)(u - units + 1);
                p++;
                if (*p == 'i' || *p == 'I')
                        p++;
        }
        if (*p == 'b' || *p == 'B')
                p++;
        if (*p != '\0')
                return -EINVAL;
        if (shift > 0 && whole > ((uint64_t)INT64_MAX >> shift))
                return -EINVAL;
        uint64_t bytes = whole << shift;
        uint64_t frac = (uint64_t)(((unsigned __int128)frac_num << shift) / frac_den);
        if (bytes + frac > (uint64_t)INT64_MAX)
                return -EINVAL;
        *out = bytes + frac;
        return 0;
}

char *size_format(uint64_t bytes, char *out, size_t size)
{
        static const char *const names[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
        if (bytes < 1024) {
                snprintf(out, size, "%llu byte%s", (unsigned long long)bytes, bytes == 1 ? "" : "s");
                return out;
        }
        unsigned k = 0;
        while (k + 1 < sizeof(names) / sizeof(names[0]) && bytes >> (10 * (k + 2)) != 0)
                k++;
        unsigned shift = 10 * (k + 1);
        uint64_t whole = bytes >> shift;
        uint64_t rest = bytes & ((1ull << shift) - 1);
        unsigned tenth = (unsigned)(((unsigned __int128)rest * 10) >> shift);
        if (rest == 0)
                snprintf(out, size, "%llu %s", (unsigned long long)whole, names[k]);
        else
                snprintf(out, size, "%llu.%u %s", (unsigned long long)whole, tenth, names[k]);
        return out;
}
