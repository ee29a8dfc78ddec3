/* nsbox: the command-line client of nsboxd. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"

int cli_fail(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fputs("nsbox: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        return EXIT_NSBOX_FAILED;
}

struct client *cli_connect(const struct cli *cli)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct client *c = NULL;
        if (client_connect(cli->socket_path, &c, &err) < 0) {
                cli_fail("%s (is nsboxd running?)", err->message);
                return NULL;
        }
        return c;
}

json_t *cli_call(const struct cli *cli, struct client *c, const char *method, json_t *params)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *result = NULL;
        if (client_call(c, method, params, NULL, NULL, &result, NULL, &err) < 0) {
                cli_fail("%s", err->message);
                return NULL;
        }
        return result;
}

void cli_print_json(const json_t *value)
{
        char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text != NULL) {
                puts(text);
                free(text);
        }
}

int cli_parse_size(const char *text, unsigned long long *out)
{
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (errno != 0 || end == text || v < 0)
                return -EINVAL;
        unsigned long long mult = 1;
        switch (*end) {
        case '\0':
                break;
        case 'k':
        case 'K':
                mult = 1ull << 10;
                end++;
                break;
        case 'm':
        case 'M':
                mult = 1ull << 20;
                end++;
                break;
        case 'g':
        case 'G':
                mult = 1ull << 30;
                end++;
                break;
        case 't':
        case 'T':
                mult = 1ull << 40;
                end++;
                break;
        default:
                return -EINVAL;
        }
        if (*end == 'i' || *end == 'I')
                end++;
        if (*end == 'b' || *end == 'B')
                end++;
        if (*end != '\0')
                return -EINVAL;
        *out = (unsigned long long)(v * (double)mult);
        return 0;
}

int cli_exec_exit_code(const json_t *result)
{
        json_t *timed_out = json_object_get(result, "timed_out");
        json_t *code = json_object_get(result, "exit_code");
        json_t *sig = json_object_get(result, "signal");
        if (json_is_true(timed_out))
                return EXIT_TIMEOUT;
        if (json_is_integer(code))
                return (int)json_integer_value(code);
        if (json_is_integer(sig))
                return 128 + (int)json_integer_value(sig);
        return EXIT_NSBOX_FAILED;
}

/* --- create options, shared by create and run ------------------------- */

struct create_opts {
        json_t *params; /* sandbox.create params being built */
};

enum {
        OPT_SESSION = 1000,
        OPT_MEMORY,
        OPT_PIDS,
        OPT_CPUS,
        OPT_DISK,
        OPT_IDLE,
        OPT_ENV,
        OPT_IMAGE,
        OPT_JSON,
        OPT_TIMEOUT,
        OPT_CWD,
        OPT_USER,
        OPT_ALL,
        OPT_FORCE,
        OPT_PROFILE,
        OPT_HELP
};

static int set_limit(json_t *params, const char *key, json_t *value)
{
        json_t *limits = json_object_get(params, "limits");
        if (limits == NULL) {
                limits = json_object();
                json_object_set_new(params, "limits", limits);
        }
        return json_object_set_new(limits, key, value);
}

static int add_env(json_t *obj, const char *kv)
{
        const char *eq = strchr(kv, '=');
        if (eq == NULL || eq == kv)
                return cli_fail("--env takes KEY=VALUE, not \"%s\"", kv);
        json_t *env = json_object_get(obj, "env");
        if (env == NULL) {
                env = json_object();
                json_object_set_new(obj, "env", env);
        }
        _cleanup_free_ char *key = strndup(kv, eq - kv);
        json_object_set_new(env, key, json_string(eq + 1));
        return 0;
}

/* Returns 0 if handled, 1 if not a create option, or an exit code. */
static int create_option(json_t *params, int opt, const char *arg)
{
        unsigned long long n;
        char *end;
        switch (opt) {
        case OPT_SESSION:
                json_object_set_new(params, "session_id", json_string(arg));
                return 0;
        case OPT_IMAGE:
                json_object_set_new(params, "image", json_string(arg));
                return 0;
        case OPT_PROFILE:
                json_object_set_new(params, "seccomp_profile", json_string(arg));
                return 0;
        case OPT_MEMORY:
        case OPT_DISK:
                if (cli_parse_size(arg, &n) < 0)
                        return cli_fail("bad size \"%s\" (use e.g. 512M or 1G)", arg);
                set_limit(params, opt == OPT_MEMORY ? "memory_bytes" : "disk_bytes",
                          json_integer((json_int_t)n));
                return 0;
        case OPT_PIDS:
                n = strtoull(arg, &end, 10);
                if (*end != '\0' || end == arg)
                        return cli_fail("bad --pids \"%s\"", arg);
                set_limit(params, "pids", json_integer((json_int_t)n));
                return 0;
        case OPT_CPUS: {
                double cpus = strtod(arg, &end);
                if (*end != '\0' || end == arg)
                        return cli_fail("bad --cpus \"%s\"", arg);
                set_limit(params, "cpus", json_real(cpus));
                return 0;
        }
        case OPT_IDLE:
                n = strtoull(arg, &end, 10);
                if (*end != '\0' || end == arg)
                        return cli_fail("bad --idle-timeout \"%s\"", arg);
                json_object_set_new(params, "idle_timeout_seconds", json_integer((json_int_t)n));
                return 0;
        case OPT_ENV:
                return add_env(params, arg) == 0 ? 0 : EXIT_NSBOX_FAILED;
        default:
                return 1;
        }
}

#define CREATE_LONG_OPTIONS                                                                               \
        { "session", required_argument, NULL, OPT_SESSION },                                              \
            { "memory", required_argument, NULL, OPT_MEMORY },                                            \
            { "pids", required_argument, NULL, OPT_PIDS }, { "cpus", required_argument, NULL, OPT_CPUS }, \
            { "disk", required_argument, NULL, OPT_DISK },                                                \
            { "idle-timeout", required_argument, NULL, OPT_IDLE },                                        \
            { "image", required_argument, NULL, OPT_IMAGE },                                              \
        {                                                                                                 \
                "seccomp-profile", required_argument, NULL, OPT_PROFILE                                   \
        }

/* --- streaming exec ----------------------------------------------------- */

static void print_stream(const char *method, json_t *params, void *data)
{
        if (strcmp(method, "exec.output") != 0)
                return;
        json_t *stream = json_object_get(params, "stream");
        json_t *chunk = json_object_get(params, "data");
        if (!json_is_string(stream) || !json_is_string(chunk))
                return;
        FILE *out = strcmp(json_string_value(stream), "stderr") == 0 ? stderr : stdout;
        fwrite(json_string_value(chunk), 1, json_string_length(chunk), out);
        fflush(out);
}

/* Run an exec with streamed output; returns the exit code. */
static int run_exec(const struct cli *cli, struct client *c, json_t *params)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL;
        if (!cli->json)
                json_object_set_new(params, "stream", json_true());
        if (client_call(c, "sandbox.exec", params, cli->json ? NULL : print_stream, NULL, &result, NULL,
                        &err) < 0)
                return cli_fail("%s", err->message);
        if (cli->json)
                cli_print_json(result);
        if (json_is_true(json_object_get(result, "timed_out")))
                fprintf(stderr, "nsbox: the command timed out\n");
        return cli_exec_exit_code(result);
}

/* --- commands ----------------------------------------------------------- */

static int cmd_create(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { CREATE_LONG_OPTIONS,
                                                  { "env", required_argument, NULL, OPT_ENV },
                                                  { 0 } };
        _cleanup_json_ json_t *params = json_object();
        int opt;
        optind = 1;
        while ((opt = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
                int r = opt == '?' ? EXIT_NSBOX_FAILED : create_option(params, opt, optarg);
                if (r != 0)
                        return r == 1 ? EXIT_NSBOX_FAILED : r;
        }
        if (optind != argc)
                return cli_fail("create takes no arguments");
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *result = cli_call(cli, c, "sandbox.create", params);
        client_close(c);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json)
                cli_print_json(result);
        else
                puts(json_string_value(json_object_get(result, "sandbox_id")));
        return 0;
}

static int cmd_ls(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "all", no_argument, NULL, 'a' }, { 0 } };
        bool all = false;
        int opt;
        optind = 1;
        while ((opt = getopt_long(argc, argv, "+a", longopts, NULL)) != -1) {
                if (opt != 'a')
                        return EXIT_NSBOX_FAILED;
                all = true;
        }
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *params = json_pack("{s:b}", "include_inactive", all);
        _cleanup_json_ json_t *result = cli_call(cli, c, "sandbox.list", params);
        client_close(c);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        printf("%-36s  %-9s  %-24s  %s\n", "SANDBOX ID", "STATE", "CREATED", "SESSION");
        size_t i;
        json_t *sb;
        json_array_foreach(json_object_get(result, "sandboxes"), i, sb)
        {
                json_t *session = json_object_get(sb, "session_id");
                printf("%-36s  %-9s  %-24s  %s\n", json_string_value(json_object_get(sb, "sandbox_id")),
                       json_string_value(json_object_get(sb, "state")),
                       json_string_value(json_object_get(sb, "created_at")),
                       json_is_string(session) ? json_string_value(session) : "-");
        }
        return 0;
}

static int cmd_simple(const struct cli *cli, const char *method, json_t *params)
{
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *result = cli_call(cli, c, method, params);
        client_close(c);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        char *text = json_dumps(result, cli->json ? JSON_COMPACT : JSON_INDENT(2));
        if (text != NULL)
                puts(text);
        free(text);
        return 0;
}

static int cmd_info(const struct cli *cli, int argc, char **argv)
{
        if (argc != 2)
                return cli_fail("usage: nsbox info ID");
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", argv[1]);
        return cmd_simple(cli, "sandbox.info", params);
}

static int cmd_status(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        return cmd_simple(cli, "server.info", params);
}

static int cmd_rm(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "force", no_argument, NULL, 'f' }, { 0 } };
        bool force = false;
        int opt;
        optind = 1;
        while ((opt = getopt_long(argc, argv, "+f", longopts, NULL)) != -1) {
                if (opt != 'f')
                        return EXIT_NSBOX_FAILED;
                force = true;
        }
        if (optind >= argc)
                return cli_fail("usage: nsbox rm [-f] ID...");
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        int status = 0;
        for (int i = optind; i < argc; i++) {
                _cleanup_json_ json_t *params =
                    json_pack("{s:s, s:b}", "sandbox_id", argv[i], "force", force);
                _cleanup_json_ json_t *result = cli_call(cli, c, "sandbox.remove", params);
                if (result == NULL)
                        status = EXIT_NSBOX_FAILED;
                else if (cli->json)
                        cli_print_json(result);
                else
                        puts(argv[i]);
        }
        client_close(c);
        return status;
}

/* exec options shared by exec and sh. Returns 0, or an exit code. */
static int parse_exec_options(int argc, char **argv, json_t *params)
{
        static const struct option longopts[] = { { "timeout", required_argument, NULL, OPT_TIMEOUT },
                                                  { "cwd", required_argument, NULL, OPT_CWD },
                                                  { "env", required_argument, NULL, OPT_ENV },
                                                  { "user", required_argument, NULL, OPT_USER },
                                                  { 0 } };
        int opt;
        char *end;
        optind = 1;
        while ((opt = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
                switch (opt) {
                case OPT_TIMEOUT: {
                        double t = strtod(optarg, &end);
                        if (*end != '\0' || end == optarg)
                                return cli_fail("bad --timeout \"%s\"", optarg);
                        json_object_set_new(params, "timeout_seconds", json_real(t));
                        break;
                }
                case OPT_CWD:
                        json_object_set_new(params, "cwd", json_string(optarg));
                        break;
                case OPT_ENV:
                        if (add_env(params, optarg) != 0)
                                return EXIT_NSBOX_FAILED;
                        break;
                case OPT_USER:
                        json_object_set_new(params, "user", json_string(optarg));
                        break;
                default:
                        return EXIT_NSBOX_FAILED;
                }
        }
        return 0;
}

static json_t *argv_to_json(int argc, char **argv)
{
        json_t *a = json_array();
        for (int i = 0; i < argc; i++)
                json_array_append_new(a, json_string(argv[i]));
        return a;
}

static int cmd_exec(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        int r = parse_exec_options(argc, argv, params);
        if (r != 0)
                return r;
        if (argc - optind < 2)
                return cli_fail("usage: nsbox exec [options] ID -- CMD [ARG...]");
        const char *id = argv[optind++];
        if (strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return cli_fail("usage: nsbox exec [options] ID -- CMD [ARG...]");
        json_object_set_new(params, "sandbox_id", json_string(id));
        json_object_set_new(params, "argv", argv_to_json(argc - optind, argv + optind));
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        r = run_exec(cli, c, params);
        client_close(c);
        return r;
}

static int cmd_sh(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        int r = parse_exec_options(argc, argv, params);
        if (r != 0)
                return r;
        if (argc - optind != 2)
                return cli_fail("usage: nsbox sh [options] ID 'shell command'");
        json_object_set_new(params, "sandbox_id", json_string(argv[optind]));
        json_object_set_new(params, "command", json_string(argv[optind + 1]));
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        r = run_exec(cli, c, params);
        client_close(c);
        return r;
}

static int cmd_run(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { CREATE_LONG_OPTIONS,
                                                  { "env", required_argument, NULL, OPT_ENV },
                                                  { "timeout", required_argument, NULL, OPT_TIMEOUT },
                                                  { "cwd", required_argument, NULL, OPT_CWD },
                                                  { "user", required_argument, NULL, OPT_USER },
                                                  { 0 } };
        _cleanup_json_ json_t *create = json_object();
        _cleanup_json_ json_t *exec = json_object();
        int opt;
        char *end;
        optind = 1;
        while ((opt = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
                if (opt == OPT_ENV) {
                        if (add_env(exec, optarg) != 0)
                                return EXIT_NSBOX_FAILED;
                } else if (opt == OPT_TIMEOUT) {
                        double t = strtod(optarg, &end);
                        if (*end != '\0' || end == optarg)
                                return cli_fail("bad --timeout \"%s\"", optarg);
                        json_object_set_new(exec, "timeout_seconds", json_real(t));
                } else if (opt == OPT_CWD) {
                        json_object_set_new(exec, "cwd", json_string(optarg));
                } else if (opt == OPT_USER) {
                        json_object_set_new(exec, "user", json_string(optarg));
                } else {
                        int r = opt == '?' ? EXIT_NSBOX_FAILED : create_option(create, opt, optarg);
                        if (r != 0)
                                return r == 1 ? EXIT_NSBOX_FAILED : r;
                }
        }
        if (optind < argc && strcmp(argv[optind], "--") == 0)
                optind++;
        if (optind >= argc)
                return cli_fail("usage: nsbox run [create options] -- CMD [ARG...]");

        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *created = cli_call(cli, c, "sandbox.create", create);
        if (created == NULL) {
                client_close(c);
                return EXIT_NSBOX_FAILED;
        }
        const char *id = json_string_value(json_object_get(created, "sandbox_id"));
        json_object_set_new(exec, "sandbox_id", json_string(id));
        json_object_set_new(exec, "argv", argv_to_json(argc - optind, argv + optind));
        int status = run_exec(cli, c, exec);
        _cleanup_json_ json_t *rm = json_pack("{s:s, s:b}", "sandbox_id", id, "force", 1);
        _cleanup_json_ json_t *removed = cli_call(cli, c, "sandbox.remove", rm);
        client_close(c);
        if (removed == NULL && status == 0)
                status = EXIT_NSBOX_FAILED;
        return status;
}

static void usage(FILE *out)
{
        fprintf(out, "usage: nsbox [--socket PATH] [--json] COMMAND [ARGS]\n\n"
                     "  create [--session ID] [--memory 512M] [--pids N] [--cpus F] [--disk 1G]\n"
                     "         [--idle-timeout SEC] [--env K=V]...      create a sandbox, print its id\n"
                     "  ls [--all]                                      list sandboxes\n"
                     "  info ID                                         sandbox details and stats\n"
                     "  rm [-f] ID...                                   remove sandboxes\n"
                     "  exec [--timeout S] [--cwd DIR] [--env K=V] [--user root] ID -- CMD [ARG...]\n"
                     "  sh ID 'shell command'                           run under /bin/sh -c\n"
                     "  run [create options] -- CMD [ARG...]            create, exec, remove\n"
                     "  status                                          server.info\n\n"
                     "The socket is --socket, else $NSBOX_SOCKET, else /run/nsbox/nsbox.sock.\n"
                     "exec, sh and run exit with the command's code; 124 on timeout, 128+N when\n"
                     "killed by signal N, 125 when nsbox itself failed.\n");
}

struct command {
        const char *name;
        int (*run)(const struct cli *cli, int argc, char **argv);
};

static const struct command commands[] = {
        { "create", cmd_create }, { "ls", cmd_ls },   { "list", cmd_ls },
        { "info", cmd_info },     { "rm", cmd_rm },   { "exec", cmd_exec },
        { "sh", cmd_sh },         { "run", cmd_run }, { "status", cmd_status },
};

int main(int argc, char **argv)
{
        struct cli cli = { 0 };
        const char *socket_flag = NULL;
        int i = 1;
        signal(SIGPIPE, SIG_IGN);
        for (; i < argc && argv[i][0] == '-'; i++) {
                if (strcmp(argv[i], "--json") == 0) {
                        cli.json = true;
                } else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
                        socket_flag = argv[++i];
                } else if (strncmp(argv[i], "--socket=", 9) == 0) {
                        socket_flag = argv[i] + 9;
                } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                        usage(stdout);
                        return 0;
                } else {
                        usage(stderr);
                        return EXIT_NSBOX_FAILED;
                }
        }
        if (i >= argc) {
                usage(stderr);
                return EXIT_NSBOX_FAILED;
        }
        cli.socket_path = client_socket_path(socket_flag);
        for (size_t k = 0; k < ARRAY_SIZE(commands); k++) {
                if (strcmp(commands[k].name, argv[i]) != 0)
                        continue;
                /* Commands see their own argv; a --json after the command name counts too. */
                int sub_argc = argc - i;
                char **sub_argv = argv + i;
                for (int j = 1; j < sub_argc; j++) {
                        if (strcmp(sub_argv[j], "--") == 0)
                                break;
                        if (strcmp(sub_argv[j], "--json") == 0) {
                                cli.json = true;
                                memmove(&sub_argv[j], &sub_argv[j + 1], (sub_argc - j) * sizeof(char *));
                                sub_argc--;
                                j--;
                        }
                }
                return commands[k].run(&cli, sub_argc, sub_argv);
        }
        return cli_fail("unknown command \"%s\" (see nsbox --help)", argv[i]);
}
