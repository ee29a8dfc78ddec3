/* SPDX-License-Identifier: Apache-2.0 */
/* TLS to a secret's host ended and begun again in a thread per connection. */
#include "intercept.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "io.h"
#include "log.h"
#include "netpolicy.h"
#include "sniff.h"
#include "tlscert.h"

struct intercept_ca {
        int refs;
        X509 *cert;
        EVP_PKEY *key;      /* the CA's */
        EVP_PKEY *leaf_key; /* of the certificates it signs for this sandbox's hosts */
        /* This sandbox's connections intercepted now (atomic): a sandbox
         * that holds its INTERCEPT_PER_SANDBOX leaves the rest of
         * INTERCEPT_MAX to the others. A sandbox.update that gives a new CA
         * starts a new count: only nsboxd's client can do that, never the
         * sandbox. */
        int running;
};

struct job {
        int client_fd, upstream_fd;
        /* false: plain HTTP (port 80), the same requests without TLS on
         * either side. */
        bool tls;
        unsigned port;
        bool connected; /* to the host (its TLS made) */
        uint8_t *prefix;
        size_t prefix_len, prefix_used; /* plain HTTP: read from the prefix first */
        char host[NETPOLICY_NAME_MAX + 1];
        char sandbox[128];
        struct intercept_ca *ca;
        struct inject_secrets *secrets;
        SSL *client, *upstream;
        BIO *client_in; /* what the sandbox sent, fed from client_fd as the TLS code asks */
        /* While the TLS handshake and a request head are read: when they
         * must be in by (CLOCK_MONOTONIC ms; 0: no deadline). Each read has
         * its timeout, but one byte a little under it would keep the
         * thread forever. */
        int64_t head_deadline_ms;
        /* A response on its way to the sandbox, its secrets' values
         * masked: a piece, after the end of the last that could begin a
         * value (held, not sent yet). */
        char *mask;
        size_t mask_held;
};

static SSL_CTX *server_ctx, *client_ctx;
static int running;

static const char *ssl_error_text(void)
{
        static __thread char text[256];
        unsigned long e = ERR_get_error();
        if (e == 0)
                return "connection closed";
        ERR_error_string_n(e, text, sizeof(text));
        ERR_clear_error();
        return text;
}

int intercept_init(const char *ca_file, nsbox_error_t **err)
{
        server_ctx = SSL_CTX_new(TLS_server_method());
        client_ctx = SSL_CTX_new(TLS_client_method());
        if (server_ctx == NULL || client_ctx == NULL)
                return nsbox_error(err, ENOMEM, "TLS contexts: %s", ssl_error_text());
        SSL_CTX_set_min_proto_version(server_ctx, TLS1_2_VERSION);
        SSL_CTX_set_min_proto_version(client_ctx, TLS1_2_VERSION);
        if (SSL_CTX_set_default_verify_paths(client_ctx) != 1)
                return nsbox_error(err, EIO, "the system's CA certificates: %s", ssl_error_text());
        if (ca_file != NULL && SSL_CTX_load_verify_locations(client_ctx, ca_file, NULL) != 1)
                return nsbox_error(err, EIO, "--ca-file %s: %s", ca_file, ssl_error_text());
        SSL_CTX_set_verify(client_ctx, SSL_VERIFY_PEER, NULL);
        return 0;
}

struct intercept_ca *intercept_ca_parse(json_t *tls, const char **why)
{
        const char *cert = json_string_value(json_object_get(tls, "cert"));
        const char *key = json_string_value(json_object_get(tls, "key"));
        if (cert == NULL || key == NULL) {
                *why = "\"tls\" is not {cert, key}";
                return NULL;
        }
        struct intercept_ca *ca = calloc(1, sizeof(*ca));
        BIO *cb = BIO_new_mem_buf(cert, -1), *kb = BIO_new_mem_buf(key, -1);
        if (ca != NULL && cb != NULL && kb != NULL) {
                ca->refs = 1;
                ca->cert = PEM_read_bio_X509(cb, NULL, NULL, NULL);
                ca->key = PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL);
                ca->leaf_key = tlscert_key(NULL);
        }
        BIO_free(cb);
        BIO_free(kb);
        if (ca == NULL || ca->cert == NULL || ca->key == NULL || ca->leaf_key == NULL) {
                *why = "\"tls\" holds no usable CA certificate and key";
                ERR_clear_error();
                if (ca != NULL)
                        intercept_ca_unref(ca);
                return NULL;
        }
        return ca;
}

void intercept_ca_unref(struct intercept_ca *ca)
{
        if (ca == NULL || __atomic_sub_fetch(&ca->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        X509_free(ca->cert);
        EVP_PKEY_free(ca->key);
        EVP_PKEY_free(ca->leaf_key);
        free(ca);
}

/* all: the connections intercepted now, mine: the sandbox's, each with
 * the one asked for. */
static const char *full_with(int all, int mine)
{
        if (all > INTERCEPT_MAX)
                return "too many intercepted connections";
        if (mine > INTERCEPT_PER_SANDBOX)
                return "too many intercepted connections of this sandbox";
        if (all > INTERCEPT_MAX - INTERCEPT_RESERVE && mine > INTERCEPT_RESERVE_EACH)
                return "too many intercepted connections of this sandbox (the rest are kept for other "
                       "sandboxes)";
        return NULL;
}

const char *intercept_full(const struct intercept_ca *ca)
{
        return full_with(__atomic_load_n(&running, __ATOMIC_RELAXED) + 1,
                         __atomic_load_n(&ca->running, __ATOMIC_RELAXED) + 1);
}

static int64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- the client side: TLS over a memory BIO fed from the socket ----------- */

/* Plain HTTP's reads, either side (SO_RCVTIMEO bounds each). */
static ssize_t read_some(int fd, void *buf, size_t cap)
{
        ssize_t n;
        while ((n = read(fd, buf, cap)) < 0 && errno == EINTR)
                ;
        return n;
}

/* False when the head's deadline passes before the client sends more. */
static bool client_wait(struct job *j)
{
        if (j->head_deadline_ms == 0)
                return true;
        int64_t left = j->head_deadline_ms - now_ms();
        struct pollfd p = { .fd = j->client_fd, .events = POLLIN };
        return left > 0 && poll(&p, 1, (int)left) > 0;
}

static bool client_feed(struct job *j)
{
        if (!client_wait(j))
                return false;
        uint8_t buf[16384];
        ssize_t n = read(j->client_fd, buf, sizeof(buf));
        return n > 0 && BIO_write(j->client_in, buf, (int)n) == (int)n;
}

/* SSL_accept or SSL_read on the client side: >0, or 0 at its end, -1 on error. */
static int client_step(struct job *j, void *buf, int len)
{
        if (!j->tls) {
                if (j->prefix_used < j->prefix_len) {
                        size_t n = j->prefix_len - j->prefix_used < (size_t)len
                                       ? j->prefix_len - j->prefix_used
                                       : (size_t)len;
                        memcpy(buf, j->prefix + j->prefix_used, n);
                        j->prefix_used += n;
                        return (int)n;
                }
                if (!client_wait(j))
                        return -1;
                ssize_t n = read_some(j->client_fd, buf, (size_t)len);
                return n < 0 ? -1 : (int)n;
        }
        for (;;) {
                int r = buf ? SSL_read(j->client, buf, len) : SSL_accept(j->client);
                if (r > 0)
                        return r;
                int e = SSL_get_error(j->client, r);
                if (e == SSL_ERROR_WANT_READ && client_feed(j))
                        continue;
                return e == SSL_ERROR_ZERO_RETURN ? 0 : -1;
        }
}

static bool client_write(struct job *j, const void *data, size_t len)
{
        if (!j->tls)
                return io_write_all(j->client_fd, data, len) == 0;
        return len == 0 || SSL_write(j->client, data, (int)len) == (int)len;
}

static void client_answer(struct job *j, const char *status, const char *body)
{
        char msg[1024];
        int n = snprintf(
            msg, sizeof(msg),
            "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
            status, strlen(body), body);
        client_write(j, msg, (size_t)n);
}

/* Response bytes to the sandbox, each value of its secrets masked
 * (inject_mask_body); the end of a piece that could begin a value waits
 * for the next piece, or for end. */
static bool client_write_masked(struct job *j, const void *data, size_t len, bool end)
{
        if (j->secrets->longest_value == 0)
                return client_write(j, data, len);
        if (j->mask == NULL && (j->mask = malloc(j->secrets->longest_value + EGRESS_INTERCEPT_IO)) == NULL)
                return false;
        if (len > 0)
                memcpy(j->mask + j->mask_held, data, len);
        size_t total = j->mask_held + len;
        size_t hold = inject_mask_body(j->secrets, j->mask, total);
        if (end)
                hold = 0;
        bool ok = client_write(j, j->mask, total - hold);
        memmove(j->mask, j->mask + total - hold, hold);
        j->mask_held = hold;
        return ok;
}

/* A response head to the sandbox, each value of its secrets replaced by
 * its placeholder (in out, of out_cap bytes; where that does not fit,
 * each of its bytes masked in place). */
static bool client_write_head(struct job *j, uint8_t *head, size_t len, char *out, size_t out_cap)
{
        size_t n = 0;
        if (inject_mask_head(j->secrets, (const char *)head, len, out, out_cap, &n) == INJECT_OK)
                return client_write(j, out, n);
        inject_mask_body(j->secrets, (char *)head, len);
        return client_write(j, head, len);
}

static bool upstream_write(struct job *j, const void *data, size_t len)
{
        if (!j->tls)
                return io_write_all(j->upstream_fd, data, len) == 0;
        return len == 0 || SSL_write(j->upstream, data, (int)len) == (int)len;
}

/* >0 bytes read from the host, or <=0 at its end or on an error. */
static int upstream_read(struct job *j, void *buf, size_t cap)
{
        if (j->tls)
                return SSL_read(j->upstream, buf, (int)cap);
        return (int)read_some(j->upstream_fd, buf, cap);
}

/* --- one request ---------------------------------------------------------- */

static bool upstream_connect(struct job *j)
{
        j->connected = true;
        if (!j->tls)
                return true; /* connected by the proxy's loop */
        j->upstream = SSL_new(client_ctx);
        if (j->upstream == NULL || SSL_set_fd(j->upstream, j->upstream_fd) != 1 ||
            SSL_set_tlsext_host_name(j->upstream, j->host) != 1 || SSL_set1_host(j->upstream, j->host) != 1)
                return false;
        if (SSL_connect(j->upstream) == 1)
                return true;
        long verify = SSL_get_verify_result(j->upstream);
        char body[600];
        snprintf(body, sizeof(body), "nsbox: could not make a verified TLS connection to %s: %s\n", j->host,
                 verify != X509_V_OK ? X509_verify_cert_error_string(verify) : ssl_error_text());
        log_warn("sandbox %s: %s:%u: %s", j->sandbox, j->host, j->port, body + strlen("nsbox: "));
        client_answer(j, "502 Bad Gateway", body);
        return false;
}

/* How a message's body ends: Content-Length bytes, the last chunk, or
 * (a response with neither) the close of the connection. */
struct body_frame {
        bool chunked;
        bool has_length;
        uint64_t length;
};

/* One body from one side to the other: the n bytes at *rest that came
 * with the head, then what is read. A request's body (from the client) is
 * searched for placeholders before each piece goes on (*refused says
 * which), its head (head_len bytes) sent upstream only once the piece that
 * came with it passed: a request refused there never reaches the host. A
 * response's body goes to the client with the values masked. True when the
 * body ended by its framing; bytes after it (a pipelined request) are left
 * at *rest, *n. */
static bool pass_body(struct job *j, bool from_client, const char *head, size_t head_len, struct body_frame f,
                      uint8_t **rest, size_t *n, uint8_t *buf, size_t cap,
                      const struct inject_secret **refused)
{
        struct sniff_chunked chunks = { 0 };
        struct inject_scan scan = { 0 }, data = { 0 };
        uint64_t left = f.length;
        for (;;) {
                size_t keep;
                if (f.chunked) {
                        *refused = NULL;
                        keep = from_client
                                   ? inject_scan_chunked(j->secrets, &chunks, &data, *rest, *n, refused)
                                   : sniff_chunked_feed(&chunks, *rest, *n);
                        if (*refused != NULL || chunks.state == SNIFF_CHUNK_ERROR)
                                return false;
                } else if (f.has_length) {
                        keep = *n > left ? (size_t)left : *n;
                        left -= keep;
                } else {
                        keep = *n;
                }
                if (from_client && (*refused = inject_scan_body(j->secrets, &scan, *rest, keep)) != NULL)
                        return false;
                bool done = f.chunked ? chunks.state == SNIFF_CHUNK_DONE : f.has_length && left == 0;
                /* The head waits for the body's first bytes (a client may
                 * write them apart): those are searched before it goes. */
                if (head != NULL && (keep > 0 || done)) {
                        if (!upstream_write(j, head, head_len))
                                return false;
                        head = NULL;
                }
                if (!(from_client ? upstream_write(j, *rest, keep)
                                  : client_write_masked(j, *rest, keep, done)))
                        return false;
                *rest += keep;
                *n -= keep;
                if (done)
                        return true;
                int r = from_client ? client_step(j, buf, (int)cap) : upstream_read(j, buf, cap);
                if (r <= 0) {
                        if (!from_client) /* the end of a body that ends with the connection */
                                client_write_masked(j, NULL, 0, true);
                        return false;
                }
                *rest = buf;
                *n = (size_t)r;
        }
}

/* The upstream's answer to one request, relayed as it is framed (1xx
 * interim answers first). True when the connection carries another
 * request after it. */
static bool relay_response(struct job *j, bool head_request, uint8_t *buf, size_t cap, char *out,
                           size_t out_cap)
{
        size_t len = 0;
        for (;;) {
                struct sniff_http_response rh;
                enum sniff_result sr =
                    len > 0 ? sniff_http_response_head((const char *)buf, len, &rh) : SNIFF_NEED_MORE;
                while (sr == SNIFF_NEED_MORE && len < cap) {
                        int r = upstream_read(j, buf + len, cap - len);
                        if (r <= 0)
                                return false;
                        len += (size_t)r;
                        sr = sniff_http_response_head((const char *)buf, len, &rh);
                }
                uint8_t *rest = buf;
                size_t n = len;
                if (sr != SNIFF_OK || rh.status == 101) {
                        /* Not one we can frame: what comes, until the close. */
                        const struct inject_secret *none = NULL;
                        pass_body(j, false, NULL, 0, (struct body_frame){ 0 }, &rest, &n, buf, cap, &none);
                        return false;
                }
                bool sent = client_write_head(j, buf, rh.head_len, out, out_cap);
                explicit_bzero(out, out_cap);
                if (!sent)
                        return false;
                rest = buf + rh.head_len;
                n = len - rh.head_len;
                if (rh.status >= 100 && rh.status < 200) {
                        memmove(buf, rest, n);
                        len = n;
                        continue;
                }
                if (head_request || rh.status == 204 || rh.status == 304)
                        return !rh.close;
                struct body_frame f = { .chunked = rh.chunked,
                                        .has_length = rh.has_length,
                                        .length = rh.content_length };
                const struct inject_secret *none = NULL;
                bool framed = pass_body(j, false, NULL, 0, f, &rest, &n, buf, cap, &none);
                return framed && (rh.chunked || rh.has_length) && !rh.close;
        }
}

/* The requests of one connection, each with the secrets put in: HTTP/1.1
 * keep-alive carries several, each one judged and rewritten as the first. */
static void intercept_requests(struct job *j)
{
        size_t cap = SNIFF_HEAD_MAX, len = 0;
        uint8_t *in = malloc(cap), *io = malloc(EGRESS_INTERCEPT_IO);
        size_t out_cap = 2 * SNIFF_HEAD_MAX;
        char *out = malloc(out_cap);
        const struct inject_secret *refused = NULL;
        if (in == NULL || io == NULL || out == NULL)
                goto done;
        for (;;) {
                struct sniff_http h;
                if (j->head_deadline_ms == 0) /* the first one's runs from the handshake */
                        j->head_deadline_ms = now_ms() + INTERCEPT_HEAD_SECS * 1000;
                enum sniff_result sr = len > 0 ? sniff_http_head((const char *)in, len, &h) : SNIFF_NEED_MORE;
                while (sr == SNIFF_NEED_MORE && len < cap) {
                        int r = client_step(j, in + len, (int)(cap - len));
                        if (r <= 0)
                                goto done; /* the client is done: between requests, its end */
                        len += (size_t)r;
                        sr = sniff_http_head((const char *)in, len, &h);
                }
                j->head_deadline_ms = 0;
                if (sr != SNIFF_OK || h.connect) {
                        client_answer(j, "400 Bad Request", "nsbox: bad request\n");
                        goto done;
                }
                char host[NETPOLICY_NAME_MAX + 1];
                if (netpolicy_name_normalize(h.host, strlen(h.host), host) < 0 ||
                    strcmp(host, j->host) != 0) {
                        /* Domain fronting: the secrets are for the name the TLS was
                         * for (plain HTTP: the one the first request named). */
                        client_answer(j, "421 Misdirected Request",
                                      j->tls ? "nsbox: the request's Host is not its TLS server name\n"
                                             : "nsbox: the request's Host is not the connection's\n");
                        goto done;
                }
                size_t n = 0;
                enum inject_result ir = inject_rewrite_head(j->secrets, j->host, (const char *)in, &h,
                                                            !h.close, out, out_cap, &n, &refused);
                if (ir == INJECT_REFUSED)
                        goto refuse;
                if (ir != INJECT_OK) {
                        client_answer(j, "400 Bad Request", "nsbox: request head too large\n");
                        goto done;
                }
                if (!j->connected && !upstream_connect(j))
                        goto done;
                uint8_t *rest = in + h.head_len;
                size_t left = len - h.head_len;
                struct body_frame f = { .chunked = h.chunked,
                                        .has_length = true,
                                        .length = h.content_length };
                bool passed = pass_body(j, true, out, n, f, &rest, &left, io, EGRESS_INTERCEPT_IO, &refused);
                explicit_bzero(out, n);
                if (!passed) {
                        if (refused != NULL)
                                goto refuse;
                        goto done;
                }
                __atomic_add_fetch(&j->secrets->injected, 1, __ATOMIC_RELAXED);
                /* What came after the body: the next request's start. */
                memmove(in, rest, left);
                len = left;
                if (!relay_response(j, strcmp(h.method, "HEAD") == 0, io, EGRESS_INTERCEPT_IO, out,
                                    out_cap) ||
                    h.close)
                        goto done;
        }
refuse:
        __atomic_add_fetch(&j->secrets->refused, 1, __ATOMIC_RELAXED);
        char why[192];
        inject_refusal(refused, j->host, why, sizeof(why));
        log_warn("sandbox %s: network policy refused %s:%u (%s)", j->sandbox, j->host, j->port, why);
        char body[NETPOLICY_NAME_MAX + 64];
        snprintf(body, sizeof(body), "nsbox: network policy refused %s\n", j->host);
        client_answer(j, "403 Forbidden", body);
done:
        if (out != NULL)
                explicit_bzero(out, out_cap);
        free(out);
        free(in);
        free(io);
}

/* The job's references and memory, and its place in the counts. */
static void job_free(struct job *j)
{
        if (j->mask != NULL) {
                explicit_bzero(j->mask, j->secrets->longest_value + EGRESS_INTERCEPT_IO);
                free(j->mask);
        }
        __atomic_sub_fetch(&j->ca->running, 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&running, 1, __ATOMIC_RELAXED);
        intercept_ca_unref(j->ca);
        inject_unref(j->secrets);
        free(j->prefix);
        free(j);
}

/* A certificate for the host that cannot be made, or a TLS session for it
 * (out of memory, a name OpenSSL will not sign), closes the connection:
 * said in the log, at most once a second for all the threads (log_limited
 * is the loop's: its slots have no lock). */
static void leaf_failed(struct job *j)
{
        static time_t last;
        time_t now = time(NULL);
        if (__atomic_exchange_n(&last, now, __ATOMIC_RELAXED) != now)
                log_warn("sandbox %s: %s:443: could not make its certificate or TLS session (%s): connection "
                         "closed",
                         j->sandbox, j->host, ssl_error_text());
}

static void *intercept_main(void *arg)
{
        struct job *j = arg;
        j->head_deadline_ms = now_ms() + INTERCEPT_HEAD_SECS * 1000;
        struct timeval tv = { .tv_sec = INTERCEPT_TIMEOUT_SECS };
        int fds[2] = { j->client_fd, j->upstream_fd };
        for (int i = 0; i < 2; i++) {
                int flags = fcntl(fds[i], F_GETFL);
                fcntl(fds[i], F_SETFL, flags & ~O_NONBLOCK);
                setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        }
        X509 *leaf = NULL;
        BIO *client_out = NULL;
        if (!j->tls) {
                intercept_requests(j);
                goto done;
        }
        leaf = tlscert_make(j->ca->leaf_key, j->host, j->ca->cert, j->ca->key, NULL);
        j->client = SSL_new(server_ctx);
        j->client_in = BIO_new(BIO_s_mem());
        client_out = BIO_new_socket(j->client_fd, BIO_NOCLOSE);
        if (leaf != NULL && j->client != NULL && j->client_in != NULL && client_out != NULL &&
            SSL_use_certificate(j->client, leaf) == 1 &&
            SSL_use_PrivateKey(j->client, j->ca->leaf_key) == 1) {
                BIO_set_mem_eof_return(j->client_in, -1);
                BIO_write(j->client_in, j->prefix, (int)j->prefix_len);
                SSL_set_bio(j->client, j->client_in, client_out);
                client_out = NULL;
                if (client_step(j, NULL, 0) > 0)
                        intercept_requests(j);
                SSL_shutdown(j->client);
        } else {
                leaf_failed(j);
                BIO_free(j->client_in);
        }
done:
        ERR_clear_error();
        BIO_free(client_out);
        X509_free(leaf);
        SSL_free(j->client);
        if (j->upstream != NULL) {
                SSL_shutdown(j->upstream);
                SSL_free(j->upstream);
        }
        close(j->client_fd);
        close(j->upstream_fd);
        OPENSSL_thread_stop();
        job_free(j);
        return NULL;
}

int intercept_start(int client_fd, int upstream_fd, const uint8_t *prefix, size_t len, bool tls,
                    unsigned port, const char *host, const char *sandbox_id, struct intercept_ca *ca,
                    struct inject_secrets *secrets)
{
        /* Counted here, where the connection becomes a thread: the check
         * in conn_decide came before the connect, and other connections of
         * the sandbox may have been handed over since. */
        int all = __atomic_add_fetch(&running, 1, __ATOMIC_RELAXED);
        int mine = __atomic_add_fetch(&ca->running, 1, __ATOMIC_RELAXED);
        struct job *j = NULL;
        bool full = full_with(all, mine) != NULL;
        if (full || (j = calloc(1, sizeof(*j))) == NULL) {
                __atomic_sub_fetch(&running, 1, __ATOMIC_RELAXED);
                __atomic_sub_fetch(&ca->running, 1, __ATOMIC_RELAXED);
                close(client_fd);
                close(upstream_fd);
                return full ? -EBUSY : -ENOMEM;
        }
        __atomic_add_fetch(&ca->refs, 1, __ATOMIC_RELAXED);
        j->ca = ca;
        j->secrets = inject_ref(secrets);
        j->client_fd = client_fd;
        j->upstream_fd = upstream_fd;
        j->tls = tls;
        j->port = port;
        snprintf(j->host, sizeof(j->host), "%s", host);
        snprintf(j->sandbox, sizeof(j->sandbox), "%s", sandbox_id);
        if ((j->prefix = malloc(len ? len : 1)) == NULL) {
                close(client_fd);
                close(upstream_fd);
                job_free(j);
                return -ENOMEM;
        }
        memcpy(j->prefix, prefix, len);
        j->prefix_len = len;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 << 10);
        pthread_t t;
        int r = pthread_create(&t, &attr, intercept_main, j);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                close(client_fd);
                close(upstream_fd);
                job_free(j);
                return -r;
        }
        return 0;
}
