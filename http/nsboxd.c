/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http's calls to nsboxd (nsboxd.h): each request's own connection,
 * made its owner's with auth.act_as when there are tokens, and a few idle
 * ones kept for the owner's next command. */
#include "nsboxd.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "cleanup.h"
#include "json_cleanup.h"

int http_nsboxd_connect(const struct http_request *r, struct client **out, json_t **error,
                        nsbox_error_t **err)
{
        struct client *c = NULL;
        *error = NULL;
        int ret = client_connect(http_config.socket_path, &c, err);
        if (ret < 0)
                return ret;
        if (http_config.act_as) {
                /* Its refusal (limit_reached past the owner's connections) is
                 * the request's answer, with that error's status. */
                _cleanup_json_ json_t *params = json_pack("{s:I}", "uid", (json_int_t)r->uid);
                _cleanup_json_ json_t *result = NULL;
                ret = client_call(c, "auth.act_as", params, NULL, NULL, &result, error, err);
                if (ret < 0) {
                        client_close(c);
                        return ret;
                }
        }
        *out = c;
        return 0;
}

/* Idle connections, each acting as its owner, for that owner's next
 * command (connect and auth.act_as were a tenth of the front's time per
 * command): a few per owner, each kept a short while, so that they hold
 * little of nsboxd's max_connections_per_uid. */
#define POOL_SIZE      32
#define POOL_PER_OWNER 2
#define POOL_IDLE_MS   2000

struct pooled {
        struct client *c;
        uid_t uid;
        long long since_ms;
};
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pooled pool[POOL_SIZE];
static size_t pool_len;

static long long pool_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Close (outside the lock) what has been idle too long; with pool_lock held. */
static size_t pool_expire(struct client **gone, long long now)
{
        size_t n = 0;
        for (size_t i = 0; i < pool_len;) {
                if (now - pool[i].since_ms < POOL_IDLE_MS) {
                        i++;
                        continue;
                }
                gone[n++] = pool[i].c;
                pool[i] = pool[--pool_len];
        }
        return n;
}

static void close_all(struct client **gone, size_t n)
{
        for (size_t i = 0; i < n; i++)
                client_close(gone[i]);
}

/* An idle connection of uid's that nsboxd has not closed, or NULL. */
static struct client *pool_take(uid_t uid)
{
        struct client *gone[POOL_SIZE + 1], *c = NULL;
        pthread_mutex_lock(&pool_lock);
        size_t n = pool_expire(gone, pool_now_ms());
        for (size_t i = pool_len; i-- > 0 && c == NULL;) {
                if (pool[i].uid != uid)
                        continue;
                c = pool[i].c;
                pool[i] = pool[--pool_len];
        }
        pthread_mutex_unlock(&pool_lock);
        close_all(gone, n);
        /* Idle, nothing is due from nsboxd: anything readable is its close. */
        struct pollfd p = { .fd = c ? client_fd(c) : -1, .events = POLLIN | POLLRDHUP };
        if (c != NULL && poll(&p, 1, 0) != 0) {
                client_close(c);
                c = NULL;
        }
        return c;
}

void http_nsboxd_release(uid_t uid, struct client *c, bool reusable)
{
        if (c == NULL)
                return;
        struct client *gone[POOL_SIZE + 1];
        pthread_mutex_lock(&pool_lock);
        size_t n = pool_expire(gone, pool_now_ms()), owned = 0;
        for (size_t i = 0; i < pool_len; i++)
                owned += pool[i].uid == uid;
        if (reusable && pool_len < POOL_SIZE && owned < POOL_PER_OWNER)
                pool[pool_len++] = (struct pooled){ .c = c, .uid = uid, .since_ms = pool_now_ms() };
        else
                gone[n++] = c;
        pthread_mutex_unlock(&pool_lock);
        close_all(gone, n);
}

int http_nsboxd_take(const struct http_request *r, struct client **out, json_t **error, nsbox_error_t **err)
{
        *error = NULL;
        *out = pool_take(r->uid);
        return *out != NULL ? 0 : http_nsboxd_connect(r, out, error, err);
}

/* Whether the HTTP client's socket, readable while its call waited, says
 * the client left: EOF or an error, or a FIN after bytes still unread (a
 * TLS close_notify). Bytes alone are a pipelined request: still there. */
bool http_client_left(int fd)
{
        char byte;
        ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                return true;
        struct pollfd p = { .fd = fd, .events = POLLRDHUP };
        return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

int http_client_call_fd(int fd, struct client *c, const char *method, json_t *params, json_t **result,
                        json_t **error, nsbox_error_t **err)
{
        long long id;
        *error = NULL;
        int ret = client_send(c, method, params, &id, err);
        if (ret < 0)
                return ret;
        /* An HTTP client that times out closes its socket (and may send the
         * request again: agent-sandbox's SDK retries a POST five times on a
         * read timeout). Its socket turns readable then, which stops the
         * wait; the caller closes the nsboxd connection, and nsboxd ends
         * the call (it kills an exec whose client left), so a retried
         * command does not go on running beside its retry. */
        client_set_interrupt_fd(c, fd);
        for (;;) {
                ret = client_wait(c, id, NULL, NULL, result, error, err);
                if (ret != -EINTR)
                        break;
                nsbox_error_free(err);
                if (http_client_left(fd)) {
                        ret = nsbox_refuse(err, ECONNABORTED, "the HTTP client went away");
                        break;
                }
                client_set_interrupt_fd(c, -1); /* a pipelined request: wait for the answer alone */
        }
        client_set_interrupt_fd(c, -1);
        return ret;
}

int http_client_call(const struct http_request *r, struct client *c, const char *method, json_t *params,
                     json_t **result, json_t **error, nsbox_error_t **err)
{
        const union MHD_ConnectionInfo *info =
            r->connection ? MHD_get_connection_info(r->connection, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
        return http_client_call_fd(info ? info->connect_fd : -1, c, method, params, result, error, err);
}

int http_call(const struct http_request *r, const char *method, json_t *params, json_t **result,
              json_t **error, nsbox_error_t **err)
{
        struct client *c = NULL;
        int ret = http_nsboxd_connect(r, &c, error, err);
        if (ret < 0)
                return ret;
        ret = http_client_call(r, c, method, params, result, error, err);
        client_close(c);
        return ret;
}
