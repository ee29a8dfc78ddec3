/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's network policy: which names and IPv4 addresses its traffic may
 * reach. Parsed and validated once (nsboxd validates what clients and the
 * configuration give; nsbox-egress compiles what nsboxd sends) and then
 * asked about every connection and DNS question. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define NETPOLICY_MAX_ENTRIES 256
/* A DNS name in text form without the trailing dot: 253 bytes at most. */
#define NETPOLICY_NAME_MAX 253

struct netpolicy_cidr {
        uint32_t addr; /* host byte order, host bits cleared */
        uint32_t mask;
        unsigned prefix;
};

struct netpolicy_domain {
        char name[NETPOLICY_NAME_MAX + 1]; /* lowercase, no trailing dot */
        bool below;                        /* "*.name": any name below it, not itself */
};

struct netpolicy_list {
        bool any; /* "*": every name (not unnamed traffic) */
        size_t n_domains, n_cidrs;
        struct netpolicy_domain *domains;
        struct netpolicy_cidr *cidrs;
};

struct netpolicy {
        struct netpolicy_list allow, deny;
};

enum netpolicy_verdict {
        NETPOLICY_ALLOW,
        NETPOLICY_NOT_ALLOWED, /* no allow entry matches */
        NETPOLICY_DENIED,      /* a deny entry matches (deny wins) */
        NETPOLICY_PRIVATE,     /* a special address no allow entry inside its range names */
};

/* "not allowed", "denied", "private address" (the refused event's reason). */
const char *netpolicy_reason(enum netpolicy_verdict v);

/* Parse {"allow":[...],"deny":[...]} (both optional, nothing else). Every
 * message names the bad entry. */
int netpolicy_parse(const json_t *json, struct netpolicy **out, nsbox_error_t **err);
void netpolicy_free(struct netpolicy *p);
static inline void netpolicy_freep(struct netpolicy **p)
{
        netpolicy_free(*p);
}

/* A DNS name as a client wrote it (Host, SNI, CONNECT, a question) into
 * lowercase dotted form without the trailing dot: 0, or -EINVAL when it is
 * not a host name (empty labels, a label over 63 bytes, over 253 bytes,
 * bytes other than letters, digits, '-' and '_'). */
int netpolicy_name_normalize(const char *name, size_t len, char out[NETPOLICY_NAME_MAX + 1]);

/* Whether text is a dotted-quad IPv4 literal; *addr in host byte order. */
bool netpolicy_parse_ipv4(const char *text, size_t len, uint32_t *addr);

/* DNS questions: a domain entry (or "*") allows the normalized name and
 * no deny domain entry matches it. */
enum netpolicy_verdict netpolicy_check_name(const struct netpolicy *p, const char *name);

/* A connection that names its destination (Host, SNI, CONNECT) to addr.
 * Allowed when the name passes netpolicy_check_name or addr is in an allow
 * CIDR, addr in no deny CIDR, and addr is not special (host_addrs are the
 * host's own addresses, host byte order). *by_name says the name (not an
 * allow CIDR) let it through: the caller must then check that addr is an
 * address of the name. */
enum netpolicy_verdict netpolicy_check_named(const struct netpolicy *p, const char *name, uint32_t addr,
                                             const uint32_t *host_addrs, size_t n_host, bool *by_name);

/* A connection without a name: addr must be in an allow CIDR ("*" does not
 * count, 0.0.0.0/0 does), in no deny CIDR, and not special. */
enum netpolicy_verdict netpolicy_check_address(const struct netpolicy *p, uint32_t addr,
                                               const uint32_t *host_addrs, size_t n_host);

/* Whether an allow entry lies inside 127.0.0.0/8: it would mean the host's
 * loopback (the proxy's), which nothing opens; nsboxd refuses such a policy
 * with a message that says so, rather than refuse its connections silently. */
bool netpolicy_allows_loopback(const struct netpolicy *p);

/* Whether an allow entry unblocks a special address (a range of the fixed
 * list, or one of host_addrs): nsboxd refuses that in a client's policy. */
bool netpolicy_unblocks_special(const struct netpolicy *p, const uint32_t *host_addrs, size_t n_host);
