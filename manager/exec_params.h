/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's request, checked and turned into what the sandbox's supervisor
 * runs: parameters, environment, payload, and the audit text. No I/O: what
 * is here can be tested without a sandbox. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "sandbox.h"

#define EXEC_DEFAULT_MAX_OUTPUT (1u << 20)
#define EXEC_MAX_MAX_OUTPUT     (256u << 20)
#define EXEC_MAX_ARGS_BYTES     (1u << 20)
#define EXEC_MAX_STDIN_BYTES    (64u << 20)
/* The audit line's argv, escaped: beyond this it is cut ("..."). */
#define EXEC_AUDIT_ARGV_BYTES 1024
#define EXEC_TTY_ROWS         24
#define EXEC_TTY_COLS         80

/* A parsed exec request. */
struct exec_params {
        json_t *argv; /* borrowed array of strings */
        const char *command;
        const char *cwd;
        json_t *env; /* borrowed object */
        const char *stdin_text;
        size_t stdin_len;
        bool root;
        unsigned timeout_s;
        bool stream, background, base64;
        bool tty, stdin_stream;
        bool notify_started; /* a foreground exec's client hears exec.started too (its id, to take it back) */
        unsigned short rows, cols;
        size_t max_output;
};

/* The params of sandbox.exec (or an internal caller's): checked, with their
 * defaults; `out` borrows from `p`. */
int exec_params_parse(json_t *p, struct exec_params *out, nsbox_error_t **err);
/* The exec request the supervisor reads: cwd, argv and env as "s\0" strings
 * (counted in argc and envc). 0 or -ENOMEM. */
int exec_payload_build(const struct sandbox *sb, const struct exec_params *p, char **payload, size_t *len,
                       unsigned *argc, unsigned *envc);
/* Threads a compute library's pool should have in the sandbox. */
unsigned exec_thread_pool_size(const struct sandbox *sb);
/* The command as exec.list shows it: the shell command, or argv joined by
 * spaces, one line, cut at EXEC_COMMAND_TEXT_BYTES (malloc'd, or NULL). */
#define EXEC_COMMAND_TEXT_BYTES 256
char *exec_command_text(const struct exec_params *p);
/* What the audit line says of an exec's request (malloc'd, or NULL). */
char *exec_audit_text(const struct exec_params *p);
