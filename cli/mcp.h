/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox mcp: the Model Context Protocol message handling, kept apart from
 * the I/O so that it can be tested without a daemon (cli/mcp_protocol.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define MCP_LATEST_PROTOCOL_VERSION "2025-11-25"
#define MCP_SERVER_NAME             "nsbox"
#define MCP_SERVER_VERSION          "0.1.0"
/* One MCP message per line; longer lines are refused as a parse error. */
#define MCP_MAX_LINE (64u << 20)

/* How the daemon's answer of a tool is judged and shown. */
enum mcp_result_kind {
        MCP_RESULT_PLAIN,  /* the JSON result, never a failure */
        MCP_RESULT_EXEC,   /* a process: failed when it exited non-zero, was killed or timed out */
        MCP_RESULT_PYTHON, /* python.run: failed unless status is "ok"; images become image blocks */
        /* Background jobs: more than one daemon request each (cli/mcp.c call_job). */
        MCP_RESULT_JOB_START,  /* sandbox.exec background: {job_id, sandbox_id, pid} */
        MCP_RESULT_JOB_OUTPUT, /* exec.list + exec.output: capped output, running, exit_code */
        MCP_RESULT_JOB_KILL,   /* exec.list + exec.kill, then exec.list until it ended */
        MCP_RESULT_SHELL,      /* shell.run / shell.check: failed when the command ended badly */
        MCP_RESULT_SCREENSHOT, /* desktop.screenshot: its PNG ("data") as an image block */
};

/* How a tool names the sandbox it acts on. */
enum mcp_address {
        MCP_ADDRESS_NONE,     /* not one sandbox: create_sandbox, list_sandboxes */
        MCP_ADDRESS_SESSION,  /* session_id (get or create; default the connection's) or sandbox_id */
        MCP_ADDRESS_EXISTING, /* sandbox_id, or the live sandbox of session_id; never creates one */
};

/* stdout and stderr in a tool's text: at most this many characters each,
 * the head and the tail kept around a line that says how much was cut. */
#define MCP_OUTPUT_CAP      20000
#define MCP_OUTPUT_CAP_TEXT "20000"
/* PNG/JPEG files a run_code/python call wrote (savefig) come back as image
 * blocks: at most this many, each at most this large. */
#define MCP_SAVED_IMAGES_MAX      8
#define MCP_SAVED_IMAGE_MAX_BYTES (4u << 20)
/* The shell session a shell_session_* tool uses when it names none. */
#define MCP_DEFAULT_SHELL "main"

/* shell_start's commands may run as long as the daemon allows any exec. */
#define MCP_JOB_TIMEOUT_SECONDS 86400
/* shell_output shows at most this many bytes of each stream per call. */
#define MCP_JOB_OUTPUT_CAP      16384
#define MCP_JOB_OUTPUT_CAP_TEXT "16384"
/* shell_kill waits this long for the job to end. */
#define MCP_JOB_KILL_WAIT_MS 5000

struct mcp_tool {
        const char *name;
        const char *description;
        const char *input_schema; /* JSON Schema, as JSON text */
        const char *method;       /* the nsboxd method it forwards to */
        enum mcp_address address; /* how the sandbox it acts on is named */
        bool read_only;
        bool destructive;
        enum mcp_result_kind result;
};

extern const struct mcp_tool mcp_tools[];
extern const size_t mcp_tool_count;

const struct mcp_tool *mcp_tool_find(const char *name);

/* The client's protocol version when nsbox speaks it, else the latest. */
const char *mcp_negotiate_version(const char *requested);

/* What the server knows of its client. */
struct mcp_state {
        bool initialized;
        char protocol_version[16]; /* negotiated; empty before initialize */
};

enum mcp_action_kind {
        MCP_ACTION_NONE,   /* a notification or a response: nothing to do */
        MCP_ACTION_REPLY,  /* write `reply` */
        MCP_ACTION_CALL,   /* run `tool` with `arguments`, answer request `id` */
        MCP_ACTION_CANCEL, /* stop the call whose request id is `id` */
};

/* Every json_t here is owned by the action. */
struct mcp_action {
        enum mcp_action_kind kind;
        json_t *reply;
        json_t *id;
        const struct mcp_tool *tool;
        json_t *arguments;
        json_t *progress_token; /* NULL when the client asked for no progress */
};

/* Decide what one line from the client asks for. Never fails: malformed
 * input becomes a JSON-RPC error reply. */
void mcp_handle_line(struct mcp_state *state, const char *line, size_t len, struct mcp_action *out);
void mcp_action_clear(struct mcp_action *action);

/* {"tools": [...]} for tools/list (new reference). */
json_t *mcp_tools_list(void);

/* NULL when `arguments` fit the tool's schema, else why not (static or
 * written into buf). */
const char *mcp_check_arguments(const struct mcp_tool *tool, const json_t *arguments, char *buf, size_t size);

/* sandbox.create params that get or create the sandbox of a session tool's
 * session_id, or of `default_session` when the arguments name none. */
json_t *mcp_session_params(const json_t *arguments);
json_t *mcp_session_params_default(const json_t *arguments, const char *default_session);
/* NULL when the arguments name the sandbox well (session_id or sandbox_id,
 * not both), else why not. */
const char *mcp_check_address(const struct mcp_tool *tool, const json_t *arguments);
/* The image files among a python.run answer's files_produced that are not
 * already among its outputs: [{path, mime}] (new reference). */
json_t *mcp_saved_images(const json_t *python_result);
/* Adds `note` to the result's "note" (joined with "; "). */
void mcp_add_note(json_t *result, const char *note);
/* sandbox.update params when a session tool's `network` differs from the
 * network of the session's sandbox (sandbox.create's answer), else NULL. */
json_t *mcp_session_update_params(const json_t *arguments, const json_t *session);

/* The params of the tool's daemon method. `sandbox_id` is the session's
 * sandbox for session tools (else NULL). */
json_t *mcp_daemon_params(const struct mcp_tool *tool, const json_t *arguments, const char *sandbox_id);

/* The entry of job_id in exec.list's answer, or NULL (borrowed). */
json_t *mcp_job_find(const json_t *exec_list, const char *job_id);
/* shell_output's answer from exec.output's (base64, from `since`), the
 * `since` asked for and the job's exec.list entry (new reference). */
json_t *mcp_job_output_result(const char *job_id, const json_t *output, const json_t *since,
                              const json_t *entry);

/* The CallToolResult for a daemon result (new reference). */
json_t *mcp_call_result(const struct mcp_tool *tool, const json_t *daemon_result,
                        const char *protocol_version);
/* The CallToolResult (isError) for a daemon that refused or could not be reached. */
json_t *mcp_call_failure(const char *method, const char *message, const json_t *daemon_error);

/* What the text says when the kernel's OOM killer ended the code. */
#define MCP_OOM_NOTE                                                                                      \
        "out of memory: the kernel killed the code when the sandbox went over its memory limit (default " \
        "512 MiB; create_sandbox memory_mb sets it)"

/* notifications/progress; `message` may be NULL. */
json_t *mcp_progress_notification(const json_t *token, double progress, const char *message);

/* Splits the client's byte stream into lines. A line longer than `max` is
 * dropped whole and reported once as line == NULL. */
struct mcp_reader {
        char *buf;
        size_t len, cap, max;
        bool dropping; /* inside an overlong line, until its '\n' */
};
typedef void (*mcp_line_cb)(void *data, const char *line, size_t len);

int mcp_reader_feed(struct mcp_reader *r, const char *data, size_t n, mcp_line_cb on_line, void *cb_data);
/* End of input: a last line without '\n' still counts. */
void mcp_reader_finish(struct mcp_reader *r, mcp_line_cb on_line, void *cb_data);
void mcp_reader_free(struct mcp_reader *r);
