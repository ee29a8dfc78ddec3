/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's wire as nsbox-http speaks it (e2b_wire.c): the Connect protocol's
 * JSON codec (a unary call's body, a server stream's 5-byte envelopes and
 * its end-of-stream frame), Connect and REST errors from nsboxd's, the
 * sandbox and OS user a request names in its headers, and proto3-JSON
 * values (EntryInfo). Below the E2B handlers (e2b_api, e2b_process,
 * e2b_files, e2b_interp). */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "request.h"

/* envd's port and the code interpreter's, as E2b-Sandbox-Port names them. */
#define E2B_ENVD_PORT        49983
#define E2B_INTERPRETER_PORT 49999
/* Envelope flags of the Connect protocol. */
#define E2B_FLAG_COMPRESSED 0x01
#define E2B_FLAG_END        0x02
/* A message of a server stream's request is at most this long. */
#define E2B_MAX_MESSAGE (4u << 20)
/* The longest sandbox id E2b-Sandbox-Id may carry (the router refuses longer). */
#define E2B_MAX_SANDBOX_ID 128

/* The longest volume id (an nsbox volume's name) a content URL may carry. */
#define E2B_MAX_VOLUME_ID 63

/* The volume a path of E2B's volume content API names
 * (/volumecontent/{volumeID}/...), copied into id: 0, or -EINVAL when the
 * path is no such path. */
int e2b_volume_content_id(const char *url, char id[E2B_MAX_VOLUME_ID + 1]);
/* The port len characters of text name (decimal digits, 1 to 65535), or 0
 * when they name none: E2b-Sandbox-Port, a Host's PORT-, --e2b-domain's. */
unsigned e2b_port_number(const char *text, size_t len);
/* The sandbox a request names (E2b-Sandbox-Id), or NULL. */
const char *e2b_sandbox_id(struct MHD_Connection *connection);
/* Whether the request is E2B's: it names a sandbox, carries an X-API-KEY,
 * or its path is one of the control plane's. */
bool e2b_request(struct MHD_Connection *connection, const char *url);
/* nsbox's user for the OS user envd's Authorization: Basic names:
 * "root" for root, "sandbox" for any other (or none). */
const char *e2b_user(struct MHD_Connection *connection);

/* A Connect request's message: the JSON body of a unary call, or the one
 * envelope of a server stream's request (Content-Type
 * application/connect+json). NULL with `why` filled when it is not one. */
json_t *e2b_connect_message(const struct http_request *r, bool stream, char *why, size_t why_len);
/* Append one envelope (flags, then the JSON, or `{}` for NULL) to a buffer. */
int e2b_envelope_append(char **buf, size_t *len, size_t *cap, unsigned flags, json_t *message);

/* A response body made while it is sent: bytes appended to buf (envelopes,
 * NDJSON lines), read out by libmicrohttpd, until done. */
struct e2b_body {
        char *buf;
        size_t len, off, cap;
        bool done;
};

/* libmicrohttpd's content reader over b: what b holds, and when it is
 * empty, more(data), which appends, sets b->done, or returns false to cut
 * the response short (its client is gone, or nothing more can come). */
ssize_t e2b_body_read(struct e2b_body *b, char *out, size_t max, bool (*more)(void *data), void *data);

/* The Connect code of an nsboxd JSON-RPC error (NULL: nsboxd unreachable). */
const char *e2b_connect_code(json_t *error);
/* An error's Connect end-of-stream payload {"error":{code,message}}. */
json_t *e2b_connect_error_json(const char *code, const char *message);
/* A unary call's error: the status of its code and {code, message}. */
enum MHD_Result e2b_reply_connect_error(struct http_request *r, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
enum MHD_Result e2b_reply_connect_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err);
/* A REST error as E2B's API gives it: {code: status, message}. */
enum MHD_Result e2b_reply_rest_error(struct http_request *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
enum MHD_Result e2b_reply_rest_rpc_error(struct http_request *r, json_t *error, const nsbox_error_t *err);
/* The HTTP status of a Connect code. */
unsigned e2b_connect_status(const char *code);

/* The path of an fs.stat result, or of an fs.list entry under `dir`
 * (malloc'd), or NULL. */
char *e2b_entry_path(json_t *stat, const char *dir);
/* EntryInfo of an fs.stat result or an fs.list entry under `dir`. */
json_t *e2b_entry_info(json_t *stat, const char *dir);

/* A file's download (a sandbox's GET /files, a volume's GET .../file)
 * reads at most this (nsboxd's fs.read bound). */
#define E2B_MAX_READ (64u << 20)
/* A listing walks at most this deep and gives at most this many entries. */
#define E2B_LIST_MAX_DEPTH   32
#define E2B_LIST_MAX_ENTRIES 100000

/* What an E2B listing gives of an fs.list entry in `dir`: an object with
 * the entry's "path". */
typedef json_t *(*e2b_entry_fn)(json_t *stat, const char *dir);
/* The entries of `dir` and, while depth lasts (0 as 1), of its
 * directories, listed over one nsboxd connection of r's by `method`
 * (fs.list, volume.fs.list) with the fields of `target` (sandbox_id, or
 * volume) and each made by `entry`; at most E2B_LIST_MAX_ENTRIES of them
 * appended to out. */
int e2b_list_tree(struct http_request *r, const char *method, json_t *target, const char *dir, unsigned depth,
                  e2b_entry_fn entry, json_t *out, json_t **error, nsbox_error_t **err);
