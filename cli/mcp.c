/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox mcp: an MCP server on stdin/stdout that forwards tool calls to nsboxd.
 *
 * The main thread reads stdin (poll) and answers everything that needs no
 * daemon at once, so ping and notifications/cancelled are served while tools
 * run. Each tools/call runs in its own thread on its own connection to
 * nsboxd, with blocking calls: cancelling a call shuts that connection down.
 * stdout carries only protocol messages, written whole under one lock; logs
 * go to stderr. The sandbox of the default session (calls that name none)
 * is removed when the server ends, unless --session named it to keep. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "json_cleanup.h"
#include "jsonrpc.h"
#include "log.h"
#include "mcp.h"
#include "io.h"

#define MAX_CALLS            64
#define PROGRESS_INTERVAL_MS 1000

struct server;

struct call {
        struct server *srv;
        json_t *id;
        const struct mcp_tool *tool;
        json_t *arguments;
        json_t *progress_token;
        char protocol_version[16];
        long long start_ms;
        pthread_t thread;
        struct call *next;

        /* Under srv->lock. */
        struct client *conn; /* the daemon connection in use */
        bool cancelled, done;
        double last_progress;
        long long last_progress_ms;

        /* The call thread's own: the session's sandbox was reaped and made anew for this call. */
        bool recreated;
        char recreated_reason[160]; /* why its last sandbox went, as nsboxd said */
        /* The call thread's own: output streamed by sandbox.exec. */
        char *streamed[2];
        size_t streamed_len[2];
};

struct server {
        const char *socket_path;
        /* The session of calls that name no sandbox: one per server, made up
         * (and its sandbox removed at the end) unless --session named it. */
        const char *default_session;
        bool keep_default_session;
        bool default_session_used; /* under lock: a call got or made its sandbox */
        pthread_mutex_t lock;      /* the call list, the call fields marked so, and stdout */
        struct call *calls;
        size_t ncalls;
        int wake_fd; /* a call thread finished */
        struct mcp_state state;
        struct mcp_reader reader;
};

static long long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* --- output --------------------------------------------------------------------- */

/* Write one message (stolen) to stdout; srv->lock held. */
static void send_locked(json_t *msg)
{
        if (msg == NULL) {
                log_error("mcp: out of memory building a message");
                return;
        }
        size_t len;
        _cleanup_free_ char *line = jsonrpc_serialize(msg, &len);
        json_decref(msg);
        if (line == NULL) {
                log_error("mcp: out of memory serializing a message");
                return;
        }
        int r = io_write_all(STDOUT_FILENO, line, len);
        if (r < 0)
                log_warn("mcp: write to stdout: %s", strerror(-r));
}

static void server_send(struct server *srv, json_t *msg)
{
        pthread_mutex_lock(&srv->lock);
        send_locked(msg);
        pthread_mutex_unlock(&srv->lock);
}

/* srv->lock held. Progress must increase from one notification to the next. */
static void progress_locked(struct call *c, const char *message)
{
        long long now = now_ms();
        double progress = (now - c->start_ms) / 1000.0;
        if (progress <= c->last_progress)
                progress = c->last_progress + 0.001;
        c->last_progress = progress;
        c->last_progress_ms = now;
        send_locked(mcp_progress_notification(c->progress_token, progress, message));
}

/* --- one tools/call, in its own thread ------------------------------------------ */

static void on_daemon_notification(const char *method, json_t *params, void *data)
{
        struct call *c = data;
        if (strcmp(method, "exec.output") != 0)
                return;
        const char *stream = json_string_value(json_object_get(params, "stream"));
        json_t *chunk = json_object_get(params, "data");
        if (stream == NULL || !json_is_string(chunk))
                return;
        int which = strcmp(stream, "stderr") == 0;
        size_t n = json_string_length(chunk);
        char *grown = realloc(c->streamed[which], c->streamed_len[which] + n + 1);
        if (grown == NULL)
                return;
        memcpy(grown + c->streamed_len[which], json_string_value(chunk), n);
        c->streamed_len[which] += n;
        grown[c->streamed_len[which]] = '\0';
        c->streamed[which] = grown;
        if (c->progress_token == NULL)
                return;
        pthread_mutex_lock(&c->srv->lock);
        progress_locked(c, json_string_value(chunk));
        pthread_mutex_unlock(&c->srv->lock);
}

static bool call_cancelled(struct call *c)
{
        pthread_mutex_lock(&c->srv->lock);
        bool cancelled = c->cancelled;
        pthread_mutex_unlock(&c->srv->lock);
        return cancelled;
}

/* One daemon request on the call's connection. On failure returns < 0 and
 * *failure is the CallToolResult (isError) that says why. */
static int call_daemon_kind(struct call *c, struct client *conn, const char *method, json_t *params,
                            json_t **result, json_t **failure, char *kind, size_t kind_size)
{
        if (call_cancelled(c))
                return -ECANCELED;
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *error = NULL;
        int r = client_call(conn, method, params, on_daemon_notification, c, result, &error, &err);
        if (r < 0) {
                if (kind != NULL)
                        snprintf(kind, kind_size, "%s",
                                 json_string_value(json_object_get(json_object_get(error, "data"), "kind"))
                                     ?: "");
                *failure = mcp_call_failure(method, err ? err->message : "failed", error);
                return r;
        }
        return 0;
}

static int call_daemon(struct call *c, struct client *conn, const char *method, json_t *params,
                       json_t **result, json_t **failure)
{
        return call_daemon_kind(c, conn, method, params, result, failure, NULL, 0);
}

static json_t *streamed_string(const struct call *c, int which)
{
        return json_stringn(c->streamed[which] ? c->streamed[which] : "", c->streamed_len[which]);
}

/* exec.list's entry for the call's job_id in the session's sandbox; a job of
 * another sandbox is not found, so one session cannot read or stop another's. */
static int call_job_entry(struct call *c, struct client *conn, const char *sandbox_id, json_t **list,
                          json_t **entry, json_t **failure)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", sandbox_id);
        json_decref(*list);
        *list = NULL;
        if (call_daemon(c, conn, "exec.list", params, list, failure) < 0)
                return -EIO;
        const char *job_id = json_string_value(json_object_get(c->arguments, "job_id"));
        *entry = mcp_job_find(*list, job_id);
        if (*entry == NULL) {
                char message[256];
                snprintf(message, sizeof(message),
                         "no job %.64s in this session (job ids come from shell_start; only the newest "
                         "finished jobs are kept)",
                         job_id);
                _cleanup_json_ json_t *error = json_pack("{s:{s:s}}", "data", "kind", "not_found");
                *failure = mcp_call_failure(c->tool->method, message, error);
                return -ENOENT;
        }
        return 0;
}

/* Says in a tool's answer that its session's sandbox was reaped and recreated. */
static void call_note_recreated(const struct call *c, json_t *answer)
{
        if (!c->recreated || !json_is_object(answer))
                return;
        json_object_set_new(answer, "recreated", json_true());
        char note[320];
        snprintf(note, sizeof(note),
                 "this session's sandbox was reaped (%s) and has been recreated: files, installed packages "
                 "and run_code variables from before are gone",
                 c->recreated_reason[0] ? c->recreated_reason : "removed");
        mcp_add_note(answer, note);
}

/* shell_start, shell_output and shell_kill: background execs of the session's sandbox. */
static json_t *call_job(struct call *c, struct client *conn, const char *sandbox_id, json_t *params)
{
        const struct mcp_tool *tool = c->tool;
        json_t *failure = NULL;
        _cleanup_json_ json_t *answer = NULL;
        if (tool->result == MCP_RESULT_JOB_START) {
                if (call_daemon(c, conn, tool->method, params, &answer, &failure) < 0)
                        return failure;
                _cleanup_json_ json_t *shown = json_pack(
                    "{s:O, s:s, s:O, s:s}", "job_id", json_object_get(answer, "exec_id"), "sandbox_id",
                    sandbox_id, "pid", json_object_get(answer, "pid"), "note",
                    "running in the background (at most 86400 s); read its output with shell_output "
                    "{session_id, job_id}, stop it with shell_kill");
                call_note_recreated(c, shown);
                return mcp_call_result(tool, shown, c->protocol_version);
        }
        _cleanup_json_ json_t *list = NULL;
        json_t *entry = NULL;
        if (call_job_entry(c, conn, sandbox_id, &list, &entry, &failure) < 0)
                return failure;
        const char *job_id = json_string_value(json_object_get(c->arguments, "job_id"));
        if (tool->result == MCP_RESULT_JOB_OUTPUT) {
                if (call_daemon(c, conn, tool->method, params, &answer, &failure) < 0)
                        return failure;
                /* Ended between the two requests: its exit code is in a fresh list. */
                if (!json_is_true(json_object_get(answer, "running")) &&
                    json_is_true(json_object_get(entry, "running")) &&
                    call_job_entry(c, conn, sandbox_id, &list, &entry, &failure) < 0)
                        return failure;
                _cleanup_json_ json_t *shown =
                    mcp_job_output_result(job_id, answer, json_object_get(c->arguments, "since"), entry);
                return shown ? mcp_call_result(tool, shown, c->protocol_version) : NULL;
        }
        if (json_is_true(json_object_get(entry, "running"))) {
                if (call_daemon(c, conn, tool->method, params, &answer, &failure) < 0)
                        return failure;
                /* Wait for it to end, so that the answer (and the next shell_output) says it did. */
                for (long long waited = 0; waited < MCP_JOB_KILL_WAIT_MS; waited += 50) {
                        if (call_job_entry(c, conn, sandbox_id, &list, &entry, &failure) < 0)
                                return failure;
                        if (!json_is_true(json_object_get(entry, "running")))
                                break;
                        struct timespec ts = { .tv_nsec = 50 * 1000000L };
                        nanosleep(&ts, NULL);
                }
        }
        bool running = json_is_true(json_object_get(entry, "running"));
        json_t *code = json_object_get(entry, "exit_code");
        _cleanup_json_ json_t *shown = json_pack("{s:s, s:b, s:O}", "job_id", job_id, "running", running,
                                                 "exit_code", !running && code ? code : json_null());
        if (shown != NULL && running)
                json_object_set_new(shown, "note",
                                    json_string("still running 5 s after the signal; try signal KILL"));
        return shown ? mcp_call_result(tool, shown, c->protocol_version) : NULL;
}

/* The live sandbox of the call's session_id, without creating one (remove_sandbox). */
static int call_find_session(struct call *c, struct client *conn, const char **sandbox_id, json_t **list,
                             json_t **failure)
{
        _cleanup_json_ json_t *params = json_object();
        if (call_daemon(c, conn, "sandbox.list", params, list, failure) < 0)
                return -EIO;
        json_t *session = json_object_get(c->arguments, "session_id");
        size_t i;
        json_t *entry;
        json_array_foreach(json_object_get(*list, "sandboxes"), i, entry)
        {
                if (json_equal(json_object_get(entry, "session_id"), session)) {
                        *sandbox_id = json_string_value(json_object_get(entry, "sandbox_id"));
                        return 0;
                }
        }
        char message[160];
        snprintf(message, sizeof(message), "session %.64s has no live sandbox", json_string_value(session));
        _cleanup_json_ json_t *error = json_pack("{s:{s:s}}", "data", "kind", "not_found");
        *failure = mcp_call_failure(c->tool->method, message, error);
        return -ENOENT;
}

/* The sandbox a call acts on: the one of sandbox_id, or its session's,
 * got or created (*session is then sandbox.create's answer). */
static int call_resolve(struct call *c, struct client *conn, json_t **session, json_t **list,
                        const char **sandbox_id, json_t **failure)
{
        const struct mcp_tool *tool = c->tool;
        json_t *by_id = json_object_get(c->arguments, "sandbox_id");
        *sandbox_id = NULL;
        if (tool->address == MCP_ADDRESS_NONE)
                return 0;
        if (by_id != NULL) {
                *sandbox_id = json_string_value(by_id);
                return 0;
        }
        if (tool->address == MCP_ADDRESS_EXISTING)
                return call_find_session(c, conn, sandbox_id, list, failure);
        if (json_object_get(c->arguments, "session_id") == NULL) {
                pthread_mutex_lock(&c->srv->lock);
                c->srv->default_session_used = true;
                pthread_mutex_unlock(&c->srv->lock);
        }
        _cleanup_json_ json_t *params = mcp_session_params_default(c->arguments, c->srv->default_session);
        if (call_daemon(c, conn, "sandbox.create", params, session, failure) < 0)
                return -EIO;
        /* An existing session's sandbox gets the network this call asks for. */
        _cleanup_json_ json_t *update = mcp_session_update_params(c->arguments, *session);
        if (update != NULL) {
                json_t *updated = NULL;
                if (call_daemon(c, conn, "sandbox.update", update, &updated, failure) < 0)
                        return -EIO;
                json_decref(updated);
        }
        *sandbox_id = json_string_value(json_object_get(*session, "sandbox_id"));
        c->recreated = json_is_true(json_object_get(*session, "recreated"));
        snprintf(c->recreated_reason, sizeof(c->recreated_reason), "%s",
                 json_string_value(json_object_get(*session, "reason")) ?: "");
        return 0;
}

/* PNG and JPEG files the code saved (savefig) join the figures as images. */
static void call_add_saved_images(struct call *c, struct client *conn, const char *sandbox_id, json_t *answer)
{
        _cleanup_json_ json_t *saved = mcp_saved_images(answer);
        json_t *outputs = json_object_get(answer, "outputs");
        if (json_array_size(saved) == 0)
                return;
        if (!json_is_array(outputs)) {
                outputs = json_array();
                json_object_set_new(answer, "outputs", outputs);
        }
        size_t i;
        json_t *image;
        json_array_foreach(saved, i, image)
        {
                _cleanup_json_ json_t *params = json_pack(
                    "{s:s, s:O, s:s, s:i}", "sandbox_id", sandbox_id, "path", json_object_get(image, "path"),
                    "encoding", "base64", "max_bytes", (int)MCP_SAVED_IMAGE_MAX_BYTES);
                _cleanup_json_ json_t *read = NULL;
                json_t *failure = NULL;
                if (call_daemon(c, conn, "fs.read", params, &read, &failure) < 0) {
                        json_decref(failure); /* gone or unreadable since: the path stays in files_produced */
                        continue;
                }
                json_t *data = json_object_get(read, "content");
                if (!json_is_string(data) || json_is_true(json_object_get(read, "truncated")))
                        continue;
                json_array_append_new(outputs, json_pack("{s:s, s:{s:O, s:O, s:O}}", "type", "image", "image",
                                                         "mime", json_object_get(image, "mime"), "data", data,
                                                         "path", json_object_get(image, "path")));
        }
}

/* shell_session_run: the named shell is made on first use. */
static int call_shell_run(struct call *c, struct client *conn, const char *sandbox_id, json_t *params,
                          json_t **answer, json_t **failure)
{
        char kind[32] = "";
        if (call_daemon_kind(c, conn, c->tool->method, params, answer, failure, kind, sizeof(kind)) == 0)
                return 0;
        if (strcmp(kind, "not_found") != 0)
                return -EIO;
        json_decref(*failure);
        *failure = NULL;
        _cleanup_json_ json_t *create = json_pack("{s:s, s:O, s:s}", "sandbox_id", sandbox_id, "name",
                                                  json_object_get(params, "session"), "cwd", "/workspace");
        _cleanup_json_ json_t *created = NULL;
        if (call_daemon(c, conn, "shell.create", create, &created, failure) < 0)
                return -EIO;
        return call_daemon(c, conn, c->tool->method, params, answer, failure);
}

/* The requests of one call; *session is the session's sandbox (sandbox.create's answer). */
static json_t *call_steps(struct call *c, struct client *conn, json_t **session)
{
        const struct mcp_tool *tool = c->tool;
        bool shell = strcmp(tool->method, "sandbox.exec") == 0;
        json_t *failure = NULL;
        const char *sandbox_id = NULL;
        _cleanup_json_ json_t *list = NULL;
        if (call_resolve(c, conn, session, &list, &sandbox_id, &failure) < 0)
                return failure;
        bool job = tool->result == MCP_RESULT_JOB_START || tool->result == MCP_RESULT_JOB_OUTPUT ||
                   tool->result == MCP_RESULT_JOB_KILL;
        _cleanup_json_ json_t *params = mcp_daemon_params(tool, c->arguments, sandbox_id);
        if (params == NULL)
                return NULL;
        if (job)
                return call_job(c, conn, sandbox_id, params);
        /* Streamed output becomes progress messages. */
        bool stream = shell && c->progress_token != NULL;
        if (stream)
                json_object_set_new(params, "stream", json_true());
        _cleanup_json_ json_t *answer = NULL;
        int r;
        if (strcmp(tool->method, "shell.run") == 0)
                r = call_shell_run(c, conn, sandbox_id, params, &answer, &failure);
        else
                r = call_daemon(c, conn, tool->method, params, &answer, &failure);
        if (r < 0)
                return failure;
        if (stream) {
                json_object_set_new(answer, "stdout", streamed_string(c, 0));
                json_object_set_new(answer, "stderr", streamed_string(c, 1));
        }
        if (tool->result == MCP_RESULT_PYTHON)
                call_add_saved_images(c, conn, sandbox_id, answer);
        call_note_recreated(c, answer);
        return mcp_call_result(tool, answer, c->protocol_version);
}

/* The CallToolResult, or NULL when the call was cancelled. */
static json_t *call_execute(struct call *c)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct client *conn = NULL;
        if (client_connect(c->srv->socket_path, &conn, &err) < 0) {
                nsbox_error_wrap(&err, "nsboxd is not reachable (is it running?)");
                return mcp_call_failure(c->tool->method, err->message, NULL);
        }
        pthread_mutex_lock(&c->srv->lock);
        c->conn = conn;
        pthread_mutex_unlock(&c->srv->lock);

        _cleanup_json_ json_t *session = NULL;
        json_t *result = call_steps(c, conn, &session);

        pthread_mutex_lock(&c->srv->lock);
        c->conn = NULL;
        bool cancelled = c->cancelled;
        pthread_mutex_unlock(&c->srv->lock);
        client_close(conn);
        if (!cancelled)
                return result;
        /* Its connection was shut down: nsboxd kills the exec it ran and all
         * its processes (the exec's supervisor is their subreaper). */
        log_info("mcp: %s cancelled", c->tool->name);
        json_decref(result);
        return NULL;
}

static void *call_thread(void *data)
{
        struct call *c = data;
        json_t *result = call_execute(c);
        if (result == NULL && !call_cancelled(c))
                result = mcp_call_failure(c->tool->method, "out of memory", NULL);
        pthread_mutex_lock(&c->srv->lock);
        /* A cancelled request gets no response. */
        if (result != NULL && !c->cancelled)
                send_locked(jsonrpc_result(c->id, result));
        c->done = true;
        pthread_mutex_unlock(&c->srv->lock);
        json_decref(result);
        uint64_t one = 1;
        if (write(c->srv->wake_fd, &one, sizeof(one)) < 0)
                log_warn("mcp: wake the main loop: %s", strerror(errno));
        return NULL;
}

static void call_free(struct call *c)
{
        json_decref(c->id);
        json_decref(c->arguments);
        json_decref(c->progress_token);
        free(c->streamed[0]);
        free(c->streamed[1]);
        free(c);
}

/* --- the main thread ---------------------------------------------------------- */

static void server_start_call(struct server *srv, struct mcp_action *action)
{
        if (srv->ncalls >= MAX_CALLS) {
                server_send(srv, jsonrpc_result(action->id, mcp_call_failure(action->tool->method,
                                                                             "too many tool calls running at "
                                                                             "once; wait for one to finish",
                                                                             NULL)));
                return;
        }
        struct call *c = calloc(1, sizeof(*c));
        if (c == NULL) {
                server_send(srv, jsonrpc_error(action->id, JSONRPC_APP_ERROR, "internal", "out of memory"));
                return;
        }
        c->srv = srv;
        c->id = steal_pointer(&action->id);
        c->tool = action->tool;
        c->arguments = steal_pointer(&action->arguments);
        c->progress_token = steal_pointer(&action->progress_token);
        snprintf(c->protocol_version, sizeof(c->protocol_version), "%s", srv->state.protocol_version);
        c->start_ms = c->last_progress_ms = now_ms();
        log_debug("mcp: tools/call %s", c->tool->name);

        pthread_mutex_lock(&srv->lock);
        int r = pthread_create(&c->thread, NULL, call_thread, c);
        if (r == 0) {
                c->next = srv->calls;
                srv->calls = c;
                srv->ncalls++;
        }
        pthread_mutex_unlock(&srv->lock);
        if (r != 0) {
                server_send(srv, jsonrpc_result(c->id, mcp_call_failure(c->tool->method, strerror(r), NULL)));
                call_free(c);
        }
}

/* srv->lock held. */
static void cancel_locked(struct call *c)
{
        c->cancelled = true;
        /* The thread's blocking read returns at once; the daemon sees the client go. */
        if (c->conn != NULL)
                shutdown(client_fd(c->conn), SHUT_RDWR);
}

static void server_cancel(struct server *srv, const json_t *id)
{
        pthread_mutex_lock(&srv->lock);
        for (struct call *c = srv->calls; c != NULL; c = c->next) {
                if (!c->done && !c->cancelled && json_equal(c->id, (json_t *)id))
                        cancel_locked(c);
        }
        pthread_mutex_unlock(&srv->lock);
}

static void server_cancel_all(struct server *srv)
{
        pthread_mutex_lock(&srv->lock);
        for (struct call *c = srv->calls; c != NULL; c = c->next)
                cancel_locked(c);
        pthread_mutex_unlock(&srv->lock);
}

static void server_reap(struct server *srv)
{
        uint64_t count;
        if (read(srv->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
                log_warn("mcp: read eventfd: %s", strerror(errno));
        for (;;) {
                struct call *done = NULL;
                pthread_mutex_lock(&srv->lock);
                for (struct call **p = &srv->calls; *p != NULL; p = &(*p)->next) {
                        if ((*p)->done) {
                                done = *p;
                                *p = done->next;
                                srv->ncalls--;
                                break;
                        }
                }
                pthread_mutex_unlock(&srv->lock);
                if (done == NULL)
                        return;
                pthread_join(done->thread, NULL);
                call_free(done);
        }
}

static void server_tick_progress(struct server *srv)
{
        long long now = now_ms();
        pthread_mutex_lock(&srv->lock);
        for (struct call *c = srv->calls; c != NULL; c = c->next) {
                if (c->progress_token == NULL || c->done || c->cancelled ||
                    now - c->last_progress_ms < PROGRESS_INTERVAL_MS)
                        continue;
                char message[64];
                snprintf(message, sizeof(message), "%s running for %lld s", c->tool->name,
                         (now - c->start_ms) / 1000);
                progress_locked(c, message);
        }
        pthread_mutex_unlock(&srv->lock);
}

static void on_line(void *data, const char *line, size_t len)
{
        struct server *srv = data;
        struct mcp_action action;
        if (line == NULL) {
                server_send(srv,
                            jsonrpc_error(NULL, JSONRPC_PARSE_ERROR, NULL, "parse error: message too long"));
                return;
        }
        mcp_handle_line(&srv->state, line, len, &action);
        switch (action.kind) {
        case MCP_ACTION_NONE:
                break;
        case MCP_ACTION_REPLY:
                server_send(srv, steal_pointer(&action.reply));
                break;
        case MCP_ACTION_CALL:
                server_start_call(srv, &action);
                break;
        case MCP_ACTION_CANCEL:
                server_cancel(srv, action.id);
                break;
        }
        mcp_action_clear(&action);
}

static int server_run(struct server *srv, int signal_fd)
{
        bool input_open = true;
        char chunk[65536];
        for (;;) {
                pthread_mutex_lock(&srv->lock);
                size_t ncalls = srv->ncalls;
                pthread_mutex_unlock(&srv->lock);
                /* After EOF, calls already running still get their answers. */
                if (!input_open && ncalls == 0)
                        return 0;

                struct pollfd fds[] = {
                        { .fd = input_open ? STDIN_FILENO : -1, .events = POLLIN },
                        { .fd = signal_fd, .events = POLLIN },
                        { .fd = srv->wake_fd, .events = POLLIN },
                };
                int n = poll(fds, ARRAY_SIZE(fds), ncalls ? PROGRESS_INTERVAL_MS / 4 : -1);
                if (n < 0 && errno != EINTR)
                        return cli_fail("mcp: poll: %s", strerror(errno));
                if (fds[1].revents & POLLIN) {
                        struct signalfd_siginfo si;
                        if (read(signal_fd, &si, sizeof(si)) == sizeof(si))
                                log_info("mcp: signal %u: cancelling %zu running calls", si.ssi_signo,
                                         ncalls);
                        input_open = false;
                        server_cancel_all(srv);
                }
                if (fds[2].revents & POLLIN)
                        server_reap(srv);
                if (input_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
                        ssize_t got = read(STDIN_FILENO, chunk, sizeof(chunk));
                        if (got < 0 && errno != EINTR && errno != EAGAIN) {
                                log_warn("mcp: read stdin: %s", strerror(errno));
                                got = 0;
                        }
                        if (got > 0 && mcp_reader_feed(&srv->reader, chunk, got, on_line, srv) < 0)
                                return cli_fail("mcp: out of memory reading a message");
                        if (got == 0) {
                                mcp_reader_finish(&srv->reader, on_line, srv);
                                input_open = false;
                        }
                }
                server_tick_progress(srv);
        }
}

/* The default session's sandbox goes with the server that made it: nobody
 * else knows its made-up name, and it would hold memory and disk until the
 * idle timeout. */
static void server_remove_default_session(struct server *srv)
{
        if (srv->keep_default_session || !srv->default_session_used)
                return;
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *list = NULL, *removed = NULL, *error = NULL, *params = json_object();
        struct client *conn = NULL;
        if (client_connect(srv->socket_path, &conn, &err) < 0 ||
            client_call(conn, "sandbox.list", params, NULL, NULL, &list, &error, &err) < 0) {
                log_warn("mcp: could not remove the sandbox of session %s: %s", srv->default_session,
                         err != NULL ? err->message : "failed");
                if (conn != NULL)
                        client_close(conn);
                return;
        }
        size_t i;
        json_t *entry;
        json_array_foreach(json_object_get(list, "sandboxes"), i, entry)
        {
                const char *session = json_string_value(json_object_get(entry, "session_id"));
                if (session == NULL || strcmp(session, srv->default_session) != 0)
                        continue;
                _cleanup_json_ json_t *remove =
                    json_pack("{s:O, s:b}", "sandbox_id", json_object_get(entry, "sandbox_id"), "force", 1);
                if (client_call(conn, "sandbox.remove", remove, NULL, NULL, &removed, &error, &err) < 0)
                        log_warn("mcp: could not remove the sandbox of session %s: %s", srv->default_session,
                                 err->message);
                else
                        log_info("mcp: removed the sandbox of session %s", srv->default_session);
                break;
        }
        client_close(conn);
}

int cmd_mcp(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "session", required_argument, NULL, 's' }, { 0 } };
        const char *session = NULL;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt != 's')
                        return cli_opt_exit(opt);
                if (optarg[0] == '\0')
                        return cli_fail("mcp: --session needs a non-empty NAME");
                session = optarg;
        }
        if (optind < argc)
                return cli_usage_error(cli);
        /* Signals are read from a signalfd by the main thread only; call threads inherit the mask. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);
        _cleanup_close_ int signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (signal_fd < 0)
                return cli_fail("mcp: signalfd: %s", strerror(errno));

        struct server srv = {
                .socket_path = cli->socket_path,
                .lock = PTHREAD_MUTEX_INITIALIZER,
                .reader = { .max = MCP_MAX_LINE },
        };
        uint32_t nonce;
        if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
                return cli_fail("mcp: getrandom: %s", strerror(errno));
        char made_up[16];
        snprintf(made_up, sizeof(made_up), "mcp-%08" PRIx32, nonce);
        srv.default_session = session != NULL ? session : made_up;
        srv.keep_default_session = session != NULL;
        srv.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (srv.wake_fd < 0)
                return cli_fail("mcp: eventfd: %s", strerror(errno));
        log_debug("mcp: serving on stdio, nsboxd at %s", srv.socket_path);
        int rc = server_run(&srv, signal_fd);

        /* Only on a fatal error can calls still be running here. */
        server_cancel_all(&srv);
        for (struct call *c = srv.calls, *next; c != NULL; c = next) {
                next = c->next;
                pthread_join(c->thread, NULL);
                call_free(c);
        }
        server_remove_default_session(&srv);
        mcp_reader_free(&srv.reader);
        close(srv.wake_fd);
        return rc;
}
