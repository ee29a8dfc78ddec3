#include "jsonrpc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

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

int jsonrpc_parse_request(const char *line, size_t len, struct jsonrpc_request *out,
                          const char **error_message)
{
        static const char *const members[] = { "jsonrpc", "id", "method", "params" };
        json_error_t jerr;
        memset(out, 0, sizeof(*out));

        /* NUL inside strings is refused by jansson unless JSON_ALLOW_NUL (so a
         * C string can never be cut short and still run); nesting depth is
         * capped by jansson (JSON_PARSER_MAX_DEPTH, 2048). */
        out->message = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        if (out->message == NULL) {
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
        if (!json_is_string(version) || strcmp(json_string_value(version), "2.0") != 0) {
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

struct serialize_buffer {
        char *data;
        size_t len, cap;
};

static int serialize_append(const char *chunk, size_t size, void *data)
{
        struct serialize_buffer *b = data;
        if (size + 2 > b->cap - b->len) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap - b->len < size + 2) {
                        if (cap > SIZE_MAX / 2)
                                return -1;
                        cap *= 2;
                }
                char *grown = realloc(b->data, cap);
                if (grown == NULL)
                        return -1;
                b->data = grown;
                b->cap = cap;
        }
        memcpy(b->data + b->len, chunk, size);
        b->len += size;
        return 0;
}

char *jsonrpc_serialize(const json_t *message, size_t *len)
{
        /* Dumped straight into the line (json_dumps would build the text and
         * then copy it): a 50 MB reply is held once, in one pass. */
        struct serialize_buffer b = { 0 };
        if (json_dump_callback(message, serialize_append, &b, JSON_COMPACT) < 0 || b.data == NULL) {
                free(b.data);
                return NULL;
        }
        b.data[b.len] = '\n';
        b.data[b.len + 1] = '\0';
        *len = b.len + 1;
        return b.data;
}

ssize_t jsonrpc_find_newline(const char *buf, size_t len)
{
        const char *nl = memchr(buf, '\n', len);
        return nl ? nl - buf : -1;
}
