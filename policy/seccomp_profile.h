/* SPDX-License-Identifier: Apache-2.0 */
/* Seccomp profiles in the OCI/Docker JSON format, compiled to classic BPF.
 *
 * The daemon compiles each profile once (libseccomp, jansson) and caches the
 * program; the sandbox child only hands the ready-made instructions to the
 * kernel, so nothing on the child's side of fork() allocates or parses. */
#pragma once

#include <linux/filter.h>

#include "error.h"

struct seccomp_program {
        struct sock_filter *filter; /* malloc'd */
        unsigned short len;         /* number of instructions */
};

/* Parse and compile the profile at path. On error returns -errno and *err
 * names the file and the field, e.g. "seccomp profile /x/default.json:
 * syscalls[3].action: unknown action \"SCMP_ACT_FOO\"". */
int seccomp_profile_compile_file(const char *path, struct seccomp_program *out, nsbox_error_t **err);

/* Same, from a JSON text already in memory; `name` is used in messages. */
int seccomp_profile_compile_string(const char *name, const char *json_text, struct seccomp_program *out,
                                   nsbox_error_t **err);

void seccomp_program_free(struct seccomp_program *prog);

/* Install the program on the calling thread with seccomp(SECCOMP_SET_MODE_FILTER).
 * no_new_privs (or CAP_SYS_ADMIN) is the caller's job. Async-signal-safe: it is
 * meant for a forked child right before execve, so it only makes syscalls.
 * Returns 0 or -errno. */
int seccomp_program_load(const struct seccomp_program *prog);
