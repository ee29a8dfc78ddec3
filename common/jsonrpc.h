/* SPDX-License-Identifier: Apache-2.0 */
/* JSON-RPC 2.0 framing shared by nsboxd, the CLI and the MCP server: one
 * compact JSON object per '\n'-terminated line. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define JSONRPC_PARSE_ERROR      -32700
#define JSONRPC_INVALID_REQUEST  -32600
#define JSONRPC_METHOD_NOT_FOUND -32601
#define JSONRPC_INVALID_PARAMS   -32602
#define JSONRPC_INTERNAL_ERROR   -32603
#define JSONRPC_APP_ERROR        -32000

struct jsonrpc_request {
        json_t *message; /* owns everything below */
        json_t *id;      /* borrowed; NULL for a notification */
        const char *method;
        json_t *params;  /* borrowed; an object (empty when absent) */
        bool has_id;     /* an "id" member was present: a call, not a notification */
        char error[192]; /* why parsing failed, when the reason needs details */
};

/* Parse and validate one request line. On failure returns a negative
 * JSON-RPC code and *error_message says why (it may point into *out);
 * out->id is the request id when one could be recovered (borrowed from
 * out->message, which jsonrpc_request_clear() frees). Strict: members other
 * than jsonrpc, id, method and params are refused (a misspelt "params" must
 * not run the method with defaults), and so are strings holding NUL
 * (invalid params naming the field). Any valid JSON gets its id back, even
 * when jansson cannot hold it (duplicate keys, numbers beyond int64 or a
 * double: invalid request); only text that is not JSON gets a null id. */
int jsonrpc_parse_request(const char *line, size_t len, struct jsonrpc_request *out,
                          const char **error_message);
void jsonrpc_request_clear(struct jsonrpc_request *req);

/* Build messages (new references). `kind` may be NULL for protocol errors. */
json_t *jsonrpc_result(json_t *id, json_t *result);
json_t *jsonrpc_error(json_t *id, int code, const char *kind, const char *message);
json_t *jsonrpc_notification(const char *method, json_t *params);

/* The text of `value` as json_dumps makes it with `flags`, NUL-terminated,
 * but malloc'd: free() it. json_dumps's comes from jansson's allocator,
 * which is not malloc in the CLI (cli/json_memory.c). *len (if not NULL) is
 * set to its length. NULL when out of memory or when the value holds
 * something JSON cannot encode. */
char *json_text(const json_t *value, size_t flags, size_t *len);

/* Compact text plus '\n'; malloc'd, *len set. NULL when out of memory or
 * when the message holds something JSON cannot encode. Written in one pass
 * into the returned buffer, so a large reply is held in memory once. */
char *jsonrpc_serialize(const json_t *message, size_t *len);

/* jsonrpc_serialize's line written into buf (size bytes; no NUL): its
 * length, or 0 when it does not fit (the dump stops there) or cannot be
 * encoded. */
size_t jsonrpc_serialize_into(const json_t *message, char *buf, size_t size);

/* Find the end of the first complete line in buf: index of '\n', or -1. */
ssize_t jsonrpc_find_newline(const char *buf, size_t len);
