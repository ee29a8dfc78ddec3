/* SPDX-License-Identifier: Apache-2.0 */
/* Turning process output into JSON strings: UTF-8 repair and base64. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Copy buf into a new NUL-terminated string (*out_len bytes, not counting
 * the NUL) where every invalid UTF-8 sequence is replaced by U+FFFD. */
char *utf8_make_valid(const char *buf, size_t len, size_t *out_len);
/* True when buf holds only complete, valid UTF-8. */
bool utf8_valid(const char *buf, size_t len);
/* Length of the longest prefix of buf that does not end in the middle of a
 * (so far valid) multi-byte sequence: what can be emitted now when more
 * bytes may follow. */
size_t utf8_complete_prefix(const char *buf, size_t len);

char *base64_encode(const void *data, size_t len, size_t *out_len);
/* Returns a malloc'd buffer, or NULL when text is not valid base64. */
void *base64_decode(const char *text, size_t len, size_t *out_len);
/* Whether text is valid base64, without decoding it anywhere. */
bool base64_valid(const char *text, size_t len);
