/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's API (e2b.h): which part serves a request of E2B's SDKs. With
 * E2B_SANDBOX_URL set they send every sandbox's traffic to one address and
 * name the sandbox and port in E2b-Sandbox-Id and E2b-Sandbox-Port; a Host
 * PORT-ID.DOMAIN (getHost's) names them too. */
#include "e2b.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "cleanup.h"
#include "e2b_api.h"
#include "e2b_files.h"
#include "e2b_interp.h"
#include "e2b_ports.h"
#include "e2b_process.h"
#include "e2b_volumes.h"
#include "e2b_wire.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "reply.h"

int http_e2b_wants(struct http_request *r)
{
        int named = e2b_ports_from_host(r);
        if (named < 0)
                return named;
        return named > 0 || e2b_request(r->connection, r->url);
}

static const char *header(struct MHD_Connection *connection, const char *name)
{
        return MHD_lookup_connection_value(connection, MHD_HEADER_KIND, name);
}

uid_t http_e2b_authenticate(struct MHD_Connection *connection, const char *url)
{
        /* A request to a sandbox (any port, any path: a volume's token must
         * not open its owner's sandboxes) takes that sandbox's token alone. */
        const char *sandbox_id = e2b_sandbox_id(connection);
        if (sandbox_id != NULL) {
                const char *token = header(connection, "X-Access-Token");
                if (token == NULL)
                        token = header(connection, "E2B-Traffic-Access-Token");
                return token ? http_tokens_lookup_sandbox(token, sandbox_id) : 0;
        }
        char volume[E2B_MAX_VOLUME_ID + 1];
        if (e2b_volume_content_id(url, volume) == 0) {
                /* The volume's token (VolumeAndToken's), or its owner's key. */
                const char *auth = header(connection, MHD_HTTP_HEADER_AUTHORIZATION);
                if (auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0) {
                        uid_t uid = http_tokens_lookup_volume(auth + 7, volume);
                        if (uid != 0)
                                return uid;
                }
        }
        const char *key = header(connection, "X-API-KEY");
        return key ? http_tokens_lookup(key, strlen(key)) : 0;
}

enum MHD_Result http_e2b_refuse(struct http_request *r, unsigned status, const char *message)
{
        return http_reply_json(r, status,
                               json_pack("{s:I, s:s}", "code", (json_int_t)status, "message", message));
}

static bool id_ok(const char *id)
{
        size_t n = strlen(id);
        if (n == 0 || n > E2B_MAX_SANDBOX_ID)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
                      (id[i] >= '0' && id[i] <= '9') || id[i] == '-' || id[i] == '_'))
                        return false;
        return true;
}

/* envd's GET /health: 204 while the sandbox runs, 502 (what the SDKs read
 * as "not running") once it is gone. */
static enum MHD_Result health(struct http_request *r, const char *sandbox_id)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", sandbox_id), *result = NULL,
                              *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "sandbox.info", params, &result, &error, &err) < 0)
                return http_e2b_refuse(r, 502, "the sandbox is not running");
        const char *state = json_string_value(json_object_get(result, "state"));
        if (state == NULL || (strcmp(state, "running") != 0 && strcmp(state, "paused") != 0))
                return http_e2b_refuse(r, 502, "the sandbox is not running");
        return http_reply_bytes(r, MHD_HTTP_NO_CONTENT, "application/json", NULL, 0);
}

static enum MHD_Result envd(struct http_request *r, const char *sandbox_id)
{
        const char *url = r->url;
        bool get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
        if (get && strcmp(url, "/health") == 0)
                return health(r, sandbox_id);
        if (strcmp(url, "/files") == 0)
                return http_e2b_files(r, sandbox_id);
        if (post && strncmp(url, "/process.Process/", 17) == 0)
                return http_e2b_process(r, sandbox_id, url + 17);
        if (post && strncmp(url, "/filesystem.Filesystem/", 23) == 0)
                return http_e2b_filesystem(r, sandbox_id, url + 23);
        return e2b_reply_connect_error(r, "unimplemented", "envd's %s %.200s is not implemented by nsbox",
                                       r->method, url);
}

enum MHD_Result http_e2b_route(struct http_request *r)
{
        const char *sandbox_id = e2b_sandbox_id(r->connection);
        char volume[E2B_MAX_VOLUME_ID + 1];
        if (sandbox_id == NULL && e2b_volume_content_id(r->url, volume) == 0)
                return http_e2b_volume_content(r, volume);
        if (sandbox_id == NULL)
                return http_e2b_api(r);
        if (!id_ok(sandbox_id))
                return http_e2b_refuse(r, 400, "E2b-Sandbox-Id is not a sandbox id");
        const char *port = header(r->connection, "E2b-Sandbox-Port");
        unsigned p = port ? e2b_port_number(port, strlen(port)) : E2B_ENVD_PORT;
        if (p == 0)
                return http_e2b_refuse(r, 400, "E2b-Sandbox-Port is not a port (1 to 65535)");
        if (p == E2B_ENVD_PORT)
                return envd(r, sandbox_id);
        if (p == E2B_INTERPRETER_PORT)
                return http_e2b_interpreter(r, sandbox_id);
        return http_e2b_port(r, sandbox_id, p);
}
