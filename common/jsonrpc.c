/* SPDX-License-Identifier: Apache-2.0 */
/* JSON-RPC 2.0 line framing: parse a request (keeping its id whatever jansson refuses), build
 * replies. */
#include "jsonrpc.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cleanup.h"
#include "textenc.h"

static bool valid_id(const json_t *id)
{
        return json_is_string(id) || json_is_integer(id) || json_is_real(id) || json_is_null(id);
}

/* jansson's text ends in " near '<input excerpt>'": the excerpt may be
 * megabytes of client text or not even UTF-8, so only the reason is kept. */
static void describe_parse_error(const json_error_t *jerr, char *out, size_t size)
{
        if (json_error_code(jerr) == json_error_null_character) {
                snprintf(out, size, "parse error at column %d: strings must not contain NUL (\\u0000)",
                         jerr->column);
                return;
        }
        const char *near = strstr(jerr->text, " near ");
        int reason_len = near ? (int)(near - jerr->text) : (int)strlen(jerr->text);
        snprintf(out, size, "parse error at column %d: %.*s", jerr->column, reason_len, jerr->text);
}

/* A JSON number token (RFC 8259 grammar) that jansson cannot hold: an
 * integer beyond int64, or a real that overflows a double. */
static bool number_unrepresentable(const char *p, size_t len)
{
        size_t i = 0;
        if (i < len && p[i] == '-')
                i++;
        if (i >= len)
                return false;
        if (p[i] == '0') {
                i++;
        } else if (p[i] >= '1' && p[i] <= '9') {
                while (i < len && p[i] >= '0' && p[i] <= '9')
                        i++;
        } else {
                return false;
        }
        bool real = false;
        if (i < len && p[i] == '.') {
                real = true;
                if (++i >= len || p[i] < '0' || p[i] > '9')
                        return false;
                while (i < len && p[i] >= '0' && p[i] <= '9')
                        i++;
        }
        if (i < len && (p[i] == 'e' || p[i] == 'E')) {
                real = true;
                i++;
                if (i < len && (p[i] == '+' || p[i] == '-'))
                        i++;
                if (i >= len || p[i] < '0' || p[i] > '9')
                        return false;
                while (i < len && p[i] >= '0' && p[i] <= '9')
                        i++;
        }
        if (i != len)
                return false; /* not a number: jansson's own error stands */
        char *text = strndup(p, len);
        if (text == NULL)
                return false;
        errno = 0;
        bool overflow;
        if (real) {
                double d = strtod(text, NULL);
                overflow = errno == ERANGE && isinf(d);
        } else {
                strtoll(text, NULL, 10);
                overflow = errno == ERANGE;
        }
        free(text);
        return overflow;
}

/* A copy of a line jansson refused although it may be valid JSON, with
 * what jansson cannot hold neutralised at the same length: numbers it
 * cannot represent become 0 (padded with spaces) and \u0000 escapes become
 * \u0001 (jansson refuses NUL in object keys). Malformed text stays
 * malformed, so parsing the copy tells valid JSON from garbage, and yields
 * the id to answer with. */
static char *neutralise(const char *line, size_t len)
{
        char *copy = malloc(len + 1);
        if (copy == NULL)
                return NULL;
        memcpy(copy, line, len);
        copy[len] = '\0';
        size_t i = 0;
        while (i < len) {
                char c = copy[i];
                if (c == '"') {
                        for (i++; i < len && copy[i] != '"'; i++) {
                                if (copy[i] != '\\' || i + 1 >= len)
                                        continue;
                                if (copy[i + 1] == 'u' && i + 6 <= len &&
                                    memcmp(copy + i + 2, "0000", 4) == 0)
                                        copy[i + 5] = '1';
                                i++; /* the escaped character */
                        }
                        i++;
                } else if (c == '-' || (c >= '0' && c <= '9')) {
                        size_t end = i;
                        while (end < len && strchr("0123456789+-.eE", copy[end]) != NULL && copy[end] != '\0')
                                end++;
                        /* null, not 0: where it is the id, the answer must not
                         * carry an id the client may have given another request.
                         * Such a number is never shorter than "1e309". */
                        if (number_unrepresentable(copy + i, end - i) && end - i >= 4) {
                                memcpy(copy + i, "null", 4);
                                memset(copy + i + 4, ' ', end - i - 4);
                        }
                        i = end;
                } else {
                        i++;
                }
        }
        return copy;
}

static bool string_has_nul(const json_t *s)
{
        return memchr(json_string_value(s), '\0', json_string_length(s)) != NULL;
}

static bool find_nul(json_t *j, char *path, size_t size, size_t used, int depth);

/* find_nul in a member or element, its name appended (n: snprintf's count). */
static bool find_nul_below(json_t *v, char *path, size_t size, size_t used, int n, int depth)
{
        size_t now = used + (n < 0 ? 0 : (size_t)n);
        return find_nul(v, path, size, now < size ? now : size - 1, depth + 1);
}

/* First string holding NUL under j, as a dotted path in out. */
static bool find_nul(json_t *j, char *path, size_t size, size_t used, int depth)
{
        if (depth > JSON_PARSER_MAX_DEPTH)
                return false;
        if (json_is_string(j))
                return string_has_nul(j);
        const char *key;
        size_t i;
        json_t *v;
        if (json_is_object(j)) {
                json_object_foreach(j, key, v)
                {
                        if (find_nul_below(v, path, size, used,
                                           snprintf(path + used, size - used, ".%s", key), depth))
                                return true;
                }
        } else if (json_is_array(j)) {
                json_array_foreach(j, i, v)
                {
                        if (find_nul_below(v, path, size, used,
                                           snprintf(path + used, size - used, "[%zu]", i), depth))
                                return true;
                }
        }
        path[used] = '\0';
        return false;
}

/* jansson refused a line for a reason that valid JSON can have: parse it
 * again with that reason neutralised, to answer with the request's id. */
static int parse_refused_json(const char *line, size_t len, const json_error_t *first,
                              struct jsonrpc_request *out, const char **error_message)
{
        json_error_t jerr;
        _cleanup_free_ char *copy = neutralise(line, len);
        if (copy == NULL) {
                *error_message = "internal error: out of memory";
                return JSONRPC_INTERNAL_ERROR;
        }
        out->message = json_loadb(copy, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (out->message == NULL) {
                describe_parse_error(first, out->error, sizeof(out->error));
                *error_message = out->error;
                return JSONRPC_PARSE_ERROR;
        }
        json_t *id = json_is_object(out->message) ? json_object_get(out->message, "id") : NULL;
        out->has_id = id != NULL;
        if (id != NULL && valid_id(id))
                out->id = id;
        switch (json_error_code(first)) {
        case json_error_duplicate_key:
                snprintf(out->error, sizeof(out->error),
                         "invalid request: duplicate object key at column %d (each key may appear once)",
                         first->column);
                break;
        case json_error_numeric_overflow:
                snprintf(out->error, sizeof(out->error),
                         "invalid request: number out of range at column %d (integers must fit in 64 bits, "
                         "reals in a double)",
                         first->column);
                break;
        default: {
                /* A key under params (env names, ...) is a bad parameter like
                 * a value holding NUL; a top-level one is a bad request. */
                const char *key;
                json_t *value;
                bool top_level = !json_is_object(out->message);
                if (json_is_object(out->message))
                        json_object_foreach(out->message, key, value) top_level |=
                            strchr(key, '\001') != NULL;
                snprintf(out->error, sizeof(out->error),
                         "invalid %s: object key holding NUL (\\u0000) at column %d",
                         top_level ? "request" : "params", first->column);
                *error_message = out->error;
                return top_level ? JSONRPC_INVALID_REQUEST : JSONRPC_INVALID_PARAMS;
        }
        }
        *error_message = out->error;
        return JSONRPC_INVALID_REQUEST;
}

int jsonrpc_parse_request(const char *line, size_t len, struct jsonrpc_request *out,
                          const char **error_message)
{
        static const char *const members[] = { "jsonrpc", "id", "method", "params" };
        json_error_t jerr;
        memset(out, 0, sizeof(*out));

        /* Valid JSON is always answered with its own id (a pipelining client
         * waits for it): NUL in strings is parsed and refused below, by
         * field; duplicate keys, numbers jansson cannot hold and NUL in keys
         * make jansson give up, and parse_refused_json recovers the id.
         * Nesting depth is capped by jansson (JSON_PARSER_MAX_DEPTH). */
        out->message =
            json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (out->message == NULL) {
                enum json_error_code code = json_error_code(&jerr);
                if (code == json_error_duplicate_key || code == json_error_numeric_overflow ||
                    code == json_error_null_byte_in_key)
                        return parse_refused_json(line, len, &jerr, out, error_message);
                describe_parse_error(&jerr, out->error, sizeof(out->error));
                *error_message = out->error;
                return JSONRPC_PARSE_ERROR;
        }
        if (!json_is_object(out->message)) {
                *error_message = "invalid request: not a JSON object";
                return JSONRPC_INVALID_REQUEST;
        }
        json_t *id = json_object_get(out->message, "id");
        out->has_id = id != NULL;
        if (id != NULL && valid_id(id))
                out->id = id;

        json_t *version = json_object_get(out->message, "jsonrpc");
        if (!json_is_string(version) || strcmp(json_string_value(version), "2.0") != 0 ||
            json_string_length(version) != 3) {
                *error_message = "invalid request: \"jsonrpc\" must be \"2.0\"";
                return JSONRPC_INVALID_REQUEST;
        }
        if (id != NULL && !valid_id(id)) {
                *error_message = "invalid request: \"id\" must be a string, number or null";
                return JSONRPC_INVALID_REQUEST;
        }
        json_t *method = json_object_get(out->message, "method");
        if (!json_is_string(method) || json_string_length(method) == 0) {
                *error_message = "invalid request: \"method\" must be a non-empty string";
                return JSONRPC_INVALID_REQUEST;
        }
        /* A C string cut short at the NUL must never name another method. */
        if (string_has_nul(method)) {
                *error_message = "invalid request: \"method\" must not contain NUL (\\u0000)";
                return JSONRPC_INVALID_REQUEST;
        }
        const char *key;
        json_t *value;
        json_object_foreach(out->message, key, value)
        {
                bool known = false;
                for (size_t i = 0; i < sizeof(members) / sizeof(members[0]); i++)
                        known |= strcmp(key, members[i]) == 0;
                if (!known) {
                        snprintf(out->error, sizeof(out->error),
                                 "invalid request: unknown member \"%.64s\" (members are jsonrpc, id, "
                                 "method, params)",
                                 key);
                        *error_message = out->error;
                        return JSONRPC_INVALID_REQUEST;
                }
        }
        out->method = json_string_value(method);

        json_t *params = json_object_get(out->message, "params");
        if (params == NULL || json_is_null(params)) {
                params = json_object();
                if (params == NULL || json_object_set_new(out->message, "params", params) < 0) {
                        *error_message = "internal error: out of memory";
                        return JSONRPC_INTERNAL_ERROR;
                }
        } else if (!json_is_object(params)) {
                *error_message = "invalid params: \"params\" must be an object";
                return JSONRPC_INVALID_PARAMS;
        }
        out->params = params;
        /* Every handler reads params as C strings: a string holding NUL would
         * run cut short (a path, a command) instead of failing. */
        char path[128] = "params";
        if (find_nul(params, path, sizeof(path), strlen(path), 0)) {
                snprintf(out->error, sizeof(out->error),
                         "invalid params: %.100s must not contain NUL (\\u0000)", path);
                *error_message = out->error;
                return JSONRPC_INVALID_PARAMS;
        }
        return 0;
}

void jsonrpc_request_clear(struct jsonrpc_request *req)
{
        if (req->message)
                json_decref(req->message);
        memset(req, 0, sizeof(*req));
}

json_t *jsonrpc_result(json_t *id, json_t *result)
{
        return json_pack("{s:s, s:O, s:O}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result", result);
}

json_t *jsonrpc_error(json_t *id, int code, const char *kind, const char *message)
{
        /* Messages quote client text and may have been cut in the middle of
         * a character: repair rather than fail to answer at all. */
        if (message == NULL)
                message = "error";
        size_t text_len;
        char *text = utf8_make_valid(message, strlen(message), &text_len);
        if (text == NULL)
                return NULL;
        json_t *error = json_pack("{s:i, s:s%}", "code", code, "message", text, text_len);
        free(text);
        if (error == NULL)
                return NULL;
        if (kind != NULL)
                json_object_set_new(error, "data", json_pack("{s:s}", "kind", kind));
        return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", error);
}

json_t *jsonrpc_notification(const char *method, json_t *params)
{
        return json_pack("{s:s, s:s, s:O}", "jsonrpc", "2.0", "method", method, "params", params);
}

/* Where a dump goes: a buffer that grows (malloc'd), or the caller's of
 * cap bytes. `reserve` bytes stay free at its end, for what the caller
 * adds after the text. */
struct dump_buffer {
        char *data;
        size_t len, cap, reserve;
        bool grows;
        bool failed;
};

/* A failure sticks: jansson goes on past an object key it could not dump
 * (it does not check that call), and a later, shorter chunk that got in
 * would make a broken text. */
static int dump_append(const char *chunk, size_t size, void *data)
{
        struct dump_buffer *b = data;
        if (!b->failed && size + b->reserve > b->cap - b->len) {
                size_t cap = b->cap ? b->cap : 256;
                while (b->grows && cap - b->len < size + b->reserve && cap <= SIZE_MAX / 2)
                        cap *= 2;
                char *grown = b->grows && cap - b->len >= size + b->reserve ? realloc(b->data, cap) : NULL;
                if (grown == NULL) {
                        b->failed = true; /* out of memory, or the caller's buffer is full */
                } else {
                        b->data = grown;
                        b->cap = cap;
                }
        }
        if (b->failed)
                return -1;
        memcpy(b->data + b->len, chunk, size);
        b->len += size;
        return 0;
}

char *json_text(const json_t *value, size_t flags, size_t *len)
{
        /* Dumped straight into the buffer (json_dumps would build the text and
         * then copy it): a 50 MB reply is held once, in one pass. Two bytes
         * stay free at its end: its NUL, and jsonrpc_serialize's newline. */
        struct dump_buffer b = { .reserve = 2, .grows = true };
        if (json_dump_callback(value, dump_append, &b, flags) < 0 || b.failed || b.data == NULL) {
                free(b.data);
                return NULL;
        }
        b.data[b.len] = '\0';
        if (len != NULL)
                *len = b.len;
        return b.data;
}

char *jsonrpc_serialize(const json_t *message, size_t *len)
{
        char *line = json_text(message, JSON_COMPACT, len);
        if (line == NULL)
                return NULL;
        line[*len] = '\n';
        line[++*len] = '\0';
        return line;
}

size_t jsonrpc_serialize_into(const json_t *message, char *buf, size_t size)
{
        if (size < 2)
                return 0;
        struct dump_buffer b = { .data = buf, .cap = size, .reserve = 1 };
        if (json_dump_callback(message, dump_append, &b, JSON_COMPACT) < 0 || b.failed || b.len == 0)
                return 0;
        buf[b.len++] = '\n';
        return b.len;
}

ssize_t jsonrpc_find_newline(const char *buf, size_t len)
{
        const char *nl = memchr(buf, '\n', len);
        return nl ? nl - buf : -1;
}
