/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox shell: persistent shell sessions (shell.create, shell.run,
 * shell.check, shell.list, shell.terminate). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"

enum { OPT_TIMEOUT = CLI_OPT_FIRST_FREE };

static void print_notes(const json_t *result)
{
        /* nsboxd says the timeout itself on stderr (with its `status`): then
         * only how to raise it is ours to add. */
        if (json_is_true(json_object_get(result, "timed_out")) &&
            json_is_string(json_object_get(result, "status")))
                fprintf(stderr, "nsbox: raise it with --timeout S (30 s by default)\n");
        else if (json_is_true(json_object_get(result, "timed_out")))
                fprintf(stderr, "nsbox: the command timed out and was interrupted; the shell and its state "
                                "remain (--timeout S to allow more; 30 s by default)\n");
        if (json_is_true(json_object_get(result, "truncated")))
                fprintf(stderr, "nsbox: output truncated at the daemon's cap (max_output_bytes, 1 MiB by "
                                "default)\n");
        const char *note = json_string_value(json_object_get(result, "note"));
        if (note != NULL)
                fprintf(stderr, "nsbox: %s\n", note);
}

/* cli_call with params taken over. */
static json_t *call_owned(const struct cli *cli, struct client *c, const char *method, json_t *params)
{
        _cleanup_json_ json_t *owned = params;
        return cli_call(cli, c, method, owned);
}

/* shell.create NAME in ID, or reuse it when it exists; NULL name: a new one.
 * The session's name (malloc'd), or NULL after printing why. */
static char *session_open(const struct cli *cli, struct client *c, const char *id, const char *name)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *error = NULL, *result = NULL;
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", id);
        if (name != NULL)
                json_object_set_new(params, "name", json_string(name));
        if (client_call(c, "shell.create", params, NULL, NULL, &result, &error, &err) == 0)
                return strdup(json_string_value(json_object_get(result, "session")));
        const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
        if (name != NULL && kind != NULL && strcmp(kind, "exists") == 0)
                return strdup(name);
        if (cli_error_is_missing_method(error))
                cli_fail("this nsboxd does not offer shell sessions yet (%s)", err->message);
        else
                cli_fail("%s", err->message);
        return NULL;
}

static json_t *session_run(const struct cli *cli, struct client *c, const char *id, const char *name,
                           const char *command, double timeout, bool blocking)
{
        _cleanup_json_ json_t *params = json_pack("{s:s, s:s, s:s, s:b}", "sandbox_id", id, "session", name,
                                                  "command", command, "blocking", blocking);
        if (timeout > 0)
                json_object_set_new(params, "timeout_seconds", json_real(timeout));
        return cli_call(cli, c, "shell.run", params);
}

/* nsbox shell ID [NAME]: each line of standard input is one command. */
static int shell_lines(const struct cli *cli, struct client *c, const char *id, const char *name,
                       double timeout)
{
        _cleanup_free_ char *session = session_open(cli, c, id, name);
        if (session == NULL)
                return EXIT_NSBOX_FAILED;
        bool tty = isatty(STDIN_FILENO);
        if (tty)
                fprintf(stderr, "nsbox: shell session %s in %s; one command per line, Ctrl-D ends\n", session,
                        id);
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        int code = 0;
        for (;;) {
                if (tty)
                        fprintf(stderr, "%s$ ", session);
                ssize_t n = getline(&line, &cap, stdin);
                if (n < 0)
                        break;
                if (n > 0 && line[n - 1] == '\n')
                        line[--n] = '\0';
                if (n == 0)
                        continue;
                _cleanup_json_ json_t *result = session_run(cli, c, id, session, line, timeout, true);
                if (result == NULL)
                        return EXIT_NSBOX_FAILED;
                if (cli->json)
                        cli_print_json(result);
                else
                        cli_print_text_output(result), print_notes(result);
                code = cli_exec_exit_code(result);
                if (json_is_true(json_object_get(result, "shell_exited")))
                        return code;
        }
        /* A session made for this run ends with it; a named one stays. */
        if (name == NULL) {
                _cleanup_json_ json_t *params = json_pack("{s:s, s:s}", "sandbox_id", id, "session", session);
                _cleanup_json_ json_t *r = cli_call(cli, c, "shell.terminate", params);
        }
        return code;
}

int cmd_shell(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "timeout", required_argument, NULL, OPT_TIMEOUT },
                                                  { "detach", no_argument, NULL, 'd' },
                                                  { 0 } };
        const char *sub = argc > 1 ? argv[1] : NULL;
        bool known_sub = sub != NULL && (strcmp(sub, "run") == 0 || strcmp(sub, "ls") == 0 ||
                                         strcmp(sub, "rm") == 0 || strcmp(sub, "check") == 0);
        if (known_sub) {
                argc--;
                argv++;
        }
        double timeout = 0;
        bool detach = false;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "d", longopts)) != -1) {
                switch (opt) {
                case OPT_TIMEOUT:
                        if (cli_parse_seconds(optarg, &timeout) < 0)
                                return cli_fail("bad --timeout \"%s\" (seconds)", optarg);
                        break;
                case 'd':
                        detach = true;
                        break;
                default:
                        return cli_opt_exit(opt);
                }
        }
        int nargs = argc - optind;
        char **args = argv + optind;
        if (!known_sub && (nargs < 1 || nargs > 2))
                return cli_usage_error(cli);
        if (known_sub && strcmp(sub, "ls") == 0 && nargs != 1)
                return cli_usage_error(cli);
        if (known_sub && (strcmp(sub, "rm") == 0 || strcmp(sub, "check") == 0) && nargs != 2)
                return cli_usage_error(cli);
        if (known_sub && strcmp(sub, "run") == 0 && nargs < 3)
                return cli_usage_error(cli);
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        int code = 0;
        if (!known_sub) {
                code = shell_lines(cli, c, args[0], nargs == 2 ? args[1] : NULL, timeout);
        } else if (strcmp(sub, "ls") == 0) {
                _cleanup_json_ json_t *r =
                    call_owned(cli, c, "shell.list", json_pack("{s:s}", "sandbox_id", args[0]));
                if (r == NULL) {
                        code = EXIT_NSBOX_FAILED;
                } else if (cli->json) {
                        cli_print_json(r);
                } else {
                        size_t i;
                        json_t *s;
                        printf("%-20s %-8s %s\n", "SESSION", "STATE", "CWD");
                        json_array_foreach(json_object_get(r, "sessions"), i, s)
                            printf("%-20s %-8s %s\n", json_string_value(json_object_get(s, "session")),
                                   json_is_true(json_object_get(s, "running")) ? "running" : "idle",
                                   json_string_value(json_object_get(s, "cwd")));
                }
        } else if (strcmp(sub, "rm") == 0) {
                _cleanup_json_ json_t *r =
                    call_owned(cli, c, "shell.terminate",
                               json_pack("{s:s, s:s}", "sandbox_id", args[0], "session", args[1]));
                code = r != NULL ? 0 : EXIT_NSBOX_FAILED;
        } else if (strcmp(sub, "check") == 0) {
                _cleanup_json_ json_t *r =
                    call_owned(cli, c, "shell.check",
                               json_pack("{s:s, s:s}", "sandbox_id", args[0], "session", args[1]));
                if (r == NULL) {
                        code = EXIT_NSBOX_FAILED;
                } else if (cli->json) {
                        cli_print_json(r);
                } else {
                        cli_print_text_output(r);
                        print_notes(r);
                        if (json_is_true(json_object_get(r, "running")))
                                fprintf(stderr, "nsbox: still running\n");
                        code = json_is_true(json_object_get(r, "running")) ? 0 : cli_exec_exit_code(r);
                }
        } else {
                /* run ID NAME [--] WORD...: the words joined by spaces are the command line. */
                int first = 2;
                if (first < nargs && strcmp(args[first], "--") == 0) {
                        first++;
                } else if (first < nargs && args[first][0] == '-') {
                        /* An option put after the operands (shell run ID NAME -d -- CMD)
                         * ran "-d -- CMD" in bash. */
                        client_close(c);
                        return cli_fail("shell run: %s after ID NAME is no command line: nsbox's options go "
                                        "before ID (nsbox shell run %s ID NAME -- CMD); a command line "
                                        "starting with - goes after --",
                                        args[first], args[first]);
                }
                if (first >= nargs) {
                        client_close(c);
                        return cli_usage_error(cli);
                }
                size_t len = 0;
                for (int i = first; i < nargs; i++)
                        len += strlen(args[i]) + 1;
                _cleanup_free_ char *command = calloc(1, len + 1);
                _cleanup_free_ char *session = session_open(cli, c, args[0], args[1]);
                if (command == NULL || session == NULL) {
                        client_close(c);
                        return EXIT_NSBOX_FAILED;
                }
                for (int i = first; i < nargs; i++) {
                        if (i > first)
                                strcat(command, " ");
                        strcat(command, args[i]);
                }
                _cleanup_json_ json_t *r = session_run(cli, c, args[0], session, command, timeout, !detach);
                if (r == NULL) {
                        code = EXIT_NSBOX_FAILED;
                } else if (cli->json) {
                        cli_print_json(r);
                        code = detach ? 0 : cli_exec_exit_code(r);
                } else if (detach) {
                        printf("%s\n", json_string_value(json_object_get(r, "command_id")));
                } else {
                        cli_print_text_output(r);
                        print_notes(r);
                        code = cli_exec_exit_code(r);
                }
        }
        client_close(c);
        return code;
}
