/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox: the command-line client of nsboxd. Shared helpers and dispatch;
 * the commands live in cli/commands_*.c. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "failure.h"
#include "json_cleanup.h"
#include "size.h"
#include "textenc.h"
#include "users.h"
#include "version.h"
#include "jsonrpc.h"
#include "json_memory.h"
#include "io.h"

struct command {
        const char *name;
        int (*run)(const struct cli *cli, int argc, char **argv);
        const char *synopsis;
        const char *help; /* what it does and its options */
};

static const struct command commands[] = {
        { "create", cmd_create,
          "nsbox create [--session ID] [--memory 512M] [--pids N] [--cpus F] [--disk 1G] [--idle-timeout "
          "SEC] "
          "[--env K=V]... [--label K=V]... [-v SRC:PATH[:ro|:rw]]... [--network NAME | --network-policy "
          "FILE] [--secret-file NAME=PATH@HOSTS]...",
          "Create a sandbox and print its id.\n\n"
          "  --session ID        get-or-create: reuse the live sandbox of this session\n"
          "  --memory SIZE       memory of its processes (e.g. 512M, 1G)\n"
          "  --pids N            process limit\n"
          "  --cpus F            CPU limit in CPUs (e.g. 0.5)\n"
          "  --disk SIZE         its disk (in RAM, beside --memory); full is ENOSPC\n"
          "  --idle-timeout SEC  pause it after SEC seconds without use (default 300)\n"
          "  --idle-action pause|remove  what idling does (default the operator's: pause)\n"
          "  --paused-timeout SEC  remove it after SEC seconds paused (default 86400)\n"
          "  --env K=V           environment of every command (repeatable)\n"
          "  --label K=V         a label, shown by ls and matched by ls --filter (repeatable)\n"
          "  -v, --volume SRC:PATH[:ro|:rw]\n"
          "                      mount at PATH a volume (SRC a name, nsbox volume; writable\n"
          "                      unless :ro) or a directory of yours on the host (SRC a path:\n"
          "                      /home/me/project, $PWD, .; read-only unless :rw; files made\n"
          "                      in it are yours; only below nsboxd's host_mount_roots)\n"
          "  --image NAME        image (default python, or one of nsbox images)\n"
          "  --from-snapshot SNAP  start with the files of a snapshot (nsbox snapshot):\n"
          "                      its image, a writable layer of its own, fresh processes\n"
          "  --seccomp-profile P seccomp profile name (default default)\n"
          "  --network NAME      network under one of the operator's network policies (names\n"
          "                      in nsboxd's network_policies); none (the default): no network\n"
          "  --network-policy FILE\n"
          "                      network under a policy of your own, a JSON object read from\n"
          "                      FILE or - (standard input): {\"allow\": [\"pypi.org\", \"*.example.com\",\n"
          "                      \"203.0.113.0/24\"], \"deny\": [...]}; only when nsboxd allows it\n"
          "                      (allow_client_network_policies)\n"
          "  --secret-file NAME=PATH@HOST[,HOST...]\n"
          "                      a secret read from PATH (- standard input) the sandbox never\n"
          "                      sees: its env has NSBOX_SECRET_NAME, a placeholder the egress\n"
          "                      proxy replaces with the value in an Authorization header to\n"
          "                      HOSTs only (repeatable; needs --network; see docs/secrets.md)\n"
          "  --secret NAME=VALUE@HOST[,HOST...]\n"
          "                      the same with the value on the command line (seen by ps)\n"
          "  --secret-header 'NAME=Authorization: Bearer {value}'\n"
          "                      send the secret in this header to its hosts instead\n" },
        { "ls", cmd_ls, "nsbox ls [-a] [-q] [-f FILTER]... [--format FORMAT]",
          "List your sandboxes (root: everyone's): id, state, owner, creation time, when\n"
          "it is paused or removed if left idle (EXPIRES), session name and labels.\n\n"
          "  -a, --all            include sandboxes that are no longer running, and those\n"
          "                       removed lately: when and why\n"
          "  -q, --quiet          print the ids only\n"
          "  -f, --filter FILTER  only sandboxes that match (all filters given): label=KEY,\n"
          "                       label=KEY=VALUE, id=PREFIX, session=NAME, state=STATE\n"
          "  --format FORMAT      one line per sandbox from a Go-template-like text:\n"
          "                       {{.ID}} {{.Image}} {{.Status}} {{.State}} {{.Session}}\n"
          "                       {{.CreatedAt}} {{.LastUsed}} {{.Network}} {{.Labels}}\n"
          "                       {{.Label \"KEY\"}} {{json .}} {{json .FIELD}}; \\t and \\n as\n"
          "                       tab and newline. Anything else is an error, not empty.\n" },
        { "list", cmd_ls, "nsbox list [-a] [-q] [-f FILTER]... [--format FORMAT]", "Same as nsbox ls.\n" },
        { "info", cmd_info, "nsbox info ID",
          "Show a sandbox's details, limits and resource usage, as JSON: when and why it is\n"
          "paused or removed if left idle (\"expires\"); for a sandbox with network, its\n"
          "\"egress\" block: its address, exposed ports and traffic counts.\n" },
        { "update", cmd_update,
          "nsbox update [--network NAME|none | --network-policy FILE] [--secret-file NAME=PATH@HOSTS]... "
          "[--no-secrets] ID",
          "Change a running sandbox's network or secrets and print its details. Takes effect\n"
          "for new connections; none removes its network (and its exposed ports).\n\n"
          "  --network NAME         one of the operator's network policies, or none\n"
          "  --network-policy FILE  a policy object of your own (JSON, FILE or -), when\n"
          "                         nsboxd allows it\n"
          "  --secret-file NAME=PATH@HOST[,HOST...], --secret NAME=VALUE@HOST[,HOST...],\n"
          "  --secret-header 'NAME=Authorization: Bearer {value}'\n"
          "                         as nsbox create's: the secrets given replace the\n"
          "                         sandbox's (a name it had keeps its placeholder)\n"
          "  --no-secrets           remove all its secrets\n" },
        { "port", cmd_port, "nsbox port [--remove] ID PORT",
          "Make TCP port PORT of a sandbox (one with network) reachable from this host and\n"
          "print its URL (http://127.0.0.1:HOST_PORT/); again for the same port, the same URL.\n\n"
          "  --remove  stop exposing PORT\n" },
        { "browser", cmd_browser, "nsbox browser ID",
          "Print the CDP endpoint (ws://127.0.0.1:PORT/devtools/browser/...) of the headless\n"
          "Chromium of a sandbox made from the browser image (one with network), starting it\n"
          "if it is not running: Playwright's connectOverCDP and browser_use take it.\n" },
        { "screenshot", cmd_screenshot,
          "nsbox screenshot [--url URL] [--full-page] [--width W] [--height H] ID",
          "Write a PNG of the page of a browser sandbox's Chromium to standard output\n"
          "(nsbox screenshot ID > shot.png), starting the browser if it is not running.\n\n"
          "  --url URL     load URL (http, https, about: or data:) first\n"
          "  --full-page   the whole page, not only the viewport\n"
          "  --width W, --height H  the viewport in pixels (16 to 4096; 1280x800 by default)\n" },
        { "rm", cmd_rm, "nsbox rm [-f] ID...",
          "Remove sandboxes, killing everything in them.\n\n"
          "  -f, --force  remove even while a command runs\n" },
        { "pause", cmd_pause, "nsbox pause [-f] ID...",
          "Pause sandboxes: freeze every process in them (cgroup freezer). A paused sandbox\n"
          "keeps its memory and files but uses no CPU; ls shows it as paused. Its files can\n"
          "still be read and written (cp); exec, python, pip and shell resume it first, as\n"
          "does nsbox resume.\n\n"
          "  -f, --force  pause even while a command runs in it (its timeout keeps counting)\n" },
        { "resume", cmd_resume, "nsbox resume ID...", "Resume paused sandboxes: their processes run on.\n" },
        { "exec", cmd_exec,
          "nsbox exec [-i] [-t] [-d] [-e K=V] [-w DIR] [-u root] [--timeout S] [--max-output BYTES] ID -- "
          "CMD "
          "[ARG...]",
          "Run a command in a sandbox, streaming its output byte for byte; exit with its exit\n"
          "code (124 on timeout, 127/126 when it cannot start, with the reason on stderr).\n"
          "Ctrl-C passes SIGINT to the command (once it has printed something: the exec id\n"
          "comes with its first output); a second Ctrl-C kills it.\n\n"
          "  --timeout S         kill the command after S seconds (default 30 s; with -d or\n"
          "                      -t none but the daemon's cap, 24 h)\n"
          "  -w, --cwd DIR       working directory (default /workspace; a relative DIR is\n"
          "                      under /workspace)\n"
          "  -e, --env K=V       environment variable (repeatable)\n"
          "  -u, --user USER     sandbox (default) or root (the sandbox's own root)\n"
          "  -i, --stdin         pass this program's standard input, any bytes, as it comes\n"
          "  -d, --detach        run in the background and print its exec id; see nsbox ps,\n"
          "                      logs and kill (its output is kept up to --max-output, 1 MiB\n"
          "                      by default)\n"
          "  --max-output BYTES  output cap (e.g. 4M, at most 256M); default 256 MiB when\n"
          "                      streamed, 1 MiB with --json or -d; past it output is cut\n"
          "                      and nsbox says so on stderr\n"
          "  -t, --tty           run on a terminal (pty) in the sandbox; with -i this\n"
          "                      terminal goes raw and keys (Ctrl-C too) go to it as typed;\n"
          "                      window size changes follow; TERM is yours (xterm-256color\n"
          "                      if unset) unless -e sets it\n"
          "A sandbox idle (no command running) for its idle timeout, 300 s unless created\n"
          "with --idle-timeout, is paused (the next command resumes it, files, variables and\n"
          "shells as they were) and removed after 24 h paused; nsbox ls shows when (EXPIRES).\n"
          "A command naming a removed sandbox says when and why it went.\n" },
        { "sh", cmd_sh,
          "nsbox sh [-i] [-d] [-e K=V] [-w DIR] [-u root] [--timeout S] [--max-output BYTES] ID "
          "'shell command'",
          "Run a command line under /bin/sh -c in a sandbox; options and defaults as for\n"
          "nsbox exec (timeout 30 s, output cap 256 MiB streamed, 1 MiB with --json or -d).\n" },
        { "ps", cmd_ps, "nsbox ps [-q] ID",
          "List the background execs of a sandbox (nsbox exec -d): their state (running,\n"
          "or how they ended: the last 64 ended ones are kept), start (UTC) and command.\n\n"
          "  -q, --quiet  print the exec ids only\n" },
        { "logs", cmd_logs, "nsbox logs [-f] [-n N] ID EXEC",
          "Print the output of a background exec so far, stdout to stdout and stderr to\n"
          "stderr. Of a long job it keeps the first --max-output bytes (1 MiB by default)\n"
          "and the last half as many of each stream, and says how much was dropped between.\n\n"
          "  -f, --follow    keep printing new output until the exec ends\n"
          "  -n, --tail N    start with the last N lines of each stream\n" },
        { "kill", cmd_kill, "nsbox kill [-s SIG] ID EXEC",
          "Send a signal to an exec (its whole process group; KILL ends every process it\n"
          "started) and print its id.\n\n"
          "  -s, --signal SIG  signal name or number (default KILL)\n" },
        { "shell", cmd_shell,
          "nsbox shell [--timeout S] ID [NAME] | nsbox shell run [--timeout S] [-d] ID NAME -- CMD... | "
          "nsbox shell check|rm ID NAME | nsbox shell ls ID",
          "Persistent shell sessions: a named bash in a sandbox that keeps its cwd, variables\n"
          "and functions between commands.\n\n"
          "  nsbox shell ID [NAME]  run each line of standard input in session NAME (made if\n"
          "                         missing; without NAME a new session, ended at EOF)\n"
          "  shell run ID NAME -- CMD  run one command line in NAME (made if missing); exit\n"
          "                         with its code\n"
          "  shell check ID NAME    output so far and status of NAME's last command\n"
          "  shell ls ID            list the sessions (at most 16 per sandbox)\n"
          "  shell rm ID NAME       end a session and everything it runs\n\n"
          "  --timeout S  interrupt the command (SIGINT, then SIGTERM) after S seconds (default\n"
          "               30; the shell and its state remain; exit 124)\n"
          "  -d, --detach (run) do not wait: print the command id; see shell check\n"
          "nsbox's options come before ID: in shell run, what follows NAME (after an\n"
          "optional --) is the command line, and a command line starting with - needs the --.\n" },
        { "python", cmd_python,
          "nsbox python [--stateful] [--require PKG]... [--timeout S] [--max-output BYTES] ID FILE|- "
          "[ARG...] "
          "| "
          "-c CODE [ARG...]",
          "Run Python code in a sandbox (python.run) from FILE, from standard input (-),\n"
          "or from -c CODE, as `python3 FILE ARG...` would: ARGs are sys.argv[1:], the\n"
          "code is named FILE in sys.argv[0] and tracebacks, runs in /workspace (which\n"
          "is first on sys.path) and is not written into /workspace. Its output is\n"
          "printed as it comes; figures it leaves open and did not save itself are saved\n"
          "as PNGs in the sandbox's /tmp/nsbox-figures (its newest 64 are kept) and their\n"
          "paths said on stderr.\n"
          "Exit with the program's exit code (124 on timeout; default timeout 30 s), also\n"
          "when its output was cut at --max-output: that is said on stderr.\n\n"
          "  -c, --code CODE     the code itself\n"
          "  --stateful          run in the sandbox's persistent interpreter (variables\n"
          "                      survive; no ARGs; a trailing expression is printed)\n"
          "  --require PKG       pip-install PKG first (repeatable)\n"
          "  --timeout S         time limit in seconds\n"
          "  --max-output BYTES  output kept, stdout and stderr together (e.g. 4M);\n"
          "                      default 256M, or 1M with --stateful or --json (at most\n"
          "                      8M with --stateful)\n" },
        { "pip", cmd_pip, "nsbox pip [--index-url URL] [--find-links DIR] ID PKG...",
          "Install Python packages into a sandbox (package.install); exit with pip's code.\n\n"
          "  --index-url URL   package index (\"\" for none: offline)\n"
          "  --find-links DIR  a sandbox directory of wheels\n" },
        { "cp", cmd_cp, "nsbox cp ID:PATH LOCAL | nsbox cp LOCAL ID:PATH",
          "Copy a file, directory or symlink out of or into a sandbox (as docker cp), byte\n"
          "for byte, with modes (not owners). A relative sandbox PATH is under /workspace;\n"
          "into an existing directory a source keeps its name (SRC/. copies its contents);\n"
          "no directory is made (a PATH ending in / must exist: mkdir -p it first).\n"
          "LOCAL - is a tar stream for a directory (out: `cp ID:DIR - > a.tar`; in:\n"
          "`tar c . | cp - ID:DIR`, into an existing DIR) and the raw bytes of a file.\n"
          "A failed copy (or one into a sandbox stopped by Ctrl-C) leaves nothing behind,\n"
          "and a file it would replace stays whole; of one into a sandbox killed mid-way\n"
          "(kill -9), nsboxd removes what it wrote. FIFOs and devices are skipped with a\n"
          "warning.\n" },
        { "run", cmd_run,
          "nsbox run [create options] [-e K=V] [-w DIR] [-u root] [--timeout S] [--max-output BYTES] -- "
          "CMD [ARG...]",
          "Create a sandbox, run one command in it with live output, remove it; exit with\n"
          "the command's exit code. Takes the options of nsbox create; --env applies to\n"
          "the command; --timeout (default 30 s), -w, -u and --max-output as for nsbox exec.\n"
          "With no nsboxd listening it runs a private one for the duration of the\n"
          "command (with no network policies: no --network); as a user other than root,\n"
          "that one is nsboxd --rootless (a user namespace from /etc/subuid).\n" },
        { "snapshot", cmd_snapshot,
          "nsbox snapshot [--name NAME] ID | nsbox snapshot ls | nsbox snapshot rm SNAP...",
          "Snapshot the files of a sandbox (its /workspace, /tmp and every change to its image,\n"
          "deletions included; not its processes) and print the snapshot id; list your\n"
          "snapshots; remove snapshots (refused while a sandbox made from one lives).\n\n"
          "  --name NAME   a label shown by nsbox snapshot ls\n" },
        { "volume", cmd_volume,
          "nsbox volume create [--size SIZE] NAME | nsbox volume ls [NAME[:PATH]] | nsbox volume rm NAME...",
          "Named volumes: file systems of their own size (default 1G; full is ENOSPC) that\n"
          "outlive sandboxes and restarts of nsboxd, mounted with nsbox create -v NAME:/PATH\n"
          "into one sandbox or many at once. ls lists yours (root: everyone's), or with\n"
          "NAME[:PATH] the files of a directory of one (its root by default) without a\n"
          "sandbox; rm is refused while a sandbox uses the volume.\n\n"
          "  --size SIZE   its size (e.g. 512M, 10G); host disk is taken as it is written\n" },
        { "snapshots", cmd_snapshots, "nsbox snapshots", "Same as nsbox snapshot ls.\n" },
        { "fork", cmd_fork, "nsbox fork [--name NAME] [create options] ID",
          "Snapshot a sandbox's files and create a sandbox from the snapshot (nsbox create\n"
          "--from-snapshot); print the new sandbox's id. The two then change apart. The\n"
          "snapshot goes with the last sandbox made from it; with --name it stays (nsbox\n"
          "snapshot ls) and makes more forks.\n" },
        { "commit", cmd_commit, "nsbox commit ID NAME",
          "Make an image NAME of a sandbox's file changes (e.g. after nsbox pip), layered\n"
          "on the sandbox's image: nsbox create --image NAME starts sandboxes with them.\n"
          "The image is yours: other users neither see nor use it.\n" },
        { "stats", cmd_stats, "nsbox stats [--no-stream] [ID]",
          "What your sandboxes (or one) use, refreshed every second on a terminal (as docker\n"
          "stats) until interrupted (Ctrl-C): CPU % of one CPU, memory and its limit, disk (the\n"
          "writable layer) and its limit, processes. Not on a terminal, or with --no-stream:\n"
          "one table. With --json the sandbox.stats results.\n\n"
          "  --no-stream   print one table and exit\n" },
        { "events", cmd_events, "nsbox events [ID]",
          "Print nsboxd's events as they happen (events.subscribe), for your sandboxes or one:\n"
          "sandbox.created, sandbox.removed (with its reason), sandbox.paused, sandbox.resumed,\n"
          "exec.started, exec.ended (exit code, timeout). --json prints one object per line.\n"
          "Runs until interrupted or nsboxd stops.\n" },
        { "metrics", cmd_metrics, "nsbox metrics",
          "Print nsboxd's metrics in the Prometheus text format (server.metrics): for root,\n"
          "request counts and latencies, events and every sandbox's use; for other users,\n"
          "their own sandboxes' use.\n" },
        { "images", cmd_images, "nsbox images",
          "List the images you may use: the operator's and your committed ones, with the\n"
          "size of their own layer and their parent.\n" },
        { "image", cmd_image,
          "nsbox image ls | nsbox image rm NAME... | nsbox image import [--tag TAG] PATH NAME",
          "List images, remove committed or imported images (refused while sandboxes,\n"
          "snapshots or other images use them; the operator's images are not removed this\n"
          "way), or import an image (root only): PATH is an OCI image layout directory\n"
          "(--tag, default latest) or a docker-archive tarball (docker save); the image is\n"
          "then everyone's to use.\n" },
        { "desktop", cmd_desktop, "nsbox desktop start|screenshot|click|move|scroll|type|key ID ...",
          "Computer use on a sandbox made from the desktop image (docs/desktop.md):\n\n"
          "  start [--size WxH] ID   start its screen (default 1280x800), window manager,\n"
          "                          VNC and noVNC; print the noVNC URL to watch it from\n"
          "                          this host (a sandbox with network; without, it says\n"
          "                          why not); again: the running desktop\n"
          "  screenshot ID [FILE]    the screen as PNG, to FILE or to standard output\n"
          "  click [--right|--middle] [--double] ID X Y\n"
          "                          click at X Y (pixels from the top left)\n"
          "  move ID X Y             move the pointer to X Y\n"
          "  scroll ID DIRECTION [N] turn the wheel N steps (default 3) up, down, left or\n"
          "                          right\n"
          "  type ID TEXT            type TEXT as it is, newlines as Enter (- reads it from\n"
          "                          standard input; at most 4096 bytes)\n"
          "  key ID KEYS...          press xdotool keys in turn, e.g. ctrl+l Return\n" },
        { "status", cmd_status, "nsbox status",
          "Show the daemon's version, kernel, cgroup mode and features.\n" },
        { "mcp", cmd_mcp, "nsbox mcp [--session NAME]",
          "Serve MCP (Model Context Protocol) on standard input/output (newline-delimited\n"
          "JSON-RPC; logs on stderr). Tool calls that name no session_id or sandbox_id\n"
          "share one sandbox, removed when the server ends (EOF on stdin, SIGTERM, SIGHUP\n"
          "or SIGINT); sandboxes of named sessions are kept.\n\n"
          "  --session NAME  that shared sandbox is session NAME's and is kept at the end\n"
          "                  (until its idle timeout): a later nsbox mcp --session NAME\n"
          "                  finds its files and variables again\n" },
        { "serve", cmd_serve,
          "nsbox serve --http ADDR [--tokens FILE] [--tls-cert FILE --tls-key FILE] [--socket PATH]",
          "Serve nsboxd's API over HTTP (runs nsbox-http; see nsbox-http --help and\n"
          "docs/http-and-kubernetes.md): nsbox's JSON-RPC methods at POST /v1/rpc/METHOD, POST\n"
          "/execute {code} and GET /health, and the agent-sandbox runtime endpoints.\n\n"
          "  --http ADDR           HOST:PORT to listen on (e.g. 127.0.0.1:8080)\n"
          "  --tokens FILE         bearer tokens, `UID TOKEN` or `UID sha256:HEX` a line; required\n"
          "                        unless ADDR is a loopback address\n"
          "  --tls-cert/--tls-key  serve HTTPS with these PEM files\n" },
        { "version", cmd_version, "nsbox version",
          "Print the version of this nsbox and of the nsboxd it talks to (server.info);\n"
          "nsbox --version does the same. Exit 125 when nsboxd cannot be reached (this\n"
          "nsbox's version is printed all the same).\n" },
};

static const struct command *find_command(const char *name)
{
        for (size_t k = 0; k < ARRAY_SIZE(commands); k++) {
                if (name != NULL && strcmp(commands[k].name, name) == 0)
                        return &commands[k];
        }
        return NULL;
}

int cli_fail(const char *fmt, ...)
{
        fflush(stdout);
        va_list ap;
        va_start(ap, fmt);
        failure_vprint(fmt, ap);
        va_end(ap);
        return EXIT_NSBOX_FAILED;
}

int cli_usage_error(const struct cli *cli)
{
        const struct command *cmd = find_command(cli->command);
        if (cmd == NULL)
                return cli_fail("usage: nsbox COMMAND (see nsbox --help)");
        return cli_fail("usage: %s (see nsbox %s --help)", cmd->synopsis, cmd->name);
}

int cli_getopt(const struct cli *cli, int argc, char **argv, const char *shortopts,
               const struct option *longopts)
{
        struct option all[40];
        size_t n = 0;
        for (; longopts != NULL && longopts[n].name != NULL && n < ARRAY_SIZE(all) - 2; n++)
                all[n] = longopts[n];
        all[n++] = (struct option){ "help", no_argument, NULL, 'h' };
        all[n] = (struct option){ 0 };
        char spec[64];
        snprintf(spec, sizeof(spec), "+:h%s", shortopts ? shortopts : "");

        opterr = 0;
        int opt = getopt_long(argc, argv, spec, all, NULL);
        if (opt == 'h') {
                const struct command *cmd = find_command(cli->command);
                if (cmd != NULL)
                        printf("usage: %s\n\n%s", cmd->synopsis, cmd->help);
                return CLI_OPT_HELP;
        }
        if (opt == '?' || opt == ':') {
                const char *what = opt == '?' ? "unknown option" : "option needs a value:";
                if (optopt != 0 && (opt == '?' || argv[optind - 1][1] != '-'))
                        cli_fail("%s %s -%c (see nsbox %s --help)", cli->command, what, optopt, cli->command);
                else
                        cli_fail("%s %s %s (see nsbox %s --help)", cli->command, what, argv[optind - 1],
                                 cli->command);
                return CLI_OPT_ERROR;
        }
        return opt;
}

int cli_sibling_binary(const char *name, char *path, size_t len)
{
        ssize_t n = readlink("/proc/self/exe", path, len);
        if (n <= 0 || (size_t)n >= len)
                return -1;
        path[n] = '\0';
        char *slash = strrchr(path, '/');
        if (slash == NULL || (size_t)(slash + 1 - path) + strlen(name) >= len)
                return -1;
        strcpy(slash + 1, name);
        return 0;
}

/* Who may use nsboxd's socket is the operator's choice of its group
 * (docs/operating.md): say which group, and how to join it. */
static void cli_fail_socket_permission(const char *path)
{
        struct stat st;
        char group[256];
        if (stat(path, &st) == 0 && cli_group_name(st.st_gid, group, sizeof(group)) == 0 &&
            strcmp(group, "root") != 0)
                cli_fail(
                    "permission denied on %s: it is for the %s group; add yourself to it (sudo usermod -aG "
                    "%s $USER, then log in again) or run a nsboxd of your own (nsboxd --rootless, see "
                    "docs/rootless.md)",
                    path, group, group);
        else
                cli_fail(
                    "permission denied on %s: it is root's alone, as no nsbox group existed when nsboxd "
                    "started; an operator runs sudo groupadd nsbox, sudo usermod -aG nsbox $USER and "
                    "restarts nsboxd, or run a nsboxd of your own (nsboxd --rootless, see docs/rootless.md)",
                    path);
}

struct client *cli_connect(const struct cli *cli)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct client *c = NULL;
        if (client_connect(cli->socket_path, &c, &err) < 0) {
                if (err->errnum == EACCES || err->errnum == EPERM)
                        cli_fail_socket_permission(cli->socket_path);
                else
                        cli_fail("%s (is nsboxd running? systemctl start nsboxd, or nsboxd --rootless as "
                                 "yourself; nsbox run needs none: docs/operating.md)",
                                 err->message);
                return NULL;
        }
        return c;
}

json_t *cli_call(const struct cli *cli, struct client *c, const char *method, json_t *params)
{
        return cli_call_notified(cli, c, method, params, NULL, NULL);
}

json_t *cli_call_notified(const struct cli *cli, struct client *c, const char *method, json_t *params,
                          client_notify_cb notify, void *data)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *error = NULL;
        json_t *result = NULL;
        if (client_call(c, method, params, notify, data, &result, &error, &err) < 0) {
                if (cli_error_is_missing_method(error))
                        cli_fail("this nsboxd does not offer %s yet (%s)", method, err->message);
                else
                        cli_fail("%s", err->message);
                return NULL;
        }
        return result;
}

json_t *cli_call_once(const struct cli *cli, const char *method, json_t *params)
{
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return NULL;
        json_t *result = cli_call(cli, c, method, params);
        client_close(c);
        return result;
}

int cli_call_each(const struct cli *cli, const char *method, const char *key, const json_t *extra, int argc,
                  char **argv)
{
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        int status = 0;
        for (int i = 0; i < argc; i++) {
                _cleanup_json_ json_t *params = extra != NULL ? json_deep_copy(extra) : json_object();
                json_object_set_new(params, key, json_string(argv[i]));
                _cleanup_json_ json_t *result = cli_call(cli, c, method, params);
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

bool cli_error_is_missing_method(const json_t *error)
{
        if (error == NULL)
                return false;
        json_t *code = json_object_get(error, "code");
        const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
        const char *message = json_string_value(json_object_get(error, "message"));
        if (json_is_integer(code) && json_integer_value(code) == JSONRPC_METHOD_NOT_FOUND)
                return true;
        /* Stubs of methods still being written answer unavailable "... is not implemented". */
        return kind != NULL && strcmp(kind, "unavailable") == 0 && message != NULL &&
               strstr(message, "not implemented") != NULL;
}

void cli_print_json(const json_t *value)
{
        char *text = json_text(value, JSON_COMPACT | JSON_ENCODE_ANY, NULL);
        if (text != NULL) {
                puts(text);
                free(text);
        }
        fflush(stdout);
}

bool cli_flag_and_args(const struct cli *cli, int argc, char **argv, const char *name, char c, bool *flag,
                       int min_args, int max_args, int *exit_code)
{
        const struct option longopts[] = { { name, no_argument, NULL, c ? c : 1 }, { 0 } };
        char shortopts[2] = { c, '\0' };
        int opt;
        *flag = false;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, shortopts, longopts)) != -1) {
                if (opt < -1) {
                        *exit_code = cli_opt_exit(opt);
                        return false;
                }
                *flag = true;
        }
        int args = argc - optind;
        if (args < min_args || (max_args >= 0 && args > max_args)) {
                *exit_code = cli_usage_error(cli);
                return false;
        }
        return true;
}

void cli_print_text_output(const json_t *result)
{
        json_t *out = json_object_get(result, "stdout");
        json_t *err = json_object_get(result, "stderr");
        if (json_is_string(out))
                io_write_all(STDOUT_FILENO, json_string_value(out), json_string_length(out));
        if (json_is_string(err))
                io_write_all(STDERR_FILENO, json_string_value(err), json_string_length(err));
}

json_t *cli_read_path(const char *path, const char *option, const char *stdin_what, size_t max)
{
        bool from_stdin = strcmp(path, "-") == 0;
        _cleanup_close_ int fd = from_stdin ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                cli_fail("%sopen %s: %s", option, path, strerror(errno));
                return NULL;
        }
        return cli_read_text(fd, from_stdin ? stdin_what : path, max, "");
}

json_t *cli_read_text(int fd, const char *what, size_t max, const char *hint)
{
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
                if (cap - len < 65536) {
                        cap = cap ? cap * 2 : 65536;
                        char *grown = realloc(buf, cap);
                        if (grown == NULL) {
                                cli_fail("out of memory reading %s", what);
                                return NULL;
                        }
                        buf = grown;
                }
                ssize_t n = read(fd, buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        cli_fail("read %s: %s", what, strerror(errno));
                        return NULL;
                }
                if (n == 0)
                        break;
                len += n;
                if (len > max) {
                        cli_fail("%s is larger than %zu bytes%s", what, max, hint);
                        return NULL;
                }
        }
        if (!utf8_valid(buf ? buf : "", len) || memchr(buf ? buf : "", '\0', len) != NULL) {
                cli_fail("%s is not UTF-8 text%s", what, hint);
                return NULL;
        }
        return json_stringn(buf ? buf : "", len);
}

int cli_parse_size(const char *text, unsigned long long *out)
{
        uint64_t bytes;
        int r = size_parse(text, &bytes);
        if (r == 0)
                *out = bytes;
        return r;
}

int cli_parse_seconds(const char *text, double *out)
{
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (errno != 0 || end == text || *end != '\0' || !(v > 0))
                return -EINVAL;
        *out = v;
        return 0;
}

int cli_add_env(json_t *obj, const char *kv)
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

json_t *cli_argv_to_json(int argc, char **argv)
{
        json_t *a = json_array();
        for (int i = 0; i < argc; i++)
                json_array_append_new(a, json_string(argv[i]));
        return a;
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

void cli_print_network_refused(const json_t *result)
{
        const char *already = json_string_value(json_object_get(result, "stderr"));
        size_t i;
        json_t *entry;
        fflush(stdout);
        json_array_foreach(json_object_get(result, "network_refused"), i, entry)
        {
                if (!json_is_string(entry))
                        continue;
                _cleanup_free_ char *line = NULL;
                if (asprintf(&line, "nsbox: network policy refused %s\n", json_string_value(entry)) < 0)
                        return;
                /* python.run and package.install put the line into stderr themselves. */
                if (already != NULL && strstr(already, line) != NULL)
                        continue;
                /* The name came from the sandbox's own traffic: no terminal controls from it. */
                for (char *p = line; p[1] != '\0'; p++) {
                        if ((unsigned char)*p < 0x20 || *p == 0x7f)
                                *p = '?';
                }
                io_write_all(STDERR_FILENO, line, strlen(line));
        }
}

int cli_catch_signals(void)
{
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return -1;
        return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

int cli_caught_signal(int signal_fd)
{
        struct signalfd_siginfo si;
        if (signal_fd < 0 || read(signal_fd, &si, sizeof(si)) != sizeof(si))
                return 0;
        return (int)si.ssi_signo;
}

static void usage(FILE *out)
{
        fprintf(out, "usage: nsbox [--socket PATH] [--json] COMMAND [ARGS]\n\n");
        for (size_t k = 0; k < ARRAY_SIZE(commands); k++) {
                if (strcmp(commands[k].name, "list") != 0)
                        fprintf(out, "  %s\n", commands[k].synopsis);
        }
        fprintf(out, "\nnsbox COMMAND --help describes a command; nsbox version prints the versions.\n"
                     "--json prints the raw result object instead of human output. --json and --socket\n"
                     "go before or after the command name, anywhere before \"--\"; a command's own\n"
                     "options go between its name and its first operand (the sandbox ID).\n"
                     "The socket is --socket, else $NSBOX_SOCKET, else (not root) your own\n"
                     "$XDG_RUNTIME_DIR/nsbox/nsbox.sock where it exists, else /run/nsbox/nsbox.sock.\n"
                     "Wherever a command takes a sandbox ID, a unique prefix of it (4 characters or\n"
                     "more, among your own sandboxes) or a session name (--session) works too; root\n"
                     "takes its own session of that name first, and UID:NAME picks another user's.\n"
                     "exec, sh, run, python and pip exit with the command's code; 124 on timeout,\n"
                     "128+N when killed by signal N, 125 when nsbox itself failed.\n"
                     "Sandboxes have no network unless created (or updated) with --network NAME, one\n"
                     "of the operator's network policies; without --json, what the policy refused during\n"
                     "a command is printed as \"nsbox: network policy refused HOST:PORT\" on stderr.\n");
}

/* --- sandbox references: ids, id prefixes and session names -------------- */

/* A full sandbox id (a UUID) goes to nsboxd untouched, with no extra call. */
static bool looks_like_full_id(const char *text)
{
        if (strlen(text) != 36)
                return false;
        for (int k = 0; k < 36; k++) {
                bool dash = k == 8 || k == 13 || k == 18 || k == 23;
                if (dash ? text[k] != '-' : !isxdigit((unsigned char)text[k]))
                        return false;
        }
        return true;
}

/* What one command resolved: a command sends the same reference many times
 * (cp: one call per chunk), and asks nsboxd once. */
#define CLI_RESOLVED_MAX 8
static struct {
        char *ref;
        char *id;
} cli_resolved[CLI_RESOLVED_MAX];

/* "UID:NAME" or "USER:NAME": session NAME of that owner (root picks among
 * users' sessions so). *owner is set and the name returned, or NULL. */
static const char *cli_owner_prefix(const char *ref, uid_t *owner)
{
        const char *colon = strchr(ref, ':');
        if (colon == NULL || colon == ref || colon[1] == '\0' || (size_t)(colon - ref) >= 64)
                return NULL;
        char who[64];
        snprintf(who, sizeof(who), "%.*s", (int)(colon - ref), ref);
        char *end;
        errno = 0;
        unsigned long n = strtoul(who, &end, 10);
        if (*end == '\0' && errno == 0 && n <= UINT32_MAX) {
                *owner = (uid_t)n;
                return colon + 1;
        }
        if (cli_user_uid(who, owner) < 0)
                return NULL;
        return colon + 1;
}

/* A session name (the session_id of sandbox.create or python.run) is the id
 * of the caller's live (running or paused) sandbox of that session; root,
 * who lists every user's, takes its own first, else the only one, else
 * UID:NAME says whose. Anything else (an id, an id prefix that nsboxd
 * resolves, a mistake nsboxd names) goes as given. */
static int cli_resolve_sandbox_param(struct client *c, json_t *params, nsbox_error_t **err)
{
        const char *ref = json_string_value(json_object_get(params, "sandbox_id"));
        if (looks_like_full_id(ref))
                return 0;
        size_t k = 0;
        for (; k < CLI_RESOLVED_MAX && cli_resolved[k].ref != NULL; k++) {
                if (strcmp(cli_resolved[k].ref, ref) == 0) {
                        json_object_set_new(params, "sandbox_id", json_string(cli_resolved[k].id));
                        return 0;
                }
        }
        _cleanup_json_ json_t *list = NULL;
        _cleanup_json_ json_t *list_params = json_object();
        _cleanup_error_ nsbox_error_t *list_err = NULL;
        if (client_call(c, "sandbox.list", list_params, NULL, NULL, &list, NULL, &list_err) < 0)
                return 0; /* the request itself will say what is wrong */
        uid_t me = geteuid(), wanted = 0;
        const char *name = cli_owner_prefix(ref, &wanted);
        bool by_owner = name != NULL;
        if (!by_owner)
                name = ref;
        const char *found = NULL, *own = NULL;
        size_t matches = 0, i;
        json_t *sb;
        _cleanup_free_ char *choices = NULL;
        size_t choices_size = 0;
        FILE *f = open_memstream(&choices, &choices_size);
        if (f == NULL)
                return nsbox_error(err, ENOMEM, "resolve %s", ref);
        json_array_foreach(json_object_get(list, "sandboxes"), i, sb)
        {
                const char *session = json_string_value(json_object_get(sb, "session_id"));
                const char *state = json_string_value(json_object_get(sb, "state"));
                json_t *owner = json_object_get(sb, "owner");
                uid_t uid = json_is_integer(owner) ? (uid_t)json_integer_value(owner) : me;
                if (session == NULL || strcmp(session, name) != 0 || state == NULL ||
                    (strcmp(state, "running") != 0 && strcmp(state, "paused") != 0) ||
                    (by_owner && uid != wanted))
                        continue;
                found = json_string_value(json_object_get(sb, "sandbox_id"));
                if (uid == me)
                        own = found;
                fprintf(f, "%s%u:%s", matches ? ", " : "", (unsigned)uid, name);
                matches++;
        }
        fclose(f);
        if (own != NULL) {
                found = own;
                matches = 1;
        }
        if (matches > 1)
                return nsbox_refuse(err, EINVAL,
                                    "session name %s names %zu sandboxes of other users (%s); give one as "
                                    "UID:NAME, or the sandbox id",
                                    name, matches, choices ? choices : "");
        const char *id = matches == 1 && found != NULL ? found : ref;
        if (k < CLI_RESOLVED_MAX) {
                cli_resolved[k].ref = strdup(ref);
                cli_resolved[k].id = strdup(id);
                if (cli_resolved[k].ref == NULL || cli_resolved[k].id == NULL)
                        return nsbox_error(err, ENOMEM, "resolve %s", ref);
        }
        json_object_set_new(params, "sandbox_id", json_string(id));
        return 0;
}

/* A global option (--json, --socket PATH, --socket=PATH) at argv[k]: how
 * many words it takes (0: none there), or -1 after saying --socket has no
 * value. */
static int global_option(struct cli *cli, const char **socket_flag, int argc, char **argv, int k)
{
        if (strcmp(argv[k], "--json") == 0) {
                cli->json = true;
                return 1;
        }
        if (strncmp(argv[k], "--socket=", 9) == 0) {
                *socket_flag = argv[k] + 9;
                return 1;
        }
        if (strcmp(argv[k], "--socket") != 0)
                return 0;
        if (k + 1 >= argc || strcmp(argv[k + 1], "--") == 0) {
                cli_fail("--socket needs a path (see nsbox --help)");
                return -1;
        }
        *socket_flag = argv[k + 1];
        return 2;
}

static bool is_help(const char *arg)
{
        return arg != NULL && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0);
}

/* `nsbox CMD --help` and `nsbox CMD SUB --help`: the command's help, before
 * anything reads "--help" as an operand (snapshot rm --help removed a
 * snapshot named --help). */
static bool asks_help(const struct command *cmd, int argc, char **argv)
{
        /* Their subcommands: `nsbox CMD SUB --help` is CMD's help too. */
        static const char *const subcommands[][8] = {
                { "shell", "run", "ls", "rm", "check" },
                { "snapshot", "ls", "rm" },
                { "volume", "create", "ls", "rm" },
                { "image", "ls", "rm", "import" },
                { "desktop", "start", "screenshot", "click", "move", "scroll", "type", "key" },
        };
        /* serve and mcp pass --help on to what they run (nsbox-http, the MCP server). */
        if (strcmp(cmd->name, "serve") == 0 || strcmp(cmd->name, "mcp") == 0)
                return false;
        int k = 1;
        for (size_t c = 0; k < argc && c < ARRAY_SIZE(subcommands); c++) {
                if (strcmp(subcommands[c][0], cmd->name) != 0)
                        continue;
                for (size_t s = 1; s < ARRAY_SIZE(subcommands[c]) && subcommands[c][s] != NULL; s++) {
                        if (strcmp(subcommands[c][s], argv[k]) == 0) {
                                k++;
                                break;
                        }
                }
        }
        return k < argc && is_help(argv[k]);
}

int main(int argc, char **argv)
{
        struct cli cli = { 0 };
        const char *socket_flag = NULL;
        int i = 1;
        json_memory_use();
        /* jansson's hash seed from getrandom: its own reads /dev/urandom. */
        uint32_t seed = 0;
        if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed) && seed != 0)
                json_object_seed(seed);
        signal(SIGPIPE, SIG_IGN);
        for (; i < argc && argv[i][0] == '-'; i++) {
                int words = global_option(&cli, &socket_flag, argc, argv, i);
                if (words < 0)
                        return EXIT_NSBOX_FAILED;
                if (words > 0) {
                        i += words - 1;
                } else if (is_help(argv[i])) {
                        usage(stdout);
                        return 0;
                } else if (strcmp(argv[i], "--version") == 0) {
                        cli.socket_path = client_socket_path(socket_flag);
                        cli.command = "version";
                        return cmd_version(&cli, 1, (char *[]){ "version", NULL });
                } else {
                        return cli_fail("unknown option \"%s\" (see nsbox --help)", argv[i]);
                }
        }
        if (i >= argc) {
                usage(stderr);
                return EXIT_NSBOX_FAILED;
        }
        if (strcmp(argv[i], "help") == 0) {
                const struct command *cmd = i + 1 < argc ? find_command(argv[i + 1]) : NULL;
                if (cmd == NULL)
                        usage(stdout);
                else
                        printf("usage: %s\n\n%s", cmd->synopsis, cmd->help);
                return 0;
        }
        const struct command *cmd = find_command(argv[i]);
        if (cmd == NULL)
                return cli_fail("unknown command \"%s\" (see nsbox --help)", argv[i]);
        cli.command = cmd->name;
        /* Commands see their own argv. The global options may come after the
         * command name too, anywhere before "--" (what follows it is the
         * sandbox command's). */
        int sub_argc = argc - i;
        char **sub_argv = argv + i;
        for (int j = 1; j < sub_argc && strcmp(sub_argv[j], "--") != 0;) {
                int words = global_option(&cli, &socket_flag, sub_argc, sub_argv, j);
                if (words < 0)
                        return EXIT_NSBOX_FAILED;
                if (words == 0) {
                        j++;
                        continue;
                }
                memmove(&sub_argv[j], &sub_argv[j + words], (sub_argc - j - words + 1) * sizeof(char *));
                sub_argc -= words;
        }
        if (asks_help(cmd, sub_argc, sub_argv)) {
                printf("usage: %s\n\n%s", cmd->synopsis, cmd->help);
                return 0;
        }
        cli.socket_path = client_socket_path(socket_flag);
        /* The MCP server lives long and names sandboxes by their ids; a
         * cached session name could outlive its sandbox there. */
        if (strcmp(cmd->name, "mcp") != 0)
                client_set_resolver(cli_resolve_sandbox_param);
        return cmd->run(&cli, sub_argc, sub_argv);
}
