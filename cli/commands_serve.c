/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox serve --http ADDR ...: the HTTP front is its own program
 * (nsbox-http, linked with libmicrohttpd), so the CLI stays quick to start;
 * this execs it with the arguments given. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* nsbox-http beside this nsbox (the build tree, or PREFIX/bin), else PREFIX/bin's. */
static void find_nsbox_http(char *path, size_t len)
{
        ssize_t n = readlink("/proc/self/exe", path, len - sizeof("/nsbox-http"));
        if (n > 0) {
                path[n] = '\0';
                char *slash = strrchr(path, '/');
                if (slash != NULL) {
                        strcpy(slash, "/nsbox-http");
                        if (access(path, X_OK) == 0)
                                return;
                }
        }
        snprintf(path, len, "%s/bin/nsbox-http", NSBOX_PREFIX);
}

int cmd_serve(const struct cli *cli, int argc, char **argv)
{
        char path[4096];
        find_nsbox_http(path, sizeof(path));
        /* nsbox-http's own arguments, after the CLI's socket (a --socket among
         * them comes later and wins) */
        char **args = calloc(argc + 4, sizeof(char *));
        if (args == NULL)
                return cli_fail("out of memory");
        int n = 0;
        args[n++] = path;
        args[n++] = "--socket";
        args[n++] = (char *)cli->socket_path;
        for (int i = 1; i < argc; i++)
                args[n++] = argv[i];
        args[n] = NULL;
        execv(path, args);
        int saved = errno;
        free(args);
        return cli_fail("cannot run %s: %s", path, strerror(saved));
}
