/* SPDX-License-Identifier: Apache-2.0 */
/* Secrets put into the one place of a request they are for, refused
 * anywhere else, and masked in what comes back. */
#include "inject.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

struct inject_secrets *inject_ref(struct inject_secrets *s)
{
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
        return s;
}

void inject_unref(struct inject_secrets *s)
{
        if (s == NULL || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        for (size_t i = 0; i < s->n; i++) {
                struct inject_secret *one = &s->items[i];
                for (size_t h = 0; h < one->n_hosts; h++)
                        free(one->hosts[h]);
                free(one->hosts);
                free(one->header_name);
                free(one->header_template);
        }
        free(s->items);
        if (s->values != NULL) {
                explicit_bzero(s->values, s->values_size);
                munmap(s->values, s->values_size);
        }
        free(s);
}

static const char *parse_one(struct inject_secret *one, const char *name, json_t *secret, char **values_at,
                             size_t *longest)
{
        json_t *value = json_object_get(secret, "value");
        json_t *placeholder = json_object_get(secret, "placeholder");
        json_t *hosts = json_object_get(secret, "hosts");
        json_t *header = json_object_get(secret, "header");
        if (!json_is_string(value) || !json_is_string(placeholder) || !json_is_array(hosts) ||
            strlen(name) >= sizeof(one->name) ||
            json_string_length(placeholder) >= sizeof(one->placeholder) ||
            json_string_length(placeholder) < 16 || (header != NULL && !json_is_string(header)))
                return "a secret is not {value, hosts, header?, placeholder}";
        snprintf(one->name, sizeof(one->name), "%s", name);
        snprintf(one->placeholder, sizeof(one->placeholder), "%s", json_string_value(placeholder));
        memcpy(*values_at, json_string_value(value), json_string_length(value));
        one->value = *values_at;
        one->value_len = json_string_length(value);
        *values_at += one->value_len;
        one->hosts = calloc(json_array_size(hosts) + 1, sizeof(char *));
        if (one->hosts == NULL)
                return "out of memory";
        size_t i;
        json_t *host;
        json_array_foreach(hosts, i, host)
        {
                if (!json_is_string(host))
                        return "a secret's host is not a string";
                if ((one->hosts[one->n_hosts++] = strdup(json_string_value(host))) == NULL)
                        return "out of memory";
        }
        if (one->value_len >= INJECT_MASK_MIN && one->value_len > *longest)
                *longest = one->value_len;
        if (header != NULL) {
                const char *text = json_string_value(header);
                const char *colon = strchr(text, ':');
                if (colon == NULL || strstr(text, "{value}") == NULL)
                        return "a secret's header has no name or no {value}";
                one->header_name = strndup(text, (size_t)(colon - text));
                one->header_template = strdup(text);
                if (one->header_name == NULL || one->header_template == NULL)
                        return "out of memory";
        }
        return NULL;
}

struct inject_secrets *inject_parse(json_t *secrets, const char **why)
{
        *why = NULL;
        if (secrets == NULL || json_is_null(secrets))
                return NULL;
        if (!json_is_object(secrets)) {
                *why = "\"secrets\" is not an object";
                return NULL;
        }
        if (json_object_size(secrets) == 0)
                return NULL;
        struct inject_secrets *s = calloc(1, sizeof(*s));
        if (s == NULL || (s->items = calloc(json_object_size(secrets), sizeof(*s->items))) == NULL) {
                free(s);
                *why = "out of memory";
                return NULL;
        }
        s->refs = 1;
        const char *name;
        json_t *secret;
        size_t total = 1;
        json_object_foreach(secrets, name, secret) total +=
            json_string_length(json_object_get(secret, "value"));
        s->values_size = total;
        s->values = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s->values == MAP_FAILED) {
                s->values = NULL;
                inject_unref(s);
                *why = "out of memory";
                return NULL;
        }
        /* Kept out of core dumps even if the process were made dumpable. */
        (void)madvise(s->values, total, MADV_DONTDUMP);
        char *at = s->values;
        json_object_foreach(secrets, name, secret)
        {
                if (!json_is_object(secret) ||
                    (*why = parse_one(&s->items[s->n++], name, secret, &at, &s->longest_value)) != NULL) {
                        if (*why == NULL)
                                *why = "a secret is not an object";
                        inject_unref(s);
                        return NULL;
                }
        }
        return s;
}

static bool for_host(const struct inject_secret *one, const char *host);

bool inject_for_host(const struct inject_secrets *s, const char *host)
{
        for (size_t i = 0; s != NULL && i < s->n; i++)
                if (for_host(&s->items[i], host))
                        return true;
        return false;
}

static bool for_host(const struct inject_secret *one, const char *host)
{
        if (host == NULL)
                return false;
        for (size_t i = 0; i < one->n_hosts; i++)
                if (strcmp(one->hosts[i], host) == 0)
                        return true;
        return false;
}

static bool put(char *out, size_t cap, size_t *n, const char *p, size_t len)
{
        if (*n + len > cap)
                return false;
        memcpy(out + *n, p, len);
        *n += len;
        return true;
}

void inject_refusal(const struct inject_secret *one, const char *host, char *why, size_t cap)
{
        if (!for_host(one, host))
                snprintf(why, cap, "carries the placeholder of secret %s, not for this host", one->name);
        else
                snprintf(why, cap, "carries the placeholder of secret %s outside its header (%s)", one->name,
                         one->header_name != NULL ? one->header_name : "Authorization");
}

/* The one place a placeholder the sandbox wrote becomes the value: its
 * Authorization header, for a secret of this host with no header of its
 * own (a secret with one gets its value there, never from the sandbox's
 * text). Anywhere else a host could echo the value back: a 301's Location
 * keeps the query, Access-Control-Allow-Origin repeats Origin, a 404 page
 * quotes the path. */
static bool value_slot(const struct inject_secret *one, const char *host, const char *line, size_t len,
                       bool header)
{
        return header && one->header_template == NULL && for_host(one, host) &&
               sniff_http_header_named(line, len, "authorization");
}

enum inject_result inject_line(const struct inject_secrets *s, const char *host, const char *line, size_t len,
                               bool header, char *out, size_t cap, size_t *n,
                               const struct inject_secret **refused)
{
        size_t pos = 0;
        while (pos < len) {
                const struct inject_secret *hit = NULL;
                size_t hit_at = len;
                for (size_t i = 0; s != NULL && i < s->n; i++) {
                        const struct inject_secret *one = &s->items[i];
                        size_t plen = strlen(one->placeholder);
                        const char *found = memmem(line + pos, len - pos, one->placeholder, plen);
                        if (found != NULL && (size_t)(found - line) < hit_at) {
                                hit_at = (size_t)(found - line);
                                hit = one;
                        }
                }
                if (hit == NULL)
                        return put(out, cap, n, line + pos, len - pos) ? INJECT_OK : INJECT_NOSPACE;
                if (!value_slot(hit, host, line, len, header)) {
                        *refused = hit;
                        return INJECT_REFUSED;
                }
                if (!put(out, cap, n, line + pos, hit_at - pos) ||
                    !put(out, cap, n, hit->value, hit->value_len))
                        return INJECT_NOSPACE;
                pos = hit_at + strlen(hit->placeholder);
        }
        return INJECT_OK;
}

bool inject_header_replaced(const struct inject_secrets *s, const char *host, const char *line, size_t len)
{
        for (size_t i = 0; s != NULL && i < s->n; i++) {
                const struct inject_secret *one = &s->items[i];
                size_t nlen = one->header_name ? strlen(one->header_name) : 0;
                if (nlen > 0 && for_host(one, host) && len > nlen && line[nlen] == ':' &&
                    strncasecmp(line, one->header_name, nlen) == 0)
                        return true;
        }
        return false;
}

enum inject_result inject_headers(const struct inject_secrets *s, const char *host, char *out, size_t cap,
                                  size_t *n)
{
        for (size_t i = 0; s != NULL && i < s->n; i++) {
                const struct inject_secret *one = &s->items[i];
                if (one->header_template == NULL || !for_host(one, host))
                        continue;
                const char *slot = strstr(one->header_template, "{value}");
                size_t before = (size_t)(slot - one->header_template);
                const char *after = slot + strlen("{value}");
                if (!put(out, cap, n, one->header_template, before) ||
                    !put(out, cap, n, one->value, one->value_len) ||
                    !put(out, cap, n, after, strlen(after)) || !put(out, cap, n, "\r\n", 2))
                        return INJECT_NOSPACE;
        }
        return INJECT_OK;
}

enum inject_result inject_rewrite_head(const struct inject_secrets *s, const char *host, const char *in,
                                       const struct sniff_http *h, bool keep_alive, char *out, size_t cap,
                                       size_t *n, const struct inject_secret **refused)
{
        enum inject_result r;
#define PUT(p, l)                                \
        do {                                     \
                if (!put(out, cap, n, (p), (l))) \
                        return INJECT_NOSPACE;   \
        } while (0)
#define PUT_INJECTED(p, l, header)                                                                     \
        do {                                                                                           \
                if ((r = inject_line(s, host, (p), (l), (header), out, cap, n, refused)) != INJECT_OK) \
                        return r;                                                                      \
        } while (0)
        if (h->absolute) {
                size_t mlen = strlen(h->method);
                PUT(in, mlen + 1);
                if (h->path_len == 0 || in[h->path_off] != '/')
                        PUT("/", 1);
                PUT_INJECTED(in + h->path_off, h->path_len, false);
                PUT(in + h->line_end - 9, 9); /* " HTTP/1.x" */
        } else {
                PUT_INJECTED(in, h->line_end, false);
        }
        PUT("\r\n", 2);
        size_t pos = (size_t)((const char *)memchr(in, '\n', h->head_len) - in) + 1;
        while (pos < h->head_len) {
                const char *lf = memchr(in + pos, '\n', h->head_len - pos);
                size_t end = (size_t)(lf - in), llen = end - pos;
                if (llen > 0 && in[end - 1] == '\r')
                        llen--;
                if (llen == 0)
                        break;
                /* Absolute-form: upstream gets the Host of the URI the
                 * policy judged, never one of the client's. */
                bool drop = sniff_http_hop_header(in + pos, llen) ||
                            (h->absolute && sniff_http_header_named(in + pos, llen, "host")) ||
                            inject_header_replaced(s, host, in + pos, llen);
                if (!drop) {
                        PUT_INJECTED(in + pos, llen, true);
                        PUT("\r\n", 2);
                }
                pos = end + 1;
        }
        if (h->absolute) {
                char hostline[SNIFF_NAME_MAX + 16];
                int hl = h->port ? snprintf(hostline, sizeof(hostline), "Host: %s:%u\r\n", h->host, h->port)
                                 : snprintf(hostline, sizeof(hostline), "Host: %s\r\n", h->host);
                PUT(hostline, (size_t)hl);
        }
        if ((r = inject_headers(s, host, out, cap, n)) != INJECT_OK)
                return r;
        if (keep_alive)
                PUT("\r\n", 2);
        else
                PUT("Connection: close\r\n\r\n", 21);
#undef PUT
#undef PUT_INJECTED
        return INJECT_OK;
}

const struct inject_secret *inject_scan_body(const struct inject_secrets *s, struct inject_scan *scan,
                                             const void *data, size_t len)
{
        size_t longest = 0;
        for (size_t i = 0; s != NULL && i < s->n; i++)
                if (strlen(s->items[i].placeholder) > longest)
                        longest = strlen(s->items[i].placeholder);
        if (longest == 0 || len == 0)
                return NULL;
        /* Where the last piece and this one meet: the carry (at most
         * longest - 1 bytes) and as much of data again. */
        char joint[2 * sizeof(scan->carry)];
        size_t head = len < longest - 1 ? len : longest - 1;
        memcpy(joint, scan->carry, scan->carry_len);
        memcpy(joint + scan->carry_len, data, head);
        size_t joint_len = scan->carry_len + head;
        for (size_t i = 0; i < s->n; i++) {
                const struct inject_secret *one = &s->items[i];
                size_t plen = strlen(one->placeholder);
                if (memmem(joint, joint_len, one->placeholder, plen) != NULL ||
                    memmem(data, len, one->placeholder, plen) != NULL)
                        return one;
        }
        size_t keep = longest - 1;
        if (len >= keep) {
                memcpy(scan->carry, (const char *)data + len - keep, keep);
                scan->carry_len = keep;
        } else {
                /* data is all in joint (head == len), after the carry. */
                keep = joint_len < keep ? joint_len : keep;
                memmove(scan->carry, joint + joint_len - keep, keep);
                scan->carry_len = keep;
        }
        return NULL;
}

size_t inject_scan_chunked(const struct inject_secrets *s, struct sniff_chunked *chunks,
                           struct inject_scan *data, const uint8_t *buf, size_t len,
                           const struct inject_secret **found)
{
        size_t i = 0;
        while (i < len && chunks->state != SNIFF_CHUNK_DONE && chunks->state != SNIFF_CHUNK_ERROR) {
                if (chunks->state != SNIFF_CHUNK_DATA) {
                        i += sniff_chunked_feed(chunks, buf + i, 1); /* the framing, byte by byte */
                        continue;
                }
                size_t n = len - i < chunks->size ? len - i : (size_t)chunks->size;
                const struct inject_secret *hit = inject_scan_body(s, data, buf + i, n);
                if (hit != NULL && *found == NULL)
                        *found = hit;
                i += sniff_chunked_feed(chunks, buf + i, n);
        }
        return i;
}

static bool masked(const struct inject_secret *one)
{
        return one->value_len >= INJECT_MASK_MIN;
}

enum inject_result inject_mask_head(const struct inject_secrets *s, const char *in, size_t len, char *out,
                                    size_t cap, size_t *n)
{
        size_t pos = 0;
        while (pos < len) {
                const struct inject_secret *hit = NULL;
                size_t hit_at = len;
                for (size_t i = 0; s != NULL && i < s->n; i++) {
                        const struct inject_secret *one = &s->items[i];
                        const char *found =
                            masked(one) ? memmem(in + pos, len - pos, one->value, one->value_len) : NULL;
                        if (found != NULL && (size_t)(found - in) < hit_at) {
                                hit_at = (size_t)(found - in);
                                hit = one;
                        }
                }
                if (hit == NULL)
                        return put(out, cap, n, in + pos, len - pos) ? INJECT_OK : INJECT_NOSPACE;
                if (!put(out, cap, n, in + pos, hit_at - pos) ||
                    !put(out, cap, n, hit->placeholder, strlen(hit->placeholder)))
                        return INJECT_NOSPACE;
                pos = hit_at + hit->value_len;
        }
        return INJECT_OK;
}

size_t inject_mask_body(const struct inject_secrets *s, char *buf, size_t len)
{
        size_t hold = 0;
        for (size_t i = 0; s != NULL && i < s->n; i++) {
                const struct inject_secret *one = &s->items[i];
                if (!masked(one))
                        continue;
                char *at = buf;
                while ((at = memmem(at, len - (size_t)(at - buf), one->value, one->value_len)) != NULL) {
                        memset(at, '*', one->value_len);
                        at += one->value_len;
                }
        }
        /* The longest end of buf that a value begins with: the rest of that
         * value may be in the next piece. */
        for (size_t i = 0; s != NULL && i < s->n; i++) {
                const struct inject_secret *one = &s->items[i];
                if (!masked(one))
                        continue;
                size_t from = len > one->value_len - 1 ? len - (one->value_len - 1) : 0;
                if (len - from <= hold)
                        continue;
                for (char *at = buf + from;
                     (at = memchr(at, one->value[0], len - (size_t)(at - buf))) != NULL; at++) {
                        size_t tail = len - (size_t)(at - buf);
                        if (tail <= hold)
                                break;
                        if (memcmp(at, one->value, tail) == 0) {
                                hold = tail;
                                break;
                        }
                }
        }
        return hold;
}
