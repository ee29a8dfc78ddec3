/* SPDX-License-Identifier: Apache-2.0 */
/* Network egress, nsboxd's side: the egress namespace, each sandbox's veth, nftables, the proxy. */
#include "egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/close_range.h>
#include <linux/nsfs.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "io.h"
#include "daemon.h"
#include "egress_ca.h"
#include "egress_proto.h"
#include "json_cleanup.h"
#include "json_file.h"
#include "log.h"
#include "userns.h"
#include "netpolicy.h"
#include "network.h"
#include "proto.h"
#include "sandbox.h"
#include "secrets_keep.h"
#include "state.h"

/* Every TCP connection from a sandbox is redirected to this port of its
 * gateway, where the proxy listens; DNS to port 53 of any address, to 53. */
#define EGRESS_TCP_PORT    1
#define EGRESS_DNS_PORT    53
#define EGRESS_MAX_EXPOSED 16
#define EGRESS_REFUSALS    16
#define EGRESS_MAX_MESSAGE (64u << 10)
/* A proxy that dies again within this long is restarted after it. */
#define EGRESS_RESPAWN_MS 1000
/* Live restore: the fds the proxy keeps for a next nsboxd (nsboxd's end of
 * the control socket, the egress namespace) and its lease, as spawned; the
 * record that names it; how long a next nsboxd waits for its answers. */
#define EGRESS_CONTROL_FD 3
#define EGRESS_NETNS_FD   4
#define EGRESS_KEEP_FD    5
#define EGRESS_LEASE_FD   6
#define EGRESS_RECORD     "egress.json"
#define EGRESS_ADOPT_MS   5000

struct egress_stats {
        json_int_t bytes_in, bytes_out, connections, refused, dns_queries, secrets_injected;
};

struct egress_exposed {
        unsigned port;
        unsigned host_port;
        int fd; /* the listener on 127.0.0.1, nsboxd's copy */
};

struct egress_refusal {
        long long mono_ms;
        char text[280];
};

struct sandbox_egress {
        unsigned slot;
        struct in_addr address, gateway;
        char link[16];
        int listener, dns;   /* in the egress namespace; the proxy holds copies */
        json_t *policy;      /* as the proxy has it */
        json_t *secrets;     /* the sandbox's (policy/secrets.h), or NULL */
        struct egress_ca ca; /* with secrets: TLS to their hosts is intercepted */
        struct egress_exposed exposed[EGRESS_MAX_EXPOSED];
        unsigned n_exposed;
        struct egress_stats stats;
        struct egress_refusal refusals[EGRESS_REFUSALS];
        unsigned n_refusals; /* ever, the ring holds the last EGRESS_REFUSALS */
};

static struct {
        bool enabled;
        int host_ns, ns;
        uint32_t base; /* host order */
        unsigned n_slots;
        unsigned char *slots;
        unsigned next_slot; /* slots are taken round the pool, see attach_with */
        pid_t proxy_pid;
        struct loop_source *proxy_pidfd, *proxy_ctl;
        long long proxy_started_mono;
        int lease_fd; /* live restore: our end of the proxy's lease */
        /* A proxy adopted at start: its sandboxes ("adopt" events by id)
         * until restore_networks gives them back, and a pidfd of it to take
         * their fds with. */
        json_t *adoptable;
        int adopt_pidfd;
} egress = { .host_ns = -1, .ns = -1, .lease_fd = -1, .adopt_pidfd = -1 };

/* The egress namespace's rules: what a sandbox sends reaches the proxy or
 * nothing. Junk is dropped before conntrack sees it (raw), then a source
 * that is not the sandbox's own on its veth (nft's strict reverse-path
 * check: the kernel's rp_filter comes only after these hooks), then new
 * flows beyond a count per sandbox veth: a sandbox cannot fill the
 * conntrack table the others need. Every TCP
 * connection goes to the proxy's listener on the sandbox's gateway, every
 * DNS query to its DNS socket; nothing is forwarded; IPv6 is dropped. */
#define EGRESS_MAX_FLOWS "1024"
static const char egress_ruleset[] =
    "table ip nsbox {\n"
    "  set flows { type ifname; flags dynamic; size 65536; }\n"
    "  chain raw {\n"
    "    type filter hook prerouting priority raw; policy accept;\n"
    "    iifname \"nsb*\" fib saddr . iif oif missing drop\n"
    "    iifname \"nsb*\" meta l4proto != { tcp, udp } drop\n"
    "    iifname \"nsb*\" udp dport != 53 drop\n"
    "  }\n"
    "  chain flows {\n"
    "    type filter hook prerouting priority mangle; policy accept;\n"
    "    iifname \"nsb*\" ct state new add @flows { iifname ct count over " EGRESS_MAX_FLOWS " } drop\n"
    "  }\n"
    "  chain prerouting {\n"
    "    type nat hook prerouting priority dstnat; policy accept;\n"
    "    iifname \"nsb*\" meta l4proto tcp redirect to :1\n"
    "    iifname \"nsb*\" udp dport 53 redirect to :53\n"
    "  }\n"
    "  chain input {\n"
    "    type filter hook input priority filter; policy accept;\n"
    "    iifname \"nsb*\" fib daddr . iif type != local drop\n"
    "  }\n"
    "  chain forward {\n"
    "    type filter hook forward priority filter; policy drop;\n"
    "  }\n"
    "}\n"
    "table ip6 nsbox {\n"
    "  chain input {\n"
    "    type filter hook input priority filter; policy accept;\n"
    "    iifname \"nsb*\" drop\n"
    "  }\n"
    "  chain forward {\n"
    "    type filter hook forward priority filter; policy drop;\n"
    "  }\n"
    "}\n";

/* --- namespaces ------------------------------------------------------------ */

static int enter_netns(int fd, nsbox_error_t **err)
{
        if (setns(fd, CLONE_NEWNET) < 0)
                return nsbox_error(err, errno, "enter a network namespace");
        return 0;
}

/* Back to the host's: with the fd held since startup this cannot fail
 * short of a kernel bug, and nsboxd must not go on in the wrong namespace. */
static void leave_netns(void)
{
        if (setns(egress.host_ns, CLONE_NEWNET) < 0) {
                log_error("return to the host's network namespace: %s", strerror(errno));
                abort();
        }
}

static int write_sysctl(const char *path, const char *value, nsbox_error_t **err)
{
        char full[256];
        snprintf(full, sizeof(full), "/proc/sys/net/%s", path);
        _cleanup_close_ int fd = open(full, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, value, strlen(value)) < 0)
                return nsbox_error(err, errno, "write %s", full);
        return 0;
}

/* In the egress namespace (the caller entered it). */
static int egress_ns_setup(nsbox_error_t **err)
{
        int r;
        if ((r = network_loopback_up(err)) < 0 || (r = write_sysctl("ipv4/ip_forward", "0", err)) < 0 ||
            (r = write_sysctl("ipv4/conf/all/rp_filter", "1", err)) < 0 ||
            (r = write_sysctl("ipv4/conf/default/rp_filter", "1", err)) < 0)
                return r;
        /* A kernel without IPv6 has no such files: nothing to turn off. */
        _cleanup_error_ nsbox_error_t *ignored = NULL;
        write_sysctl("ipv6/conf/all/disable_ipv6", "1", &ignored);
        write_sysctl("ipv6/conf/default/disable_ipv6", "1", &ignored);

        struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
        if (nft == NULL)
                return nsbox_error(err, ENOMEM, "nftables context");
        nft_ctx_buffer_error(nft);
        if (nft_run_cmd_from_buffer(nft, egress_ruleset) != 0) {
                const char *why = nft_ctx_get_error_buffer(nft);
                r = nsbox_error(err, EINVAL, "load the egress namespace's nftables rules: %s",
                                why != NULL ? why : "?");
                nft_ctx_free(nft);
                return r;
        }
        nft_ctx_free(nft);
        return 0;
}

/* --- policies -------------------------------------------------------------- */

static int parse_subnet(const char *text, nsbox_error_t **err)
{
        char addr[32];
        unsigned prefix;
        struct in_addr in;
        if (sscanf(text, "%31[0-9.]/%u", addr, &prefix) != 2 || inet_pton(AF_INET, addr, &in) != 1 ||
            prefix < 8 || prefix > 28)
                return nsbox_invalid(err, "network_subnet \"%s\" must be an IPv4 CIDR from /8 to /28", text);
        uint32_t base = ntohl(in.s_addr);
        uint32_t mask = prefix == 0 ? 0 : ~0u << (32 - prefix);
        if (base & ~mask)
                return nsbox_invalid(err, "network_subnet \"%s\" has host bits set", text);
        egress.base = base;
        /* Slot 0 is left out: its gateway is the address every image's
         * resolv.conf names (any address on port 53 reaches the proxy). */
        egress.n_slots = (1u << (32 - prefix)) / 4;
        return 0;
}

/* The host's own IPv4 addresses (host order), which a client's policy may
 * not open either. */
static size_t host_addresses(uint32_t *out, size_t max)
{
        struct ifaddrs *list;
        size_t n = 0;
        if (getifaddrs(&list) < 0)
                return 0;
        for (struct ifaddrs *a = list; a != NULL && n < max; a = a->ifa_next) {
                if (a->ifa_addr != NULL && a->ifa_addr->sa_family == AF_INET)
                        out[n++] = ntohl(((struct sockaddr_in *)a->ifa_addr)->sin_addr.s_addr);
        }
        freeifaddrs(list);
        return n;
}

static int validate_policy(json_t *object, bool client, nsbox_error_t **err)
{
        _cleanup_(netpolicy_freep) struct netpolicy *parsed = NULL;
        int r = netpolicy_parse(object, &parsed, err);
        if (r < 0)
                return r;
        if (netpolicy_allows_loopback(parsed))
                return nsbox_invalid(err,
                                     "an allow entry in 127.0.0.0/8: the host's loopback is never reachable "
                                     "from a sandbox (a sandbox's own 127.0.0.1, its lo, needs no policy)");
        uint32_t host[64];
        if (client && netpolicy_unblocks_special(parsed, host, host_addresses(host, ARRAY_SIZE(host))))
                return nsbox_invalid(err, "a client's network policy may not allow private, loopback, "
                                          "link-local, the host's own or other special addresses");
        return 0;
}

/* The POLICY object the proxy gets for `policy`, or NULL with err set. */
static json_t *policy_object(const struct sandbox_policy *policy, nsbox_error_t **err)
{
        if (!egress.enabled)
                return nsbox_invalid(err,
                                     "this nsboxd has no network policies (network_policies in its config)"),
                       NULL;
        if (policy->network_custom != NULL) {
                if (!nsboxd.config.allow_client_network_policies)
                        return nsbox_invalid(err, "this nsboxd takes only the operator's network policies by "
                                                  "name (allow_client_network_policies is 0)"),
                               NULL;
                if (validate_policy(policy->network_custom, true, err) < 0)
                        return NULL;
                return json_incref(policy->network_custom);
        }
        json_t *named = json_object_get(nsboxd.config.network_policies, policy->network);
        if (named == NULL)
                return nsbox_invalid(err, "unknown network policy \"%s\"", policy->network), NULL;
        return json_incref(named);
}

/* A daemon in a user namespace has no host network namespace to route
 * sandboxes through: every network but "none" is refused as such. */
static int refuse_without_host_root(nsbox_error_t **err)
{
        return nsbox_refuse(err, ENOTSUP,
                            "network egress needs host root (a veth pair into the host's network namespace "
                            "and nftables there): this nsboxd runs in a user namespace, so sandboxes get "
                            "network \"none\" only");
}

int egress_check(const struct sandbox_policy *policy, nsbox_error_t **err)
{
        if (strcmp(policy->network, "none") == 0)
                return 0;
        if (userns_active())
                return refuse_without_host_root(err);
        json_t *object = policy_object(policy, err);
        if (object == NULL)
                return -EINVAL;
        json_decref(object);
        return 0;
}

/* --- the proxy ------------------------------------------------------------- */

static void proxy_send(json_t *message, const int *fds, unsigned nfds);
static int proxy_spawn(nsbox_error_t **err);

static json_t *add_message(const struct sandbox *sb)
{
        char address[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &sb->egress->address, address, sizeof(address));
        const struct egress_ca *ca = &sb->egress->ca;
        json_t *tls = ca->cert_pem ? json_pack("{s:s, s:s}", "cert", ca->cert_pem, "key", ca->key_pem) : NULL;
        return json_pack("{s:s, s:s, s:s, s:O, s:O*, s:o*}", "op", "add", "sandbox", sb->id, "address",
                         address, "policy", sb->egress->policy, "secrets", sb->egress->secrets, "tls", tls);
}

static void proxy_send_expose(const struct sandbox *sb, const struct egress_exposed *x)
{
        _cleanup_json_ json_t *m = json_pack("{s:s, s:s, s:i, s:I}", "op", "expose", "sandbox", sb->id,
                                             "port", (int)x->port, "owner", (json_int_t)sb->owner);
        proxy_send(m, &x->fd, 1);
}

/* A new proxy knows nothing: tell it every sandbox with network. */
static void proxy_sync(void)
{
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if (sb->egress == NULL)
                        continue;
                _cleanup_json_ json_t *m = add_message(sb);
                int fds[2] = { sb->egress->listener, sb->egress->dns };
                proxy_send(m, fds, 2);
                for (unsigned i = 0; i < sb->egress->n_exposed; i++)
                        proxy_send_expose(sb, &sb->egress->exposed[i]);
        }
}

static void proxy_kill(void)
{
        if (egress.proxy_pidfd != NULL)
                syscall(SYS_pidfd_send_signal, egress.proxy_pidfd->fd, SIGKILL, NULL, 0);
}

static void proxy_send(json_t *message, const int *fds, unsigned nfds)
{
        if (egress.proxy_ctl == NULL)
                return; /* proxy_sync tells the next one */
        _cleanup_free_ char *body = json_dumps(message, JSON_COMPACT);
        if (body == NULL || strlen(body) > EGRESS_MAX_MESSAGE) {
                log_error("egress: a message for the proxy could not be encoded");
                return;
        }
        ssize_t n = ctl_send(egress.proxy_ctl->fd, body, strlen(body), NULL, 0, fds, nfds);
        explicit_bzero(body, strlen(body)); /* an add message carries the sandbox's secrets */
        if (n < 0) {
                /* A proxy that does not keep up with its control socket is
                 * restarted: the new one is told everything again. */
                log_error("egress: the proxy does not take its messages (%s); restarting it",
                          strerror((int)-n));
                proxy_kill();
        }
}

static void record_refusal(struct sandbox *sb, json_t *event)
{
        const char *name = json_string_value(json_object_get(event, "name"));
        const char *address = json_string_value(json_object_get(event, "address"));
        const char *reason = json_string_value(json_object_get(event, "reason"));
        json_int_t port = json_integer_value(json_object_get(event, "port"));
        struct egress_refusal *r = &sb->egress->refusals[sb->egress->n_refusals++ % EGRESS_REFUSALS];
        r->mono_ms = now_monotonic_ms();
        const char *shown = name != NULL ? name : address != NULL ? address : "?";
        /* A refused DNS question: the program never got to ask for a port. */
        if (json_is_true(json_object_get(event, "lookup")))
                snprintf(r->text, sizeof(r->text), "%.200s (name lookup)", shown);
        else
                snprintf(r->text, sizeof(r->text), "%.200s:%lld", shown, (long long)port);
        log_limited(sb->id, LOG_LEVEL_WARN, "sandbox %s: network policy refused %s%s%s (%s)", sb->id, r->text,
                    name != NULL && address != NULL ? " at " : "",
                    name != NULL && address != NULL ? address : "", reason != NULL ? reason : "not allowed");
}

static void add_stat(json_int_t *total, json_t *from, const char *key)
{
        json_int_t v = json_integer_value(json_object_get(from, key));
        if (v > 0)
                *total += v;
}

/* The proxy's counts (a "stats" event's deltas, or an adopted sandbox's
 * totals so far) added up; what is not a count of it is taken as 0. */
static void stats_add(struct egress_stats *total, json_t *from)
{
        add_stat(&total->bytes_in, from, "bytes_in");
        add_stat(&total->bytes_out, from, "bytes_out");
        add_stat(&total->connections, from, "connections");
        add_stat(&total->refused, from, "refused");
        add_stat(&total->dns_queries, from, "dns_queries");
        add_stat(&total->secrets_injected, from, "secrets_injected");
}

static void proxy_event(json_t *event)
{
        const char *kind = json_string_value(json_object_get(event, "event"));
        if (kind == NULL)
                return;
        if (strcmp(kind, "ready") == 0) {
                log_info("egress: proxy %d ready", (int)egress.proxy_pid);
                return;
        }
        const char *id = json_string_value(json_object_get(event, "sandbox"));
        struct sandbox *sb = id != NULL ? sandbox_lookup(id, 0) : NULL;
        if (sb == NULL || sb->egress == NULL)
                return; /* removed meanwhile */
        if (strcmp(kind, "refused") == 0) {
                record_refusal(sb, event);
        } else if (strcmp(kind, "stats") == 0) {
                stats_add(&sb->egress->stats, event);
        }
}

static void on_proxy_ctl(struct loop_source *source, uint32_t events)
{
        static char buf[EGRESS_MAX_MESSAGE + 1];
        for (;;) {
                ssize_t n = recv(source->fd, buf, EGRESS_MAX_MESSAGE, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        /* Gone: its pidfd says when, and it is started again. */
                        loop_remove(nsboxd.loop, egress.proxy_ctl);
                        egress.proxy_ctl = NULL;
                        proxy_kill();
                        return;
                }
                _cleanup_json_ json_t *event = json_loadb(buf, (size_t)n, 0, NULL);
                if (json_is_object(event))
                        proxy_event(event);
        }
}

static void on_respawn(struct loop *loop, struct loop_timer *timer, void *data)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (proxy_spawn(&err) < 0)
                log_error("egress: restart the proxy: %s", err->message);
}

static void schedule_respawn(long long delay_ms)
{
        if (loop_timer_add_in(nsboxd.loop, delay_ms, on_respawn, NULL) == NULL)
                log_error("egress: no timer to start nsbox-egress again");
}

static void on_proxy_exit(struct loop_source *source, uint32_t events)
{
        siginfo_t info = { 0 };
        waitid(P_PIDFD, source->fd, &info, WEXITED | WNOHANG);
        loop_remove(nsboxd.loop, egress.proxy_pidfd);
        egress.proxy_pidfd = NULL;
        if (egress.proxy_ctl != NULL) {
                loop_remove(nsboxd.loop, egress.proxy_ctl);
                egress.proxy_ctl = NULL;
        }
        if (nsboxd.stopping)
                return;
        log_error("egress: proxy %d ended (%s %d); restarting it", (int)egress.proxy_pid,
                  info.si_code == CLD_EXITED ? "exit code" : "signal", info.si_status);
        long long since = now_monotonic_ms() - egress.proxy_started_mono;
        schedule_respawn(since < EGRESS_RESPAWN_MS ? EGRESS_RESPAWN_MS : 0);
}

/* --- live restore: the proxy outlives nsboxd ------------------------------ */

static void proxy_record_path(char *path, size_t size)
{
        snprintf(path, size, "%s/%s", nsboxd.config.state_dir, EGRESS_RECORD);
}

/* What a next nsboxd needs to find the proxy, and to know it is the same
 * process: its pid and start time, the protocol it speaks. */
static void proxy_record_save(void)
{
        char path[4096];
        proxy_record_path(path, sizeof(path));
        if (!nsboxd.config.live_restore) {
                unlink(path);
                return;
        }
        _cleanup_json_ json_t *record =
            json_pack("{s:i, s:I, s:i}", "pid", (int)egress.proxy_pid, "start_time",
                      (json_int_t)state_process_start_time(egress.proxy_pid), "protocol", EGRESS_PROTOCOL);
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (record == NULL || json_file_replace(path, record, JSON_COMPACT, false, &err) < 0)
                log_warn("egress: the proxy will not outlive nsboxd: %s",
                         err ? err->message : "out of memory");
}

static int take_fd(int pidfd, json_int_t number, const char *what, nsbox_error_t **err)
{
        if (number < 0 || number > INT32_MAX)
                return nsbox_error(err, EPROTO, "it names no fd for %s", what);
        int fd = io_pidfd_take(pidfd, (int)number);
        if (fd < 0)
                return nsbox_error(err, errno, "take %s from it", what);
        return fd;
}

static bool socket_of(int fd, int type)
{
        return io_socket_is(fd, type == SOCK_SEQPACKET ? AF_UNIX : AF_INET, type);
}

/* The proxy's answers to "adopt", read as they come (what it sent before,
 * about the previous run, is dropped): its sandboxes into egress.adoptable;
 * the "adopted" event's numbers of the fds it keeps into *adopted. */
static int proxy_adopt_answers(int ctl, json_t **adopted, nsbox_error_t **err)
{
        static char buf[EGRESS_MAX_MESSAGE + 1];
        long long deadline = now_monotonic_ms() + EGRESS_ADOPT_MS;
        for (;;) {
                struct pollfd p = { .fd = ctl, .events = POLLIN };
                long long left = deadline - now_monotonic_ms();
                if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                        return nsbox_error(err, ETIMEDOUT, "it did not answer within %d ms", EGRESS_ADOPT_MS);
                ssize_t n = recv(ctl, buf, EGRESS_MAX_MESSAGE, MSG_DONTWAIT);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n <= 0)
                        return nsbox_error(err, n < 0 ? errno : EPIPE, "its control socket");
                _cleanup_json_ json_t *event = json_loadb(buf, (size_t)n, 0, NULL);
                const char *kind = json_string_value(json_object_get(event, "event"));
                const char *op = json_string_value(json_object_get(event, "op"));
                const char *id = json_string_value(json_object_get(event, "sandbox"));
                if (kind == NULL)
                        continue;
                if (strcmp(kind, "error") == 0 && op != NULL &&
                    (strcmp(op, "adopt") == 0 || strcmp(op, "lease") == 0))
                        return nsbox_error(err, EPROTO, "it refused %s: %s", op,
                                           json_string_value(json_object_get(event, "message")));
                /* At most one a slot: a proxy that says more is not believed. */
                if (strcmp(kind, "adopt") == 0 && id != NULL) {
                        if (json_object_size(egress.adoptable) >= egress.n_slots)
                                return nsbox_error(err, EPROTO, "it named more sandboxes than it has slots");
                        json_object_set(egress.adoptable, id, event);
                }
                if (strcmp(kind, "adopted") == 0) {
                        *adopted = json_incref(event);
                        return 0;
                }
        }
}

static void proxy_end(int pidfd, pid_t pid, const char *why, bool fresh)
{
        log_warn("egress: the proxy %d a previous nsboxd left is ended (%s)%s", (int)pid, why,
                 fresh ? "; a new one is started" : "");
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        poll(&p, 1, EGRESS_ADOPT_MS);
}

/* Whether process pid runs nsbox-egress (its argv[0], as proxy_spawn
 * gives it): a record never gets another process killed. */
static bool is_proxy(pid_t pid)
{
        char path[64], argv0[32] = "";
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, argv0, sizeof(argv0) - 1) : -1;
        return n > 0 && strcmp(argv0, "nsbox-egress") == 0;
}

/* The slot of an adopted proxy's sandbox, by the gateway its "adopt"
 * event names; false when that is in none of ours. */
static bool adopted_slot(json_t *event, unsigned *slot)
{
        struct in_addr gw;
        const char *text = json_string_value(json_object_get(event, "gateway"));
        if (text == NULL || inet_pton(AF_INET, text, &gw) != 1 || ntohl(gw.s_addr) <= egress.base)
                return false;
        *slot = (ntohl(gw.s_addr) - egress.base) / 4;
        return *slot < egress.n_slots;
}

/* The proxy a previous nsboxd left (its record in the state dir), taken
 * over when wanted: 1 when adopted, 0 when there is none to adopt (one
 * that cannot be, or is not wanted, is ended, with a log line why). Its
 * connections carry on. */
static int proxy_adopt(bool wanted)
{
        char path[4096];
        proxy_record_path(path, sizeof(path));
        _cleanup_json_ json_t *record = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
        unlink(path);
        json_t *pid_json = json_object_get(record, "pid"), *start = json_object_get(record, "start_time");
        if (!json_is_integer(pid_json) || json_integer_value(pid_json) <= 1 ||
            json_integer_value(pid_json) > INT32_MAX || !json_is_integer(start)) {
                if (record != NULL)
                        log_warn("egress: %s names no proxy; a new one is started", path);
                return 0;
        }
        pid_t pid = (pid_t)json_integer_value(pid_json);
        if (state_process_start_time(pid) != (unsigned long long)json_integer_value(start))
                return 0; /* gone (its grace ran out, or it crashed): nothing of it is left */
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        /* Checked again with the pidfd held: the pid cannot be reused now. */
        if (pidfd < 0 || state_process_start_time(pid) != (unsigned long long)json_integer_value(start) ||
            !is_proxy(pid))
                return 0;
        if (!wanted) {
                proxy_end(pidfd, pid, "this nsboxd gives sandboxes no network", false);
                return 0;
        }
        if (!nsboxd.config.live_restore) {
                proxy_end(pidfd, pid, "live_restore is off", true);
                return 0;
        }
        if (json_integer_value(json_object_get(record, "protocol")) != EGRESS_PROTOCOL) {
                proxy_end(pidfd, pid, "it speaks another protocol: another build", true);
                return 0;
        }
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_close_ int ctl = -1, ns = -1, lease_peer = -1;
        int lease[2] = { -1, -1 };
        _cleanup_json_ json_t *adopted = NULL;
        json_decref(egress.adoptable);
        egress.adoptable = json_object();
        /* Its copy of our end of the control socket is at EGRESS_KEEP_FD,
         * where the spawn put it. */
        int r = (ctl = take_fd(pidfd, EGRESS_KEEP_FD, "its control socket", &err));
        if (r >= 0 && !socket_of(ctl, SOCK_SEQPACKET))
                r = nsbox_error(&err, EPROTO, "it holds no control socket where it should");
        if (r >= 0 && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, lease) < 0)
                r = nsbox_error(&err, errno, "socketpair for its lease");
        if (r >= 0) {
                lease_peer = lease[1];
                _cleanup_json_ json_t *m_lease = json_pack("{s:s}", "op", "lease");
                _cleanup_json_ json_t *m_adopt = json_pack("{s:s}", "op", "adopt");
                _cleanup_free_ char *t_lease = json_dumps(m_lease, JSON_COMPACT);
                _cleanup_free_ char *t_adopt = json_dumps(m_adopt, JSON_COMPACT);
                ssize_t n = ctl_send(ctl, t_lease, strlen(t_lease), NULL, 0, &lease_peer, 1);
                if (n >= 0)
                        n = ctl_send(ctl, t_adopt, strlen(t_adopt), NULL, 0, NULL, 0);
                r = n < 0 ? nsbox_error(&err, (int)-n, "send it our lease") : 0;
        }
        if (r >= 0)
                r = proxy_adopt_answers(ctl, &adopted, &err);
        if (r >= 0 && json_integer_value(json_object_get(adopted, "protocol")) != EGRESS_PROTOCOL)
                r = nsbox_error(&err, EPROTO, "it speaks another protocol");
        /* Where the spawn put it (not where the proxy says: it is less
         * trusted than we are), and never the host's own namespace. */
        struct stat ns_st, host_st;
        if (r >= 0 && (r = ns = take_fd(pidfd, EGRESS_NETNS_FD, "the egress namespace", &err)) >= 0 &&
            (ioctl(ns, NS_GET_NSTYPE) != CLONE_NEWNET || fstat(ns, &ns_st) < 0 ||
             fstat(egress.host_ns, &host_st) < 0 ||
             (ns_st.st_ino == host_st.st_ino && ns_st.st_dev == host_st.st_dev)))
                r = nsbox_error(&err, EPROTO, "it holds no egress network namespace where it should");
        if (r < 0) {
                if (lease[0] >= 0)
                        close(lease[0]);
                json_decref(steal_pointer(&egress.adoptable));
                proxy_end(pidfd, pid, err->message, true);
                return 0;
        }
        egress.ns = steal_fd(&ns);
        egress.lease_fd = lease[0];
        egress.proxy_pid = pid;
        egress.proxy_started_mono = now_monotonic_ms();
        int sndbuf = 4 << 20;
        setsockopt(ctl, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
        fcntl(ctl, F_SETFL, O_NONBLOCK);
        egress.adopt_pidfd = fcntl(pidfd, F_DUPFD_CLOEXEC, 3);
        egress.proxy_pidfd = loop_add(nsboxd.loop, steal_fd(&pidfd), EPOLLIN, on_proxy_exit, NULL);
        egress.proxy_ctl = loop_add(nsboxd.loop, steal_fd(&ctl), EPOLLIN, on_proxy_ctl, NULL);
        /* Their slots are theirs until restore_networks gives them back. */
        const char *id;
        json_t *event;
        json_object_foreach(egress.adoptable, id, event)
        {
                unsigned slot;
                if (adopted_slot(event, &slot))
                        egress.slots[slot] = 1;
        }
        proxy_record_save();
        log_info("egress: proxy %d of the previous nsboxd adopted with %zu sandbox(es) (live restore)",
                 (int)pid, json_object_size(egress.adoptable));
        return 1;
}

static int proxy_spawn(nsbox_error_t **err)
{
        char uid[16], ns_fd[16], ctl_fd[16];
        snprintf(uid, sizeof(uid), "%u", (unsigned)nsboxd.config.egress_uid);
        /* The fixed arguments, then room for the optional ones below (at
         * most ten) and the NULL that ends them. */
        char *argv[20] = {
                "nsbox-egress", "--control-fd", ctl_fd, "--netns-fd", ns_fd, "--uid", uid, "--gid", uid
        };
        char **more = &argv[9];
        if (nsboxd.config.egress_dns_servers[0]) {
                *more++ = "--dns-servers";
                *more++ = nsboxd.config.egress_dns_servers;
        }
        if (nsboxd.config.egress_ca_file[0]) {
                *more++ = "--ca-file";
                *more++ = nsboxd.config.egress_ca_file;
        }
        /* Live restore: the proxy outlives us (no PDEATHSIG), told by its
         * lease when we are gone, and keeps for the next nsboxd a copy of
         * our end of the control socket and the egress namespace. */
        bool keep = nsboxd.config.live_restore;
        char lease_fd[16], keep_fd[16], grace[16];
        snprintf(ns_fd, sizeof(ns_fd), "%d", EGRESS_NETNS_FD);
        snprintf(ctl_fd, sizeof(ctl_fd), "%d", EGRESS_CONTROL_FD);
        snprintf(lease_fd, sizeof(lease_fd), "%d", EGRESS_LEASE_FD);
        snprintf(keep_fd, sizeof(keep_fd), "%d", EGRESS_KEEP_FD);
        snprintf(grace, sizeof(grace), "%u",
                 nsboxd.config.live_restore_grace_seconds > 0 ? nsboxd.config.live_restore_grace_seconds : 1);
        if (keep) {
                *more++ = "--lease-fd";
                *more++ = lease_fd;
                *more++ = "--keep-fd";
                *more++ = keep_fd;
                *more++ = "--grace";
                *more++ = grace;
        }
        int sv[2], lease[2] = { -1, -1 };
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return nsbox_error(err, errno, "socketpair for the egress proxy");
        if (keep && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, lease) < 0) {
                int e = errno;
                close(sv[0]);
                close(sv[1]);
                return nsbox_error(err, e, "socketpair for the egress proxy's lease");
        }
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                close(sv[0]);
                close(sv[1]);
                if (keep) {
                        close(lease[0]);
                        close(lease[1]);
                }
                return nsbox_error(err, e, "fork the egress proxy");
        }
        if (pid == 0) {
                /* Only async-signal-safe calls from here to the exec. */
                if (!keep)
                        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                if (getppid() != parent)
                        _exit(1);
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                /* Above the targets first: a source may sit on one. */
                int from[4] = { sv[1], egress.ns, sv[0], lease[1] };
                for (int i = 0; i < (keep ? 4 : 2); i++)
                        if ((from[i] = fcntl(from[i], F_DUPFD_CLOEXEC, 16)) < 0)
                                _exit(1);
                if (dup2(from[0], EGRESS_CONTROL_FD) < 0 || dup2(from[1], EGRESS_NETNS_FD) < 0 ||
                    (keep && (dup2(from[2], EGRESS_KEEP_FD) < 0 || dup2(from[3], EGRESS_LEASE_FD) < 0)))
                        _exit(1);
                syscall(SYS_close_range, keep ? EGRESS_LEASE_FD + 1 : EGRESS_NETNS_FD + 1, ~0U, 0);
                execv(nsboxd.config.egress_path, argv);
                _exit(127);
        }
        close(sv[1]);
        if (keep) {
                close(lease[1]);
                if (egress.lease_fd >= 0)
                        close(egress.lease_fd);
                egress.lease_fd = lease[0];
        }
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0) {
                int e = errno;
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                close(sv[0]);
                return nsbox_error(err, e, "pidfd of the egress proxy");
        }
        int sndbuf = 4 << 20;
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
        fcntl(sv[0], F_SETFL, O_NONBLOCK);
        egress.proxy_pid = pid;
        egress.proxy_started_mono = now_monotonic_ms();
        egress.proxy_pidfd = loop_add(nsboxd.loop, pidfd, EPOLLIN, on_proxy_exit, NULL);
        egress.proxy_ctl = loop_add(nsboxd.loop, sv[0], EPOLLIN, on_proxy_ctl, NULL);
        if (egress.proxy_pidfd == NULL || egress.proxy_ctl == NULL) {
                kill(pid, SIGKILL);
                return nsbox_error(err, errno, "watch the egress proxy");
        }
        proxy_record_save();
        proxy_sync();
        return 0;
}

/* --- startup --------------------------------------------------------------- */

static int check_operator_policies(nsbox_error_t **err)
{
        const char *name;
        json_t *object;
        json_object_foreach(nsboxd.config.network_policies, name, object)
        {
                if (!policy_valid_name(name) || strcmp(name, "none") == 0 || strcmp(name, "custom") == 0)
                        return nsbox_invalid(err, "network_policies: \"%s\" is not a usable policy name",
                                             name);
                _cleanup_error_ nsbox_error_t *why = NULL;
                if (validate_policy(object, false, &why) < 0)
                        return nsbox_invalid(err, "network_policies.%s: %s", name, why->message);
        }
        return 0;
}

void egress_reload(struct nsbox_config *fresh)
{
        if (!egress.enabled) {
                if (json_object_size(fresh->network_policies) > 0 || fresh->allow_client_network_policies)
                        log_warn("SIGHUP: network policies need a restart of nsboxd to be enabled");
                return;
        }
        json_t *old = nsboxd.config.network_policies;
        nsboxd.config.network_policies = fresh->network_policies;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (check_operator_policies(&err) < 0) {
                nsboxd.config.network_policies = old;
                log_error("SIGHUP: keeping the old network policies: %s", err->message);
                return;
        }
        fresh->network_policies = old; /* freed with the rest of fresh */
        nsboxd.config.allow_client_network_policies = fresh->allow_client_network_policies;
        log_info("SIGHUP: %zu network policies (live sandboxes keep theirs until sandbox.update)",
                 json_object_size(nsboxd.config.network_policies));
}

int egress_init(nsbox_error_t **err)
{
        int r;
        egress.enabled = json_object_size(nsboxd.config.network_policies) > 0 ||
                         nsboxd.config.allow_client_network_policies;
        if (!egress.enabled) {
                proxy_adopt(false); /* a previous nsboxd's, with live restore */
                return 0;
        }
        if (userns_active()) {
                egress.enabled = false;
                log_warn("egress: network policies are configured but need host root; this nsboxd runs in a "
                         "user namespace: sandboxes get network \"none\" only");
                return 0;
        }
        if ((r = parse_subnet(nsboxd.config.network_subnet, err)) < 0 ||
            (r = check_operator_policies(err)) < 0)
                return r;
        if (access(nsboxd.config.egress_path, X_OK) < 0)
                return nsbox_error(err, errno, "the egress proxy %s", nsboxd.config.egress_path);
        egress.slots = calloc(egress.n_slots, 1);
        if (egress.slots == NULL)
                return nsbox_error(err, ENOMEM, "egress slots");
        egress.host_ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (egress.host_ns < 0)
                return nsbox_error(err, errno, "open the host's network namespace");
        if (proxy_adopt(true) == 1) {
                log_info("egress: %zu network policies, sandbox addresses from %s, proxy %d",
                         json_object_size(nsboxd.config.network_policies), nsboxd.config.network_subnet,
                         (int)egress.proxy_pid);
                return 0;
        }
        if (unshare(CLONE_NEWNET) < 0)
                return nsbox_error(err, errno, "make the egress network namespace");
        egress.ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        r = egress.ns < 0 ? nsbox_error(err, errno, "open the egress network namespace")
                          : egress_ns_setup(err);
        leave_netns();
        if (r < 0)
                return r;
        if ((r = proxy_spawn(err)) < 0)
                return r;
        log_info("egress: %zu network policies, sandbox addresses from %s, proxy %d",
                 json_object_size(nsboxd.config.network_policies), nsboxd.config.network_subnet,
                 (int)egress.proxy_pid);
        return 0;
}

void egress_shutdown(void)
{
        /* Live restore: a sandbox left running keeps its connections, and
         * the proxy that holds them waits for the next nsboxd. */
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next)
                if (nsboxd.config.live_restore && sb->lease_fd >= 0 && sb->egress != NULL &&
                    sb->state == SANDBOX_RUNNING && egress.proxy_pidfd != NULL) {
                        log_info("egress: proxy %d left running for the next nsboxd", (int)egress.proxy_pid);
                        return;
                }
        char path[4096];
        proxy_record_path(path, sizeof(path));
        unlink(path);
        proxy_kill();
        if (egress.proxy_pidfd != NULL) {
                siginfo_t info;
                waitid(P_PIDFD, egress.proxy_pidfd->fd, &info, WEXITED);
        }
}

/* --- sandboxes ------------------------------------------------------------- */

static int bound_socket(int type, struct in_addr address, unsigned port, nsbox_error_t **err)
{
        _cleanup_close_ int fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return nsbox_error(err, errno, "socket");
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = address };
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return nsbox_error(err, errno, "bind %s:%u", inet_ntoa(address), port);
        if (type == SOCK_STREAM && listen(fd, 128) < 0)
                return nsbox_error(err, errno, "listen");
        return steal_fd(&fd);
}

/* The proxy holds the same socket (SCM_RIGHTS shares the open file): a
 * shutdown stops the listening for both at once, where a close of our copy
 * would leave the port open until the proxy handles our message. */
static void close_listener(int fd)
{
        shutdown(fd, SHUT_RDWR);
        close(fd);
}

static void egress_free(struct sandbox_egress *e)
{
        if (e->listener >= 0)
                close_listener(e->listener);
        if (e->dns >= 0)
                close(e->dns);
        for (unsigned i = 0; i < e->n_exposed; i++)
                close_listener(e->exposed[i].fd);
        if (e->slot > 0 && e->slot < egress.n_slots)
                egress.slots[e->slot] = 0;
        json_decref(e->policy);
        json_decref(e->secrets);
        egress_ca_clear(&e->ca);
        free(e);
}

/* In the egress namespace: the veth (its peer straight into the sandbox's
 * namespace), the gateway address and the proxy's two sockets. */
static int attach_egress_side(struct sandbox_egress *e, int sandbox_ns, nsbox_error_t **err)
{
        int r;
        if ((r = network_veth_add(e->link, "eth0", sandbox_ns, err)) < 0 ||
            (r = network_link_configure(e->link, e->gateway, 30, NULL, err)) < 0)
                return r;
        if ((e->listener = bound_socket(SOCK_STREAM, e->gateway, EGRESS_TCP_PORT, err)) < 0)
                return e->listener;
        if ((e->dns = bound_socket(SOCK_DGRAM, e->gateway, EGRESS_DNS_PORT, err)) < 0)
                return e->dns;
        return 0;
}

static int attach_sandbox_side(struct sandbox_egress *e, nsbox_error_t **err)
{
        int r = network_link_configure("eth0", e->address, 30, &e->gateway, err);
        if (r < 0)
                return r;
        _cleanup_error_ nsbox_error_t *ignored = NULL;
        write_sysctl("ipv6/conf/eth0/disable_ipv6", "1", &ignored);
        return 0;
}

static void delete_link(const char *link)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (enter_netns(egress.ns, &err) == 0) {
                network_link_delete(link, &err);
                leave_netns();
        }
        if (err != NULL)
                log_warn("egress: %s", err->message);
}

/* Live restore: what the next nsboxd needs to give an adopted sandbox its
 * network back (its slot, so its address, and its exposed ports), beside
 * its record. The policy is in the record (state.c). */
#define NETWORK_RECORD "network.json"

static void egress_save(struct sandbox *sb)
{
        if (!nsboxd.config.live_restore || sb->dir == NULL)
                return;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", sb->dir, NETWORK_RECORD);
        struct sandbox_egress *e = sb->egress;
        if (e == NULL) {
                unlink(path);
                return;
        }
        _cleanup_json_ json_t *exposed = json_array();
        for (unsigned i = 0; exposed != NULL && i < e->n_exposed; i++)
                json_array_append_new(exposed, json_pack("{s:i, s:i}", "port", (int)e->exposed[i].port,
                                                         "host_port", (int)e->exposed[i].host_port));
        _cleanup_json_ json_t *record = json_pack("{s:i, s:O}", "slot", (int)e->slot, "exposed", exposed);
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (record == NULL || json_file_replace(path, record, JSON_COMPACT, false, &err) < 0)
                log_warn("sandbox %s: its network will not outlive nsboxd: %s", sb->id,
                         err ? err->message : "out of memory");
}

/* slot 0: any (0 is never a sandbox's: it holds the subnet's base).
 * kept_ca: the CA an adopted sandbox trusts already, or NULL (one is made
 * when it has secrets). */
static int attach_with(struct sandbox *sb, json_t *policy, json_t *secrets, unsigned wanted_slot,
                       const struct egress_ca *kept_ca, nsbox_error_t **err)
{
        /* The next free slot after the last one taken, not the lowest: a
         * slot just released may still have its veth (deleted with the
         * sandbox's namespace, by the kernel, a moment later) and its
         * gateway:1 listener (until the proxy handles the remove). */
        unsigned slot = 0;
        if (wanted_slot > 0 && wanted_slot < egress.n_slots && !egress.slots[wanted_slot])
                slot = wanted_slot;
        for (unsigned i = 0; i < egress.n_slots && slot == 0; i++) {
                unsigned candidate = (egress.next_slot + i) % egress.n_slots;
                if (candidate != 0 && !egress.slots[candidate])
                        slot = candidate;
        }
        if (slot == 0)
                return nsbox_error(err, EUSERS, "no network addresses left in %s",
                                   nsboxd.config.network_subnet);
        egress.next_slot = slot + 1;
        struct sandbox_egress *e = calloc(1, sizeof(*e));
        if (e == NULL)
                return nsbox_error(err, ENOMEM, "sandbox network");
        e->listener = e->dns = -1;
        e->slot = slot;
        egress.slots[slot] = 1;
        e->policy = json_incref(policy);
        e->secrets = json_incref(secrets);
        if (secrets != NULL && kept_ca != NULL && kept_ca->cert_pem != NULL) {
                e->ca.cert_pem = strdup(kept_ca->cert_pem);
                e->ca.key_pem = strdup(kept_ca->key_pem);
                if (e->ca.cert_pem == NULL || e->ca.key_pem == NULL) {
                        egress_free(e);
                        return nsbox_error(err, ENOMEM, "secrets CA");
                }
        } else if (secrets != NULL && egress_ca_make(sb->id, &e->ca, err) < 0) {
                egress_free(e);
                return -EIO;
        }
        e->gateway.s_addr = htonl(egress.base + 4 * slot + 1);
        e->address.s_addr = htonl(egress.base + 4 * slot + 2);
        snprintf(e->link, sizeof(e->link), "nsb%u", slot);

        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)sb->pid);
        _cleanup_close_ int sandbox_ns = open(path, O_RDONLY | O_CLOEXEC);
        int r = sandbox_ns < 0 ? nsbox_error(err, errno, "open %s", path) : enter_netns(egress.ns, err);
        if (r == 0) {
                r = attach_egress_side(e, sandbox_ns, err);
                leave_netns();
        }
        if (r == 0 && (r = enter_netns(sandbox_ns, err)) == 0) {
                r = attach_sandbox_side(e, err);
                leave_netns();
        }
        if (r < 0) {
                delete_link(e->link);
                egress_free(e);
                return r;
        }
        sb->egress = e;
        if (sb->state == SANDBOX_RUNNING)
                egress_install_ca(sb);
        _cleanup_json_ json_t *m = add_message(sb);
        int fds[2] = { e->listener, e->dns };
        proxy_send(m, fds, 2);
        egress_save(sb);
        if (secrets != NULL)
                egress_keep_secrets(sb); /* its CA is new */
        return 0;
}

int egress_attach(struct sandbox *sb, const struct sandbox_policy *wanted, nsbox_error_t **err)
{
        if (strcmp(wanted->network, "none") == 0)
                return 0;
        _cleanup_json_ json_t *policy = policy_object(wanted, err);
        if (policy == NULL)
                return -EINVAL;
        return attach_with(sb, policy, wanted->secrets, 0, NULL, err);
}

int egress_update_secrets(struct sandbox *sb, json_t *secrets, nsbox_error_t **err)
{
        struct sandbox_egress *e = sb->egress;
        if (e == NULL)
                return 0; /* attach_with takes sb->policy.secrets */
        if (secrets != NULL && e->ca.cert_pem == NULL) {
                if (egress_ca_make(sb->id, &e->ca, err) < 0)
                        return -EIO;
                egress_install_ca(sb);
        }
        json_decref(e->secrets);
        e->secrets = json_incref(secrets);
        json_t *tls =
            e->ca.cert_pem ? json_pack("{s:s, s:s}", "cert", e->ca.cert_pem, "key", e->ca.key_pem) : NULL;
        _cleanup_json_ json_t *m = json_pack("{s:s, s:s, s:O*, s:o*}", "op", "secrets", "sandbox", sb->id,
                                             "secrets", secrets, "tls", tls);
        proxy_send(m, NULL, 0);
        return 0;
}

void egress_keep_secrets(struct sandbox *sb)
{
        if (!nsboxd.config.live_restore || sb->lease_fd < 0 || sb->ctl == NULL ||
            (sb->policy.secrets == NULL && sb->secrets_fd < 0))
                return;
        _cleanup_error_ nsbox_error_t *err = NULL;
        const struct egress_ca *ca = sb->egress != NULL ? &sb->egress->ca : NULL;
        if (sb->secrets_fd >= 0) {
                /* Rewritten in place: the init holds the same memfd. */
                if (secrets_keep_write(sb->secrets_fd, sb->policy.secrets, ca, &err) < 0) {
                        log_warn("sandbox %s: its secrets will not outlive nsboxd: %s", sb->id, err->message);
                        _cleanup_error_ nsbox_error_t *ignored = NULL;
                        secrets_keep_write(sb->secrets_fd, NULL, NULL, &ignored); /* never stale ones */
                }
                return;
        }
        int fd = secrets_keep_create(&err);
        if (fd >= 0 && secrets_keep_write(fd, sb->policy.secrets, ca, &err) == 0) {
                struct ctl_header msg = { CTL_SECRETS, 0 };
                ssize_t n = ctl_send(sb->ctl->fd, &msg, sizeof(msg), NULL, 0, &fd, 1);
                if (n >= 0) {
                        sb->secrets_fd = fd;
                        return;
                }
                nsbox_error(&err, (int)-n, "send the init its secrets to keep");
        }
        if (fd >= 0)
                close(fd);
        log_warn("sandbox %s: its secrets will not outlive nsboxd: %s", sb->id, err->message);
}

void egress_install_ca(struct sandbox *sb)
{
        if (sb->egress == NULL || sb->egress->ca.cert_pem == NULL)
                return;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (egress_ca_install(sb, &sb->egress->ca, &err) < 0)
                log_warn("sandbox %s: install the secrets CA: %s", sb->id, err->message);
}

void egress_detach(struct sandbox *sb, bool alive)
{
        struct sandbox_egress *e = sb->egress;
        if (e == NULL)
                return;
        sb->egress = NULL;
        _cleanup_json_ json_t *m = json_pack("{s:s, s:s}", "op", "remove", "sandbox", sb->id);
        proxy_send(m, NULL, 0);
        /* A sandbox that is gone takes its veth with its namespace (the
         * kernel's cleanup, off nsboxd's loop: a delete here waits for RCU,
         * ~20 ms per remove). */
        if (alive)
                delete_link(e->link);
        egress_free(e);
        if (alive)
                egress_save(sb);
}

int egress_update(struct sandbox *sb, const char *network, json_t *custom, nsbox_error_t **err)
{
        struct sandbox_policy wanted = { 0 };
        snprintf(wanted.network, sizeof(wanted.network), "%s", network);
        wanted.network_custom = custom;
        if (strcmp(network, "none") == 0) {
                egress_detach(sb, true);
        } else if (userns_active()) {
                return refuse_without_host_root(err);
        } else {
                _cleanup_json_ json_t *policy = policy_object(&wanted, err);
                if (policy == NULL)
                        return -EINVAL;
                if (sb->egress == NULL) {
                        int r = attach_with(sb, policy, sb->policy.secrets, 0, NULL, err);
                        if (r < 0)
                                return r;
                } else {
                        json_decref(sb->egress->policy);
                        sb->egress->policy = json_incref(policy);
                        _cleanup_json_ json_t *m =
                            json_pack("{s:s, s:s, s:O}", "op", "policy", "sandbox", sb->id, "policy", policy);
                        proxy_send(m, NULL, 0);
                }
        }
        json_decref(sb->policy.network_custom);
        sb->policy.network_custom = custom != NULL ? json_incref(custom) : NULL;
        snprintf(sb->policy.network, sizeof(sb->policy.network), "%s", network);
        /* The record holds the policy a next nsboxd gives it back with. */
        _cleanup_error_ nsbox_error_t *save_err = NULL;
        if (nsboxd.config.live_restore && state_save(sb, &save_err) < 0)
                log_warn("sandbox %s: %s", sb->id, save_err->message);
        return 0;
}

static int expose_at(struct sandbox *sb, unsigned port, unsigned host_port, json_t **result,
                     nsbox_error_t **err);

int egress_expose(struct sandbox *sb, unsigned port, json_t **result, nsbox_error_t **err)
{
        return expose_at(sb, port, 0, result, err);
}

/* host_port 0: any free one. */
static int expose_at(struct sandbox *sb, unsigned port, unsigned host_port, json_t **result,
                     nsbox_error_t **err)
{
        struct sandbox_egress *e = sb->egress;
        if (e == NULL && userns_active())
                return refuse_without_host_root(err);
        if (e == NULL)
                return nsbox_invalid(err,
                                     "sandbox %s has no network: create it with one, or give it one with "
                                     "sandbox.update (nsbox update --network NAME ID)",
                                     sb->id);
        if (port < 1 || port > 65535)
                return nsbox_invalid(err, "port must be from 1 to 65535");
        struct egress_exposed *x = NULL;
        for (unsigned i = 0; i < e->n_exposed; i++) {
                if (e->exposed[i].port == port)
                        x = &e->exposed[i];
        }
        if (x == NULL) {
                if (e->n_exposed == EGRESS_MAX_EXPOSED)
                        return nsbox_error(err, EUSERS, "sandbox %s has %d ports exposed already", sb->id,
                                           EGRESS_MAX_EXPOSED);
                int fd =
                    bound_socket(SOCK_STREAM, (struct in_addr){ htonl(INADDR_LOOPBACK) }, host_port, err);
                if (fd < 0)
                        return fd;
                struct sockaddr_in sa;
                socklen_t len = sizeof(sa);
                getsockname(fd, (struct sockaddr *)&sa, &len);
                x = &e->exposed[e->n_exposed++];
                *x = (struct egress_exposed){ .port = port, .host_port = ntohs(sa.sin_port), .fd = fd };
                proxy_send_expose(sb, x);
                egress_save(sb);
        }
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%u/", x->host_port);
        *result = json_pack("{s:s, s:s, s:i, s:i, s:s}", "sandbox_id", sb->id, "host", "127.0.0.1",
                            "host_port", (int)x->host_port, "port", (int)port, "url", url);
        return 0;
}

int egress_unexpose(struct sandbox *sb, unsigned port, nsbox_error_t **err)
{
        struct sandbox_egress *e = sb->egress;
        for (unsigned i = 0; e != NULL && i < e->n_exposed; i++) {
                if (e->exposed[i].port != port)
                        continue;
                _cleanup_json_ json_t *m =
                    json_pack("{s:s, s:s, s:i}", "op", "unexpose", "sandbox", sb->id, "port", (int)port);
                proxy_send(m, NULL, 0);
                close_listener(e->exposed[i].fd);
                e->exposed[i] = e->exposed[--e->n_exposed];
                egress_save(sb);
                return 0;
        }
        return nsbox_invalid(err, "port %u of sandbox %s is not exposed", port, sb->id);
}

/* An adopted sandbox's network as the adopted proxy still serves it: the
 * veth and the proxy's sockets are there, its open connections carry on.
 * The fds the proxy holds are taken with pidfd_getfd and checked; its
 * policy and secrets sent again (the config may have changed). 1 when so;
 * 0 when the proxy does not have it (it is attached anew). */
static int reattach_adopted(struct sandbox *sb, json_t *policy, unsigned slot, nsbox_error_t **err)
{
        json_t *event = json_object_get(egress.adoptable, sb->id);
        if (event == NULL || egress.adopt_pidfd < 0)
                return 0;
        struct sandbox_egress *e = calloc(1, sizeof(*e));
        if (e == NULL)
                return nsbox_error(err, ENOMEM, "sandbox network");
        e->listener = e->dns = -1;
        e->gateway.s_addr = htonl(egress.base + 4 * slot + 1);
        e->address.s_addr = htonl(egress.base + 4 * slot + 2);
        snprintf(e->link, sizeof(e->link), "nsb%u", slot);
        int r = 0;
        char gateway[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &e->gateway, gateway, sizeof(gateway));
        struct sockaddr_in bound;
        socklen_t len = sizeof(bound);
        const char *said = json_string_value(json_object_get(event, "gateway"));
        if (said == NULL || strcmp(said, gateway) != 0)
                r = nsbox_error(err, EPROTO, "the proxy serves it on %s, its record says %s",
                                said ? said : "?", gateway);
        if (r == 0 &&
            (r = e->listener = take_fd(egress.adopt_pidfd, json_integer_value(json_object_get(event, "tcp")),
                                       "its listener", err)) >= 0 &&
            (!socket_of(e->listener, SOCK_STREAM) ||
             getsockname(e->listener, (struct sockaddr *)&bound, &len) < 0 ||
             bound.sin_addr.s_addr != e->gateway.s_addr))
                r = nsbox_error(err, EPROTO, "the proxy's listener for it is not on %s", gateway);
        if (r >= 0 &&
            (r = e->dns = take_fd(egress.adopt_pidfd, json_integer_value(json_object_get(event, "dns")),
                                  "its DNS socket", err)) >= 0 &&
            !socket_of(e->dns, SOCK_DGRAM))
                r = nsbox_error(err, EPROTO, "the proxy's DNS socket for it is not one");
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(event, "exposed"), i, x)
        {
                json_int_t port = json_integer_value(json_object_get(x, "port"));
                if (r < 0 || e->n_exposed == EGRESS_MAX_EXPOSED || port < 1 || port > 65535)
                        break;
                int fd = take_fd(egress.adopt_pidfd, json_integer_value(json_object_get(x, "fd")),
                                 "an exposed port", err);
                len = sizeof(bound);
                if (fd < 0 || !socket_of(fd, SOCK_STREAM) ||
                    getsockname(fd, (struct sockaddr *)&bound, &len) < 0 ||
                    bound.sin_addr.s_addr != htonl(INADDR_LOOPBACK)) {
                        r = fd < 0
                                ? fd
                                : nsbox_error(err, EPROTO, "its exposed port %lld is not on 127.0.0.1", port);
                        if (fd >= 0)
                                close(fd);
                        break;
                }
                e->exposed[e->n_exposed++] = (struct egress_exposed){ .port = (unsigned)port,
                                                                      .host_port = ntohs(bound.sin_port),
                                                                      .fd = fd };
        }
        if (r < 0) {
                /* Not served as it should be: the proxy drops it, and its
                 * veth goes with the sandbox's eth0 (egress_reattach). */
                egress_free(e);
                json_object_del(egress.adoptable, sb->id);
                _cleanup_json_ json_t *m = json_pack("{s:s, s:s}", "op", "remove", "sandbox", sb->id);
                proxy_send(m, NULL, 0);
                log_warn("sandbox %s: its network is attached anew: %s", sb->id, (*err)->message);
                nsbox_error_free(err);
                return 0;
        }
        stats_add(&e->stats, json_object_get(event, "stats"));
        json_object_del(egress.adoptable, sb->id);
        e->slot = slot;
        egress.slots[slot] = 1;
        e->policy = json_incref(policy);
        sb->egress = e;
        _cleanup_json_ json_t *m =
            json_pack("{s:s, s:s, s:O}", "op", "policy", "sandbox", sb->id, "policy", policy);
        proxy_send(m, NULL, 0);
        return 1;
}

void egress_reattach_done(void)
{
        if (egress.adoptable == NULL)
                return;
        /* What the proxy served for sandboxes not adopted: dropped, and the
         * veth of one still alive deleted (a dead one's went with it). */
        const char *id;
        json_t *event;
        json_object_foreach(egress.adoptable, id, event)
        {
                _cleanup_json_ json_t *m = json_pack("{s:s, s:s}", "op", "remove", "sandbox", id);
                proxy_send(m, NULL, 0);
                unsigned slot;
                if (!adopted_slot(event, &slot))
                        continue;
                egress.slots[slot] = 0;
                char link[16];
                snprintf(link, sizeof(link), "nsb%u", slot);
                _cleanup_error_ nsbox_error_t *gone = NULL;
                if (enter_netns(egress.ns, &gone) == 0) {
                        network_link_delete(link, &gone);
                        leave_netns();
                }
                log_info("egress: sandbox %s is not adopted: the proxy no longer serves it", id);
        }
        json_decref(steal_pointer(&egress.adoptable));
        if (egress.adopt_pidfd >= 0)
                close(steal_fd(&egress.adopt_pidfd));
}

/* Its network made again (the proxy that served it is gone): a new veth
 * in the slot it had if still free, the CA it trusts already. */
static int attach_anew(struct sandbox *sb, json_t *policy, unsigned wanted, nsbox_error_t **err)
{
        /* Its old veth goes with the old egress namespace, but the kernel
         * tears a namespace down a moment later, off the caller's time. */
        char ns_path[64];
        snprintf(ns_path, sizeof(ns_path), "/proc/%d/ns/net", (int)sb->pid);
        _cleanup_close_ int sandbox_ns = open(ns_path, O_RDONLY | O_CLOEXEC);
        if (sandbox_ns < 0)
                return nsbox_error(err, errno, "open %s", ns_path);
        if (enter_netns(sandbox_ns, err) < 0)
                return -EIO;
        _cleanup_error_ nsbox_error_t *gone = NULL;
        network_link_delete("eth0", &gone); /* none: the kernel was first */
        leave_netns();
        /* The CA it trusts already, as kept with its secrets (restore.c checked them). */
        struct egress_ca kept_ca = { 0 };
        _cleanup_json_ json_t *kept_secrets = NULL;
        if (sb->policy.secrets != NULL && sb->secrets_fd >= 0 &&
            secrets_keep_read(sb->secrets_fd, &kept_secrets, &kept_ca, err) < 0)
                return -EIO;
        int r = attach_with(sb, policy, sb->policy.secrets, wanted, &kept_ca, err);
        egress_ca_clear(&kept_ca);
        return r;
}

int egress_reattach(struct sandbox *sb, nsbox_error_t **err)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", sb->dir, NETWORK_RECORD);
        _cleanup_json_ json_t *record = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
        json_t *slot = json_object_get(record, "slot"), *exposed = json_object_get(record, "exposed");
        if (!json_is_integer(slot) || json_integer_value(slot) <= 0 || !json_is_array(exposed) ||
            json_array_size(exposed) > EGRESS_MAX_EXPOSED)
                return nsbox_error(err, ENOENT, "no record of its network in %s", path);
        if (!egress.enabled)
                return nsbox_error(err, ENOTSUP, "this nsboxd gives sandboxes no network");
        _cleanup_json_ json_t *policy = policy_object(&sb->policy, err);
        if (policy == NULL)
                return -EINVAL;
        unsigned wanted = json_integer_value(slot) < egress.n_slots ? (unsigned)json_integer_value(slot) : 0;
        int adopted = wanted > 0 ? reattach_adopted(sb, policy, wanted, err) : 0;
        if (adopted < 0)
                return adopted;
        if (adopted == 1) {
                /* Its secrets and CA as kept (restore.c checked them), sent
                 * again; the ports the proxy did not serve exposed anew. */
                struct egress_ca kept_ca = { 0 };
                _cleanup_json_ json_t *kept_secrets = NULL;
                if (sb->policy.secrets != NULL && sb->secrets_fd >= 0 &&
                    secrets_keep_read(sb->secrets_fd, &kept_secrets, &kept_ca, err) < 0) {
                        egress_detach(sb, true);
                        return -EIO;
                }
                sb->egress->ca = kept_ca;
                sb->egress->secrets = json_incref(sb->policy.secrets);
                if (sb->egress->secrets != NULL && sb->egress->ca.cert_pem == NULL) {
                        egress_detach(sb, true);
                        return nsbox_error(err, ENOENT, "its secrets CA was not kept");
                }
                json_t *tls = sb->egress->ca.cert_pem
                                  ? json_pack("{s:s, s:s}", "cert", sb->egress->ca.cert_pem, "key",
                                              sb->egress->ca.key_pem)
                                  : NULL;
                _cleanup_json_ json_t *m = json_pack("{s:s, s:s, s:O*, s:o*}", "op", "secrets", "sandbox",
                                                     sb->id, "secrets", sb->policy.secrets, "tls", tls);
                proxy_send(m, NULL, 0);
        }
        if (adopted == 0) {
                int r = attach_anew(sb, policy, wanted, err);
                if (r < 0)
                        return r;
        }
        size_t i;
        json_t *x;
        json_array_foreach(exposed, i, x)
        {
                json_t *port = json_object_get(x, "port"), *host_port = json_object_get(x, "host_port");
                if (!json_is_integer(port) || !json_is_integer(host_port) || json_integer_value(port) < 1 ||
                    json_integer_value(port) > 65535 || json_integer_value(host_port) < 1 ||
                    json_integer_value(host_port) > 65535)
                        continue;
                _cleanup_json_ json_t *result = NULL;
                _cleanup_error_ nsbox_error_t *x_err = NULL;
                /* Its old host port if it is still free, else another: said in the log. */
                if (expose_at(sb, (unsigned)json_integer_value(port), (unsigned)json_integer_value(host_port),
                              &result, &x_err) < 0 &&
                    expose_at(sb, (unsigned)json_integer_value(port), 0, &result, &x_err) < 0)
                        log_warn("sandbox %s: port %lld not exposed again: %s", sb->id,
                                 json_integer_value(port), x_err->message);
                else if (json_integer_value(json_object_get(result, "host_port")) !=
                         json_integer_value(host_port))
                        log_warn("sandbox %s: port %lld exposed again on host port %lld (%lld is taken)",
                                 sb->id, json_integer_value(port),
                                 json_integer_value(json_object_get(result, "host_port")),
                                 json_integer_value(host_port));
        }
        if (wanted != sb->egress->slot)
                log_warn("sandbox %s: its network address changed in the restart (slot %u is taken)", sb->id,
                         wanted);
        egress_save(sb);
        return 0;
}

json_t *egress_info(const struct sandbox *sb)
{
        const struct sandbox_egress *e = sb->egress;
        if (e == NULL)
                return NULL;
        char address[INET_ADDRSTRLEN], gateway[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &e->address, address, sizeof(address));
        inet_ntop(AF_INET, &e->gateway, gateway, sizeof(gateway));
        json_t *exposed = json_array();
        for (unsigned i = 0; i < e->n_exposed; i++)
                json_array_append_new(exposed, json_pack("{s:i, s:i}", "port", (int)e->exposed[i].port,
                                                         "host_port", (int)e->exposed[i].host_port));
        return json_pack("{s:s, s:s, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I}}", "address", address, "gateway",
                         gateway, "exposed", exposed, "stats", "bytes_in", e->stats.bytes_in, "bytes_out",
                         e->stats.bytes_out, "connections", e->stats.connections, "refused", e->stats.refused,
                         "dns_queries", e->stats.dns_queries, "secrets_injected", e->stats.secrets_injected);
}

static json_t *refused_since(const struct sandbox *sb, long long since_mono_ms)
{
        const struct sandbox_egress *e = sb->egress;
        if (e == NULL || e->n_refusals == 0)
                return NULL;
        json_t *list = NULL;
        unsigned n = e->n_refusals < EGRESS_REFUSALS ? e->n_refusals : EGRESS_REFUSALS;
        for (unsigned i = e->n_refusals - n; i < e->n_refusals; i++) {
                const struct egress_refusal *r = &e->refusals[i % EGRESS_REFUSALS];
                if (r->mono_ms < since_mono_ms)
                        continue;
                if (list == NULL)
                        list = json_array();
                /* Once each: a resolver asks A and AAAA, and asks again. */
                bool seen = false;
                size_t k;
                json_t *had;
                json_array_foreach(list, k, had)
                {
                        seen = seen || strcmp(json_string_value(had), r->text) == 0;
                }
                if (!seen)
                        json_array_append_new(list, json_string(r->text));
        }
        return list;
}

void egress_note_refused(json_t *reply, const struct sandbox *sb, long long since_mono_ms, bool in_stderr)
{
        /* The proxy tells a refusal before its answer to the sandbox, but
         * the end of the code that met it may be read first: what the proxy
         * has sent is read now. */
        if (egress.proxy_ctl != NULL)
                on_proxy_ctl(egress.proxy_ctl, EPOLLIN);
        json_t *list = refused_since(sb, since_mono_ms);
        if (list == NULL || reply == NULL) {
                json_decref(list);
                return;
        }
        json_object_set_new(reply, "network_refused", list);
        const char *text = json_string_value(json_object_get(reply, "stderr"));
        if (!in_stderr || text == NULL)
                return;
        size_t i;
        json_t *entry;
        _cleanup_free_ char *joined = strdup(text);
        json_array_foreach(list, i, entry)
        {
                char *next = NULL;
                if (joined == NULL ||
                    asprintf(&next, "%s%snsbox: network policy refused %s\n", joined,
                             joined[0] != '\0' && joined[strlen(joined) - 1] != '\n' ? "\n" : "",
                             json_string_value(entry)) < 0)
                        return;
                free(joined);
                joined = next;
        }
        json_object_set_new(reply, "stderr", json_string(joined));
}
