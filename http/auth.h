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

/* A token per sandbox, handed to E2B's SDKs as its envd access token: the
 * HMAC of the sandbox id keyed by the digest of the API key (a token of
 * the file) that made it. 64 hex digits. */
#define HTTP_SANDBOX_TOKEN_LEN 64
int http_tokens_sandbox_token(const char *token, size_t len, const char *sandbox_id,
                              char out[HTTP_SANDBOX_TOKEN_LEN + 1]);
/* The uid whose key made `presented` for sandbox_id, or 0. */
uid_t http_tokens_lookup_sandbox(const char *presented, const char *sandbox_id);

/* A token per volume, handed to E2B's SDKs as the volume's token for its
 * content API: as a sandbox's, of "volume/NAME" (no sandbox id has a '/'). */
int http_tokens_volume_token(const char *token, size_t len, const char *volume,
                             char out[HTTP_SANDBOX_TOKEN_LEN + 1]);
/* The uid whose key made `presented` for volume, or 0. */
uid_t http_tokens_lookup_volume(const char *presented, const char *volume);
