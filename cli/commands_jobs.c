/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox ps, logs and kill: the background execs of `nsbox exec -d`
 * (exec.list, exec.status, exec.output, exec.kill). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"

/* How often logs -f asks for new output: the daemon pushes nothing for
 * background execs. */
#define LOGS_POLL_MS 200

int cmd_ps(const struct cli *cli, int argc, char **argv)
{
        bool quiet;
        int exit_code;
        if (!cli_flag_and_args(cli, argc, argv, "quiet", 'q', &quiet, 1, 1, &exit_code))
                return exit_code;
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", argv[optind]);
        _cleanup_json_ json_t *result = NULL;
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int r = client_call(c, "exec.list", params, NULL, NULL, &result, &error, &err);
        client_close(c);
        if (r < 0)
                return cli_fail_json(cli, error, "%s", err->message);
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        if (!quiet)
                printf("%-36s  %-17s  %-24s  %s\n", "EXEC ID", "STATUS", "STARTED", "COMMAND");
        size_t i;
        json_t *ex;
        json_array_foreach(json_object_get(result, "execs"), i, ex)
        {
                json_t *code = json_object_get(ex, "exit_code");
                json_t *sig = json_object_get(ex, "signal");
                const char *how = json_string_value(json_object_get(ex, "status"));
                char status[64];
                if (json_is_true(json_object_get(ex, "running")))
                        snprintf(status, sizeof(status), "running");
                else if (json_is_integer(code))
                        snprintf(status, sizeof(status), "exited %lld", (long long)json_integer_value(code));
                else if (how != NULL && strcmp(how, "timeout") == 0)
                        snprintf(status, sizeof(status), "ended (timeout)");
                else if (how != NULL && strcmp(how, "signaled") == 0 && json_is_integer(sig))
                        snprintf(status, sizeof(status), "ended (signal %lld)",
                                 (long long)json_integer_value(sig));
                else
                        snprintf(status, sizeof(status), "ended (killed)");
                const char *id = json_string_value(json_object_get(ex, "exec_id"));
                const char *started = json_string_value(json_object_get(ex, "started_at"));
                const char *command = json_string_value(json_object_get(ex, "command"));
                if (quiet)
                        printf("%s\n", id);
                else
                        printf("%-36s  %-17s  %-24s  %s\n", id, status, started ? started : "-",
                               command ? command : "-");
        }
        return 0;
}

/* Sleep `ms`, or less when a signal waits on signal_fd: then its number. */
static int logs_pause(int signal_fd, int ms)
{
        struct pollfd p = { .fd = signal_fd, .events = POLLIN };
        if (signal_fd < 0)
                return usleep((useconds_t)ms * 1000), 0;
        if (poll(&p, 1, ms) > 0)
                return cli_caught_signal(signal_fd);
        return 0;
}

/* Bytes the daemon dropped between a long job's head and tail, said where
 * they were, on stderr. */
static bool logs_say_dropped(const json_t *out)
{
        bool said = false;
        for (int i = 0; i < 2; i++) {
                const char *name = i ? "stderr" : "stdout";
                json_int_t n = json_integer_value(json_object_get(json_object_get(out, "dropped"), name));
                if (n <= 0)
                        continue;
                fflush(stdout);
                fprintf(stderr,
                        "\nnsbox: ... %lld bytes of %s dropped here (the exec keeps the first "
                        "--max-output bytes and the last half as many of each stream) ...\n",
                        (long long)n, name);
                said = true;
        }
        return said;
}

int cmd_logs(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "follow", no_argument, NULL, 'f' },
                                                  { "tail", required_argument, NULL, 'n' },
                                                  { 0 } };
        bool follow = false;
        long long tail = -1;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "fn:", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                if (opt == 'f') {
                        follow = true;
                        continue;
                }
                char *end;
                tail = strtoll(optarg, &end, 10);
                if (end == optarg || *end != '\0' || tail < 0)
                        return cli_fail("bad --tail \"%s\" (a number of lines)", optarg);
        }
        if (argc - optind != 2)
                return cli_usage_error(cli);
        const char *exec_id = argv[optind + 1];
        int signal_fd = follow ? cli_catch_signals() : -1;
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *params = json_pack("{s:s}", "exec_id", exec_id);
        /* The status says how the output was asked for (base64 by nsbox exec -d)
         * and what the cap is. */
        _cleanup_json_ json_t *status = NULL;
        _cleanup_json_ json_t *status_error = NULL;
        _cleanup_error_ nsbox_error_t *status_err = NULL;
        if (client_call(c, "exec.status", params, NULL, NULL, &status, &status_error, &status_err) < 0) {
                client_close(c);
                return cli_fail_json(cli, status_error, "%s", status_err->message);
        }
        const char *encoding = json_string_value(json_object_get(status, "encoding"));
        bool base64 = encoding != NULL && strcmp(encoding, "base64") == 0;
        json_int_t since_out = 0, since_err = 0;
        bool said_dropped = false;
        int r = 0;
        for (;;) {
                _cleanup_json_ json_t *out = NULL;
                _cleanup_json_ json_t *error = NULL;
                _cleanup_error_ nsbox_error_t *err = NULL;
                /* --tail: the last lines first, then on from where they end. */
                if (tail >= 0)
                        json_object_set_new(params, "tail", json_integer(tail));
                else
                        json_object_set_new(
                            params, "since",
                            json_pack("{s:I, s:I}", "stdout", since_out, "stderr", since_err));
                tail = -1;
                if (client_call(c, "exec.output", params, NULL, NULL, &out, &error, &err) < 0) {
                        r = cli_fail_json(cli, error, "%s", err->message);
                        break;
                }
                json_object_del(params, "tail");
                if (cli->json) {
                        cli_print_json(out);
                } else {
                        said_dropped = logs_say_dropped(out) || said_dropped;
                        cli_write_output(STDOUT_FILENO, json_object_get(out, "stdout"), base64);
                        cli_write_output(STDERR_FILENO, json_object_get(out, "stderr"), base64);
                }
                json_t *next = json_object_get(out, "next");
                since_out = json_integer_value(json_object_get(next, "stdout"));
                since_err = json_integer_value(json_object_get(next, "stderr"));
                bool running = json_is_true(json_object_get(out, "running"));
                if (json_is_true(json_object_get(out, "more")))
                        continue; /* the tail after the head, at once */
                if (!follow || !running) {
                        if (!running && !cli->json && !said_dropped &&
                            json_is_true(json_object_get(out, "truncated")))
                                fprintf(stderr, "nsbox: output truncated (the exec keeps its first bytes, "
                                                "1 MiB unless started with --max-output BYTES)\n");
                        break;
                }
                int sig = logs_pause(signal_fd, LOGS_POLL_MS);
                if (sig != 0) {
                        r = 128 + sig; /* logs -f stops; the exec runs on */
                        break;
                }
        }
        client_close(c);
        return r;
}

/* "INT", "SIGINT" or "2" into a signal number; -1 if none. */
static int parse_signal(const char *name)
{
        static const struct {
                const char *name;
                int number;
        } names[] = { { "HUP", SIGHUP },   { "INT", SIGINT },   { "QUIT", SIGQUIT }, { "KILL", SIGKILL },
                      { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "TERM", SIGTERM }, { "CONT", SIGCONT },
                      { "STOP", SIGSTOP }, { "ALRM", SIGALRM } };
        char *end;
        long n = strtol(name, &end, 10);
        if (end != name && *end == '\0')
                return n >= 1 && n <= 64 ? (int)n : -1;
        if (strncasecmp(name, "SIG", 3) == 0)
                name += 3;
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                if (strcasecmp(name, names[i].name) == 0)
                        return names[i].number;
        }
        return -1;
}

int cmd_kill(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "signal", required_argument, NULL, 's' }, { 0 } };
        int sig = SIGKILL;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "s:", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                sig = parse_signal(optarg);
                if (sig < 0)
                        return cli_fail("bad signal \"%s\" (a name like TERM or a number)", optarg);
        }
        if (argc - optind != 2)
                return cli_usage_error(cli);
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:i}", "exec_id", argv[optind + 1], "signal", sig);
        _cleanup_json_ json_t *result = NULL;
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int r = client_call(c, "exec.kill", params, NULL, NULL, &result, &error, &err);
        client_close(c);
        if (r < 0)
                return cli_fail_json(cli, error, "%s", err->message);
        if (cli->json)
                cli_print_json(result);
        else
                printf("%s\n", json_string_value(json_object_get(result, "exec_id")));
        return 0;
}
