/* SPDX-License-Identifier: Apache-2.0 */
/* The tokens file of nsbox-http (auth.c): each token's owner. Below the
 * router, which authenticates requests with it. */
#pragma once

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

int http_tokens_load(const char *path, nsbox_error_t **err);
void http_tokens_clear(void);
/* The uid of a presented token, or 0 when it is no token of the file. Every
 * entry is compared, in constant time, whatever matches. */
uid_t http_tokens_lookup(const char *token, size_t len);
