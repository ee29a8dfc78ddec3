/* SPDX-License-Identifier: Apache-2.0 */
/* What nsbox-egress reads from a sandbox's first bytes to learn where it
 * wants to go: the SNI of a TLS ClientHello, the Host of an HTTP request
 * head, the question of a DNS query. Pure functions over untrusted bytes:
 * every length is checked, nothing is read past len. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sniff_result {
        SNIFF_OK = 0,
        SNIFF_NEED_MORE, /* a prefix of something valid: read more */
        SNIFF_INVALID,   /* not TLS / not an HTTP request / malformed */
        SNIFF_NO_NAME,   /* a valid ClientHello without a server_name */
};

/* The longest request head or ClientHello the proxy waits for. */
#define SNIFF_HEAD_MAX 16384
#define SNIFF_NAME_MAX 255

/* TLS: the handshake may be split over several records and a record over
 * several reads. name gets the host_name of the server_name extension
 * (NUL-terminated; bytes as sent: the caller validates it as a name). */
enum sniff_result sniff_tls_sni(const uint8_t *buf, size_t len, char name[SNIFF_NAME_MAX + 1]);

struct sniff_http {
        size_t head_len; /* bytes up to and including the empty line */
        size_t line_end; /* end of the request line (before its CRLF) */
        char method[16];
        bool connect;                  /* CONNECT host:port */
        bool absolute;                 /* absolute-form http://host[:port]/path */
        size_t path_off, path_len;     /* absolute-form: the origin-form part ("/" when empty: path_len 0) */
        char host[SNIFF_NAME_MAX + 1]; /* from the URI or the Host header, without port; "" if none */
        uint16_t port;                 /* the URI's or Host's port, 0 when not given */
        bool has_host_header;
        uint64_t content_length; /* 0 when absent */
        bool chunked;            /* Transfer-Encoding: chunked (no other coding is accepted) */
        bool close;              /* HTTP/1.0, or Connection: close: the last request of its connection */
};

/* An HTTP/1.x request head. Refuses (SNIFF_INVALID) a NUL byte, obs-fold
 * continuation lines, two Host headers, an absolute-form request whose Host
 * header names another host or port than its URI, two Content-Lengths, both
 * Content-Length and Transfer-Encoding, a Transfer-Encoding other than
 * exactly "chunked" (or two of them), a bad port, and (when no empty
 * line is within SNIFF_HEAD_MAX bytes) an oversize head. */
enum sniff_result sniff_http_head(const char *buf, size_t len, struct sniff_http *out);

/* An HTTP/1.x response head, as far as relaying one response and no more
 * needs: where the head ends and how the body is framed. A body is
 * Content-Length bytes, chunked, or (neither) everything up to the close;
 * none for 1xx, 204, 304 and a HEAD's response (the caller knows the
 * method). Refuses what sniff_http_head refuses of headers. */
struct sniff_http_response {
        size_t head_len;
        unsigned status;
        bool has_length;
        uint64_t content_length;
        bool chunked;
        bool close; /* HTTP/1.0, or Connection: close */
};
enum sniff_result sniff_http_response_head(const char *buf, size_t len, struct sniff_http_response *out);

/* Whether a header line names one of the hop-by-hop headers the proxy
 * drops when it forwards a head (Connection, Proxy-Connection, Keep-Alive,
 * Proxy-Authorization, Upgrade, TE). */
bool sniff_http_hop_header(const char *line, size_t len);

/* Whether a header line's field name is name (case-insensitive). */
bool sniff_http_header_named(const char *line, size_t len, const char *name);

/* The framing of a chunked request body (RFC 9112 7.1), followed byte by
 * byte so the proxy forwards one request and nothing after it: chunk
 * sizes (16 hex digits at most), extensions, CRLFs, the last (0) chunk,
 * trailer lines and the empty line that ends the message. Lines are
 * bounded (SNIFF_CHUNK_LINE_MAX each, SNIFF_HEAD_MAX of trailers); a bare
 * LF, a control byte or a bad size is an error. */
#define SNIFF_CHUNK_LINE_MAX 4096

enum sniff_chunk_state {
        SNIFF_CHUNK_SIZE = 0, /* the initial state (a zeroed struct) */
        SNIFF_CHUNK_EXT,
        SNIFF_CHUNK_SIZE_LF,
        SNIFF_CHUNK_DATA,
        SNIFF_CHUNK_DATA_CR,
        SNIFF_CHUNK_DATA_LF,
        SNIFF_CHUNK_TRAILER,
        SNIFF_CHUNK_TRAILER_LF,
        SNIFF_CHUNK_END_LF,
        SNIFF_CHUNK_DONE,  /* the message ended */
        SNIFF_CHUNK_ERROR, /* malformed: drop the connection */
};

struct sniff_chunked {
        enum sniff_chunk_state state;
        uint64_t size; /* the chunk's size, then its data bytes still to come */
        unsigned digits;
        size_t line;     /* bytes of the current line so far */
        size_t trailers; /* bytes of trailer lines so far */
};

/* Feeds the next len bytes of the body; returns how many of them belong to
 * the message: all of them, or fewer when it ends (state DONE) or turns
 * out malformed (state ERROR) inside buf. */
size_t sniff_chunked_feed(struct sniff_chunked *s, const uint8_t *buf, size_t len);

struct sniff_dns {
        uint16_t id;
        uint16_t qtype, qclass;
        bool rd;
        size_t question_end;           /* offset after the question */
        char name[SNIFF_NAME_MAX + 1]; /* lowercase, dotted, no trailing dot ("" for the root) */
};

/* A DNS query: standard opcode, QR clear, exactly one question, no answer
 * or authority records, no compression in the question name. */
enum sniff_result sniff_dns_question(const uint8_t *pkt, size_t len, struct sniff_dns *out);
