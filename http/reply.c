/* SPDX-License-Identifier: Apache-2.0 */
/* Replies of nsbox-http (reply.h): every one goes out through queue_reply,
 * which adds the headers its status calls for. */
#include "reply.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_cleanup.h"
#include "jsonrpc.h"

/* Every reply goes out here: its headers by status, then queued. */
static enum MHD_Result queue_reply(struct http_request *r, unsigned status, struct MHD_Response *resp,
                                   const char *content_type)
{
        if (content_type != NULL)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        if (status == MHD_HTTP_UNAUTHORIZED)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"nsbox\"");
        if (status == MHD_HTTP_TOO_MANY_REQUESTS || status == MHD_HTTP_SERVICE_UNAVAILABLE)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
        enum MHD_Result ret = MHD_queue_response(r->connection, status, resp);
        MHD_destroy_response(resp);
        if (ret == MHD_YES) {
                r->answered = true;
                r->status = status;
        }
        return ret;
}

enum MHD_Result http_reply_response(struct http_request *r, unsigned status, struct MHD_Response *resp)
{
        return queue_reply(r, status, resp, NULL);
}

enum MHD_Result http_reply_bytes(struct http_request *r, unsigned status, const char *content_type,
                                 void *data, size_t len)
{
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
        if (resp == NULL) {
                free(data);
                return MHD_NO;
        }
        return queue_reply(r, status, resp, content_type);
}

enum MHD_Result http_reply_stream(struct http_request *r, const char *content_type,
                                  MHD_ContentReaderCallback read, void *data,
                                  MHD_ContentReaderFreeCallback done)
{
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, read, data, done);
        if (resp == NULL) {
                done(data);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        return queue_reply(r, MHD_HTTP_OK, resp, content_type);
}

enum MHD_Result http_reply_json(struct http_request *r, unsigned status, json_t *body)
{
        _cleanup_json_ json_t *owned = body;
        size_t len = 0;
        char *text = owned ? jsonrpc_serialize(owned, &len) : NULL;
        if (text == NULL) {
                static const char oom[] =
                    "{\"error\":{\"kind\":\"internal\",\"message\":\"cannot encode the reply\"}}\n";
                text = strdup(oom);
                len = text ? strlen(text) : 0;
                status = MHD_HTTP_INTERNAL_SERVER_ERROR;
                if (text == NULL)
                        return MHD_NO;
        }
        return http_reply_bytes(r, status, "application/json", text, len);
}

enum MHD_Result http_reply_error(struct http_request *r, unsigned status, const char *kind, const char *fmt,
                                 ...)
{
        char message[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        return http_reply_json(r, status,
                               json_pack("{s:{s:s, s:s}}", "error", "kind", kind, "message", message));
}

unsigned http_status_of_rpc_error(json_t *error, const char **kind_out)
{
        const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
        json_int_t code = json_integer_value(json_object_get(error, "code"));
        unsigned status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        if (kind == NULL) {
                /* protocol errors carry no kind */
                kind = code == JSONRPC_METHOD_NOT_FOUND ? "not_found"
                       : code == JSONRPC_INTERNAL_ERROR ? "internal"
                                                        : "invalid_params";
        }
        if (strcmp(kind, "invalid_params") == 0)
                status = MHD_HTTP_BAD_REQUEST;
        else if (strcmp(kind, "not_found") == 0)
                status = MHD_HTTP_NOT_FOUND;
        else if (strcmp(kind, "gone") == 0)
                status = MHD_HTTP_GONE;
        else if (strcmp(kind, "limit_reached") == 0 || strcmp(kind, "busy") == 0)
                status = MHD_HTTP_TOO_MANY_REQUESTS;
        else if (strcmp(kind, "unavailable") == 0)
                status = MHD_HTTP_SERVICE_UNAVAILABLE;
        else if (strcmp(kind, "permission_denied") == 0)
                status = MHD_HTTP_FORBIDDEN;
        if (kind_out)
                *kind_out = kind;
        return status;
}

enum MHD_Result http_reply_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err)
{
        /* nobody to answer: close the connection */
        if (error == NULL && err != NULL && err->errnum == ECONNABORTED)
                return MHD_NO;
        if (error == NULL)
                return http_reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "unavailable", "nsboxd: %s",
                                        err && err->message ? err->message : "unreachable");
        const char *kind;
        unsigned status = http_status_of_rpc_error(error, &kind);
        json_t *message = json_object_get(error, "message");
        return http_reply_json(r, status,
                               json_pack("{s:{s:s, s:s}}", "error", "kind", kind, "message",
                                         json_is_string(message) ? json_string_value(message) : "error"));
}

json_t *http_body_object(struct http_request *r, enum MHD_Result *ret)
{
        json_error_t jerr;
        json_t *body = r->body_len ? json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
        if (body == NULL) {
                *ret = http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params", "the body is not JSON: %s",
                                        r->body_len ? jerr.text : "empty");
                return NULL;
        }
        if (!json_is_object(body)) {
                json_decref(body);
                *ret = http_reply_error(r, MHD_HTTP_BAD_REQUEST, "invalid_params",
                                        "the body must be a JSON object");
                return NULL;
        }
        return body;
}

size_t http_stderr_without_nsbox_note(const char *text)
{
        static const char note[] = "nsbox: timed out after ";
        size_t n = strlen(text);
        if (n == 0)
                return 0;
        /* The start of the last line (a final newline ends it, not begins another). */
        size_t start = n - 1;
        while (start > 0 && text[start - 1] != '\n')
                start--;
        return strncmp(text + start, note, sizeof(note) - 1) == 0 ? start : n;
}
