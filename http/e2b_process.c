/* SPDX-License-Identifier: Apache-2.0 */
/* envd's process.Process (e2b_process.h) on nsboxd's background execs.
 * E2B names a process by its pid (or a tag); nsbox by its exec id: a
 * bounded table here maps one to the other. A stream reads the exec's
 * output with exec.output from where it stands, so a client that leaves
 * ends its stream and never the process. */
#include "e2b_process.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "e2b_wire.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "owned.h"
#include "reply.h"

/* Commands remembered for Connect, List and the rest, per owner; past it
 * the owner's oldest (ended first) is forgotten (its exec runs on; only
 * E2B's handle to it is lost). */
#define PROCESS_PER_OWNER 1024
/* Output a command keeps for its stream (nsboxd's max_output_bytes). */
#define PROCESS_MAX_OUTPUT (16u << 20)
/* A tag is a short name (E2B's SDKs tag a pty or a command by a name). */
#define PROCESS_MAX_TAG 256
/* What List shows of a command's config: past it, its cmd's head alone. */
#define PROCESS_MAX_CONFIG 4096
#define PROCESS_MAX_CMD    256
struct process {
        struct owned head;
        char sandbox_id[E2B_MAX_SANDBOX_ID + 1];
        char exec_id[64];
        uint32_t pid;
        bool tty;
        char *tag;
        json_t *config; /* NULL once it ended: List shows running commands only */
};

static void process_clear(void *entry)
{
        struct process *p = entry;
        free(p->tag);
        json_decref(p->config);
}

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owned_table table = OWNED_TABLE(struct process, PROCESS_PER_OWNER, process_clear);

/* Takes p's tag and config. */
static void table_add(struct process *p)
{
        pthread_mutex_lock(&table_lock);
        struct process *slot = owned_add(&table, p->head.uid);
        if (slot != NULL) {
                struct owned head = slot->head;
                *slot = *p;
                slot->head = head;
        } else {
                process_clear(p);
        }
        pthread_mutex_unlock(&table_lock);
}

static struct process *table_at(size_t i)
{
        return owned_at(&table, i);
}

/* The command is over: it keeps its ids and tag (Connect answers its end),
 * and frees the rest. Under the lock. */
static void process_ended(struct process *p)
{
        p->head.ended = true;
        json_decref(p->config);
        p->config = NULL;
}

static void table_ended(uid_t uid, const char *exec_id)
{
        pthread_mutex_lock(&table_lock);
        for (size_t i = 0; i < table.size; i++) {
                struct process *p = table_at(i);
                if (p->head.used && p->head.uid == uid && strcmp(p->exec_id, exec_id) == 0)
                        process_ended(p);
        }
        pthread_mutex_unlock(&table_lock);
}

/* The newest command of this owner's sandbox the selector names: a copy of
 * its exec id (and tty); false when none. */
static bool table_find(uid_t uid, const char *sandbox_id, json_t *selector, char exec_id[64], uint32_t *pid,
                       bool *tty)
{
        json_t *want_pid = json_object_get(selector, "pid");
        const char *want_tag = json_string_value(json_object_get(selector, "tag"));
        if (!json_is_integer(want_pid) && want_tag == NULL)
                return false;
        struct process *found = NULL;
        pthread_mutex_lock(&table_lock);
        for (size_t i = 0; i < table.size; i++) {
                struct process *p = table_at(i);
                if (!p->head.used || p->head.uid != uid || strcmp(p->sandbox_id, sandbox_id) != 0 ||
                    (found != NULL && found->head.seq > p->head.seq))
                        continue;
                if (json_is_integer(want_pid) ? (json_int_t)p->pid == json_integer_value(want_pid)
                                              : p->tag != NULL && strcmp(p->tag, want_tag) == 0)
                        found = p;
        }
        if (found != NULL) {
                memcpy(exec_id, found->exec_id, 64);
                *pid = found->pid;
                *tty = found->tty;
        }
        pthread_mutex_unlock(&table_lock);
        return found != NULL;
}

/* A stream of one command's events, read by MHD in the connection's thread. */
struct process_stream {
        struct client *c;
        uid_t uid;
        bool ended; /* its end was read: nothing of it runs on c, which may serve another */
        char exec_id[64];
        bool tty;
        int http_fd;
        json_int_t since[2];
        unsigned keepalive_ms;
        long long last_sent_ms;
        struct e2b_body body;
};

static long long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int stream_event(struct process_stream *s, json_t *event)
{
        _cleanup_json_ json_t *message = json_pack("{s:o}", "event", event);
        s->last_sent_ms = now_ms();
        return message ? e2b_envelope_append(&s->body.buf, &s->body.len, &s->body.cap, 0, message) : -ENOMEM;
}

static void stream_end(struct process_stream *s, json_t *error)
{
        _cleanup_json_ json_t *owned = error;
        e2b_envelope_append(&s->body.buf, &s->body.len, &s->body.cap, E2B_FLAG_END, error);
        s->body.done = true;
}

static json_t *end_event(json_t *status)
{
        json_t *code = json_object_get(status, "exit_code"), *sig = json_object_get(status, "signal");
        char text[64];
        if (json_is_integer(code))
                snprintf(text, sizeof(text), "exit status %lld", (long long)json_integer_value(code));
        else
                snprintf(text, sizeof(text), "signal: %s",
                         json_integer_value(sig) == 9    ? "killed"
                         : json_integer_value(sig) == 15 ? "terminated"
                                                         : "other");
        json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode",
                                json_is_integer(code) ? (int)json_integer_value(code) : -1, "exited",
                                json_is_integer(code), "status", text);
        const char *error = json_string_value(json_object_get(status, "error"));
        if (end != NULL && error != NULL)
                json_object_set_new(end, "error", json_string(error));
        if (end != NULL && json_is_true(json_object_get(status, "timed_out")))
                json_object_set_new(end, "error", json_string("the command timed out"));
        return json_pack("{s:o}", "end", end);
}

/* One look at the command: its new output, and its end. nsboxd answers
 * as soon as there is either (exec.output's wait_ms), or once wait_ms has
 * passed; false when the HTTP client left meanwhile. */
static bool stream_poll(struct process_stream *s, unsigned wait_ms)
{
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:{s:I, s:I}, s:I}", "exec_id", s->exec_id, "since", "stdout", s->since[0],
                      "stderr", s->since[1], "wait_ms", (json_int_t)wait_ms);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_client_call_fd(s->http_fd, s->c, "exec.output", params, &result, &error, &err) < 0) {
                if (error == NULL && err->errnum == ECONNABORTED)
                        return false;
                stream_end(s,
                           e2b_connect_error_json(e2b_connect_code(error),
                                                  error ? json_string_value(json_object_get(error, "message"))
                                                        : err->message));
                return true;
        }
        static const char *const names[2] = { "stdout", "stderr" };
        for (int i = 0; i < 2; i++) {
                const char *data = json_string_value(json_object_get(result, names[i]));
                if (data != NULL && *data != '\0')
                        stream_event(s, json_pack("{s:{s:s}}", "data", s->tty ? "pty" : names[i], data));
                json_t *next = json_object_get(json_object_get(result, "next"), names[i]);
                if (json_is_integer(next))
                        s->since[i] = json_integer_value(next);
        }
        /* more: nsboxd keeps more past next (a long output's tail): read on */
        if (json_is_true(json_object_get(result, "running")) || json_is_true(json_object_get(result, "more")))
                return true;
        /* The answer of an ended exec says how it ended. */
        if (json_object_get(result, "status") == NULL) {
                stream_end(s, e2b_connect_error_json("internal", "the command's status is lost"));
                return true;
        }
        stream_event(s, end_event(result));
        stream_end(s, NULL);
        s->ended = true;
        table_ended(s->uid, s->exec_id);
        return true;
}

/* A keepalive when the stream has been quiet for its interval, else what
 * comes before the next one. */
static bool stream_more(void *data)
{
        struct process_stream *s = data;
        long long quiet_ms = now_ms() - s->last_sent_ms;
        if (quiet_ms >= s->keepalive_ms) {
                stream_event(s, json_pack("{s:{}}", "keepalive"));
                return true;
        }
        return stream_poll(s, (unsigned)(s->keepalive_ms - quiet_ms));
}

static ssize_t stream_read(void *data, uint64_t pos, char *out, size_t max)
{
        struct process_stream *s = data;
        return e2b_body_read(&s->body, out, max, stream_more, s);
}

static void stream_free(void *data)
{
        struct process_stream *s = data;
        http_nsboxd_release(s->uid, s->c, s->ended);
        free(s->body.buf);
        free(s);
}

static struct process_stream *stream_new(struct http_request *r, const char *exec_id, bool tty)
{
        struct process_stream *s = calloc(1, sizeof(*s));
        if (s == NULL)
                return NULL;
        snprintf(s->exec_id, sizeof(s->exec_id), "%s", exec_id);
        s->uid = r->uid;
        s->tty = tty;
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(r->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        s->http_fd = info ? info->connect_fd : -1;
        const char *ping =
            MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
        unsigned long seconds = ping ? strtoul(ping, NULL, 10) : 0;
        s->keepalive_ms = (unsigned)(seconds >= 1 && seconds <= 60 ? seconds : 50) * 1000;
        s->last_sent_ms = now_ms();
        return s;
}

/* A stream that is its error alone (a Connect stream's errors end it). */
static enum MHD_Result reply_stream_error(struct http_request *r, const char *code, const char *message)
{
        char *buf = NULL;
        size_t len = 0, cap = 0;
        _cleanup_json_ json_t *e = e2b_connect_error_json(code, message);
        if (e2b_envelope_append(&buf, &len, &cap, E2B_FLAG_END, e) < 0)
                return MHD_NO;
        return http_reply_bytes(r, MHD_HTTP_OK, "application/connect+json", buf, len);
}

static enum MHD_Result reply_stream_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err)
{
        const char *m = error ? json_string_value(json_object_get(error, "message")) : NULL;
        return reply_stream_error(r, e2b_connect_code(error),
                                  m                     ? m
                                  : err && err->message ? err->message
                                                        : "error");
}

/* The stream, on the connection c to nsboxd (taken; NULL: a new one). */
static enum MHD_Result start_stream(struct http_request *r, struct process_stream *s, struct client *c,
                                    uint32_t pid, json_t *since)
{
        _cleanup_json_ json_t *refused = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        s->c = c;
        if (s->c == NULL && http_nsboxd_take(r, &s->c, &refused, &err) < 0) {
                stream_free(s);
                return reply_stream_rpc_error(r, refused, err);
        }
        if (since != NULL) {
                s->since[0] = json_integer_value(json_object_get(since, "stdout"));
                s->since[1] = json_integer_value(json_object_get(since, "stderr"));
        }
        stream_event(s, json_pack("{s:{s:I}}", "start", "pid", (json_int_t)pid));
        return http_reply_stream(r, "application/connect+json", stream_read, s, stream_free);
}

static bool string_map(json_t *v)
{
        const char *k;
        json_t *x;
        if (v == NULL || json_is_null(v))
                return true;
        if (!json_is_object(v))
                return false;
        json_object_foreach(v, k, x) if (!json_is_string(x)) return false;
        return true;
}

/* What List shows of a command: its config, or past PROCESS_MAX_CONFIG
 * its cmd's head alone (cut on a character's first byte). */
static json_t *kept_config(const char *cmd, json_t *args, json_t *envs, json_t *cwd)
{
        json_t *config =
            json_pack("{s:s, s:o}", "cmd", cmd, "args", json_is_array(args) ? json_copy(args) : json_array());
        if (config == NULL)
                return NULL;
        if (json_is_object(envs))
                json_object_set(config, "envs", envs);
        if (json_is_string(cwd))
                json_object_set(config, "cwd", cwd);
        if (json_dumpb(config, NULL, 0, JSON_COMPACT) <= PROCESS_MAX_CONFIG)
                return config;
        json_decref(config);
        size_t n = strlen(cmd);
        if (n > PROCESS_MAX_CMD) {
                n = PROCESS_MAX_CMD;
                while (n > 0 && ((unsigned char)cmd[n] & 0xC0) == 0x80)
                        n--;
        }
        return json_pack("{s:s%, s:[]}", "cmd", cmd, n, "args");
}

static enum MHD_Result start(struct http_request *r, const char *sandbox_id, json_t *msg)
{
        json_t *process = json_object_get(msg, "process"), *pty = json_object_get(msg, "pty");
        const char *cmd = json_string_value(json_object_get(process, "cmd"));
        json_t *args = json_object_get(process, "args"), *envs = json_object_get(process, "envs");
        json_t *cwd = json_object_get(process, "cwd"), *tag = json_object_get(msg, "tag");
        if (cmd == NULL || *cmd == '\0')
                return reply_stream_error(r, "invalid_argument", "process.cmd must be a non-empty string");
        if (json_is_string(tag) && json_string_length(tag) > PROCESS_MAX_TAG)
                return reply_stream_error(r, "invalid_argument", "tag is longer than 256 bytes");
        if ((args != NULL && !json_is_array(args) && !json_is_null(args)) || !string_map(envs) ||
            (cwd != NULL && !json_is_string(cwd) && !json_is_null(cwd)) ||
            (tag != NULL && !json_is_string(tag) && !json_is_null(tag)) ||
            (pty != NULL && !json_is_object(pty) && !json_is_null(pty)))
                return reply_stream_error(r, "invalid_argument",
                                          "process wants cmd, args (strings), envs (a string map) and cwd");
        _cleanup_json_ json_t *argv = json_pack("[s]", cmd);
        size_t i;
        json_t *a;
        json_array_foreach(args, i, a)
        {
                if (!json_is_string(a))
                        return reply_stream_error(r, "invalid_argument", "process.args must be strings");
                json_array_append(argv, a);
        }
        bool tty = json_is_object(pty);
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:O, s:s, s:b, s:b, s:s, s:I}", "sandbox_id", sandbox_id, "argv", argv, "user",
                      e2b_user(r->connection), "background", 1, "stdin_stream",
                      !json_is_false(json_object_get(msg, "stdin")), "encoding", "base64", "max_output_bytes",
                      (json_int_t)PROCESS_MAX_OUTPUT);
        if (json_is_object(envs))
                json_object_set(params, "env", envs);
        if (json_is_string(cwd) && *json_string_value(cwd) != '\0')
                json_object_set(params, "cwd", cwd);
        if (tty) {
                json_t *size = json_object_get(pty, "size");
                json_object_set_new(params, "tty", json_true());
                json_int_t rows = json_integer_value(json_object_get(size, "rows"));
                json_int_t cols = json_integer_value(json_object_get(size, "cols"));
                if (rows >= 1 && rows <= 65535)
                        json_object_set_new(params, "rows", json_integer(rows));
                if (cols >= 1 && cols <= 65535)
                        json_object_set_new(params, "cols", json_integer(cols));
        }
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct client *c = NULL;
        if (http_nsboxd_take(r, &c, &error, &err) < 0)
                return reply_stream_rpc_error(r, error, err);
        if (client_call(c, "sandbox.exec", params, NULL, NULL, &result, &error, &err) < 0) {
                http_nsboxd_release(r->uid, c, error != NULL);
                return reply_stream_rpc_error(r, error, err);
        }
        const char *exec_id = json_string_value(json_object_get(result, "exec_id"));
        json_int_t pid = json_integer_value(json_object_get(result, "pid"));
        if (exec_id == NULL) {
                http_nsboxd_release(r->uid, c, false);
                return reply_stream_error(r, "internal", "nsboxd gave no exec id");
        }
        struct process p = { .head.uid = r->uid, .pid = (uint32_t)pid, .tty = tty };
        snprintf(p.sandbox_id, sizeof(p.sandbox_id), "%s", sandbox_id);
        snprintf(p.exec_id, sizeof(p.exec_id), "%s", exec_id);
        p.tag = json_is_string(tag) ? strdup(json_string_value(tag)) : NULL;
        p.config = kept_config(cmd, args, envs, cwd);
        table_add(&p);
        struct process_stream *s = stream_new(r, exec_id, tty);
        if (s == NULL) {
                http_nsboxd_release(r->uid, c, false);
                return MHD_NO;
        }
        return start_stream(r, s, c, (uint32_t)pid, NULL);
}

/* The exec a message's selector (`process`) names, or a reply queued. */
static bool selected(struct http_request *r, const char *sandbox_id, json_t *msg, char exec_id[64],
                     uint32_t *pid, bool *tty)
{
        json_t *selector = json_object_get(msg, "process");
        if (!json_is_object(selector))
                return false;
        return table_find(r->uid, sandbox_id, selector, exec_id, pid, tty);
}

static enum MHD_Result connect_process(struct http_request *r, const char *sandbox_id, json_t *msg)
{
        char exec_id[64];
        uint32_t pid;
        bool tty;
        if (!selected(r, sandbox_id, msg, exec_id, &pid, &tty))
                return reply_stream_error(r, "not_found", "no such process");
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:{s:I, s:I}}", "exec_id", exec_id, "since", "stdout", (json_int_t)INT64_MAX / 2,
                      "stderr", (json_int_t)INT64_MAX / 2);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "exec.output", params, &result, &error, &err) < 0)
                return reply_stream_rpc_error(r, error, err);
        struct process_stream *s = stream_new(r, exec_id, tty);
        if (s == NULL)
                return MHD_NO;
        return start_stream(r, s, NULL, pid, json_object_get(result, "next"));
}

static enum MHD_Result unary_call(struct http_request *r, const char *method, json_t *params)
{
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, method, params, &result, &error, &err) < 0)
                return e2b_reply_connect_rpc_error(r, error, err);
        return http_reply_json(r, MHD_HTTP_OK, json_object());
}

static enum MHD_Result list(struct http_request *r, const char *sandbox_id)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", sandbox_id), *result = NULL,
                              *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "exec.list", params, &result, &error, &err) < 0)
                return e2b_reply_connect_rpc_error(r, error, err);
        json_t *running = json_object();
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(result, "execs"), i, e)
        {
                const char *id = json_string_value(json_object_get(e, "exec_id"));
                if (id != NULL && json_is_true(json_object_get(e, "running")))
                        json_object_set_new(running, id, json_true());
        }
        json_t *processes = json_array();
        pthread_mutex_lock(&table_lock);
        for (size_t k = 0; k < table.size; k++) {
                struct process *p = table_at(k);
                if (!p->head.used || p->head.uid != r->uid || strcmp(p->sandbox_id, sandbox_id) != 0 ||
                    p->config == NULL)
                        continue;
                if (json_object_get(running, p->exec_id) == NULL) {
                        process_ended(p);
                        continue;
                }
                json_t *info = json_pack("{s:O, s:I}", "config", p->config, "pid", (json_int_t)p->pid);
                if (info != NULL && p->tag != NULL)
                        json_object_set_new(info, "tag", json_string(p->tag));
                json_array_append_new(processes, info);
        }
        pthread_mutex_unlock(&table_lock);
        json_decref(running);
        return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:o}", "processes", processes));
}

enum MHD_Result http_e2b_process(struct http_request *r, const char *sandbox_id, const char *method)
{
        bool stream = strcmp(method, "Start") == 0 || strcmp(method, "Connect") == 0;
        char why[256];
        _cleanup_json_ json_t *msg = e2b_connect_message(r, stream, why, sizeof(why));
        if (msg == NULL)
                return stream ? reply_stream_error(r, "invalid_argument", why)
                              : e2b_reply_connect_error(r, "invalid_argument", "%s", why);
        if (strcmp(method, "Start") == 0)
                return start(r, sandbox_id, msg);
        if (strcmp(method, "Connect") == 0)
                return connect_process(r, sandbox_id, msg);
        if (strcmp(method, "List") == 0)
                return list(r, sandbox_id);
        if (strcmp(method, "StreamInput") == 0)
                return e2b_reply_connect_error(r, "unimplemented", "StreamInput needs HTTP/2: use SendInput");
        bool known = strcmp(method, "SendInput") == 0 || strcmp(method, "SendSignal") == 0 ||
                     strcmp(method, "CloseStdin") == 0 || strcmp(method, "Update") == 0;
        if (!known)
                return e2b_reply_connect_error(r, "unimplemented", "process.Process/%.64s is not implemented",
                                               method);
        char exec_id[64];
        uint32_t pid;
        bool tty;
        if (!selected(r, sandbox_id, msg, exec_id, &pid, &tty))
                return e2b_reply_connect_error(r, "not_found", "no such process");
        _cleanup_json_ json_t *params = json_pack("{s:s}", "exec_id", exec_id);
        if (strcmp(method, "SendInput") == 0) {
                json_t *input = json_object_get(msg, "input");
                json_t *data = json_object_get(input, "stdin");
                if (data == NULL)
                        data = json_object_get(input, "pty");
                if (!json_is_string(data))
                        return e2b_reply_connect_error(r, "invalid_argument",
                                                       "input wants stdin or pty bytes");
                json_object_set(params, "data", data);
                json_object_set_new(params, "encoding", json_string("base64"));
                return unary_call(r, "exec.stdin", params);
        }
        if (strcmp(method, "SendSignal") == 0) {
                json_t *sig = json_object_get(msg, "signal");
                int number =
                    json_is_integer(sig) ? (int)json_integer_value(sig)
                    : json_is_string(sig) && strcmp(json_string_value(sig), "SIGNAL_SIGTERM") == 0 ? 15
                    : json_is_string(sig) && strcmp(json_string_value(sig), "SIGNAL_SIGKILL") == 0 ? 9
                                                                                                   : 0;
                if (number != 9 && number != 15)
                        return e2b_reply_connect_error(r, "invalid_argument",
                                                       "signal must be SIGTERM or SIGKILL");
                json_object_set_new(params, "signal", json_integer(number));
                return unary_call(r, "exec.kill", params);
        }
        if (strcmp(method, "CloseStdin") == 0) {
                json_object_set_new(params, "data", json_string(""));
                json_object_set_new(params, "eof", json_true());
                return unary_call(r, "exec.stdin", params);
        }
        json_t *size = json_object_get(json_object_get(msg, "pty"), "size");
        json_int_t rows = json_integer_value(json_object_get(size, "rows"));
        json_int_t cols = json_integer_value(json_object_get(size, "cols"));
        if (rows < 1 || rows > 65535 || cols < 1 || cols > 65535)
                return e2b_reply_connect_error(r, "invalid_argument",
                                               "pty.size wants rows and cols from 1 to 65535");
        json_object_set_new(params, "rows", json_integer(rows));
        json_object_set_new(params, "cols", json_integer(cols));
        return unary_call(r, "exec.resize", params);
}
