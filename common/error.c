/* SPDX-License-Identifier: Apache-2.0 */
/* The error object: nsbox_error() fills it, the edge appends the errno text once. */
#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nsbox_error_v(nsbox_error_t **err, int errnum, const char *fmt, va_list ap)
{
        int ret = errnum > 0 ? -errnum : -EIO;

        if (err == NULL || *err != NULL)
                return ret;

        nsbox_error_t *e = calloc(1, sizeof(*e));
        if (e == NULL)
                return ret;
        e->errnum = errnum;

        char *what = NULL;
        if (vasprintf(&what, fmt, ap) < 0)
                what = NULL;
        if (what != NULL && errnum > 0) {
                if (asprintf(&e->message, "%s: %s", what, strerror(errnum)) < 0)
                        e->message = NULL;
                free(what);
        } else {
                e->message = what;
        }
        *err = e;
        return ret;
}

int nsbox_error(nsbox_error_t **err, int errnum, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int ret = nsbox_error_v(err, errnum, fmt, ap);
        va_end(ap);
        return ret;
}

static int refuse_v(nsbox_error_t **err, int errnum, const char *fmt, va_list ap)
{
        if (err != NULL && *err == NULL) {
                nsbox_error_v(err, 0, fmt, ap);
                if (*err != NULL)
                        (*err)->errnum = errnum;
        }
        return errnum > 0 ? -errnum : -EIO;
}

int nsbox_invalid(nsbox_error_t **err, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = refuse_v(err, EINVAL, fmt, ap);
        va_end(ap);
        return r;
}

int nsbox_refuse(nsbox_error_t **err, int errnum, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = refuse_v(err, errnum, fmt, ap);
        va_end(ap);
        return r;
}

int nsbox_error_wrap(nsbox_error_t **err, const char *fmt, ...)
{
        if (err == NULL || *err == NULL)
                return -EIO;
        nsbox_error_t *e = *err;
        int ret = e->errnum > 0 ? -e->errnum : -EIO;

        char *context = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&context, fmt, ap);
        va_end(ap);
        if (n < 0)
                return ret;

        char *joined = NULL;
        if (asprintf(&joined, "%s: %s", context, e->message ? e->message : "error") >= 0) {
                free(e->message);
                e->message = joined;
        }
        free(context);
        return ret;
}

void nsbox_error_free(nsbox_error_t **err)
{
        if (err == NULL || *err == NULL)
                return;
        free((*err)->message);
        free(*err);
        *err = NULL;
}
