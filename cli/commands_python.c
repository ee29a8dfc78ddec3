/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox python and nsbox pip: python.run and package.install. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"
#include "textenc.h"
#include "io.h"

#define CODE_MAX_BYTES (32u << 20) /* well under the daemon's 64 MiB request line */

enum {
        OPT_STATEFUL = CLI_OPT_FIRST_FREE,
        OPT_REQUIRE,
        OPT_TIMEOUT,
        OPT_MAX_OUTPUT,
        OPT_INDEX_URL,
        OPT_FIND_LINKS
};
/* python.run's default cap of the output it keeps (--stateful, --json). */
#define PYTHON_DEFAULT_MAX_OUTPUT (1u << 20)

/* The program from a file or "-" (standard input), as a JSON string; NULL after printing why. */
static json_t *read_code(const char *path)
{
        return cli_read_path(path, "", "standard input", CODE_MAX_BYTES);
}

static int python_exit_code(const json_t *result)
{
        const char *status = json_string_value(json_object_get(result, "status"));
        json_t *code = json_object_get(result, "exit_code");
        if (status != NULL && strcmp(status, "timeout") == 0)
                return EXIT_TIMEOUT;
        if (json_is_integer(code))
                return (int)json_integer_value(code);
        return status != NULL && strcmp(status, "ok") == 0 ? 0 : 1;
}

/* Streamed output (exec.output notifications) as it comes. */
static void print_output(const char *method, json_t *params, void *data)
{
        const char *stream = json_string_value(json_object_get(params, "stream"));
        json_t *text = json_object_get(params, "data");
        if (strcmp(method, "exec.output") != 0 || stream == NULL || !json_is_string(text))
                return;
        io_write_all(strcmp(stream, "stderr") == 0 ? STDERR_FILENO : STDOUT_FILENO, json_string_value(text),
                     json_string_length(text));
}

int cmd_python(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "code", required_argument, NULL, 'c' },
                                                  { "stateful", no_argument, NULL, OPT_STATEFUL },
                                                  { "require", required_argument, NULL, OPT_REQUIRE },
                                                  { "timeout", required_argument, NULL, OPT_TIMEOUT },
                                                  { "max-output", required_argument, NULL, OPT_MAX_OUTPUT },
                                                  { 0 } };
        _cleanup_json_ json_t *params = json_object();
        _cleanup_json_ json_t *requirements = json_array();
        const char *code = NULL;
        double seconds;
        unsigned long long bytes;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "c:", longopts)) != -1) {
                switch (opt) {
                case 'c':
                        code = optarg;
                        break;
                case OPT_STATEFUL:
                        json_object_set_new(params, "stateful", json_true());
                        break;
                case OPT_REQUIRE:
                        json_array_append_new(requirements, json_string(optarg));
                        break;
                case OPT_TIMEOUT:
                        if (cli_parse_seconds(optarg, &seconds) < 0)
                                return cli_fail("bad --timeout \"%s\" (seconds)", optarg);
                        json_object_set_new(params, "timeout_seconds", json_real(seconds));
                        break;
                case OPT_MAX_OUTPUT:
                        if (cli_parse_size(optarg, &bytes) < 0 || bytes > CLI_STREAM_MAX_OUTPUT)
                                return cli_fail("bad --max-output \"%s\" (bytes, e.g. 4M; at most 256M, 8M "
                                                "with --stateful)",
                                                optarg);
                        json_object_set_new(params, "max_output_bytes", json_integer((json_int_t)bytes));
                        break;
                default:
                        return cli_opt_exit(opt);
                }
        }
        /* -c may also follow the id: nsbox python ID -c CODE [ARG...]. */
        if (code == NULL && argc - optind >= 3 && strcmp(argv[optind + 1], "-c") == 0) {
                code = argv[optind + 2];
                memmove(argv + optind + 1, argv + optind + 3, (size_t)(argc - optind - 3) * sizeof(char *));
                argc -= 2;
        }
        int first_arg = optind + (code != NULL ? 1 : 2);
        if (argc < first_arg)
                return cli_usage_error(cli);
        bool stateful = json_is_true(json_object_get(params, "stateful"));
        if (stateful && argc > first_arg)
                return cli_fail("script arguments are for stateless runs (without --stateful)");
        const char *file = code != NULL ? NULL : argv[optind + 1];
        json_t *code_json = code != NULL ? json_string(code) : read_code(file);
        if (code_json == NULL)
                return code != NULL ? cli_fail("the code is not UTF-8 text") : EXIT_NSBOX_FAILED;
        json_object_set_new(params, "code", code_json);
        json_object_set_new(params, "sandbox_id", json_string(argv[optind]));
        if (json_array_size(requirements) > 0)
                json_object_set(params, "requirements", requirements);
        if (!stateful) {
                /* As python3 names them: the file as given, or <string> and <stdin>. */
                const char *name = code != NULL ? "<string>" : strcmp(file, "-") == 0 ? "<stdin>" : file;
                const char *slash = strrchr(name, '/');
                json_object_set_new(params, "script_name", json_string(slash ? slash + 1 : name));
                json_object_set_new(params, "args", cli_argv_to_json(argc - first_arg, argv + first_arg));
                /* Streamed output is not kept: as nsbox exec, the daemon's largest cap
                 * (a stateful call streams what it would keep: 1 MiB unless told). */
                if (!cli->json && json_object_get(params, "max_output_bytes") == NULL)
                        json_object_set_new(params, "max_output_bytes", json_integer(CLI_STREAM_MAX_OUTPUT));
        }
        json_object_set_new(params, "stream", json_boolean(!cli->json));
        json_t *max = json_object_get(params, "max_output_bytes");
        size_t cap = json_is_integer(max) ? (size_t)json_integer_value(max) : PYTHON_DEFAULT_MAX_OUTPUT;

        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *result = cli_call_notified(cli, c, "python.run", params, print_output, NULL);
        client_close(c);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return python_exit_code(result);
        }
        fflush(stdout);
        cli_print_text_output(result); /* empty when it streamed, but for nsbox's own notes */
        cli_print_network_refused(result);
        json_t *value = json_object_get(result, "result");
        if (json_is_string(value)) {
                io_write_all(STDOUT_FILENO, json_string_value(value), json_string_length(value));
                io_write_all(STDOUT_FILENO, "\n", 1);
        }
        size_t i;
        json_t *output;
        json_array_foreach(json_object_get(result, "outputs"), i, output)
        {
                const char *type = json_string_value(json_object_get(output, "type"));
                if (type == NULL || strcmp(type, "image") != 0)
                        continue;
                const char *path =
                    json_string_value(json_object_get(json_object_get(output, "image"), "path"));
                fprintf(stderr, "nsbox: image saved in the sandbox at %s\n", path ? path : "(no path given)");
        }
        fflush(stdout);
        cli_print_truncated(result, cap);
        const char *status = json_string_value(json_object_get(result, "status"));
        /* Unless nsboxd said it on stderr already, as it does for an exec's. */
        const char *said = json_string_value(json_object_get(result, "stderr"));
        if (status != NULL && strcmp(status, "timeout") == 0 &&
            (said == NULL || strstr(said, "nsbox: timed out after ") == NULL))
                fprintf(stderr, "nsbox: the code timed out\n");
        return python_exit_code(result);
}

int cmd_pip(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "index-url", required_argument, NULL, OPT_INDEX_URL },
                                                  { "find-links", required_argument, NULL, OPT_FIND_LINKS },
                                                  { 0 } };
        _cleanup_json_ json_t *params = json_object();
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt == OPT_INDEX_URL)
                        json_object_set_new(params, "index_url", json_string(optarg));
                else if (opt == OPT_FIND_LINKS)
                        json_object_set_new(params, "find_links", json_string(optarg));
                else
                        return cli_opt_exit(opt);
        }
        if (argc - optind < 2)
                return cli_usage_error(cli);
        json_object_set_new(params, "sandbox_id", json_string(argv[optind]));
        json_object_set_new(params, "packages", cli_argv_to_json(argc - optind - 1, argv + optind + 1));

        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *result = cli_call(cli, c, "package.install", params);
        client_close(c);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json)
                cli_print_json(result);
        else
                cli_print_text_output(result);
        if (!cli->json)
                cli_print_network_refused(result);
        if (json_is_true(json_object_get(result, "timed_out")))
                fprintf(stderr, "nsbox: pip timed out\n");
        return cli_exec_exit_code(result);
}
