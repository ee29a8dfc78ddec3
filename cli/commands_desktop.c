/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox desktop: start a sandbox's desktop, take its screenshots, click,
 * type and press keys on it (desktop.* of nsboxd). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "client.h"
#include "io.h"
#include "json_cleanup.h"
#include "textenc.h"

/* Call `method` with `params_` (taken over); NULL after printing why. */
static json_t *desktop_call(const struct cli *cli, const char *method, json_t *params_)
{
        _cleanup_json_ json_t *params = params_;
        if (params == NULL) {
                cli_fail("out of memory");
                return NULL;
        }
        return cli_call_once(cli, method, params);
}

/* A whole non-negative number, or -1. */
static long long parse_count(const char *text)
{
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (errno != 0 || end == text || *end != '\0' || v < 0 || text[0] == '+' || text[0] == '-')
                return -1;
        return v;
}

static int done(const struct cli *cli, json_t *result)
{
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json)
                cli_print_json(result);
        return 0;
}

/* nsbox desktop start [--size WxH] ID: the noVNC URL, or why there is none. */
static int desktop_start(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        if (argc == 3 && strcmp(argv[0], "--size") == 0) {
                unsigned w, h;
                char extra;
                if (sscanf(argv[1], "%ux%u%c", &w, &h, &extra) != 2)
                        return cli_fail("--size %s: WIDTHxHEIGHT, e.g. 1280x800", argv[1]);
                json_object_set_new(params, "width", json_integer(w));
                json_object_set_new(params, "height", json_integer(h));
                argc -= 2;
                argv += 2;
        }
        if (argc != 1 || argv[0][0] == '-')
                return cli_usage_error(cli);
        json_object_set_new(params, "sandbox_id", json_string(argv[0]));
        _cleanup_json_ json_t *result = desktop_call(cli, "desktop.start", json_incref(params));
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        const char *url = json_string_value(json_object_get(result, "novnc_url"));
        if (url != NULL)
                puts(url);
        else
                fprintf(
                    stderr,
                    "nsbox: the desktop runs (%lldx%lld), but noVNC is not reachable from this host: %s\n",
                    json_integer_value(json_object_get(result, "width")),
                    json_integer_value(json_object_get(result, "height")),
                    json_string_value(json_object_get(result, "exposure_error")));
        return 0;
}

/* nsbox desktop screenshot ID [FILE]: the PNG to FILE or standard output. */
static int desktop_screenshot(const struct cli *cli, int argc, char **argv)
{
        if (argc < 1 || argc > 2)
                return cli_usage_error(cli);
        if (argc == 1 && !cli->json && isatty(STDOUT_FILENO))
                return cli_fail(
                    "the screenshot is a PNG: redirect it (nsbox desktop screenshot ID > shot.png) "
                    "or name a file (nsbox desktop screenshot ID shot.png)");
        _cleanup_json_ json_t *result =
            desktop_call(cli, "desktop.screenshot", json_pack("{s:s}", "sandbox_id", argv[0]));
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        json_t *data = json_object_get(result, "data");
        size_t len = 0;
        _cleanup_free_ void *png = base64_decode(json_string_value(data), json_string_length(data), &len);
        if (png == NULL)
                return cli_fail("the daemon's screenshot is not base64");
        _cleanup_close_ int fd =
            argc == 2 ? open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : dup(STDOUT_FILENO);
        if (fd < 0)
                return cli_fail("%s: %s", argc == 2 ? argv[1] : "standard output", strerror(errno));
        if (io_write_all(fd, png, len) < 0)
                return cli_fail("write the screenshot: %s", strerror(errno));
        return 0;
}

/* ID X Y into params, after the subcommand. */
static bool point_params(json_t *params, char **argv)
{
        long long x = parse_count(argv[1]), y = parse_count(argv[2]);
        if (x < 0 || y < 0) {
                cli_fail("X and Y must be whole numbers of pixels from the top left (0 0)");
                return false;
        }
        json_object_set_new(params, "sandbox_id", json_string(argv[0]));
        json_object_set_new(params, "x", json_integer(x));
        json_object_set_new(params, "y", json_integer(y));
        return true;
}

/* nsbox desktop click [--right|--middle] [--double] ID X Y */
static int desktop_click(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        for (; argc > 0 && argv[0][0] == '-'; argc--, argv++) {
                if (strcmp(argv[0], "--right") == 0 || strcmp(argv[0], "--middle") == 0)
                        json_object_set_new(params, "button", json_string(argv[0] + 2));
                else if (strcmp(argv[0], "--double") == 0)
                        json_object_set_new(params, "double", json_true());
                else
                        return cli_usage_error(cli);
        }
        if (argc != 3)
                return cli_usage_error(cli);
        if (!point_params(params, argv))
                return EXIT_NSBOX_FAILED;
        return done(cli, desktop_call(cli, "desktop.click", json_incref(params)));
}

static int desktop_move(const struct cli *cli, int argc, char **argv)
{
        _cleanup_json_ json_t *params = json_object();
        if (argc != 3)
                return cli_usage_error(cli);
        if (!point_params(params, argv))
                return EXIT_NSBOX_FAILED;
        return done(cli, desktop_call(cli, "desktop.move", json_incref(params)));
}

/* nsbox desktop scroll ID up|down|left|right [AMOUNT] */
static int desktop_scroll(const struct cli *cli, int argc, char **argv)
{
        if (argc < 2 || argc > 3)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *params = json_pack("{s:s, s:s}", "sandbox_id", argv[0], "direction", argv[1]);
        if (argc == 3) {
                long long amount = parse_count(argv[2]);
                if (amount < 1)
                        return cli_fail("AMOUNT must be a whole number of wheel steps, at least 1");
                json_object_set_new(params, "amount", json_integer(amount));
        }
        return done(cli, desktop_call(cli, "desktop.scroll", json_incref(params)));
}

/* nsbox desktop type ID TEXT: TEXT "-" reads standard input. */
static int desktop_type(const struct cli *cli, int argc, char **argv)
{
        if (argc != 2)
                return cli_usage_error(cli);
        json_t *text = strcmp(argv[1], "-") == 0
                           ? cli_read_text(STDIN_FILENO, "standard input", 4096, "type text, not bytes")
                           : json_string(argv[1]);
        if (text == NULL)
                return EXIT_NSBOX_FAILED;
        return done(cli, desktop_call(cli, "desktop.type",
                                      json_pack("{s:s, s:o}", "sandbox_id", argv[0], "text", text)));
}

/* nsbox desktop key ID KEYS...: the keys pressed in turn. */
static int desktop_key(const struct cli *cli, int argc, char **argv)
{
        if (argc < 2)
                return cli_usage_error(cli);
        size_t len = 0;
        for (int i = 1; i < argc; i++)
                len += strlen(argv[i]) + 1;
        _cleanup_free_ char *keys = calloc(1, len + 1);
        if (keys == NULL)
                return cli_fail("out of memory");
        for (int i = 1; i < argc; i++) {
                if (i > 1)
                        strcat(keys, " ");
                strcat(keys, argv[i]);
        }
        return done(cli, desktop_call(cli, "desktop.key",
                                      json_pack("{s:s, s:s}", "sandbox_id", argv[0], "keys", keys)));
}

int cmd_desktop(const struct cli *cli, int argc, char **argv)
{
        static const struct {
                const char *name;
                int (*run)(const struct cli *cli, int argc, char **argv);
        } subcommands[] = {
                { "start", desktop_start }, { "screenshot", desktop_screenshot }, { "click", desktop_click },
                { "move", desktop_move },   { "scroll", desktop_scroll },         { "type", desktop_type },
                { "key", desktop_key },
        };
        for (size_t i = 0; argc >= 2 && i < ARRAY_SIZE(subcommands); i++) {
                if (strcmp(argv[1], subcommands[i].name) == 0)
                        return subcommands[i].run(cli, argc - 2, argv + 2);
        }
        return cli_usage_error(cli);
}
