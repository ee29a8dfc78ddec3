/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox browser and nsbox screenshot: the CDP endpoint of a sandbox's
 * Chromium, and a PNG of its page on standard output. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "io.h"
#include "json_cleanup.h"
#include "textenc.h"

int cmd_browser(const struct cli *cli, int argc, char **argv)
{
        bool unused;
        int code;
        if (!cli_flag_and_args(cli, argc, argv, NULL, 0, &unused, 1, 1, &code))
                return code;
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", argv[optind]);
        _cleanup_json_ json_t *result = cli_call_once(cli, "browser.start", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        puts(json_string_value(json_object_get(result, "cdp_url")) ?: "");
        return 0;
}

enum { OPT_URL = 1000, OPT_FULL_PAGE, OPT_WIDTH, OPT_HEIGHT };

int cmd_screenshot(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "url", required_argument, NULL, OPT_URL },
                                                  { "full-page", no_argument, NULL, OPT_FULL_PAGE },
                                                  { "width", required_argument, NULL, OPT_WIDTH },
                                                  { "height", required_argument, NULL, OPT_HEIGHT },
                                                  { 0 } };
        _cleanup_json_ json_t *params = json_object();
        int opt;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt == CLI_OPT_HELP || opt == CLI_OPT_ERROR)
                        return cli_opt_exit(opt);
                if (opt == OPT_URL) {
                        json_object_set_new(params, "url", json_string(optarg));
                } else if (opt == OPT_FULL_PAGE) {
                        json_object_set_new(params, "full_page", json_true());
                } else {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (*optarg == '\0' || *end != '\0')
                                return cli_fail("--%s %s: not a number of pixels",
                                                opt == OPT_WIDTH ? "width" : "height", optarg);
                        json_object_set_new(params, opt == OPT_WIDTH ? "width" : "height", json_integer(v));
                }
        }
        if (argc - optind != 1)
                return cli_usage_error(cli);
        if (!cli->json && isatty(STDOUT_FILENO))
                return cli_fail("the PNG goes to standard output, which is a terminal: redirect it "
                                "(nsbox screenshot ID > shot.png)");
        json_object_set_new(params, "sandbox_id", json_string(argv[optind]));
        _cleanup_json_ json_t *result = cli_call_once(cli, "browser.screenshot", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        json_t *png = json_object_get(result, "png");
        size_t len = 0;
        _cleanup_free_ void *bytes =
            base64_decode(json_string_value(png) ?: "", json_string_length(png), &len);
        if (bytes == NULL)
                return cli_fail("the screenshot is not base64");
        if (io_write_all(STDOUT_FILENO, bytes, len) < 0)
                return cli_fail("write the PNG: %m");
        return 0;
}
