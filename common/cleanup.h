/* SPDX-License-Identifier: Apache-2.0 */
/* Scope-bound cleanup, as in systemd and crun. */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "error.h"

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void freep(void *p)
{
        free(*(void **)p);
}

static inline void closep(int *fd)
{
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}

static inline void closedirp(DIR **d)
{
        if (*d != NULL)
                closedir(*d);
}

static inline void fclosep(FILE **f)
{
        if (*f != NULL)
                fclose(*f);
}

static inline void nsbox_errorp(nsbox_error_t **err)
{
        nsbox_error_free(err);
}

#define _cleanup_free_     _cleanup_(freep)
#define _cleanup_close_    _cleanup_(closep)
#define _cleanup_error_    _cleanup_(nsbox_errorp)
#define _cleanup_closedir_ _cleanup_(closedirp)
#define _cleanup_fclose_   _cleanup_(fclosep)

/* Hand ownership of a pointer or fd out of a cleanup-scoped variable. */
#define steal_pointer(pp)                       \
        ({                                      \
                __typeof__(*(pp)) _tmp = *(pp); \
                *(pp) = NULL;                   \
                _tmp;                           \
        })

static inline int steal_fd(int *fd)
{
        int tmp = *fd;
        *fd = -1;
        return tmp;
}

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
