/* nsbox create, ls, info, rm, status: the sandbox lifecycle. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"

#define NETWORK_POLICY_MAX_BYTES (1u << 20) /* a policy is a few lists of names */

static int set_limit(json_t *params, const char *key, json_t *value)
{
        json_t *limits = json_object_get(params, "limits");
        if (limits == NULL) {
                limits = json_object();
                json_object_set_new(params, "limits", limits);
        }
        return json_object_set_new(limits, key, value);
}

static int parse_count(const char *text, unsigned long long *out)
{
        char *end;
        errno = 0;
        if (text[0] == '-')
                return -EINVAL;
        *out = strtoull(text, &end, 10);
        return errno == 0 && end != text && *end == '\0' ? 0 : -EINVAL;
}

/* The POLICY object of --network-policy FILE|-; NULL after printing why. */
static json_t *read_network_policy(const char *path)
{
        const char *what = strcmp(path, "-") == 0 ? "the network policy on standard input" : path;
        _cleanup_json_ json_t *text = cli_read_path(
            path, "--network-policy: ", "the network policy on standard input", NETWORK_POLICY_MAX_BYTES);
        if (text == NULL)
                return NULL;
        json_error_t jerr;
        json_t *policy =
            json_loadb(json_string_value(text), json_string_length(text), JSON_REJECT_DUPLICATES, &jerr);
        if (policy == NULL) {
                cli_fail("--network-policy: %s is not JSON: %s (line %d)", what, jerr.text, jerr.line);
                return NULL;
        }
        if (!json_is_object(policy)) {
                cli_fail("--network-policy: %s must hold a JSON object, a network policy such as "
                         "{\"allow\": [\"pypi.org\", \"*.pythonhosted.org\"], \"deny\": []}",
                         what);
                json_decref(policy);
                return NULL;
        }
        return policy;
}

int cli_network_option(json_t *params, int opt, const char *arg)
{
        /* Two network options would silently drop one of them. */
        if (json_object_get(params, "network") != NULL)
                return cli_fail("give one of --network and --network-policy, once");
        if (opt == CLI_OPT_NETWORK) {
                if (arg[0] == '\0')
                        return cli_fail("--network takes a policy name, or none");
                json_object_set_new(params, "network", json_string(arg));
                return 0;
        }
        json_t *policy = read_network_policy(arg);
        if (policy == NULL)
                return EXIT_NSBOX_FAILED;
        json_object_set_new(params, "network", policy);
        return 0;
}

int cli_create_option(json_t *params, int opt, const char *arg)
{
        unsigned long long n;
        switch (opt) {
        case CLI_OPT_SESSION:
                json_object_set_new(params, "session_id", json_string(arg));
                return 0;
        case CLI_OPT_IMAGE:
                json_object_set_new(params, "image", json_string(arg));
                return 0;
        case CLI_OPT_PROFILE:
                json_object_set_new(params, "seccomp_profile", json_string(arg));
                return 0;
        case CLI_OPT_MEMORY:
        case CLI_OPT_DISK:
                if (cli_parse_size(arg, &n) < 0)
                        return cli_fail("bad size \"%s\" (use e.g. 512M or 1G)", arg);
                set_limit(params, opt == CLI_OPT_MEMORY ? "memory_bytes" : "disk_bytes",
                          json_integer((json_int_t)n));
                return 0;
        case CLI_OPT_PIDS:
                if (parse_count(arg, &n) < 0)
                        return cli_fail("bad --pids \"%s\"", arg);
                set_limit(params, "pids", json_integer((json_int_t)n));
                return 0;
        case CLI_OPT_CPUS: {
                char *end;
                double cpus = strtod(arg, &end);
                if (*end != '\0' || end == arg)
                        return cli_fail("bad --cpus \"%s\"", arg);
                set_limit(params, "cpus", json_real(cpus));
                return 0;
        }
        case CLI_OPT_IDLE:
                if (parse_count(arg, &n) < 0)
                        return cli_fail("bad --idle-timeout \"%s\"", arg);
                json_object_set_new(params, "idle_timeout_seconds", json_integer((json_int_t)n));
                return 0;
        case CLI_OPT_ENV:
                return cli_add_env(params, arg) == 0 ? 0 : EXIT_NSBOX_FAILED;
        case CLI_OPT_NETWORK:
        case CLI_OPT_NETWORK_POLICY:
                return cli_network_option(params, opt, arg);
        default:
                return 1;
        }
}

/* Call one method on a fresh connection; NULL after printing why. */
static json_t *call_once(const struct cli *cli, const char *method, json_t *params)
{
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return NULL;
        json_t *result = cli_call(cli, c, method, params);
        client_close(c);
        return result;
}

int cmd_create(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { CLI_CREATE_OPTIONS,
                                                  { "env", required_argument, NULL, CLI_OPT_ENV },
                                                  { 0 } };
        _cleanup_json_ json_t *params = json_object();
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                int r = cli_create_option(params, opt, optarg);
                if (r != 0)
                        return r == 1 ? cli_usage_error(cli) : r;
        }
        if (optind != argc)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *result = call_once(cli, "sandbox.create", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json)
                cli_print_json(result);
        else
                puts(json_string_value(json_object_get(result, "sandbox_id")));
        return 0;
}

int cmd_ls(const struct cli *cli, int argc, char **argv)
{
        bool all;
        int code;
        if (!cli_flag_and_args(cli, argc, argv, "all", 'a', &all, 0, 0, &code))
                return code;
        _cleanup_json_ json_t *params = json_pack("{s:b}", "include_inactive", all);
        _cleanup_json_ json_t *result = call_once(cli, "sandbox.list", params);
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
                const char *state = json_string_value(json_object_get(sb, "state"));
                const char *created = json_string_value(json_object_get(sb, "created_at"));
                printf("%-36s  %-9s  %-24s  %s\n", json_string_value(json_object_get(sb, "sandbox_id")),
                       state ? state : "-", created ? created : "-",
                       json_is_string(session) ? json_string_value(session) : "-");
        }
        return 0;
}

/* One call, the result printed as JSON: compact with --json, indented otherwise. */
static int print_call(const struct cli *cli, const char *method, json_t *params)
{
        _cleanup_json_ json_t *result = call_once(cli, method, params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_free_ char *text = json_dumps(result, cli->json ? JSON_COMPACT : JSON_INDENT(2));
        if (text != NULL)
                puts(text);
        return 0;
}

int cmd_info(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (argc - optind != 1)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", argv[optind]);
        return print_call(cli, "sandbox.info", params);
}

int cmd_status(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (optind != argc)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *params = json_object();
        return print_call(cli, "server.info", params);
}

int cmd_rm(const struct cli *cli, int argc, char **argv)
{
        bool force;
        int code;
        if (!cli_flag_and_args(cli, argc, argv, "force", 'f', &force, 1, -1, &code))
                return code;
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

int cmd_update(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = {
                { "network", required_argument, NULL, CLI_OPT_NETWORK },
                { "network-policy", required_argument, NULL, CLI_OPT_NETWORK_POLICY },
                { 0 },
        };
        _cleanup_json_ json_t *params = json_object();
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                int r = cli_network_option(params, opt, optarg);
                if (r != 0)
                        return r;
        }
        /* Nothing to change is a mistake, not a no-op that looks like success. */
        if (argc - optind != 1 || json_object_size(params) == 0)
                return cli_usage_error(cli);
        json_object_set_new(params, "sandbox_id", json_string(argv[optind]));
        return print_call(cli, "sandbox.update", params);
}

static int parse_port(const char *text, json_int_t *out)
{
        unsigned long long n;
        if (parse_count(text, &n) < 0 || n < 1 || n > 65535)
                return cli_fail("bad port \"%s\" (a TCP port from 1 to 65535)", text);
        *out = (json_int_t)n;
        return 0;
}

int cmd_port(const struct cli *cli, int argc, char **argv)
{
        bool unexpose;
        int code;
        if (!cli_flag_and_args(cli, argc, argv, "remove", 0, &unexpose, 2, 2, &code))
                return code;
        json_int_t port = 0;
        if (parse_port(argv[optind + 1], &port) != 0)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *params = json_pack("{s:s, s:I}", "sandbox_id", argv[optind], "port", port);
        _cleanup_json_ json_t *result =
            call_once(cli, unexpose ? "sandbox.unexpose" : "sandbox.expose", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        const char *url = json_string_value(json_object_get(result, "url"));
        if (!unexpose)
                puts(url != NULL ? url : "");
        return 0;
}
