/* Shared pieces of the nsbox commands. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "client.h"

/* Exit codes, as docker's: the command's own, 124 timeout, 128+N signal, 125 nsbox failed. */
#define EXIT_NSBOX_FAILED 125
#define EXIT_TIMEOUT      124

struct cli {
        const char *socket_path;
        bool json; /* print raw result objects */
};

/* Connect or print why and return NULL. */
struct client *cli_connect(const struct cli *cli);
/* Call a method; on failure print "nsbox: ..." and return NULL. */
json_t *cli_call(const struct cli *cli, struct client *c, const char *method, json_t *params);
void cli_print_json(const json_t *value);
/* Map an exec result to the process exit code and print its output. */
int cli_exec_exit_code(const json_t *result);
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parse "512M", "1G", "1048576" into bytes. */
int cli_parse_size(const char *text, unsigned long long *out);

int cmd_mcp(const struct cli *cli, int argc, char **argv);
