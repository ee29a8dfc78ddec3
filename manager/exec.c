/* SPDX-License-Identifier: Apache-2.0 */
/* Execs: one process run in a sandbox at a client's request, its output, timeout and end. */
#include "exec.h"

#include "egress.h"
#include "exec_internal.h"
#include "exec_keep.h"
#include "exec_log.h"
#include "exec_params.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/epoll.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <linux/sockios.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "budget.h"
#include "cgroup.h"
#include "cleanup.h"
#include "sandbox_user.h"
#include "daemon.h"
#include "egress.h"
#include "json_cleanup.h"
#include "events.h"
#include "log.h"
#include "params.h"
#include "quota.h"
#include "removals.h"
#include "policy.h"
#include "proto.h"
#include "sandbox.h"
#include "textenc.h"

/* After the main process exits, wait this long for its pipes to close
 * (descendants may still hold them) before answering. */
#define EXEC_DRAIN_GRACE_MS 200
/* How long an ended exec waits for a client that reads none of its held-back
 * output: then it finishes, the rest dropped (truncated), so a silent client
 * cannot keep an exec (and its sandbox, its quota) alive forever. */
#define EXEC_HELD_OUTPUT_MS 60000
#define EXEC_KEEP_FINISHED  64

const char *const exec_stream_names[2] = { "stdout", "stderr" };

static void exec_finish(struct exec *ex);
static void exec_audit(const struct exec *ex);
static void deadline_forget(struct exec *ex);
static void exec_release_slot(struct exec *ex);
static void exec_prepare_next(struct sandbox *sb, struct exec *finished);
static void exec_make_spare_id(void);
static int outputs_open(struct exec_outputs *o, nsbox_error_t **err);
static void outputs_close(struct exec_outputs *o);

static void exec_unlink(struct exec *ex)
{
        for (struct exec **p = &ex->sb->exec->execs; *p != NULL; p = &(*p)->next) {
                if (*p == ex) {
                        *p = ex->next;
                        return;
                }
        }
}

static void exec_unpause(struct exec *ex);

void exec_count(struct exec *ex, uid_t uid)
{
        ex->quota_uid = uid;
        ex->counted = true;
        quota_calls_add(uid, 1);
        exec_keep_meta(ex);
}

static void exec_set_hooks(struct exec *ex, const struct exec_hooks *hooks, void *data)
{
        ex->hooks = hooks;
        ex->hooks_data = data;
        ex->keep_kind = hooks != NULL ? hooks->keep_kind : NULL;
        ex->keep_state = hooks != NULL ? hooks->keep_state : NULL;
}

static void exec_uncount(struct exec *ex)
{
        if (ex->counted)
                quota_calls_add(ex->quota_uid, -1);
        ex->counted = false;
}

static void exec_free(struct exec *ex)
{
        exec_output_wake(ex, true);
        exec_uncount(ex);
        exec_unpause(ex);
        budget_give(ex->charged);
        for (int i = 0; i < 2; i++) {
                if (ex->out[i].source)
                        loop_remove(nsboxd.loop, ex->out[i].source);
                free(ex->out[i].data);
                free(ex->out[i].tail);
        }
        if (ex->stdin_src)
                loop_remove(nsboxd.loop, ex->stdin_src);
        deadline_forget(ex);
        if (ex->slot)
                loop_remove(nsboxd.loop, ex->slot);
        if (ex->slot_request >= 0)
                close(ex->slot_request);
        for (int i = 0; i < 2; i++) {
                if (ex->held[i] >= 0)
                        close(ex->held[i]);
        }
        free(ex->stdin_data);
        free(ex->start_error);
        free(ex->audit);
        free(ex->command_text);
        if (ex->pty >= 0)
                close(ex->pty);
        if (ex->keep_fd >= 0)
                close(ex->keep_fd);
        free(ex);
}

/* Each exec's deadline is a timer of the loop's (loop.h), cancelled when
 * the exec finishes. */
static void on_deadline(struct loop *loop, struct loop_timer *timer, void *data);

static void deadline_forget(struct exec *ex)
{
        loop_timer_cancel(nsboxd.loop, ex->deadline);
        ex->deadline = NULL;
}

/* The exec's deadline, ms from now (the timeout, or the drain grace). */
static int deadline_set(struct exec *ex, long long ms)
{
        if (ex->deadline != NULL) {
                loop_timer_move_in(nsboxd.loop, ex->deadline, ms);
                return 0;
        }
        ex->deadline = loop_timer_add_in(nsboxd.loop, ms, on_deadline, ex);
        return ex->deadline != NULL ? 0 : -ENOMEM;
}

void exec_send_kill(struct exec *ex, int sig)
{
        /* The supervisor is the subreaper of the exec's whole tree, setsid'd
         * and double-forked descendants too: SIGKILL ends all of it. */
        if (ex->slot == NULL)
                return;
        struct ctl_kill msg = { .hdr = { CTL_KILL, ex->number }, .signal = sig };
        ctl_send(ex->slot->fd, &msg, sizeof(msg), NULL, 0, NULL, 0);
}

/* Emit text to a JSON string value: valid UTF-8 or base64. */
json_t *exec_output_to_json(const char *data, size_t len, bool base64)
{
        size_t n;
        _cleanup_free_ char *text = base64 ? base64_encode(data, len, &n) : utf8_make_valid(data, len, &n);
        if (text == NULL)
                return json_string("");
        /* Already valid UTF-8 (or base64): re-validating megabytes would stall the loop. */
        return json_stringn_nocheck(text, n);
}

/* Who gets the exec's streamed output: its own request, or the request of
 * an internal caller that streams it (python.run with stream: true). */
static struct rpc_request *exec_client(const struct exec *ex)
{
        return ex->req != NULL ? ex->req : ex->notify;
}

static void stream_chunk(struct exec *ex, int which, const char *data, size_t len)
{
        struct rpc_request *to = exec_client(ex);
        if (to == NULL || len == 0)
                return;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:o}", "exec_id", ex->id, "stream", exec_stream_names[which], "data",
                      exec_output_to_json(data, len, ex->base64));
        if (params != NULL)
                rpc_notify(to, "exec.output", params);
}

/* --- back-pressure ------------------------------------------------------ */

/* The exec's client has more output waiting than it takes (rpc.h). */
static bool exec_client_backlogged(const struct exec *ex)
{
        struct rpc_request *to = exec_client(ex);
        return to != NULL && rpc_request_connected(to) && rpc_request_backlogged(to);
}

static void exec_watch_output(struct exec *ex, uint32_t events)
{
        for (int i = 0; i < 2; i++) {
                if (ex->out[i].source != NULL && !ex->out[i].eof)
                        loop_modify(nsboxd.loop, ex->out[i].source, events);
        }
}

static void exec_on_client_resume(struct rpc_request *req, void *data)
{
        struct exec *ex = data;
        if (!ex->paused)
                return;
        if (exec_client_backlogged(ex)) {
                rpc_request_on_resume(req, exec_on_client_resume, ex);
                return;
        }
        ex->paused = false;
        exec_watch_output(ex, EPOLLIN);
}

/* Stop reading the exec's pipes: its processes block once they are full,
 * instead of nsboxd holding what its client does not take. The rpc layer
 * says when the client has room again (or is gone). */
static void exec_pause(struct exec *ex)
{
        if (ex->paused)
                return;
        ex->paused = true;
        exec_watch_output(ex, 0);
        rpc_request_on_resume(exec_client(ex), exec_on_client_resume, ex);
}

/* No longer waiting for the client, its pipes left as they are (it is
 * finishing). */
static void exec_unpause(struct exec *ex)
{
        if (!ex->paused)
                return;
        ex->paused = false;
        if (exec_client(ex) != NULL)
                rpc_request_on_resume(exec_client(ex), NULL, NULL);
}

/* Room for `need` more bytes in a collecting buffer, charged to nsboxd's
 * output budget; false (the bytes are dropped, `truncated`) when the budget
 * is spent. The buffer never grows past the exec's max_output: doubling
 * beyond it would hold memory nothing fills. */
static bool output_reserve(struct exec *ex, struct output *o, size_t need)
{
        if (o->len + need <= o->cap)
                return true;
        size_t want = o->len + need;
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < want)
                cap *= 2;
        size_t most = ex->stream ? want : (ex->max_output > want ? ex->max_output : want);
        if (cap > most)
                cap = most;
        if (!budget_take(cap - o->cap))
                return false;
        char *grown = realloc(o->data, cap);
        if (grown == NULL) {
                budget_give(cap - o->cap);
                return false;
        }
        ex->charged += cap - o->cap;
        o->data = grown;
        o->cap = cap;
        return true;
}

/* Collected output is kept up to max_output (the head); what comes after
 * is read and dropped, with `truncated`, so that a background exec never
 * blocks on output nobody asked for: a background exec's goes on to the
 * tail ring of its stream (exec_log.h), the oldest of it dropped instead.
 * Streamed output is passed on, and its pipes paused while the client lags. */
static void stream_pending(struct exec *ex, int which);

/* A background exec's output is a log: a head and a tail ring (exec_log.h). */
static bool output_logged(const struct exec *ex)
{
        return ex->background && !ex->stream;
}

static void output_append(struct exec *ex, int which, const char *data, size_t len)
{
        if (ex->hooks != NULL &&
            (which == OUT_STDOUT ? ex->hooks->on_stdout : ex->hooks->on_stderr) != NULL) {
                (which == OUT_STDOUT ? ex->hooks->on_stdout : ex->hooks->on_stderr)(ex, data, len,
                                                                                    ex->hooks_data);
                return;
        }
        struct output *o = &ex->out[which];
        bool logged = output_logged(ex);
        size_t room = ex->max_output > ex->total_output ? ex->max_output - ex->total_output : 0;
        /* A background stream's head ends at its first byte that went past it. */
        if (logged && o->written > o->len)
                room = 0;
        size_t rest = len > room ? len - room : 0;
        len -= rest;
        if (len > 0 && !output_reserve(ex, o, len)) {
                rest += len;
                len = 0;
        }
        if (logged) {
                o->written += len;
                exec_log_append_tail(ex, which, data + len, rest);
        } else {
                /* Counted for live restore (exec_keep.h): a stream's client
                 * takes it back from the offset it has, the dropped rest of a
                 * foreground one's is a gap after its head. */
                o->written += len + (ex->stream ? 0 : rest);
                if (rest > 0) {
                        ex->truncated = true;
                        ex->dropped_output += rest;
                }
        }
        /* On record before anyone is told: a client that saw these bytes
         * asks the next nsboxd for what follows them (exec_keep.h). */
        if (len == 0) {
                exec_keep_counters(ex);
                if (logged)
                        exec_output_wake(ex, false);
                return;
        }
        ex->total_output += len;
        memcpy(o->data + o->len, data, len);
        if (ex->stream)
                exec_keep_streamed(ex, which, o->written - len, data, len);
        else
                exec_keep_head(ex, which, o->len, data, len);
        o->len += len;
        exec_keep_counters(ex);
        if (logged)
                exec_output_wake(ex, false);

        if (ex->stream) {
                o->carry += len;
                stream_pending(ex, which);
        }
}

/* A stream's client hears exec.started before any output: bytes read before
 * the supervisor's CTL_STARTED (its report and the pipes come in one batch,
 * in any order) wait, with the pipes unwatched, until exec_started. */
static bool stream_holds_output(const struct exec *ex)
{
        return ex->stream && ex->req != NULL && !ex->started && !ex->background;
}

/* Send what is complete of a stream's pending bytes (o->carry of them, at
 * the end of its buffer); keep a split UTF-8 character for later. */
static void stream_pending(struct exec *ex, int which)
{
        struct output *o = &ex->out[which];
        if (stream_holds_output(ex)) {
                if (!ex->held_for_start) {
                        ex->held_for_start = true;
                        exec_watch_output(ex, 0);
                }
                return;
        }
        if (o->carry == 0)
                return;
        const char *start = o->data + o->len - o->carry;
        size_t ready = ex->base64 ? o->carry : utf8_complete_prefix(start, o->carry);
        stream_chunk(ex, which, start, ready);
        o->carry -= ready;
        /* Streamed bytes need not be kept, only the carry. */
        memmove(o->data, o->data + o->len - o->carry, o->carry);
        o->len = o->carry;
        if (exec_client_backlogged(ex))
                exec_pause(ex);
}

static void exec_maybe_finish(struct exec *ex)
{
        if (ex->finished)
                return;
        bool ended = ex->exited || ex->start_error != NULL;
        if (!ended)
                return;
        if (ex->out[0].eof && ex->out[1].eof) {
                exec_finish(ex);
                return;
        }
        /* Arm the drain grace once, right after the exit. */
        if (ex->end_mono == 0) {
                ex->end_mono = now_monotonic_ms();
                deadline_set(ex, EXEC_DRAIN_GRACE_MS);
        }
}

/* Read what one output pipe has; true at its EOF, where the pipe is no
 * longer watched unless `keep` (the caller then unwatches it). Bounded work
 * per call so one flooding sandbox cannot starve others. */
static bool output_read(struct exec *ex, int which, bool keep)
{
        struct loop_source *source = ex->out[which].source;
        char buf[65536];
        for (int round = 0; round < 16 && !ex->paused; round++) {
                ssize_t n = exec_keep_read(ex, which, source->fd, buf, sizeof(buf));
                if (n > 0) {
                        output_append(ex, which, buf, n);
                        ex->keep_in_ring = false;
                        continue;
                }
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return false;
                ex->out[which].eof = true;
                if (!keep) {
                        loop_remove(nsboxd.loop, source);
                        ex->out[which].source = NULL;
                }
                return true;
        }
        return false;
}

static void on_output(struct loop_source *source, uint32_t events)
{
        struct exec *ex = source->data;
        if (ex == NULL)
                return; /* pipes made ahead: nothing writes to them before an exec has them */
        if (output_read(ex, source == ex->out[OUT_STDOUT].source ? OUT_STDOUT : OUT_STDERR, false))
                exec_maybe_finish(ex);
}

json_t *exec_stdin_result(struct exec *ex)
{
        return json_pack("{s:s, s:I, s:b}", "exec_id", ex->id, "queued",
                         (json_int_t)(ex->stdin_len - ex->stdin_off), "open", ex->stdin_src != NULL);
}

/* Answer the exec.stdin call that waits for room (if any): with the
 * result, or with `error` when its bytes will never be written. */
static void stdin_answer_waiter(struct exec *ex, const char *error)
{
        struct rpc_request *req = ex->stdin_waiter;
        if (req == NULL)
                return;
        ex->stdin_waiter = NULL;
        if (error != NULL)
                rpc_reply_fail(req, "unavailable", "exec %s: %s", ex->id, error);
        else
                rpc_reply_result(req, exec_stdin_result(ex));
}

void exec_stdin_close(struct exec *ex)
{
        stdin_answer_waiter(ex, ex->stdin_len > ex->stdin_off
                                    ? "its standard input closed before all of it was written (the command "
                                      "ended or closed it)"
                                    : NULL);
        if (ex->stdin_src != NULL)
                loop_remove(nsboxd.loop, ex->stdin_src);
        ex->stdin_src = NULL;
        free(ex->stdin_data);
        ex->stdin_data = NULL;
        ex->stdin_len = ex->stdin_off = 0;
}

static void on_stdin(struct loop_source *source, uint32_t events)
{
        struct exec *ex = source->data;
        if (events & (EPOLLERR | EPOLLHUP)) {
                /* Its reader closed it (epoll reports that even with no
                 * events asked for: an attached stdin waiting for more would
                 * otherwise wake the loop for ever). */
                exec_stdin_close(ex);
                return;
        }
        while (ex->stdin_off < ex->stdin_len) {
                ssize_t n = write(source->fd, ex->stdin_data + ex->stdin_off, ex->stdin_len - ex->stdin_off);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return;
                        exec_stdin_close(ex); /* EPIPE: the process does not read its input */
                        return;
                }
                ex->stdin_off += n;
                if (ex->stdin_waiter != NULL && ex->stdin_len - ex->stdin_off <= EXEC_STDIN_STREAM_BUFFER)
                        stdin_answer_waiter(ex, NULL);
        }
        if (!ex->keep_stdin || ex->stdin_eof) {
                exec_stdin_close(ex);
                return;
        }
        /* Attached: everything queued is written; wait for more. */
        ex->stdin_off = ex->stdin_len = 0;
        loop_modify(nsboxd.loop, source, 0);
}

int exec_write_stdin(struct exec *ex, const void *buf, size_t len)
{
        if (ex->stdin_src == NULL || ex->finished)
                return -EPIPE;
        if (ex->stdin_len - ex->stdin_off + len > EXEC_MAX_STDIN_BYTES)
                return -ENOBUFS;
        if (ex->stdin_off > 0) {
                memmove(ex->stdin_data, ex->stdin_data + ex->stdin_off, ex->stdin_len - ex->stdin_off);
                ex->stdin_len -= ex->stdin_off;
                ex->stdin_off = 0;
        }
        char *grown = realloc(ex->stdin_data, ex->stdin_len + len);
        if (grown == NULL)
                return -ENOMEM;
        ex->stdin_data = grown;
        memcpy(ex->stdin_data + ex->stdin_len, buf, len);
        ex->stdin_len += len;
        on_stdin(ex->stdin_src, EPOLLOUT);
        if (ex->stdin_src != NULL && ex->stdin_len > ex->stdin_off)
                loop_modify(nsboxd.loop, ex->stdin_src, EPOLLOUT);
        return ex->stdin_src != NULL ? 0 : -EPIPE;
}

void exec_signal(struct exec *ex, int sig)
{
        if (sig == SIGKILL)
                ex->killed = true;
        exec_send_kill(ex, sig);
}

unsigned exec_running_unkilled(const struct sandbox *sb)
{
        unsigned n = 0;
        for (const struct exec *ex = sb->exec->execs; ex != NULL; ex = ex->next)
                if (!ex->service && !ex->finished && !ex->killed)
                        n++;
        return n;
}

void exec_stream_to(struct exec *ex, struct rpc_request *req)
{
        ex->notify = req;
}

const char *exec_id(const struct exec *ex)
{
        return ex->id;
}

/* A deadline passed: the timeout (kill the exec) or the drain grace after
 * its exit (answer with the output there is). */
static void exec_deadline(struct exec *ex)
{
        deadline_forget(ex);
        if (ex->exited || ex->start_error != NULL) {
                /* Output held back for a slow client is not lost to the drain
                 * grace, but not held for ever either. */
                if (ex->paused && now_monotonic_ms() - ex->end_mono < EXEC_HELD_OUTPUT_MS) {
                        deadline_set(ex, EXEC_DRAIN_GRACE_MS);
                        return;
                }
                if (ex->paused)
                        ex->truncated = true;
                exec_finish(ex);
                return;
        }
        if (!ex->timed_out) {
                ex->timed_out = true;
                log_limited(ex->sb->id, LOG_LEVEL_INFO, "sandbox %s: exec %s timed out after %us", ex->sb->id,
                            ex->id, ex->timeout_s);
                exec_send_kill(ex, SIGKILL);
        }
}

/* Finishing an exec runs callbacks that may end others: their deadlines,
 * due in the same batch or not, are cancelled with them. */
static void on_deadline(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct exec *ex = data;
        ex->deadline = NULL; /* a one-shot timer, gone once this returns */
        exec_deadline(ex);
}

/* Killed by SIGKILL, or a shell's 128 + 9 for a child it ran so. */
static bool exec_ended_by_sigkill(const struct exec *ex)
{
        if (!ex->exited)
                return false;
        if (WIFSIGNALED(ex->wait_status))
                return WTERMSIG(ex->wait_status) == SIGKILL;
        return WIFEXITED(ex->wait_status) && WEXITSTATUS(ex->wait_status) == 128 + SIGKILL;
}

/* The command's stderr (none when streamed), then a line of nsboxd's on how
 * it ended: the timeout. */
static json_t *exec_stderr_with_note(const struct exec *ex)
{
        char note[128];
        int n = snprintf(note, sizeof(note), "nsbox: timed out after %u s (timeout_seconds), killed\n",
                         ex->timeout_s);
        if (ex->stream)
                return json_string(note); /* nsboxd's own words, never encoded: as a start error's */
        size_t kept = ex->out[1].len;
        _cleanup_free_ char *text = malloc(kept + 1 + (size_t)n);
        if (text == NULL)
                return json_string(note);
        size_t at = kept;
        if (kept > 0) {
                memcpy(text, ex->out[1].data, kept);
                if (text[kept - 1] != '\n')
                        text[at++] = '\n'; /* a line of its own, even after a partial one */
        }
        memcpy(text + at, note, (size_t)n);
        return exec_output_to_json(text, at + (size_t)n, ex->base64);
}

/* How the exec ended, in one word: "running", "exited" (exit_code),
 * "signaled" (signal: the command's own end), "timeout", "killed" (exec.kill,
 * its client gone, its sandbox or supervisor gone) or "start_failed". */
const char *exec_status_word(const struct exec *ex)
{
        if (ex->start_error != NULL)
                return "start_failed";
        if (!ex->exited)
                return "running";
        if (ex->timed_out)
                return "timeout";
        if (WIFEXITED(ex->wait_status))
                return "exited";
        return ex->killed ? "killed" : "signaled";
}

void exec_result_end(struct exec *ex, json_t *result)
{
        json_t *exit_code = json_null(), *signal = json_null();
        if (result == NULL)
                return;
        if (ex->start_error != NULL) {
                exit_code = json_integer(ex->start_exit_code == 126 || ex->start_exit_code == 127
                                             ? ex->start_exit_code
                                         : ex->start_errno == ENOENT ? 127
                                                                     : 126);
        } else if (ex->exited) {
                if (WIFEXITED(ex->wait_status))
                        exit_code = json_integer(WEXITSTATUS(ex->wait_status));
                else if (WIFSIGNALED(ex->wait_status))
                        signal = json_integer(WTERMSIG(ex->wait_status));
        }
        long long end = ex->end_mono ? ex->end_mono : now_monotonic_ms();
        bool oom_killed =
            ex->sb->cgroup != NULL && cgroup_sandbox_oom_kills(ex->sb->cgroup) > ex->oom_kills_at_start;
        json_object_set_new(result, "exit_code", exit_code);
        json_object_set_new(result, "signal", signal);
        json_object_set_new(result, "timed_out", json_boolean(ex->timed_out));
        json_object_set_new(result, "oom_killed", json_boolean(oom_killed));
        json_object_set_new(result, "duration_ms", json_integer((json_int_t)(end - ex->start_mono)));
        json_object_set_new(result, "status", json_string(exec_status_word(ex)));
        /* Killed with its sandbox: its client must not take the SIGKILL for
         * the command's own end. */
        if (ex->sandbox_gone) {
                json_object_set_new(result, "ended_by",
                                    json_string(nsboxd.stopping ? "nsboxd_stopping" : "sandbox_removed"));
                json_object_set_new(result, "error",
                                    json_string(nsboxd.stopping
                                                    ? "nsboxd stopped while the command ran: it was killed "
                                                      "with its sandbox (its own exit status is unknown)"
                                                    : "its sandbox was removed while the command ran: it "
                                                      "was killed with it"));
        } else if (ex->supervisor_died)
                json_object_set_new(result, "error",
                                    json_string("the exec's supervisor died (killed from outside the "
                                                "sandbox or by the OOM killer): its processes were killed"));
        else if (oom_killed && exec_ended_by_sigkill(ex))
                json_object_set_new(
                    result, "error",
                    json_sprintf(
                        "killed: out of memory (memory limit %llu MiB; with the files it keeps in RAM, "
                        "its disk and /dev/shm, the sandbox holds at most %llu MiB)",
                        (unsigned long long)(ex->sb->policy.limits.memory_bytes >> 20),
                        (unsigned long long)(cgroup_memory_max(&ex->sb->policy.limits) >> 20)));
}

json_t *exec_result(struct exec *ex)
{
        json_t *stdout_json =
            ex->stream ? json_string("") : exec_output_to_json(ex->out[0].data, ex->out[0].len, ex->base64);
        json_t *stderr_json;
        if (ex->start_error != NULL) {
                char message[1024];
                snprintf(message, sizeof(message), "nsbox: cannot run the command: %s\n", ex->start_error);
                stderr_json = json_string(message);
        } else if (ex->timed_out) {
                /* Said where a reader of the command's errors looks, after them
                 * (a streamed exec's result holds only nsboxd's own words). */
                stderr_json = exec_stderr_with_note(ex);
        } else {
                stderr_json = ex->stream ? json_string("")
                                         : exec_output_to_json(ex->out[1].data, ex->out[1].len, ex->base64);
        }
        /* A background exec's stdout and stderr here are its heads: cut if its
         * tail holds more (exec.output reads that). */
        bool cut = ex->truncated || (output_logged(ex) && (ex->out[0].written > ex->out[0].len ||
                                                           ex->out[1].written > ex->out[1].len));
        json_t *result = json_pack("{s:s, s:o, s:o, s:b, s:s, s:b}", "exec_id", ex->id, "stdout", stdout_json,
                                   "stderr", stderr_json, "truncated", cut, "encoding",
                                   ex->base64 ? "base64" : "utf-8", "running", !ex->finished);
        exec_result_end(ex, result);
        egress_note_refused(result, ex->sb, ex->start_mono, false);
        /* `nohup cmd &` and daemons end with the exec that started them: say so. */
        if (result != NULL && ex->leftover > 0)
                json_object_set_new(result, "background_killed", json_integer(ex->leftover));
        if (result != NULL && ex->dropped_output > 0)
                json_object_set_new(result, "output_dropped_bytes",
                                    json_integer((json_int_t)ex->dropped_output));
        return result;
}

/* Finished background execs stay for exec.status/output; keep the newest few. */
static void exec_forget_old(struct sandbox *sb)
{
        unsigned kept = 0;
        for (struct exec **p = &sb->exec->execs; *p != NULL;) {
                struct exec *e = *p;
                if (e->finished && ++kept > EXEC_KEEP_FINISHED) {
                        *p = e->next;
                        exec_keep_end(e);
                        exec_free(e);
                        continue;
                }
                p = &e->next;
        }
}

static void exec_finish(struct exec *ex)
{
        if (ex->finished)
                return;
        if (ex->stream) {
                /* Flush carried-over partial characters as they are. */
                for (int i = 0; i < 2; i++)
                        stream_chunk(ex, i, ex->out[i].data, ex->out[i].len);
        }
        ex->finished = true;
        exec_uncount(ex);
        exec_unpause(ex);
        if (ex->end_mono == 0)
                ex->end_mono = now_monotonic_ms();
        if (!ex->service && ex->sb->running_execs > 0)
                ex->sb->running_execs--;
        if (!ex->service)
                sandbox_touch(ex->sb);
        /* The answer first; the bookkeeping below is no business of the client's. */
        json_t *result = exec_result(ex);
        if (ex->req != NULL) {
                struct rpc_request *req = ex->req;
                ex->req = NULL;
                rpc_reply_result(req, result);
        } else {
                ex->notify = NULL; /* answered by the hook, and gone with the answer */
                if (ex->hooks != NULL && ex->hooks->done != NULL)
                        ex->hooks->done(ex, result, ex->hooks_data);
                json_decref(result);
        }
        exec_output_wake(ex, false);
        deadline_forget(ex);
        for (int i = 0; i < 2; i++) {
                if (ex->out[i].source) {
                        loop_remove(nsboxd.loop, ex->out[i].source);
                        ex->out[i].source = NULL;
                }
        }
        int code = ex->exited && WIFEXITED(ex->wait_status) ? WEXITSTATUS(ex->wait_status) : -1;
        log_limited(ex->sb->id, LOG_LEVEL_INFO, "sandbox %s: exec %s ended: exit %d%s, %lld ms", ex->sb->id,
                    ex->id, code, ex->timed_out ? " (timed out)" : "", ex->end_mono - ex->start_mono);
        if (!ex->service) {
                exec_audit(ex);
                events_emit(ex->sb, "exec.ended", NULL,
                            !events_wanted()
                                ? NULL
                                : json_pack("{s:s, s:i, s:b, s:I}", "exec_id", ex->id, "exit_code", code,
                                            "timed_out", ex->timed_out, "duration_ms",
                                            (json_int_t)(ex->end_mono - ex->start_mono)));
        }
        exec_stdin_close(ex);
        if (ex->pty >= 0) {
                /* Its last fd: the pty goes back to the sandbox's pool now, not when the exec is forgotten.
                 */
                close(ex->pty);
                ex->pty = -1;
        }
        /* Before its slot is closed or handed on; a client's background
         * exec stays in exec.list after a restart too. */
        if (ex->background && ex->keep_kind == NULL)
                exec_keep_ended(ex);
        else
                exec_keep_end(ex);
        /* Only now, after the answer: on a small machine the forks of a new
         * slot would otherwise share a CPU with the exec being waited for. */
        exec_prepare_next(ex->sb, ex);
        if (!ex->background) {
                exec_unlink(ex);
                exec_free(ex);
        } else {
                exec_forget_old(ex->sb);
        }
}

/* We keep a copy of the write ends of the exec's stdout and stderr until its
 * process has ended, so that its exit, not the closing of its pipes, is what
 * wakes us: for a quick exec the answer then takes one wakeup instead of
 * two. Output from descendants that hold the pipes still counts (EOF waits
 * for them, up to EXEC_DRAIN_GRACE_MS). */
static void exec_release_output(struct exec *ex)
{
        for (int i = 0; i < 2; i++) {
                if (ex->held[i] >= 0)
                        close(ex->held[i]);
                ex->held[i] = -1;
        }
        for (int i = 0; i < 2; i++) {
                if (ex->out[i].source != NULL)
                        output_read(ex, i, true); /* EOF now, unless a descendant writes on */
        }
        /* Both at EOF: the exec is answered next, and its pipes unwatched after
         * that (exec_finish). Otherwise a pipe at EOF, always readable, must not
         * stay watched through the drain grace. */
        if (ex->out[0].eof && ex->out[1].eof)
                return;
        for (int i = 0; i < 2; i++) {
                if (ex->out[i].eof && ex->out[i].source != NULL) {
                        loop_remove(nsboxd.loop, ex->out[i].source);
                        ex->out[i].source = NULL;
                }
        }
}

static void exec_started(struct exec *ex, pid_t pid)
{
        if (ex->started)
                return;
        ex->started = true;
        ex->pid = pid;
        exec_keep_meta(ex);
        if (ex->background && ex->req != NULL) {
                struct rpc_request *req = ex->req;
                ex->req = NULL;
                rpc_reply_result(req, json_pack("{s:s, s:i}", "exec_id", ex->id, "pid", ex->pid));
        } else if ((ex->stream || ex->notify_started) && ex->req != NULL) {
                /* The client learns the exec's id before any output: it can
                 * exec.kill a command that prints nothing (a Ctrl-C), and,
                 * when `kept`, take it back with exec.output should nsboxd
                 * stop (live restore). */
                _cleanup_json_ json_t *params =
                    json_pack("{s:s, s:i, s:b}", "exec_id", ex->id, "pid", ex->pid, "kept", ex->keep_fd >= 0);
                if (params != NULL)
                        rpc_notify(ex->req, "exec.started", params);
        }
        if (ex->held_for_start) {
                ex->held_for_start = false;
                for (int i = 0; i < 2; i++)
                        stream_pending(ex, i);
                if (!ex->paused)
                        exec_watch_output(ex, EPOLLIN);
        }
}

/* What an exec that could not start because its sandbox is at its process
 * limit is told (fork's EAGAIN says only "Resource temporarily
 * unavailable"): its count and what to do; "" for any other failure. */
static void pids_limit_hint(const struct exec *ex, char *out, size_t size)
{
        out[0] = '\0';
        uint64_t limit = ex->sb->policy.limits.pids;
        if (ex->start_errno != EAGAIN || limit == 0 || ex->sb->cgroup == NULL)
                return;
        _cleanup_json_ json_t *stats = cgroup_sandbox_stats(ex->sb->cgroup);
        json_t *pids = json_object_get(stats, "pids");
        if (!json_is_integer(pids) || (uint64_t)json_integer_value(pids) + 1 < limit)
                return;
        snprintf(out, size,
                 " (the sandbox is at its limit of %llu processes: end some, nsbox ps %s and nsbox kill, or "
                 "create it with a larger --pids)",
                 (unsigned long long)limit, ex->sb->id);
}
static void exec_on_message(struct exec *ex, const union ctl_message *msg, size_t len)
{
        switch (msg->hdr.type) {
        case CTL_STARTED:
                if (len >= sizeof(struct ctl_started))
                        exec_started(ex, msg->started.pid);
                break;
        case CTL_FAILED:
                if (len >= sizeof(struct ctl_failed) && ex->start_error == NULL && !ex->exited) {
                        char message[CTL_MAX_ERROR + 1];
                        memcpy(message, msg->failed.message, CTL_MAX_ERROR);
                        message[CTL_MAX_ERROR] = '\0';
                        ex->start_errno = msg->failed.errnum;
                        ex->start_exit_code = msg->failed.exit_code;
                        /* The errno text once, here at the edge ("...: Permission denied"). */
                        char hint[256];
                        pids_limit_hint(ex, hint, sizeof(hint));
                        if (asprintf(&ex->start_error, "%s: %s%s", message, strerror(ex->start_errno), hint) <
                            0)
                                ex->start_error = strdup("failed");
                        exec_release_output(ex);
                        exec_maybe_finish(ex);
                }
                break;
        case CTL_EXITED:
                if (len >= sizeof(struct ctl_exited) && !ex->exited) {
                        exec_started(ex, msg->exited.pid);
                        ex->exited = true;
                        ex->wait_status = msg->exited.wait_status;
                        ex->leftover = msg->exited.leftover > 0 ? (unsigned)msg->exited.leftover : 0;
                        exec_release_output(ex);
                        exec_maybe_finish(ex);
                }
                break;
        default:
                break;
        }
}

/* Messages from the exec's supervisor. */
static void on_slot(struct loop_source *source, uint32_t events)
{
        struct exec *ex = source->data;
        for (;;) {
                union ctl_message msg;
                unsigned nfds;
                ssize_t n = ctl_recv(source->fd, &msg, sizeof(msg), NULL, 0, &nfds);
                if (n == -EAGAIN || n == -EINTR)
                        return;
                if (n <= 0) {
                        /* The supervisor is gone (the sandbox is ending, or it was
                         * OOM-killed): the exec's processes went with it. */
                        loop_remove(nsboxd.loop, source);
                        ex->slot = NULL;
                        if (ex->slot_request >= 0)
                                close(ex->slot_request);
                        ex->slot_request = -1;
                        if (!ex->exited && ex->start_error == NULL) {
                                ex->exited = true;
                                ex->killed = true;
                                ex->wait_status = SIGKILL; /* as if signalled */
                                /* Not the sandbox ending: something killed the supervisor
                                 * (from the host, or the OOM killer). Say so rather than
                                 * pass it off as the command's own end. */
                                ex->sandbox_gone = ex->sb->state != SANDBOX_RUNNING;
                                if (ex->sb->state == SANDBOX_RUNNING) {
                                        ex->supervisor_died = true;
                                        log_limited(ex->sb->id, LOG_LEVEL_WARN,
                                                    "sandbox %s: exec %s: its supervisor died", ex->sb->id,
                                                    ex->id);
                                }
                        }
                        exec_release_output(ex);
                        exec_maybe_finish(ex);
                        return;
                }
                /* A slot serves one exec after another: only this one's count. */
                if ((size_t)n >= sizeof(struct ctl_header) && !ex->finished && msg.hdr.exec_id == ex->number)
                        exec_on_message(ex, &msg, n);
                if (source->dead)
                        return; /* the exec finished (and may be freed): the source lives to the batch's end
                                 */
        }
}

static void slot_close(struct exec_slot *slot)
{
        if (!slot->open)
                return;
        close(slot->request);
        close(slot->control);
        slot->open = false;
}

void exec_on_control(struct sandbox *sb, const void *data, size_t len)
{
        const union ctl_message *msg = data;
        if (msg->hdr.type != CTL_FAILED)
                return;
        /* The init could not start a slot. */
        if (sb->exec->slot.open && sb->exec->slot.number == msg->hdr.exec_id) {
                slot_close(&sb->exec->slot);
                return;
        }
        for (struct exec *ex = sb->exec->execs; ex != NULL; ex = ex->next) {
                if (ex->number == msg->hdr.exec_id && !ex->finished) {
                        exec_on_message(ex, msg, len);
                        return;
                }
        }
}

/* The exec's request still waits in its slot's socket: the child that was
 * to take it was killed first (a client that left at once, an exec.kill
 * right after the start). Bytes we sent that the other end has not read
 * yet count in our end's SIOCOUTQ. */
static bool exec_request_untaken(const struct exec *ex)
{
        int queued = 0;
        return ex->slot_request >= 0 && ioctl(ex->slot_request, SIOCOUTQ, &queued) == 0 && queued > 0;
}

/* The slot of a finished exec serves the sandbox's next exec (its
 * supervisor forks a new child on the same sockets, see supervisor.c),
 * unless a slot is waiting already or the sandbox is ending: then closing
 * its sockets makes it end the rest of the exec and exit. A slot whose
 * request was never taken is closed too: its next child would read that
 * request and run the killed command after all. */
static void exec_release_slot(struct exec *ex)
{
        struct sandbox *sb = ex->sb;
        if (ex->slot == NULL)
                return;
        int control = loop_take(nsboxd.loop, ex->slot);
        ex->slot = NULL;
        if (ex->slot_request >= 0 && !sb->exec->slot.open && sb->state == SANDBOX_RUNNING &&
            sb->ctl != NULL && !exec_request_untaken(ex)) {
                uint32_t number = ++sb->exec->next_exec_number;
                struct ctl_header msg = { CTL_SLOT, number };
                if (ctl_send(control, &msg, sizeof(msg), NULL, 0, NULL, 0) >= 0) {
                        sb->exec->slot = (struct exec_slot){ .open = true,
                                                             .request = ex->slot_request,
                                                             .control = control,
                                                             .number = number };
                        ex->slot_request = -1;
                        return;
                }
        }
        close(control);
        if (ex->slot_request >= 0)
                close(ex->slot_request);
        ex->slot_request = -1;
}

/* All the next exec needs ahead of it: its id and pipes, which are ours
 * to make, first; then `finished`'s slot handed on (NULL: none), whose
 * supervisor takes the CPU it is woken on, ours, for a clone; a slot of its
 * own last, if it got none. */
static void exec_prepare_next(struct sandbox *sb, struct exec *finished)
{
        _cleanup_error_ nsbox_error_t *pipes_err = NULL, *slot_err = NULL;
        exec_make_spare_id();
        if (sb->state == SANDBOX_RUNNING && !sb->exec->outputs.ready &&
            outputs_open(&sb->exec->outputs, &pipes_err) < 0)
                log_debug("sandbox %s: no pipes ahead: %s", sb->id, pipes_err->message);
        /* Daemonized leftovers of a finished exec die with it: its
         * supervisor ends them before it serves the next exec, or exits. */
        if (finished != NULL)
                exec_release_slot(finished);
        if (sb->state == SANDBOX_RUNNING && exec_prepare_slot(sb, &slot_err) < 0)
                log_debug("sandbox %s: no slot ahead: %s", sb->id, slot_err->message);
}

int exec_prepare_slot(struct sandbox *sb, nsbox_error_t **err)
{
        if (sb->exec->slot.open)
                return 0;
        if (sb->ctl == NULL || sb->state != SANDBOX_RUNNING)
                return nsbox_error(err, EPIPE, "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
        int request[2], control[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, request) < 0)
                return nsbox_error(err, errno, "socketpair");
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, control) < 0) {
                int e = errno;
                close(request[0]);
                close(request[1]);
                return nsbox_error(err, e, "socketpair");
        }
        uint32_t number = ++sb->exec->next_exec_number;
        struct ctl_header msg = { CTL_SLOT, number };
        int theirs[2] = { request[1], control[1] };
        ssize_t n = ctl_send(sb->ctl->fd, &msg, sizeof(msg), NULL, 0, theirs, 2);
        close(request[1]);
        close(control[1]);
        if (n < 0) {
                close(request[0]);
                close(control[0]);
                return nsbox_error(err, (int)-n, "ask the sandbox init for an exec slot");
        }
        fcntl(control[0], F_SETFL, O_NONBLOCK);
        sb->exec->slot = (struct exec_slot){
                .open = true, .request = request[0], .control = control[0], .number = number
        };
        return 0;
}

struct exec_sandbox *exec_sandbox_new(void)
{
        return calloc(1, sizeof(struct exec_sandbox));
}

void exec_sandbox_free(struct exec_sandbox *state)
{
        free(state);
}

void exec_sandbox_record_ids(struct sandbox *sb, struct sandbox_removal *removal)
{
        /* Newest first: by number, a selection over at most
         * REMOVAL_EXECS_MAX rounds. */
        uint32_t below = UINT32_MAX;
        for (unsigned kept = 0; kept < REMOVAL_EXECS_MAX; kept++) {
                const struct exec *newest = NULL;
                for (const struct exec *ex = sb->exec->execs; ex != NULL; ex = ex->next)
                        if (!ex->service && ex->number < below &&
                            (newest == NULL || ex->number > newest->number))
                                newest = ex;
                if (newest == NULL)
                        return;
                sandbox_removal_add_exec(removal, newest->id);
                below = newest->number;
        }
}

void exec_sandbox_gone(struct sandbox *sb)
{
        slot_close(&sb->exec->slot);
        if (sb->exec->outputs.ready)
                outputs_close(&sb->exec->outputs);
        while (sb->exec->execs != NULL) {
                struct exec *ex = sb->exec->execs;
                if (!ex->finished) {
                        if (!ex->exited && ex->start_error == NULL) {
                                ex->exited = true;
                                ex->killed = true;
                                ex->sandbox_gone = true;
                                ex->wait_status = SIGKILL; /* as if signalled */
                        }
                        ex->background = true; /* keep it for us to free */
                        exec_finish(ex);
                }
                sb->exec->execs = ex->next;
                exec_free(ex);
        }
        sb->running_execs = 0;
}

/* Exec ids are random UUIDs; libuuid makes six syscalls for one, so the
 * next one is made ahead, after an answer, like the next slot. */
static char spare_id[37];

static void exec_make_spare_id(void)
{
        if (spare_id[0] != '\0')
                return;
        uuid_t uuid;
        uuid_generate_random(uuid);
        uuid_unparse_lower(uuid, spare_id);
}

static void exec_take_id(char id[37])
{
        exec_make_spare_id();
        memcpy(id, spare_id, sizeof(spare_id));
        spare_id[0] = '\0';
}

/* One line per exec at its end, never rate-limited (log_limited would drop
 * the lines of an exec burst, and with them what a client ran): a client
 * causes at most one per exec it starts, and the line is bounded (about
 * EXEC_AUDIT_ARGV_BYTES + 300 bytes). */
static void exec_audit(const struct exec *ex)
{
        char end[96];
        if (ex->start_error != NULL)
                snprintf(end, sizeof(end), "failed to start (errno %d)", ex->start_errno);
        else if (ex->exited && WIFEXITED(ex->wait_status))
                snprintf(end, sizeof(end), "exit=%d", WEXITSTATUS(ex->wait_status));
        else if (ex->exited && WIFSIGNALED(ex->wait_status))
                snprintf(end, sizeof(end), "signal=%d", WTERMSIG(ex->wait_status));
        else
                snprintf(end, sizeof(end), "killed");
        log_info("audit: exec %s sandbox=%s uid=%u %s: %s%s%s duration_ms=%lld", ex->id, ex->sb->id,
                 (unsigned)ex->uid, ex->audit ? ex->audit : "?", end, ex->timed_out ? " timed_out" : "",
                 ex->killed && !ex->timed_out ? " killed" : "", ex->end_mono - ex->start_mono);
}

static struct exec *exec_new(struct sandbox *sb, const struct exec_params *p)
{
        struct exec *ex = calloc(1, sizeof(*ex));
        if (ex == NULL)
                return NULL;
        exec_take_id(ex->id);
        ex->sb = sb;
        ex->stream = p->stream;
        ex->background = p->background;
        ex->notify_started = p->notify_started && !p->background;
        ex->base64 = p->base64;
        ex->max_output = p->max_output;
        ex->timeout_s = p->timeout_s;
        ex->start_mono = now_monotonic_ms();
        ex->start_realtime_ms = now_realtime_ms();
        ex->slot_request = -1;
        ex->held[0] = ex->held[1] = -1;
        ex->tty = p->tty;
        ex->stdin_stream = p->stdin_stream;
        ex->pty = -1;
        ex->keep_fd = -1;
        ex->uid = sb->owner;
        return ex;
}

/* An exec without input reads /dev/null: EOF at once, with one fd shared
 * by all instead of a pipe each. */
static int dev_null = -1;

static void close_child_fds(int child_fds[3])
{
        for (int i = 0; i < 3; i++) {
                if (child_fds[i] >= 0 && child_fds[i] != dev_null)
                        close(child_fds[i]);
                child_fds[i] = -1;
        }
}

static int open_pipe(int fds[2], int our_end, nsbox_error_t **err)
{
        if (pipe2(fds, O_CLOEXEC) < 0)
                return nsbox_error(err, errno, "pipe");
        fcntl(fds[our_end], F_SETFL, O_NONBLOCK);
        return 0;
}

static void outputs_close(struct exec_outputs *o)
{
        for (int i = 0; i < 2; i++) {
                if (o->read[i] != NULL)
                        loop_remove(nsboxd.loop, o->read[i]);
                o->read[i] = NULL;
                if (o->write[i] >= 0)
                        close(o->write[i]);
                o->write[i] = -1;
        }
        o->ready = false;
}

/* Two pipes, our ends non-blocking and watched (for whichever exec gets
 * them: the sources' data is set then). Stdout's holds 1 MiB, so that a
 * chatty exec rarely waits for us. */
static int outputs_open(struct exec_outputs *o, nsbox_error_t **err)
{
        *o = (struct exec_outputs){ .write = { -1, -1 } };
        for (int i = 0; i < 2; i++) {
                int fds[2];
                int r = open_pipe(fds, 0, err);
                if (r < 0) {
                        outputs_close(o);
                        return r;
                }
                o->write[i] = fds[1];
                o->read[i] = loop_add(nsboxd.loop, fds[0], EPOLLIN, on_output, NULL);
                if (o->read[i] == NULL) {
                        close(fds[0]);
                        outputs_close(o);
                        return nsbox_error(err, errno, "watch output pipes");
                }
                if (i == OUT_STDOUT)
                        fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
        }
        o->ready = true;
        return 0;
}

/* A pseudo-terminal of the sandbox's own devpts instance (so its
 * max=MOUNTS_MAX_PTYS bounds it, and no pty of the host's is ever handed
 * in), opened by us rather than by a process of the sandbox: no message
 * has to come back with the master, and nothing in the sandbox relays the
 * bytes. The path is resolved under the sandbox's root as it sees it; the
 * sandbox may rename what it likes in its /dev, so what we got must be a
 * devpts multiplexer, and it is opened non-blocking (a FIFO in its place
 * cannot stall the loop). With the exec's user as our fs uid, the slave is
 * owned by that user, as login would leave it. */
static int exec_open_pty(struct exec *ex, const struct exec_params *p, int child_fds[3], nsbox_error_t **err)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/root", (int)ex->sb->pid);
        _cleanup_close_ int root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return nsbox_error(err, errno, "open the root of sandbox %s", ex->sb->id);
        struct open_how how = { .flags = O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC,
                                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
        uid_t owner = ex->sb->host_uid_base + (p->root ? 0 : NSBOX_SANDBOX_USER);
        uid_t our_gid = (uid_t)setfsgid(owner), our_uid = (uid_t)setfsuid(owner);
        int master = (int)syscall(SYS_openat2, root, "dev/pts/ptmx", &how, sizeof(how));
        int e = errno;
        setfsuid(our_uid);
        setfsgid(our_gid);
        if (master < 0)
                return nsbox_error(err, e, "open /dev/pts/ptmx of sandbox %s%s", ex->sb->id,
                                   e == ENOSPC ? " (all of its ptys are in use)" : "");
        ex->pty = master;
        struct stat st;
        struct statfs fs;
        if (fstat(master, &st) < 0 || fstatfs(master, &fs) < 0 || !S_ISCHR(st.st_mode) ||
            st.st_rdev != makedev(5, 2) || fs.f_type != DEVPTS_SUPER_MAGIC)
                return nsbox_error(err, EPERM, "/dev/pts/ptmx of sandbox %s is no pty multiplexer",
                                   ex->sb->id);
        int unlock = 0;
        struct winsize size = { .ws_row = p->rows, .ws_col = p->cols };
        if (ioctl(master, TIOCSPTLCK, &unlock) < 0 || ioctl(master, TIOCSWINSZ, &size) < 0)
                return nsbox_error(err, errno, "set up the pty");
        for (int i = 0; i < 3; i++) {
                child_fds[i] = i == 0 ? ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)
                                      : fcntl(child_fds[0], F_DUPFD_CLOEXEC, 3);
                if (child_fds[i] < 0)
                        return nsbox_error(err, errno, "open the pty's slave");
        }
        /* One stream: output and input go through the master (two fds of it,
         * one watched for reading, one for writing). */
        int out = fcntl(master, F_DUPFD_CLOEXEC, 3), in = fcntl(master, F_DUPFD_CLOEXEC, 3);
        if (out >= 0)
                ex->out[OUT_STDOUT].source = loop_add(nsboxd.loop, out, EPOLLIN, on_output, ex);
        if (in >= 0)
                ex->stdin_src = loop_add(nsboxd.loop, in, ex->stdin_data ? EPOLLOUT : 0, on_stdin, ex);
        if (ex->out[OUT_STDOUT].source == NULL || ex->stdin_src == NULL) {
                e = errno;
                if (out >= 0 && ex->out[OUT_STDOUT].source == NULL)
                        close(out);
                if (in >= 0 && ex->stdin_src == NULL)
                        close(in);
                return nsbox_error(err, e, "watch the pty");
        }
        ex->out[OUT_STDERR].eof = true;
        return 0;
}

/* Pipes: we keep stdin's write end and the stdout/stderr read ends; the
 * child's ends go to child_fds, which the caller closes (close_child_fds).
 * Stdout and stderr are the sandbox's pipes made ahead, if it has them. */
static int exec_open_pipes(struct exec *ex, const struct exec_params *p, int child_fds[3],
                           nsbox_error_t **err)
{
        int r;
        if (ex->tty) {
                if ((r = exec_open_pty(ex, p, child_fds, err)) < 0)
                        return r;
                if ((r = deadline_set(ex, (long long)ex->timeout_s * 1000)) < 0)
                        return nsbox_error(err, -r, "exec timeout");
                return 0;
        }
        struct exec_outputs o = ex->sb->exec->outputs;
        ex->sb->exec->outputs.ready = false;
        if (!o.ready && (r = outputs_open(&o, err)) < 0)
                return r;
        for (int i = 0; i < 2; i++) {
                ex->out[i].source = o.read[i];
                ex->out[i].source->data = ex;
                child_fds[1 + i] = o.write[i];
        }
        if (ex->stdin_data != NULL || ex->keep_stdin) {
                int in[2];
                if ((r = open_pipe(in, 1, err)) < 0)
                        return r;
                child_fds[0] = in[0];
                ex->stdin_src = loop_add(nsboxd.loop, in[1], ex->stdin_data ? EPOLLOUT : 0, on_stdin, ex);
                if (ex->stdin_src == NULL) {
                        close(in[1]);
                        return nsbox_error(err, errno, "watch stdin pipe");
                }
        } else {
                if (dev_null < 0 && (dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
                        return nsbox_error(err, errno, "open /dev/null");
                child_fds[0] = dev_null;
        }
        if ((r = deadline_set(ex, (long long)ex->timeout_s * 1000)) < 0)
                return nsbox_error(err, -r, "exec timeout");
        return 0;
}

static int exec_start(struct sandbox *sb, struct exec *ex, const struct exec_params *p, nsbox_error_t **err)
{
        _cleanup_free_ char *payload = NULL;
        size_t len = 0;
        unsigned argc = 0, envc = 0;
        int r;

        if ((r = exec_payload_build(sb, p, &payload, &len, &argc, &envc)) < 0)
                return nsbox_error(err, -r, "exec request");

        if (p->stdin_len > 0) {
                ex->stdin_data = malloc(p->stdin_len);
                if (ex->stdin_data == NULL)
                        return nsbox_error(err, ENOMEM, "stdin");
                memcpy(ex->stdin_data, p->stdin_text, p->stdin_len);
                ex->stdin_len = p->stdin_len;
        }
        int child_fds[3] = { -1, -1, -1 };
        if ((r = exec_open_pipes(ex, p, child_fds, err)) < 0) {
                close_child_fds(child_fds);
                return r;
        }
        ex->oom_kills_at_start = cgroup_sandbox_oom_kills(sb->cgroup);
        struct ctl_exec hdr = {
                .hdr = { CTL_EXEC, 0 },
                .uid = p->root ? 0 : NSBOX_SANDBOX_USER,
                .gid = p->root ? 0 : NSBOX_SANDBOX_USER,
                .argc = argc,
                .envc = envc,
                .flags = CTL_EXEC_SEARCH_PATH | (ex->tty ? CTL_EXEC_TTY : 0),
                .payload_len = (uint32_t)len,
        };
        /* The slot started ahead of time, or one now: its child reads the
         * request whenever it is up. A slot whose processes are gone (the
         * OOM killer, a fork that failed under the pids limit) refuses the
         * request (EPIPE, or ECONNRESET when its end went with a message
         * unread): then once more with a fresh one. */
        ssize_t n = -EPIPE;
        for (int attempt = 0; attempt < 2 && (n == -EPIPE || n == -ECONNRESET); attempt++) {
                if ((r = exec_prepare_slot(sb, err)) < 0) {
                        close_child_fds(child_fds);
                        return r;
                }
                struct exec_slot slot = sb->exec->slot;
                sb->exec->slot.open = false;
                ex->number = hdr.hdr.exec_id = slot.number;
                ex->slot_request = slot.request; /* kept: the slot may serve the next exec too */
                ex->slot = loop_add(nsboxd.loop, slot.control, EPOLLIN, on_slot, ex);
                if (ex->slot == NULL) {
                        close(slot.control);
                        close_child_fds(child_fds);
                        return nsbox_error(err, errno, "watch the exec's supervisor");
                }
                if (sizeof(hdr) + len > (64u << 10)) {
                        /* One request is one packet: room for argv + env of up to a few MiB. */
                        int sndbuf = CTL_MAX_MESSAGE + (64 << 10);
                        /* FORCE takes CAP_NET_ADMIN over the network namespace's
                         * owner: not held by an nsboxd in a user namespace, which
                         * gets up to net.core.wmem_max. */
                        if (setsockopt(slot.request, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
                                setsockopt(slot.request, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
                }
                n = ctl_send(slot.request, &hdr, sizeof(hdr), payload, len, child_fds, 3);
                if (n == -EPIPE || n == -ECONNRESET) {
                        loop_remove(nsboxd.loop, ex->slot);
                        ex->slot = NULL;
                        close(ex->slot_request);
                        ex->slot_request = -1;
                }
        }
        ex->held[0] = steal_fd(&child_fds[1]);
        ex->held[1] = steal_fd(&child_fds[2]);
        close_child_fds(child_fds);
        if (n < 0)
                return nsbox_error(err, (int)-n, "send the exec request to its slot");
        if (ex->background || ex->stream || ex->notify_started) {
                /* A background exec's answer is the pid, as soon as it
                 * runs; a streamed one's client hears exec.started then. */
                struct ctl_header want = { CTL_STARTED, ex->number };
                ctl_send(ex->slot->fd, &want, sizeof(want), NULL, 0, NULL, 0);
        }
        /* The next exec's slot: now beside one that runs on, else once this
         * one is answered (see exec_finish). */
        if (ex->background || ex->service)
                exec_prepare_next(sb, NULL);
        return 0;
}

/* Live restore: an exec a previous nsboxd started, whose fds its init kept
 * (slot control, record, stdout, stderr). Takes the fds it uses (set to -1). */
#define ADOPT_KINDS 4
static struct {
        const char *kind;
        exec_adopt_fn adopt;
} adopt_kinds[ADOPT_KINDS];

void exec_on_adopt(const char *kind, exec_adopt_fn adopt)
{
        for (size_t i = 0; i < ADOPT_KINDS; i++) {
                if (adopt_kinds[i].kind == NULL || strcmp(adopt_kinds[i].kind, kind) == 0) {
                        adopt_kinds[i].kind = kind;
                        adopt_kinds[i].adopt = adopt;
                        return;
                }
        }
}

void exec_adopted_hooks(struct exec *ex, const struct exec_hooks *hooks, void *data)
{
        exec_set_hooks(ex, hooks, data);
}

void exec_keep_update(struct exec *ex)
{
        if (ex != NULL)
                exec_keep_meta(ex);
}

/* A helper (the stateful interpreter, a shell session): its feature takes it over. */
static int exec_adopt_helper(struct exec *ex, json_t *meta, int stdin_fd, nsbox_error_t **err)
{
        const char *kind = json_string_value(json_object_get(meta, "kind"));
        exec_adopt_fn adopt = NULL;
        for (size_t i = 0; kind != NULL && i < ADOPT_KINDS && adopt_kinds[i].kind != NULL; i++)
                if (strcmp(adopt_kinds[i].kind, kind) == 0)
                        adopt = adopt_kinds[i].adopt;
        if (adopt == NULL || stdin_fd < 0)
                return nsbox_error(err, ENOTSUP, "no one takes over a kept exec of kind %s",
                                   kind ? kind : "?");
        ex->keep_stdin = true;
        if ((ex->stdin_src = loop_add(nsboxd.loop, stdin_fd, 0, on_stdin, ex)) == NULL)
                return nsbox_error(err, errno, "watch the exec's stdin");
        if (adopt(ex->sb, ex, json_object_get(meta, "state")) < 0)
                return nsbox_error(err, ECANCELED, "its %s did not take it over", kind);
        return 0;
}

/* A background exec that ended before the restart: its record alone, with how it ended. */
static int exec_adopt_ended(struct exec *ex, json_t *end, nsbox_error_t **err)
{
        json_t *start_error = json_object_get(end, "start_error");
        if (!json_is_object(end) || !json_is_integer(json_object_get(end, "duration_ms")))
                return nsbox_error(err, EPROTO, "its record says no end");
        ex->finished = true;
        ex->background = true;
        ex->exited = json_is_true(json_object_get(end, "exited"));
        ex->wait_status = (int)json_integer_value(json_object_get(end, "wait_status"));
        ex->timed_out = json_is_true(json_object_get(end, "timed_out"));
        ex->killed = json_is_true(json_object_get(end, "killed"));
        ex->supervisor_died = json_is_true(json_object_get(end, "supervisor_died"));
        ex->leftover = (unsigned)json_integer_value(json_object_get(end, "leftover"));
        ex->start_errno = (int)json_integer_value(json_object_get(end, "start_errno"));
        ex->start_exit_code = (int)json_integer_value(json_object_get(end, "start_exit_code"));
        if (json_is_string(start_error) && (ex->start_error = strdup(json_string_value(start_error))) == NULL)
                return nsbox_error(err, ENOMEM, "exec");
        ex->end_mono = ex->start_mono + json_integer_value(json_object_get(end, "duration_ms"));
        return 0;
}

/* A tty exec: its pty master (fds[2] read, fds[3] written), whose input
 * stays open for its client's exec.stdin, and exec.resize. */
static int exec_adopt_tty(struct exec *ex, int *fds, unsigned nfds, nsbox_error_t **err)
{
        struct stat st;
        if (nfds != 4 || fstat(fds[2], &st) < 0 || !S_ISCHR(st.st_mode) || st.st_rdev != makedev(5, 2))
                return nsbox_error(err, EPROTO, "its pty is not one");
        ex->tty = ex->keep_stdin = ex->stdin_stream = true;
        ex->out[OUT_STDERR].eof = true;
        if ((ex->pty = fcntl(fds[2], F_DUPFD_CLOEXEC, 3)) < 0)
                return nsbox_error(err, errno, "its pty");
        fcntl(fds[2], F_SETFL, O_NONBLOCK);
        fcntl(fds[3], F_SETFL, O_NONBLOCK);
        if ((ex->out[OUT_STDOUT].source = loop_add(nsboxd.loop, fds[2], EPOLLIN, on_output, ex)) == NULL)
                return nsbox_error(err, errno, "watch the exec's pty");
        fds[2] = -1;
        if ((ex->stdin_src = loop_add(nsboxd.loop, fds[3], 0, on_stdin, ex)) == NULL)
                return nsbox_error(err, errno, "watch the exec's pty");
        fds[3] = -1;
        return 0;
}

static int exec_adopt_kept(struct sandbox *sb, uint32_t number, int *fds, unsigned nfds, nsbox_error_t **err)
{
        if (nfds != 1 && nfds != 4 && nfds != 5)
                return nsbox_error(err, EPROTO, "%u fds kept, not 1, 4 or 5", nfds);
        struct exec *ex = calloc(1, sizeof(*ex));
        if (ex == NULL)
                return nsbox_error(err, ENOMEM, "exec");
        ex->sb = sb;
        ex->number = number;
        ex->adopted = true;
        ex->slot_request = -1;
        ex->held[0] = ex->held[1] = -1;
        ex->pty = ex->keep_fd = -1;
        _cleanup_json_ json_t *meta = exec_keep_load(ex, fds[nfds == 1 ? 0 : 1], err);
        if (meta == NULL) {
                exec_free(ex);
                return -EPROTO;
        }
        const char *id = json_string_value(json_object_get(meta, "exec_id"));
        json_t *audit = json_object_get(meta, "audit"), *command = json_object_get(meta, "command");
        if (id == NULL || strlen(id) != sizeof(ex->id) - 1 ||
            json_integer_value(json_object_get(meta, "number")) != (json_int_t)number) {
                exec_free(ex);
                return nsbox_error(err, EPROTO, "its record names another exec");
        }
        snprintf(ex->id, sizeof(ex->id), "%s", id);
        ex->base64 = json_is_true(json_object_get(meta, "base64"));
        ex->timeout_s = (unsigned)json_integer_value(json_object_get(meta, "timeout_s"));
        ex->start_realtime_ms = json_integer_value(json_object_get(meta, "start_realtime_ms"));
        ex->uid = (uid_t)json_integer_value(json_object_get(meta, "uid"));
        ex->audit = json_is_string(audit) ? strdup(json_string_value(audit)) : NULL;
        ex->command_text = json_is_string(command) ? strdup(json_string_value(command)) : NULL;
        ex->started = json_is_true(json_object_get(meta, "started"));
        ex->pid = (pid_t)json_integer_value(json_object_get(meta, "pid"));
        ex->service = json_is_true(json_object_get(meta, "service"));
        /* A client's foreground or streamed exec, whose client went with the
         * previous nsboxd, is taken back by exec_id as a background one is
         * (exec.output from the offsets it has); its stdin, if open, closes
         * (the caller closes that fd): nothing could feed it now. A tty's
         * stays open (exec_adopt_tty). */
        ex->background =
            json_is_true(json_object_get(meta, "background")) || json_object_get(meta, "kind") == NULL;
        long long elapsed = now_realtime_ms() - ex->start_realtime_ms;
        if (elapsed < 0)
                elapsed = 0;
        ex->start_mono = now_monotonic_ms() - elapsed;
        if (nfds == 1) {
                int r = json_object_get(meta, "kind") != NULL
                            ? nsbox_error(err, EPROTO, "a helper's record without its fds")
                            : exec_adopt_ended(ex, json_object_get(meta, "end"), err);
                if (r < 0) {
                        exec_free(ex);
                        return r;
                }
                ex->keep_fd = steal_fd(&fds[0]);
                ex->kept_by_init = true;
                ex->next = sb->exec->execs;
                sb->exec->execs = ex;
                log_debug("sandbox %s: ended exec %s adopted (live restore)", sb->id, ex->id);
                return 0;
        }
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        if ((ex->slot = loop_add(nsboxd.loop, fds[0], EPOLLIN, on_slot, ex)) == NULL) {
                exec_free(ex);
                return nsbox_error(err, errno, "watch the exec's supervisor");
        }
        fds[0] = -1;
        if (json_is_true(json_object_get(meta, "tty"))) {
                int r = exec_adopt_tty(ex, fds, nfds, err);
                if (r < 0) {
                        exec_free(ex);
                        return r;
                }
        }
        for (int i = 0; i < 2 && !ex->tty; i++) {
                fcntl(fds[2 + i], F_SETFL, O_NONBLOCK);
                if ((ex->out[i].source = loop_add(nsboxd.loop, fds[2 + i], EPOLLIN, on_output, ex)) == NULL) {
                        exec_free(ex);
                        return nsbox_error(err, errno, "watch the exec's output");
                }
                fds[2 + i] = -1;
        }
        ex->keep_fd = steal_fd(&fds[1]);
        ex->kept_by_init = true;
        if (ex->timeout_s > 0) {
                long long left = (long long)ex->timeout_s * 1000 - elapsed;
                if (deadline_set(ex, left > 0 ? left : 1) < 0) {
                        exec_free(ex);
                        return nsbox_error(err, ENOMEM, "exec timeout");
                }
        }
        /* Last: once its feature holds it, it is only ever freed as it ends. */
        if (json_object_get(meta, "kind") != NULL) {
                int r = exec_adopt_helper(ex, meta, nfds == 5 ? fds[4] : -1, err);
                if (ex->stdin_src != NULL)
                        fds[4] = -1;
                if (r < 0) {
                        exec_free(ex);
                        return r;
                }
        }
        ex->next = sb->exec->execs;
        sb->exec->execs = ex;
        if (!ex->service)
                sb->running_execs++;
        if (json_is_true(json_object_get(meta, "counted")))
                exec_count(ex, (uid_t)json_integer_value(json_object_get(meta, "quota_uid")));
        log_info("sandbox %s: exec %s adopted (live restore), running for %lld s", sb->id, ex->id,
                 elapsed / 1000);
        return 0;
}

/* The init answers at once, it only sends what it holds: this bounds one
 * starved by a loaded host (its execs then end with the sandbox). */
#define EXEC_ADOPT_WAIT_MS 10000

void exec_sandbox_adopt(struct sandbox *sb)
{
        struct ctl_header ask = { CTL_KEPT_LIST, 0 };
        if (ctl_send(sb->ctl->fd, &ask, sizeof(ask), NULL, 0, NULL, 0) < 0) {
                log_warn("sandbox %s: cannot ask its init for the execs it kept: %s", sb->id,
                         strerror(errno));
                return;
        }
        long long give_up = now_monotonic_ms() + EXEC_ADOPT_WAIT_MS;
        uint32_t highest = 0;
        for (;;) {
                union ctl_message msg;
                int fds[CTL_KEEP_MAX_FDS];
                unsigned nfds = 0;
                ssize_t n = ctl_recv(sb->ctl->fd, &msg, sizeof(msg), fds, CTL_KEEP_MAX_FDS, &nfds);
                if (n == -EAGAIN) {
                        long long left = give_up - now_monotonic_ms();
                        struct pollfd p = { .fd = sb->ctl->fd, .events = POLLIN };
                        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
                                log_warn("sandbox %s: its init did not list the execs it kept", sb->id);
                                return;
                        }
                        continue;
                }
                if (n < (ssize_t)sizeof(msg.hdr) || msg.hdr.type == CTL_KEPT_END) {
                        for (unsigned k = 0; k < nfds; k++)
                                close(fds[k]);
                        break;
                }
                if (msg.hdr.type == CTL_KEPT) {
                        _cleanup_error_ nsbox_error_t *err = NULL;
                        if (msg.hdr.exec_id > highest)
                                highest = msg.hdr.exec_id;
                        if (exec_adopt_kept(sb, msg.hdr.exec_id, fds, nfds, &err) < 0) {
                                /* Dropped by the init, closed here: its supervisor ends it. */
                                log_warn("sandbox %s: exec number %u not adopted: %s; it is ended", sb->id,
                                         msg.hdr.exec_id, err->message);
                                struct ctl_header drop = { CTL_UNKEEP, msg.hdr.exec_id };
                                ctl_send(sb->ctl->fd, &drop, sizeof(drop), NULL, 0, NULL, 0);
                        }
                }
                for (unsigned k = 0; k < nfds; k++)
                        if (fds[k] >= 0)
                                close(fds[k]);
        }
        /* Numbers of this run's slots never meet those of the execs kept. */
        if (highest > sb->exec->next_exec_number)
                sb->exec->next_exec_number = highest;
}

/* Where the caller's params are taken in: audit text, command text, the
 * count. Live restore keeps it from there (exec_keep.h). */
static void exec_keep_if_wanted(struct exec *ex)
{
        if (exec_keep_wanted(ex))
                exec_keep_start(ex);
}

/* Nobody will read the result of a foreground exec whose client left: end it. */
void exec_client_gone(struct rpc_request *req, void *data)
{
        struct exec *ex = data;
        log_limited(ex->sb->id, LOG_LEVEL_INFO, "sandbox %s: exec %s: its client went away; killing it",
                    ex->sb->id, ex->id);
        ex->killed = true;
        exec_send_kill(ex, SIGKILL);
}

/* Parse, register and start an exec; on failure *err says why and `kind`
 * is the JSON-RPC error kind. */
struct exec *exec_launch(struct sandbox *sb, json_t *params, const struct exec_hooks *hooks, void *data,
                         const char **kind, nsbox_error_t **err)
{
        struct exec_params p;
        *kind = "invalid_params";
        if (exec_params_parse(params, &p, err) < 0)
                return NULL;
        *kind = "unavailable";
        if (sb->state != SANDBOX_RUNNING || sb->ctl == NULL) {
                nsbox_error(err, 0, "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
                return NULL;
        }
        *kind = "internal";
        struct exec *ex = exec_new(sb, &p);
        if (ex == NULL) {
                nsbox_error(err, ENOMEM, "exec");
                return NULL;
        }
        exec_set_hooks(ex, hooks, data);
        ex->keep_stdin = (hooks != NULL && hooks->keep_stdin) || p.stdin_stream;
        ex->audit = exec_audit_text(&p);
        ex->command_text = exec_command_text(&p);
        ex->service = hooks != NULL && hooks->service;
        ex->next = sb->exec->execs;
        sb->exec->execs = ex;
        if (!ex->service)
                sb->running_execs++;
        sandbox_touch(sb);
        if (exec_start(sb, ex, &p, err) < 0) {
                if ((*err)->errnum == ENOSPC)
                        *kind = "limit_reached";
                if (!ex->service)
                        sb->running_execs--;
                exec_unlink(ex);
                exec_free(ex);
                return NULL;
        }
        exec_keep_if_wanted(ex);
        /* One line per exec at info level, when it ends (exec_finish). */
        if (p.background)
                log_limited(sb->id, LOG_LEVEL_INFO, "sandbox %s: exec %s started in the background", sb->id,
                            ex->id);
        else
                log_debug("sandbox %s: exec %s started", sb->id, ex->id);
        if (!ex->service)
                events_emit(sb, "exec.started", NULL,
                            !events_wanted()
                                ? NULL
                                : json_pack("{s:s, s:b}", "exec_id", ex->id, "background", p.background));
        return ex;
}

void exec_attribute(struct exec *ex, const struct rpc_request *req)
{
        ex->uid = req->uid;
        if (!req->acted) {
                exec_keep_meta(ex);
                return;
        }
        char *via = NULL;
        if (asprintf(&via, "via act_as by uid %u %s", (unsigned)req->acted_by, ex->audit ? ex->audit : "?") >=
            0) {
                free(ex->audit);
                ex->audit = via;
        }
        exec_keep_meta(ex);
}

int exec_run(struct sandbox *sb, json_t *params, const struct exec_hooks *hooks, void *data,
             struct exec **out, nsbox_error_t **err)
{
        const char *kind;
        struct exec *ex = exec_launch(sb, params, hooks, data, &kind, err);
        if (ex == NULL)
                return -EINVAL;
        if (out != NULL)
                *out = ex;
        return 0;
}
