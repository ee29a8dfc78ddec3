/* SPDX-License-Identifier: Apache-2.0 */
/* Reading where a sandbox's connection wants to go from its first bytes: TLS SNI, HTTP Host. */
#include "sniff.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* --- TLS ClientHello ------------------------------------------------------ */

#define TLS_RECORD_HANDSHAKE   22
#define TLS_HANDSHAKE_HELLO    1
#define TLS_EXT_SERVER_NAME    0
#define TLS_SNI_HOST_NAME      0
#define TLS_RECORD_PAYLOAD_MAX (16384 + 2048)

static unsigned get16(const uint8_t *p)
{
        return (unsigned)p[0] << 8 | p[1];
}

static enum sniff_result parse_client_hello(const uint8_t *b, size_t len, char name[SNIFF_NAME_MAX + 1])
{
        size_t p = 2 + 32; /* client_version, random */
        if (p + 1 > len)
                return SNIFF_INVALID;
        size_t sid = b[p];
        if (sid > 32)
                return SNIFF_INVALID;
        p += 1 + sid;
        if (p + 2 > len)
                return SNIFF_INVALID;
        size_t suites = get16(b + p);
        if (suites < 2 || suites % 2 != 0)
                return SNIFF_INVALID;
        p += 2 + suites;
        if (p + 1 > len)
                return SNIFF_INVALID;
        size_t compression = b[p];
        if (compression < 1)
                return SNIFF_INVALID;
        p += 1 + compression;
        if (p > len)
                return SNIFF_INVALID;
        if (p == len)
                return SNIFF_NO_NAME; /* no extensions at all */
        if (p + 2 > len)
                return SNIFF_INVALID;
        size_t ext_end = p + 2 + get16(b + p);
        if (ext_end > len)
                return SNIFF_INVALID;
        p += 2;
        while (p < ext_end) {
                if (p + 4 > ext_end)
                        return SNIFF_INVALID;
                unsigned type = get16(b + p);
                size_t elen = get16(b + p + 2);
                p += 4;
                if (p + elen > ext_end)
                        return SNIFF_INVALID;
                if (type != TLS_EXT_SERVER_NAME) {
                        p += elen;
                        continue;
                }
                if (elen < 2 || get16(b + p) != elen - 2)
                        return SNIFF_INVALID;
                size_t q = p + 2, list_end = p + elen;
                while (q < list_end) {
                        if (q + 3 > list_end)
                                return SNIFF_INVALID;
                        unsigned name_type = b[q];
                        size_t nlen = get16(b + q + 1);
                        q += 3;
                        if (q + nlen > list_end)
                                return SNIFF_INVALID;
                        if (name_type == TLS_SNI_HOST_NAME) {
                                if (nlen == 0 || nlen > SNIFF_NAME_MAX || memchr(b + q, '\0', nlen) != NULL)
                                        return SNIFF_INVALID;
                                memcpy(name, b + q, nlen);
                                name[nlen] = '\0';
                                return SNIFF_OK;
                        }
                        q += nlen;
                }
                return SNIFF_NO_NAME;
        }
        return SNIFF_NO_NAME;
}

enum sniff_result sniff_tls_sni(const uint8_t *buf, size_t len, char name[SNIFF_NAME_MAX + 1])
{
        /* The handshake message reassembled from the records' fragments. */
        uint8_t hs[SNIFF_HEAD_MAX];
        size_t hs_len = 0, pos = 0;
        for (;;) {
                if (pos + 5 > len) {
                        /* Judge the bytes there are: a first byte that is
                         * not a handshake record is not TLS at all. */
                        if (pos < len && buf[pos] != TLS_RECORD_HANDSHAKE)
                                return SNIFF_INVALID;
                        if (pos + 1 < len && buf[pos + 1] != 3)
                                return SNIFF_INVALID;
                        return SNIFF_NEED_MORE;
                }
                const uint8_t *r = buf + pos;
                size_t rlen = get16(r + 3);
                if (r[0] != TLS_RECORD_HANDSHAKE || r[1] != 3 || rlen == 0 || rlen > TLS_RECORD_PAYLOAD_MAX)
                        return SNIFF_INVALID;
                size_t avail = len - pos - 5 < rlen ? len - pos - 5 : rlen;
                if (hs_len + avail > sizeof(hs))
                        return SNIFF_INVALID;
                memcpy(hs + hs_len, r + 5, avail);
                hs_len += avail;
                if (hs_len >= 1 && hs[0] != TLS_HANDSHAKE_HELLO)
                        return SNIFF_INVALID;
                if (hs_len >= 4) {
                        size_t mlen = (size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3];
                        if (mlen > sizeof(hs) - 4)
                                return SNIFF_INVALID;
                        if (hs_len >= 4 + mlen)
                                return parse_client_hello(hs + 4, mlen, name);
                }
                if (avail < rlen)
                        return SNIFF_NEED_MORE;
                pos += 5 + rlen;
        }
}

/* --- HTTP request head ---------------------------------------------------- */

static bool is_tchar(unsigned char c)
{
        return isascii(c) && (isalnum(c) || strchr("!#$%&'*+-.^_`|~", c) != NULL) && c != '\0';
}

/* host[:port] into out; port 0 when absent. IPv6 literals and userinfo are
 * refused: the proxy is IPv4 only and "user@host" only misleads. */
static bool parse_authority(const char *a, size_t len, bool port_required, struct sniff_http *out)
{
        const char *colon = memrchr(a, ':', len);
        size_t hlen = colon ? (size_t)(colon - a) : len;
        if (hlen == 0 || hlen > SNIFF_NAME_MAX || memchr(a, '@', len) != NULL || memchr(a, '[', len) != NULL)
                return false;
        for (size_t i = 0; i < hlen; i++)
                if (a[i] == ':' || a[i] == '/' || (unsigned char)a[i] <= ' ' || a[i] == 0x7f)
                        return false;
        out->port = 0;
        if (colon != NULL) {
                size_t plen = len - hlen - 1;
                if (plen == 0 || plen > 5)
                        return false;
                unsigned port = 0;
                for (size_t i = 0; i < plen; i++) {
                        if (!isdigit((unsigned char)colon[1 + i]))
                                return false;
                        port = port * 10 + (unsigned)(colon[1 + i] - '0');
                }
                if (port == 0 || port > 65535)
                        return false;
                out->port = (uint16_t)port;
        } else if (port_required) {
                return false;
        }
        memcpy(out->host, a, hlen);
        out->host[hlen] = '\0';
        return true;
}

static bool header_is(const char *line, size_t name_len, const char *name)
{
        return strlen(name) == name_len && strncasecmp(line, name, name_len) == 0;
}

static size_t host_len_without_dot(const char *host)
{
        size_t n = strlen(host);
        return n > 0 && host[n - 1] == '.' ? n - 1 : n;
}

/* Whether a Host header value names the absolute URI's authority: the same
 * host (case-insensitive, a trailing dot ignored) and port (80 when absent). */
static bool host_header_matches(const char *v, size_t vlen, const struct sniff_http *uri)
{
        struct sniff_http h;
        if (!parse_authority(v, vlen, false, &h))
                return false;
        size_t a = host_len_without_dot(h.host), b = host_len_without_dot(uri->host);
        return a == b && strncasecmp(h.host, uri->host, a) == 0 &&
               (h.port ? h.port : 80) == (uri->port ? uri->port : 80);
}

bool sniff_http_header_named(const char *line, size_t len, const char *name)
{
        const char *colon = memchr(line, ':', len);
        return colon != NULL && header_is(line, (size_t)(colon - line), name);
}

bool sniff_http_hop_header(const char *line, size_t len)
{
        static const char *hop[] = { "connection",          "proxy-connection", "keep-alive",
                                     "proxy-authorization", "upgrade",          "te" };
        const char *colon = memchr(line, ':', len);
        if (colon == NULL)
                return false;
        for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
                if (header_is(line, (size_t)(colon - line), hop[i]))
                        return true;
        return false;
}

/* Whether a comma-separated header value holds token (case-insensitive). */
static bool has_token(const char *v, size_t vlen, const char *token)
{
        size_t tlen = strlen(token), i = 0;
        while (i < vlen) {
                while (i < vlen && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
                        i++;
                size_t start = i;
                while (i < vlen && v[i] != ',')
                        i++;
                size_t end = i;
                while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
                        end--;
                if (end - start == tlen && strncasecmp(v + start, token, tlen) == 0)
                        return true;
        }
        return false;
}

static enum sniff_result parse_request_line(const char *l, size_t len, struct sniff_http *out)
{
        const char *sp1 = memchr(l, ' ', len);
        if (sp1 == NULL || sp1 == l || (size_t)(sp1 - l) >= sizeof(out->method))
                return SNIFF_INVALID;
        size_t mlen = (size_t)(sp1 - l);
        memcpy(out->method, l, mlen);
        out->method[mlen] = '\0';
        const char *target = sp1 + 1;
        const char *sp2 = memchr(target, ' ', len - mlen - 1);
        if (sp2 == NULL || sp2 == target)
                return SNIFF_INVALID;
        size_t tlen = (size_t)(sp2 - target);
        size_t vlen = len - (size_t)(sp2 + 1 - l);
        if (vlen != 8 || (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))
                return SNIFF_INVALID;
        out->close = memcmp(sp2 + 1, "HTTP/1.0", 8) == 0;
        for (size_t i = 0; i < tlen; i++)
                if ((unsigned char)target[i] <= ' ' || target[i] == 0x7f)
                        return SNIFF_INVALID;
        if (strcmp(out->method, "CONNECT") == 0) {
                out->connect = true;
                return parse_authority(target, tlen, true, out) ? SNIFF_OK : SNIFF_INVALID;
        }
        if (tlen >= 7 && strncasecmp(target, "http://", 7) == 0) {
                const char *a = target + 7;
                size_t rest = tlen - 7, alen = 0;
                while (alen < rest && a[alen] != '/' && a[alen] != '?')
                        alen++;
                out->absolute = true;
                out->path_off = (size_t)(a + alen - l);
                out->path_len = rest - alen;
                return parse_authority(a, alen, false, out) ? SNIFF_OK : SNIFF_INVALID;
        }
        if (target[0] != '/' && !(tlen == 1 && target[0] == '*'))
                return SNIFF_INVALID;
        return SNIFF_OK;
}

enum sniff_result sniff_http_head(const char *buf, size_t len, struct sniff_http *out)
{
        memset(out, 0, sizeof(*out));
        size_t scan = len < SNIFF_HEAD_MAX ? len : SNIFF_HEAD_MAX;
        /* Refuse early what cannot be a request: the method is a token. */
        for (size_t i = 0; i < scan && buf[i] != ' '; i++)
                if (!is_tchar((unsigned char)buf[i]) || i >= sizeof(out->method) - 1)
                        return SNIFF_INVALID;
        if (memchr(buf, '\0', scan) != NULL)
                return SNIFF_INVALID;
        size_t line = 0, n = 0;
        bool seen_length = false;
        for (;;) {
                const char *lf = memchr(buf + line, '\n', scan - line);
                if (lf == NULL)
                        return len >= SNIFF_HEAD_MAX ? SNIFF_INVALID : SNIFF_NEED_MORE;
                size_t next = (size_t)(lf - buf) + 1, end = next - 1;
                if (end > line && buf[end - 1] == '\r')
                        end--;
                const char *l = buf + line;
                size_t llen = end - line;
                if (memchr(l, '\r', llen) != NULL)
                        return SNIFF_INVALID;
                if (n == 0) {
                        out->line_end = end;
                        if (parse_request_line(l, llen, out) != SNIFF_OK)
                                return SNIFF_INVALID;
                } else if (llen == 0) {
                        out->head_len = next;
                        break;
                } else {
                        if (l[0] == ' ' || l[0] == '\t')
                                return SNIFF_INVALID; /* obs-fold */
                        const char *colon = memchr(l, ':', llen);
                        if (colon == NULL || colon == l)
                                return SNIFF_INVALID;
                        size_t nlen = (size_t)(colon - l);
                        for (size_t i = 0; i < nlen; i++)
                                if (!is_tchar((unsigned char)l[i]))
                                        return SNIFF_INVALID;
                        const char *v = colon + 1, *vend = l + llen;
                        while (v < vend && (*v == ' ' || *v == '\t'))
                                v++;
                        while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t'))
                                vend--;
                        size_t vlen = (size_t)(vend - v);
                        if (header_is(l, nlen, "host")) {
                                if (out->has_host_header)
                                        return SNIFF_INVALID;
                                out->has_host_header = true;
                                if (out->absolute) {
                                        /* The policy judges the URI's host: a Host
                                         * naming another one would reach upstream
                                         * unjudged. */
                                        if (!host_header_matches(v, vlen, out))
                                                return SNIFF_INVALID;
                                } else if (!out->connect && !parse_authority(v, vlen, false, out)) {
                                        return SNIFF_INVALID;
                                }
                        } else if (header_is(l, nlen, "content-length")) {
                                if (seen_length || vlen == 0 || vlen > 15)
                                        return SNIFF_INVALID;
                                seen_length = true;
                                for (size_t i = 0; i < vlen; i++) {
                                        if (!isdigit((unsigned char)v[i]))
                                                return SNIFF_INVALID;
                                        out->content_length =
                                            out->content_length * 10 + (uint64_t)(v[i] - '0');
                                }
                        } else if (header_is(l, nlen, "transfer-encoding")) {
                                /* Only the framing the proxy itself follows:
                                 * any other coding (or a list) would leave it
                                 * unable to tell where the request ends. */
                                if (out->chunked || vlen != 7 || strncasecmp(v, "chunked", 7) != 0)
                                        return SNIFF_INVALID;
                                out->chunked = true;
                        } else if (header_is(l, nlen, "connection") && has_token(v, vlen, "close")) {
                                out->close = true;
                        }
                }
                n++;
                line = next;
        }
        if (seen_length && out->chunked)
                return SNIFF_INVALID;
        return SNIFF_OK;
}

enum sniff_result sniff_http_response_head(const char *buf, size_t len, struct sniff_http_response *out)
{
        memset(out, 0, sizeof(*out));
        size_t scan = len < SNIFF_HEAD_MAX ? len : SNIFF_HEAD_MAX;
        if (memchr(buf, '\0', scan) != NULL)
                return SNIFF_INVALID;
        size_t line = 0, n = 0;
        for (;;) {
                const char *lf = memchr(buf + line, '\n', scan - line);
                if (lf == NULL)
                        return len >= SNIFF_HEAD_MAX ? SNIFF_INVALID : SNIFF_NEED_MORE;
                size_t next = (size_t)(lf - buf) + 1, end = next - 1;
                if (end > line && buf[end - 1] == '\r')
                        end--;
                const char *l = buf + line;
                size_t llen = end - line;
                if (n == 0) {
                        /* HTTP/1.x SP 3DIGIT [SP reason] */
                        if (llen < 12 || memcmp(l, "HTTP/1.", 7) != 0 || (l[7] != '0' && l[7] != '1') ||
                            l[8] != ' ' || !isdigit((unsigned char)l[9]) || !isdigit((unsigned char)l[10]) ||
                            !isdigit((unsigned char)l[11]) || (llen > 12 && l[12] != ' '))
                                return SNIFF_INVALID;
                        out->status = (unsigned)((l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0'));
                        out->close = l[7] == '0';
                } else if (llen == 0) {
                        out->head_len = next;
                        break;
                } else {
                        const char *colon = memchr(l, ':', llen);
                        if (colon == NULL || colon == l || l[0] == ' ' || l[0] == '\t')
                                return SNIFF_INVALID;
                        size_t nlen = (size_t)(colon - l);
                        const char *v = colon + 1, *vend = l + llen;
                        while (v < vend && (*v == ' ' || *v == '\t'))
                                v++;
                        while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t' || vend[-1] == '\r'))
                                vend--;
                        size_t vlen = (size_t)(vend - v);
                        if (header_is(l, nlen, "content-length")) {
                                if (out->has_length || vlen == 0 || vlen > 15)
                                        return SNIFF_INVALID;
                                out->has_length = true;
                                for (size_t i = 0; i < vlen; i++) {
                                        if (!isdigit((unsigned char)v[i]))
                                                return SNIFF_INVALID;
                                        out->content_length =
                                            out->content_length * 10 + (uint64_t)(v[i] - '0');
                                }
                        } else if (header_is(l, nlen, "transfer-encoding")) {
                                /* Another coding: framed by the close (RFC 9112 6.3). */
                                if (vlen == 7 && strncasecmp(v, "chunked", 7) == 0 && !out->chunked)
                                        out->chunked = true;
                                else
                                        out->close = true;
                        } else if (header_is(l, nlen, "connection") && has_token(v, vlen, "close")) {
                                out->close = true;
                        }
                }
                n++;
                line = next;
        }
        if (out->chunked)
                out->has_length = false; /* RFC 9112 6.3: chunked wins */
        return SNIFF_OK;
}

/* --- chunked request body -------------------------------------------------- */

static int hex_value(uint8_t c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        c = (uint8_t)tolower(c);
        return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A byte of a chunk extension or trailer line: visible, space, tab or
 * obs-text; never a CR or LF on its own or another control. */
static bool line_byte(uint8_t c)
{
        return c == ' ' || c == '\t' || (c > ' ' && c != 0x7f);
}

size_t sniff_chunked_feed(struct sniff_chunked *s, const uint8_t *buf, size_t len)
{
        size_t i = 0;
        while (i < len && s->state != SNIFF_CHUNK_DONE && s->state != SNIFF_CHUNK_ERROR) {
                uint8_t c = buf[i];
                if (s->state == SNIFF_CHUNK_DATA) {
                        size_t n = len - i < s->size ? len - i : (size_t)s->size;
                        s->size -= n;
                        i += n;
                        if (s->size == 0)
                                s->state = SNIFF_CHUNK_DATA_CR;
                        continue;
                }
                i++;
                if (++s->line > SNIFF_CHUNK_LINE_MAX) {
                        s->state = SNIFF_CHUNK_ERROR;
                        break;
                }
                switch (s->state) {
                case SNIFF_CHUNK_SIZE: {
                        int v = hex_value(c);
                        if (v >= 0 && s->digits < 16) {
                                s->size = s->size << 4 | (uint64_t)v;
                                s->digits++;
                        } else if (s->digits > 0 && c == '\r') {
                                s->state = SNIFF_CHUNK_SIZE_LF;
                        } else if (s->digits > 0 && (c == ';' || c == ' ' || c == '\t')) {
                                s->state = SNIFF_CHUNK_EXT;
                        } else {
                                s->state = SNIFF_CHUNK_ERROR;
                        }
                        break;
                }
                case SNIFF_CHUNK_EXT:
                        if (c == '\r')
                                s->state = SNIFF_CHUNK_SIZE_LF;
                        else if (!line_byte(c))
                                s->state = SNIFF_CHUNK_ERROR;
                        break;
                case SNIFF_CHUNK_SIZE_LF:
                        s->line = 0;
                        if (c != '\n')
                                s->state = SNIFF_CHUNK_ERROR;
                        else
                                s->state = s->size == 0 ? SNIFF_CHUNK_TRAILER : SNIFF_CHUNK_DATA;
                        break;
                case SNIFF_CHUNK_DATA_CR:
                        s->state = c == '\r' ? SNIFF_CHUNK_DATA_LF : SNIFF_CHUNK_ERROR;
                        break;
                case SNIFF_CHUNK_DATA_LF:
                        s->line = 0;
                        s->digits = 0;
                        s->state = c == '\n' ? SNIFF_CHUNK_SIZE : SNIFF_CHUNK_ERROR;
                        break;
                case SNIFF_CHUNK_TRAILER:
                        /* After the last chunk: field lines, then an empty one. */
                        if (c == '\r')
                                s->state = s->line == 1 ? SNIFF_CHUNK_END_LF : SNIFF_CHUNK_TRAILER_LF;
                        else if (!line_byte(c) || (s->line == 1 && (c == ' ' || c == '\t')))
                                s->state = SNIFF_CHUNK_ERROR;
                        else if ((s->trailers += 1) > SNIFF_HEAD_MAX)
                                s->state = SNIFF_CHUNK_ERROR;
                        break;
                case SNIFF_CHUNK_TRAILER_LF:
                        s->line = 0;
                        s->state = c == '\n' ? SNIFF_CHUNK_TRAILER : SNIFF_CHUNK_ERROR;
                        break;
                case SNIFF_CHUNK_END_LF:
                        s->state = c == '\n' ? SNIFF_CHUNK_DONE : SNIFF_CHUNK_ERROR;
                        break;
                default:
                        s->state = SNIFF_CHUNK_ERROR;
                        break;
                }
        }
        return s->state == SNIFF_CHUNK_ERROR ? i - 1 : i;
}

/* --- DNS question --------------------------------------------------------- */

enum sniff_result sniff_dns_question(const uint8_t *pkt, size_t len, struct sniff_dns *out)
{
        memset(out, 0, sizeof(*out));
        if (len < 12)
                return SNIFF_INVALID;
        unsigned flags = get16(pkt + 2);
        if ((flags & 0x8000) != 0 || ((flags >> 11) & 0xf) != 0)
                return SNIFF_INVALID;
        if (get16(pkt + 4) != 1 || get16(pkt + 6) != 0 || get16(pkt + 8) != 0)
                return SNIFF_INVALID;
        out->id = (uint16_t)get16(pkt);
        out->rd = (flags & 0x0100) != 0;
        size_t p = 12, n = 0;
        bool odd = false;
        for (;;) {
                if (p >= len)
                        return SNIFF_INVALID;
                size_t l = pkt[p++];
                if (l == 0)
                        break;
                if (l > 63 || p + l > len || n + l + 1 > 254)
                        return SNIFF_INVALID; /* compression or oversize */
                if (n > 0)
                        out->name[n++] = '.';
                for (size_t i = 0; i < l; i++) {
                        unsigned char c = pkt[p + i];
                        if (!isascii(c) || !(isalnum(c) || c == '-' || c == '_'))
                                odd = true;
                        out->name[n++] = (char)tolower(c);
                }
                p += l;
        }
        out->name[n] = '\0';
        /* A name the policy cannot spell (a dot or a NUL inside a label)
         * is asked as the root, which no policy allows. */
        if (odd)
                out->name[0] = '\0';
        if (p + 4 > len)
                return SNIFF_INVALID;
        out->qtype = (uint16_t)get16(pkt + p);
        out->qclass = (uint16_t)get16(pkt + p + 2);
        out->question_end = p + 4;
        return SNIFF_OK;
}
