/* SPDX-License-Identifier: Apache-2.0 */
/* Who is on the other end of an exposed port: the uid owning a loopback TCP peer (sock_diag). */
#include "peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

static struct nl_sock *diag;

struct answer {
        bool found;
        uid_t uid;
};

static int on_answer(struct nl_msg *msg, void *arg)
{
        struct answer *a = arg;
        struct nlmsghdr *h = nlmsg_hdr(msg);
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || nlmsg_datalen(h) < (int)sizeof(struct inet_diag_msg))
                return NL_SKIP;
        const struct inet_diag_msg *m = nlmsg_data(h);
        a->found = true;
        a->uid = m->idiag_uid;
        return NL_OK;
}

int peer_init(void)
{
        diag = nl_socket_alloc();
        if (diag == NULL)
                return -ENOMEM;
        int r = nl_connect(diag, NETLINK_SOCK_DIAG);
        if (r < 0) {
                nl_socket_free(diag);
                diag = NULL;
                return -EIO;
        }
        /* One answer a question: the socket, or an error; no acknowledgement
         * left behind to be taken for the next question's answer. */
        nl_socket_disable_auto_ack(diag);
        nl_socket_modify_cb(diag, NL_CB_VALID, NL_CB_CUSTOM, on_answer, NULL);
        return 0;
}

int peer_uid(int fd, uid_t *uid)
{
        struct sockaddr_in local, remote;
        socklen_t ll = sizeof(local), rl = sizeof(remote);
        if (diag == NULL)
                return -ENOTCONN;
        if (getsockname(fd, (struct sockaddr *)&local, &ll) < 0 ||
            getpeername(fd, (struct sockaddr *)&remote, &rl) < 0)
                return -errno;
        if (local.sin_family != AF_INET || remote.sin_family != AF_INET)
                return -EAFNOSUPPORT;
        /* The peer's socket: its source is our remote end, its destination us. */
        struct inet_diag_req_v2 req = {
                .sdiag_family = AF_INET,
                .sdiag_protocol = IPPROTO_TCP,
                .idiag_states = ~0u,
                .id = {
                        .idiag_sport = remote.sin_port,
                        .idiag_dport = local.sin_port,
                        .idiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE },
                },
        };
        memcpy(req.id.idiag_src, &remote.sin_addr, sizeof(remote.sin_addr));
        memcpy(req.id.idiag_dst, &local.sin_addr, sizeof(local.sin_addr));
        struct answer a = { 0 };
        nl_socket_modify_cb(diag, NL_CB_VALID, NL_CB_CUSTOM, on_answer, &a);
        int r = nl_send_simple(diag, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, &req, sizeof(req));
        if (r >= 0)
                r = nl_recvmsgs_default(diag);
        if (r < 0)
                return r == -NLE_OBJ_NOTFOUND ? -ENOENT : -EIO;
        if (!a.found)
                return -ENOENT;
        *uid = a.uid;
        return 0;
}
