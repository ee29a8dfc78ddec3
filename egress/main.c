/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-egress --control-fd N --netns-fd M --uid U --gid G [--dns-servers "IP[:PORT],..."]
 *              [--lease-fd L --keep-fd K --grace SECONDS]
 *
 * With --lease-fd (nsboxd's live restore) the proxy outlives nsboxd: the
 * hangup of L says nsboxd is gone, and the proxy serves on, keeping K (a
 * copy of nsboxd's end of the control socket) and M for a next nsboxd to
 * take back with pidfd_getfd; with no new lease in SECONDS it ends itself.
 *
 * Started by nsboxd as root. A socket factory thread enters the egress
 * netns (fd M); then the whole process drops to U:G with no capabilities,
 * no_new_privs and not dumpable, and serves nsboxd's control socket (fd N,
 * SOCK_SEQPACKET, one JSON object per message, fds by SCM_RIGHTS).
 *
 * The top of nsbox-egress (core.h <- dns.h <- proxy.h <- here): the
 * control messages that add and remove sandboxes and their exposed ports,
 * the socket factory, the epoll loop and the dispatch of its events. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "cleanup.h"
#include "core.h"
#include "dns.h"
#include "egress_proto.h"
#include "json_cleanup.h"
#include "log.h"
#include "peer.h"
#include "proxy.h"

#define CONTROL_MSG_MAX 65536
#define CONTROL_FDS_MAX 4
#define TICK_MS         200
#define HOST_REFRESH_MS 5000

/* --- nsboxd's control messages (add, remove, policy, secrets, expose,
 * unexpose; lease and adopt, of live restore) ------------------------------ */

static void send_error(const char *op, const char *sandbox, const char *message)
{
        log_error("control %s%s%s: %s", op ? op : "message", sandbox ? " sandbox " : "",
                  sandbox ? sandbox : "", message);
        egress_send_event(json_pack("{s:s, s:s?, s:s?, s:s}", "event", "error", "op", op, "sandbox", sandbox,
                                    "message", message));
}

/* Freed after the epoll batch, which may still name its listener. */
static struct expose *graveyard_exposes;

static void expose_close(struct expose *e)
{
        egress.n_listener_fds--;
        egress_unwatch(&e->listener);
        close(e->listener.fd);
        e->listener.fd = -1;
        e->next = graveyard_exposes;
        graveyard_exposes = e;
}

/* Sandboxes are freed at once: the epoll batch may still name their
 * watches, so those are detached first (fd -1 and obj NULL are skipped). */
static struct egress_sandbox *graveyard_sandboxes;

static void sandbox_remove(struct egress_sandbox *sb)
{
        for (struct egress_sandbox **pp = &egress.sandboxes; *pp != NULL; pp = &(*pp)->next)
                if (*pp == sb) {
                        *pp = sb->next;
                        break;
                }
        sb->removed = true;
        while (sb->conns != NULL)
                proxy_conn_close(sb->conns);
        while (sb->exposes != NULL) {
                struct expose *e = sb->exposes;
                sb->exposes = e->next;
                expose_close(e);
        }
        dns_sandbox_gone(sb);
        egress.n_listener_fds -= 2;
        egress_unwatch(&sb->tcp);
        egress_unwatch(&sb->dns);
        close(sb->tcp.fd);
        close(sb->dns.fd);
        sb->tcp.fd = sb->dns.fd = -1;
        netpolicy_free(sb->policy);
        sb->policy = NULL;
        inject_unref(sb->secrets);
        sb->secrets = NULL;
        intercept_ca_unref(sb->ca);
        sb->ca = NULL;
        sb->next = graveyard_sandboxes;
        graveyard_sandboxes = sb;
}

static int set_nonblock(int fd)
{
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;
        return 0;
}

static int socket_is(int fd, int type)
{
        int t = 0;
        socklen_t len = sizeof(t);
        return getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &len) == 0 && t == type;
}

/* A message's "secrets" and "tls" (the sandbox's CA): both NULL when it
 * has none; NULL, or why not. */
static const char *parse_secrets(json_t *msg, struct inject_secrets **secrets, struct intercept_ca **ca)
{
        const char *why = NULL;
        *ca = NULL;
        *secrets = inject_parse(json_object_get(msg, "secrets"), &why);
        if (why != NULL)
                return why;
        json_t *tls = json_object_get(msg, "tls");
        if (tls != NULL && (*ca = intercept_ca_parse(tls, &why)) == NULL) {
                inject_unref(*secrets);
                *secrets = NULL;
                return why;
        }
        return NULL;
}

static const char *op_add(json_t *msg, const char *id, int *fds, size_t n_fds)
{
        static char why[512];
        const char *address = json_string_value(json_object_get(msg, "address"));
        uint32_t addr;
        if (address == NULL || !netpolicy_parse_ipv4(address, strlen(address), &addr))
                return "\"address\" is not an IPv4 address";
        if (n_fds != 2 || !socket_is(fds[0], SOCK_STREAM) || !socket_is(fds[1], SOCK_DGRAM))
                return "add needs two fds: a TCP listener and a UDP socket";
        if (egress_sandbox_find(id) != NULL)
                return "the sandbox is already added";
        struct netpolicy *policy = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (netpolicy_parse(json_object_get(msg, "policy"), &policy, &err) < 0) {
                snprintf(why, sizeof(why), "%s", err->message);
                return why;
        }
        struct inject_secrets *secrets;
        struct intercept_ca *ca;
        const char *bad_secrets = parse_secrets(msg, &secrets, &ca);
        if (bad_secrets != NULL) {
                netpolicy_free(policy);
                return bad_secrets;
        }
        struct sockaddr_in gw;
        socklen_t glen = sizeof(gw);
        if (getsockname(fds[0], (struct sockaddr *)&gw, &glen) < 0 || gw.sin_family != AF_INET ||
            set_nonblock(fds[0]) < 0 || set_nonblock(fds[1]) < 0) {
                netpolicy_free(policy);
                inject_unref(secrets);
                intercept_ca_unref(ca);
                return "the listener is not an IPv4 socket";
        }
        struct egress_sandbox *sb = calloc(1, sizeof(*sb));
        if (sb == NULL) {
                netpolicy_free(policy);
                inject_unref(secrets);
                intercept_ca_unref(ca);
                return "out of memory";
        }
        sb->secrets = secrets;
        sb->ca = ca;
        snprintf(sb->id, sizeof(sb->id), "%s", id);
        sb->address = addr;
        sb->gateway = ntohl(gw.sin_addr.s_addr);
        sb->policy = policy;
        sb->refused_tokens = EGRESS_REFUSED_BURST;
        sb->tcp = (struct watch){ .kind = WATCH_TCP_LISTENER, .fd = steal_fd(&fds[0]), .obj = sb };
        sb->dns = (struct watch){ .kind = WATCH_DNS, .fd = steal_fd(&fds[1]), .obj = sb };
        sb->next = egress.sandboxes;
        egress.sandboxes = sb;
        egress.n_listener_fds += 2;
        egress_watch(&sb->tcp, EPOLLIN);
        egress_watch(&sb->dns, EPOLLIN);
        return NULL;
}

static void lease_watch(int fd)
{
        egress.lease = (struct watch){ .kind = WATCH_LEASE, .fd = fd };
        egress_watch(&egress.lease, EPOLLIN);
        egress.orphan_since_ms = 0;
}

/* nsboxd's end of the lease hung up: nsboxd is gone. Connections carry on;
 * a next nsboxd has the grace to take the proxy over (op "lease"). */
static void lease_read(void)
{
        char byte;
        ssize_t n = recv(egress.lease.fd, &byte, 1, MSG_DONTWAIT);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
                return;
        egress_unwatch(&egress.lease);
        close(egress.lease.fd);
        egress.lease.fd = -1;
        egress.orphan_since_ms = egress_now_ms();
        log_info("nsboxd is gone: waiting %lld s for the next one (live restore)",
                 (long long)(egress.grace_ms / 1000));
}

/* A next nsboxd's lease (one fd: its peer is that nsboxd's). */
static const char *op_lease(int *fds, size_t n_fds)
{
        if (egress.grace_ms == 0)
                return "this proxy was started without --lease-fd";
        if (n_fds != 1 || !socket_is(fds[0], SOCK_SEQPACKET))
                return "lease needs one fd: a SOCK_SEQPACKET socket";
        if (egress.lease.fd >= 0) {
                egress_unwatch(&egress.lease);
                close(egress.lease.fd);
        }
        lease_watch(steal_fd(&fds[0]));
        log_info("adopted by a new nsboxd (live restore)");
        return NULL;
}

/* A next nsboxd takes the proxy over: the stats so far are sent, then one
 * "adopt" event per sandbox (the numbers of the fds it holds, for
 * pidfd_getfd, and its stats so far), then "adopted" with the protocol. */
static const char *op_adopt(void)
{
        if (egress.grace_ms == 0)
                return "this proxy was started without --lease-fd";
        egress_send_stats();
        for (struct egress_sandbox *sb = egress.sandboxes; sb != NULL; sb = sb->next) {
                json_t *exposed = json_array();
                for (struct expose *e = sb->exposes; e != NULL; e = e->next)
                        json_array_append_new(
                            exposed, json_pack("{s:i, s:i}", "port", (int)e->port, "fd", e->listener.fd));
                struct in_addr gw = { .s_addr = htonl(sb->gateway) };
                char gateway[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &gw, gateway, sizeof(gateway));
                egress_send_event(json_pack("{s:s, s:s, s:s, s:i, s:i, s:o, s:o}", "event", "adopt",
                                            "sandbox", sb->id, "gateway", gateway, "tcp", sb->tcp.fd, "dns",
                                            sb->dns.fd, "exposed", exposed, "stats",
                                            egress_counts_json(&sb->sent)));
        }
        egress_send_event(json_pack("{s:s, s:i}", "event", "adopted", "protocol", EGRESS_PROTOCOL));
        return NULL;
}

static const char *control_op(json_t *msg, int *fds, size_t n_fds, const char **op_out, const char **id_out)
{
        static char why[512];
        const char *op = json_string_value(json_object_get(msg, "op"));
        const char *id = json_string_value(json_object_get(msg, "sandbox"));
        *op_out = op;
        *id_out = id;
        if (op == NULL)
                return "no \"op\"";
        if (strcmp(op, "lease") == 0)
                return op_lease(fds, n_fds);
        if (strcmp(op, "adopt") == 0)
                return n_fds == 0 ? op_adopt() : "wrong number of fds";
        if (id == NULL || id[0] == '\0' || strlen(id) >= sizeof(((struct egress_sandbox *)0)->id))
                return "\"sandbox\" is not a sandbox id";
        if (strcmp(op, "add") == 0)
                return op_add(msg, id, fds, n_fds);
        if (n_fds != (strcmp(op, "expose") == 0 ? 1u : 0u))
                return "wrong number of fds";
        struct egress_sandbox *sb = egress_sandbox_find(id);
        if (sb == NULL)
                return "no such sandbox";
        if (strcmp(op, "remove") == 0) {
                sandbox_remove(sb);
                return NULL;
        }
        if (strcmp(op, "policy") == 0) {
                struct netpolicy *policy = NULL;
                _cleanup_error_ nsbox_error_t *err = NULL;
                if (netpolicy_parse(json_object_get(msg, "policy"), &policy, &err) < 0) {
                        snprintf(why, sizeof(why), "%s", err->message);
                        return why;
                }
                netpolicy_free(sb->policy);
                sb->policy = policy;
                return NULL;
        }
        if (strcmp(op, "secrets") == 0) {
                /* Connections being intercepted keep the secrets they started with. */
                struct inject_secrets *secrets;
                struct intercept_ca *ca;
                const char *bad = parse_secrets(msg, &secrets, &ca);
                if (bad != NULL)
                        return bad;
                inject_unref(sb->secrets);
                intercept_ca_unref(sb->ca);
                sb->secrets = secrets;
                sb->ca = ca;
                return NULL;
        }
        json_t *port_json = json_object_get(msg, "port");
        json_int_t port = json_integer_value(port_json);
        if (!json_is_integer(port_json) || port < 1 || port > 65535)
                return "\"port\" is not 1..65535";
        struct expose **pp = &sb->exposes;
        for (; *pp != NULL; pp = &(*pp)->next)
                if ((*pp)->port == port)
                        break;
        if (strcmp(op, "unexpose") == 0) {
                if (*pp == NULL)
                        return "the port is not exposed";
                struct expose *e = *pp;
                *pp = e->next;
                expose_close(e);
                return NULL;
        }
        if (strcmp(op, "expose") != 0)
                return "unknown op";
        if (*pp != NULL)
                return "the port is already exposed";
        json_t *owner = json_object_get(msg, "owner");
        if (!json_is_integer(owner) || json_integer_value(owner) < 0 ||
            json_integer_value(owner) > UINT32_MAX - 1)
                return "\"owner\" is not a uid";
        if (!socket_is(fds[0], SOCK_STREAM) || set_nonblock(fds[0]) < 0)
                return "expose needs a listening TCP socket";
        struct expose *e = calloc(1, sizeof(*e));
        if (e == NULL)
                return "out of memory";
        e->sandbox = sb;
        e->port = (uint16_t)port;
        e->owner = (uid_t)json_integer_value(owner);
        e->listener = (struct watch){ .kind = WATCH_EXPOSE_LISTENER, .fd = steal_fd(&fds[0]), .obj = e };
        e->next = sb->exposes;
        sb->exposes = e;
        egress.n_listener_fds++;
        egress_watch(&e->listener, EPOLLIN);
        return NULL;
}

static void control_read(void)
{
        for (int i = 0; i < 16; i++) {
                static char buf[CONTROL_MSG_MAX + 1];
                union {
                        char space[CMSG_SPACE(sizeof(int) * CONTROL_FDS_MAX)];
                        struct cmsghdr align;
                } cbuf;
                struct iovec iov = { .iov_base = buf, .iov_len = CONTROL_MSG_MAX };
                struct msghdr mh = { .msg_iov = &iov,
                                     .msg_iovlen = 1,
                                     .msg_control = cbuf.space,
                                     .msg_controllen = sizeof(cbuf.space) };
                ssize_t n = recvmsg(egress.control.fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return;
                        log_error("control socket: %s", strerror(errno));
                        exit(1);
                }
                if (n == 0) /* nsboxd is gone (and kept no copy of its end): so are its sandboxes */
                        exit(0);
                int fds[CONTROL_FDS_MAX];
                size_t n_fds = 0;
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
                        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                                continue;
                        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        for (size_t j = 0; j < k && n_fds < CONTROL_FDS_MAX; j++)
                                memcpy(&fds[n_fds++], CMSG_DATA(c) + j * sizeof(int), sizeof(int));
                }
                const char *op = NULL, *id = NULL, *why;
                _cleanup_json_ json_t *msg = NULL;
                if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
                        why = "message or fds truncated";
                } else {
                        buf[n] = '\0';
                        msg = json_loadb(buf, (size_t)n, 0, NULL);
                        why =
                            json_is_object(msg) ? control_op(msg, fds, n_fds, &op, &id) : "not a JSON object";
                }
                for (size_t j = 0; j < n_fds; j++)
                        if (fds[j] >= 0)
                                close(fds[j]);
                if (why != NULL)
                        send_error(op, id, why);
        }
}

/* --- the socket factory ----------------------------------------------------- */

struct factory_args {
        int sock, netns_fd, ready;
};

/* In the egress netns for good: each request byte gets one TCP socket of
 * that netns back (or an errno), in order. Blocking is its whole job. */
static void *factory_main(void *arg)
{
        struct factory_args *a = arg;
        int r = setns(a->netns_fd, CLONE_NEWNET) < 0 ? errno : 0;
        (void)!write(a->ready, &r, sizeof(r));
        if (r != 0)
                return NULL;
        for (;;) {
                uint8_t req;
                ssize_t n = recv(a->sock, &req, 1, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return NULL;
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                int error = fd < 0 ? errno : 0;
                union {
                        char space[CMSG_SPACE(sizeof(int))];
                        struct cmsghdr align;
                } cbuf;
                struct iovec iov = { .iov_base = &error, .iov_len = sizeof(error) };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                if (fd >= 0) {
                        mh.msg_control = cbuf.space;
                        mh.msg_controllen = sizeof(cbuf.space);
                        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                        c->cmsg_level = SOL_SOCKET;
                        c->cmsg_type = SCM_RIGHTS;
                        c->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(c), &fd, sizeof(int));
                }
                while (sendmsg(a->sock, &mh, MSG_NOSIGNAL) < 0 && errno == EINTR)
                        ;
                if (fd >= 0)
                        close(fd);
        }
}

static void factory_read(void)
{
        for (int i = 0; i < 64; i++) {
                int error = 0, fd = -1;
                union {
                        char space[CMSG_SPACE(sizeof(int))];
                        struct cmsghdr align;
                } cbuf;
                struct iovec iov = { .iov_base = &error, .iov_len = sizeof(error) };
                struct msghdr mh = { .msg_iov = &iov,
                                     .msg_iovlen = 1,
                                     .msg_control = cbuf.space,
                                     .msg_controllen = sizeof(cbuf.space) };
                ssize_t n = recvmsg(egress.factory.fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                if (n <= 0) {
                        log_error("the socket factory thread is gone");
                        exit(1);
                }
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                if (c != NULL && c->cmsg_type == SCM_RIGHTS)
                        memcpy(&fd, CMSG_DATA(c), sizeof(int));
                struct factory_wait *f = egress.factory_head;
                if (f == NULL) {
                        if (fd >= 0)
                                close(fd);
                        continue;
                }
                egress.factory_head = f->next;
                if (egress.factory_head == NULL)
                        egress.factory_tail = &egress.factory_head;
                proxy_factory_reply(f->conn, fd, error);
                free(f);
        }
}

static int start_factory(int netns_fd, nsbox_error_t **err)
{
        int sv[2], ready[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return nsbox_error(err, errno, "socketpair");
        if (pipe2(ready, O_CLOEXEC) < 0)
                return nsbox_error(err, errno, "pipe");
        static struct factory_args args;
        args = (struct factory_args){ .sock = sv[1], .netns_fd = netns_fd, .ready = ready[1] };
        pthread_t t;
        int r = pthread_create(&t, NULL, factory_main, &args);
        if (r != 0)
                return nsbox_error(err, r, "pthread_create");
        pthread_detach(t);
        int status = EIO;
        if (read(ready[0], &status, sizeof(status)) != sizeof(status))
                status = EIO;
        close(ready[0]);
        close(ready[1]);
        if (status != 0)
                return nsbox_error(err, status, "setns into the egress netns");
        egress.factory = (struct watch){ .kind = WATCH_FACTORY, .fd = sv[0] };
        egress.factory_tail = &egress.factory_head;
        return set_nonblock(sv[0]);
}

static int drop_privileges(uid_t uid, gid_t gid, nsbox_error_t **err)
{
        if (setgroups(0, NULL) < 0)
                return nsbox_error(err, errno, "setgroups");
        if (setresgid(gid, gid, gid) < 0)
                return nsbox_error(err, errno, "setresgid %u", gid);
        /* From uid 0 to another uid without SECBIT_KEEP_CAPS the kernel
         * clears the permitted, effective and ambient sets. */
        if (setresuid(uid, uid, uid) < 0)
                return nsbox_error(err, errno, "setresuid %u", uid);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return nsbox_error(err, errno, "no_new_privs");
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                return nsbox_error(err, errno, "PR_SET_DUMPABLE");
        return 0;
}

static int parse_id(const char *text, unsigned *out)
{
        char *end;
        errno = 0;
        unsigned long v = strtoul(text, &end, 10);
        if (errno != 0 || end == text || *end != '\0' || v > 0x7fffffff)
                return -EINVAL;
        *out = (unsigned)v;
        return 0;
}

static void usage(void)
{
        fprintf(stderr, "usage: nsbox-egress --control-fd N --netns-fd M --uid U --gid G "
                        "[--dns-servers \"IP[:PORT],...\"] [--ca-file PEM] "
                        "[--lease-fd L --keep-fd K --grace SECONDS]\n");
        exit(2);
}

static void dispatch(struct watch *w, uint32_t events)
{
        if (w->fd < 0)
                return;
        switch (w->kind) {
        case WATCH_CONTROL:
                if (events & EPOLLOUT)
                        egress_control_flush();
                if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                        control_read();
                break;
        case WATCH_LEASE:
                lease_read();
                break;
        case WATCH_FACTORY:
                factory_read();
                break;
        case WATCH_TIMER: {
                uint64_t ticks;
                (void)!read(w->fd, &ticks, sizeof(ticks));
                int64_t now = egress_now_ms();
                dns_ares_timeouts();
                proxy_timeouts(now);
                if (now - egress.last_second_ms >= 1000) {
                        egress.last_second_ms = now;
                        egress_send_stats();
                }
                if (egress.orphan_since_ms != 0 && now - egress.orphan_since_ms >= egress.grace_ms) {
                        log_info("no nsboxd took the proxy over in %lld s: ending",
                                 (long long)(egress.grace_ms / 1000));
                        exit(0);
                }
                if (now - egress.last_host_refresh_ms >= HOST_REFRESH_MS) {
                        egress.last_host_refresh_ms = now;
                        egress_refresh_host_addrs();
                }
                break;
        }
        case WATCH_RESUME:
                egress_resume_listeners();
                break;
        case WATCH_ARES:
                dns_ares_event(w, events);
                break;
        case WATCH_TCP_LISTENER:
                proxy_accept(w->obj);
                break;
        case WATCH_DNS:
                dns_receive(w->obj);
                break;
        case WATCH_EXPOSE_LISTENER:
                proxy_expose_accept(w->obj);
                break;
        case WATCH_CONN_CLIENT:
        case WATCH_CONN_UPSTREAM:
                proxy_conn_event(w->obj, w->kind == WATCH_CONN_UPSTREAM, events);
                break;
        }
}

int main(int argc, char **argv)
{
        static const struct option options[] = {
                { "control-fd", required_argument, NULL, 'c' },  { "netns-fd", required_argument, NULL, 'n' },
                { "uid", required_argument, NULL, 'u' },         { "gid", required_argument, NULL, 'g' },
                { "dns-servers", required_argument, NULL, 'd' }, { "ca-file", required_argument, NULL, 'a' },
                { "lease-fd", required_argument, NULL, 'l' },    { "keep-fd", required_argument, NULL, 'k' },
                { "grace", required_argument, NULL, 'G' },       { NULL, 0, NULL, 0 },
        };
        unsigned control_fd = ~0u, netns_fd = ~0u, uid = ~0u, gid = ~0u, lease_fd = ~0u, keep_fd = ~0u,
                 grace = 0;
        const char *dns_servers = NULL, *ca_file = NULL;
        int opt;
        while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
                int r = 0;
                switch (opt) {
                case 'c':
                        r = parse_id(optarg, &control_fd);
                        break;
                case 'n':
                        r = parse_id(optarg, &netns_fd);
                        break;
                case 'u':
                        r = parse_id(optarg, &uid);
                        break;
                case 'g':
                        r = parse_id(optarg, &gid);
                        break;
                case 'd':
                        dns_servers = optarg;
                        break;
                case 'a':
                        ca_file = optarg;
                        break;
                case 'l':
                        r = parse_id(optarg, &lease_fd);
                        break;
                case 'k':
                        r = parse_id(optarg, &keep_fd);
                        break;
                case 'G':
                        r = parse_id(optarg, &grace);
                        break;
                default:
                        usage();
                }
                if (r < 0)
                        usage();
        }
        if (optind != argc || control_fd == ~0u || netns_fd == ~0u || uid == ~0u || gid == ~0u ||
            (lease_fd == ~0u) != (keep_fd == ~0u) || (lease_fd != ~0u && grace == 0))
                usage();
        if (uid == 0 || gid == 0) {
                log_error("nsbox-egress: --uid and --gid must not be 0 (root)");
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        /* Two fds per connection, up to EGRESS_CONN_MAX of them. */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2 * EGRESS_CONN_MAX + 1024) {
                rl.rlim_cur =
                    rl.rlim_max < 2 * EGRESS_CONN_MAX + 1024 ? rl.rlim_max : 2 * EGRESS_CONN_MAX + 1024;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        /* The connection limits follow the fds actually obtained. */
        egress.fd_limit = 1024;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
                egress.fd_limit =
                    rl.rlim_cur > 4 * EGRESS_CONN_MAX ? 4 * EGRESS_CONN_MAX : (unsigned)rl.rlim_cur;

        _cleanup_error_ nsbox_error_t *err = NULL;
        egress.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (egress.epoll_fd < 0) {
                log_error("nsbox-egress: epoll: %s", strerror(errno));
                return 1;
        }
        egress.out_tail = &egress.out_head;
        egress.control = (struct watch){ .kind = WATCH_CONTROL, .fd = (int)control_fd };
        if (set_nonblock(egress.control.fd) < 0 || !socket_is(egress.control.fd, SOCK_SEQPACKET)) {
                log_error("nsbox-egress: --control-fd %u is not a SOCK_SEQPACKET socket", control_fd);
                return 2;
        }
        fcntl(egress.control.fd, F_SETFD, FD_CLOEXEC);
        egress.lease.fd = -1;
        if (lease_fd != ~0u) {
                /* Live restore: the lease says when nsboxd is gone; the copy
                 * of nsboxd's end of the control socket (keep_fd) keeps the
                 * socket open for the next one, and so does netns_fd the
                 * egress namespace: both stay open, never used here. */
                if (!socket_is((int)lease_fd, SOCK_SEQPACKET) || !socket_is((int)keep_fd, SOCK_SEQPACKET) ||
                    set_nonblock((int)lease_fd) < 0) {
                        log_error("nsbox-egress: --lease-fd and --keep-fd must be SOCK_SEQPACKET sockets");
                        return 2;
                }
                egress.grace_ms = (int64_t)grace * 1000;
        }
        /* The CA file is read as nsboxd's uid could, before the privileges go. */
        if (peer_init() < 0) {
                log_error("nsbox-egress: no sock_diag netlink socket: exposed ports cannot tell their peers");
                return 1;
        }
        if (intercept_init(ca_file, &err) < 0 || start_factory((int)netns_fd, &err) < 0 ||
            drop_privileges(uid, gid, &err) < 0 || dns_init(dns_servers, &err) < 0) {
                log_error("nsbox-egress: %s", err->message);
                return 1;
        }
        if (lease_fd == ~0u)
                close((int)netns_fd);
        int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        struct itimerspec its = { .it_interval = { 0, TICK_MS * 1000000L },
                                  .it_value = { 0, TICK_MS * 1000000L } };
        if (tfd < 0 || timerfd_settime(tfd, 0, &its, NULL) < 0) {
                log_error("nsbox-egress: timerfd: %s", strerror(errno));
                return 1;
        }
        egress.timer = (struct watch){ .kind = WATCH_TIMER, .fd = tfd };
        egress_watch(&egress.timer, EPOLLIN);
        int rfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (rfd < 0) {
                log_error("nsbox-egress: timerfd: %s", strerror(errno));
                return 1;
        }
        egress.resume = (struct watch){ .kind = WATCH_RESUME, .fd = rfd };
        egress_watch(&egress.resume, EPOLLIN);
        egress_watch(&egress.factory, EPOLLIN);
        egress_watch(&egress.control, EPOLLIN);
        if (lease_fd != ~0u)
                lease_watch((int)lease_fd);
        egress_refresh_host_addrs();
        egress.last_second_ms = egress.last_host_refresh_ms = egress_now_ms();
        egress_send_event(json_pack("{s:s}", "event", "ready"));

        for (;;) {
                struct epoll_event events[128];
                int n = epoll_wait(egress.epoll_fd, events, ARRAY_SIZE(events), -1);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error("nsbox-egress: epoll_wait: %s", strerror(errno));
                        return 1;
                }
                for (int i = 0; i < n; i++)
                        dispatch(events[i].data.ptr, events[i].events);
                proxy_free_graveyard();
                dns_free_graveyard();
                while (graveyard_sandboxes != NULL) {
                        struct egress_sandbox *sb = graveyard_sandboxes;
                        graveyard_sandboxes = sb->next;
                        free(sb);
                }
                while (graveyard_exposes != NULL) {
                        struct expose *e = graveyard_exposes;
                        graveyard_exposes = e->next;
                        free(e);
                }
        }
}
