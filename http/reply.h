/* SPDX-License-Identifier: Apache-2.0 */
/* Replies of nsbox-http (reply.c): JSON, errors, bytes and streams queued
 * on the request's connection, the HTTP status of an nsboxd JSON-RPC
 * error, and a request body read as a JSON object. Below the handlers and
 * the router. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>

#include "error.h"
#include "request.h"

/* Queue a response; these return the MHD_Result of MHD_queue_response. */
enum MHD_Result http_reply_json(struct http_request *r, unsigned status, json_t *body); /* body: stolen */
enum MHD_Result http_reply_error(struct http_request *r, unsigned status, const char *kind, const char *fmt,
                                 ...) __attribute__((format(printf, 4, 5)));
enum MHD_Result http_reply_bytes(struct http_request *r, unsigned status, const char *content_type,
                                 void *data, size_t len); /* data: malloc'd, stolen */
/* A response made by the caller, its headers its own (no Content-Type
 * added); resp is destroyed. */
enum MHD_Result http_reply_response(struct http_request *r, unsigned status, struct MHD_Response *resp);
/* A 200 whose body `read` produces as it comes (chunked, no-cache); `done`
 * frees data, also when the response cannot be made. */
enum MHD_Result http_reply_stream(struct http_request *r, const char *content_type,
                                  MHD_ContentReaderCallback read, void *data,
                                  MHD_ContentReaderFreeCallback done);
/* An nsboxd JSON-RPC error object (or a failure to reach nsboxd: error NULL)
 * as the HTTP status its kind maps to, body {"error":{"kind","message"}}. */
enum MHD_Result http_reply_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err);
unsigned http_status_of_rpc_error(json_t *error, const char **kind);
/* The request body as JSON (an object), or a 400 queued and NULL returned. */
json_t *http_body_object(struct http_request *r, enum MHD_Result *ret);

/* The length of an exec's stderr without nsboxd's own last line on how it
 * ended ("nsbox: timed out after ..."): a contract's front says it in the
 * words of its reference server instead. */
size_t http_stderr_without_nsbox_note(const char *text);
