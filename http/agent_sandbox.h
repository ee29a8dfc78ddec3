/* SPDX-License-Identifier: Apache-2.0 */
/* The kubernetes-sigs/agent-sandbox runtime contract (agent_sandbox.c):
 * POST /execute {command}, /execute_command_stateful, /upload, the
 * download, list and exists paths and /v1/files. A handler, above reply.h
 * and nsboxd.h, below the router. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>

#include "request.h"

/* Answer the request (after its whole body arrived). */
enum MHD_Result http_agent_execute(struct http_request *r, json_t *body);
enum MHD_Result http_agent_execute_stateful(struct http_request *r, json_t *body);
enum MHD_Result http_agent_upload_finish(struct http_request *r);
/* kind: "download", "list", "exists", "v1.get", "v1.head", "v1.put" or "v1.delete". */
enum MHD_Result http_agent_files(struct http_request *r, const char *kind, const char *path);
/* GET /v1/metadata: the SANDBOX_* environment, without credentials. */
enum MHD_Result http_agent_metadata(struct http_request *r);
/* Feed multipart data of POST /upload (MHD's post processor parses it). */
int http_agent_upload_feed(struct http_request *r, const char *data, size_t len);
/* Feed the raw body of PUT /v1/files/PATH. */
int http_agent_put_feed(struct http_request *r, const char *path, const char *data, size_t len);
void http_agent_upload_free(struct http_upload *u);
