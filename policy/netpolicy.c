/* SPDX-License-Identifier: Apache-2.0 */
/* Network policies: parse, validate and match names and addresses a sandbox may reach. */
#include "netpolicy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"

/* Addresses nothing outside the host should reach through the proxy
 * without an operator naming them: this host, its private networks, cloud
 * metadata (169.254.169.254), carrier NAT, benchmarking, multicast and the
 * reserved space including broadcast. */
static const struct {
        uint32_t addr;
        unsigned prefix;
} special_ranges[] = {
        { 0x00000000, 8 },  /* 0.0.0.0/8 */
        { 0x0a000000, 8 },  /* 10.0.0.0/8 */
        { 0x64400000, 10 }, /* 100.64.0.0/10 */
        { 0x7f000000, 8 },  /* 127.0.0.0/8: never opened (LOOPBACK_RANGE) */
        { 0xa9fe0000, 16 }, /* 169.254.0.0/16 */
        { 0xac100000, 12 }, /* 172.16.0.0/12 */
        { 0xa83f8110, 32 }, /* 168.63.129.16: Azure's WireServer (metadata, DNS, health) */
        { 0xc0000000, 24 }, /* 192.0.0.0/24 */
        { 0xc0000200, 24 }, /* 192.0.2.0/24: TEST-NET-1 */
        { 0xc0586300, 24 }, /* 192.88.99.0/24: 6to4 relay anycast */
        { 0xc0a80000, 16 }, /* 192.168.0.0/16 */
        { 0xc6120000, 15 }, /* 198.18.0.0/15 */
        /* 198.51.100.0/24 (TEST-NET-2) and 203.0.113.0/24 (TEST-NET-3) are
         * left out on purpose: the tests use them as "the internet" (their
         * upstream servers and resolver live there), and nothing routes them
         * on a real host anyway. */
        { 0xe0000000, 4 }, /* 224.0.0.0/4 */
        { 0xf0000000, 4 }, /* 240.0.0.0/4 */
};

/* The proxy connects from the host's network namespace: 127.0.0.0/8 there
 * is the host's own loopback (nsboxd's socket aside, every local service
 * that trusts localhost), which no policy opens. A sandbox's own loopback
 * is its lo, and never goes through the proxy. */
#define LOOPBACK_RANGE 0x7f000000u

static uint32_t prefix_mask(unsigned prefix)
{
        return prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
}

const char *netpolicy_reason(enum netpolicy_verdict v)
{
        switch (v) {
        case NETPOLICY_ALLOW:
                return "allowed";
        case NETPOLICY_NOT_ALLOWED:
                return "not allowed";
        case NETPOLICY_DENIED:
                return "denied";
        case NETPOLICY_PRIVATE:
                return "private address";
        }
        return "refused";
}

bool netpolicy_parse_ipv4(const char *text, size_t len, uint32_t *addr)
{
        char buf[16];
        if (len == 0 || len >= sizeof(buf))
                return false;
        memcpy(buf, text, len);
        buf[len] = '\0';
        /* inet_pton takes only the four-part dotted decimal form without
         * leading zeros, unlike inet_aton's "1.2.3" or "0x7f.1". */
        struct in_addr in;
        if (inet_pton(AF_INET, buf, &in) != 1)
                return false;
        *addr = ntohl(in.s_addr);
        return true;
}

int netpolicy_name_normalize(const char *name, size_t len, char out[NETPOLICY_NAME_MAX + 1])
{
        if (len > 0 && name[len - 1] == '.')
                len--;
        if (len == 0 || len > NETPOLICY_NAME_MAX)
                return -EINVAL;
        size_t label = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)name[i];
                if (c == '.') {
                        if (label == 0)
                                return -EINVAL;
                        label = 0;
                } else if (isascii(c) && (isalnum(c) || c == '-' || c == '_')) {
                        if (++label > 63)
                                return -EINVAL;
                } else {
                        return -EINVAL;
                }
                out[i] = (char)tolower(c);
        }
        if (label == 0)
                return -EINVAL;
        out[len] = '\0';
        return 0;
}

/* Only digits and dots: meant as an address, never read as a name. */
static bool looks_numeric(const char *s)
{
        return s[0] != '\0' && strspn(s, "0123456789./") == strlen(s);
}

static int parse_entry(const char *list, size_t index, const char *text, struct netpolicy_list *l,
                       nsbox_error_t **err)
{
        size_t len = strlen(text);
        if (strcmp(text, "*") == 0) {
                l->any = true;
                return 0;
        }
        if (looks_numeric(text)) {
                struct netpolicy_cidr c = { .prefix = 32 };
                const char *slash = strchr(text, '/');
                size_t alen = slash ? (size_t)(slash - text) : len;
                if (!netpolicy_parse_ipv4(text, alen, &c.addr))
                        return nsbox_invalid(err, "network policy %s[%zu] \"%s\": not an IPv4 address", list,
                                             index, text);
                if (slash != NULL) {
                        const char *p = slash + 1;
                        size_t plen = strlen(p);
                        if (plen == 0 || plen > 2 || strspn(p, "0123456789") != plen ||
                            (plen == 2 && p[0] == '0') || atoi(p) > 32)
                                return nsbox_invalid(err,
                                                     "network policy %s[%zu] \"%s\": the prefix length is "
                                                     "not 0..32",
                                                     list, index, text);
                        c.prefix = (unsigned)atoi(p);
                }
                c.mask = prefix_mask(c.prefix);
                c.addr &= c.mask;
                l->cidrs[l->n_cidrs++] = c;
                return 0;
        }
        struct netpolicy_domain d = { .below = false };
        const char *name = text;
        if (strncmp(text, "*.", 2) == 0) {
                d.below = true;
                name += 2;
                len -= 2;
        }
        if (strchr(name, ':') != NULL)
                return nsbox_invalid(err, "network policy %s[%zu] \"%s\": only IPv4 addresses are supported",
                                     list, index, text);
        if (netpolicy_name_normalize(name, len, d.name) < 0 || strcmp(d.name, "") == 0)
                return nsbox_invalid(err,
                                     "network policy %s[%zu] \"%s\": not \"*\", a domain name, \"*.\" and "
                                     "a domain name, an IPv4 address or an IPv4 CIDR",
                                     list, index, text);
        if (looks_numeric(d.name))
                return nsbox_invalid(err, "network policy %s[%zu] \"%s\": not an IPv4 address", list, index,
                                     text);
        l->domains[l->n_domains++] = d;
        return 0;
}

static int parse_list(const json_t *json, const char *key, struct netpolicy_list *l, nsbox_error_t **err)
{
        json_t *arr = json_object_get(json, key);
        if (arr == NULL)
                return 0;
        if (!json_is_array(arr))
                return nsbox_invalid(err, "network policy \"%s\" is not an array of strings", key);
        size_t n = json_array_size(arr);
        if (n > NETPOLICY_MAX_ENTRIES)
                return nsbox_invalid(err, "network policy \"%s\" has %zu entries (at most %d)", key, n,
                                     NETPOLICY_MAX_ENTRIES);
        l->domains = calloc(n ? n : 1, sizeof(*l->domains));
        l->cidrs = calloc(n ? n : 1, sizeof(*l->cidrs));
        if (l->domains == NULL || l->cidrs == NULL)
                return nsbox_error(err, ENOMEM, "network policy");
        for (size_t i = 0; i < n; i++) {
                json_t *e = json_array_get(arr, i);
                if (!json_is_string(e))
                        return nsbox_invalid(err, "network policy %s[%zu] is not a string", key, i);
                if (strlen(json_string_value(e)) != json_string_length(e))
                        return nsbox_invalid(err, "network policy %s[%zu] contains a NUL byte", key, i);
                int r = parse_entry(key, i, json_string_value(e), l, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

int netpolicy_parse(const json_t *json, struct netpolicy **out, nsbox_error_t **err)
{
        if (!json_is_object(json))
                return nsbox_invalid(err, "network policy is not an object with \"allow\" and \"deny\"");
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)json, key, value)
        {
                if (strcmp(key, "allow") != 0 && strcmp(key, "deny") != 0)
                        return nsbox_invalid(err, "network policy: unknown key \"%s\" (allow, deny)", key);
        }
        _cleanup_(netpolicy_freep) struct netpolicy *p = calloc(1, sizeof(*p));
        if (p == NULL)
                return nsbox_error(err, ENOMEM, "network policy");
        int r = parse_list(json, "allow", &p->allow, err);
        if (r == 0)
                r = parse_list(json, "deny", &p->deny, err);
        if (r < 0)
                return r;
        *out = steal_pointer(&p);
        return 0;
}

void netpolicy_free(struct netpolicy *p)
{
        if (p == NULL)
                return;
        free(p->allow.domains);
        free(p->allow.cidrs);
        free(p->deny.domains);
        free(p->deny.cidrs);
        free(p);
}

static bool domain_matches(const struct netpolicy_domain *d, const char *name, size_t len)
{
        size_t dlen = strlen(d->name);
        if (!d->below)
                return len == dlen && memcmp(name, d->name, len) == 0;
        return len > dlen + 1 && name[len - dlen - 1] == '.' && memcmp(name + len - dlen, d->name, dlen) == 0;
}

static bool list_has_name(const struct netpolicy_list *l, const char *name)
{
        if (l->any)
                return true;
        size_t len = strlen(name);
        for (size_t i = 0; i < l->n_domains; i++)
                if (domain_matches(&l->domains[i], name, len))
                        return true;
        return false;
}

static bool list_has_address(const struct netpolicy_list *l, uint32_t addr)
{
        for (size_t i = 0; i < l->n_cidrs; i++)
                if ((addr & l->cidrs[i].mask) == l->cidrs[i].addr)
                        return true;
        return false;
}

/* Whether cidr lies inside the range addr/prefix (is it or is narrower). */
static bool cidr_inside(const struct netpolicy_cidr *c, uint32_t addr, unsigned prefix)
{
        return c->prefix >= prefix && (c->addr & prefix_mask(prefix)) == addr;
}

/* A special address is reachable only through an allow entry that lies
 * inside the special range and names it: 10.1.2.0/24 opens 10.1.2.x, while
 * 0.0.0.0/0 or 8.0.0.0/5 (wider than the range) open nothing special. */
static bool special_blocked(const struct netpolicy *p, uint32_t addr, const uint32_t *host_addrs,
                            size_t n_host)
{
        for (size_t s = 0; s < ARRAY_SIZE(special_ranges); s++) {
                uint32_t mask = prefix_mask(special_ranges[s].prefix);
                if ((addr & mask) != special_ranges[s].addr)
                        continue;
                if (special_ranges[s].addr == LOOPBACK_RANGE)
                        return true;
                bool opened = false;
                for (size_t i = 0; i < p->allow.n_cidrs && !opened; i++) {
                        const struct netpolicy_cidr *c = &p->allow.cidrs[i];
                        opened = cidr_inside(c, special_ranges[s].addr, special_ranges[s].prefix) &&
                                 (addr & c->mask) == c->addr;
                }
                if (!opened)
                        return true;
        }
        for (size_t h = 0; h < n_host; h++) {
                if (addr != host_addrs[h])
                        continue;
                bool opened = false;
                for (size_t i = 0; i < p->allow.n_cidrs && !opened; i++)
                        opened = p->allow.cidrs[i].prefix == 32 && p->allow.cidrs[i].addr == addr;
                if (!opened)
                        return true;
        }
        return false;
}

enum netpolicy_verdict netpolicy_check_name(const struct netpolicy *p, const char *name)
{
        if (list_has_name(&p->deny, name))
                return NETPOLICY_DENIED;
        if (!list_has_name(&p->allow, name))
                return NETPOLICY_NOT_ALLOWED;
        return NETPOLICY_ALLOW;
}

enum netpolicy_verdict netpolicy_check_named(const struct netpolicy *p, const char *name, uint32_t addr,
                                             const uint32_t *host_addrs, size_t n_host, bool *by_name)
{
        *by_name = false;
        if (list_has_name(&p->deny, name) || list_has_address(&p->deny, addr))
                return NETPOLICY_DENIED;
        if (special_blocked(p, addr, host_addrs, n_host))
                return NETPOLICY_PRIVATE;
        if (!list_has_name(&p->allow, name) && !list_has_address(&p->allow, addr))
                return NETPOLICY_NOT_ALLOWED;
        *by_name = !list_has_address(&p->allow, addr);
        return NETPOLICY_ALLOW;
}

enum netpolicy_verdict netpolicy_check_address(const struct netpolicy *p, uint32_t addr,
                                               const uint32_t *host_addrs, size_t n_host)
{
        if (list_has_address(&p->deny, addr))
                return NETPOLICY_DENIED;
        if (special_blocked(p, addr, host_addrs, n_host))
                return NETPOLICY_PRIVATE;
        if (!list_has_address(&p->allow, addr))
                return NETPOLICY_NOT_ALLOWED;
        return NETPOLICY_ALLOW;
}

bool netpolicy_allows_loopback(const struct netpolicy *p)
{
        for (size_t i = 0; i < p->allow.n_cidrs; i++)
                if (cidr_inside(&p->allow.cidrs[i], LOOPBACK_RANGE, 8))
                        return true;
        return false;
}

bool netpolicy_unblocks_special(const struct netpolicy *p, const uint32_t *host_addrs, size_t n_host)
{
        for (size_t i = 0; i < p->allow.n_cidrs; i++) {
                const struct netpolicy_cidr *c = &p->allow.cidrs[i];
                for (size_t s = 0; s < ARRAY_SIZE(special_ranges); s++)
                        if (cidr_inside(c, special_ranges[s].addr, special_ranges[s].prefix))
                                return true;
                for (size_t h = 0; h < n_host; h++)
                        if (c->prefix == 32 && c->addr == host_addrs[h])
                                return true;
        }
        return false;
}
