/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's request: parameter checks, environment, payload and audit text. */
#include "exec_params.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "daemon.h"
#include "json_cleanup.h"
#include "params.h"
#include "policy.h"
#include "textenc.h"

static bool has_nul(json_t *s)
{
        return memchr(json_string_value(s), '\0', json_string_length(s)) != NULL;
}

int exec_params_parse(json_t *p, struct exec_params *out, nsbox_error_t **err)
{
        static const char *const known[] = { "sandbox_id",
                                             "argv",
                                             "command",
                                             "cwd",
                                             "env",
                                             "stdin",
                                             "user",
                                             "timeout_seconds",
                                             "stream",
                                             "background",
                                             "encoding",
                                             "max_output_bytes",
                                             "tty",
                                             "rows",
                                             "cols",
                                             "stdin_stream",
                                             "notify_started",
                                             NULL };
        int r = params_check_known(p, known, "", err);
        if (r < 0)
                return r;
        memset(out, 0, sizeof(*out));
        out->cwd = "/workspace";
        out->max_output = EXEC_DEFAULT_MAX_OUTPUT;

        json_t *argv = json_object_get(p, "argv");
        json_t *command = json_object_get(p, "command");
        if (argv != NULL && json_is_null(argv))
                argv = NULL;
        if (command != NULL && json_is_null(command))
                command = NULL;
        if ((argv == NULL) == (command == NULL))
                return nsbox_error(err, EINVAL,
                                   "give exactly one of argv (array of strings) or command (string)");
        size_t total = 0;
        if (argv != NULL) {
                if (!json_is_array(argv) || json_array_size(argv) == 0)
                        return nsbox_invalid(err, "argv must be a non-empty array of strings");
                size_t i;
                json_t *a;
                json_array_foreach(argv, i, a)
                {
                        if (!json_is_string(a))
                                return nsbox_invalid(err, "argv[%zu] must be a string", i);
                        if (has_nul(a))
                                return nsbox_invalid(err, "argv[%zu] contains a NUL byte", i);
                        total += json_string_length(a) + 1;
                }
                if (json_string_length(json_array_get(argv, 0)) == 0)
                        return nsbox_invalid(err, "argv[0] must not be empty");
                out->argv = argv;
        } else {
                if (!json_is_string(command) || json_string_length(command) == 0)
                        return nsbox_invalid(err, "command must be a non-empty string");
                if (has_nul(command))
                        return nsbox_invalid(err, "command contains a NUL byte");
                out->command = json_string_value(command);
                total += json_string_length(command);
        }
        json_t *cwd = json_object_get(p, "cwd");
        if (cwd != NULL && !json_is_null(cwd)) {
                if (!json_is_string(cwd) || json_string_length(cwd) == 0 || has_nul(cwd) ||
                    json_string_length(cwd) > 4095)
                        return nsbox_invalid(err, "cwd must be a path");
                out->cwd = json_string_value(cwd);
        }
        json_t *env = json_object_get(p, "env");
        if (env != NULL && !json_is_null(env)) {
                r = policy_check_env(env, "env", err);
                if (r < 0)
                        return r;
                out->env = env;
                const char *k;
                json_t *val;
                json_object_foreach(env, k, val) total += strlen(k) + json_string_length(val) + 2;
        }
        if (total > EXEC_MAX_ARGS_BYTES)
                return nsbox_error(err, E2BIG,
                                   "argv, command and env together exceed %u bytes; write large "
                                   "programs to a file first",
                                   EXEC_MAX_ARGS_BYTES);
        json_t *in = json_object_get(p, "stdin");
        if (in != NULL && !json_is_null(in)) {
                if (!json_is_string(in))
                        return nsbox_invalid(err, "stdin must be a string");
                if (json_string_length(in) > EXEC_MAX_STDIN_BYTES)
                        return nsbox_error(err, E2BIG, "stdin exceeds %u bytes", EXEC_MAX_STDIN_BYTES);
                out->stdin_text = json_string_value(in);
                out->stdin_len = json_string_length(in);
        }
        json_t *user = json_object_get(p, "user");
        if (user != NULL && !json_is_null(user)) {
                if (!json_is_string(user) || (strcmp(json_string_value(user), "root") != 0 &&
                                              strcmp(json_string_value(user), "sandbox") != 0))
                        return nsbox_invalid(err, "user must be \"sandbox\" or \"root\"");
                out->root = strcmp(json_string_value(user), "root") == 0;
        }
        if ((r = params_get_timeout(p, 0, &out->timeout_s, err)) < 0) /* 0: not asked */
                return r;
        static const char *const flags[] = { "stream", "background", "tty", "stdin_stream",
                                             "notify_started" };
        bool *flag_out[] = { &out->stream, &out->background, &out->tty, &out->stdin_stream,
                             &out->notify_started };
        for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
                json_t *f = json_object_get(p, flags[i]);
                if (f != NULL && !json_is_null(f)) {
                        if (!json_is_boolean(f))
                                return nsbox_invalid(err, "%s must be a boolean", flags[i]);
                        *flag_out[i] = json_is_true(f);
                }
        }
        if (out->stream && out->background)
                return nsbox_invalid(err, "stream and background exclude each other");
        if ((out->tty || out->stdin_stream) && !out->stream && !out->background)
                return nsbox_invalid(err, "%s needs stream: true or background: true",
                                     out->tty ? "tty" : "stdin_stream");
        /* A terminal's input is always fed with exec.stdin. */
        out->stdin_stream = out->stdin_stream || out->tty;
        /* A background or terminal exec (a server, an interactive shell) has
         * no timeout unless asked, but the daemon's cap still holds. */
        if (out->timeout_s == 0)
                out->timeout_s =
                    out->background || out->tty ? PARAMS_TIMEOUT_MAX_S : PARAMS_TIMEOUT_DEFAULT_S;
        out->rows = EXEC_TTY_ROWS;
        out->cols = EXEC_TTY_COLS;
        static const char *const sizes[] = { "rows", "cols" };
        unsigned short *size_out[] = { &out->rows, &out->cols };
        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
                json_t *v = json_object_get(p, sizes[i]);
                if (v == NULL || json_is_null(v))
                        continue;
                if (!out->tty)
                        return nsbox_invalid(err, "%s is for tty: true only", sizes[i]);
                if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65535)
                        return nsbox_invalid(err, "%s must be an integer from 1 to 65535", sizes[i]);
                *size_out[i] = (unsigned short)json_integer_value(v);
        }
        if ((r = params_get_encoding(p, &out->base64, err)) < 0)
                return r;
        uint64_t max_output = out->max_output;
        if ((r = params_get_size(p, "max_output_bytes", "max_output_bytes", "--max-output", 0,
                                 EXEC_MAX_MAX_OUTPUT, &max_output, err)) < 0)
                return r;
        out->max_output = (size_t)max_output;
        return 0;
}

/* Append "s\0" to a growing buffer. */
static int payload_add(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
        if (*len + n + 1 > *cap) {
                size_t c = *cap ? *cap : 4096;
                while (c < *len + n + 1)
                        c *= 2;
                char *grown = realloc(*buf, c);
                if (grown == NULL)
                        return -ENOMEM;
                *buf = grown;
                *cap = c;
        }
        memcpy(*buf + *len, s, n);
        (*buf)[*len + n] = '\0';
        *len += n + 1;
        return 0;
}

static int payload_add_env(char **buf, size_t *len, size_t *cap, const char *key, const char *value,
                           unsigned *count)
{
        _cleanup_free_ char *entry = NULL;
        if (asprintf(&entry, "%s=%s", key, value) < 0)
                return -ENOMEM;
        (*count)++;
        return payload_add(buf, len, cap, entry, strlen(entry));
}

/* How many threads a compute library's pool should have in the sandbox:
 * its cpus limit rounded up, at most the host's CPUs. OpenBLAS, OpenMP and
 * MKL size their pools by the host's CPUs, which the cgroup quota does not
 * change, and their idle workers spin: in a 1-cpu sandbox on this 2-core
 * host, OpenBLAS's second thread took quota from numpy's main thread and a
 * matplotlib savefig took 108-157 ms instead of 55-70 ms. */
unsigned exec_thread_pool_size(const struct sandbox *sb)
{
        unsigned host = nsboxd.config.host_cpus;
        double cpus = sb->policy.limits.cpus; /* 0.01 to POLICY_MAX_CPUS */
        unsigned n = (unsigned)cpus;
        if (n < cpus || n == 0)
                n++;
        return n > host ? host : n;
}

/* The environment: safe defaults, then the sandbox's env, then the exec's. */
static int build_env(const struct sandbox *sb, const struct exec_params *p, char **buf, size_t *len,
                     size_t *cap, unsigned *count)
{
        char threads[16];
        snprintf(threads, sizeof(threads), "%u", exec_thread_pool_size(sb));
        _cleanup_json_ json_t *env =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "PATH",
                      "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME",
                      p->root ? "/root" : "/workspace", "USER", p->root ? "root" : "sandbox", "LOGNAME",
                      p->root ? "root" : "sandbox", "LANG", "C.UTF-8", "MPLBACKEND", "Agg", "MPLCONFIGDIR",
                      "/tmp/.matplotlib", "PYTHONDONTWRITEBYTECODE", "1", "OPENBLAS_NUM_THREADS", threads,
                      "OMP_NUM_THREADS", threads, "MKL_NUM_THREADS", threads);
        if (env == NULL)
                return -ENOMEM;
        if (sb->policy.env)
                json_object_update(env, sb->policy.env);
        if (p->env)
                json_object_update(env, p->env);
        const char *key;
        json_t *value;
        json_object_foreach(env, key, value)
        {
                int r = payload_add_env(buf, len, cap, key, json_string_value(value), count);
                if (r < 0)
                        return r;
        }
        return 0;
}

int exec_payload_build(const struct sandbox *sb, const struct exec_params *p, char **payload, size_t *len,
                       unsigned *argc, unsigned *envc)
{
        size_t cap = 0;
        int r;
        if ((r = payload_add(payload, len, &cap, p->cwd, strlen(p->cwd))) < 0)
                return r;
        if (p->argv != NULL) {
                size_t i;
                json_t *a;
                json_array_foreach(p->argv, i, a)
                {
                        if ((r = payload_add(payload, len, &cap, json_string_value(a),
                                             json_string_length(a))) < 0)
                                return r;
                        (*argc)++;
                }
        } else {
                const char *sh[] = { "/bin/sh", "-c", p->command };
                for (size_t i = 0; i < ARRAY_SIZE(sh); i++) {
                        if ((r = payload_add(payload, len, &cap, sh[i], strlen(sh[i]))) < 0)
                                return r;
                        (*argc)++;
                }
        }
        return build_env(sb, p, payload, len, &cap, envc);
}

/* What the audit line says of an exec's request: argv as a JSON array
 * (ASCII only, control characters as \u escapes, so nothing in an argument
 * can forge a line or drive a terminal), cut at EXEC_AUDIT_ARGV_BYTES, then
 * its cwd and user. */
char *exec_command_text(const struct exec_params *p)
{
        char *text = malloc(EXEC_COMMAND_TEXT_BYTES + 1);
        if (text == NULL)
                return NULL;
        size_t len = 0;
        size_t count = p->argv != NULL ? json_array_size(p->argv) : 1;
        for (size_t i = 0; i < count && len < EXEC_COMMAND_TEXT_BYTES; i++) {
                const char *word =
                    p->argv != NULL ? json_string_value(json_array_get(p->argv, i)) : p->command;
                if (i > 0)
                        text[len++] = ' ';
                for (; word != NULL && *word != '\0' && len < EXEC_COMMAND_TEXT_BYTES; word++)
                        text[len++] = *word == '\n' || *word == '\t' || *word == '\r' ? ' ' : *word;
        }
        if (len >= EXEC_COMMAND_TEXT_BYTES) {
                /* Cut between characters: the text goes out as a JSON string. */
                len = utf8_complete_prefix(text, EXEC_COMMAND_TEXT_BYTES - 3);
                memcpy(text + len, "...", 3);
                len += 3;
        }
        text[len] = '\0';
        return text;
}

char *exec_audit_text(const struct exec_params *p)
{
        _cleanup_json_ json_t *argv =
            p->argv != NULL ? json_incref(p->argv) : json_pack("[s, s, s]", "/bin/sh", "-c", p->command);
        _cleanup_json_ json_t *cwd = json_string(p->cwd);
        _cleanup_free_ char *args = argv ? json_dumps(argv, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        _cleanup_free_ char *dir = cwd ? json_dumps(cwd, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
        if (args != NULL && strlen(args) > EXEC_AUDIT_ARGV_BYTES)
                strcpy(args + EXEC_AUDIT_ARGV_BYTES - 3, "...");
        char *text = NULL;
        if (asprintf(&text, "user=%s cwd=%s timeout_s=%u argv=%s%s%s", p->root ? "root" : "sandbox",
                     dir ? dir : "?", p->timeout_s, args ? args : "?", p->tty ? " tty" : "",
                     p->background ? " background" : "") < 0)
                return NULL;
        return text;
}
