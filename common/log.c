/* SPDX-License-Identifier: Apache-2.0 */
/* Log lines to stderr (journald priority prefixes), escaping, and per-key rate limits. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum log_level log_max_level = LOG_LEVEL_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

/* sd-daemon priority prefixes, so the journal keeps the level. */
static const char *const level_prefixes[] = { "<3>", "<4>", "<6>", "<7>" };

#define LOG_LINE_MAX 4096

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

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not one;
 * *cp gets the code point. */
static size_t utf8_sequence(const unsigned char *s, size_t left, uint32_t *cp)
{
        size_t n;
        uint32_t c = s[0], min;
        if (c < 0x80) {
                *cp = c;
                return 1;
        } else if ((c & 0xe0) == 0xc0) {
                n = 2, c &= 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
                n = 3, c &= 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
                n = 4, c &= 0x07, min = 0x10000;
        } else {
                return 0;
        }
        if (left < n)
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                c = (c << 6) | (s[i] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
                return 0;
        *cp = c;
        return n;
}

void log_escape(const char *text, char *out, size_t size)
{
        const unsigned char *s = (const unsigned char *)text;
        size_t len = strlen(text), o = 0;
        if (size == 0)
                return;
        for (size_t i = 0; i < len;) {
                uint32_t cp = 0;
                size_t n = utf8_sequence(s + i, len - i, &cp);
                char esc[16];
                const char *piece;
                size_t piece_len;
                if (n == 0 || cp < 0x20 || cp == 0x7f) {
                        /* A newline or CR would start a forged line (with its
                         * own "<3>" prefix); ESC would drive a terminal. */
                        snprintf(esc, sizeof(esc), "\\x%02x", s[i]);
                        piece = esc, piece_len = 4, n = 1;
                } else if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029) {
                        /* C1 controls (NEL) and Unicode line separators break
                         * lines in some log viewers. */
                        piece_len = (size_t)snprintf(esc, sizeof(esc), "\\u{%04x}", (unsigned)cp);
                        piece = esc;
                } else {
                        piece = (const char *)s + i, piece_len = n;
                }
                if (o + piece_len >= size)
                        break;
                memcpy(out + o, piece, piece_len);
                o += piece_len;
                i += n;
        }
        out[o] = '\0';
}

bool log_stderr_is_journal(void)
{
        /* systemd sets JOURNAL_STREAM to the device and inode of the stream
         * it connected; a stderr redirected since (a shell, a test's file)
         * is not the journal even when the variable was inherited. */
        const char *stream = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;
        if (stream == NULL || sscanf(stream, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
                return false;
        return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* Decided at the first line: stderr does not move under a running daemon. */
static int log_to_journal = -1;

static void log_vwrite(enum log_level level, const char *fmt, va_list ap)
{
        char line[LOG_LINE_MAX];
        char escaped[LOG_LINE_MAX * 2];
        vsnprintf(line, sizeof(line), fmt, ap);
        log_escape(line, escaped, sizeof(escaped));
        if (log_to_journal < 0)
                log_to_journal = log_stderr_is_journal();
        if (log_to_journal) {
                /* The journal stamps each line itself and reads the level. */
                fprintf(stderr, "%s%s: %s\n", level_prefixes[level], level_names[level], escaped);
                return;
        }
        struct timespec now;
        struct tm tm;
        char stamp[32];
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(stderr, "%s.%03ldZ %s: %s\n", stamp, now.tv_nsec / 1000000, level_names[level], escaped);
}

void log_write(enum log_level level, const char *fmt, ...)
{
        if (level > log_max_level)
                return;
        int saved = errno;
        va_list ap;
        va_start(ap, fmt);
        log_vwrite(level, fmt, ap);
        va_end(ap);
        errno = saved;
}

/* --- rate limiting ---------------------------------------------------------- */

#define LIMIT_SLOTS   256
#define LIMIT_KEY_MAX 64

struct limit_slot {
        char key[LIMIT_KEY_MAX];
        double tokens;
        long long refilled_ms;
        unsigned long suppressed;
};

static struct limit_slot limit_slots[LIMIT_SLOTS];

static long long monotonic_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint32_t key_hash(const char *key)
{
        uint32_t h = 2166136261u; /* FNV-1a */
        for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
                h ^= *p;
                h *= 16777619u;
        }
        return h;
}

void log_limited(const char *key, enum log_level level, const char *fmt, ...)
{
        if (level > log_max_level)
                return;
        int saved = errno;
        struct limit_slot *slot = &limit_slots[key_hash(key) % LIMIT_SLOTS];
        long long now = monotonic_ms();
        if (strncmp(slot->key, key, LIMIT_KEY_MAX - 1) != 0 || slot->key[0] == '\0') {
                if (slot->suppressed > 0)
                        log_write(LOG_LEVEL_WARN, "%s: %lu lines suppressed", slot->key, slot->suppressed);
                snprintf(slot->key, sizeof(slot->key), "%s", key);
                slot->tokens = LOG_LIMIT_BURST;
                slot->refilled_ms = now;
                slot->suppressed = 0;
        }
        slot->tokens += (double)(now - slot->refilled_ms) * LOG_LIMIT_PER_SECOND / 1000.0;
        if (slot->tokens > LOG_LIMIT_BURST)
                slot->tokens = LOG_LIMIT_BURST;
        slot->refilled_ms = now;
        if (slot->tokens < 1) {
                slot->suppressed++;
                errno = saved;
                return;
        }
        slot->tokens -= 1;
        if (slot->suppressed > 0) {
                log_write(LOG_LEVEL_WARN, "%s: %lu lines suppressed", slot->key, slot->suppressed);
                slot->suppressed = 0;
        }
        va_list ap;
        va_start(ap, fmt);
        log_vwrite(level, fmt, ap);
        va_end(ap);
        errno = saved;
}

struct log_key log_key_uid(unsigned uid)
{
        struct log_key key;
        snprintf(key.text, sizeof(key.text), "uid %u", uid);
        return key;
}
