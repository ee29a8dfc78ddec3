/* SPDX-License-Identifier: Apache-2.0 */
/* The blocking JSON-RPC client of nsboxd: connect (the operator socket first, bounded waits on a
 * full listen queue), call, read replies and notifications. */
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "jsonrpc.h"
#include "socket_path.h"
#include "io.h"

#define CLIENT_MAX_LINE (1u << 30)

struct client {
        int fd;
        int interrupt_fd; /* readable = give up waiting (a signalfd), or -1 */
        long long next_id;
        char *buf;
        size_t len, cap;
        size_t scanned; /* bytes of buf known to hold no newline */
};

const char *client_socket_path(const char *flag)
{
        if (flag != NULL)
                return flag;
        const char *env = getenv("NSBOX_SOCKET");
        if (env && env[0])
                return env;
        /* A user's own nsboxd --rootless listens in their runtime dir; the
         * system's daemon serves everyone else. */
        static char own[4096];
        const char *runtime = getenv("XDG_RUNTIME_DIR");
        if (geteuid() != 0 && runtime != NULL && runtime[0] == '/') {
                snprintf(own, sizeof(own), "%s/nsbox/nsbox.sock", runtime);
                if (access(own, F_OK) == 0)
                        return own;
        }
        return "/run/nsbox/nsbox.sock";
}

/* A full listen queue is waited out for this long in all, in tries of at
 * most CONNECT_TRY_MS each: the kernel's wait (SO_SNDTIMEO bounds a blocking
 * connect) wakes as soon as nsboxd accepts, and a fresh try after a short
 * pause finds the path again if nsboxd was restarted meanwhile. */
#define CONNECT_BUDGET_MS 2000
#define CONNECT_TRY_MS    500

static long long monotonic_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One connect that waits at most wait_ms (>= 1) for room in the listen
 * queue: the fd, or -errno (-EAGAIN: still full). */
static int connect_once(const struct sockaddr_un *addr, long long wait_ms)
{
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        struct timeval tv = { .tv_sec = wait_ms / 1000, .tv_usec = (wait_ms % 1000) * 1000 };
        if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
                return -errno;
        if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0)
                return -errno;
        /* Writes block as they always did. */
        struct timeval none = { 0 };
        if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none)) < 0)
                return -errno;
        return steal_fd(&fd);
}

/* The fd, or -errno; *tries says how many connects it took. */
static int connect_bounded(const char *path, unsigned *tries)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof(addr.sun_path))
                return -ENAMETOOLONG;
        strcpy(addr.sun_path, path);
        /* The clock is read only once a connect had to wait: the first read
         * of a process faults in the vDSO's pages. */
        long long deadline = 0;
        long long pause_ms = 25;
        for (*tries = 1;; (*tries)++) {
                long long left = deadline == 0 ? CONNECT_BUDGET_MS : deadline - monotonic_ms();
                int fd = connect_once(&addr, left > CONNECT_TRY_MS ? CONNECT_TRY_MS : left > 0 ? left : 1);
                if (fd >= 0 || (fd != -EAGAIN && fd != -EINTR))
                        return fd;
                if (deadline == 0)
                        deadline = monotonic_ms() + CONNECT_BUDGET_MS - CONNECT_TRY_MS;
                left = deadline - monotonic_ms();
                if (left <= 0)
                        return -EAGAIN;
                long long pause = pause_ms < left ? pause_ms : left;
                struct timespec ts = { .tv_sec = pause / 1000, .tv_nsec = (pause % 1000) * 1000000 };
                nanosleep(&ts, NULL);
                pause_ms *= 2;
        }
}

/* A client's memory (its struct and its line buffer) is jansson's, from
 * jansson's allocator: in the CLI that is its JSON memory (cli/json_memory.c),
 * so that a short CLI call allocates nothing from malloc. */
static void *client_memory_alloc(size_t size)
{
        json_malloc_t alloc;
        json_free_t release;
        json_get_alloc_funcs(&alloc, &release);
        return alloc(size);
}

static void client_memory_free(void *p)
{
        json_malloc_t alloc;
        json_free_t release;
        json_get_alloc_funcs(&alloc, &release);
        if (p != NULL)
                release(p);
}

/* The line buffer grows by copy (jansson's allocator has no realloc). */
static char *line_buffer_grow(char *old, size_t len, size_t cap)
{
        char *grown = client_memory_alloc(cap);
        if (grown == NULL)
                return NULL;
        if (len > 0)
                memcpy(grown, old, len);
        client_memory_free(old);
        return grown;
}

int client_connect(const char *path, struct client **out, nsbox_error_t **err)
{
        unsigned tries = 0;
        _cleanup_close_ int fd = -1;
        /* The operator socket first, where it is there and ours to use
         * (root's; other uids cannot see into its directory): a connect
         * flood by other uids cannot fill its queue. One that fails
         * otherwise than by staying full (a stale one: nsboxd died) sends
         * us to the shared socket. */
        char operator_path[sizeof(((struct sockaddr_un *)NULL)->sun_path)];
        if (operator_socket_path(path, operator_path, sizeof(operator_path)) == 0 &&
            access(operator_path, F_OK) == 0) {
                fd = connect_bounded(operator_path, &tries);
                if (fd == -EAGAIN)
                        return nsbox_error(err, EAGAIN,
                                           "connect to nsboxd at %s: its listen queue stayed full for %d s "
                                           "(%u tries); try again later",
                                           operator_path, CONNECT_BUDGET_MS / 1000, tries);
        }
        if (fd < 0)
                fd = connect_bounded(path, &tries);
        if (fd == -EAGAIN)
                return nsbox_error(
                    err, EAGAIN,
                    "connect to nsboxd at %s: its listen queue stayed full for %d s (%u tries: "
                    "nsboxd is overloaded or other clients flood it); try again later",
                    path, CONNECT_BUDGET_MS / 1000, tries);
        if (fd == -ENAMETOOLONG)
                return nsbox_error(err, ENAMETOOLONG, "socket path %s", path);
        if (fd < 0)
                return nsbox_error(err, -fd, "connect to nsboxd at %s", path);
        struct client *c = client_memory_alloc(sizeof(*c));
        if (c == NULL)
                return nsbox_error(err, ENOMEM, "client");
        memset(c, 0, sizeof(*c));
        c->fd = steal_fd(&fd);
        c->interrupt_fd = -1;
        c->next_id = 1;
        *out = c;
        return 0;
}

void client_close(struct client *c)
{
        if (c == NULL)
                return;
        close(c->fd);
        client_memory_free(c->buf);
        client_memory_free(c);
}

int client_fd(const struct client *c)
{
        return c->fd;
}

void client_set_interrupt_fd(struct client *c, int fd)
{
        c->interrupt_fd = fd;
}

/* Wait until the socket is readable; -EINTR when the interrupt fd fires first. */
static int wait_readable(struct client *c)
{
        if (c->interrupt_fd < 0)
                return 0;
        struct pollfd fds[2] = { { .fd = c->fd, .events = POLLIN },
                                 { .fd = c->interrupt_fd, .events = POLLIN } };
        for (;;) {
                int n = poll(fds, 2, -1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (fds[1].revents & POLLIN)
                        return -EINTR;
                return 0;
        }
}

static client_resolve_fn client_resolver;

void client_set_resolver(client_resolve_fn fn)
{
        client_resolver = fn;
}

int client_send(struct client *c, const char *method, json_t *params, long long *id_out, nsbox_error_t **err)
{
        if (client_resolver != NULL && json_is_string(json_object_get(params, "sandbox_id"))) {
                int r = client_resolver(c, params, err);
                if (r < 0)
                        return r;
        }
        long long id = c->next_id++;
        _cleanup_json_ json_t *req = json_pack("{s:s, s:I, s:s, s:O}", "jsonrpc", "2.0", "id", (json_int_t)id,
                                               "method", method, "params", params ? params : json_object());
        if (req == NULL)
                return nsbox_error(err, ENOMEM, "build request");
        /* A request of a few KiB (most) is written from the stack: no
         * allocation, which in a short CLI process costs page faults. */
        char small[4096];
        _cleanup_free_ char *line = NULL;
        const char *text = small;
        size_t len = jsonrpc_serialize_into(req, small, sizeof(small));
        if (len == 0) {
                text = line = jsonrpc_serialize(req, &len);
                if (line == NULL)
                        return nsbox_error(err, ENOMEM, "serialize request");
        }
        int r = io_write_all(c->fd, text, len);
        if (r < 0)
                return nsbox_error(err, -r, "send %s to nsboxd", method);
        if (id_out)
                *id_out = id;
        return 0;
}

/* Next complete line as a JSON value (new reference). */
static int read_message(struct client *c, json_t **out, nsbox_error_t **err)
{
        for (;;) {
                ssize_t nl = c->buf ? jsonrpc_find_newline(c->buf + c->scanned, c->len - c->scanned) : -1;
                if (nl < 0) {
                        c->scanned = c->len;
                } else {
                        nl += c->scanned;
                        c->scanned = 0;
                        json_error_t jerr;
                        *out = json_loadb(c->buf, nl, JSON_ALLOW_NUL, &jerr);
                        memmove(c->buf, c->buf + nl + 1, c->len - nl - 1);
                        c->len -= nl + 1;
                        if (*out == NULL)
                                return nsbox_error(err, EPROTO, "nsboxd sent invalid JSON: %s", jerr.text);
                        return 0;
                }
                if (c->cap - c->len < 65536) {
                        if (c->cap >= CLIENT_MAX_LINE)
                                return nsbox_error(err, E2BIG, "reply from nsboxd too large");
                        size_t cap = c->cap ? c->cap * 2 : 131072;
                        char *grown = line_buffer_grow(c->buf, c->len, cap);
                        if (grown == NULL)
                                return nsbox_error(err, ENOMEM, "reply buffer");
                        c->buf = grown;
                        c->cap = cap;
                }
                int r = wait_readable(c);
                if (r == -EINTR)
                        return nsbox_error(err, EINTR, "interrupted");
                if (r < 0)
                        return nsbox_error(err, -r, "poll");
                ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return nsbox_error(err, errno, "read from nsboxd");
                if (n == 0)
                        return nsbox_error(err, ECONNRESET, "nsboxd closed the connection");
                c->len += n;
        }
}

int client_call(struct client *c, const char *method, json_t *params, client_notify_cb notify, void *data,
                json_t **result, json_t **error_out, nsbox_error_t **err)
{
        long long id;
        int r = client_send(c, method, params, &id, err);
        if (r < 0)
                return r;
        return client_wait(c, id, notify, data, result, error_out, err);
}

int client_wait(struct client *c, long long id, client_notify_cb notify, void *data, json_t **result,
                json_t **error_out, nsbox_error_t **err)
{
        int r;
        while ((r = client_wait_one(c, id, notify, data, result, error_out, err)) > 0)
                ;
        return r;
}

int client_wait_one(struct client *c, long long id, client_notify_cb notify, void *data, json_t **result,
                    json_t **error_out, nsbox_error_t **err)
{
        int r;
        for (;;) {
                _cleanup_json_ json_t *msg = NULL;
                if ((r = read_message(c, &msg, err)) < 0)
                        return r;
                json_t *mid = json_object_get(msg, "id");
                if (mid == NULL) {
                        json_t *m = json_object_get(msg, "method");
                        if (notify == NULL || !json_is_string(m))
                                continue;
                        notify(json_string_value(m), json_object_get(msg, "params"), data);
                        return 1;
                }
                json_t *error = json_object_get(msg, "error");
                /* An error without an id: nsboxd could not read a line of
                 * ours (JSON-RPC answers one it cannot parse so), and the
                 * request waited for will never be answered. */
                bool unread = json_is_null(mid) && error != NULL;
                if (!unread && (!json_is_integer(mid) || json_integer_value(mid) != id))
                        continue; /* a reply to a request sent with client_send */
                if (error != NULL) {
                        json_t *message = json_object_get(error, "message");
                        if (error_out)
                                *error_out = json_incref(error);
                        return nsbox_error(err, 0, "%s",
                                           json_is_string(message) ? json_string_value(message) : "error");
                }
                *result = json_incref(json_object_get(msg, "result"));
                return *result ? 0 : nsbox_error(err, EPROTO, "reply without result");
        }
}
