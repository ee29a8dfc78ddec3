/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox snapshot, fork, commit and images: file snapshots of sandboxes,
 * sandboxes forked from them, and images committed from sandboxes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"
#include "size.h"

enum { OPT_NAME = CLI_OPT_FIRST_FREE };

void cli_format_size(json_t *bytes, char *out, size_t len)
{
        char text[SIZE_FORMAT_MAX];
        uint64_t n =
            json_is_integer(bytes) && json_integer_value(bytes) > 0 ? (uint64_t)json_integer_value(bytes) : 0;
        if (n < 1024) {
                snprintf(out, len, "%lluB", (unsigned long long)n);
                return;
        }
        size_format(n, text, sizeof(text));
        char *space = strchr(text, ' ');
        if (space != NULL)
                memmove(space, space + 1, strlen(space));
        snprintf(out, len, "%s", text);
}

static const char *text_or(json_t *v, const char *fallback)
{
        return json_is_string(v) ? json_string_value(v) : fallback;
}

/* An answer as the commands print it: whole with --json, else its `field`
 * (an id or a name, for scripts). */
static int print_answer(const struct cli *cli, const json_t *result, const char *field)
{
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json)
                cli_print_json(result);
        else
                puts(text_or(json_object_get(result, field), ""));
        return 0;
}

/* One call on a connection of its own; params: stolen. */
static json_t *call(const struct cli *cli, const char *method, json_t *params)
{
        _cleanup_json_ json_t *owned = params;
        return cli_call_once(cli, method, params);
}

/* A long copy's progress, on a terminal's stderr: one line redrawn. */
static void print_progress(const char *method, json_t *params, void *data)
{
        bool *shown = data;
        if (strcmp(method, "progress") != 0)
                return;
        json_t *done = json_object_get(params, "done_bytes"), *total = json_object_get(params, "total_bytes");
        if (json_is_integer(done) && json_is_integer(total)) {
                double d = (double)json_integer_value(done) / (1 << 20);
                double t = (double)json_integer_value(total) / (1 << 20);
                fprintf(stderr, "\r\033[K%s: %.1f of %.1f MiB copied",
                        json_string_value(json_object_get(params, "operation")) ?: "", d, t);
        } else {
                fprintf(stderr, "\r\033[K%s: step %lld of %lld: %s",
                        json_string_value(json_object_get(params, "operation")) ?: "",
                        (long long)json_integer_value(json_object_get(params, "done_steps")) + 1,
                        (long long)json_integer_value(json_object_get(params, "total_steps")),
                        json_string_value(json_object_get(params, "step")) ?: "");
        }
        *shown = true;
}

/* call(), with the copy's progress on stderr when it is a terminal. */
static json_t *call_with_progress(const struct cli *cli, const char *method, json_t *params)
{
        _cleanup_json_ json_t *owned = params;
        if (!isatty(STDERR_FILENO))
                return call(cli, method, json_incref(params));
        json_object_set_new(params, "progress", json_true());
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return NULL;
        bool shown = false;
        json_t *result = cli_call_notified(cli, c, method, params, print_progress, &shown);
        client_close(c);
        if (shown)
                fputs("\r\033[K", stderr);
        return result;
}

static int snapshot_list(const struct cli *cli)
{
        _cleanup_json_ json_t *result = call(cli, "snapshot.list", json_object());
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        printf("%-36s  %-16s  %-10s  %8s  %9s  %s\n", "SNAPSHOT ID", "NAME", "IMAGE", "SIZE", "SANDBOXES",
               "CREATED");
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(result, "snapshots"), i, s)
        {
                char size[32];
                if (json_is_true(json_object_get(s, "damaged"))) {
                        printf("%-36s  (damaged)\n", text_or(json_object_get(s, "snapshot_id"), "?"));
                        continue;
                }
                cli_format_size(json_object_get(s, "size_bytes"), size, sizeof(size));
                printf("%-36s  %-16.64s  %-10s  %8s  %9lld  %s\n",
                       text_or(json_object_get(s, "snapshot_id"), "?"),
                       text_or(json_object_get(s, "name"), "-"), text_or(json_object_get(s, "image"), "?"),
                       size, (long long)json_integer_value(json_object_get(s, "sandboxes")),
                       text_or(json_object_get(s, "created_at"), ""));
        }
        return 0;
}

static int snapshot_rm(const struct cli *cli, int argc, char **argv)
{
        if (argc < 1)
                return cli_usage_error(cli);
        return cli_call_each(cli, "snapshot.remove", "snapshot_id", NULL, argc, argv);
}

/* sandbox.snapshot of `id`: the result, or NULL after printing why. */
/* A command without options (but --help) taking exactly n arguments: true
 * with optind at the first, or false with *code what the command returns. */
static bool just_args(const struct cli *cli, int argc, char **argv, int n, int *code)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1) {
                *code = cli_opt_exit(opt);
                return false;
        }
        if (argc - optind != n) {
                *code = cli_usage_error(cli);
                return false;
        }
        return true;
}

/* A snapshot without a name taken for one fork is removed with the last
 * sandbox made from it (remove_when_unused); a named one stays. */
static json_t *take_snapshot(const struct cli *cli, const char *id, const char *name, bool for_fork)
{
        json_t *params = json_pack("{s:s}", "sandbox_id", id);
        if (for_fork && name == NULL)
                json_object_set_new(params, "remove_when_unused", json_true());
        if (name != NULL)
                json_object_set_new(params, "name", json_string(name));
        return call_with_progress(cli, "sandbox.snapshot", params);
}

int cmd_snapshot(const struct cli *cli, int argc, char **argv)
{
        if (argc >= 2 && strcmp(argv[1], "ls") == 0)
                return argc == 2 ? snapshot_list(cli) : cli_usage_error(cli);
        if (argc >= 2 && strcmp(argv[1], "rm") == 0)
                return snapshot_rm(cli, argc - 2, argv + 2);
        static const struct option longopts[] = { { "name", required_argument, NULL, OPT_NAME }, { 0 } };
        const char *name = NULL;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                name = optarg;
        }
        if (argc - optind != 1)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *result = take_snapshot(cli, argv[optind], name, false);
        return print_answer(cli, result, "snapshot_id");
}

int cmd_snapshots(const struct cli *cli, int argc, char **argv)
{
        int code;
        if (!just_args(cli, argc, argv, 0, &code))
                return code;
        return snapshot_list(cli);
}

int cmd_fork(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { CLI_CREATE_OPTIONS,
                                                  { "env", required_argument, NULL, CLI_OPT_ENV },
                                                  { "name", required_argument, NULL, OPT_NAME },
                                                  { 0 } };
        _cleanup_json_ json_t *params = json_object();
        const char *name = NULL;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                if (opt == OPT_NAME) {
                        name = optarg;
                        continue;
                }
                int r = cli_create_option(params, opt, optarg);
                if (r != 0)
                        return r == 1 ? cli_usage_error(cli) : r;
        }
        if (argc - optind != 1)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *snapshot = take_snapshot(cli, argv[optind], name, true);
        if (snapshot == NULL)
                return EXIT_NSBOX_FAILED;
        json_t *snapshot_id = json_object_get(snapshot, "snapshot_id");
        json_object_set(params, "from_snapshot", snapshot_id);
        _cleanup_json_ json_t *sandbox = call(cli, "sandbox.create", json_incref(params));
        if (sandbox == NULL) {
                /* No fork holds it: an unnamed snapshot would be left behind. */
                if (name == NULL)
                        json_decref(
                            call(cli, "snapshot.remove", json_pack("{s:O}", "snapshot_id", snapshot_id)));
                return EXIT_NSBOX_FAILED;
        }
        if (cli->json) {
                _cleanup_json_ json_t *both =
                    json_pack("{s:O, s:O}", "snapshot", snapshot, "sandbox", sandbox);
                cli_print_json(both);
        } else {
                puts(text_or(json_object_get(sandbox, "sandbox_id"), ""));
        }
        return 0;
}

int cmd_commit(const struct cli *cli, int argc, char **argv)
{
        int code;
        if (!just_args(cli, argc, argv, 2, &code))
                return code;
        _cleanup_json_ json_t *result =
            call_with_progress(cli, "image.commit",
                               json_pack("{s:s, s:s}", "sandbox_id", argv[optind], "name", argv[optind + 1]));
        return print_answer(cli, result, "name");
}

static int image_list(const struct cli *cli)
{
        _cleanup_json_ json_t *result = call(cli, "image.list", json_object());
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        printf("%-24s  %8s  %-16s  %-8s  %s\n", "NAME", "SIZE", "PARENT", "PYTHON", "CREATED");
        size_t i;
        json_t *image;
        json_array_foreach(json_object_get(result, "images"), i, image)
        {
                char size[32];
                cli_format_size(json_object_get(image, "size_bytes"), size, sizeof(size));
                printf("%-24s  %8s  %-16s  %-8s  %s\n", text_or(json_object_get(image, "name"), "?"), size,
                       text_or(json_object_get(image, "parent"), "-"),
                       text_or(json_object_get(image, "python_version"), "-"),
                       text_or(json_object_get(image, "created_at"),
                               text_or(json_object_get(image, "build_date"), "")));
        }
        return 0;
}

int cmd_images(const struct cli *cli, int argc, char **argv)
{
        int code;
        if (!just_args(cli, argc, argv, 0, &code))
                return code;
        return image_list(cli);
}

/* nsbox image import [--tag TAG] PATH NAME: nsboxd reads PATH, so it goes
 * as an absolute path. */
static int image_import(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "tag", required_argument, NULL, OPT_NAME }, { 0 } };
        const char *tag = NULL;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                tag = optarg;
        }
        if (argc - optind != 2)
                return cli_usage_error(cli);
        char path[PATH_MAX];
        if (realpath(argv[optind], path) == NULL)
                return cli_fail("%s: %m", argv[optind]);
        json_t *params = json_pack("{s:s, s:s}", "path", path, "name", argv[optind + 1]);
        if (tag != NULL)
                json_object_set_new(params, "tag", json_string(tag));
        _cleanup_json_ json_t *result = call_with_progress(cli, "image.import", params);
        return print_answer(cli, result, "name");
}

int cmd_image(const struct cli *cli, int argc, char **argv)
{
        if (argc == 2 && strcmp(argv[1], "ls") == 0)
                return image_list(cli);
        if (argc >= 2 && strcmp(argv[1], "import") == 0)
                return image_import(cli, argc - 1, argv + 1);
        if (argc < 3 || strcmp(argv[1], "rm") != 0)
                return cli_usage_error(cli);
        return cli_call_each(cli, "image.remove", "name", NULL, argc - 2, argv + 2);
}
