/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox's own API over HTTP: POST /v1/rpc/METHOD with the params object as
 * the body, or POST /v1/rpc with a JSON-RPC request. A call with
 * "stream": true is answered as it runs: NDJSON (a line per nsboxd
 * notification, then the result line) or, for Accept: text/event-stream,
 * server-sent events. A writer thread per stream blocks on nsboxd and
 * feeds a pipe; MHD's connection thread reads the pipe and watches the
 * HTTP client, so a client that leaves closes its nsboxd connection, and
 * nsboxd ends the exec as for any client gone. */
#include "rpc_api.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "jsonrpc.h"
#include "io.h"
#include "nsboxd.h"
#include "reply.h"

struct stream {
        struct client *c;
        char *method;
        json_t *params;
        bool sse;
        int pipe_rd, pipe_wr;
        int http_fd; /* the HTTP client's socket, watched for its leaving */
        struct MHD_Connection *connection;
        pthread_t thread;
        bool started;
        bool wrote;    /* a line went into the pipe */
        bool waiting;  /* for nsboxd: MHD's idle timeout is off (stream_waiting) */
        json_t *error; /* the call failed before any line: answered with its status */
        char first[65536];
        size_t first_len, first_off;
};

static void stream_write(struct stream *s, const char *event, json_t *value)
{
        _cleanup_free_ char *text = json_dumps(value, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (text == NULL)
                return;
        _cleanup_free_ char *line = NULL;
        int n =
            s->sse ? asprintf(&line, "event: %s\ndata: %s\n\n", event, text) : asprintf(&line, "%s\n", text);
        if (n < 0)
                return;
        s->wrote = true;
        if (io_write_all(s->pipe_wr, line, n) < 0) {
                /* the reader is gone: stop nsboxd's side too */
                shutdown(client_fd(s->c), SHUT_RDWR);
        }
}

static void stream_notify(const char *method, json_t *params, void *data)
{
        struct stream *s = data;
        if (s->sse) {
                stream_write(s, method, params);
                return;
        }
        _cleanup_json_ json_t *line = json_pack("{s:s, s:O}", "method", method, "params", params);
        if (line != NULL)
                stream_write(s, method, line);
}

static void *stream_main(void *data)
{
        struct stream *s = data;
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        int r = client_call(s->c, s->method, s->params, stream_notify, s, &result, &error, &err);
        if (r == 0) {
                if (s->sse) {
                        stream_write(s, "result", result);
                } else {
                        _cleanup_json_ json_t *line = json_pack("{s:O}", "result", result);
                        stream_write(s, "result", line);
                }
        } else {
                if (error == NULL)
                        error = json_pack("{s:i, s:s, s:{s:s}}", "code", JSONRPC_APP_ERROR, "message",
                                          err && err->message ? err->message : "nsboxd went away", "data",
                                          "kind", "unavailable");
                if (!s->wrote) {
                        s->error = steal_pointer(&error);
                } else {
                        const char *kind;
                        http_status_of_rpc_error(error, &kind);
                        _cleanup_json_ json_t *body = json_pack("{s:s, s:O}", "kind", kind, "message",
                                                                json_object_get(error, "message"));
                        _cleanup_json_ json_t *line = json_pack("{s:O}", "error", body);
                        stream_write(s, "error", s->sse ? body : line);
                }
        }
        close(s->pipe_wr);
        s->pipe_wr = -1;
        return NULL;
}

static void stream_free(void *data)
{
        struct stream *s = data;
        if (s == NULL)
                return;
        if (s->started) {
                /* Wake a writer blocked on nsboxd or on a full pipe. */
                shutdown(client_fd(s->c), SHUT_RDWR);
                if (s->pipe_rd >= 0)
                        close(s->pipe_rd);
                s->pipe_rd = -1;
                pthread_join(s->thread, NULL);
        }
        if (s->pipe_rd >= 0)
                close(s->pipe_rd);
        if (s->pipe_wr >= 0)
                close(s->pipe_wr);
        client_close(s->c);
        free(s->method);
        json_decref(s->params);
        json_decref(s->error);
        free(s);
}

/* Wait for the pipe; false when the HTTP client left first. */
static bool stream_wait(struct stream *s)
{
        struct pollfd fds[2] = { { .fd = s->pipe_rd, .events = POLLIN },
                                 { .fd = s->http_fd, .events = POLLRDHUP } };
        for (;;) {
                int n = poll(fds, s->http_fd >= 0 ? 2 : 1, -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return false;
                if (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR))
                        return false;
                return true;
        }
}

/* MHD's idle timeout is off only while the stream waits for nsboxd (a
 * command that thinks is not an idle client); while MHD sends what came,
 * it holds, so a client that stops reading is closed like any idle one.
 * Turning it back on restarts its clock (MHD_set_connection_option). */
static void stream_waiting(struct stream *s, bool waiting)
{
        if (s->waiting == waiting)
                return;
        s->waiting = waiting;
        MHD_set_connection_option(s->connection, MHD_CONNECTION_OPTION_TIMEOUT,
                                  waiting ? 0u : http_config.timeout_seconds);
}

static ssize_t stream_read(void *data, uint64_t pos, char *buf, size_t max)
{
        struct stream *s = data;
        if (s->first_off < s->first_len) {
                size_t n = s->first_len - s->first_off < max ? s->first_len - s->first_off : max;
                memcpy(buf, s->first + s->first_off, n);
                s->first_off += n;
                return n;
        }
        for (;;) {
                stream_waiting(s, true);
                bool ready = stream_wait(s);
                stream_waiting(s, false);
                if (!ready)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                ssize_t n = read(s->pipe_rd, buf, max);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (n == 0)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                return n;
        }
}

static enum MHD_Result answer_stream(struct http_request *r, const char *method, json_t *params)
{
        struct stream *s = calloc(1, sizeof(*s));
        if (s == NULL)
                return MHD_NO;
        s->pipe_rd = s->pipe_wr = -1;
        const char *accept =
            MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
        s->sse = accept != NULL && strstr(accept, "text/event-stream") != NULL;
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(r->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        s->http_fd = info ? info->connect_fd : -1;
        s->connection = r->connection;
        s->method = strdup(method);
        s->params = json_incref(params);
        _cleanup_error_ nsbox_error_t *err = NULL;
        int fds[2];
        if (s->method == NULL || pipe2(fds, O_CLOEXEC) < 0) {
                stream_free(s);
                return http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of resources");
        }
        s->pipe_rd = fds[0];
        s->pipe_wr = fds[1];
        _cleanup_json_ json_t *refused = NULL;
        if (http_nsboxd_connect(r, &s->c, &refused, &err) < 0) {
                stream_free(s);
                return http_reply_rpc_error(r, refused, err);
        }
        if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
                stream_free(s);
                return http_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                        "cannot start a thread");
        }
        s->started = true;
        /* The status is the call's own when it fails before any output
         * (an unknown sandbox is a 404, not a 200 stream of one error). */
        for (;;) {
                if (!stream_wait(s)) {
                        stream_free(s);
                        return MHD_NO;
                }
                ssize_t n = read(s->pipe_rd, s->first, sizeof(s->first));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n > 0) {
                        s->first_len = n;
                        break;
                }
                /* end before any line: the call failed */
                pthread_join(s->thread, NULL);
                s->started = false;
                json_t *error = s->error;
                enum MHD_Result ret = http_reply_rpc_error(r, error, NULL);
                stream_free(s);
                return ret;
        }
        return http_reply_stream(r, s->sse ? "text/event-stream" : "application/x-ndjson", stream_read, s,
                                 stream_free);
}

static bool method_name_ok(const char *m)
{
        size_t n = strlen(m);
        if (n == 0 || n > 64)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((m[i] >= 'a' && m[i] <= 'z') || m[i] == '.' || m[i] == '_'))
                        return false;
        return true;
}

enum MHD_Result http_rpc_handle(struct http_request *r, const char *method)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = NULL;
        json_t *params, *id = NULL;
        if (method == NULL) {
                /* a JSON-RPC request as the body */
                if ((body = http_body_object(r, &ret)) == NULL)
                        return ret;
                method = json_string_value(json_object_get(body, "method"));
                params = json_object_get(body, "params");
                id = json_object_get(body, "id");
                if (method == NULL || (params != NULL && !json_is_object(params)))
                        return http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                                "a JSON-RPC request wants a method and an object of params");
        } else {
                if (r->body_len == 0) {
                        body = json_object();
                } else if ((body = http_body_object(r, &ret)) == NULL) {
                        return ret;
                }
                params = body;
        }
        if (!method_name_ok(method) || strcmp(method, "auth.act_as") == 0)
                return http_reply_error(r, MHD_HTTP_NOT_FOUND, "not_found", "unknown method \"%.64s\"",
                                        method);
        _cleanup_json_ json_t *empty = json_object();
        if (params == NULL)
                params = empty;
        if (json_is_true(json_object_get(params, "stream")))
                return answer_stream(r, method, params);
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        if (http_call(r, method, params, &result, &error, &err) < 0) {
                if (id != NULL && error != NULL) {
                        const char *kind;
                        unsigned status = http_status_of_rpc_error(error, &kind);
                        return http_reply_json(
                            r, status,
                            json_pack("{s:s, s:O, s:O}", "jsonrpc", "2.0", "id", id, "error", error));
                }
                return http_reply_rpc_error(r, error, err);
        }
        if (id != NULL)
                return http_reply_json(
                    r, MHD_HTTP_OK,
                    json_pack("{s:s, s:O, s:O}", "jsonrpc", "2.0", "id", id, "result", result));
        return http_reply_json(r, MHD_HTTP_OK, json_incref(result));
}
