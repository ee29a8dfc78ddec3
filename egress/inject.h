/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's secrets as nsbox-egress holds them, and what it does with
 * them: a request to one of a secret's hosts gets the value in one place
 * only, the secret's header (or, for a secret without one, the placeholder
 * the sandbox wrote in its Authorization header); a request that carries a
 * placeholder anywhere else, or to any other host, is refused: a server
 * echoes URLs and headers back, so a value put anywhere else could come
 * back to the sandbox. Values that come back all the same, in a response,
 * are masked. The values live in a mapping kept out of core dumps and wiped
 * when freed, and are never logged. Pure functions over untrusted bytes. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "sniff.h"

struct inject_secret {
        char name[65];
        char placeholder[64];
        const char *value; /* in the secrets' mapping */
        size_t value_len;
        char **hosts; /* normalized names */
        size_t n_hosts;
        char *header_name;     /* "Authorization", or NULL */
        char *header_template; /* the whole line, with {value} */
};

struct inject_secrets {
        int refs; /* the sandbox's, and each intercepted connection's */
        struct inject_secret *items;
        size_t n;
        char *values; /* madvise(MADV_DONTDUMP) */
        size_t values_size;
        size_t longest_value; /* of the values masked in responses */
        /* Since the last stats, counted by interception threads too (atomic):
         * requests that had secrets put in, and requests refused for
         * carrying a placeholder where its value may not go. */
        unsigned long injected, refused;
};

/* nsboxd's "secrets" object of an add message ({NAME: {value, hosts,
 * header?, placeholder}}); NULL with *why when malformed. */
struct inject_secrets *inject_parse(json_t *secrets, const char **why);
struct inject_secrets *inject_ref(struct inject_secrets *s);
/* Freed (values wiped) with the last reference; any thread. */
void inject_unref(struct inject_secrets *s);
/* Whether one of the secrets is for host. */
bool inject_for_host(const struct inject_secrets *s, const char *host);

enum inject_result {
        INJECT_OK = 0,
        INJECT_REFUSED, /* a placeholder where its value may not go */
        INJECT_NOSPACE,
};

/* Why a request carrying one's placeholder to host (NULL: no name) is
 * refused, for the log and the refusal's event: "carries the placeholder of
 * secret NAME, not for this host" or "... outside its header (X-Key)". */
void inject_refusal(const struct inject_secret *one, const char *host, char *why, size_t cap);

/* One line of a request head (without its CRLF) into out at *n (at most
 * cap). A placeholder becomes its value in one place only: a header line
 * (header) named Authorization, for a secret of host (NULL: no name) that
 * has no header of its own. Any other placeholder, in the request line or
 * any header, is INJECT_REFUSED with the secret in *refused. */
enum inject_result inject_line(const struct inject_secrets *s, const char *host, const char *line, size_t len,
                               bool header, char *out, size_t cap, size_t *n,
                               const struct inject_secret **refused);

/* Whether line is a header a secret for host sets itself: dropped from the
 * request, inject_headers puts the secret's in its place. */
bool inject_header_replaced(const struct inject_secrets *s, const char *host, const char *line, size_t len);

/* The header lines (with CRLF) of the secrets for host that have one. */
enum inject_result inject_headers(const struct inject_secrets *s, const char *host, char *out, size_t cap,
                                  size_t *n);

/* The head a request (h, parsed from in) is forwarded with, into out:
 * origin-form target, hop-by-hop headers dropped (and Host, for an
 * absolute-form request: the URI's is put instead), the secrets for host
 * put in (inject_line) and their headers added, "Connection: close" unless
 * keep_alive (then the connection carries the next request too); then the
 * empty line. */
enum inject_result inject_rewrite_head(const struct inject_secrets *s, const char *host, const char *in,
                                       const struct sniff_http *h, bool keep_alive, char *out, size_t cap,
                                       size_t *n, const struct inject_secret **refused);

/* A request body searched for placeholders as it passes, piece by piece:
 * each piece with the end of the one before (a placeholder split between
 * two reads is found), in constant memory and time linear in the body.
 * Zeroed to start. */
struct inject_scan {
        size_t carry_len;
        char carry[64]; /* the last bytes seen, shorter than the longest placeholder */
};
/* The secret whose placeholder the body (so far, with data) carries, or
 * NULL: a body is no place for a value, whatever its host. */
const struct inject_secret *inject_scan_body(const struct inject_secrets *s, struct inject_scan *scan,
                                             const void *data, size_t len);

/* A piece of a chunked request body: fed to its framing (chunks), and its
 * chunks' data searched for placeholders as one stream (data, zeroed to
 * start): a placeholder the framing splits (its bytes in two chunks, a
 * chunk-size line between them) is found. How many bytes of the piece
 * belong to the body (chunks->state says DONE, or ERROR); *found: the
 * secret whose placeholder the data carries, else left as it was. The
 * caller still searches the bytes as sent (inject_scan_body): extensions
 * and trailers are no place for one either. */
size_t inject_scan_chunked(const struct inject_secrets *s, struct sniff_chunked *chunks,
                           struct inject_scan *data, const uint8_t *buf, size_t len,
                           const struct inject_secret **found);

/* Values shorter than this are not masked in responses: a few bytes are
 * found in any text by chance, and masking them would garble it. */
#define INJECT_MASK_MIN 8

/* A response head (len bytes) as the sandbox gets it, into out: each value
 * (of INJECT_MASK_MIN bytes or more) replaced by its placeholder. */
enum inject_result inject_mask_head(const struct inject_secrets *s, const char *in, size_t len, char *out,
                                    size_t cap, size_t *n);

/* A piece of a response body, in place: each value (INJECT_MASK_MIN bytes
 * or more) in buf becomes as many '*' (the body's framing, its length, is
 * kept). Returns how many bytes at its end could begin a value: the caller
 * holds those back and puts them before the next piece (at most
 * longest_value - 1), or sends them when the body ends. */
size_t inject_mask_body(const struct inject_secrets *s, char *buf, size_t len);
