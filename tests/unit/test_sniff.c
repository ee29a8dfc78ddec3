/* SPDX-License-Identifier: Apache-2.0 */
/* The sniffers over untrusted bytes: a real ClientHello (python's ssl,
 * server_hostname "files.pythonhosted.org") whole, split over records and
 * cut at every length; HTTP request heads with every refused shape; DNS
 * queries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sniff.h"

/* Captured with: ssl.create_default_context().wrap_bio(..., server_hostname=
 * "files.pythonhosted.org").do_handshake() on Debian 12's python3.11. */
static const uint8_t client_hello[517] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x87\xcf\xff\x92\xc9"
                                         "\x54\xc9\x53\x01\x4a\x59\xa4\x49\xc7\x69\x91\xa5\x56\xf6\xa2\x20"
                                         "\xa4\x9e\x3e\xdc\x29\xaf\xa9\x84\x2c\x8c\x86\x20\x7f\x56\x82\x97"
                                         "\x32\x3b\x08\x7d\xff\x25\xb0\x1e\x4d\x48\xea\x4b\xf9\x9c\x10\x4f"
                                         "\x31\x0f\x8d\x42\xb6\xb2\xaf\xc4\x26\xae\x84\x0b\x00\x3e\x13\x02"
                                         "\x13\x03\x13\x01\xc0\x2c\xc0\x30\x00\x9f\xcc\xa9\xcc\xa8\xcc\xaa"
                                         "\xc0\x2b\xc0\x2f\x00\x9e\xc0\x24\xc0\x28\x00\x6b\xc0\x23\xc0\x27"
                                         "\x00\x67\xc0\x0a\xc0\x14\x00\x39\xc0\x09\xc0\x13\x00\x33\x00\x9d"
                                         "\x00\x9c\x00\x3d\x00\x3c\x00\x35\x00\x2f\x00\xff\x01\x00\x01\x75"
                                         "\x00\x00\x00\x1b\x00\x19\x00\x00\x16\x66\x69\x6c\x65\x73\x2e\x70"
                                         "\x79\x74\x68\x6f\x6e\x68\x6f\x73\x74\x65\x64\x2e\x6f\x72\x67\x00"
                                         "\x0b\x00\x04\x03\x00\x01\x02\x00\x0a\x00\x16\x00\x14\x00\x1d\x00"
                                         "\x17\x00\x1e\x00\x19\x00\x18\x01\x00\x01\x01\x01\x02\x01\x03\x01"
                                         "\x04\x00\x23\x00\x00\x00\x16\x00\x00\x00\x17\x00\x00\x00\x0d\x00"
                                         "\x2a\x00\x28\x04\x03\x05\x03\x06\x03\x08\x07\x08\x08\x08\x09\x08"
                                         "\x0a\x08\x0b\x08\x04\x08\x05\x08\x06\x04\x01\x05\x01\x06\x01\x03"
                                         "\x03\x03\x01\x03\x02\x04\x02\x05\x02\x06\x02\x00\x2b\x00\x09\x08"
                                         "\x03\x04\x03\x03\x03\x02\x03\x01\x00\x2d\x00\x02\x01\x01\x00\x33"
                                         "\x00\x26\x00\x24\x00\x1d\x00\x20\xfe\x83\x7e\x69\x82\x39\x84\x5d"
                                         "\x6c\x67\x70\xae\xdf\xaa\xb2\x2b\xc1\x04\xcc\xfe\xec\x5a\x99\x8c"
                                         "\x5f\x80\xdb\xcb\x64\x3f\x1f\x15\x00\x15\x00\xb9\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                                         "\x00\x00\x00\x00\x00";

static void test_real_client_hello_gives_its_sni(void **state)
{
        char name[SNIFF_NAME_MAX + 1];
        assert_int_equal(sizeof(client_hello), 517);
        assert_int_equal(sniff_tls_sni(client_hello, sizeof(client_hello), name), SNIFF_OK);
        assert_string_equal(name, "files.pythonhosted.org");
        /* Trailing bytes (the client's next record) do not matter. */
        uint8_t more[sizeof(client_hello) + 10];
        memcpy(more, client_hello, sizeof(client_hello));
        memset(more + sizeof(client_hello), 0x17, 10);
        assert_int_equal(sniff_tls_sni(more, sizeof(more), name), SNIFF_OK);
}

static void test_every_prefix_of_a_client_hello_needs_more(void **state)
{
        char name[SNIFF_NAME_MAX + 1];
        for (size_t len = 0; len < sizeof(client_hello); len++)
                if (sniff_tls_sni(client_hello, len, name) != SNIFF_NEED_MORE)
                        fail_msg("prefix of %zu bytes: not need-more", len);
}

/* The same handshake re-framed into records of `chunk` bytes each. */
static size_t split_records(uint8_t *out, size_t chunk)
{
        const uint8_t *hs = client_hello + 5;
        size_t hs_len = sizeof(client_hello) - 5, n = 0;
        for (size_t off = 0; off < hs_len; off += chunk) {
                size_t c = hs_len - off < chunk ? hs_len - off : chunk;
                out[n++] = 0x16, out[n++] = 0x03, out[n++] = 0x01;
                out[n++] = (uint8_t)(c >> 8), out[n++] = (uint8_t)c;
                memcpy(out + n, hs + off, c);
                n += c;
        }
        return n;
}

static void test_client_hello_split_over_records(void **state)
{
        static uint8_t split[4096];
        char name[SNIFF_NAME_MAX + 1];
        for (size_t chunk = 1; chunk < 600; chunk += 37) {
                size_t n = split_records(split, chunk);
                if (sniff_tls_sni(split, n, name) != SNIFF_OK || strcmp(name, "files.pythonhosted.org") != 0)
                        fail_msg("records of %zu bytes: no name", chunk);
                for (size_t len = 0; len < n; len += 7)
                        if (sniff_tls_sni(split, len, name) != SNIFF_NEED_MORE)
                                fail_msg("records of %zu bytes, prefix %zu: not need-more", chunk, len);
        }
}

static void test_not_tls_and_no_sni(void **state)
{
        char name[SNIFF_NAME_MAX + 1];
        assert_int_equal(sniff_tls_sni((const uint8_t *)"GET / HTTP/1.1\r\n", 16, name), SNIFF_INVALID);
        assert_int_equal(sniff_tls_sni((const uint8_t *)"G", 1, name), SNIFF_INVALID);
        assert_int_equal(sniff_tls_sni((const uint8_t *)"\x16\x02", 2, name), SNIFF_INVALID);
        /* An alert record, a ServerHello, an empty record. */
        assert_int_equal(sniff_tls_sni((const uint8_t *)"\x15\x03\x01\x00\x02\x02\x28", 7, name),
                         SNIFF_INVALID);
        assert_int_equal(sniff_tls_sni((const uint8_t *)"\x16\x03\x01\x00\x04\x02\x00\x00\x00", 9, name),
                         SNIFF_INVALID);
        assert_int_equal(sniff_tls_sni((const uint8_t *)"\x16\x03\x01\x00\x00", 5, name), SNIFF_INVALID);
        /* A minimal ClientHello without extensions. */
        static const uint8_t bare[] = { 0x16, 0x03, 0x01, 0x00, 4 + 41, 0x01,
                                        0x00, 0x00, 41,   0x03, 0x03,   [11 ... 42] = 0xaa,
                                        0x00, 0x00, 0x02, 0x13, 0x01,   0x01,
                                        0x00 };
        assert_int_equal(sizeof(bare), 5 + 4 + 41);
        assert_int_equal(sniff_tls_sni(bare, sizeof(bare), name), SNIFF_NO_NAME);
        /* The real one with its extensions' length one too long. */
        uint8_t bad[sizeof(client_hello)];
        memcpy(bad, client_hello, sizeof(bad));
        size_t ext_len_at = 5 + 4 + 2 + 32 + 1 + bad[5 + 4 + 2 + 32];
        ext_len_at += 2 + (bad[ext_len_at] << 8 | bad[ext_len_at + 1]);
        ext_len_at += 1 + bad[ext_len_at];
        bad[ext_len_at + 1]++;
        assert_int_equal(sniff_tls_sni(bad, sizeof(bad), name), SNIFF_INVALID);
}

static enum sniff_result http(const char *text, struct sniff_http *h)
{
        return sniff_http_head(text, strlen(text), h);
}

static void test_http_host_and_head_length(void **state)
{
        struct sniff_http h;
        const char *req = "GET /simple/ HTTP/1.1\r\nUser-Agent: x\r\nHost: PyPI.org:8080\r\n\r\nbody";
        assert_int_equal(http(req, &h), SNIFF_OK);
        assert_string_equal(h.host, "PyPI.org");
        assert_int_equal(h.port, 8080);
        assert_int_equal(h.head_len, strlen(req) - 4);
        assert_int_equal(h.line_end, strlen("GET /simple/ HTTP/1.1"));
        assert_true(h.has_host_header);
        assert_false(h.absolute || h.connect);
        for (size_t len = 0; len < strlen(req) - 4; len++)
                if (sniff_http_head(req, len, &h) != SNIFF_NEED_MORE)
                        fail_msg("prefix %zu: not need-more", len);
        assert_int_equal(http("GET / HTTP/1.0\n\n", &h), SNIFF_OK);
        assert_string_equal(h.host, "");
        assert_int_equal(http("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n", &h), SNIFF_OK);
        assert_int_equal(h.content_length, 12);
        assert_int_equal(http("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", &h),
                         SNIFF_OK);
        assert_true(h.chunked);
}

static void test_http_absolute_form_and_connect(void **state)
{
        struct sniff_http h;
        const char *req = "GET http://Example.com/a/b?c HTTP/1.1\r\nHost: example.com.:80\r\n\r\n";
        assert_int_equal(http(req, &h), SNIFF_OK);
        assert_true(h.absolute);
        assert_string_equal(h.host, "Example.com");
        assert_int_equal(h.port, 0);
        assert_int_equal(h.path_len, strlen("/a/b?c"));
        assert_memory_equal(req + h.path_off, "/a/b?c", h.path_len);
        assert_int_equal(http("GET http://example.com:81 HTTP/1.1\r\n\r\n", &h), SNIFF_OK);
        assert_int_equal(h.port, 81);
        assert_int_equal(h.path_len, 0);
        assert_int_equal(http("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", &h), SNIFF_OK);
        assert_true(h.connect);
        assert_string_equal(h.host, "pypi.org");
        assert_int_equal(h.port, 443);
        assert_int_equal(http("CONNECT pypi.org HTTP/1.1\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("CONNECT pypi.org:65536 HTTP/1.1\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("GET http://user@evil.com/ HTTP/1.1\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("GET http://[::1]/ HTTP/1.1\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("GET https://a.com/ HTTP/1.1\r\n\r\n", &h), SNIFF_INVALID);
}

/* The policy judges the URI's host: a Host header naming another host or
 * port would reach upstream unjudged. */
static void test_http_absolute_form_host_must_match(void **state)
{
        struct sniff_http h;
        assert_int_equal(http("GET http://a.com/ HTTP/1.1\r\nHost: other.org\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("GET http://a.com/ HTTP/1.1\r\nHost: a.com:81\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("GET http://a.com:81/ HTTP/1.1\r\nHost: a.com\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("GET http://a.com/ HTTP/1.1\r\nHost: a.com.evil\r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("GET http://a.com/ HTTP/1.1\r\nHost: \r\n\r\n", &h), SNIFF_INVALID);
        assert_int_equal(http("GET http://a.com/ HTTP/1.1\r\nHost: A.COM\r\n\r\n", &h), SNIFF_OK);
        assert_int_equal(http("GET http://a.com:81/ HTTP/1.1\r\nHost: a.com:81\r\n\r\n", &h), SNIFF_OK);
        assert_int_equal(http("GET http://a.com/ HTTP/1.1\r\n\r\n", &h), SNIFF_OK);
        assert_true(sniff_http_header_named("HOST: x", 7, "host"));
        assert_false(sniff_http_header_named("Hosts: x", 8, "host"));
}

static void test_http_refuses_smuggling_shapes(void **state)
{
        struct sniff_http h;
        static const char *bad[] = {
                "GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: a.com\r\n folded\r\n\r\n",
                "GET / HTTP/1.1\r\nX: y\r\n\tfolded\r\n\r\n",
                "GET / HTTP/1.1\r\nHost : a.com\r\n\r\n",
                "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: a.com\rX: y\r\n\r\n",
                "GET / HTTP/2.0\r\n\r\n",
                "GET  / HTTP/1.1\r\n\r\n",
                "GET nothing HTTP/1.1\r\n\r\n",
                "\x16\x03\x01",
                "SSH-2.0-OpenSSH_9.2p1\r\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                if (http(bad[i], &h) != SNIFF_INVALID)
                        fail_msg("accepted %s", bad[i]);
        assert_int_equal(sniff_http_head("GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n", 27, &h), SNIFF_INVALID);
        static char big[SNIFF_HEAD_MAX + 10];
        memset(big, 'a', sizeof(big));
        memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
        assert_int_equal(sniff_http_head(big, SNIFF_HEAD_MAX - 1, &h), SNIFF_NEED_MORE);
        assert_int_equal(sniff_http_head(big, SNIFF_HEAD_MAX, &h), SNIFF_INVALID);
        assert_int_equal(sniff_http_head(big, sizeof(big), &h), SNIFF_INVALID);
}

static void test_http_transfer_encoding_is_chunked_or_refused(void **state)
{
        struct sniff_http h;
        assert_int_equal(http("POST / HTTP/1.1\r\nTransfer-Encoding: ChunKed \r\n\r\n", &h), SNIFF_OK);
        assert_true(h.chunked);
        static const char *bad[] = {
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                "POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
                "POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                if (http(bad[i], &h) != SNIFF_INVALID)
                        fail_msg("accepted %s", bad[i]);
}

/* Feeds text whole and byte by byte: both must end the message at the same
 * byte with the same state. */
static size_t chunked(const char *text, enum sniff_chunk_state *state)
{
        size_t len = strlen(text);
        struct sniff_chunked whole = { 0 }, bytes = { 0 };
        size_t n = sniff_chunked_feed(&whole, (const uint8_t *)text, len), m = 0;
        for (size_t i = 0; i < len && bytes.state != SNIFF_CHUNK_DONE && bytes.state != SNIFF_CHUNK_ERROR;
             i++)
                m += sniff_chunked_feed(&bytes, (const uint8_t *)text + i, 1);
        assert_int_equal(whole.state, bytes.state);
        assert_int_equal(n, m);
        *state = whole.state;
        return n;
}

static void test_chunked_body_ends_where_its_framing_says(void **state)
{
        enum sniff_chunk_state st;
        const char *body = "5\r\nhello\r\n1A;name=\"v a\";x\r\n0123456789abcdef0123456789\r\n0\r\n\r\n";
        char buf[512];
        snprintf(buf, sizeof(buf), "%sGET /second HTTP/1.1\r\n\r\n", body);
        assert_int_equal(chunked(buf, &st), strlen(body));
        assert_int_equal(st, SNIFF_CHUNK_DONE);
        const char *trailers = "3\r\nabc\r\n000;ext\r\nX-Sum: 1\r\nY: 2\r\n\r\n";
        snprintf(buf, sizeof(buf), "%sPOST", trailers);
        assert_int_equal(chunked(buf, &st), strlen(trailers));
        assert_int_equal(st, SNIFF_CHUNK_DONE);
        /* Chunk data is counted, never parsed: a "0\r\n\r\n" inside is data. */
        const char *inner = "7\r\n0\r\n\r\nXX\r\n0\r\n\r\n";
        assert_int_equal(chunked(inner, &st), strlen(inner));
        assert_int_equal(st, SNIFF_CHUNK_DONE);
        /* Prefixes are incomplete, never done. */
        assert_int_equal(chunked("5\r\nhel", &st), 6);
        assert_int_equal(st, SNIFF_CHUNK_DATA);
        assert_int_equal(chunked("0\r\nX: y\r\n", &st), 9);
        assert_int_equal(st, SNIFF_CHUNK_TRAILER);
        static const char *bad[] = {
                "\r\n",                            /* no size */
                "g\r\n",                           /* not hex */
                "5\nhello\r\n",                    /* bare LF */
                "5\r\nhelloX\r\n",                 /* data longer than its size */
                "5\r\nhello\n0\r\n\r\n",           /* bare LF after the data */
                "0\r\n\n",                         /* bare LF ends it */
                "0\r\n folded\r\n\r\n",            /* obs-fold trailer */
                "0;a\x01b\r\n\r\n",                /* control byte in an extension */
                "1\r\n\x00\r\n0\r\nX\x7f\r\n\r\n", /* DEL in a trailer */
                "10000000000000000\r\n",           /* 17 hex digits */
                "-1\r\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct sniff_chunked c = { 0 };
                size_t len = i == 8 ? 16 : strlen(bad[i]);
                sniff_chunked_feed(&c, (const uint8_t *)bad[i], len);
                if (c.state != SNIFF_CHUNK_ERROR)
                        fail_msg("bad[%zu] not an error (state %d)", i, c.state);
        }
        /* Lines are bounded: a long extension, endless trailers. */
        static char big[SNIFF_CHUNK_LINE_MAX + 16];
        memset(big, 'a', sizeof(big));
        memcpy(big, "1;", 2);
        struct sniff_chunked c = { 0 };
        sniff_chunked_feed(&c, (const uint8_t *)big, sizeof(big));
        assert_int_equal(c.state, SNIFF_CHUNK_ERROR);
        c = (struct sniff_chunked){ 0 };
        sniff_chunked_feed(&c, (const uint8_t *)"0\r\n", 3);
        for (int i = 0; i < 2000 && c.state != SNIFF_CHUNK_ERROR; i++)
                sniff_chunked_feed(&c, (const uint8_t *)"X-Pad: 0123456789\r\n", 19);
        assert_int_equal(c.state, SNIFF_CHUNK_ERROR);
}

static void test_hop_by_hop_headers(void **state)
{
        assert_true(sniff_http_hop_header("Connection: keep-alive", 22));
        assert_true(sniff_http_hop_header("proxy-connection:x", 18));
        assert_true(sniff_http_hop_header("Upgrade: h2c", 12));
        assert_false(sniff_http_hop_header("Host: a", 7));
        assert_false(sniff_http_hop_header("Connectionx: a", 14));
}

/* A query for name (dotted) with qtype, as a stub resolver sends it. */
static size_t dns_query(uint8_t *out, const char *name, uint16_t qtype)
{
        size_t n = 0;
        static const uint8_t header[] = { 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0 };
        memcpy(out, header, sizeof(header));
        n = sizeof(header);
        while (*name) {
                size_t l = strcspn(name, ".");
                out[n++] = (uint8_t)l;
                memcpy(out + n, name, l);
                n += l;
                name += l + (name[l] == '.');
        }
        out[n++] = 0;
        out[n++] = (uint8_t)(qtype >> 8), out[n++] = (uint8_t)qtype;
        out[n++] = 0, out[n++] = 1;
        return n;
}

static void test_dns_question(void **state)
{
        uint8_t q[512];
        struct sniff_dns d;
        size_t n = dns_query(q, "WWW.Example.COM", 1);
        assert_int_equal(sniff_dns_question(q, n, &d), SNIFF_OK);
        assert_string_equal(d.name, "www.example.com");
        assert_int_equal(d.id, 0x1234);
        assert_int_equal(d.qtype, 1);
        assert_int_equal(d.qclass, 1);
        assert_int_equal(d.question_end, n);
        assert_true(d.rd);
        for (size_t len = 0; len < n; len++)
                assert_int_equal(sniff_dns_question(q, len, &d), SNIFF_INVALID);
        /* The root and names with bytes the policy cannot spell ask "". */
        n = dns_query(q, "", 2);
        assert_int_equal(sniff_dns_question(q, n, &d), SNIFF_OK);
        assert_string_equal(d.name, "");
        n = dns_query(q, "a.com", 1);
        q[13] = '.';
        assert_int_equal(sniff_dns_question(q, n, &d), SNIFF_OK);
        assert_string_equal(d.name, "");
        /* A response, two questions, an answer record, compression. */
        n = dns_query(q, "a.com", 1);
        q[2] |= 0x80;
        assert_int_equal(sniff_dns_question(q, n, &d), SNIFF_INVALID);
        n = dns_query(q, "a.com", 1);
        q[5] = 2;
        assert_int_equal(sniff_dns_question(q, n, &d), SNIFF_INVALID);
        n = dns_query(q, "a.com", 1);
        q[7] = 1;
        assert_int_equal(sniff_dns_question(q, n, &d), SNIFF_INVALID);
        n = dns_query(q, "a.com", 1);
        q[12] = 0xc0;
        assert_int_equal(sniff_dns_question(q, n, &d), SNIFF_INVALID);
}

/* A response is relayed as its head frames it: a length, chunks, or
 * the close; HTTP/1.0 and Connection: close end the connection. */
static void test_http_response_framing(void **state)
{
        struct sniff_http_response r;
        const char *a = "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nbody";
        assert_int_equal(sniff_http_response_head(a, strlen(a), &r), SNIFF_OK);
        assert_int_equal(r.status, 200);
        assert_true(r.has_length && r.content_length == 12 && !r.chunked && !r.close);
        assert_int_equal(r.head_len, strlen(a) - 4);
        const char *b =
            "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, Close\r\n\r\n";
        assert_int_equal(sniff_http_response_head(b, strlen(b), &r), SNIFF_OK);
        assert_true(r.chunked && !r.has_length && r.close);
        const char *c = "HTTP/1.0 204\r\n\r\n";
        assert_int_equal(sniff_http_response_head(c, strlen(c), &r), SNIFF_OK);
        assert_true(r.status == 204 && r.close);
        const char *d = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n";
        assert_int_equal(sniff_http_response_head(d, strlen(d), &r), SNIFF_OK);
        assert_true(r.close && !r.chunked);
        const char *e = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n";
        assert_int_equal(sniff_http_response_head(e, strlen(e), &r), SNIFF_NEED_MORE);
        const char *bad[] = { "HTTP/2 200\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
                              "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                              "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(sniff_http_response_head(bad[i], strlen(bad[i]), &r), SNIFF_INVALID);
}

static void test_http_request_close(void **state)
{
        struct sniff_http h;
        const char *a = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
        assert_int_equal(sniff_http_head(a, strlen(a), &h), SNIFF_OK);
        assert_false(h.close);
        const char *b = "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
        assert_int_equal(sniff_http_head(b, strlen(b), &h), SNIFF_OK);
        assert_true(h.close);
        const char *c = "GET / HTTP/1.0\r\nHost: a.test\r\n\r\n";
        assert_int_equal(sniff_http_head(c, strlen(c), &h), SNIFF_OK);
        assert_true(h.close);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_real_client_hello_gives_its_sni),
                cmocka_unit_test(test_every_prefix_of_a_client_hello_needs_more),
                cmocka_unit_test(test_client_hello_split_over_records),
                cmocka_unit_test(test_not_tls_and_no_sni),
                cmocka_unit_test(test_http_host_and_head_length),
                cmocka_unit_test(test_http_absolute_form_and_connect),
                cmocka_unit_test(test_http_absolute_form_host_must_match),
                cmocka_unit_test(test_http_refuses_smuggling_shapes),
                cmocka_unit_test(test_http_transfer_encoding_is_chunked_or_refused),
                cmocka_unit_test(test_chunked_body_ends_where_its_framing_says),
                cmocka_unit_test(test_hop_by_hop_headers),
                cmocka_unit_test(test_http_response_framing),
                cmocka_unit_test(test_http_request_close),
                cmocka_unit_test(test_dns_question),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
