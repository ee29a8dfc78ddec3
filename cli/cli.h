/* SPDX-License-Identifier: Apache-2.0 */
/* Shared pieces of the nsbox commands. */
#pragma once

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>

#include "client.h"

/* Exit codes, as docker's: the command's own, 124 timeout, 128+N signal, 125 nsbox failed. */
#define EXIT_NSBOX_FAILED 125
#define EXIT_TIMEOUT      124
/* nsboxd went away while the command ran: its exit status is unknown (as ssh's 255) */
#define EXIT_DAEMON_GONE 255

struct cli {
        const char *socket_path;
        bool json;           /* print raw result objects */
        const char *command; /* the command being run, for its usage text */
};

/* Connect or print why and return NULL. */
struct client *cli_connect(const struct cli *cli);
/* Call a method; on failure print "nsbox: ..." and return NULL. */
json_t *cli_call(const struct cli *cli, struct client *c, const char *method, json_t *params);
/* cli_call on a connection of its own, closed after (params: borrowed). */
json_t *cli_call_once(const struct cli *cli, const char *method, json_t *params);
/* `method` once per argument, {key: argv[i]} plus the fields of `extra`
 * (may be NULL); each printed as done (the argument, or the result with
 * --json), as docker rm does. EXIT_NSBOX_FAILED if any failed. */
int cli_call_each(const struct cli *cli, const char *method, const char *key, const json_t *extra, int argc,
                  char **argv);
/* cli_call, with the notifications that arrive before the answer going to `notify`. */
json_t *cli_call_notified(const struct cli *cli, struct client *c, const char *method, json_t *params,
                          client_notify_cb notify, void *data);
void cli_print_json(const json_t *value);
/* Map an exec result to the process exit code. */
int cli_exec_exit_code(const json_t *result);
/* Print "nsbox: <message>" as one line on stderr; returns EXIT_NSBOX_FAILED. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "nsbox: usage: <synopsis of the current command>"; returns EXIT_NSBOX_FAILED. */
int cli_usage_error(const struct cli *cli);
/* All of fd as a JSON string of UTF-8 text without NUL bytes, at most max
 * bytes; NULL after printing why (`what` names the input, `hint` follows a
 * refusal of binary data). */
json_t *cli_read_text(int fd, const char *what, size_t max, const char *hint);
/* A result's "stdout" and "stderr" strings (utf-8) to our stdout and stderr. */
void cli_print_text_output(const json_t *result);
/* The same of a file, or of standard input for "-" (then named `stdin_what`);
 * `option` prefixes the message of a file that does not open. */
json_t *cli_read_path(const char *path, const char *option, const char *stdin_what, size_t max);
/* True when the error object says the daemon lacks the method (an older nsboxd
 * or a method still to come). */
bool cli_error_is_missing_method(const json_t *error);

/* getopt_long with nsbox's conventions: stops at the first argument, adds
 * -h/--help, reports a bad option on one line. Returns the option, -1 at the
 * end of the options, CLI_OPT_HELP after printing the help, CLI_OPT_ERROR
 * after printing an error. */
#define CLI_OPT_HELP  (-2)
#define CLI_OPT_ERROR (-3)
int cli_getopt(const struct cli *cli, int argc, char **argv, const char *shortopts,
               const struct option *longopts);
/* The exit code for CLI_OPT_HELP (0) or CLI_OPT_ERROR (125). */
static inline int cli_opt_exit(int opt)
{
        return opt == CLI_OPT_HELP ? 0 : EXIT_NSBOX_FAILED;
}

/* A command's only option, a flag (--name, and -c where c is not 0), and
 * its arguments: at least min_args, at most max_args (-1: no limit). True
 * with *flag set and optind at the first argument; false with *exit_code
 * what the command returns (0 after --help). */
bool cli_flag_and_args(const struct cli *cli, int argc, char **argv, const char *name, char c, bool *flag,
                       int min_args, int max_args, int *exit_code);

/* Parse "512M", "1G", "1048576" into bytes (size_parse, common/size.h). */
int cli_parse_size(const char *text, unsigned long long *out);
/* A byte count (a JSON integer) as "20KiB": one word, so the columns of a
 * table split on white space. */
void cli_format_size(json_t *bytes, char *out, size_t len);
/* Parse a positive number of seconds. */
int cli_parse_seconds(const char *text, double *out);
/* "K=V" into obj.env. */
int cli_add_env(json_t *obj, const char *kv);
json_t *cli_argv_to_json(int argc, char **argv);

/* SIGINT, SIGTERM and SIGHUP, blocked and readable on the returned signalfd
 * (for client_set_interrupt_fd). Returns -1 on failure. */
int cli_catch_signals(void);
/* The signal waiting on the signalfd (0 if none): the exit code is 128+N. */
int cli_caught_signal(int signal_fd);

/* The path of the program NAME beside the running nsbox (the build tree, or
 * PREFIX/bin) into path: 0, or -1. */
int cli_sibling_binary(const char *name, char *path, size_t len);

/* A private nsboxd for `nsbox run` when none is listening. */
struct private_daemon {
        int pid;
        char *dir;
        char *socket_path;
};
int private_daemon_start(struct private_daemon *pd, int signal_fd, nsbox_error_t **err);
void private_daemon_stop(struct private_daemon *pd);

int cmd_create(const struct cli *cli, int argc, char **argv);
int cmd_ls(const struct cli *cli, int argc, char **argv);
int cmd_info(const struct cli *cli, int argc, char **argv);
int cmd_rm(const struct cli *cli, int argc, char **argv);
int cmd_pause(const struct cli *cli, int argc, char **argv);
int cmd_resume(const struct cli *cli, int argc, char **argv);
int cmd_status(const struct cli *cli, int argc, char **argv);
int cmd_version(const struct cli *cli, int argc, char **argv);
int cmd_exec(const struct cli *cli, int argc, char **argv);
int cmd_sh(const struct cli *cli, int argc, char **argv);
int cmd_run(const struct cli *cli, int argc, char **argv);
int cmd_python(const struct cli *cli, int argc, char **argv);
int cmd_pip(const struct cli *cli, int argc, char **argv);
int cmd_cp(const struct cli *cli, int argc, char **argv);
int cmd_mcp(const struct cli *cli, int argc, char **argv);
int cmd_serve(const struct cli *cli, int argc, char **argv);
int cmd_update(const struct cli *cli, int argc, char **argv);
int cmd_stats(const struct cli *cli, int argc, char **argv);
int cmd_events(const struct cli *cli, int argc, char **argv);
int cmd_metrics(const struct cli *cli, int argc, char **argv);
int cmd_port(const struct cli *cli, int argc, char **argv);
int cmd_browser(const struct cli *cli, int argc, char **argv);
int cmd_screenshot(const struct cli *cli, int argc, char **argv);
int cmd_shell(const struct cli *cli, int argc, char **argv);
int cmd_ps(const struct cli *cli, int argc, char **argv);
int cmd_logs(const struct cli *cli, int argc, char **argv);
int cmd_kill(const struct cli *cli, int argc, char **argv);
int cmd_snapshot(const struct cli *cli, int argc, char **argv);
int cmd_snapshots(const struct cli *cli, int argc, char **argv);
int cmd_fork(const struct cli *cli, int argc, char **argv);
int cmd_volume(const struct cli *cli, int argc, char **argv);
int cmd_commit(const struct cli *cli, int argc, char **argv);
int cmd_images(const struct cli *cli, int argc, char **argv);
int cmd_image(const struct cli *cli, int argc, char **argv);
int cmd_desktop(const struct cli *cli, int argc, char **argv);

/* Write an exec's stdout or stderr string to fd, decoded when base64. */
int cli_write_output(int fd, const json_t *text, bool base64);
/* Streamed output is passed on, not kept: the CLI asks the daemon's largest
 * cap (EXEC_MAX_MAX_OUTPUT) unless --max-output says otherwise. */
#define CLI_STREAM_MAX_OUTPUT (256u << 20)
/* "nsbox: output truncated at 1 MiB (N more bytes dropped); raise it with
 * --max-output BYTES" on stderr when the result says truncated (cap: the
 * max_output_bytes asked). */
void cli_print_truncated(const json_t *result, size_t cap);
/* As cli_fail; with --json also {"error": {message, kind}} on stdout (kind
 * from the JSON-RPC error object, if any). Returns EXIT_NSBOX_FAILED. */
int cli_fail_json(const struct cli *cli, const json_t *error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Options of sandbox.create, shared by create and run. */
enum {
        CLI_OPT_SESSION = 1000,
        CLI_OPT_MEMORY,
        CLI_OPT_PIDS,
        CLI_OPT_CPUS,
        CLI_OPT_DISK,
        CLI_OPT_IDLE,
        CLI_OPT_IDLE_ACTION,
        CLI_OPT_PAUSED_TIMEOUT,
        CLI_OPT_IMAGE,
        CLI_OPT_PROFILE,
        CLI_OPT_ENV,
        CLI_OPT_NETWORK,
        CLI_OPT_NETWORK_POLICY,
        CLI_OPT_LABEL,
        CLI_OPT_FROM_SNAPSHOT,
        CLI_OPT_SECRET,
        CLI_OPT_SECRET_FILE,
        CLI_OPT_SECRET_HEADER,
        CLI_OPT_FIRST_FREE /* commands number their own options from here */
};
/* -v/--volume SRC:PATH[:ro|:rw]: also a short option where the command takes "v:". */
#define CLI_OPT_MOUNT 'v'
#define CLI_CREATE_OPTIONS                                                         \
        { "session", required_argument, NULL, CLI_OPT_SESSION },                   \
            { "memory", required_argument, NULL, CLI_OPT_MEMORY },                 \
            { "pids", required_argument, NULL, CLI_OPT_PIDS },                     \
            { "cpus", required_argument, NULL, CLI_OPT_CPUS },                     \
            { "disk", required_argument, NULL, CLI_OPT_DISK },                     \
            { "idle-timeout", required_argument, NULL, CLI_OPT_IDLE },             \
            { "idle-action", required_argument, NULL, CLI_OPT_IDLE_ACTION },       \
            { "paused-timeout", required_argument, NULL, CLI_OPT_PAUSED_TIMEOUT }, \
            { "image", required_argument, NULL, CLI_OPT_IMAGE },                   \
            { "network", required_argument, NULL, CLI_OPT_NETWORK },               \
            { "network-policy", required_argument, NULL, CLI_OPT_NETWORK_POLICY }, \
            { "label", required_argument, NULL, CLI_OPT_LABEL },                   \
            { "from-snapshot", required_argument, NULL, CLI_OPT_FROM_SNAPSHOT },   \
            { "volume", required_argument, NULL, CLI_OPT_MOUNT },                  \
            { "secret", required_argument, NULL, CLI_OPT_SECRET },                 \
            { "secret-file", required_argument, NULL, CLI_OPT_SECRET_FILE },       \
            { "secret-header", required_argument, NULL, CLI_OPT_SECRET_HEADER },   \
        {                                                                          \
                "seccomp-profile", required_argument, NULL, CLI_OPT_PROFILE        \
        }
/* --network NAME or --network-policy FILE|- (a JSON policy object) into
 * params.network: 0 done, else an exit code (after printing why). Used by
 * create, run and update. */
int cli_network_option(json_t *params, int opt, const char *arg);
/* Print "nsbox: network policy refused X" on stderr for each entry of the
 * result's network_refused that its stderr text does not already say. */
void cli_print_network_refused(const json_t *result);

/* Apply one create option to sandbox.create params: 0 done, 1 not a create
 * option, else an exit code (after printing why). */
int cli_create_option(json_t *params, int opt, const char *arg);
