/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a sandbox's first bytes (any bytes, any length)
 * through the three sniffers of nsbox-egress. Checks what the proxy relies
 * on: a name found is NUL-terminated, non-empty and bounded; an HTTP head's
 * offsets lie inside the bytes read; a chunked body ends at the same byte
 * however its bytes are split; a DNS question ends inside the packet and
 * its name is lowercase. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sniff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char name[SNIFF_NAME_MAX + 1];
        if (sniff_tls_sni(data, size, name) == SNIFF_OK) {
                size_t n = strnlen(name, sizeof(name));
                if (n == 0 || n > SNIFF_NAME_MAX || n + 5 > size)
                        abort();
        }

        struct sniff_http h;
        enum sniff_result r = sniff_http_head((const char *)data, size, &h);
        if (r == SNIFF_NEED_MORE && size >= SNIFF_HEAD_MAX)
                abort();
        if (r == SNIFF_OK) {
                if (h.head_len == 0 || h.head_len > size || h.head_len > SNIFF_HEAD_MAX ||
                    h.line_end >= h.head_len || memchr(data, '\0', h.head_len) != NULL)
                        abort();
                if (h.absolute && (h.path_off + h.path_len > h.line_end || h.host[0] == '\0'))
                        abort();
                if (h.connect && (h.port == 0 || h.host[0] == '\0'))
                        abort();
                if (strnlen(h.host, sizeof(h.host)) > SNIFF_NAME_MAX || strnlen(h.method, 16) > 15)
                        abort();
                if (h.chunked && h.content_length != 0)
                        abort();
        }

        /* An upstream's response head (relayed by intercepted connections). */
        struct sniff_http_response resp;
        r = sniff_http_response_head((const char *)data, size, &resp);
        if (r == SNIFF_NEED_MORE && size >= SNIFF_HEAD_MAX)
                abort();
        if (r == SNIFF_OK && (resp.head_len == 0 || resp.head_len > size || resp.head_len > SNIFF_HEAD_MAX ||
                              resp.status > 999 || (resp.chunked && resp.has_length)))
                abort();

        /* The chunked body: fed whole and in two pieces, the message ends
         * at the same byte; what it takes lies inside the bytes given. */
        struct sniff_chunked whole = { 0 }, split = { 0 };
        size_t n = sniff_chunked_feed(&whole, data, size);
        if (n > size || (whole.state != SNIFF_CHUNK_DONE && whole.state != SNIFF_CHUNK_ERROR && n != size))
                abort();
        size_t cut = size > 0 ? data[0] % (size + 1) : 0;
        size_t m = sniff_chunked_feed(&split, data, cut);
        if (split.state != SNIFF_CHUNK_DONE && split.state != SNIFF_CHUNK_ERROR)
                m += sniff_chunked_feed(&split, data + cut, size - cut);
        if (m != n || split.state != whole.state)
                abort();

        struct sniff_dns d;
        if (sniff_dns_question(data, size, &d) == SNIFF_OK) {
                if (d.question_end > size || d.question_end < 17)
                        abort();
                size_t n = strnlen(d.name, sizeof(d.name));
                if (n > 253)
                        abort();
                for (size_t i = 0; i < n; i++)
                        if (isupper((unsigned char)d.name[i]))
                                abort();
        }
        return 0;
}
