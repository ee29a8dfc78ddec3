/* nsbox exec, sh and run: commands with live output and docker's exit codes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"
#include "textenc.h"

#define STDIN_MAX_BYTES (64u << 20) /* the daemon's limit for exec stdin */

enum { OPT_TIMEOUT = CLI_OPT_FIRST_FREE, OPT_CWD, OPT_USER };

struct stream_state {
        char exec_id[64]; /* learnt from the first exec.output, for exec.kill */
};

static void print_stream(const char *method, json_t *params, void *data)
{
        struct stream_state *state = data;
        if (strcmp(method, "exec.output") != 0)
                return;
        json_t *stream = json_object_get(params, "stream");
        json_t *chunk = json_object_get(params, "data");
        const char *id = json_string_value(json_object_get(params, "exec_id"));
        if (id != NULL && state->exec_id[0] == '\0')
                snprintf(state->exec_id, sizeof(state->exec_id), "%s", id);
        if (!json_is_string(stream) || !json_is_string(chunk))
                return;
        bool is_stderr = strcmp(json_string_value(stream), "stderr") == 0;
        if (!is_stderr)
                fflush(stdout);
        cli_write_all(is_stderr ? STDERR_FILENO : STDOUT_FILENO, json_string_value(chunk),
                      json_string_length(chunk));
}

/* Run an exec with streamed output (or, with --json, the whole result at the
 * end); returns the exit code. A signal on signal_fd stops the wait: then
 * *signo is set and the exit code is 128+N. */
static int run_exec(const struct cli *cli, struct client *c, const char *socket_path, json_t *params,
                    int signal_fd, int *signo)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL;
        _cleanup_json_ json_t *error = NULL;
        struct stream_state state = { { 0 } };
        *signo = 0;
        if (!cli->json)
                json_object_set_new(params, "stream", json_true());
        client_set_interrupt_fd(c, signal_fd);
        int r = client_call(c, "sandbox.exec", params, cli->json ? NULL : print_stream, &state, &result,
                            &error, &err);
        client_set_interrupt_fd(c, -1);
        if (r == -EINTR) {
                *signo = cli_caught_signal(signal_fd);
                if (state.exec_id[0] != '\0') {
                        /* Best effort: the command should not outlive the CLI the user stopped. */
                        _cleanup_error_ nsbox_error_t *kill_err = NULL;
                        struct client *k = NULL;
                        if (client_connect(socket_path, &k, &kill_err) == 0) {
                                _cleanup_json_ json_t *kill_params =
                                    json_pack("{s:s, s:i}", "exec_id", state.exec_id, "signal", 9);
                                _cleanup_json_ json_t *ignored = NULL;
                                client_call(k, "exec.kill", kill_params, NULL, NULL, &ignored, NULL,
                                            &kill_err);
                                client_close(k);
                        }
                }
                return 128 + (*signo ? *signo : 2);
        }
        if (r < 0)
                return cli_fail("%s", err->message);
        if (cli->json)
                cli_print_json(result);
        else
                cli_print_network_refused(result);
        fflush(stdout);
        if (json_is_true(json_object_get(result, "timed_out")))
                fprintf(stderr, "nsbox: the command timed out\n");
        else if (json_is_true(json_object_get(result, "oom_killed")))
                fprintf(stderr, "nsbox: the sandbox ran out of memory (OOM kill)\n");
        return cli_exec_exit_code(result);
}

/* An exec option into params: 0 done, 1 not an exec option, else an exit code. */
static int exec_option(json_t *params, int opt, const char *arg)
{
        double seconds;
        switch (opt) {
        case OPT_TIMEOUT:
                if (cli_parse_seconds(arg, &seconds) < 0)
                        return cli_fail("bad --timeout \"%s\" (seconds)", arg);
                json_object_set_new(params, "timeout_seconds", json_real(seconds));
                return 0;
        case OPT_CWD:
                json_object_set_new(params, "cwd", json_string(arg));
                return 0;
        case CLI_OPT_ENV:
                return cli_add_env(params, arg) == 0 ? 0 : EXIT_NSBOX_FAILED;
        case OPT_USER:
                json_object_set_new(params, "user", json_string(arg));
                return 0;
        default:
                return 1;
        }
}

/* Options of exec and sh. Returns -1 to go on, else an exit code. */
static int parse_exec_options(const struct cli *cli, int argc, char **argv, json_t *params)
{
        static const struct option longopts[] = { { "timeout", required_argument, NULL, OPT_TIMEOUT },
                                                  { "cwd", required_argument, NULL, OPT_CWD },
                                                  { "env", required_argument, NULL, CLI_OPT_ENV },
                                                  { "user", required_argument, NULL, OPT_USER },
                                                  { "stdin", no_argument, NULL, 'i' },
                                                  { 0 } };
        bool with_stdin = false;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "i", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                if (opt == 'i') {
                        with_stdin = true;
                        continue;
                }
                int r = exec_option(params, opt, optarg);
                if (r != 0)
                        return r == 1 ? cli_usage_error(cli) : r;
        }
        if (with_stdin) {
                json_t *text = cli_read_text(STDIN_FILENO, "standard input", STDIN_MAX_BYTES,
                                             " (copy binary or big data with nsbox cp)");
                if (text == NULL)
                        return EXIT_NSBOX_FAILED;
                json_object_set_new(params, "stdin", text);
        }
        return -1;
}

static int exec_in_sandbox(const struct cli *cli, json_t *params)
{
        int signal_fd = cli_catch_signals();
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        int signo;
        int r = run_exec(cli, c, cli->socket_path, params, signal_fd, &signo);
        client_close(c);
        return r;
}

int cmd_exec(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        int r = parse_exec_options(cli, argc, argv, params);
        if (r != -1)
                return r;
        if (argc - optind < 2)
                return cli_usage_error(cli);
        const char *id = argv[optind++];
        if (strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return cli_usage_error(cli);
        json_object_set_new(params, "sandbox_id", json_string(id));
        json_object_set_new(params, "argv", cli_argv_to_json(argc - optind, argv + optind));
        return exec_in_sandbox(cli, params);
}

int cmd_sh(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        int r = parse_exec_options(cli, argc, argv, params);
        if (r != -1)
                return r;
        if (argc - optind != 2)
                return cli_usage_error(cli);
        json_object_set_new(params, "sandbox_id", json_string(argv[optind]));
        json_object_set_new(params, "command", json_string(argv[optind + 1]));
        return exec_in_sandbox(cli, params);
}

/* Connect to nsboxd, or start a private one when none listens there. */
static struct client *connect_or_start(const struct cli *cli, struct private_daemon *pd, int signal_fd)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct client *c = NULL;
        int r = client_connect(cli->socket_path, &c, &err);
        if (r == 0)
                return c;
        if (r != -ENOENT && r != -ECONNREFUSED) {
                cli_fail("%s", err->message);
                return NULL;
        }
        if (geteuid() != 0) {
                cli_fail("no nsboxd listens on %s, and running a private one needs root (start nsboxd, "
                         "or run as root)",
                         cli->socket_path);
                return NULL;
        }
        nsbox_error_free(&err);
        r = private_daemon_start(pd, signal_fd, &err);
        if (r == -EINTR)
                return NULL; /* the caller exits 128+N */
        if (r < 0 || client_connect(pd->socket_path, &c, &err) < 0) {
                cli_fail("private nsboxd: %s", err->message);
                return NULL;
        }
        return c;
}

static int remove_sandbox(struct client *c, const char *id)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:b}", "sandbox_id", id, "force", 1);
        _cleanup_json_ json_t *result = NULL;
        if (client_call(c, "sandbox.remove", params, NULL, NULL, &result, NULL, &err) < 0)
                return cli_fail("remove sandbox %s: %s", id, err->message);
        return 0;
}

static int run_in_new_sandbox(const struct cli *cli, struct client *c, const char *socket_path,
                              json_t *create, json_t *exec, int signal_fd)
{
        _cleanup_json_ json_t *created = cli_call(cli, c, "sandbox.create", create);
        if (created == NULL)
                return EXIT_NSBOX_FAILED;
        const char *id = json_string_value(json_object_get(created, "sandbox_id"));
        if (id == NULL)
                return cli_fail("sandbox.create answered without a sandbox_id");
        int signo = cli_caught_signal(signal_fd);
        int status;
        if (signo != 0) {
                status = 128 + signo;
        } else {
                json_object_set_new(exec, "sandbox_id", json_string(id));
                status = run_exec(cli, c, socket_path, exec, signal_fd, &signo);
        }
        if (signo != 0) {
                /* The connection may still wait for the exec's reply: remove on a fresh one. */
                struct client *fresh = NULL;
                _cleanup_error_ nsbox_error_t *err = NULL;
                if (client_connect(socket_path, &fresh, &err) == 0) {
                        remove_sandbox(fresh, id);
                        client_close(fresh);
                } else {
                        cli_fail("remove sandbox %s: %s", id, err->message);
                }
                return status;
        }
        if (remove_sandbox(c, id) != 0 && status == 0)
                status = EXIT_NSBOX_FAILED;
        return status;
}

int cmd_run(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { CLI_CREATE_OPTIONS,
                                                  { "env", required_argument, NULL, CLI_OPT_ENV },
                                                  { "timeout", required_argument, NULL, OPT_TIMEOUT },
                                                  { "cwd", required_argument, NULL, OPT_CWD },
                                                  { "user", required_argument, NULL, OPT_USER },
                                                  { 0 } };
        _cleanup_json_ json_t *create = json_object();
        _cleanup_json_ json_t *exec = json_object();
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                int r = exec_option(exec, opt, optarg);
                if (r == 1)
                        r = cli_create_option(create, opt, optarg);
                if (r != 0)
                        return r == 1 ? cli_usage_error(cli) : r;
        }
        if (optind < argc && strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return cli_usage_error(cli);
        json_object_set_new(exec, "argv", cli_argv_to_json(argc - optind, argv + optind));

        int signal_fd = cli_catch_signals();
        struct private_daemon pd = { .pid = -1 };
        struct client *c = connect_or_start(cli, &pd, signal_fd);
        int status = EXIT_NSBOX_FAILED;
        if (c == NULL) {
                int signo = cli_caught_signal(signal_fd);
                if (signo != 0)
                        status = 128 + signo;
        } else {
                status = run_in_new_sandbox(cli, c, pd.socket_path ? pd.socket_path : cli->socket_path,
                                            create, exec, signal_fd);
                client_close(c);
        }
        private_daemon_stop(&pd);
        return status;
}
