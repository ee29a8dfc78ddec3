/* SPDX-License-Identifier: Apache-2.0 */
/* Process output as JSON strings: UTF-8 repair and base64. */
#include "textenc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (1-4), 0 if invalid, -n if the
 * n bytes available are a valid but incomplete start. RFC 3629: no
 * overlongs, no surrogates, nothing above U+10FFFF. */
static int utf8_sequence(const unsigned char *s, size_t avail)
{
        unsigned char c = s[0];
        int need;
        unsigned char lo = 0x80, hi = 0xBF;

        if (c < 0x80)
                return 1;
        if (c >= 0xC2 && c <= 0xDF)
                need = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
                need = 3;
                if (c == 0xE0)
                        lo = 0xA0;
                else if (c == 0xED)
                        hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
                need = 4;
                if (c == 0xF0)
                        lo = 0x90;
                else if (c == 0xF4)
                        hi = 0x8F;
        } else
                return 0;

        for (int i = 1; i < need; i++) {
                if ((size_t)i >= avail)
                        return -i;
                unsigned char b = s[i];
                if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
                        return 0;
        }
        return need;
}

char *utf8_make_valid(const char *buf, size_t len, size_t *out_len)
{
        /* Worst case: every byte becomes the 3-byte replacement character. */
        char *out = malloc(len * 3 + 1);
        if (out == NULL)
                return NULL;
        const unsigned char *s = (const unsigned char *)buf;
        size_t i = 0, o = 0;
        while (i < len) {
                /* Most output is ASCII: copy runs of it eight bytes at a time. */
                size_t run = i;
                while (run + 8 <= len) {
                        uint64_t word;
                        memcpy(&word, s + run, 8);
                        if (word & 0x8080808080808080ull)
                                break;
                        run += 8;
                }
                while (run < len && s[run] < 0x80)
                        run++;
                if (run > i) {
                        memcpy(out + o, s + i, run - i);
                        o += run - i;
                        i = run;
                        continue;
                }
                int n = utf8_sequence(s + i, len - i);
                if (n > 0) {
                        memcpy(out + o, s + i, n);
                        o += n;
                        i += n;
                } else {
                        out[o++] = (char)0xEF;
                        out[o++] = (char)0xBF;
                        out[o++] = (char)0xBD;
                        /* An incomplete sequence at the end is one replacement. */
                        i += n < 0 ? (size_t)-n : 1;
                }
        }
        out[o] = '\0';
        *out_len = o;
        return out;
}

bool utf8_valid(const char *buf, size_t len)
{
        const unsigned char *s = (const unsigned char *)buf;
        for (size_t i = 0; i < len;) {
                int n = utf8_sequence(s + i, len - i);
                if (n <= 0)
                        return false;
                i += (size_t)n;
        }
        return true;
}

size_t utf8_complete_prefix(const char *buf, size_t len)
{
        size_t start = len > 3 ? len - 3 : 0;
        for (size_t i = start; i < len; i++) {
                int n = utf8_sequence((const unsigned char *)buf + i, len - i);
                if (n < 0)
                        return i;
        }
        return len;
}

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const void *data, size_t len, size_t *out_len)
{
        const unsigned char *in = data;
        size_t n = 4 * ((len + 2) / 3);
        char *out = malloc(n + 1);
        if (out == NULL)
                return NULL;
        size_t o = 0;
        for (size_t i = 0; i < len; i += 3) {
                uint32_t v = (uint32_t)in[i] << 16;
                if (i + 1 < len)
                        v |= (uint32_t)in[i + 1] << 8;
                if (i + 2 < len)
                        v |= in[i + 2];
                out[o++] = b64_alphabet[(v >> 18) & 63];
                out[o++] = b64_alphabet[(v >> 12) & 63];
                out[o++] = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
                out[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
        }
        out[o] = '\0';
        if (out_len)
                *out_len = o;
        return out;
}

/* Each byte's 6-bit value plus one, 0 for what is not in the alphabet: one
 * load per character (the decode of a 30 MB fs.write was a quarter of nsboxd's
 * time with a chain of comparisons per character). */
static const unsigned char b64_values[256] = {
        ['A'] = 1,  ['B'] = 2,  ['C'] = 3,  ['D'] = 4,  ['E'] = 5,  ['F'] = 6,  ['G'] = 7,  ['H'] = 8,
        ['I'] = 9,  ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16,
        ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
        ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32,
        ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40,
        ['o'] = 41, ['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
        ['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
        ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64
};

/* Decodes text into out (len / 4 * 3 bytes at most), or only checks it
 * when out is NULL. False when text is not valid base64. */
static bool base64_scan(const char *text, size_t len, unsigned char *out, size_t *out_len)
{
        if (len % 4 != 0)
                return false;
        const unsigned char *in = (const unsigned char *)text;
        size_t o = 0;
        /* Every quad but the last has no padding. */
        size_t full = len >= 4 ? len - 4 : 0;
        for (size_t i = 0; i < full; i += 4) {
                int a = b64_values[in[i]] - 1, b = b64_values[in[i + 1]] - 1, c = b64_values[in[i + 2]] - 1,
                    d = b64_values[in[i + 3]] - 1;
                if ((a | b | c | d) < 0)
                        return false;
                if (out != NULL) {
                        uint32_t x = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
                        out[o] = (x >> 16) & 0xff;
                        out[o + 1] = (x >> 8) & 0xff;
                        out[o + 2] = x & 0xff;
                }
                o += 3;
        }
        if (len > 0) {
                const unsigned char *q = in + full;
                int v[4], pad = 0;
                for (int k = 0; k < 4; k++) {
                        if (q[k] == '=' && k >= 2) {
                                v[k] = 0;
                                pad++;
                        } else if (pad > 0 || (v[k] = b64_values[q[k]] - 1) < 0) {
                                return false;
                        }
                }
                uint32_t x =
                    (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
                unsigned char last[3] = { (x >> 16) & 0xff, (x >> 8) & 0xff, x & 0xff };
                for (int k = 0; k < 3 - pad; k++, o++)
                        if (out != NULL)
                                out[o] = last[k];
        }
        *out_len = o;
        return true;
}

bool base64_valid(const char *text, size_t len)
{
        size_t n;
        return base64_scan(text, len, NULL, &n);
}

void *base64_decode(const char *text, size_t len, size_t *out_len)
{
        if (len % 4 != 0)
                return NULL;
        unsigned char *out = malloc(len / 4 * 3 + 1);
        if (out != NULL && !base64_scan(text, len, out, out_len)) {
                free(out);
                return NULL;
        }
        return out;
}
