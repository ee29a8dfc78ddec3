/* SPDX-License-Identifier: Apache-2.0 */
/* The control channel between nsboxd and nsbox-init: fixed-size messages over SOCK_SEQPACKET. */
#include "proto.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define CTL_MAX_FDS CTL_KEEP_MAX_FDS /* the most one message carries */

ssize_t ctl_send(int sock, const void *msg, size_t len, const void *payload, size_t payload_len,
                 const int *fds, unsigned nfds)
{
        struct iovec iov[2] = {
                { .iov_base = (void *)msg, .iov_len = len },
                { .iov_base = (void *)payload, .iov_len = payload_len },
        };
        union {
                char buf[CMSG_SPACE(sizeof(int) * CTL_MAX_FDS)];
                struct cmsghdr align;
        } control;
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = payload_len > 0 ? 2 : 1 };

        if (nfds > CTL_MAX_FDS)
                return -EINVAL;
        if (nfds > 0) {
                memset(&control, 0, sizeof(control));
                mh.msg_control = control.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
        }
        ssize_t n;
        do {
                n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n < 0 ? -errno : n;
}

ssize_t ctl_recv(int sock, void *buf, size_t len, int *fds, unsigned max_fds, unsigned *nfds)
{
        struct iovec iov = { .iov_base = buf, .iov_len = len };
        union {
                char buf[CMSG_SPACE(sizeof(int) * CTL_MAX_FDS)];
                struct cmsghdr align;
        } control;
        struct msghdr mh = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = control.buf,
                .msg_controllen = sizeof(control.buf),
        };
        ssize_t n;

        *nfds = 0;
        do {
                n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;

        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                        continue;
                unsigned count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *received = (int *)CMSG_DATA(cm);
                for (unsigned i = 0; i < count; i++) {
                        if (*nfds < max_fds)
                                fds[(*nfds)++] = received[i];
                        else
                                close(received[i]); /* never keep what we did not ask for */
                }
        }
        if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
                for (unsigned i = 0; i < *nfds; i++)
                        close(fds[i]);
                *nfds = 0;
                return -EMSGSIZE;
        }
        return n;
}
