#include "rpc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"

#define READ_CHUNK (64 * 1024)
/* Stop reading a client's requests while this much output waits for it, and
 * drop a client that lets this much pile up (it is not reading at all). */
#define OUT_PAUSE_BYTES (4u << 20)
#define OUT_DROP_BYTES  (512u << 20)

struct rpc_conn {
        struct loop_source *source;
        unsigned refs;
        bool closed;
        bool paused;
        bool processing; /* conn_process_input is on the stack */
        uid_t uid;
        gid_t gid;
        pid_t pid;
        char *in;
        size_t in_len, in_cap;
        char *out;
        size_t out_len, out_off, out_cap;
};

static struct {
        struct loop *loop;
        struct loop_source *listener;
        struct rpc_server_config config;
        char *socket_path;
        unsigned connections;
} server;

static void conn_update_events(struct rpc_conn *conn);

static void conn_unref(struct rpc_conn *conn)
{
        if (--conn->refs > 0)
                return;
        free(conn->in);
        free(conn->out);
        free(conn);
}

static void conn_close(struct rpc_conn *conn)
{
        if (conn->closed)
                return;
        conn->closed = true;
        loop_remove(server.loop, conn->source);
        conn->source = NULL;
        server.connections--;
        conn_unref(conn);
}

static void conn_flush(struct rpc_conn *conn)
{
        while (conn->out_off < conn->out_len) {
                ssize_t n = send(conn->source->fd, conn->out + conn->out_off, conn->out_len - conn->out_off,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        conn_close(conn);
                        return;
                }
                conn->out_off += n;
        }
        if (conn->out_off == conn->out_len) {
                conn->out_off = conn->out_len = 0;
                if (conn->out_cap > 4 * READ_CHUNK) {
                        free(conn->out);
                        conn->out = NULL;
                        conn->out_cap = 0;
                }
        }
        conn_update_events(conn);
}

static void conn_queue(struct rpc_conn *conn, const json_t *message)
{
        if (conn->closed)
                return;
        size_t len;
        _cleanup_free_ char *line = jsonrpc_serialize(message, &len);
        if (line == NULL) {
                log_error("client pid %d: cannot serialize a reply; closing", conn->pid);
                conn_close(conn);
                return;
        }
        if (conn->out_len - conn->out_off + len > OUT_DROP_BYTES) {
                log_warn("client pid %d does not read its replies; closing", conn->pid);
                conn_close(conn);
                return;
        }
        if (conn->out_off > 0 && conn->out_off == conn->out_len)
                conn->out_off = conn->out_len = 0;
        if (conn->out_len + len > conn->out_cap) {
                size_t cap = conn->out_cap ? conn->out_cap : READ_CHUNK;
                while (cap < conn->out_len + len)
                        cap *= 2;
                char *grown = realloc(conn->out, cap);
                if (grown == NULL) {
                        conn_close(conn);
                        return;
                }
                conn->out = grown;
                conn->out_cap = cap;
        }
        memcpy(conn->out + conn->out_len, line, len);
        conn->out_len += len;
        conn_flush(conn);
}

static void request_free(struct rpc_request *req)
{
        struct rpc_conn *conn = req->conn;
        jsonrpc_request_clear(&req->msg);
        free(req);
        conn_unref(conn);
}

void rpc_reply_result(struct rpc_request *req, json_t *result)
{
        if (req->msg.id != NULL && !req->conn->closed) {
                json_t *reply = jsonrpc_result(req->msg.id, result);
                if (reply != NULL)
                        conn_queue(req->conn, reply);
                json_decref(reply);
        }
        json_decref(result);
        request_free(req);
}

static void reply_error_v(struct rpc_conn *conn, json_t *id, int code, const char *kind, const char *fmt,
                          va_list ap)
{
        char message[1024];
        vsnprintf(message, sizeof(message), fmt, ap);
        json_t *reply = jsonrpc_error(id, code, kind, message);
        if (reply != NULL)
                conn_queue(conn, reply);
        json_decref(reply);
}

void rpc_reply_error(struct rpc_request *req, int code, const char *kind, const char *fmt, ...)
{
        if (req->msg.id != NULL && !req->conn->closed) {
                va_list ap;
                va_start(ap, fmt);
                reply_error_v(req->conn, req->msg.id, code, kind, fmt, ap);
                va_end(ap);
        }
        request_free(req);
}

static void conn_error(struct rpc_conn *conn, json_t *id, int code, const char *kind, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        reply_error_v(conn, id, code, kind, fmt, ap);
        va_end(ap);
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

bool rpc_request_connected(const struct rpc_request *req)
{
        return !req->conn->closed;
}

static const struct rpc_method *find_method(const char *name)
{
        for (const struct rpc_method *m = server.config.methods; m->name != NULL; m++) {
                if (strcmp(m->name, name) == 0)
                        return m;
        }
        return NULL;
}

static void conn_dispatch_line(struct rpc_conn *conn, const char *line, size_t len)
{
        struct rpc_request *req = calloc(1, sizeof(*req));
        if (req == NULL) {
                conn_close(conn);
                return;
        }
        const char *why = NULL;
        int code = jsonrpc_parse_request(line, len, &req->msg, &why);
        if (code < 0) {
                conn_error(conn, req->msg.id, code, NULL, "%s", why);
                jsonrpc_request_clear(&req->msg);
                free(req);
                return;
        }
        const struct rpc_method *method = find_method(req->msg.method);
        if (method == NULL) {
                conn_error(conn, req->msg.id, JSONRPC_METHOD_NOT_FOUND, NULL, "unknown method \"%s\"",
                           req->msg.method);
                jsonrpc_request_clear(&req->msg);
                free(req);
                return;
        }
        req->conn = conn;
        req->uid = conn->uid;
        req->gid = conn->gid;
        req->pid = conn->pid;
        conn->refs++;
        method->handler(req);
}

static void conn_process_input(struct rpc_conn *conn)
{
        if (conn->processing)
                return;
        conn->processing = true;
        size_t start = 0;
        while (!conn->closed && !conn->paused && start < conn->in_len) {
                ssize_t nl = jsonrpc_find_newline(conn->in + start, conn->in_len - start);
                if (nl < 0)
                        break;
                size_t len = (size_t)nl;
                /* Tolerate CRLF and blank keep-alive lines. */
                size_t text_len = len > 0 && conn->in[start + len - 1] == '\r' ? len - 1 : len;
                if (text_len > 0)
                        conn_dispatch_line(conn, conn->in + start, text_len);
                start += len + 1;
        }
        conn->processing = false;
        if (conn->closed)
                return;
        memmove(conn->in, conn->in + start, conn->in_len - start);
        conn->in_len -= start;
        if (conn->in_len > server.config.max_request_bytes) {
                conn_error(conn, NULL, JSONRPC_INVALID_REQUEST, NULL,
                           "request line longer than %zu bytes; closing the connection",
                           server.config.max_request_bytes);
                conn_flush(conn);
                conn_close(conn);
        }
}

static void conn_read(struct rpc_conn *conn)
{
        if (conn->in_cap - conn->in_len < READ_CHUNK) {
                size_t cap = conn->in_cap ? conn->in_cap * 2 : 2 * READ_CHUNK;
                char *grown = realloc(conn->in, cap);
                if (grown == NULL) {
                        conn_close(conn);
                        return;
                }
                conn->in = grown;
                conn->in_cap = cap;
        }
        ssize_t n =
            recv(conn->source->fd, conn->in + conn->in_len, conn->in_cap - conn->in_len, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                conn_close(conn);
                return;
        }
        if (n > 0) {
                conn->in_len += n;
                conn_process_input(conn);
        }
        /* Give back a large buffer once a big request has been handled. */
        if (!conn->closed && conn->in_len == 0 && conn->in_cap > 4 * READ_CHUNK) {
                free(conn->in);
                conn->in = NULL;
                conn->in_cap = 0;
        }
}

static void conn_update_events(struct rpc_conn *conn)
{
        if (conn->closed)
                return;
        bool pending = conn->out_len > conn->out_off;
        bool was_paused = conn->paused;
        conn->paused = conn->out_len - conn->out_off > OUT_PAUSE_BYTES;
        uint32_t events = (conn->paused ? 0 : EPOLLIN) | (pending ? EPOLLOUT : 0) | EPOLLRDHUP;
        loop_modify(server.loop, conn->source, events);
        if (was_paused && !conn->paused && conn->in_len > 0)
                conn_process_input(conn);
}

static void conn_event(struct loop_source *source, uint32_t events)
{
        struct rpc_conn *conn = source->data;
        conn->refs++;
        if (events & EPOLLOUT)
                conn_flush(conn);
        if (!conn->closed && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                conn_read(conn);
        else if (!conn->closed && (events & EPOLLRDHUP) && !(events & EPOLLIN))
                conn_close(conn);
        conn_unref(conn);
}

static void listener_event(struct loop_source *source, uint32_t events)
{
        for (int i = 0; i < 64; i++) {
                int fd = accept4(source->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0)
                        return;
                struct ucred cred;
                socklen_t cred_len = sizeof(cred);
                if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0 ||
                    server.connections >= server.config.max_connections) {
                        close(fd);
                        continue;
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
                conn->source = loop_add(server.loop, fd, EPOLLIN | EPOLLRDHUP, conn_event, conn);
                if (conn->source == NULL) {
                        close(fd);
                        free(conn);
                        continue;
                }
                server.connections++;
        }
}

int rpc_server_start(struct loop *loop, const struct rpc_server_config *config, nsbox_error_t **err)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        if (strlen(config->socket_path) >= sizeof(addr.sun_path))
                return nsbox_error(err, ENAMETOOLONG, "socket path %s", config->socket_path);
        strcpy(addr.sun_path, config->socket_path);

        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return nsbox_error(err, errno, "socket");
        /* A socket file left by a previous run: replace it only if nothing
         * answers on it (another nsboxd must not be hijacked). */
        struct stat st;
        if (lstat(config->socket_path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return nsbox_error(err, EEXIST, "%s exists and is not a socket", config->socket_path);
                _cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof(addr)) == 0)
                        return nsbox_error(err, EADDRINUSE, "another nsboxd is listening on %s",
                                           config->socket_path);
                unlink(config->socket_path);
        }
        mode_t old = umask(0117);
        int r = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
        umask(old);
        if (r < 0)
                return nsbox_error(err, errno, "bind %s", config->socket_path);
        struct group *g = getgrnam("nsbox");
        if (chown(config->socket_path, 0, g ? g->gr_gid : 0) < 0 || chmod(config->socket_path, 0660) < 0)
                return nsbox_error(err, errno, "set owner and mode of %s", config->socket_path);
        if (listen(fd, 512) < 0)
                return nsbox_error(err, errno, "listen on %s", config->socket_path);

        server.loop = loop;
        server.config = *config;
        server.socket_path = strdup(config->socket_path);
        server.listener = loop_add(loop, fd, EPOLLIN, listener_event, NULL);
        if (server.listener == NULL)
                return nsbox_error(err, errno, "watch %s", config->socket_path);
        steal_fd(&fd);
        return 0;
}

void rpc_server_stop(void)
{
        if (server.listener != NULL) {
                loop_remove(server.loop, server.listener);
                server.listener = NULL;
        }
        if (server.socket_path != NULL) {
                unlink(server.socket_path);
                free(server.socket_path);
                server.socket_path = NULL;
        }
}
