/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http's calls to nsboxd (nsboxd.h): each request's own connection,
 * made its owner's with auth.act_as when there are tokens. */
#include "nsboxd.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
