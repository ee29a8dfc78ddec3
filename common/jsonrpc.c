#include "jsonrpc.h"

#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static bool valid_id(const json_t *id)
{
        return json_is_string(id) || json_is_integer(id) || json_is_real(id) || json_is_null(id);
}

int jsonrpc_parse_request(const char *line, size_t len, struct jsonrpc_request *out,
                          const char **error_message)
{
        json_error_t jerr;
        memset(out, 0, sizeof(*out));

        /* NUL bytes inside strings are refused by jansson unless asked for;
         * nesting depth is capped by jansson (JSON_PARSER_MAX_DEPTH). */
        out->message = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        if (out->message == NULL) {
                *error_message = "parse error: not valid JSON";
                return JSONRPC_PARSE_ERROR;
        }
        if (!json_is_object(out->message)) {
                *error_message = "invalid request: not a JSON object";
                return JSONRPC_INVALID_REQUEST;
        }
        json_t *id = json_object_get(out->message, "id");
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
        out->method = json_string_value(method);

        json_t *params = json_object_get(out->message, "params");
        if (params == NULL || json_is_null(params)) {
                params = json_object();
                json_object_set_new(out->message, "params", params);
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
        json_t *error = json_pack("{s:i, s:s}", "code", code, "message", message ? message : "error");
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

char *jsonrpc_serialize(const json_t *message, size_t *len)
{
        char *text = json_dumps(message, JSON_COMPACT);
        if (text == NULL)
                return NULL;
        size_t n = strlen(text);
        char *line = realloc(text, n + 2);
        if (line == NULL) {
                free(text);
                return NULL;
        }
        line[n] = '\n';
        line[n + 1] = '\0';
        *len = n + 1;
        return line;
}

ssize_t jsonrpc_find_newline(const char *buf, size_t len)
{
        const char *nl = memchr(buf, '\n', len);
        return nl ? nl - buf : -1;
}
