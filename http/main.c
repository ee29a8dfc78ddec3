/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http: options, the listening address, TLS, and the daemon's life.
 * The top of http/: it sets http_config (request.h), loads the tokens
 * (auth.h), starts the bounds (bounds.h) and hands the router (server.h)
 * to MHD. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "bounds.h"
#include "cleanup.h"
#include "client.h"
#include "e2b_ports.h"
#include "json_cleanup.h"
#include "request.h"
#include "server.h"

static const char usage[] =
    "usage: nsbox-http --http ADDR [--http ADDR]... [--tokens FILE | "
    "--insecure-no-auth-behind-network-policy]\n"
    "                  [--tls-cert FILE --tls-key FILE] [--socket PATH] [--max-connections N]\n"
    "                  [--max-per-token N] [--max-per-address N] [--auth-reserve N] [--timeout SEC]\n"
    "                  [--header-timeout SEC] [--keepalive-seconds SEC] [--execute-sandbox JSON]\n"
    "                  [--e2b-domain NAME[:PORT]]\n"
    "       nsbox-http --help\n"
    "\n"
    "Serve nsboxd's API over HTTP (see docs/http-and-kubernetes.md): nsbox's own API (/v1/rpc), the\n"
    "one-shot POST /execute {code} contract, agent-sandbox's runtime contract; GET /health, /v1/health,\n"
    "/healthz and / answer probes without a token (a token sees the load too).\n"
    "  --http ADDR            HOST:PORT to listen on (127.0.0.1:8080, [::1]:8080, 0.0.0.0:8080);\n"
    "                         port 0 picks a free one (printed on standard error); up to 4 of them,\n"
    "                         all serving the same (e.g. 8080 for POST /execute clients and 8888,\n"
    "                         agent-sandbox's default server_port)\n"
    "  --tokens FILE          bearer tokens, one `UID TOKEN` or `UID sha256:HEX` a line, each request\n"
    "                         is its token's uid to nsboxd (the default mode); without it and without\n"
    "                         the next option, only a loopback address is accepted, requests run as\n"
    "                         this uid, and root is refused\n"
    "  --insecure-no-auth-behind-network-policy\n"
    "                         no tokens, any address: every client that reaches the port is this\n"
    "                         uid to nsboxd (root too); for a pod whose network policy admits only\n"
    "                         its callers (clients that send no Authorization, routers that strip\n"
    "                         it). Only taken spelled in full\n"
    "  --tls-cert/--tls-key   serve HTTPS with this PEM certificate and key\n"
    "  --socket PATH          nsboxd's socket (default $NSBOX_SOCKET or /run/nsbox/nsbox.sock)\n"
    "  --max-connections N    at most N clients at once (default 256)\n"
    "  --max-per-token N      at most N requests of one token at once (default a quarter of\n"
    "                         --max-connections): more get 429\n"
    "  --max-per-address N    at most N connections from one client address, more are refused\n"
    "                         (default a quarter of --max-connections, at least 16; without\n"
    "                         --tokens, no limit but --max-connections)\n"
    "  --auth-reserve N       connections that have not yet sent a valid token take at most\n"
    "                         --max-connections less N; one more closes the oldest of them\n"
    "                         (default an eighth of --max-connections, at least 1; 0: none)\n"
    "  --timeout SEC          close a connection idle this long (default 120)\n"
    "  --header-timeout SEC   close a connection whose request has not sent its headers, with a\n"
    "                         valid token, SEC after the accept or the previous request's end\n"
    "                         (default 10)\n"
    "  --keepalive-seconds SEC\n"
    "                         a relayed WebSocket's client (and sandbox side) silent SEC is probed\n"
    "                         (TCP keepalive), then every SEC/6 (at least 1 s): one that stops\n"
    "                         answering (machine gone, network cut) is closed after 6 probes, its\n"
    "                         --max-per-token slot freed; one that answers is never cut, however\n"
    "                         quiet (default 60: let go within 120 s; 1 to 32767)\n"
    "  --execute-sandbox JSON sandbox.create params of the sandboxes POST /execute {code} makes\n"
    "  --e2b-domain NAME[:PORT]\n"
    "                         E2B's sandbox domain: a Host PORT-SANDBOXID.NAME reaches that port of\n"
    "                         the sandbox (E2B's getHost, @e2b/desktop's stream URL), and E2B's\n"
    "                         create/connect/info answer it as `domain` (docs/e2b.md)\n"
    "  --help                 this text\n";

static char *read_file(const char *path, nsbox_error_t **err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                nsbox_error(err, errno, "open %s", path);
                return NULL;
        }
        size_t len = 0, cap = 65536;
        _cleanup_free_ char *buf = malloc(cap + 1);
        for (;;) {
                if (buf == NULL || len == cap) {
                        nsbox_error(err, EFBIG, "read %s", path);
                        return NULL;
                }
                ssize_t n = read(fd, buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        nsbox_error(err, errno, "read %s", path);
                        return NULL;
                }
                if (n == 0)
                        break;
                len += n;
        }
        buf[len] = '\0';
        return steal_pointer(&buf);
}

/* HOST:PORT or [V6]:PORT into a socket address. */
static int parse_address(const char *text, struct sockaddr_storage *ss, bool *loopback, nsbox_error_t **err)
{
        _cleanup_free_ char *copy = strdup(text);
        if (copy == NULL)
                return nsbox_error(err, ENOMEM, "address");
        char *colon = strrchr(copy, ':');
        if (colon == NULL)
                return nsbox_invalid(err, "--http %s: expected HOST:PORT", text);
        *colon = '\0';
        char *host = copy, *end;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (colon[1] == '\0' || *end != '\0' || port > 65535)
                return nsbox_invalid(err, "--http %s: bad port", text);
        memset(ss, 0, sizeof(*ss));
        size_t hl = strlen(host);
        if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
                host[hl - 1] = '\0';
                struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
                a->sin6_family = AF_INET6;
                a->sin6_port = htons(port);
                if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1)
                        return nsbox_invalid(err, "--http %s: bad IPv6 address", text);
                *loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
                return 0;
        }
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        if (strcmp(host, "localhost") == 0)
                host = "127.0.0.1";
        if (host[0] == '\0')
                host = "0.0.0.0";
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
                return nsbox_invalid(
                    err, "--http %s: bad IPv4 address (names other than localhost are not looked up)", text);
        *loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
        return 0;
}

static int fail(const char *what, nsbox_error_t *err)
{
        fprintf(stderr, "nsbox-http: %s%s%s\n", what ? what : "", what && err ? ": " : "",
                err && err->message ? err->message : "");
        return 1;
}

int main(int argc, char **argv)
{
#define MAX_LISTEN 4
        const char *listen_texts[MAX_LISTEN] = { 0 }, *tokens_path = NULL, *cert_path = NULL,
                   *key_path = NULL, *socket_flag = NULL, *execute_sandbox = NULL, *e2b_domain = NULL;
        unsigned max_connections = 256, timeout = 120, max_per_token = 0, header_timeout = 10,
                 max_per_address = 0, auth_reserve = 0, keepalive = 60;
        bool auth_reserve_given = false, no_auth = false;
        size_t n_listen = 0;
        static const struct option longopts[] = {
                { "http", required_argument, NULL, 'l' },
                { "tokens", required_argument, NULL, 't' },
                { "tls-cert", required_argument, NULL, 'c' },
                { "tls-key", required_argument, NULL, 'k' },
                { "socket", required_argument, NULL, 's' },
                { "max-connections", required_argument, NULL, 'm' },
                { "max-per-token", required_argument, NULL, 'p' },
                { "max-per-address", required_argument, NULL, 'a' },
                { "auth-reserve", required_argument, NULL, 'r' },
                { "timeout", required_argument, NULL, 'T' },
                { "header-timeout", required_argument, NULL, 'H' },
                { "keepalive-seconds", required_argument, NULL, 'K' },
                { "execute-sandbox", required_argument, NULL, 'e' },
                { "e2b-domain", required_argument, NULL, 'D' },
                { "insecure-no-auth-behind-network-policy", no_argument, NULL, 'N' },
                { "help", no_argument, NULL, 'h' },
                { 0 },
        };
        int opt;
        while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
                switch (opt) {
                case 'l':
                        if (n_listen == MAX_LISTEN) {
                                fprintf(stderr, "nsbox-http: at most %d --http addresses\n", MAX_LISTEN);
                                return 2;
                        }
                        listen_texts[n_listen++] = optarg;
                        break;
                case 'N':
                        /* getopt takes any unique prefix: a mode without
                         * authentication is taken only by its whole name. */
                        if (strcmp(argv[optind - 1], "--insecure-no-auth-behind-network-policy") != 0) {
                                fprintf(stderr,
                                        "nsbox-http: %s: spell out "
                                        "--insecure-no-auth-behind-network-policy in full to serve "
                                        "without authentication\n",
                                        argv[optind - 1]);
                                return 2;
                        }
                        no_auth = true;
                        break;
                case 't':
                        tokens_path = optarg;
                        break;
                case 'c':
                        cert_path = optarg;
                        break;
                case 'k':
                        key_path = optarg;
                        break;
                case 's':
                        socket_flag = optarg;
                        break;
                case 'e':
                        execute_sandbox = optarg;
                        break;
                case 'D':
                        e2b_domain = optarg;
                        break;
                case 'm':
                case 'p':
                case 'a':
                case 'r':
                case 'T':
                case 'H':
                case 'K': {
                        char *end;
                        unsigned long v = strtoul(optarg, &end, 10);
                        unsigned long least = opt == 'r' ? 0 : 1;
                        /* the kernel takes TCP_KEEPIDLE up to 32767 s */
                        unsigned long most = opt == 'K' ? 32767 : 100000;
                        if (optarg[0] < '0' || optarg[0] > '9' || *end != '\0' || v < least || v > most) {
                                fprintf(stderr, "nsbox-http: --%s wants a number from %lu to %lu\n",
                                        opt == 'm'   ? "max-connections"
                                        : opt == 'p' ? "max-per-token"
                                        : opt == 'a' ? "max-per-address"
                                        : opt == 'r' ? "auth-reserve"
                                        : opt == 'T' ? "timeout"
                                        : opt == 'K' ? "keepalive-seconds"
                                                     : "header-timeout",
                                        least, most);
                                return 2;
                        }
                        if (opt == 'm')
                                max_connections = v;
                        else if (opt == 'p')
                                max_per_token = v;
                        else if (opt == 'a')
                                max_per_address = v;
                        else if (opt == 'r') {
                                auth_reserve = v;
                                auth_reserve_given = true;
                        } else if (opt == 'T')
                                timeout = v;
                        else if (opt == 'K')
                                keepalive = v;
                        else
                                header_timeout = v;
                        break;
                }
                case 'h':
                        fputs(usage, stdout);
                        return 0;
                default:
                        fputs(usage, stderr);
                        return 2;
                }
        }
        if (n_listen == 0 || optind != argc) {
                fputs(usage, stderr);
                return 2;
        }
        if (!auth_reserve_given)
                auth_reserve = max_connections >= 2 ? (max_connections / 8 ? max_connections / 8 : 1) : 0;
        if (auth_reserve >= max_connections) {
                fprintf(stderr, "nsbox-http: --auth-reserve must be less than --max-connections (%u)\n",
                        max_connections);
                return 2;
        }
        if ((cert_path == NULL) != (key_path == NULL)) {
                fprintf(stderr, "nsbox-http: --tls-cert and --tls-key go together\n");
                return 2;
        }
        if (no_auth && tokens_path != NULL) {
                fprintf(stderr, "nsbox-http: --tokens and --insecure-no-auth-behind-network-policy exclude "
                                "each other\n");
                return 2;
        }
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct sockaddr_storage addrs[MAX_LISTEN];
        bool loopback = true;
        const char *listen_text = NULL; /* the first one that is not loopback, for the refusal */
        for (size_t i = 0; i < n_listen; i++) {
                bool lo = false;
                if (parse_address(listen_texts[i], &addrs[i], &lo, &err) < 0)
                        return fail(NULL, err);
                if (!lo && loopback)
                        listen_text = listen_texts[i];
                loopback = loopback && lo;
        }
        if (no_auth) {
                http_config.no_auth = true;
        } else if (tokens_path != NULL) {
                if (http_tokens_load(tokens_path, &err) < 0)
                        return fail(NULL, err);
                http_config.act_as = true;
        } else if (!loopback) {
                fprintf(stderr,
                        "nsbox-http: refusing to listen on %s without --tokens: without tokens every client "
                        "is this process's uid, which only a loopback address keeps to this host (behind a "
                        "network policy that admits only the callers: "
                        "--insecure-no-auth-behind-network-policy)\n",
                        listen_text);
                return 2;
        } else if (geteuid() == 0) {
                fprintf(stderr,
                        "nsbox-http: refusing to run as root without --tokens: every local user who reaches "
                        "the port would be root to nsboxd (run it as the user it serves, or give --tokens, "
                        "or ask for --insecure-no-auth-behind-network-policy by name)\n");
                return 2;
        }
        if (e2b_domain != NULL) {
                if (!e2b_ports_domain_valid(e2b_domain)) {
                        fprintf(stderr,
                                "nsbox-http: --e2b-domain wants NAME or NAME:PORT (e.g. "
                                "nsbox.localhost:8443), not %s\n",
                                e2b_domain);
                        return 2;
                }
                http_config.e2b_domain = e2b_domain;
        }
        http_config.socket_path = client_socket_path(socket_flag);
        http_config.timeout_seconds = timeout;
        http_config.keepalive_seconds = keepalive;
        /* One token must not hold every connection: the rest of the tokens would wait. */
        http_config.max_per_token = max_per_token ? max_per_token : (max_connections + 3) / 4;
        /* Without tokens every client is one owner, and this host's (one
         * address) or, behind a network policy, mostly a router's: a
         * per-address limit would only lower --max-connections. With tokens, a peer needs several addresses
         * to take more than a quarter of the connections (a proxy in front makes every client one address:
         * raise it then). */
        if (max_per_address == 0 && tokens_path == NULL)
                max_per_address = max_connections;
        if (max_per_address == 0) {
                max_per_address = (max_connections + 3) / 4;
                if (max_per_address < 16)
                        max_per_address = max_connections < 16 ? max_connections : 16;
        }
        struct http_bounds bounds = {
                .header_timeout_seconds = header_timeout,
                .max_per_address = max_per_address,
                .max_unauthenticated = max_connections - auth_reserve,
                .max_connections = max_connections,
        };
        if (execute_sandbox != NULL) {
                json_error_t jerr;
                http_config.execute_sandbox = json_loads(execute_sandbox, 0, &jerr);
                if (!json_is_object(http_config.execute_sandbox)) {
                        fprintf(stderr, "nsbox-http: --execute-sandbox wants a JSON object (%s)\n",
                                jerr.text);
                        return 2;
                }
        }
        _cleanup_free_ char *cert = NULL, *key = NULL;
        if (cert_path != NULL) {
                if ((cert = read_file(cert_path, &err)) == NULL || (key = read_file(key_path, &err)) == NULL)
                        return fail("TLS", err);
        }
        /* A stream's writer thread writes to a pipe its reader may have
         * closed (the HTTP client left): EPIPE, not a signal. */
        signal(SIGPIPE, SIG_IGN);
        sigset_t stop;
        sigemptyset(&stop);
        sigaddset(&stop, SIGINT);
        sigaddset(&stop, SIGTERM);
        sigaddset(&stop, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &stop, NULL);

        /* poll(), not select(): a connection's fds (its socket, its nsboxd
         * connection, a stream's pipe) may be numbered past FD_SETSIZE. */
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                         MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE;
        if (cert != NULL)
                flags |= MHD_USE_TLS;
        struct MHD_OptionItem tls_options[] = {
                { cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, cert },
                { MHD_OPTION_HTTPS_MEM_KEY, 0, key },
                { MHD_OPTION_END, 0, NULL },
        };
        if (http_bounds_start(&bounds, &err) < 0)
                return fail(NULL, err);
        struct MHD_Daemon *daemons[MAX_LISTEN] = { 0 };
        for (size_t i = 0; i < n_listen; i++) {
                /* --max-connections is counted by http_bounds_accept, over
                 * every address; MHD's own limit leaves room for the
                 * connections it cut that MHD has yet to close. */
                daemons[i] = MHD_start_daemon(
                    flags | (addrs[i].ss_family == AF_INET6 ? MHD_USE_IPv6 : 0), 0, http_bounds_accept, NULL,
                    http_access_handler, NULL, MHD_OPTION_EXTERNAL_LOGGER, http_bounds_mhd_log, NULL,
                    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addrs[i], MHD_OPTION_CONNECTION_LIMIT,
                    max_connections + HTTP_BOUNDS_DYING(max_connections), MHD_OPTION_CONNECTION_TIMEOUT,
                    timeout, MHD_OPTION_NOTIFY_COMPLETED, http_request_completed, NULL,
                    MHD_OPTION_NOTIFY_CONNECTION, http_bounds_notify, NULL, MHD_OPTION_ARRAY, tls_options,
                    MHD_OPTION_END);
                if (daemons[i] == NULL) {
                        fprintf(stderr, "nsbox-http: cannot listen on %s%s\n", listen_texts[i],
                                cert ? " (or the TLS certificate/key was refused)" : "");
                        return 1;
                }
                const union MHD_DaemonInfo *port = MHD_get_daemon_info(daemons[i], MHD_DAEMON_INFO_BIND_PORT);
                fprintf(stderr, "nsbox-http: listening on %s port %u (%s)\n", listen_texts[i],
                        port ? port->port : 0, cert ? "https" : "http");
        }
        if (no_auth)
                fprintf(stderr,
                        "nsbox-http: WARNING: NO AUTHENTICATION (--insecure-no-auth-behind-network-policy): "
                        "every client that reaches the port%s is uid %u to nsboxd, with all its sandboxes; "
                        "only the network policy in front keeps anyone else out\n",
                        n_listen > 1 ? "s" : "", (unsigned)geteuid());
        else if (tokens_path != NULL)
                fprintf(stderr,
                        "nsbox-http: mode: bearer tokens from %s, each request its token's uid to nsboxd\n",
                        tokens_path);
        else
                fprintf(stderr,
                        "nsbox-http: mode: no tokens, loopback only: every client is uid %u to nsboxd\n",
                        (unsigned)geteuid());
        fprintf(stderr,
                "nsbox-http: nsboxd at %s; probes without a token: GET /health, /v1/health, /healthz, /; "
                "POST /execute {code} sandboxes: %s\n",
                http_config.socket_path, execute_sandbox ? execute_sandbox : "nsboxd's defaults");
        fprintf(
            stderr,
            "nsbox-http: a request's headers and token within %u s, at most %u connections an address, "
            "%u of %u before a valid token, %u requests a token at once, idle connections closed after "
            "%u s, a WebSocket's peer that stops answering let go within %u s (TCP keepalive after %u s of "
            "silence)\n",
            header_timeout, max_per_address, max_connections - auth_reserve, max_connections,
            http_config.max_per_token, timeout, e2b_ports_keepalive_limit(keepalive), keepalive);
        int sig;
        for (;;) {
                sigwait(&stop, &sig);
                if (sig != SIGHUP)
                        break;
                if (tokens_path == NULL)
                        continue;
                nsbox_error_free(&err);
                if (http_tokens_load(tokens_path, &err) < 0)
                        fprintf(stderr, "nsbox-http: SIGHUP: %s; the tokens stay as they were\n",
                                err->message);
                else
                        fprintf(stderr, "nsbox-http: SIGHUP: tokens reloaded from %s\n", tokens_path);
        }
        for (size_t i = 0; i < n_listen; i++)
                MHD_stop_daemon(daemons[i]);
        http_bounds_stop();
        json_decref(http_config.execute_sandbox);
        return 0;
}
