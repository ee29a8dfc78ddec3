/* SPDX-License-Identifier: Apache-2.0 */
/* The failure and warning lines nsbox and nsbox-tar print on stderr (failure.h). */
#include <stdio.h>

#include "failure.h"

void failure_vprint(const char *fmt, va_list ap)
{
        char line[4096];
        vsnprintf(line, sizeof(line), fmt, ap);
        /* One line, whatever the message holds. */
        for (char *p = line; *p; p++) {
                if (*p == '\n' || *p == '\r')
                        *p = ' ';
        }
        fprintf(stderr, "nsbox: %s\n", line);
}

void cp_warn_skipped(const char *what, const char *why)
{
        fflush(stdout);
        fprintf(stderr, "nsbox: skipped %s: %s\n", what, why);
}
