/* SPDX-License-Identifier: Apache-2.0 */
/* One line per event to stderr. Under journald (JOURNAL_STREAM names
 * stderr) a line is "<N>level: message", the sd-daemon priority prefix;
 * anywhere else "2026-01-02T03:04:05.678Z level: message", UTC with
 * milliseconds, since a terminal or a file has no timestamps of its own. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

extern enum log_level log_max_level;

int log_parse_level(const char *name, enum log_level *out);
/* Whether stderr is the stream systemd connected to the journal. */
bool log_stderr_is_journal(void);
/* Every line is escaped before it is written: control characters (newline,
 * CR, ESC, ...), C1 controls, U+2028/U+2029 and bytes that are not UTF-8
 * become \xNN or \u{NNNN}, so text quoted from a client or a sandbox (a
 * path, a method name) can neither start a line of its own nor carry an
 * sd-daemon "<N>" priority prefix. */
void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Rate-limited logging for lines a client or a sandbox can cause at will:
 * key names who causes them ("uid 1000", "sandbox 3f2a..."). Each key has
 * a token bucket (LOG_LIMIT_BURST lines, then LOG_LIMIT_PER_SECOND); lines
 * over it are dropped and counted, and the next line let through is
 * preceded by "<key>: N lines suppressed". Keys share a fixed table, so
 * many keys cost no memory (a key pushed out early only loses its count). */
#define LOG_LIMIT_BURST      20
#define LOG_LIMIT_PER_SECOND 1
void log_limited(const char *key, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The key of lines a uid's requests cause: log_limited(log_key_uid(uid).text, ...). */
struct log_key {
        char text[24];
};
struct log_key log_key_uid(unsigned uid);

/* Escape text as log_write does, into out (always NUL-terminated). */
void log_escape(const char *text, char *out, size_t size);

#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...)                                           \
        do {                                                     \
                if (log_max_level >= LOG_LEVEL_DEBUG)            \
                        log_write(LOG_LEVEL_DEBUG, __VA_ARGS__); \
        } while (0)
