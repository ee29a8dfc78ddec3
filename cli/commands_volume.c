/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox volume: create, list and remove named volumes (mounted with nsbox create -v NAME:/PATH),
 * and list the files of one without a sandbox. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"

enum { OPT_SIZE = CLI_OPT_FIRST_FREE };

static int volume_create(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "size", required_argument, NULL, OPT_SIZE }, { 0 } };
        const char *size = "1G", *name = NULL;
        /* The name before the options, as well as after (nsbox volume create data --size 10G). */
        if (argc >= 2 && argv[1][0] != '-') {
                name = argv[1];
                argc--;
                argv++;
        }
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                size = optarg;
        }
        if (argc - optind != (name == NULL ? 1 : 0))
                return cli_usage_error(cli);
        if (name == NULL)
                name = argv[optind];
        unsigned long long bytes;
        if (cli_parse_size(size, &bytes) < 0)
                return cli_fail("bad size \"%s\" (use e.g. 512M or 10G)", size);
        _cleanup_json_ json_t *params = json_pack("{s:s, s:I}", "name", name, "size", (json_int_t)bytes);
        _cleanup_json_ json_t *result = cli_call_once(cli, "volume.create", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json)
                cli_print_json(result);
        else
                puts(json_string_value(json_object_get(result, "name")));
        return 0;
}

static int volume_list(const struct cli *cli)
{
        _cleanup_json_ json_t *params = json_object();
        _cleanup_json_ json_t *result = cli_call_once(cli, "volume.list", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        printf("%-24s  %8s  %8s  %9s  %s\n", "NAME", "SIZE", "USED", "SANDBOXES", "OWNER");
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(result, "volumes"), i, v)
        {
                char size[32], used[32];
                cli_format_size(json_object_get(v, "size_bytes"), size, sizeof(size));
                cli_format_size(json_object_get(v, "allocated_bytes"), used, sizeof(used));
                printf("%-24.64s  %8s  %8s  %9lld  %lld\n", json_string_value(json_object_get(v, "name")),
                       size, used, (long long)json_integer_value(json_object_get(v, "in_use")),
                       (long long)json_integer_value(json_object_get(v, "owner")));
        }
        return 0;
}

/* NAME[:PATH]: the directory PATH of the volume (its root by default), by volume.fs.list. */
static int volume_files(const struct cli *cli, const char *spec)
{
        const char *colon = strchr(spec, ':');
        _cleanup_free_ char *name = colon ? strndup(spec, (size_t)(colon - spec)) : strdup(spec);
        if (name == NULL)
                return cli_fail("out of memory");
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s}", "volume", name, "path", colon && colon[1] ? colon + 1 : "/");
        if (params == NULL) /* json_pack takes UTF-8 text only */
                return cli_fail("the volume's name and path must be UTF-8 text");
        _cleanup_json_ json_t *result = cli_call_once(cli, "volume.fs.list", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        if (cli->json) {
                cli_print_json(result);
                return 0;
        }
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(result, "entries"), i, e)
        {
                char size[32];
                const char *type = json_string_value(json_object_get(e, "type"));
                cli_format_size(json_object_get(e, "size"), size, sizeof(size));
                printf("%-7s  %8s  %04llo  %s%s\n", type ? type : "?", size,
                       (unsigned long long)json_integer_value(json_object_get(e, "mode")),
                       json_string_value(json_object_get(e, "name")),
                       type && strcmp(type, "dir") == 0 ? "/" : "");
        }
        if (json_is_true(json_object_get(result, "truncated")))
                fprintf(stderr, "nsbox: %lld entries, the first %lld shown\n",
                        (long long)json_integer_value(json_object_get(result, "total_entries")),
                        (long long)json_array_size(json_object_get(result, "entries")));
        return 0;
}

int cmd_volume(const struct cli *cli, int argc, char **argv)
{
        if (argc >= 2 && strcmp(argv[1], "create") == 0)
                return volume_create(cli, argc - 1, argv + 1);
        if (argc == 2 && strcmp(argv[1], "ls") == 0)
                return volume_list(cli);
        if (argc == 3 && strcmp(argv[1], "ls") == 0)
                return volume_files(cli, argv[2]);
        if (argc >= 3 && strcmp(argv[1], "rm") == 0)
                return cli_call_each(cli, "volume.remove", "name", NULL, argc - 2, argv + 2);
        return cli_usage_error(cli);
}
