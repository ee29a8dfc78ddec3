#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum log_level log_max_level = LOG_LEVEL_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

/* sd-daemon priority prefixes, so the journal keeps the level. */
static const char *const level_prefixes[] = { "<3>", "<4>", "<6>", "<7>" };

int log_parse_level(const char *name, enum log_level *out)
{
        for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
                if (strcmp(name, level_names[i]) == 0) {
                        *out = (enum log_level)i;
                        return 0;
                }
        }
        return -EINVAL;
}

void log_write(enum log_level level, const char *fmt, ...)
{
        if (level > log_max_level)
                return;
        int saved = errno;
        char line[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        fprintf(stderr, "%s%s: %s\n", level_prefixes[level], level_names[level], line);
        errno = saved;
}
