/* SPDX-License-Identifier: Apache-2.0 */
/* The one error idiom of nsbox: functions that can fail return 0 or a
 * negative errno and fill an error object with what was being done. */
#pragma once

#include <stdarg.h>

typedef struct nsbox_error_s {
        int errnum;    /* positive errno, 0 when not errno-based */
        char *message; /* "what: strerror" */
} nsbox_error_t;

/* Fill *err (if err and *err is still NULL) and return -errnum (or -EIO
 * when errnum is 0). The strerror text is appended once, here. */
int nsbox_error(nsbox_error_t **err, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int nsbox_error_v(nsbox_error_t **err, int errnum, const char *fmt, va_list ap);

/* A bad input: -EINVAL with a message that is only what is wrong (no
 * "Invalid argument" appended). */
int nsbox_invalid(nsbox_error_t **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An error whose message is complete as written: errnum kept, no strerror
 * text appended (e.g. a refusal that explains itself). */
int nsbox_refuse(nsbox_error_t **err, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefix an existing error with more context: "context: old". */
int nsbox_error_wrap(nsbox_error_t **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void nsbox_error_free(nsbox_error_t **err);
