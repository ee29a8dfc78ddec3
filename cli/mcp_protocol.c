/* SPDX-License-Identifier: Apache-2.0 */
/* MCP message handling without I/O: version negotiation, the tool table,
 * argument checks, tool arguments → nsboxd params, nsboxd results → MCP
 * content. cli/mcp.c does the I/O; tests/unit/test_mcp.c includes this file. */
#include "mcp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "jsonrpc.h"
#include "textenc.h"

static const char *const protocol_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" };

const char *mcp_negotiate_version(const char *requested)
{
        for (size_t i = 0; requested != NULL && i < ARRAY_SIZE(protocol_versions); i++) {
                if (strcmp(requested, protocol_versions[i]) == 0)
                        return protocol_versions[i];
        }
        return MCP_LATEST_PROTOCOL_VERSION;
}

/* --- tools -------------------------------------------------------------- */

#define SCHEMA(props, required)                                                   \
        "{\"type\":\"object\",\"properties\":{" props "},\"required\":[" required \
        "],\"additionalProperties\":false}"

#define P_SESSION_ID                                                                                        \
        "\"session_id\":{\"type\":\"string\",\"minLength\":1,\"description\":\"Any name for your working "  \
        "session, e.g. \\\"main\\\". The first call with a new session_id creates a sandbox for it; later " \
        "calls with the same session_id use that same sandbox, so files in /workspace (and run_code's "     \
        "variables) stay there. Default: this connection's own session, one sandbox shared by every call "  \
        "that names neither session_id nor sandbox_id. A session's sandbox idle for its idle timeout "      \
        "(default 300 s) is removed; the next call recreates it empty and says so.\"}"
#define P_SANDBOX_ID                                                                                        \
        "\"sandbox_id\":{\"type\":\"string\",\"minLength\":1,\"description\":\"The sandbox_id returned by " \
        "create_sandbox (instead of session_id).\"}"
#define P_ADDRESS P_SESSION_ID "," P_SANDBOX_ID
#define P_NETWORK(more)                                                                                     \
        "\"network\":{\"type\":\"string\",\"minLength\":1,\"description\":\"Network access: the name of "   \
        "one of the operator's network policies (e.g. \\\"pypi\\\"; ask the user which exist), which lets " \
        "the sandbox reach only the hosts that policy allows. Default \\\"none\\\": no network." more "\"}"
#define P_SESSION_NETWORK                                                                               \
        P_NETWORK(" Applies when the session's sandbox is created; given on a later call with another " \
                  "value, it changes that sandbox's network (\\\"none\\\" turns it off). Omitted: the " \
                  "network stays as it is.")
#define P_TIMEOUT(what)                                                                                \
        "\"timeout\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400,\"description\":\"Seconds " \
        "before " what " is killed (default 30, at most 86400).\"}"
#define P_CODE                                                                                              \
        "\"code\":{\"type\":\"string\",\"description\":\"Python 3 source to run as a script. print() what " \
        "you want to see; matplotlib figures (plt.show() or left open) and PNG/JPEG files it saves "        \
        "(savefig) come back as images.\"}"
#define P_DEPENDENCIES                                                                                   \
        "\"dependencies\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1},"          \
        "\"description\":\"Packages to pip install first (PEP 508 requirements, e.g. [\\\"sympy\\\"]); " \
        "needs a network policy that reaches the package index.\"}"
#define P_JOB_ID                                                                                    \
        "\"job_id\":{\"type\":\"string\",\"minLength\":1,\"description\":\"The job_id returned by " \
        "shell_start in this session.\"}"
#define P_PATH(what)                                                                                         \
        "\"path\":{\"type\":\"string\",\"minLength\":1,\"description\":\"" what " in the sandbox. Relative " \
        "paths are from /workspace, the working directory of python and shell commands.\"}"
#define P_ENCODING(what)                                                                            \
        "\"encoding\":{\"type\":\"string\",\"enum\":[\"utf-8\",\"base64\"],\"description\":\"" what \
        " (default "                                                                                \
        "utf-8). Use base64 for binary files (images, archives, pickles).\"}"
#define P_SHELL_NAME                                                                                    \
        "\"session_name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64,\"description\":\"The " \
        "persistent shell's name in the sandbox: letters, digits, '_', '-', '.' (default "              \
        "\\\"" MCP_DEFAULT_SHELL "\\\").\"}"
#define P_DESKTOP_SIZE                                                                                     \
        "\"width\":{\"type\":\"integer\",\"minimum\":320,\"maximum\":3840,\"description\":\"Screen width " \
        "in "                                                                                              \
        "pixels (default 1280).\"},\"height\":{\"type\":\"integer\",\"minimum\":200,\"maximum\":2160,"     \
        "\"description\":\"Screen height in pixels (default 800).\"}"
#define P_DESKTOP_POINT(more)                                                                               \
        "\"x\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"Pixels from the left edge of the "     \
        "screen" more                                                                                       \
        ".\"},\"y\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"Pixels from the top edge of the " \
        "screen" more ".\"}"
#define P_DESKTOP_BUTTON                                                                                    \
        "\"button\":{\"type\":\"string\",\"enum\":[\"left\",\"middle\",\"right\"],\"description\":\"Mouse " \
        "button (default left).\"},\"double\":{\"type\":\"boolean\",\"description\":\"A double click.\"}"
/* Said by every tool whose answer carries a command's output. */
#define OUTPUT_CAP_SENTENCE                                                                           \
        " stdout and stderr are each cut to " MCP_OUTPUT_CAP_TEXT " characters (head and tail kept, " \
        "with a line saying how much was cut and how to read it all)."

const struct mcp_tool mcp_tools[] = {
        {
            .name = "create_sandbox",
            .description =
                "Create an isolated Linux sandbox (Debian with Python 3, numpy, pandas, matplotlib, pillow "
                "and the usual shell tools; no network unless created with a network policy; 512 MiB of "
                "memory unless memory_mb says otherwise) and return its sandbox_id, which every sandbox tool "
                "takes instead of session_id. With a session_id that already has a live sandbox, that "
                "sandbox is returned instead (existing: true). A sandbox is removed automatically after "
                "`timeout` seconds without use (default 300). You rarely need this tool: the session tools "
                "create their sandbox on first use.",
            .input_schema = SCHEMA(
                "\"session_id\":{\"type\":\"string\",\"minLength\":1,\"description\":\"Optional name: the "
                "same session_id gives back the same sandbox while it lives.\"},"
                "\"memory_mb\":{\"type\":\"integer\",\"minimum\":16,\"description\":\"Memory limit in MiB "
                "(default 512). Processes beyond it are killed.\"},"
                "\"timeout\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"Idle timeout in seconds: "
                "the sandbox is removed after this long with nothing running in it and no requests (default "
                "300).\"},"
                "\"from_snapshot\":{\"type\":\"string\",\"minLength\":1,\"description\":\"A snapshot_id "
                "from snapshot_sandbox: the new sandbox starts with that sandbox's files (not its "
                "processes), "
                "in a writable layer of its own - a fork. Any number of sandboxes may start from one "
                "snapshot; none sees another's changes.\"},"
                "\"mounts\":{\"type\":\"array\",\"maxItems\":8,\"description\":\"Mounted at create: "
                "{\\\"volume\\\": NAME, \\\"path\\\": \\\"/data\\\"} (a named volume of the user's, kept "
                "across sandboxes) or {\\\"host_path\\\": \\\"/home/me/project\\\", \\\"path\\\": "
                "\\\"/workspace/project\\\", \\\"read_only\\\": false} (a directory of the user's on the "
                "host, read-only unless read_only is "
                "false).\",\"items\":{\"type\":\"object\",\"required\":[\"path\"],"
                "\"properties\":{\"volume\":{\"type\":\"string\"},\"host_path\":{\"type\":\"string\"},"
                "\"path\":{\"type\":\"string\"},\"read_only\":{\"type\":\"boolean\"}}}},"
                "\"image\":{\"type\":\"string\",\"minLength\":1,\"description\":\"The image: \\\"python\\\" "
                "(default), \\\"desktop\\\" for a screen to drive with the desktop_* tools, "
                "\\\"browser\\\" for headless Chromium to drive with browser_screenshot and "
                "browser_navigate (give it memory_mb 1024 or more; when the operator built them), or an "
                "image committed from a sandbox.\"}," P_NETWORK(""),
                ""),
            .method = "sandbox.create",
        },
        {
            .name = "list_sandboxes",
            .description = "List your sandboxes: sandbox_id, session_id, state, creation and last-use times "
                           "and limits.",
            .input_schema = SCHEMA("\"include_inactive\":{\"type\":\"boolean\",\"description\":\"Also list "
                                   "sandboxes that are stopped or being removed (default false).\"}",
                                   ""),
            .method = "sandbox.list",
            .read_only = true,
        },
        {
            .name = "remove_sandbox",
            .description = "Remove a sandbox (by sandbox_id, or the live sandbox of session_id): kill all of "
                           "its processes and delete its files. Refused while a command runs in it unless "
                           "force is true.",
            .input_schema = SCHEMA(P_ADDRESS ",\"force\":{\"type\":\"boolean\",\"description\":\"Remove "
                                             "even while a command is running in it (default false).\"}",
                                   ""),
            .method = "sandbox.remove",
            .address = MCP_ADDRESS_EXISTING,
            .destructive = true,
        },
        {
            .name = "pause_sandbox",
            .description =
                "Pause a sandbox (by sandbox_id, or the live sandbox of session_id): freeze all of its "
                "processes. They keep their memory (run_code's variables too) and its files stay, but it "
                "uses no CPU until resume_sandbox, or until the next tool call that runs something in it, "
                "which resumes it first (file tools work on it paused). Returns its state (\"paused\", "
                "with paused_at); pausing a paused sandbox changes nothing. Refused while a command runs "
                "in it unless force is true.",
            .input_schema = SCHEMA(P_ADDRESS ",\"force\":{\"type\":\"boolean\",\"description\":\"Pause "
                                             "even while a command runs in it; its timeout keeps counting "
                                             "while paused (default false).\"}",
                                   ""),
            .method = "sandbox.pause",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "resume_sandbox",
            .description = "Resume a paused sandbox (by sandbox_id, or the live sandbox of session_id): its "
                           "processes run on where they stopped. Returns its state; resuming a running "
                           "sandbox changes nothing.",
            .input_schema = SCHEMA(P_ADDRESS, ""),
            .method = "sandbox.resume",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "snapshot_sandbox",
            .description =
                "Snapshot a sandbox's files (by sandbox_id, or the live sandbox of session_id): /workspace, "
                "/tmp and every change it made to its image, deletions included; not its processes or "
                "variables. Returns a snapshot_id: create_sandbox with from_snapshot starts a new sandbox "
                "(a fork) from it, as many times as you like, e.g. to try several approaches from one "
                "prepared state. Files being written during the snapshot may be copied half-written. "
                "Snapshots are yours only and stay until remove_snapshot.",
            .input_schema = SCHEMA(P_ADDRESS ",\"name\":{\"type\":\"string\",\"minLength\":1,"
                                             "\"maxLength\":63,\"description\":\"An optional label.\"}",
                                   ""),
            .method = "sandbox.snapshot",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "list_snapshots",
            .description = "List your snapshots: snapshot_id, name, image, the sandbox it was taken from, "
                           "created_at, size_bytes and the sandboxes started from it.",
            .input_schema = SCHEMA("", ""),
            .method = "snapshot.list",
        },
        {
            .name = "remove_snapshot",
            .description = "Remove a snapshot (its files). Refused while a sandbox started from it lives.",
            .input_schema = SCHEMA("\"snapshot_id\":{\"type\":\"string\",\"minLength\":1,"
                                   "\"description\":\"The snapshot_id from snapshot_sandbox.\"}",
                                   "\"snapshot_id\""),
            .method = "snapshot.remove",
            .destructive = true,
        },
        {
            .name = "run_code",
            .description =
                "Run Python 3 code in the session's sandbox (created on first use), in /workspace, like a "
                "notebook cell: by default (stateful: true) variables, imports and functions stay defined "
                "for the next run_code call of the same session; stateful: false runs a fresh script. The "
                "value of a last bare expression is returned as `result`. Returns status (\"ok\", \"error\" "
                "with the traceback in stderr, or \"timeout\"), stdout, stderr, exit_code, files_produced, "
                "and matplotlib figures and saved PNG/JPEG files (at most "
                "8, 4 MiB each) as image blocks. "
                "isError is true unless status is \"ok\"; a run killed for lack of memory says \"out of "
                "memory\". Defaults: timeout 30 s, no network, 512 MiB." OUTPUT_CAP_SENTENCE,
            .input_schema =
                SCHEMA(P_ADDRESS
                       "," P_SESSION_NETWORK "," P_CODE
                       ",\"stateful\":{\"type\":\"boolean\",\"description\":\"Keep variables between calls "
                       "(default true). A timeout interrupts the code; the state stays.\"}," P_DEPENDENCIES
                       "," P_TIMEOUT("the run"),
                       "\"code\""),
            .method = "python.run",
            .address = MCP_ADDRESS_SESSION,
            .result = MCP_RESULT_PYTHON,
        },
        {
            .name = "execute_python_code",
            .description =
                "Run Python 3 code in a sandbox (sandbox_id from create_sandbox, or session_id), in "
                "/workspace. Files persist between calls; variables do not (each call is a fresh script; "
                "run_code keeps them). Returns status (\"ok\", \"error\" with the traceback in stderr, or "
                "\"timeout\"), stdout, stderr, the files created or changed, and figures and saved images "
                "as image blocks. isError is true unless status is \"ok\". Default timeout 30 "
                "s." OUTPUT_CAP_SENTENCE,
            .input_schema = SCHEMA(P_ADDRESS "," P_CODE "," P_TIMEOUT("the run"), "\"code\""),
            .method = "python.run",
            .address = MCP_ADDRESS_SESSION,
            .result = MCP_RESULT_PYTHON,
        },
        {
            .name = "install_package",
            .description = "pip install a Python package into a sandbox (sandbox_id or session_id). It stays "
                           "installed for the sandbox's lifetime. Needs a network policy that reaches the "
                           "package index: sandboxes have no network by default. Returns pip's exit_code, "
                           "stdout and stderr." OUTPUT_CAP_SENTENCE,
            .input_schema =
                SCHEMA(P_ADDRESS ",\"package\":{\"type\":\"string\",\"minLength\":1,"
                                 "\"description\":\"One PEP 508 requirement, e.g. \\\"requests\\\" "
                                 "or \\\"scipy>=1.11\\\".\"}",
                       "\"package\""),
            .method = "package.install",
            .address = MCP_ADDRESS_SESSION,
            .result = MCP_RESULT_EXEC,
        },
        {
            .name = "python_execute",
            .description =
                "Run Python 3 code in the session's sandbox (created on first use), in /workspace, "
                "which it shares with shell_execute and the sandbox_fs_* tools of the same session. Each "
                "call is a fresh script: keep state in files, or use run_code. Returns status (\"ok\", "
                "\"error\" with the traceback in stderr, or \"timeout\"), stdout, stderr, the files created "
                "or changed, and figures and saved images as image blocks. isError is true unless status "
                "is \"ok\". Default timeout 30 s, no network." OUTPUT_CAP_SENTENCE,
            .input_schema =
                SCHEMA(P_ADDRESS "," P_SESSION_NETWORK "," P_CODE "," P_DEPENDENCIES "," P_TIMEOUT("the run"),
                       "\"code\""),
            .method = "python.run",
            .address = MCP_ADDRESS_SESSION,
            .result = MCP_RESULT_PYTHON,
        },
        {
            .name = "shell_execute",
            .description =
                "Run a shell command (/bin/sh -c, as an unprivileged user) in the session's sandbox "
                "(created on first use), in /workspace, which it shares with python_execute and the "
                "sandbox_fs_* tools of the same session. Each call is a new shell: use shell_session_run "
                "to keep cwd and variables. Returns exit_code, stdout, stderr and timed_out; isError is "
                "true when the command failed. Default timeout 30 s, no network; for longer jobs use "
                "shell_start." OUTPUT_CAP_SENTENCE,
            .input_schema =
                SCHEMA(P_ADDRESS "," P_SESSION_NETWORK ",\"command\":{\"type\":\"string\",\"minLength\":1,"
                                 "\"description\":\"Shell command line, e.g. \\\"ls -la && "
                                 "wc -l data.csv\\\".\"}," P_TIMEOUT("the command"),
                       "\"command\""),
            .method = "sandbox.exec",
            .address = MCP_ADDRESS_SESSION,
            .result = MCP_RESULT_EXEC,
        },
        {
            .name = "sandbox_fs_list",
            .description = "List a directory in the session's sandbox (created on first use): name, "
                           "type, size, mode and mtime of each entry.",
            .input_schema = SCHEMA(P_ADDRESS "," P_SESSION_NETWORK "," P_PATH("Directory"), "\"path\""),
            .method = "fs.list",
            .address = MCP_ADDRESS_SESSION,
            .read_only = true,
        },
        {
            .name = "sandbox_fs_read",
            .description = "Read a file in the session's sandbox (created on first use). Returns its "
                           "content, its encoding and size. Text (utf-8, the default) shows bytes that are "
                           "not UTF-8 as U+FFFD: read binary files with encoding base64. At most max_bytes "
                           "(default 10 MiB, at most 64 MiB) from offset per call; truncated: true says the "
                           "file goes on: read on with a larger offset.",
            .input_schema = SCHEMA(
                P_ADDRESS "," P_SESSION_NETWORK "," P_PATH("File") "," P_ENCODING(
                    "How content is returned") ",\"offset\":{\"type\":\"integer\",\"minimum\":0,"
                                               "\"description\":\"Byte offset to start at (default 0).\"},"
                                               "\"max_bytes\":{\"type\":\"integer\",\"minimum\":0,"
                                               "\"maximum\":67108864,\"description\":\"Bytes to read at most "
                                               "(default 10485760).\"}",
                "\"path\""),
            .method = "fs.read",
            .address = MCP_ADDRESS_SESSION,
            .read_only = true,
        },
        {
            .name = "sandbox_fs_write",
            .description = "Write a file in the session's sandbox (created on first use), replacing it if it "
                           "exists (parent directories are created). content is text, or base64 with "
                           "encoding base64 for binary files. Python and shell commands of the same session "
                           "see it.",
            .input_schema = SCHEMA(
                P_ADDRESS "," P_SESSION_NETWORK "," P_PATH(
                    "File") ",\"content\":{\"type\":\"string\",\"description\":"
                            "\"The whole new content of the file.\"}," P_ENCODING("How content is given"),
                "\"path\",\"content\""),
            .method = "fs.write",
            .address = MCP_ADDRESS_SESSION,
        },
        {
            .name = "expose_port",
            .description =
                "Make a TCP port of a sandbox (sandbox_id or session_id) reachable from the user's machine, "
                "e.g. a web server you started in it (bind it to 0.0.0.0, not 127.0.0.1). Only a sandbox "
                "with network (created with a network policy) has ports to expose. Returns url "
                "(http://127.0.0.1:HOST_PORT/), host_port and port; asking again for the same port gives the "
                "same url.",
            .input_schema = SCHEMA(P_ADDRESS ",\"port\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":"
                                             "65535,\"description\":\"The TCP port the server listens on "
                                             "inside the sandbox, e.g. 8000.\"}",
                                   "\"port\""),
            .method = "sandbox.expose",
            .address = MCP_ADDRESS_SESSION,
        },
        {
            .name = "shell_start",
            .description =
                "Start a long-running shell command (/bin/sh -c, as an unprivileged user) in the background "
                "in the session's sandbox (created on first use), e.g. a web server for expose_port, and "
                "return its job_id at once. It keeps running after this call, for at most 24 hours (86400 "
                "s), "
                "until it exits, shell_kill stops it or the sandbox is removed. Read its output with "
                "shell_output. The daemon keeps the first 1 MiB of each of its streams. Returns job_id, "
                "sandbox_id (for expose_port) and pid.",
            .input_schema =
                SCHEMA(P_ADDRESS "," P_SESSION_NETWORK ",\"command\":{\"type\":\"string\",\"minLength\":1,"
                                 "\"description\":\"Shell command line, e.g. \\\"python3 -m http.server "
                                 "8000\\\".\"},\"cwd\":{\"type\":\"string\",\"minLength\":1,\"description\":"
                                 "\"Working directory; relative paths are from /workspace (default "
                                 "/workspace).\"}",
                       "\"command\""),
            .method = "sandbox.exec",
            .address = MCP_ADDRESS_SESSION,
            .result = MCP_RESULT_JOB_START,
        },
        {
            .name = "shell_output",
            .description =
                "Read the output of a background job of the session (job_id from shell_start): stdout and "
                "stderr from `since` on, at most " MCP_JOB_OUTPUT_CAP_TEXT " bytes of each per call, whether "
                "it is still running, and its exit_code once it ended (null while running or when a signal "
                "ended it). Pass the answer's `next` as `since` to read only what came after; `more: true` "
                "means output was left out by the cap: call again with since = next.",
            .input_schema =
                SCHEMA(P_ADDRESS "," P_JOB_ID ",\"since\":{\"type\":\"object\",\"properties\":{"
                                 "\"stdout\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"Byte "
                                 "offset in stdout.\"},\"stderr\":{\"type\":\"integer\",\"minimum\":0,"
                                 "\"description\":\"Byte offset in stderr.\"}},\"description\":\"Where to "
                                 "start: the `next` of a previous shell_output answer (default: from the "
                                 "beginning).\"}",
                       "\"job_id\""),
            .method = "exec.output",
            .address = MCP_ADDRESS_SESSION,
            .read_only = true,
            .result = MCP_RESULT_JOB_OUTPUT,
        },
        {
            .name = "shell_kill",
            .description =
                "Stop a background job of the session (job_id from shell_start): send it a signal and wait "
                "up "
                "to 5 s for it to end. With the default KILL its whole process tree ends, children and "
                "daemons included. Returns running (false once it ended) and exit_code.",
            .input_schema =
                SCHEMA(P_ADDRESS "," P_JOB_ID ",\"signal\":{\"type\":\"string\",\"enum\":[\"KILL\","
                                 "\"TERM\",\"INT\",\"HUP\"],\"description\":\"KILL, TERM, INT or HUP "
                                 "(default KILL). The others go to the command's process only, which may "
                                 "ignore them.\"}",
                       "\"job_id\""),
            .method = "exec.kill",
            .address = MCP_ADDRESS_SESSION,
            .destructive = true,
            .result = MCP_RESULT_JOB_KILL,
        },
        {
            .name = "shell_session_run",
            .description =
                "Run a command in a persistent bash shell of the session's sandbox (created on first use, "
                "named by session_name, default \"" MCP_DEFAULT_SHELL "\"), which keeps its working "
                "directory, variables and functions between calls, like a terminal. blocking (default true) "
                "waits for the command, at most timeout seconds (default 30; then it is interrupted: INT, "
                "then TERM, then KILL); blocking: false returns at once with running: true and the command "
                "runs until it ends (or for timeout seconds if given): poll it with shell_session_check. One "
                "command at a time per shell; the first 1 MiB of its output is kept. Returns exit_code, "
                "stdout, stderr, cwd, running and timed_out; isError is true when it ended non-zero or timed "
                "out." OUTPUT_CAP_SENTENCE,
            .input_schema = SCHEMA(
                P_ADDRESS
                "," P_SESSION_NETWORK "," P_SHELL_NAME
                ",\"command\":{\"type\":\"string\",\"minLength\":1,\"description\":\"bash "
                "command line, e.g. \\\"cd src && export N=3\\\".\"},\"blocking\":{\"type\":"
                "\"boolean\",\"description\":\"Wait for the command to end (default true).\"},"
                "\"cwd\":{\"type\":\"string\",\"minLength\":1,\"description\":\"Run it in this "
                "directory (relative: from /workspace); the shell stays there.\"},"
                "\"timeout\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400,\"description\":"
                "\"Seconds before the command is interrupted (default 30 when blocking, none when not).\"}",
                "\"command\""),
            .method = "shell.run",
            .address = MCP_ADDRESS_SESSION,
            .result = MCP_RESULT_SHELL,
        },
        {
            .name = "shell_session_check",
            .description =
                "The state of the last command of a persistent shell (shell_session_run): running, "
                "exit_code once it ended, and its stdout and stderr from `since` on (pass the answer's "
                "`next` as since to read only what is new)." OUTPUT_CAP_SENTENCE,
            .input_schema = SCHEMA(
                P_ADDRESS "," P_SHELL_NAME
                          ",\"since\":{\"type\":\"object\",\"properties\":{\"stdout\":{\"type\":\"integer\","
                          "\"minimum\":0},\"stderr\":{\"type\":\"integer\",\"minimum\":0}},\"description\":"
                          "\"Byte offsets to read from: the `next` of a previous answer (default: from the "
                          "beginning).\"}",
                ""),
            .method = "shell.check",
            .address = MCP_ADDRESS_SESSION,
            .read_only = true,
            .result = MCP_RESULT_SHELL,
        },
        {
            .name = "shell_session_list",
            .description = "List the persistent shells of the session's sandbox: session_name, whether a "
                           "command runs, cwd. At most 16 per sandbox.",
            .input_schema = SCHEMA(P_ADDRESS, ""),
            .method = "shell.list",
            .address = MCP_ADDRESS_SESSION,
            .read_only = true,
        },
        {
            .name = "shell_session_close",
            .description = "End a persistent shell (shell_session_run) and every process it started. The "
                           "sandbox and its files stay.",
            .input_schema = SCHEMA(P_ADDRESS "," P_SHELL_NAME, ""),
            .method = "shell.terminate",
            .address = MCP_ADDRESS_SESSION,
            .destructive = true,
        },
        {
            .name = "desktop_start",
            .description =
                "Start the desktop of a sandbox created with the desktop image (sandbox_id, or the live "
                "sandbox of session_id): a 1280x800 screen (width, height: 320x200 to 3840x2160) with a "
                "window "
                "manager, chromium and xterm to open, and noVNC for a human to watch. Asking again gives the "
                "running desktop. Returns width, height and, when the sandbox has network, novnc_url "
                "(http://127.0.0.1:PORT/vnc.html, for the user) and vnc_host_port.",
            .input_schema = SCHEMA(P_ADDRESS "," P_DESKTOP_SIZE, ""),
            .method = "desktop.start",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "desktop_screenshot",
            .description = "A screenshot of a sandbox's desktop (started with desktop_start) as a PNG image "
                           "block of the screen's size (default 1280x800; x and y of the other desktop tools "
                           "are its pixels, 0,0 top left).",
            .input_schema = SCHEMA(P_ADDRESS, ""),
            .method = "desktop.screenshot",
            .address = MCP_ADDRESS_EXISTING,
            .read_only = true,
            .result = MCP_RESULT_SCREENSHOT,
        },
        {
            .name = "desktop_click",
            .description = "Click the mouse on a sandbox's desktop: at x,y (pixels of desktop_screenshot; "
                           "left out: where the pointer is), with button left (default), middle or right, "
                           "double for a double click.",
            .input_schema = SCHEMA(
                P_ADDRESS "," P_DESKTOP_POINT(" (left out: where the pointer is)") "," P_DESKTOP_BUTTON, ""),
            .method = "desktop.click",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "desktop_type",
            .description = "Type text on a sandbox's desktop, into the window that has the focus (click it "
                           "first): every character as it is, newlines as Enter; at most 4096 bytes, about "
                           "8 ms a character.",
            .input_schema =
                SCHEMA(P_ADDRESS ",\"text\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4096,"
                                 "\"description\":\"The text, typed as it is; newlines press Enter.\"}",
                       "\"text\""),
            .method = "desktop.type",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "desktop_key",
            .description = "Press keys on a sandbox's desktop: xdotool key names separated by spaces, each "
                           "a keysym or a chord joined by +, e.g. \"ctrl+l\", \"Return\", \"alt+F4\", "
                           "\"ctrl+shift+Tab\" (at most 16 keys).",
            .input_schema = SCHEMA(
                P_ADDRESS ",\"keys\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":256,"
                          "\"description\":\"xdotool key names separated by spaces, e.g. \\\"ctrl+l\\\" or "
                          "\\\"Return\\\".\"}",
                "\"keys\""),
            .method = "desktop.key",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "desktop_move",
            .description = "Move the mouse pointer of a sandbox's desktop to x,y (hover).",
            .input_schema = SCHEMA(P_ADDRESS "," P_DESKTOP_POINT(""), "\"x\",\"y\""),
            .method = "desktop.move",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "desktop_scroll",
            .description = "Scroll the mouse wheel on a sandbox's desktop: direction up, down, left or "
                           "right, amount wheel steps (default 3, at most 50), at x,y (left out: where the "
                           "pointer is).",
            .input_schema = SCHEMA(
                P_ADDRESS ",\"direction\":{\"type\":\"string\",\"enum\":[\"up\",\"down\",\"left\","
                          "\"right\"],\"description\":\"Which way the wheel turns.\"},\"amount\":{\"type\":"
                          "\"integer\",\"minimum\":1,\"maximum\":50,\"description\":\"Wheel steps (default "
                          "3).\"}," P_DESKTOP_POINT(" (left out: where the pointer is)"),
                "\"direction\""),
            .method = "desktop.scroll",
            .address = MCP_ADDRESS_EXISTING,
        },
        {
            .name = "browser_screenshot",
            .description =
                "A PNG screenshot (an image block) of the page shown by the headless Chromium of a sandbox "
                "made with create_sandbox image \"browser\" (sandbox_id or session_id), after loading url "
                "if given. The browser starts on first use and keeps its page between calls. Limits: "
                "width and height 16 to 4096 pixels (default 1280x800), a full page at most 16384 pixels "
                "tall, timeout at most 300 s (default 30); the page reaches only what the sandbox's network "
                "policy allows.",
            .input_schema = SCHEMA(
                P_ADDRESS ",\"url\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8192,"
                          "\"description\":\"An http://, https://, about: or data: URL to load first.\"},"
                          "\"full_page\":{\"type\":\"boolean\",\"description\":\"The whole page, not only "
                          "the viewport (default false).\"},"
                          "\"width\":{\"type\":\"integer\",\"minimum\":16,\"maximum\":4096,"
                          "\"description\":\"Viewport width in pixels.\"},"
                          "\"height\":{\"type\":\"integer\",\"minimum\":16,\"maximum\":4096,"
                          "\"description\":\"Viewport height in pixels.\"},"
                          "\"timeout\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":300,"
                          "\"description\":\"Seconds the page may take to load (default 30).\"}",
                ""),
            .method = "browser.screenshot",
            .address = MCP_ADDRESS_EXISTING,
            .read_only = true,
            .result = MCP_RESULT_SCREENSHOT,
        },
        {
            .name = "browser_navigate",
            .description =
                "Load url in the headless Chromium of a sandbox made with create_sandbox image \"browser\" "
                "(sandbox_id or session_id) and wait for the page to finish loading (at most timeout "
                "seconds, default 30, at most 300). Returns the final url and the page title, and "
                "network_refused when the sandbox's network policy refused a host the page asked for. "
                "browser_screenshot then shows it.",
            .input_schema =
                SCHEMA(P_ADDRESS ",\"url\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8192,"
                                 "\"description\":\"An http://, https://, about: or data: URL.\"},"
                                 "\"timeout\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":300,"
                                 "\"description\":\"Seconds the page may take to load (default 30).\"}",
                       "\"url\""),
            .method = "browser.navigate",
            .address = MCP_ADDRESS_EXISTING,
        },
};

const size_t mcp_tool_count = ARRAY_SIZE(mcp_tools);

const struct mcp_tool *mcp_tool_find(const char *name)
{
        for (size_t i = 0; name != NULL && i < mcp_tool_count; i++) {
                if (strcmp(mcp_tools[i].name, name) == 0)
                        return &mcp_tools[i];
        }
        return NULL;
}

json_t *mcp_tools_list(void)
{
        json_t *tools = json_array();
        for (size_t i = 0; tools != NULL && i < mcp_tool_count; i++) {
                const struct mcp_tool *t = &mcp_tools[i];
                json_error_t jerr;
                json_t *schema = json_loads(t->input_schema, 0, &jerr);
                if (schema == NULL) {
                        json_decref(tools);
                        return NULL;
                }
                json_array_append_new(tools, json_pack("{s:s, s:s, s:o, s:{s:b, s:b, s:b, s:b}}", "name",
                                                       t->name, "description", t->description, "inputSchema",
                                                       schema, "annotations", "readOnlyHint", t->read_only,
                                                       "destructiveHint", t->destructive, "idempotentHint",
                                                       t->read_only, "openWorldHint", 0));
        }
        return tools ? json_pack("{s:o}", "tools", tools) : NULL;
}

/* --- arguments ---------------------------------------------------------- */

/* The subset of JSON Schema the tool table uses: type (object, string,
 * integer, boolean, array of strings, object of those), minLength, enum of
 * strings, minimum, maximum, required, additionalProperties: false. */
static const char *check_value(const char *name, const json_t *schema, const json_t *value, char *buf,
                               size_t size)
{
        const char *type = json_string_value(json_object_get(schema, "type"));
        if (strcmp(type, "string") == 0) {
                if (!json_is_string(value))
                        goto wrong_type;
                json_t *min = json_object_get(schema, "minLength");
                if (min && json_string_length(value) < (size_t)json_integer_value(min)) {
                        snprintf(buf, size, "argument \"%s\" must not be empty", name);
                        return buf;
                }
                json_t *choices = json_object_get(schema, "enum");
                if (choices == NULL)
                        return NULL;
                size_t i;
                json_t *choice;
                json_array_foreach(choices, i, choice)
                {
                        if (json_equal(choice, (json_t *)value))
                                return NULL;
                }
                size_t n = (size_t)snprintf(buf, size, "argument \"%s\" must be one of", name);
                json_array_foreach(choices, i, choice)
                {
                        if (n < size)
                                n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : " ",
                                                      json_string_value(choice));
                }
                return buf;
        }
        if (strcmp(type, "object") == 0) {
                if (!json_is_object(value))
                        goto wrong_type;
                json_t *properties = json_object_get(schema, "properties");
                const char *key;
                json_t *member;
                json_object_foreach((json_t *)value, key, member)
                {
                        char member_name[96];
                        snprintf(member_name, sizeof(member_name), "%.40s.%.40s", name, key);
                        json_t *property = json_object_get(properties, key);
                        if (property == NULL) {
                                snprintf(buf, size, "unknown member \"%s\"", member_name);
                                return buf;
                        }
                        const char *why = check_value(member_name, property, member, buf, size);
                        if (why != NULL)
                                return why;
                }
                return NULL;
        }
        if (strcmp(type, "integer") == 0) {
                double v;
                if (json_is_integer(value))
                        v = (double)json_integer_value(value);
                else if (json_is_real(value) && json_real_value(value) == floor(json_real_value(value)))
                        v = json_real_value(value);
                else
                        goto wrong_type;
                json_t *min = json_object_get(schema, "minimum");
                json_t *max = json_object_get(schema, "maximum");
                if ((min && v < json_number_value(min)) || (max && v > json_number_value(max))) {
                        if (max)
                                snprintf(buf, size, "argument \"%s\" must be from %lld to %lld", name,
                                         (long long)json_integer_value(min),
                                         (long long)json_integer_value(max));
                        else
                                snprintf(buf, size, "argument \"%s\" must be at least %lld", name,
                                         (long long)json_integer_value(min));
                        return buf;
                }
                return NULL;
        }
        if (strcmp(type, "boolean") == 0) {
                if (!json_is_boolean(value))
                        goto wrong_type;
                return NULL;
        }
        if (strcmp(type, "array") == 0) {
                if (!json_is_array(value))
                        goto wrong_type;
                char item_name[64];
                snprintf(item_name, sizeof(item_name), "%s[]", name);
                size_t i;
                json_t *item;
                json_array_foreach(value, i, item)
                {
                        const char *why =
                            check_value(item_name, json_object_get(schema, "items"), item, buf, size);
                        if (why != NULL)
                                return why;
                }
                return NULL;
        }
wrong_type:
        snprintf(buf, size, "argument \"%s\" must be %s %s", name,
                 strcmp(type, "array") == 0 || strcmp(type, "integer") == 0 ? "an" : "a", type);
        return buf;
}

const char *mcp_check_arguments(const struct mcp_tool *tool, const json_t *arguments, char *buf, size_t size)
{
        if (!json_is_object(arguments))
                return "arguments must be an object";
        json_error_t jerr;
        _cleanup_json_ json_t *schema = json_loads(tool->input_schema, 0, &jerr);
        if (schema == NULL)
                return "internal error: bad tool schema";
        json_t *properties = json_object_get(schema, "properties");
        size_t i;
        json_t *name;
        json_array_foreach(json_object_get(schema, "required"), i, name)
        {
                if (json_object_get(arguments, json_string_value(name)) == NULL) {
                        snprintf(buf, size, "missing required argument \"%s\"", json_string_value(name));
                        return buf;
                }
        }
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)arguments, key, value)
        {
                json_t *property = json_object_get(properties, key);
                if (property == NULL) {
                        size_t n = (size_t)snprintf(buf, size, "unknown argument \"%.64s\"; %s takes", key,
                                                    tool->name);
                        const char *pname;
                        json_t *unused;
                        const char *sep = " ";
                        json_object_foreach(properties, pname, unused)
                        {
                                if (n < size)
                                        n += (size_t)snprintf(buf + n, size - n, "%s%s", sep, pname);
                                sep = ", ";
                        }
                        return buf;
                }
                const char *why = check_value(key, property, value, buf, size);
                if (why != NULL)
                        return why;
        }
        return NULL;
}

/* --- tool arguments → nsboxd params ---------------------------------------- */

json_t *mcp_session_params(const json_t *arguments)
{
        return mcp_session_params_default(arguments, NULL);
}

json_t *mcp_session_params_default(const json_t *arguments, const char *default_session)
{
        json_t *session = json_object_get(arguments, "session_id");
        json_t *params = session != NULL ? json_pack("{s:O}", "session_id", session)
                                         : json_pack("{s:s?}", "session_id", default_session);
        json_t *network = json_object_get(arguments, "network");
        if (params != NULL && network != NULL)
                json_object_set(params, "network", network);
        return params;
}

json_t *mcp_session_update_params(const json_t *arguments, const json_t *session)
{
        json_t *wanted = json_object_get(arguments, "network");
        json_t *has = json_object_get(session, "network");
        json_t *id = json_object_get(session, "sandbox_id");
        if (!json_is_string(wanted) || !json_is_string(id) || json_equal(wanted, has))
                return NULL;
        return json_pack("{s:O, s:O}", "sandbox_id", id, "network", wanted);
}

/* shell_kill's signal names (the schema's enum), KILL when not given. */
static int signal_number(const char *name)
{
        static const struct {
                const char *name;
                int number;
        } signals[] = { { "TERM", 15 }, { "INT", 2 }, { "HUP", 1 } };
        for (size_t i = 0; name != NULL && i < ARRAY_SIZE(signals); i++) {
                if (strcmp(name, signals[i].name) == 0)
                        return signals[i].number;
        }
        return 9;
}

/* Integers may arrive as 30.0 from some clients; the daemon wants integers. */
static json_t *integer_of(const json_t *value)
{
        if (json_is_real(value))
                return json_integer((json_int_t)json_real_value(value));
        return json_integer(json_integer_value(value));
}

json_t *mcp_daemon_params(const struct mcp_tool *tool, const json_t *arguments, const char *sandbox_id)
{
        _cleanup_json_ json_t *params = json_object();
        if (params == NULL)
                return NULL;
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)arguments, key, value)
        {
                if (strcmp(key, "job_id") == 0) {
                        json_object_set(params, "exec_id", value);
                } else if (strcmp(key, "signal") == 0) {
                        json_object_set_new(params, "signal",
                                            json_integer(signal_number(json_string_value(value))));
                } else if (strcmp(key, "cwd") == 0 && json_string_value(value)[0] != '/') {
                        char *cwd = NULL;
                        if (asprintf(&cwd, "/workspace/%s", json_string_value(value)) < 0)
                                return NULL;
                        json_object_set_new(params, "cwd", json_string(cwd));
                        free(cwd);
                } else if (strcmp(key, "timeout") == 0) {
                        bool idle = strcmp(tool->method, "sandbox.create") == 0;
                        json_object_set_new(params, idle ? "idle_timeout_seconds" : "timeout_seconds",
                                            integer_of(value));
                } else if (strcmp(key, "memory_mb") == 0) {
                        json_t *mb = integer_of(value);
                        json_object_set_new(params, "limits",
                                            json_pack("{s:I}", "memory_bytes", json_integer_value(mb) << 20));
                        json_decref(mb);
                } else if (strcmp(key, "dependencies") == 0) {
                        json_object_set(params, "requirements", value);
                } else if (strcmp(key, "package") == 0) {
                        json_object_set_new(params, "packages", json_pack("[O]", value));
                } else if ((strcmp(key, "session_id") == 0 || strcmp(key, "network") == 0 ||
                            (strcmp(key, "sandbox_id") == 0 && sandbox_id != NULL)) &&
                           tool->address != MCP_ADDRESS_NONE) {
                        continue; /* resolved to the sandbox_id passed in, with that network */
                } else if (strcmp(key, "session_name") == 0) {
                        json_object_set(params, "session", value);
                } else {
                        json_object_set(params, key, value);
                }
        }
        if (sandbox_id != NULL)
                json_object_set_new(params, "sandbox_id", json_string(sandbox_id));
        bool shell_session =
            strncmp(tool->method, "shell.", 6) == 0 && strcmp(tool->method, "shell.list") != 0;
        if (shell_session && json_object_get(params, "session") == NULL)
                json_object_set_new(params, "session", json_string(MCP_DEFAULT_SHELL));
        if (strcmp(tool->name, "run_code") == 0 && json_object_get(params, "stateful") == NULL)
                json_object_set_new(params, "stateful", json_true());
        if (tool->result == MCP_RESULT_JOB_START) {
                /* Output comes back as base64 so that shell_output's offsets count bytes exactly. */
                json_object_set_new(params, "background", json_true());
                json_object_set_new(params, "timeout_seconds", json_integer(MCP_JOB_TIMEOUT_SECONDS));
                json_object_set_new(params, "encoding", json_string("base64"));
                if (json_object_get(params, "cwd") == NULL)
                        json_object_set_new(params, "cwd", json_string("/workspace"));
        } else if (strcmp(tool->method, "sandbox.exec") == 0) {
                json_object_set_new(params, "cwd", json_string("/workspace"));
        }
        return steal_pointer(&params);
}

const char *mcp_check_address(const struct mcp_tool *tool, const json_t *arguments)
{
        bool by_session = json_object_get(arguments, "session_id") != NULL;
        bool by_id = json_object_get(arguments, "sandbox_id") != NULL;
        if (tool->address == MCP_ADDRESS_NONE)
                return NULL;
        if (by_session && by_id)
                return "give session_id or sandbox_id, not both";
        if (tool->address == MCP_ADDRESS_EXISTING && !by_session && !by_id)
                return "missing required argument \"sandbox_id\" (or \"session_id\")";
        if (by_id && json_object_get(arguments, "network") != NULL)
                return "network applies to session_id sandboxes; for a sandbox_id, create it with network";
        return NULL;
}

static const char *image_mime(const char *path)
{
        static const struct {
                const char *suffix, *mime;
        } kinds[] = { { ".png", "image/png" }, { ".jpg", "image/jpeg" }, { ".jpeg", "image/jpeg" } };
        size_t len = strlen(path);
        for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
                size_t n = strlen(kinds[i].suffix);
                if (len > n && strcasecmp(path + len - n, kinds[i].suffix) == 0)
                        return kinds[i].mime;
        }
        return NULL;
}

/* Whether outputs already holds an image of `path` (a figure the runtime saved). */
static bool image_shown(const json_t *outputs, const char *path)
{
        size_t i;
        json_t *output;
        json_array_foreach(outputs, i, output)
        {
                const char *shown =
                    json_string_value(json_object_get(json_object_get(output, "image"), "path"));
                if (shown != NULL && strcmp(shown, path) == 0)
                        return true;
        }
        return false;
}

json_t *mcp_saved_images(const json_t *python_result)
{
        json_t *images = json_array();
        json_t *outputs = json_object_get(python_result, "outputs");
        const char *path;
        json_t *size;
        json_object_foreach(json_object_get(python_result, "files_produced"), path, size)
        {
                const char *mime = image_mime(path);
                if (mime == NULL || image_shown(outputs, path) || !json_is_integer(size) ||
                    json_integer_value(size) <= 0 || json_integer_value(size) > MCP_SAVED_IMAGE_MAX_BYTES ||
                    json_array_size(images) >= MCP_SAVED_IMAGES_MAX)
                        continue;
                json_array_append_new(images, json_pack("{s:s, s:s}", "path", path, "mime", mime));
        }
        return images;
}

void mcp_add_note(json_t *result, const char *note)
{
        const char *had = json_string_value(json_object_get(result, "note"));
        if (had == NULL || had[0] == '\0') {
                json_object_set_new(result, "note", json_string(note));
                return;
        }
        char *both = NULL;
        if (asprintf(&both, "%s; %s", had, note) >= 0)
                json_object_set_new(result, "note", json_string(both));
        free(both);
}

json_t *mcp_job_find(const json_t *exec_list, const char *job_id)
{
        size_t i;
        json_t *entry;
        json_array_foreach(json_object_get(exec_list, "execs"), i, entry)
        {
                const char *id = json_string_value(json_object_get(entry, "exec_id"));
                if (id != NULL && job_id != NULL && strcmp(id, job_id) == 0)
                        return entry;
        }
        return NULL;
}

/* One stream of exec.output (base64 from `since` on), cut at the cap on a
 * UTF-8 boundary and shown as text. *shown_bytes is how much of it is shown. */
static json_t *job_stream_text(const json_t *data, size_t *shown_bytes, bool *more)
{
        size_t len = 0;
        const char *text = json_string_value(data);
        _cleanup_free_ char *bytes = text ? base64_decode(text, json_string_length(data), &len) : NULL;
        *shown_bytes = 0;
        if (bytes == NULL)
                return json_string("");
        size_t take = len;
        if (take > MCP_JOB_OUTPUT_CAP) {
                *more = true;
                take = utf8_complete_prefix(bytes, MCP_JOB_OUTPUT_CAP);
                if (take == 0)
                        take = MCP_JOB_OUTPUT_CAP;
        }
        size_t n;
        _cleanup_free_ char *valid = utf8_make_valid(bytes, take, &n);
        *shown_bytes = take;
        return valid ? json_stringn(valid, n) : json_string("");
}

json_t *mcp_job_output_result(const char *job_id, const json_t *output, const json_t *since,
                              const json_t *entry)
{
        static const char *const streams[] = { "stdout", "stderr" };
        bool running = json_is_true(json_object_get(output, "running"));
        _cleanup_json_ json_t *shown = json_pack("{s:s, s:b}", "job_id", job_id, "running", running);
        _cleanup_json_ json_t *next = json_object();
        if (shown == NULL || next == NULL)
                return NULL;
        bool more = false;
        for (size_t i = 0; i < ARRAY_SIZE(streams); i++) {
                /* The daemon clamps `since` to what it has; `next` is where its output ends. */
                json_int_t end =
                    json_integer_value(json_object_get(json_object_get(output, "next"), streams[i]));
                json_int_t from = json_integer_value(json_object_get(since, streams[i]));
                if (from > end || from < 0)
                        from = end;
                /* Bytes dropped between a long job's head and tail: its piece starts past them. */
                from += json_integer_value(json_object_get(json_object_get(output, "dropped"), streams[i]));
                size_t shown_bytes;
                json_object_set_new(
                    shown, streams[i],
                    job_stream_text(json_object_get(output, streams[i]), &shown_bytes, &more));
                json_object_set_new(next, streams[i], json_integer(from + (json_int_t)shown_bytes));
        }
        json_t *code = json_object_get(entry, "exit_code");
        json_object_set_new(shown, "exit_code",
                            !running && json_is_integer(code) ? json_incref(code) : json_null());
        json_object_set(shown, "next", next);
        /* The daemon keeps more past `next` (the tail after a head): call again. */
        more = more || json_is_true(json_object_get(output, "more"));
        json_object_set_new(shown, "more", json_boolean(more));
        const char *note = NULL;
        if (more)
                note = "output left out: at most " MCP_JOB_OUTPUT_CAP_TEXT
                       " bytes of each stream are shown per call; call shell_output again with since = next";
        else if (json_is_true(json_object_get(output, "truncated")))
                note =
                    "the job printed more than the daemon keeps (the first 1 MiB of each stream): the rest "
                    "is lost; redirect its output to a file to keep it all";
        else if (!running && !json_is_integer(code))
                note = "the job was ended by a signal";
        if (note != NULL)
                json_object_set_new(shown, "note", json_string(note));
        return steal_pointer(&shown);
}

/* --- nsboxd results → CallToolResult ------------------------------------------ */

static json_t *text_block(const json_t *value)
{
        _cleanup_free_ char *text = json_text(value, JSON_COMPACT | JSON_ENCODE_ANY, NULL);
        return text ? json_pack("{s:s, s:s}", "type", "text", "text", text) : NULL;
}

static bool exec_failed(const json_t *result)
{
        json_t *code = json_object_get(result, "exit_code");
        return json_is_true(json_object_get(result, "timed_out")) || !json_is_integer(code) ||
               json_integer_value(code) != 0;
}

/* The byte offset after `chars` UTF-8 characters of text. */
static size_t utf8_offset(const char *text, size_t len, size_t chars)
{
        size_t i = 0;
        for (size_t seen = 0; i < len; i++) {
                if (((unsigned char)text[i] & 0xC0) != 0x80 && seen++ == chars)
                        break;
        }
        return i;
}

/* Cut result[key] to MCP_OUTPUT_CAP characters, keeping its head and tail
 * around a line that says what was cut and how to read it all. */
static void cap_stream(json_t *result, const char *key, const char *hint)
{
        json_t *value = json_object_get(result, key);
        const char *text = json_string_value(value);
        if (text == NULL)
                return;
        size_t len = json_string_length(value), chars = 0;
        for (size_t i = 0; i < len; i++)
                chars += ((unsigned char)text[i] & 0xC0) != 0x80;
        if (chars <= MCP_OUTPUT_CAP)
                return;
        size_t head = utf8_offset(text, len, MCP_OUTPUT_CAP / 2);
        size_t tail = utf8_offset(text, len, chars - MCP_OUTPUT_CAP / 2);
        char *capped = NULL;
        int n = asprintf(&capped,
                         "%.*s\n[... %zu characters cut: output capped at " MCP_OUTPUT_CAP_TEXT "; %s]\n%s",
                         (int)head, text, chars - MCP_OUTPUT_CAP, hint, text + tail);
        if (n < 0)
                return;
        json_object_set_new(result, key, json_stringn(capped, (size_t)n));
        free(capped);
        json_object_set_new(result, "output_capped", json_true());
}

static const char *cap_hint(const struct mcp_tool *tool)
{
        switch (tool->result) {
        case MCP_RESULT_PYTHON:
                return "to read all, write it to a file in /workspace and read that with sandbox_fs_read "
                       "(offset, max_bytes)";
        case MCP_RESULT_SHELL:
                return "to read all, redirect it to a file (cmd > out.txt 2>&1) and read that with "
                       "sandbox_fs_read (offset, max_bytes)";
        default:
                return "to read all, redirect it to a file (cmd > out.txt 2>&1) and read that with "
                       "sandbox_fs_read (offset, max_bytes), or run it with shell_start and page through "
                       "shell_output";
        }
}

static bool shell_failed(const json_t *result)
{
        if (json_is_true(json_object_get(result, "running")))
                return false;
        json_t *code = json_object_get(result, "exit_code");
        return json_is_true(json_object_get(result, "timed_out")) ||
               (json_is_integer(code) && json_integer_value(code) != 0);
}

json_t *mcp_call_result(const struct mcp_tool *tool, const json_t *daemon_result,
                        const char *protocol_version)
{
        _cleanup_json_ json_t *shown = json_deep_copy(daemon_result);
        _cleanup_json_ json_t *images = json_array();
        if (shown == NULL || images == NULL)
                return NULL;
        bool is_error = false;
        switch (tool->result) {
        case MCP_RESULT_SCREENSHOT: {
                /* desktop.screenshot's PNG is "data", browser.screenshot's "png". */
                const char *key = json_object_get(shown, "png") != NULL ? "png" : "data";
                json_t *data = json_object_get(shown, key);
                if (json_is_string(data)) {
                        json_array_append_new(images, json_pack("{s:s, s:O, s:s}", "type", "image", "data",
                                                                data, "mimeType", "image/png"));
                        json_object_del(shown, key);
                }
                break;
        }
        case MCP_RESULT_PLAIN:
        case MCP_RESULT_JOB_START:
        case MCP_RESULT_JOB_OUTPUT:
        case MCP_RESULT_JOB_KILL:
                break;
        case MCP_RESULT_EXEC:
                is_error = exec_failed(daemon_result);
                break;
        case MCP_RESULT_SHELL:
                is_error = shell_failed(daemon_result);
                break;
        case MCP_RESULT_PYTHON: {
                const char *status = json_string_value(json_object_get(daemon_result, "status"));
                is_error = status == NULL || strcmp(status, "ok") != 0;
                json_t *outputs = json_object_get(shown, "outputs");
                /* stdout has one home, "stdout": outputs keeps only what is not in it. */
                for (size_t i = json_array_size(outputs); i-- > 0;) {
                        const char *type =
                            json_string_value(json_object_get(json_array_get(outputs, i), "type"));
                        if (type != NULL && strcmp(type, "logs") == 0)
                                json_array_remove(outputs, i);
                }
                size_t i;
                json_t *output;
                /* Images go out once, as image blocks; the text keeps where they came from. */
                json_array_foreach(outputs, i, output)
                {
                        const char *type = json_string_value(json_object_get(output, "type"));
                        json_t *image = json_object_get(output, "image");
                        json_t *data = json_object_get(image, "data");
                        if (type == NULL || strcmp(type, "image") != 0 || !json_is_string(data))
                                continue;
                        const char *mime = json_string_value(json_object_get(image, "mime"));
                        json_array_append_new(images, json_pack("{s:s, s:O, s:s}", "type", "image", "data",
                                                                data, "mimeType", mime ? mime : "image/png"));
                        json_object_del(image, "data");
                }
                break;
        }
        }
        if (tool->result == MCP_RESULT_EXEC || tool->result == MCP_RESULT_PYTHON ||
            tool->result == MCP_RESULT_SHELL) {
                cap_stream(shown, "stdout", cap_hint(tool));
                cap_stream(shown, "stderr", cap_hint(tool));
        }
        if (tool->result == MCP_RESULT_PYTHON)
                cap_stream(shown, "result",
                           "to see all of it, assign it to a variable and print parts of it");
        if (json_is_true(json_object_get(daemon_result, "oom_killed")))
                mcp_add_note(shown, MCP_OOM_NOTE);
        json_t *content = json_array();
        json_array_append_new(content, text_block(shown));
        json_array_extend(content, images);
        json_t *result = json_pack("{s:o, s:b}", "content", content, "isError", is_error);
        /* The same object as the text block (so nothing is in it twice over).
         * Some hosts drop the image blocks of a result that has structuredContent. */
        if (result != NULL && json_array_size(images) == 0 && json_is_object(shown) &&
            protocol_version != NULL && strcmp(protocol_version, "2025-06-18") >= 0)
                json_object_set(result, "structuredContent", shown);
        return result;
}

json_t *mcp_call_failure(const char *method, const char *message, const json_t *daemon_error)
{
        _cleanup_json_ json_t *shown =
            json_pack("{s:s, s:s}", "error", message ? message : "failed", "method", method);
        if (shown == NULL)
                return NULL;
        json_t *data = json_object_get(daemon_error, "data");
        json_t *kind = json_object_get(data, "kind");
        if (json_is_string(kind))
                json_object_set(shown, "kind", kind);
        if (json_is_true(json_object_get(data, "oom_killed")))
                mcp_add_note(shown, MCP_OOM_NOTE);
        return json_pack("{s:[o], s:b}", "content", text_block(shown), "isError", 1);
}

json_t *mcp_progress_notification(const json_t *token, double progress, const char *message)
{
        json_t *params = json_pack("{s:O, s:f}", "progressToken", token, "progress", progress);
        if (params != NULL && message != NULL)
                json_object_set_new(params, "message", json_string(message));
        json_t *notification = jsonrpc_notification("notifications/progress", params);
        json_decref(params);
        return notification;
}

/* --- one line from the client ------------------------------------------------- */

static const char instructions[] =
    "nsbox runs Python and shell commands in isolated Linux sandboxes (no network unless created with a "
    "network policy: pass `network`, the name of one of the operator's policies). Every sandbox tool takes "
    "a session_id of your choice (its sandbox is created on first use and kept while used; idle for 300 s "
    "it is removed, and the next call recreates it and says so) or a sandbox_id from create_sandbox; with "
    "neither, the call uses this connection's own session. run_code runs Python like a notebook cell "
    "(variables persist; figures and saved PNG/JPEG files come back as images); shell_session_run runs "
    "commands in a persistent bash (cwd and variables persist); shell_execute and python_execute run one "
    "fresh command or script; sandbox_fs_* read and write files (encoding base64 for binary). shell_start "
    "runs a command in the background (a server, a long job; shell_output reads it, shell_kill stops it), "
    "and expose_port makes a server in a sandbox with network reachable from the user's machine. Commands "
    "time out after 30 s unless `timeout` says otherwise; stdout and stderr are cut to 20000 characters "
    "each (the text says so).";

static void reply_result(struct mcp_action *out, json_t *id, json_t *result)
{
        out->kind = MCP_ACTION_REPLY;
        out->reply = jsonrpc_result(id, result);
        json_decref(result);
}

static void reply_error(struct mcp_action *out, json_t *id, int code, const char *message)
{
        out->kind = MCP_ACTION_REPLY;
        out->reply = jsonrpc_error(id, code, NULL, message);
}

static bool blank(const char *line, size_t len)
{
        for (size_t i = 0; i < len; i++) {
                if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
                        return false;
        }
        return true;
}

static void handle_initialize(struct mcp_state *state, json_t *id, json_t *params, struct mcp_action *out)
{
        const char *requested = json_string_value(json_object_get(params, "protocolVersion"));
        const char *version = mcp_negotiate_version(requested);
        snprintf(state->protocol_version, sizeof(state->protocol_version), "%s", version);
        reply_result(out, id,
                     json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion", version,
                               "capabilities", "tools", "listChanged", 0, "serverInfo", "name",
                               MCP_SERVER_NAME, "version", MCP_SERVER_VERSION, "instructions", instructions));
}

static void handle_tools_call(json_t *id, json_t *params, struct mcp_action *out)
{
        json_t *name = json_object_get(params, "name");
        if (!json_is_string(name)) {
                reply_error(out, id, JSONRPC_INVALID_PARAMS, "tools/call needs the tool's \"name\"");
                return;
        }
        const struct mcp_tool *tool = mcp_tool_find(json_string_value(name));
        if (tool == NULL) {
                char message[160];
                snprintf(message, sizeof(message), "unknown tool: %.100s", json_string_value(name));
                reply_error(out, id, JSONRPC_INVALID_PARAMS, message);
                return;
        }
        json_t *arguments = json_object_get(params, "arguments");
        _cleanup_json_ json_t *args =
            arguments == NULL || json_is_null(arguments) ? json_object() : json_incref(arguments);
        char buf[512];
        const char *why = mcp_check_arguments(tool, args, buf, sizeof(buf));
        if (why == NULL)
                why = mcp_check_address(tool, args);
        if (why != NULL) {
                /* Argument mistakes go back to the model as a tool error it can correct. */
                char message[600];
                snprintf(message, sizeof(message), "invalid arguments for %s: %s", tool->name, why);
                reply_result(out, id, mcp_call_failure(tool->method, message, NULL));
                return;
        }
        json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
        out->kind = MCP_ACTION_CALL;
        out->id = json_incref(id);
        out->tool = tool;
        out->arguments = steal_pointer(&args);
        out->progress_token = (json_is_string(token) || json_is_integer(token)) ? json_incref(token) : NULL;
}

/* JSON-RPC 2.0 as MCP uses it: ids are strings or integers, params objects. */
void mcp_handle_line(struct mcp_state *state, const char *line, size_t len, struct mcp_action *out)
{
        memset(out, 0, sizeof(*out));
        if (blank(line, len))
                return;
        json_error_t jerr;
        _cleanup_json_ json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        if (msg == NULL) {
                char message[256];
                snprintf(message, sizeof(message), "parse error: %s", jerr.text);
                reply_error(out, NULL, JSONRPC_PARSE_ERROR, message);
                return;
        }
        if (!json_is_object(msg)) {
                reply_error(out, NULL, JSONRPC_INVALID_REQUEST,
                            json_is_array(msg) ? "invalid request: batches are not supported"
                                               : "invalid request: not a JSON object");
                return;
        }
        json_t *id = json_object_get(msg, "id");
        json_t *method = json_object_get(msg, "method");
        json_t *params = json_object_get(msg, "params");
        json_t *version = json_object_get(msg, "jsonrpc");
        bool good_id = json_is_string(id) || json_is_integer(id);
        json_t *reply_id = good_id ? id : NULL;
        if (method == NULL && (json_object_get(msg, "result") || json_object_get(msg, "error")))
                return; /* a response: nsbox sends no requests, so nothing waits for it */
        const char *why = NULL;
        int code = JSONRPC_INVALID_REQUEST;
        if (!json_is_string(version) || strcmp(json_string_value(version), "2.0") != 0) {
                why = "invalid request: \"jsonrpc\" must be \"2.0\"";
        } else if (!json_is_string(method) || json_string_length(method) == 0) {
                why = "invalid request: \"method\" must be a non-empty string";
        } else if (id != NULL && !good_id) {
                why = "invalid request: \"id\" must be a string or an integer";
        } else if (params != NULL && !json_is_object(params)) {
                why = "invalid params: \"params\" must be an object";
                code = JSONRPC_INVALID_PARAMS;
        }
        if (why != NULL) {
                if (id != NULL) /* a notification gets no reply, however malformed */
                        reply_error(out, reply_id, code, why);
                return;
        }
        const char *name = json_string_value(method);
        _cleanup_json_ json_t *empty = NULL;
        if (params == NULL)
                params = empty = json_object();

        if (id == NULL) {
                if (strcmp(name, "notifications/initialized") == 0) {
                        state->initialized = true;
                } else if (strcmp(name, "notifications/cancelled") == 0) {
                        json_t *target = json_object_get(params, "requestId");
                        if (json_is_string(target) || json_is_integer(target)) {
                                out->kind = MCP_ACTION_CANCEL;
                                out->id = json_incref(target);
                        }
                }
                return;
        }
        if (strcmp(name, "initialize") == 0) {
                handle_initialize(state, id, params, out);
        } else if (strcmp(name, "ping") == 0) {
                reply_result(out, id, json_object());
        } else if (strcmp(name, "tools/list") == 0) {
                reply_result(out, id, mcp_tools_list());
        } else if (strcmp(name, "tools/call") == 0) {
                handle_tools_call(id, params, out);
        } else {
                char message[160];
                snprintf(message, sizeof(message), "method not found: %.100s", name);
                reply_error(out, id, JSONRPC_METHOD_NOT_FOUND, message);
        }
}

void mcp_action_clear(struct mcp_action *action)
{
        json_decref(action->reply);
        json_decref(action->id);
        json_decref(action->arguments);
        json_decref(action->progress_token);
        memset(action, 0, sizeof(*action));
}

/* --- line framing --------------------------------------------------------------- */

int mcp_reader_feed(struct mcp_reader *r, const char *data, size_t n, mcp_line_cb on_line, void *cb_data)
{
        while (n > 0) {
                const char *nl = memchr(data, '\n', n);
                size_t take = nl ? (size_t)(nl - data) : n;
                if (r->dropping) {
                        r->dropping = nl == NULL;
                } else if (r->len + take > r->max) {
                        r->len = 0;
                        r->dropping = nl == NULL;
                        on_line(cb_data, NULL, 0);
                } else if (r->len == 0 && nl != NULL) {
                        on_line(cb_data, data, take); /* the common case: no copy */
                } else {
                        if (r->len + take > r->cap) {
                                size_t cap = r->cap ? r->cap : 65536;
                                while (cap < r->len + take)
                                        cap *= 2;
                                char *grown = realloc(r->buf, cap);
                                if (grown == NULL)
                                        return -ENOMEM;
                                r->buf = grown;
                                r->cap = cap;
                        }
                        memcpy(r->buf + r->len, data, take);
                        r->len += take;
                        if (nl != NULL) {
                                size_t len = r->len;
                                r->len = 0;
                                on_line(cb_data, r->buf, len);
                        }
                }
                if (nl == NULL)
                        break;
                data += take + 1;
                n -= take + 1;
        }
        return 0;
}

void mcp_reader_finish(struct mcp_reader *r, mcp_line_cb on_line, void *cb_data)
{
        if (r->len > 0 && !r->dropping)
                on_line(cb_data, r->buf, r->len);
        r->len = 0;
        r->dropping = false;
}

void mcp_reader_free(struct mcp_reader *r)
{
        free(r->buf);
        r->buf = NULL;
        r->len = r->cap = 0;
}
