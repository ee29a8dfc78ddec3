/* SPDX-License-Identifier: Apache-2.0 */
/* Client connections: accept, peer credentials, line framing, dispatch, replies, back-pressure. */
#include "rpc.h"
#include "rpc_listen.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <grp.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "budget.h"
#include "cleanup.h"
#include "daemon.h"
#include "log.h"
#include "metrics.h"
#include "params.h"
#include "socket_path.h"
#include "userns.h"

#define READ_CHUNK (64 * 1024)
/* Stop reading a client's requests (and streamed output for it, see
 * rpc_request_backlogged) while this much output waits for it, and drop a
 * client that lets this much pile up (it is not reading at all). Every byte
 * waiting is charged to the global budget (budget.h): while that is
 * exhausted, a client holding more than its share (max_buffer_bytes /
 * connections) is backlogged too, and dropped once it has not read for
 * OUT_STALL_MS; a client that reads is never dropped for another's sake. */
#define OUT_PAUSE_BYTES (4u << 20)
#define OUT_DROP_BYTES  (512u << 20)
#define OUT_STALL_MS    5000
/* Request lines longer than this are parsed by a helper thread: a 60 MB
 * line takes the better part of a second of jansson's time. */
#define PARSE_OFF_LOOP_BYTES (1u << 20)
/* Stop reading a client's requests while this many of them are unanswered:
 * a pipelining client cannot start execs without bound. */
#define MAX_IN_FLIGHT 64

/* Life cycle: the connection holds one reference on itself until it is
 * closed, every request in flight holds one (a handler may answer long after
 * the client left), and so does the pending list while input waits there.
 * Closing removes the fd at once; the memory goes with the last reference. */
struct rpc_conn {
        struct loop_source *source;
        unsigned refs;
        unsigned in_flight;
        uint32_t events; /* what epoll watches now */
        bool closed;
        bool paused;                /* too much output or too many requests in flight */
        bool read_eof;              /* the client shut down its sending side: answer, then close */
        bool closing;               /* a protocol error: send what is queued, then close */
        bool close_due;             /* closed from the loop: see conn_close_soon */
        bool scheduled;             /* on server.pending */
        bool processing;            /* conn_process_input is on the stack */
        bool parsing;               /* a large line is with the parse thread: later lines wait */
        size_t charged;             /* bytes of `out` charged to the global budget */
        long long last_activity_ms; /* last byte received, or last moment it had work */
        long long partial_since_ms; /* an incomplete request line is buffered since */
        long long last_send_ms;     /* the client last took output (or output started waiting) */
        struct rpc_conn *prev_all, *next_all;
        uid_t uid; /* SO_PEERCRED's, or the one auth.act_as took */
        gid_t gid;
        pid_t pid;
        bool acted;     /* auth.act_as was used: uid is acted_by's choice */
        uid_t acted_by; /* the SO_PEERCRED uid that used it */
        char *in;
        size_t in_len, in_cap;
        size_t in_scanned; /* leading bytes of `in` known to hold no '\n' */
        char *out;
        size_t out_len, out_off, out_cap;
        struct rpc_conn *next_pending;
        struct rpc_request *watchers; /* requests that want to hear of a disconnect */
        /* A large reply being serialized by a child process (see
         * conn_queue_large); later messages wait behind it, in order. */
        struct loop_source *large;
        pid_t large_pid;
        json_t *deferred;              /* array of messages queued behind the large one */
        struct rpc_conn_state *states; /* the upper layers', ended with the last reference */
};

static struct {
        struct loop *loop;
        struct loop_source *listener;
        /* Root's own socket (operator_socket_path): its listen queue is
         * apart from the one every other uid shares. */
        struct loop_source *operator_listener;
        char *operator_path;
        /* Buffered input to process later, from the loop rather than from
         * inside whichever handler's reply made room for it. */
        struct loop_source *wakeup;
        struct rpc_conn *pending;
        struct rpc_conn *all; /* every open connection, for quotas and timeouts */
        struct rpc_request *resume_waiters;
        bool refusing;   /* shutting down: new requests are answered "unavailable" */
        bool resume_due; /* a connection drained or closed: look at resume_waiters */
        /* Held open so there is an fd to accept with (and refuse politely)
         * when the process is out of fds, instead of spinning on EMFILE. */
        int spare_fd;
        struct rpc_server_config config;
        char *socket_path;
        unsigned connections;
} server = { .spare_fd = -1 };

static void conn_update_events(struct rpc_conn *conn);
static void conn_process_input(struct rpc_conn *conn);
static void resume_waiters(void);
static void schedule_resume(void);

/* Keep the global budget charged with exactly what waits in `out`. */
static void conn_charge(struct rpc_conn *conn)
{
        size_t queued = conn->out_len - conn->out_off;
        if (queued > conn->charged)
                budget_force(queued - conn->charged);
        else
                budget_give(conn->charged - queued);
        conn->charged = queued;
}

static size_t fair_share(void)
{
        return nsboxd.config.max_buffer_bytes / (server.connections ? server.connections : 1);
}

static bool conn_backlogged(const struct rpc_conn *conn)
{
        size_t queued = conn->out_len - conn->out_off;
        return queued > OUT_PAUSE_BYTES || (budget_exhausted() && queued > fair_share()) ||
               conn->large != NULL;
}

static void conn_unref(struct rpc_conn *conn)
{
        if (--conn->refs > 0)
                return;
        while (conn->states != NULL) {
                struct rpc_conn_state *state = conn->states;
                conn->states = state->next;
                state->end(state);
        }
        free(conn->in);
        free(conn->out);
        free(conn);
}

struct rpc_conn_state *rpc_conn_state_get(const struct rpc_request *req, const void *key)
{
        for (struct rpc_conn_state *state = req->conn->states; state != NULL; state = state->next)
                if (state->key == key)
                        return state;
        return NULL;
}

void rpc_conn_state_add(struct rpc_request *req, struct rpc_conn_state *state)
{
        state->next = req->conn->states;
        req->conn->states = state;
}

static void unwatch(struct rpc_request *req)
{
        struct rpc_conn *conn = req->conn;
        if (req->on_disconnect == NULL)
                return;
        if (req->prev_watch != NULL)
                req->prev_watch->next_watch = req->next_watch;
        else
                conn->watchers = req->next_watch;
        if (req->next_watch != NULL)
                req->next_watch->prev_watch = req->prev_watch;
        req->prev_watch = req->next_watch = NULL;
        req->on_disconnect = NULL;
}

void rpc_request_on_disconnect(struct rpc_request *req, rpc_disconnect_cb cb, void *data)
{
        unwatch(req);
        req->on_disconnect = cb;
        req->disconnect_data = data;
        req->next_watch = req->conn->watchers;
        if (req->next_watch != NULL)
                req->next_watch->prev_watch = req;
        req->conn->watchers = req;
}

/* Tell the watchers, one at a time: a callback may answer (and free) others. */
static void conn_notify_disconnect(struct rpc_conn *conn)
{
        while (conn->watchers != NULL) {
                struct rpc_request *req = conn->watchers;
                rpc_disconnect_cb cb = req->on_disconnect;
                void *data = req->disconnect_data;
                unwatch(req);
                cb(req, data);
        }
}

static void large_reply_stop(struct rpc_conn *conn)
{
        if (conn->large == NULL)
                return;
        loop_remove(server.loop, conn->large);
        conn->large = NULL;
        kill(conn->large_pid, SIGKILL);
        while (waitpid(conn->large_pid, NULL, 0) < 0 && errno == EINTR)
                ;
        conn_unref(conn);
}

static void conn_close(struct rpc_conn *conn)
{
        if (conn->closed)
                return;
        conn->closed = true;
        large_reply_stop(conn);
        if (conn->deferred != NULL) {
                json_decref(conn->deferred);
                conn->deferred = NULL;
        }
        loop_remove(server.loop, conn->source);
        conn->source = NULL;
        server.connections--;
        if (conn->prev_all != NULL)
                conn->prev_all->next_all = conn->next_all;
        else
                server.all = conn->next_all;
        if (conn->next_all != NULL)
                conn->next_all->prev_all = conn->prev_all;
        conn->prev_all = conn->next_all = NULL;
        /* Nothing more will be read or sent: give the buffers back now, not
         * when the last handler in flight lets go of the connection. */
        free(conn->in);
        free(conn->out);
        conn->in = conn->out = NULL;
        conn->in_len = conn->in_cap = conn->out_len = conn->out_off = conn->out_cap = 0;
        conn_charge(conn);
        /* The connection's own reference keeps it alive through the callbacks. */
        conn_notify_disconnect(conn);
        schedule_resume();
        conn_unref(conn);
}

/* A connection that reads no more is closed once it has answered everything. */
static void conn_close_if_done(struct rpc_conn *conn)
{
        if (!conn->closed && (conn->read_eof || conn->closing) && conn->in_flight == 0 && conn->in_len == 0 &&
            conn->out_off == conn->out_len && conn->large == NULL && conn->deferred == NULL && !conn->parsing)
                conn_close(conn);
}

static void conn_schedule(struct rpc_conn *conn)
{
        if (conn->scheduled || conn->closed)
                return;
        conn->scheduled = true;
        conn->refs++;
        conn->next_pending = server.pending;
        server.pending = conn;
        uint64_t one = 1;
        if (write(server.wakeup->fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
                log_warn("wake the rpc server: %s", strerror(errno));
}

/* A connection that failed while a producer was sending on it (a write the
 * client no longer takes, a reply that cannot be queued) is closed from the
 * loop, not there: a close tells the connection's watchers, and their
 * callbacks answer and free requests and what hangs on them, which the
 * producer may be using (the request it is answering, the subscriber whose
 * event it is sending). Nothing more is sent on it meanwhile. */
static void conn_close_soon(struct rpc_conn *conn)
{
        if (conn->closed || conn->close_due)
                return;
        conn->close_due = true;
        conn->out_off = conn->out_len = 0;
        conn_schedule(conn);
}

/* Producers are resumed from the loop, never from inside conn_queue or
 * conn_close: those run in the middle of the producers' own code. */
static void schedule_resume(void)
{
        if (server.resume_waiters == NULL || server.resume_due)
                return;
        server.resume_due = true;
        uint64_t one = 1;
        if (write(server.wakeup->fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
                log_warn("wake the rpc server: %s", strerror(errno));
}

static void wakeup_event(struct loop_source *source, uint32_t events)
{
        uint64_t count;
        if (read(source->fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
                log_warn("rpc wakeup: %s", strerror(errno));
        if (server.resume_due) {
                server.resume_due = false;
                resume_waiters();
        }
        struct rpc_conn *list = server.pending;
        server.pending = NULL;
        while (list != NULL) {
                struct rpc_conn *conn = list;
                list = conn->next_pending;
                conn->scheduled = false;
                if (conn->close_due)
                        conn_close(conn);
                else
                        conn_process_input(conn);
                conn_unref(conn);
        }
}

static void conn_flush(struct rpc_conn *conn)
{
        if (conn->closed || conn->close_due)
                return;
        while (conn->out_off < conn->out_len) {
                ssize_t n = send(conn->source->fd, conn->out + conn->out_off, conn->out_len - conn->out_off,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        conn_close_soon(conn);
                        return;
                }
                conn->out_off += n;
                conn->last_send_ms = now_monotonic_ms();
        }
        if (conn->out_off == conn->out_len) {
                conn->out_off = conn->out_len = 0;
                conn->last_activity_ms = now_monotonic_ms();
                if (conn->out_cap > 4 * READ_CHUNK) {
                        free(conn->out);
                        conn->out = NULL;
                        conn->out_cap = 0;
                }
        }
        bool was_exhausted = budget_exhausted();
        conn_charge(conn);
        conn_update_events(conn);
        if (conn->large != NULL && conn->out_len - conn->out_off <= OUT_PAUSE_BYTES)
                loop_modify(server.loop, conn->large, EPOLLIN);
        schedule_resume();
        /* Room in the budget again: clients paused for their share may read. */
        if (was_exhausted && !budget_exhausted()) {
                for (struct rpc_conn *c = server.all; c != NULL; c = c->next_all)
                        if (c->paused)
                                conn_update_events(c);
        }
        conn_close_if_done(conn);
}

/* Sum of string lengths: a cheap upper bound-ish of the serialized size. */
static size_t json_text_weight(const json_t *j, int depth)
{
        if (depth > 64)
                return 0;
        size_t n = 0;
        if (json_is_string(j)) {
                n = json_string_length(j);
        } else if (json_is_object(j)) {
                const char *key;
                json_t *v;
                json_object_foreach((json_t *)j, key, v) n += strlen(key) + json_text_weight(v, depth + 1);
        } else if (json_is_array(j)) {
                size_t i;
                json_t *v;
                json_array_foreach(j, i, v) n += json_text_weight(v, depth + 1);
        }
        return n;
}

static void conn_queue(struct rpc_conn *conn, const json_t *message);

static void append_out(struct rpc_conn *conn, const char *data, size_t len)
{
        if (conn->out_len + len > conn->out_cap) {
                size_t cap = conn->out_cap ? conn->out_cap : READ_CHUNK;
                while (cap < conn->out_len + len)
                        cap *= 2;
                char *grown = realloc(conn->out, cap);
                if (grown == NULL) {
                        conn_close_soon(conn);
                        return;
                }
                conn->out = grown;
                conn->out_cap = cap;
        }
        if (conn->out_len == conn->out_off)
                conn->last_send_ms = now_monotonic_ms(); /* output starts waiting now */
        memcpy(conn->out + conn->out_len, data, len);
        conn->out_len += len;
        conn_charge(conn);
}

static void large_reply_event(struct loop_source *source, uint32_t events)
{
        struct rpc_conn *conn = source->data;
        char buf[256 * 1024];
        conn->refs++;
        /* A bounded amount per wakeup, and only while the client keeps up:
         * a client that does not read leaves the child blocked on the pipe. */
        for (int i = 0; i < 8 && !conn->closed && conn->out_len - conn->out_off <= OUT_PAUSE_BYTES; i++) {
                ssize_t n = read(source->fd, buf, sizeof(buf));
                if (n > 0) {
                        append_out(conn, buf, (size_t)n);
                        continue;
                }
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        break;
                /* EOF: the child wrote the whole line. */
                int status = 0;
                loop_remove(server.loop, conn->large);
                conn->large = NULL;
                while (waitpid(conn->large_pid, &status, 0) < 0 && errno == EINTR)
                        ;
                conn_unref(conn);
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                        log_error("client pid %d: serializing a large reply failed; closing", conn->pid);
                        conn_close(conn);
                        break;
                }
                json_t *later = conn->deferred;
                conn->deferred = NULL;
                size_t k;
                json_t *msg;
                json_array_foreach(later, k, msg) conn_queue(conn, msg);
                json_decref(later);
                break;
        }
        /* The client is behind: stop reading the child until it catches up. */
        if (conn->large != NULL && conn->out_len - conn->out_off > OUT_PAUSE_BYTES)
                loop_modify(server.loop, conn->large, 0);
        if (!conn->closed)
                conn_flush(conn);
        conn_unref(conn);
}

/* Serializing tens of MB of output takes the better part of a second:
 * a forked child does it and streams the line through a pipe, so the loop
 * keeps serving everyone else (STYLE: work that must block runs elsewhere). */
static bool conn_queue_large(struct rpc_conn *conn, const json_t *message)
{
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return false;
        pid_t pid = fork();
        if (pid < 0) {
                close(fds[0]);
                close(fds[1]);
                return false;
        }
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                size_t len;
                char *line = jsonrpc_serialize(message, &len);
                if (line == NULL)
                        _exit(1);
                for (size_t off = 0; off < len;) {
                        ssize_t n = write(fds[1], line + off, len - off);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0)
                                _exit(1);
                        off += (size_t)n;
                }
                _exit(0);
        }
        close(fds[1]);
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
        conn->large = loop_add(server.loop, fds[0], EPOLLIN, large_reply_event, conn);
        if (conn->large == NULL) {
                close(fds[0]);
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                return false;
        }
        conn->large_pid = pid;
        conn->refs++;
        return true;
}

#define LARGE_REPLY_BYTES (1u << 20)

static void conn_queue(struct rpc_conn *conn, const json_t *message)
{
        if (conn->closed || conn->close_due)
                return;
        if (conn->large != NULL) {
                if (conn->deferred == NULL)
                        conn->deferred = json_array();
                json_array_append(conn->deferred, (json_t *)message);
                return;
        }
        if (json_text_weight(message, 0) > LARGE_REPLY_BYTES && conn_queue_large(conn, message))
                return;
        size_t len;
        char *line = jsonrpc_serialize(message, &len);
        if (line == NULL) {
                log_error("client pid %d: cannot serialize a reply; closing", conn->pid);
                conn_close_soon(conn);
                return;
        }
        size_t queued = conn->out_len - conn->out_off;
        if (queued + len > OUT_DROP_BYTES) {
                log_warn("client pid %d does not read its replies (%zu bytes waiting); closing", conn->pid,
                         queued + len);
                free(line);
                conn_close_soon(conn);
                return;
        }
        if (queued == 0) {
                /* Nothing waiting: the line becomes the buffer, so a large
                 * reply is never copied. */
                free(conn->out);
                conn->out = line;
                conn->out_cap = conn->out_len = len;
                conn->out_off = 0;
                conn->last_send_ms = now_monotonic_ms();
                conn_charge(conn);
        } else {
                append_out(conn, line, len);
                free(line);
                if (conn->closed || conn->close_due)
                        return;
        }
        conn_flush(conn);
}

static void request_clear_message(struct rpc_request *req);

static void unwait_resume(struct rpc_request *req)
{
        if (req->on_resume == NULL)
                return;
        if (req->prev_resume != NULL)
                req->prev_resume->next_resume = req->next_resume;
        else
                server.resume_waiters = req->next_resume;
        if (req->next_resume != NULL)
                req->next_resume->prev_resume = req->prev_resume;
        req->prev_resume = req->next_resume = NULL;
        req->on_resume = NULL;
}

void rpc_request_on_resume(struct rpc_request *req, rpc_disconnect_cb cb, void *data)
{
        unwait_resume(req);
        if (cb == NULL)
                return;
        req->on_resume = cb;
        req->resume_data = data;
        req->next_resume = server.resume_waiters;
        if (req->next_resume != NULL)
                req->next_resume->prev_resume = req;
        server.resume_waiters = req;
}

bool rpc_request_backlogged(const struct rpc_request *req)
{
        return !req->conn->closed && conn_backlogged(req->conn);
}

/* Wake the producers whose client has room again (or is gone). A callback
 * may answer and free any request, so the walk starts over after each. */
static void resume_waiters(void)
{
        bool again = true;
        while (again) {
                again = false;
                for (struct rpc_request *req = server.resume_waiters; req != NULL; req = req->next_resume) {
                        if (!req->conn->closed && conn_backlogged(req->conn))
                                continue;
                        rpc_disconnect_cb cb = req->on_resume;
                        void *data = req->resume_data;
                        unwait_resume(req);
                        cb(req, data);
                        again = true;
                        break;
                }
        }
}

static void request_free(struct rpc_request *req, const char *outcome)
{
        struct rpc_conn *conn = req->conn;
        if (req->msg.method != NULL)
                metrics_request_done(req->msg.method, outcome,
                                     (double)(now_monotonic_ns() - req->dispatched_ns) / 1e9);
        unwatch(req);
        unwait_resume(req);
        request_clear_message(req);
        free(req);
        conn->in_flight--;
        conn->last_activity_ms = now_monotonic_ms();
        if (!conn->closed) {
                conn_update_events(conn);
                conn_close_if_done(conn);
        }
        conn_unref(conn);
}

static void reply_error_v(struct rpc_conn *conn, json_t *id, int code, const char *kind, int errnum,
                          json_t *extra, const char *fmt, va_list ap)
{
        char message[1024];
        vsnprintf(message, sizeof(message), fmt, ap);
        json_t *reply = jsonrpc_error(id, code, kind, message);
        /* data.errno: the reason for a client to act on, not the message's wording */
        json_t *data = json_object_get(json_object_get(reply, "error"), "data");
        const char *name = errnum > 0 ? strerrorname_np(errnum) : NULL;
        if (data != NULL && name != NULL)
                json_object_set_new(data, "errno", json_string(name));
        if (data != NULL && extra != NULL)
                json_object_update_missing(data, extra);
        if (reply != NULL)
                conn_queue(conn, reply);
        else
                conn_close_soon(conn); /* out of memory: a silent hang would be worse */
        json_decref(reply);
}

static void conn_error(struct rpc_conn *conn, json_t *id, int code, const char *kind, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        reply_error_v(conn, id, code, kind, 0, NULL, fmt, ap);
        va_end(ap);
}

void rpc_reply_result(struct rpc_request *req, json_t *result)
{
        if (req->msg.id != NULL && !req->conn->closed) {
                json_t *reply = result ? jsonrpc_result(req->msg.id, result) : NULL;
                if (reply != NULL) {
                        conn_queue(req->conn, reply);
                } else {
                        log_error("%s: cannot build the result for client pid %d", req->msg.method,
                                  req->conn->pid);
                        conn_error(req->conn, req->msg.id, JSONRPC_APP_ERROR, "internal",
                                   "%s: cannot build the result", req->msg.method);
                }
                json_decref(reply);
        }
        json_decref(result);
        request_free(req, NULL);
}

void rpc_reply_error(struct rpc_request *req, int code, const char *kind, const char *fmt, ...)
{
        if (req->msg.id != NULL && !req->conn->closed) {
                va_list ap;
                va_start(ap, fmt);
                reply_error_v(req->conn, req->msg.id, code, kind, 0, NULL, fmt, ap);
                va_end(ap);
        }
        request_free(req, kind ? kind : "error");
}

void rpc_reply_fail_errno(struct rpc_request *req, const char *kind, int errnum, const char *fmt, ...)
{
        if (req->msg.id != NULL && !req->conn->closed) {
                va_list ap;
                va_start(ap, fmt);
                reply_error_v(req->conn, req->msg.id, JSONRPC_APP_ERROR, kind, errnum, NULL, fmt, ap);
                va_end(ap);
        }
        request_free(req, kind ? kind : "error");
}

void rpc_reply_fail_data(struct rpc_request *req, const char *kind, json_t *data, const char *fmt, ...)
{
        if (req->msg.id != NULL && !req->conn->closed) {
                va_list ap;
                va_start(ap, fmt);
                reply_error_v(req->conn, req->msg.id, JSONRPC_APP_ERROR, kind, 0, data, fmt, ap);
                va_end(ap);
        }
        json_decref(data);
        request_free(req, kind ? kind : "error");
}

void rpc_notify(struct rpc_request *req, const char *method, json_t *params)
{
        if (req->conn->closed)
                return;
        json_t *msg = jsonrpc_notification(method, params);
        if (msg != NULL)
                conn_queue(req->conn, msg);
        json_decref(msg);
}

bool rpc_check_fields(struct rpc_request *req, const char *const *known)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (params_check_known(req->msg.params, known, "", &err) == 0)
                return true;
        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
        return false;
}

bool rpc_get_bool(struct rpc_request *req, const char *key, bool *out)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (params_get_bool(req->msg.params, key, out, &err) == 0)
                return true;
        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
        return false;
}

bool rpc_request_connected(const struct rpc_request *req)
{
        return !req->conn->closed;
}

/* auth.act_as {uid}: a trusted front (nsbox-http, connecting as root or as
 * nsboxd's own uid) serves many owners over one socket; each of its
 * connections becomes the owner it serves, once (requests already in flight
 * keep the uid they came with), so every rule keyed on the peer's uid (ownership, per-uid quotas, the
 * max_connections_per_uid count, audit lines) applies to that owner as to a
 * local client of that uid. */
void rpc_act_as(struct rpc_request *req)
{
        struct rpc_conn *conn = req->conn;
        if (conn->acted) {
                rpc_reply_fail(req, "permission_denied", "auth.act_as was already used on this connection");
                return;
        }
        if (conn->uid != 0 && conn->uid != geteuid()) {
                rpc_reply_fail(req, "permission_denied",
                               "auth.act_as is for root (or nsboxd's own uid); this client is uid %u",
                               (unsigned)conn->uid);
                return;
        }
        static const char *const known[] = { "uid", NULL };
        if (!rpc_check_fields(req, known))
                return;
        json_t *v = json_object_get(req->msg.params, "uid");
        if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
            json_integer_value(v) >= (json_int_t)UINT32_MAX) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "uid must be a non-zero uid (an integer from 1 to 4294967294)");
                return;
        }
        uid_t uid = (uid_t)json_integer_value(v);
        unsigned same_uid = 0;
        for (struct rpc_conn *c = server.all; c != NULL; c = c->next_all)
                same_uid += c != conn && c->uid == uid;
        if (same_uid >= nsboxd.config.max_connections_per_uid) {
                rpc_reply_fail(req, "limit_reached", "too many connections of uid %u to nsboxd (at most %u)",
                               (unsigned)uid, nsboxd.config.max_connections_per_uid);
                return;
        }
        log_limited(log_key_uid(uid).text, LOG_LEVEL_INFO,
                    "client pid %d uid %u acts as uid %u (auth.act_as)", conn->pid, (unsigned)conn->uid,
                    (unsigned)uid);
        conn->acted = true;
        conn->acted_by = conn->uid;
        conn->uid = uid;
        rpc_reply_result(req, json_pack("{s:I}", "uid", (json_int_t)uid));
}

/* Answer or run one parsed request; takes req. */
static void conn_dispatch_parsed(struct rpc_conn *conn, struct rpc_request *req, int code, const char *why)
{
        _cleanup_free_ struct rpc_request *owned_here = req;
        /* A notification (no "id" member) is never answered, not even with
         * an error; a request too broken to tell gets an error with a null id. */
        bool notification = (code >= 0 || code == JSONRPC_INVALID_PARAMS) && !req->msg.has_id;
        const void *method = code < 0 ? NULL : server.config.find_method(req->msg.method);
        if (code >= 0 && server.refusing) {
                if (!notification)
                        conn_error(conn, req->msg.id, JSONRPC_APP_ERROR, "unavailable",
                                   "nsboxd is shutting down");
                request_clear_message(req);
                return;
        }
        if (code < 0 || method == NULL) {
                if (code >= 0) {
                        code = JSONRPC_METHOD_NOT_FOUND;
                        why = NULL;
                }
                if (!notification) {
                        if (why != NULL)
                                conn_error(conn, req->msg.id, code, NULL, "%s", why);
                        else
                                conn_error(conn, req->msg.id, code, NULL, "unknown method \"%.128s\"",
                                           req->msg.method);
                }
                const struct log_key key = log_key_uid(conn->uid);
                if (why != NULL)
                        log_limited(key.text, LOG_LEVEL_DEBUG, "client pid %d: %s", conn->pid, why);
                else
                        log_limited(key.text, LOG_LEVEL_DEBUG, "client pid %d: unknown method \"%.128s\"",
                                    conn->pid, req->msg.method);
                request_clear_message(req);
                return;
        }
        struct rpc_request *owned = steal_pointer(&owned_here);
        owned->conn = conn;
        owned->uid = conn->uid;
        owned->gid = conn->gid;
        owned->pid = conn->pid;
        owned->acted = conn->acted;
        owned->acted_by = conn->acted_by;
        conn->refs++;
        conn->in_flight++;
        nsboxd.last_request_mono = now_monotonic_ms();
        owned->dispatched_ns = now_monotonic_ns();
        server.config.run_method(method, owned);
}

/* --- large request lines: parsed by a helper thread ------------------------
 *
 * The loop hands the line over, in the connection's input buffer itself (the
 * connection gets a new one), and stops reading that connection's later
 * lines until the parsed request comes back through an eventfd, so one
 * client's requests still run in order while everyone else is served. The
 * worker only reads the line and builds a fresh jansson tree nobody else
 * sees; all frees of loop memory happen on the loop. */
struct parse_job {
        struct rpc_conn *conn; /* a reference is held */
        struct rpc_request *req;
        json_t *release;  /* or: a large request's tree to free (millions of objects take a while) */
        char *buf;        /* the connection's input buffer as it was, freed on the loop */
        const char *line; /* within buf */
        size_t len;
        int code;
        const char *why;
        struct parse_job *next;
};

static struct {
        pthread_mutex_t lock;
        pthread_cond_t wake;
        struct parse_job *todo, **todo_tail;
        struct parse_job *done, **done_tail;
        struct loop_source *done_event;
        bool started;
} parser = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };

static void *parser_main(void *unused)
{
        for (;;) {
                pthread_mutex_lock(&parser.lock);
                while (parser.todo == NULL)
                        pthread_cond_wait(&parser.wake, &parser.lock);
                struct parse_job *job = parser.todo;
                parser.todo = job->next;
                if (parser.todo == NULL)
                        parser.todo_tail = &parser.todo;
                pthread_mutex_unlock(&parser.lock);

                if (job->release != NULL) {
                        json_decref(job->release);
                        job->release = NULL;
                } else {
                        job->code = jsonrpc_parse_request(job->line, job->len, &job->req->msg, &job->why);
                }
                job->next = NULL;

                pthread_mutex_lock(&parser.lock);
                *parser.done_tail = job;
                parser.done_tail = &job->next;
                pthread_mutex_unlock(&parser.lock);
                uint64_t one = 1;
                if (write(parser.done_event->fd, &one, sizeof(one)) < 0) {
                        /* eventfd counter full: cannot happen below 2^64 - 1 */
                }
        }
        return NULL;
}

static void parser_done_event(struct loop_source *source, uint32_t events)
{
        uint64_t count;
        if (read(source->fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
                log_warn("rpc parser wakeup: %s", strerror(errno));
        pthread_mutex_lock(&parser.lock);
        struct parse_job *list = parser.done;
        parser.done = NULL;
        parser.done_tail = &parser.done;
        pthread_mutex_unlock(&parser.lock);
        while (list != NULL) {
                struct parse_job *job = list;
                list = job->next;
                if (job->req == NULL) { /* a tree released */
                        free(job);
                        continue;
                }
                struct rpc_conn *conn = job->conn;
                /* Freed here, not by the thread: a free may hold the main
                 * arena's lock, and a sandbox's clone3 (no fork handlers)
                 * would hand its child that lock taken. */
                free(job->buf);
                conn->parsing = false;
                job->req->parsed_off_loop = true;
                if (conn->closed) {
                        request_clear_message(job->req);
                        free(job->req);
                } else {
                        conn_dispatch_parsed(conn, job->req, job->code, job->why);
                        /* The lines that waited behind this one. */
                        if (!conn->closed) {
                                conn_update_events(conn);
                                conn_schedule(conn);
                        }
                }
                free(job);
                conn_unref(conn);
        }
}

static int parser_start(void)
{
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0)
                return -errno;
        parser.todo_tail = &parser.todo;
        parser.done_tail = &parser.done;
        parser.done_event = loop_add(server.loop, fd, EPOLLIN, parser_done_event, NULL);
        if (parser.done_event == NULL) {
                int r = -errno;
                close(fd);
                return r;
        }
        /* Signals stay blocked in the worker (nsboxd blocks them before
         * serving, and a new thread inherits the mask): the signalfd sees them. */
        pthread_t thread;
        int r = pthread_create(&thread, NULL, parser_main, NULL);
        if (r != 0) {
                loop_remove(server.loop, parser.done_event);
                parser.done_event = NULL;
                return -r;
        }
        pthread_detach(thread);
        parser.started = true;
        return 0;
}

static void parser_push(struct parse_job *job)
{
        pthread_mutex_lock(&parser.lock);
        *parser.todo_tail = job;
        parser.todo_tail = &job->next;
        pthread_cond_signal(&parser.wake);
        pthread_mutex_unlock(&parser.lock);
}

/* A request's jansson tree is freed where it was built when it came from a
 * large line: freeing tens of millions of small objects takes a while.
 * That thread then frees only memory of its own arena, as long as no method
 * adds to a request's tree (methods.c copies params before it changes them):
 * a free of the loop's memory would take the main arena's lock, and a
 * sandbox's raw clone3 (sandbox.c, no fork handlers) would hand its child,
 * which mallocs, that lock taken. */
static void request_clear_message(struct rpc_request *req)
{
        if (req->parsed_off_loop && req->msg.message != NULL && parser.started) {
                struct parse_job *job = calloc(1, sizeof(*job));
                if (job != NULL) {
                        job->release = req->msg.message;
                        memset(&req->msg, 0, sizeof(req->msg));
                        parser_push(job);
                        return;
                }
        }
        jsonrpc_request_clear(&req->msg);
}

/* Hand the line (`len` bytes at `start` of the input, `consumed` with its
 * line end) to the parse thread, with the whole input buffer: what follows
 * the line is copied to a new one, so tens of MB are not copied again.
 * False when that cannot be done (then the caller parses it here). */
static bool conn_parse_off_loop(struct rpc_conn *conn, size_t start, size_t len, size_t consumed)
{
        if (!parser.started && parser_start() < 0)
                return false;
        struct parse_job *job = calloc(1, sizeof(*job));
        if (job == NULL)
                return false;
        size_t rest = conn->in_len - start - consumed;
        size_t cap = rest > 2 * READ_CHUNK ? rest : 2 * READ_CHUNK;
        char *in = malloc(cap);
        job->req = calloc(1, sizeof(*job->req));
        if (job->req == NULL || in == NULL) {
                free(job->req);
                free(in);
                free(job);
                return false;
        }
        memcpy(in, conn->in + start + consumed, rest);
        job->buf = conn->in;
        job->line = conn->in + start;
        job->len = len;
        conn->in = in;
        conn->in_cap = cap;
        conn->in_len = rest;
        conn->in_scanned = 0;
        job->conn = conn;
        conn->refs++;
        conn->parsing = true;
        parser_push(job);
        return true;
}

/* The line of `len` bytes at `start` of the input, `consumed` bytes with
 * its line end. True when the input buffer went with it (to the parse
 * thread): it then holds only what followed the line. */
static bool conn_dispatch_line(struct rpc_conn *conn, size_t start, size_t len, size_t consumed)
{
        if (len > PARSE_OFF_LOOP_BYTES && conn_parse_off_loop(conn, start, len, consumed))
                return true;
        struct rpc_request *req = calloc(1, sizeof(*req));
        if (req == NULL) {
                conn_close(conn);
                return false;
        }
        const char *why = NULL;
        int code = jsonrpc_parse_request(conn->in + start, len, &req->msg, &why);
        conn_dispatch_parsed(conn, req, code, why);
        return false;
}

static bool conn_over_limits(const struct rpc_conn *conn)
{
        return conn_backlogged(conn) || conn->in_flight >= MAX_IN_FLIGHT || conn->parsing;
}

static void conn_process_input(struct rpc_conn *conn)
{
        if (conn->processing || conn->closed)
                return;
        conn->processing = true;
        conn->refs++;
        size_t start = 0;
        bool no_more_lines = false;
        while (!conn->closed && !conn_over_limits(conn) && start < conn->in_len) {
                /* Do not rescan a long partial line each time a piece of it arrives. */
                size_t skip = start == 0 ? conn->in_scanned : 0;
                ssize_t nl = jsonrpc_find_newline(conn->in + start + skip, conn->in_len - start - skip);
                if (nl < 0) {
                        no_more_lines = true;
                        break;
                }
                size_t len = skip + (size_t)nl;
                /* Tolerate CRLF and blank keep-alive lines. */
                size_t text_len = len > 0 && conn->in[start + len - 1] == '\r' ? len - 1 : len;
                if (text_len > 0 && conn_dispatch_line(conn, start, text_len, len + 1))
                        start = 0;
                else
                        start += len + 1;
        }
        conn->processing = false;
        if (conn->closed) {
                conn_unref(conn);
                return;
        }
        if (start > 0) { /* (`in` may be NULL when nothing was buffered) */
                memmove(conn->in, conn->in + start, conn->in_len - start);
                conn->in_len -= start;
        }
        conn->in_scanned = no_more_lines ? conn->in_len : 0;
        /* The clock of request_timeout_seconds runs while the client owes
         * the rest of a line, not while its complete lines wait for us. */
        if (no_more_lines && conn->in_len > 0) {
                if (start > 0 || conn->partial_since_ms == 0)
                        conn->partial_since_ms = now_monotonic_ms();
        } else {
                conn->partial_since_ms = 0;
        }
        if (no_more_lines && conn->in_len > nsboxd.config.max_request_bytes) {
                log_warn("client pid %d: request line longer than %zu bytes; closing", conn->pid,
                         nsboxd.config.max_request_bytes);
                conn->in_len = conn->in_scanned = 0;
                conn->closing = true;
                conn_error(conn, NULL, JSONRPC_INVALID_REQUEST, NULL,
                           "request line longer than %zu bytes (--max-request-bytes); closing the connection",
                           nsboxd.config.max_request_bytes);
        } else if (no_more_lines && conn->read_eof && conn->in_len > 0) {
                /* The last request of a client that half-closed without a final newline. */
                size_t all = conn->in_len, len = all;
                if (len > 0 && conn->in[len - 1] == '\r')
                        len--;
                if (len == 0 || !conn_dispatch_line(conn, 0, len, all))
                        conn->in_len = conn->in_scanned = 0;
        }
        if (!conn->closed) {
                /* Give back a large buffer once a big request has been handled. */
                if (conn->in_len == 0 && conn->in_cap > 4 * READ_CHUNK) {
                        free(conn->in);
                        conn->in = NULL;
                        conn->in_cap = 0;
                }
                conn_update_events(conn);
                conn_close_if_done(conn);
        }
        conn_unref(conn);
}

static void conn_read(struct rpc_conn *conn, uint32_t events)
{
        /* Requests already buffered go first (and may pause reading again). */
        if (conn->in_len > 0)
                conn_process_input(conn);
        if (conn->closed)
                return;
        if (conn->paused || conn->read_eof || conn->closing) {
                /* Not reading now; only a hangup matters: nobody is left to answer. */
                if (events & (EPOLLHUP | EPOLLERR))
                        conn_close(conn);
                return;
        }
        /* One byte more than the limit is enough to tell a line is too long. */
        size_t limit = nsboxd.config.max_request_bytes + 1;
        if (conn->in_len >= limit)
                return;
        size_t want = limit - conn->in_len < READ_CHUNK ? limit - conn->in_len : READ_CHUNK;
        if (conn->in_cap - conn->in_len < want) {
                size_t cap = conn->in_cap ? conn->in_cap * 2 : 2 * READ_CHUNK;
                if (cap > limit)
                        cap = limit;
                if (cap < conn->in_len + want)
                        cap = conn->in_len + want;
                char *grown = realloc(conn->in, cap);
                if (grown == NULL) {
                        conn_close(conn);
                        return;
                }
                conn->in = grown;
                conn->in_cap = cap;
        }
        ssize_t n = recv(conn->source->fd, conn->in + conn->in_len, want, MSG_DONTWAIT);
        if (n < 0) {
                if (errno != EAGAIN && errno != EINTR)
                        conn_close(conn);
                return;
        }
        if (n == 0) {
                /* EPOLLHUP: both directions are down, nobody to answer. Only
                 * the reading side down (shutdown(SHUT_WR), `nc -N`): the
                 * client still waits for its replies. */
                if (events & (EPOLLHUP | EPOLLERR)) {
                        conn_close(conn);
                        return;
                }
                conn->read_eof = true;
        } else {
                conn->in_len += n;
                conn->last_activity_ms = now_monotonic_ms();
        }
        conn_process_input(conn);
}

static void conn_update_events(struct rpc_conn *conn)
{
        if (conn->closed)
                return;
        bool pending = conn->out_len > conn->out_off;
        bool was_paused = conn->paused;
        conn->paused = conn_over_limits(conn);
        bool reading = !conn->paused && !conn->read_eof && !conn->closing;
        /* EPOLLRDHUP stays level-triggered after the client's EOF: watch it
         * only while reading, or the loop would spin until we answer. */
        uint32_t events = (reading ? EPOLLIN | EPOLLRDHUP : 0) | (pending ? EPOLLOUT : 0);
        if (events != conn->events) {
                if (loop_modify(server.loop, conn->source, events) < 0) {
                        conn_close(conn);
                        return;
                }
                conn->events = events;
        }
        /* While paused we did not read: the rest of a partial line could not
         * arrive, so its clock starts again. */
        if (was_paused && !conn->paused && conn->partial_since_ms != 0)
                conn->partial_since_ms = now_monotonic_ms();
        if (was_paused && !conn->paused && conn->in_len > 0)
                conn_schedule(conn);
}

static void conn_event(struct loop_source *source, uint32_t events)
{
        struct rpc_conn *conn = source->data;
        conn->refs++;
        if (events & EPOLLOUT)
                conn_flush(conn);
        if (conn->close_due) /* here in the loop: no producer is in the middle of anything */
                conn_close(conn);
        if (!conn->closed && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                conn_read(conn, events);
        conn_unref(conn);
}

/* Tell a client we cannot take why, on a fresh socket, without waiting. */
static void refuse_connection(int fd, const char *kind, const char *message)
{
        json_t *reply = jsonrpc_error(NULL, JSONRPC_APP_ERROR, kind, message);
        size_t len;
        _cleanup_free_ char *line = reply ? jsonrpc_serialize(reply, &len) : NULL;
        json_decref(reply);
        if (line != NULL && send(fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
                log_debug("refuse a connection: %s", strerror(errno));
        close(fd);
}

static void accept_without_fds(int listen_fd)
{
        if (server.spare_fd < 0)
                return;
        close(server.spare_fd);
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0)
                refuse_connection(fd, "unavailable", "nsboxd is out of file descriptors; try again later");
        server.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* The whole listen queue is taken at each wakeup, up to this many: the queue
 * stays short for the uids that are not flooding it (one over its quota is
 * refused as it comes), and a sustained flood still lets the loop serve. */
#define ACCEPT_PER_WAKEUP 4096

static void listener_event(struct loop_source *source, uint32_t events)
{
        for (int i = 0; i < ACCEPT_PER_WAKEUP; i++) {
                int fd = accept4(source->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE) {
                                log_warn("accept: %s; refusing a client", strerror(errno));
                                accept_without_fds(source->fd);
                        }
                        return;
                }
                struct ucred cred;
                socklen_t cred_len = sizeof(cred);
                if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0) {
                        close(fd);
                        continue;
                }
                /* A client can connect as fast as it likes: one line per uid
                 * per second at most (log_limited), not one per connect. */
                const struct log_key key = log_key_uid(cred.uid);
                /* Outside nsboxd's user namespace every uid reads as the
                 * same overflow uid: owners could not be told apart, so such
                 * clients are one owner only where the operator said so. */
                if (userns_client_unmapped(cred.uid) &&
                    strcmp(nsboxd.config.unmapped_clients, "one-owner") != 0) {
                        log_limited(key.text, LOG_LEVEL_WARN,
                                    "client pid %d refused: its uid is not mapped in nsboxd's user namespace "
                                    "(unmapped_clients is refuse)",
                                    cred.pid);
                        refuse_connection(
                            fd, "permission_denied",
                            "your uid is not mapped in nsboxd's user namespace, so nsboxd cannot "
                            "tell you from other such clients: connect from inside the "
                            "namespace (or the operator sets unmapped_clients to one-owner)");
                        continue;
                }
                if (server.connections >= nsboxd.config.max_connections) {
                        log_limited(
                            key.text, LOG_LEVEL_WARN,
                            "client pid %d uid %u refused: %u connections already (--max-connections)",
                            cred.pid, (unsigned)cred.uid, server.connections);
                        refuse_connection(fd, "limit_reached", "too many connections to nsboxd");
                        continue;
                }
                unsigned per_uid_max = nsboxd.config.max_connections_per_uid;
                if (cred.uid != 0) {
                        unsigned same_uid = 0;
                        for (struct rpc_conn *c = server.all; c != NULL; c = c->next_all)
                                same_uid += c->uid == cred.uid;
                        if (same_uid >= per_uid_max) {
                                log_limited(
                                    key.text, LOG_LEVEL_WARN,
                                    "client pid %d uid %u refused: %u connections of that uid already "
                                    "(max_connections_per_uid)",
                                    cred.pid, (unsigned)cred.uid, same_uid);
                                char message[128];
                                snprintf(message, sizeof(message),
                                         "too many connections of uid %u to nsboxd (at most %u)",
                                         (unsigned)cred.uid, per_uid_max);
                                refuse_connection(fd, "limit_reached", message);
                                continue;
                        }
                }
                struct rpc_conn *conn = calloc(1, sizeof(*conn));
                if (conn == NULL) {
                        close(fd);
                        continue;
                }
                conn->uid = cred.uid;
                conn->gid = cred.gid;
                conn->pid = cred.pid;
                conn->refs = 1;
                conn->events = EPOLLIN | EPOLLRDHUP;
                conn->source = loop_add(server.loop, fd, conn->events, conn_event, conn);
                if (conn->source == NULL) {
                        close(fd);
                        free(conn);
                        continue;
                }
                server.connections++;
                conn->last_activity_ms = conn->last_send_ms = now_monotonic_ms();
                conn->next_all = server.all;
                if (server.all != NULL)
                        server.all->prev_all = conn;
                server.all = conn;
        }
}

void rpc_server_refuse_requests(void)
{
        server.refusing = true;
}

static void conn_tick(struct rpc_conn *conn, long long now, bool exhausted, size_t share)
{
        long long idle_ms = (long long)nsboxd.config.client_idle_timeout_seconds * 1000;
        long long partial_ms = (long long)nsboxd.config.request_timeout_seconds * 1000;
        const struct log_key key = log_key_uid(conn->uid);
        size_t queued = conn->out_len - conn->out_off;
        if (exhausted && queued > share && now - conn->last_send_ms >= OUT_STALL_MS) {
                log_limited(key.text, LOG_LEVEL_WARN,
                            "client pid %d uid %u does not read its output (%zu bytes waiting, its share of "
                            "max_buffer_bytes is %zu); closing",
                            conn->pid, (unsigned)conn->uid, queued, share);
                conn_close(conn);
                return;
        }
        if (partial_ms > 0 && conn->partial_since_ms != 0 && !conn->paused && !conn->closing &&
            now - conn->partial_since_ms >= partial_ms) {
                log_limited(key.text, LOG_LEVEL_INFO,
                            "client pid %d uid %u: request line incomplete after %us; closing", conn->pid,
                            (unsigned)conn->uid, nsboxd.config.request_timeout_seconds);
                conn->in_len = conn->in_scanned = 0;
                conn->partial_since_ms = 0;
                conn->closing = true;
                conn_error(
                    conn, NULL, JSONRPC_INVALID_REQUEST, "timeout",
                    "request line not complete within %u s of its first byte (request_timeout_seconds); "
                    "closing the connection",
                    nsboxd.config.request_timeout_seconds);
                if (!conn->closed) {
                        conn_update_events(conn);
                        conn_close_if_done(conn);
                }
                return;
        }
        bool idle = conn->in_flight == 0 && conn->in_len == 0 && conn->out_len == conn->out_off &&
                    conn->large == NULL && conn->deferred == NULL && !conn->parsing;
        if (idle_ms > 0 && idle && now - conn->last_activity_ms >= idle_ms) {
                log_limited(key.text, LOG_LEVEL_DEBUG, "client pid %d uid %u idle for %us; closing",
                            conn->pid, (unsigned)conn->uid, nsboxd.config.client_idle_timeout_seconds);
                conn_close(conn);
        }
}

void rpc_server_tick(void)
{
        long long now = now_monotonic_ms();
        bool exhausted = budget_exhausted();
        size_t share = fair_share();
        /* Closing one connection runs callbacks that may close others: walk
         * a snapshot, each entry referenced, instead of the live list. */
        size_t n = 0;
        for (struct rpc_conn *conn = server.all; conn != NULL; conn = conn->next_all)
                n++;
        _cleanup_free_ struct rpc_conn **snapshot = calloc(n ? n : 1, sizeof(*snapshot));
        if (snapshot == NULL)
                return;
        n = 0;
        for (struct rpc_conn *conn = server.all; conn != NULL; conn = conn->next_all) {
                conn->refs++;
                snapshot[n++] = conn;
        }
        for (size_t i = 0; i < n; i++) {
                if (!snapshot[i]->closed)
                        conn_tick(snapshot[i], now, exhausted, share);
                conn_unref(snapshot[i]);
        }
        if (server.resume_waiters != NULL)
                resume_waiters();
}

int rpc_server_start(struct loop *loop, const struct rpc_server_config *config, nsbox_error_t **err)
{
        bool activated = config->listen_fd >= 0;
        _cleanup_close_ int fd = -1;
        if (activated) {
                /* systemd made, bound and owns the socket (nsboxd.socket). */
                fd = config->listen_fd;
                if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                        return nsbox_error(err, errno, "the socket passed by systemd");
        } else {
                int r = rpc_listen_check_dir(config->socket_path, err);
                if (r < 0)
                        return r;
                struct group *g = getgrnam("nsbox");
                fd = rpc_listen_bind(config->socket_path, 0, g ? g->gr_gid : 0, 0660, err);
                if (fd < 0)
                        return fd;
        }
        _cleanup_close_ int operator_fd =
            rpc_listen_operator(config->socket_path, &server.operator_path, err);
        if (operator_fd < 0 && operator_fd != -ENAMETOOLONG) {
                /* Under socket activation the shared socket is systemd's, and
                 * a directory it accepts stops no start: root then shares
                 * that socket's queue, as before there was an operator one. */
                if (!activated)
                        return operator_fd;
                log_warn("no operator socket: %s; root's clients share the activated socket",
                         (*err)->message);
                nsbox_error_free(err);
        }
        _cleanup_close_ int wakeup = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (wakeup < 0)
                return nsbox_error(err, errno, "eventfd");

        server.loop = loop;
        server.config = *config;
        /* An activated socket is systemd's to keep across restarts. */
        server.socket_path = activated ? NULL : strdup(config->socket_path);
        server.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        server.wakeup = loop_add(loop, wakeup, EPOLLIN, wakeup_event, NULL);
        if (server.wakeup == NULL)
                return nsbox_error(err, errno, "watch the rpc wakeup eventfd");
        steal_fd(&wakeup);
        server.listener = loop_add(loop, fd, EPOLLIN, listener_event, NULL);
        if (server.listener == NULL)
                return nsbox_error(err, errno, "watch %s", config->socket_path);
        steal_fd(&fd);
        if (operator_fd >= 0) {
                server.operator_listener = loop_add(loop, operator_fd, EPOLLIN, listener_event, NULL);
                if (server.operator_listener == NULL)
                        return nsbox_error(err, errno, "watch %s", server.operator_path);
                steal_fd(&operator_fd);
        }
        return 0;
}

void rpc_server_stop(void)
{
        if (server.listener != NULL) {
                loop_remove(server.loop, server.listener);
                server.listener = NULL;
        }
        if (server.operator_listener != NULL) {
                loop_remove(server.loop, server.operator_listener);
                server.operator_listener = NULL;
        }
        if (server.operator_path != NULL) {
                unlink(server.operator_path);
                char *dir = dirname(server.operator_path);
                rmdir(dir); /* best effort: the directory is ours, and empty now */
                free(server.operator_path);
                server.operator_path = NULL;
        }
        if (server.spare_fd >= 0) {
                close(server.spare_fd);
                server.spare_fd = -1;
        }
        if (server.socket_path != NULL) {
                unlink(server.socket_path);
                free(server.socket_path);
                server.socket_path = NULL;
        }
}
