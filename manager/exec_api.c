/* SPDX-License-Identifier: Apache-2.0 */
/* The exec methods: sandbox.exec, and exec.status, exec.output, exec.kill,
 * exec.stdin, exec.resize and exec.list on an exec by its id. */
#include "exec.h"
#include "exec_internal.h"
#include "exec_log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>

#include "cleanup.h"
#include "daemon.h"
#include "log.h"
#include "params.h"
#include "quota.h"
#include "removals.h"
#include "sandbox_pause.h"
#include "textenc.h"

void exec_method_run(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        const char *kind;
        if (quota_refuse_call(req))
                return;
        struct exec *ex = exec_launch(sb, req->msg.params, NULL, NULL, &kind, &err);
        if (ex == NULL) {
                if (strcmp(kind, "invalid_params") == 0)
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, kind, "%s", err->message);
                else
                        rpc_reply_fail(req, kind, "%s", err->message);
                return;
        }
        /* A background exec is answered once the init reports its pid. */
        ex->req = req;
        exec_attribute(ex, req);
        /* Counted as it is checked (quota_refuse_call) and as python.run's
         * calls are: by the uid of the request. */
        exec_count(ex, req->uid);
        /* One that may run for hours is on record from its start too. */
        if (ex->background || ex->tty)
                log_info("audit: exec %s started sandbox=%s uid=%u %s", ex->id, sb->id, (unsigned)ex->uid,
                         ex->audit ? ex->audit : "?");
        if (!ex->background)
                rpc_request_on_disconnect(req, exec_client_gone, ex);
}

/* --- background execs ----------------------------------------------------- */

static bool exec_addressable(const struct exec *ex, bool background_only)
{
        return (ex->background || !background_only) && !ex->service;
}

/* The exec with this id in a sandbox `uid` may see, or NULL after replying
 * not_found. Status and output are kept for background execs only; any
 * running exec can be killed (a CLI interrupted by Ctrl-C does that). As
 * for sandbox ids, a unique prefix of SANDBOX_ID_PREFIX_MIN characters or
 * more names an exec, among the caller's own sandboxes only (root's too):
 * a guessed prefix tells nobody that another user's exec exists. */
static struct exec *require_exec(struct rpc_request *req, bool background_only)
{
        json_t *id = json_object_get(req->msg.params, "exec_id");
        if (!json_is_string(id)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "exec_id must be a string");
                return NULL;
        }
        const char *want = json_string_value(id);
        size_t len = strlen(want);
        struct exec *found = NULL;
        const struct sandbox_removal *removal;
        size_t matched = 0;
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                /* A sandbox released to its teardown is gone for clients: its execs too. */
                if ((req->uid != 0 && sb->owner != req->uid) || sb->state == SANDBOX_EXITED || sb->released)
                        continue;
                for (struct exec *ex = sb->exec->execs; ex != NULL; ex = ex->next) {
                        if (strcmp(ex->id, want) == 0 && exec_addressable(ex, background_only))
                                return ex;
                        if (len >= SANDBOX_ID_PREFIX_MIN && sb->owner == req->uid &&
                            strncmp(ex->id, want, len) == 0 && exec_addressable(ex, background_only)) {
                                found = ex;
                                matched++;
                        }
                }
        }
        if (matched == 1)
                return found;
        if (matched > 1)
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "ambiguous exec id prefix %.64s: it matches %zu of your execs", want,
                                matched);
        else if ((removal = sandbox_removal_of_exec(want, req->uid)) != NULL)
                sandbox_removal_reply_gone(req, removal, want);
        else
                rpc_reply_fail(req, "not_found", "no exec %.64s", want);
        return NULL;
}

void exec_method_status(struct rpc_request *req, struct sandbox *sb)
{
        struct exec *ex = require_exec(req, true);
        if (ex != NULL)
                rpc_reply_result(req, exec_result(ex));
}

static int get_offset(json_t *since, const char *stream, size_t *out)
{
        json_t *v = json_is_object(since) ? json_object_get(since, stream) : since;
        *out = 0;
        if (v == NULL || json_is_null(v))
                return 0;
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return -EINVAL;
        *out = (size_t)json_integer_value(v);
        return 0;
}

/* exec.output's answer for ex from these offsets (or the last `tail`
 * lines, when tail >= 0); NULL when out of memory. */
static json_t *output_result(struct exec *ex, const size_t offsets[2], json_int_t tail)
{
        json_t *result = json_pack("{s:s, s:{}, s:{}, s:b, s:b}", "exec_id", ex->id, "next", "dropped",
                                   "running", !ex->finished, "truncated", ex->truncated);
        if (result == NULL)
                return NULL;
        bool more = false;
        for (int i = 0; i < 2; i++) {
                const char *name = exec_stream_names[i];
                size_t from = offsets[i];
                if (tail >= 0)
                        from = exec_log_tail_start(ex, i, (size_t)tail);
                struct exec_log_piece piece;
                if (exec_log_read(ex, i, from, &piece) < 0) {
                        json_decref(result);
                        return NULL;
                }
                /* Asked for the last lines, and they reach back to bytes that were dropped. */
                if (tail >= 0 && piece.dropped == 0 && from > ex->out[i].len &&
                    from == exec_log_written(ex, i) - ex->out[i].tail_len)
                        piece.dropped = from - ex->out[i].len;
                json_object_set_new(result, name,
                                    exec_output_to_json(piece.data ? piece.data : "", piece.len, ex->base64));
                json_object_set_new(json_object_get(result, "next"), name,
                                    json_integer((json_int_t)piece.next));
                json_object_set_new(json_object_get(result, "dropped"), name,
                                    json_integer((json_int_t)piece.dropped));
                more = more || piece.more;
                free(piece.data);
        }
        json_object_set_new(result, "more", json_boolean(more));
        /* How it ended, so a reader of its output needs no exec.status (which
         * would send the whole output again). */
        if (ex->finished)
                exec_result_end(ex, result);
        return result;
}

static void reply_output(struct rpc_request *req, struct exec *ex, const size_t offsets[2], json_int_t tail)
{
        json_t *result = output_result(ex, offsets, tail);
        if (result == NULL)
                rpc_reply_fail(req, "internal", "out of memory");
        else
                rpc_reply_result(req, result);
}

/* An exec.output call with wait_ms, parked until the exec writes past its
 * offsets or ends, its client leaves, or wait_ms passes. */
struct exec_output_wait {
        struct rpc_request *req;
        struct exec *ex;
        struct loop_timer *timer;
        size_t since[2];
        struct exec_output_wait *next;
};

/* Take w off its exec's list and free it; its request is the caller's to answer. */
static void output_wait_drop(struct exec_output_wait *w)
{
        for (struct exec_output_wait **p = &w->ex->output_waiters; *p != NULL; p = &(*p)->next) {
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        }
        loop_timer_cancel(nsboxd.loop, w->timer);
        free(w);
}

static void output_wait_answer(struct exec_output_wait *w)
{
        struct rpc_request *req = w->req;
        struct exec *ex = w->ex;
        size_t since[2] = { w->since[0], w->since[1] };
        output_wait_drop(w);
        reply_output(req, ex, since, -1);
}

static void output_wait_expired(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct exec_output_wait *w = data;
        w->timer = NULL; /* a one-shot timer, gone once this returns */
        output_wait_answer(w);
}

static void output_wait_gone(struct rpc_request *req, void *data)
{
        output_wait_drop(data);
        rpc_reply_fail(req, "unavailable", "client gone");
}

static bool output_new(const struct exec *ex, const size_t since[2])
{
        return ex->finished || exec_log_written(ex, 0) > since[0] || exec_log_written(ex, 1) > since[1];
}

void exec_output_wake(struct exec *ex, bool gone)
{
        /* From the head each time: an answer may close its connection, and
         * that drops the connection's other waits, on this exec too. */
        for (;;) {
                struct exec_output_wait *w = ex->output_waiters;
                while (w != NULL && !gone && !output_new(ex, w->since))
                        w = w->next;
                if (w == NULL)
                        return;
                output_wait_answer(w);
        }
}

void exec_method_output(struct rpc_request *req, struct sandbox *sb)
{
        struct exec *ex = require_exec(req, true);
        if (ex == NULL)
                return;
        json_t *since = json_object_get(req->msg.params, "since");
        json_t *tail = json_object_get(req->msg.params, "tail");
        json_t *wait = json_object_get(req->msg.params, "wait_ms");
        if (tail != NULL && !json_is_null(tail) &&
            (!json_is_integer(tail) || json_integer_value(tail) < 0 ||
             (since != NULL && !json_is_null(since)))) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "tail must be a number of lines (0 or more), without since");
                return;
        }
        if (wait != NULL && !json_is_null(wait) &&
            (!json_is_integer(wait) || json_integer_value(wait) < 0 ||
             json_integer_value(wait) > EXEC_OUTPUT_WAIT_MAX_MS || (tail != NULL && !json_is_null(tail)))) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "wait_ms must be a number of ms from 0 to %d, without tail",
                                EXEC_OUTPUT_WAIT_MAX_MS);
                return;
        }
        size_t offsets[2];
        for (int i = 0; i < 2; i++) {
                if (get_offset(since, exec_stream_names[i], &offsets[i]) < 0) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "since must be a byte offset or {stdout, stderr} offsets");
                        return;
                }
        }
        json_int_t wait_ms = json_is_integer(wait) ? json_integer_value(wait) : 0;
        if (wait_ms > 0 && !output_new(ex, offsets)) {
                struct exec_output_wait *w = calloc(1, sizeof(*w));
                if (w != NULL)
                        w->timer = loop_timer_add_in(nsboxd.loop, wait_ms, output_wait_expired, w);
                if (w == NULL || w->timer == NULL) {
                        free(w);
                        rpc_reply_fail(req, "internal", "out of memory");
                        return;
                }
                *w = (struct exec_output_wait){ .req = req,
                                                .ex = ex,
                                                .timer = w->timer,
                                                .since = { offsets[0], offsets[1] },
                                                .next = ex->output_waiters };
                ex->output_waiters = w;
                rpc_request_on_disconnect(req, output_wait_gone, w);
                return;
        }
        reply_output(req, ex, offsets, json_is_integer(tail) ? json_integer_value(tail) : -1);
}

void exec_method_kill(struct rpc_request *req, struct sandbox *sb)
{
        struct exec *ex = require_exec(req, false);
        if (ex == NULL || !sandbox_resume_for(req, ex->sb))
                return;
        int sig = SIGKILL;
        json_t *s = json_object_get(req->msg.params, "signal");
        if (s != NULL && !json_is_null(s)) {
                if (!json_is_integer(s) || json_integer_value(s) < 1 ||
                    json_integer_value(s) > CTL_MAX_SIGNAL) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "signal must be 1 to %d", CTL_MAX_SIGNAL);
                        return;
                }
                sig = (int)json_integer_value(s);
        }
        if (!ex->finished) {
                ex->killed = ex->killed || sig == SIGKILL;
                exec_send_kill(ex, sig);
        }
        rpc_reply_result(req, json_pack("{s:s, s:b}", "exec_id", ex->id, "running", !ex->finished));
}

void exec_method_list(struct rpc_request *req, struct sandbox *sb)
{
        json_t *list = json_array();
        for (struct exec *ex = sb->exec->execs; ex != NULL; ex = ex->next) {
                if (!ex->background)
                        continue;
                char started[40];
                format_timestamp(ex->start_realtime_ms, started, sizeof(started));
                json_array_append_new(list, json_pack("{s:s, s:b, s:o, s:o, s:s, s:s, s:s, s:i}", "exec_id",
                                                      ex->id, "running", !ex->finished, "exit_code",
                                                      ex->exited && WIFEXITED(ex->wait_status)
                                                          ? json_integer(WEXITSTATUS(ex->wait_status))
                                                          : json_null(),
                                                      "signal",
                                                      ex->exited && WIFSIGNALED(ex->wait_status)
                                                          ? json_integer(WTERMSIG(ex->wait_status))
                                                          : json_null(),
                                                      "status", exec_status_word(ex), "command",
                                                      ex->command_text ? ex->command_text : "", "started_at",
                                                      started, "pid", (int)ex->pid));
        }
        rpc_reply_result(req, json_pack("{s:o}", "execs", list));
}

/* exec.stdin {exec_id, data, encoding?, eof?}: bytes for the stdin of an
 * exec started with stdin_stream (or tty). The answer comes once at most
 * EXEC_STDIN_STREAM_BUFFER bytes wait in nsboxd: a client that waits for
 * it before sending more is paced by the command's reading. One call may
 * wait at a time per exec. */
static void stdin_waiter_gone(struct rpc_request *req, void *data)
{
        struct exec *ex = data;
        if (ex->stdin_waiter == req)
                ex->stdin_waiter = NULL;
        rpc_reply_fail(req, "unavailable", "client gone");
}

void exec_method_stdin(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "exec_id", "data", "encoding", "eof", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (params_check_known(req->msg.params, known, "", &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        struct exec *ex = require_exec(req, false);
        if (ex == NULL || !sandbox_resume_for(req, ex->sb))
                return;
        json_t *data = json_object_get(req->msg.params, "data");
        json_t *eof = json_object_get(req->msg.params, "eof");
        bool base64;
        if (params_get_encoding(req->msg.params, &base64, &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        if ((data != NULL && !json_is_null(data) && !json_is_string(data)) ||
            (eof != NULL && !json_is_null(eof) && !json_is_boolean(eof))) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "data must be a string and eof a boolean");
                return;
        }
        if (!ex->stdin_stream) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "exec %s was not started with stdin_stream: true (or tty: true)", ex->id);
                return;
        }
        if (ex->finished || ex->stdin_src == NULL || ex->stdin_eof) {
                rpc_reply_fail(req, "unavailable", "exec %s: its standard input is closed (%s)", ex->id,
                               ex->finished    ? "the exec has ended"
                               : ex->stdin_eof ? "eof was sent"
                                               : "the command closed it");
                return;
        }
        if (ex->stdin_waiter != NULL) {
                rpc_reply_fail(
                    req, "busy",
                    "exec %s: an earlier exec.stdin still waits for the command to read; wait for its "
                    "answer before sending more",
                    ex->id);
                return;
        }
        size_t len = data != NULL && json_is_string(data) ? json_string_length(data) : 0;
        _cleanup_free_ char *bytes = NULL;
        if (len > 0 && base64) {
                bytes = base64_decode(json_string_value(data), len, &len);
                if (bytes == NULL) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "data is not base64");
                        return;
                }
        }
        if (len > EXEC_STDIN_MAX_CALL) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "data exceeds %u bytes per exec.stdin call; send it in pieces",
                                EXEC_STDIN_MAX_CALL);
                return;
        }
        if (len > 0) {
                int r = exec_write_stdin(ex, bytes != NULL ? bytes : json_string_value(data), len);
                if (r < 0) {
                        rpc_reply_fail(req, "unavailable",
                                       "exec %s: its standard input is closed (the command closed it)",
                                       ex->id);
                        return;
                }
        }
        if (json_is_true(eof)) {
                ex->stdin_eof = true;
                if (ex->stdin_len == ex->stdin_off)
                        exec_stdin_close(ex);
        }
        if (ex->stdin_src != NULL && ex->stdin_len - ex->stdin_off > EXEC_STDIN_STREAM_BUFFER) {
                ex->stdin_waiter = req;
                rpc_request_on_disconnect(req, stdin_waiter_gone, ex);
                return;
        }
        rpc_reply_result(req, exec_stdin_result(ex));
}

/* exec.resize {exec_id, rows, cols}: the window size of a tty exec; the
 * kernel sends its foreground process group SIGWINCH. */
void exec_method_resize(struct rpc_request *req, struct sandbox *sb)
{
        struct exec *ex = require_exec(req, false);
        if (ex == NULL || !sandbox_resume_for(req, ex->sb))
                return;
        json_t *rows = json_object_get(req->msg.params, "rows");
        json_t *cols = json_object_get(req->msg.params, "cols");
        if (!json_is_integer(rows) || !json_is_integer(cols) || json_integer_value(rows) < 1 ||
            json_integer_value(rows) > 65535 || json_integer_value(cols) < 1 ||
            json_integer_value(cols) > 65535) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "rows and cols must be integers from 1 to 65535");
                return;
        }
        if (!ex->tty) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "exec %s has no terminal (start it with tty: true)", ex->id);
                return;
        }
        if (ex->finished || ex->pty < 0) {
                rpc_reply_fail(req, "unavailable", "exec %s has ended", ex->id);
                return;
        }
        struct winsize size = { .ws_row = (unsigned short)json_integer_value(rows),
                                .ws_col = (unsigned short)json_integer_value(cols) };
        if (ioctl(ex->pty, TIOCSWINSZ, &size) < 0) {
                rpc_reply_fail(req, "internal", "exec %s: set the window size: %s", ex->id, strerror(errno));
                return;
        }
        rpc_reply_result(
            req, json_pack("{s:s, s:i, s:i}", "exec_id", ex->id, "rows", size.ws_row, "cols", size.ws_col));
}
