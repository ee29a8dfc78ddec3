/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's secrets as nsbox-egress holds them, and the one thing it does
 * with them: a request head to one of a secret's hosts gets the value where
 * the sandbox wrote the placeholder (and the secret's header, when it has
 * one); a head to any other host that carries a placeholder is refused.
 * The values live in a mapping kept out of core dumps and wiped when freed,
 * and are never logged. Pure functions over untrusted bytes. */
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
        /* Since the last stats, counted by interception threads too (atomic):
         * requests that had secrets put in, and requests refused for
         * carrying another host's placeholder. */
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
        INJECT_FOREIGN, /* a placeholder of a secret not for this host */
        INJECT_NOSPACE,
};

/* One line of a request head (without its CRLF) into out at *n (at most
 * cap), each placeholder of a secret for host (NULL: no name, no secret's)
 * replaced by its value. INJECT_FOREIGN names the secret in *foreign. */
enum inject_result inject_line(const struct inject_secrets *s, const char *host, const char *line, size_t len,
                               char *out, size_t cap, size_t *n, const struct inject_secret **foreign);

/* Whether line is a header a secret for host sets itself: dropped from the
 * request, inject_headers puts the secret's in its place. */
bool inject_header_replaced(const struct inject_secrets *s, const char *host, const char *line, size_t len);

/* The header lines (with CRLF) of the secrets for host that have one. */
enum inject_result inject_headers(const struct inject_secrets *s, const char *host, char *out, size_t cap,
                                  size_t *n);

/* The head a request (h, parsed from in) is forwarded with, into out:
 * origin-form target, hop-by-hop headers dropped (and Host, for an
 * absolute-form request: the URI's is put instead), the secrets for host
 * put in and their headers added, "Connection: close" unless keep_alive
 * (then the connection carries the next request too); then the empty line. */
enum inject_result inject_rewrite_head(const struct inject_secrets *s, const char *host, const char *in,
                                       const struct sniff_http *h, bool keep_alive, char *out, size_t cap,
                                       size_t *n, const struct inject_secret **foreign);

/* A request body searched for the placeholders of secrets not for its host
 * as it passes, piece by piece: each piece with the end of the one before
 * (a placeholder split between two reads is found), in constant memory
 * and time linear in the body. Zeroed to start. */
struct inject_scan {
        size_t carry_len;
        char carry[64]; /* the last bytes seen, shorter than the longest placeholder */
};
/* The secret whose placeholder the body (so far, with data) carries though
 * it is not for host (NULL: no name), or NULL. */
const struct inject_secret *inject_scan_body(const struct inject_secrets *s, const char *host,
                                             struct inject_scan *scan, const void *data, size_t len);
