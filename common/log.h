/* One line per event to stderr (the journal under systemd). */
#pragma once

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

extern enum log_level log_max_level;

int log_parse_level(const char *name, enum log_level *out);
void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...)                                           \
        do {                                                     \
                if (log_max_level >= LOG_LEVEL_DEBUG)            \
                        log_write(LOG_LEVEL_DEBUG, __VA_ARGS__); \
        } while (0)
