/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's control plane (e2b_api.h) on nsboxd's sandbox methods. An E2B
 * sandbox is an nsbox sandbox: its template is the image (E2B's own
 * template names mean the default image) or one of the owner's snapshots,
 * metadata its labels, envVars its env, the timeout its idle timeout. E2B's
 * snapshots are nsbox's; a fork is a snapshot and sandboxes made from it.
 * E2B's volumes are nsbox's volumes of the key's uid, their name their id. */
#include "e2b_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "auth.h"
#include "cleanup.h"
#include "e2b_wire.h"
#include "json_cleanup.h"
#include "log.h"
#include "nsboxd.h"
#include "reply.h"

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX     1000
/* E2B's volumes have no size; nsbox's do (a sparse ext4 image: what is
 * written is what the host's disk holds). */
#define E2B_VOLUME_SIZE "1G"
#define E2B_MAX_MOUNTS  8

/* The key the request was made with (X-API-KEY or a Bearer token), for the
 * sandbox's access token; NULL without one. */
static const char *presented_key(struct MHD_Connection *connection, size_t *len)
{
        const char *key = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "X-API-KEY");
        if (key == NULL) {
                const char *auth =
                    MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
                if (auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0)
                        key = auth + 7;
        }
        if (key == NULL)
                return NULL;
        while (*key == ' ')
                key++;
        *len = strlen(key);
        while (*len > 0 && key[*len - 1] == ' ')
                (*len)--;
        return key;
}

/* E2B's Sandbox object of an nsbox sandbox object (SandboxDetail when detail). */
static json_t *sandbox_json(struct http_request *r, json_t *sb, bool detail)
{
        const char *id = json_string_value(json_object_get(sb, "sandbox_id"));
        const char *image = json_string_value(json_object_get(sb, "image"));
        json_t *labels = json_object_get(sb, "labels");
        json_t *out = json_pack("{s:s, s:s, s:s, s:s, s:O}", "sandboxID", id ? id : "", "templateID",
                                image ? image : "", "clientID", "nsbox", "envdVersion", E2B_ENVD_VERSION,
                                "metadata", json_is_object(labels) ? labels : json_object());
        if (out == NULL)
                return NULL;
        size_t key_len = 0;
        const char *key = presented_key(r->connection, &key_len);
        char token[HTTP_SANDBOX_TOKEN_LEN + 1];
        if (http_config.act_as && key != NULL && id != NULL &&
            http_tokens_sandbox_token(key, key_len, id, token) == 0) {
                json_object_set_new(out, "envdAccessToken", json_string(token));
                json_object_set_new(out, "trafficAccessToken", json_string(token));
        }
        /* the SDK builds getHost(port) as PORT-ID.DOMAIN from it */
        if (http_config.e2b_domain != NULL)
                json_object_set_new(out, "domain", json_string(http_config.e2b_domain));
        if (!detail)
                return out;
        json_t *limits = json_object_get(sb, "limits");
        double cpus = json_number_value(json_object_get(limits, "cpus"));
        json_int_t memory = json_integer_value(json_object_get(limits, "memory_bytes"));
        json_int_t disk = json_integer_value(json_object_get(limits, "disk_bytes"));
        const char *state = json_string_value(json_object_get(sb, "state"));
        json_object_set(out, "startedAt", json_object_get(sb, "created_at"));
        json_object_set(out, "endAt", json_object_get(sb, "last_used"));
        json_object_set_new(out, "cpuCount", json_integer(cpus < 1 ? 1 : (json_int_t)(cpus + 0.999)));
        json_object_set_new(out, "memoryMB", json_integer(memory >> 20));
        json_object_set_new(out, "diskSizeMB", json_integer(disk >> 20));
        json_object_set_new(out, "state",
                            json_string(state && strcmp(state, "paused") == 0 ? "paused" : "running"));
        json_t *mounts = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(sb, "mounts"), i, m)
        {
                json_t *volume = json_object_get(m, "volume");
                if (json_is_string(volume))
                        json_array_append_new(mounts, json_pack("{s:O, s:O}", "name", volume, "path",
                                                                json_object_get(m, "path")));
        }
        json_object_set_new(out, "volumeMounts", mounts);
        return out;
}

static bool template_is_default(const char *t)
{
        return t == NULL || *t == '\0' || strcmp(t, "base") == 0 || strncmp(t, "code-interpreter", 16) == 0;
}

/* E2B's network {allowOut, denyOut} as an nsbox client policy, or NULL (none given). */
static json_t *network_policy(json_t *network)
{
        json_t *allow = json_object_get(network, "allowOut"), *deny = json_object_get(network, "denyOut");
        if (allow == NULL && deny == NULL)
                return NULL;
        json_t *policy = json_object();
        if (allow != NULL)
                json_object_set(policy, "allow", allow);
        if (deny != NULL)
                json_object_set(policy, "deny", deny);
        return policy;
}

/* The id of the caller's snapshot whose id or name is `name`, or NULL:
 * E2B makes a sandbox from a snapshot by giving it as the template. */
static char *snapshot_named(struct http_request *r, const char *name)
{
        _cleanup_json_ json_t *params = json_object(), *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "snapshot.list", params, &result, &error, &err) < 0)
                return NULL;
        size_t i;
        json_t *snap;
        json_array_foreach(json_object_get(result, "snapshots"), i, snap)
        {
                const char *id = json_string_value(json_object_get(snap, "snapshot_id"));
                const char *label = json_string_value(json_object_get(snap, "name"));
                if (id != NULL && (strcmp(id, name) == 0 || (label != NULL && strcmp(label, name) == 0)))
                        return strdup(id);
        }
        return NULL;
}

/* E2B's volumeMounts [{name, path}] as sandbox.create's mounts, into params;
 * NULL, or why they are refused. */
static const char *volume_mounts(json_t *in, json_t *params)
{
        if (in == NULL || json_is_null(in))
                return NULL;
        if (!json_is_array(in) || json_array_size(in) > E2B_MAX_MOUNTS)
                return "volumeMounts must be an array of at most 8 {name, path}";
        json_t *mounts = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(in, i, m)
        {
                json_t *name = json_object_get(m, "name"), *path = json_object_get(m, "path");
                if (!json_is_string(name) || !json_is_string(path)) {
                        json_decref(mounts);
                        return "each of volumeMounts must be {name, path}, both strings";
                }
                json_array_append_new(mounts, json_pack("{s:O, s:O}", "volume", name, "path", path));
        }
        json_object_set_new(params, "mounts", mounts);
        return NULL;
}

static enum MHD_Result create(struct http_request *r)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = http_body_object(r, &ret);
        if (body == NULL)
                return ret;
        json_t *t = json_object_get(body, "templateID"), *timeout = json_object_get(body, "timeout");
        json_t *metadata = json_object_get(body, "metadata"), *envs = json_object_get(body, "envVars");
        if (t != NULL && !json_is_string(t))
                return e2b_reply_rest_error(r, 400, "templateID must be a string");
        if (timeout != NULL && !json_is_null(timeout) &&
            (!json_is_integer(timeout) || json_integer_value(timeout) < 1 ||
             json_integer_value(timeout) > 7 * 24 * 3600))
                return e2b_reply_rest_error(r, 400, "timeout must be 1 to 604800 seconds");
        _cleanup_json_ json_t *params = json_object();
        if (!template_is_default(json_string_value(t))) {
                _cleanup_free_ char *snapshot = snapshot_named(r, json_string_value(t));
                if (snapshot != NULL)
                        json_object_set_new(params, "from_snapshot", json_string(snapshot));
                else
                        json_object_set(params, "image", t);
        }
        json_object_set_new(params, "idle_timeout_seconds",
                            json_integer(json_is_integer(timeout) ? json_integer_value(timeout) : 300));
        /* E2B's sandbox ends at its timeout unless it asked to be paused */
        json_object_set_new(
            params, "idle_action",
            json_string(json_is_true(json_object_get(body, "autoPause")) ? "pause" : "remove"));
        if (json_is_object(metadata))
                json_object_set(params, "labels", metadata);
        if (json_is_object(envs))
                json_object_set(params, "env", envs);
        json_t *network = network_policy(json_object_get(body, "network"));
        if (network != NULL)
                json_object_set_new(params, "network", network);
        const char *bad_mounts = volume_mounts(json_object_get(body, "volumeMounts"), params);
        if (bad_mounts != NULL)
                return e2b_reply_rest_error(r, 400, "%s", bad_mounts);
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        if (http_call(r, "sandbox.create", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        return http_reply_json(r, MHD_HTTP_CREATED, sandbox_json(r, result, false));
}

static int info(struct http_request *r, const char *id, json_t **result, json_t **error, nsbox_error_t **err)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", id);
        return http_call(r, "sandbox.info", params, result, error, err);
}

struct list_query {
        json_t *metadata; /* {key: value} every sandbox must have */
        bool running, paused;
        size_t offset, limit;
};

static bool wants(const struct list_query *q, json_t *sb)
{
        const char *state = json_string_value(json_object_get(sb, "state"));
        bool paused = state != NULL && strcmp(state, "paused") == 0;
        if ((paused && !q->paused) || (!paused && !q->running))
                return false;
        json_t *labels = json_object_get(sb, "labels");
        const char *key;
        json_t *value;
        json_object_foreach(q->metadata, key, value)
        {
                json_t *have = json_object_get(labels, key);
                if (!json_is_string(have) || strcmp(json_string_value(have), json_string_value(value)) != 0)
                        return false;
        }
        return true;
}

static int hex_digit(char c)
{
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

/* Percent-decoding in place (the metadata filter is encoded twice: its
 * pairs, then the whole). */
static void unescape(char *s)
{
        char *o = s;
        for (; *s; s++) {
                if (*s == '%' && hex_digit(s[1]) >= 0 && hex_digit(s[2]) >= 0) {
                        *o++ = (char)(hex_digit(s[1]) << 4 | hex_digit(s[2]));
                        s += 2;
                } else {
                        *o++ = *s == '+' ? ' ' : *s;
                }
        }
        *o = '\0';
}

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
        struct list_query *q = cls;
        if (value == NULL)
                return MHD_YES;
        if (strcmp(key, "state") == 0) {
                /* state=running&state=paused or state=running,paused */
                _cleanup_free_ char *copy = strdup(value);
                if (copy == NULL)
                        return MHD_NO;
                char *save = NULL;
                for (char *s = strtok_r(copy, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
                        q->running |= strcmp(s, "running") == 0;
                        q->paused |= strcmp(s, "paused") == 0;
                }
        } else if (strcmp(key, "metadata") == 0 && strlen(value) < 65536) {
                _cleanup_free_ char *copy = strdup(value);
                if (copy == NULL)
                        return MHD_NO;
                char *save = NULL;
                for (char *pair = strtok_r(copy, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
                        char *eq = strchr(pair, '=');
                        if (eq == NULL)
                                continue;
                        *eq = '\0';
                        unescape(pair);
                        unescape(eq + 1);
                        json_object_set_new(q->metadata, pair, json_string(eq + 1));
                }
        } else if (strcmp(key, "limit") == 0) {
                q->limit = strtoul(value, NULL, 10);
        } else if (strcmp(key, "nextToken") == 0) {
                q->offset = strtoul(value, NULL, 10);
        }
        return MHD_YES;
}

static enum MHD_Result list(struct http_request *r, bool v2)
{
        _cleanup_json_ json_t *metadata = json_object();
        struct list_query q = { .metadata = metadata, .limit = LIST_LIMIT_DEFAULT };
        MHD_get_connection_values(r->connection, MHD_GET_ARGUMENT_KIND, query_arg, &q);
        if (!q.running && !q.paused)
                q.running = q.paused = true;
        if (!v2)
                q.paused = false;
        if (q.limit == 0 || q.limit > LIST_LIMIT_MAX)
                q.limit = LIST_LIMIT_MAX;
        _cleanup_json_ json_t *params = json_object(), *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "sandbox.list", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        json_t *out = json_array();
        size_t i, seen = 0;
        json_t *sb;
        bool more = false;
        json_array_foreach(json_object_get(result, "sandboxes"), i, sb)
        {
                if (!wants(&q, sb))
                        continue;
                if (seen++ < q.offset)
                        continue;
                if (json_array_size(out) == q.limit) {
                        more = true;
                        break;
                }
                json_array_append_new(out, sandbox_json(r, sb, true));
        }
        size_t len = 0;
        char *text = json_dumps(out, JSON_COMPACT);
        json_decref(out);
        if (text == NULL)
                return MHD_NO;
        len = strlen(text);
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
        if (resp == NULL) {
                free(text);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        if (more) {
                char next[32];
                snprintf(next, sizeof(next), "%zu", q.offset + q.limit);
                MHD_add_response_header(resp, "X-Next-Token", next);
        }
        enum MHD_Result ret = MHD_queue_response(r->connection, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        if (ret == MHD_YES) {
                r->answered = true;
                r->status = MHD_HTTP_OK;
        }
        return ret;
}

static enum MHD_Result no_content(struct http_request *r)
{
        return http_reply_bytes(r, MHD_HTTP_NO_CONTENT, "application/json", NULL, 0);
}

static enum MHD_Result timeout(struct http_request *r, const char *id)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = http_body_object(r, &ret);
        if (body == NULL)
                return ret;
        json_t *t = json_object_get(body, "timeout");
        if (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > 7 * 24 * 3600)
                return e2b_reply_rest_error(r, 400, "timeout must be 1 to 604800 seconds");
        _cleanup_json_ json_t *params = json_pack("{s:s, s:O}", "sandbox_id", id, "idle_timeout_seconds", t);
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "sandbox.update", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        return no_content(r);
}

/* connect and resume: resumed (201) when it was paused, else 200. */
static enum MHD_Result connect_sandbox(struct http_request *r, const char *id)
{
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (info(r, id, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        const char *state = json_string_value(json_object_get(result, "state"));
        unsigned status = MHD_HTTP_OK;
        if (state != NULL && strcmp(state, "paused") == 0) {
                _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", id);
                json_decref(result);
                result = NULL;
                if (http_call(r, "sandbox.resume", params, &result, &error, &err) < 0)
                        return e2b_reply_rest_rpc_error(r, error, err);
                status = MHD_HTTP_CREATED;
        }
        return http_reply_json(r, status, sandbox_json(r, result, false));
}

static enum MHD_Result simple(struct http_request *r, const char *method, const char *id, bool force)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", id);
        if (force)
                json_object_set_new(params, "force", json_true());
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, method, params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        return no_content(r);
}

/* 409 when it is paused already, as E2B's API says. */
static enum MHD_Result pause_sandbox(struct http_request *r, const char *id)
{
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (info(r, id, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        const char *state = json_string_value(json_object_get(result, "state"));
        if (state != NULL && strcmp(state, "paused") == 0)
                return e2b_reply_rest_error(r, 409, "sandbox %s is paused already", id);
        return simple(r, "sandbox.pause", id, true);
}

static enum MHD_Result metrics(struct http_request *r, const char *id)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", id), *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "sandbox.info", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        json_t *stats = json_object_get(result, "stats");
        json_t *limits = json_object_get(result, "limits");
        double cpus = json_number_value(json_object_get(limits, "cpus"));
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        char stamp[64];
        struct tm tm;
        gmtime_r(&now.tv_sec, &tm);
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
        _cleanup_json_ json_t *sample = json_pack(
            "{s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I}", "timestamp", stamp, "timestampUnix",
            (json_int_t)now.tv_sec, "cpuCount", (json_int_t)(cpus < 1 ? 1 : cpus + 0.999), "cpuUsedPct", 0.0,
            "memUsed", json_integer_value(json_object_get(stats, "memory_bytes")), "memTotal",
            json_integer_value(json_object_get(limits, "memory_bytes")), "memCache", (json_int_t)0,
            "diskUsed", json_integer_value(json_object_get(stats, "disk_bytes")), "diskTotal",
            json_integer_value(json_object_get(limits, "disk_bytes")));
        return http_reply_json(r, MHD_HTTP_OK, json_pack("[O]", sample));
}

/* E2B's SnapshotInfo of an nsbox snapshot object. */
static json_t *snapshot_json(json_t *snap)
{
        const char *id = json_string_value(json_object_get(snap, "snapshot_id"));
        const char *name = json_string_value(json_object_get(snap, "name"));
        json_t *out = json_pack("{s:s, s:[]}", "snapshotID", id ? id : "", "names");
        if (out != NULL && name != NULL && *name != '\0')
                json_array_append_new(json_object_get(out, "names"), json_string(name));
        return out;
}

static enum MHD_Result snapshot(struct http_request *r, const char *id)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = r->body_len ? http_body_object(r, &ret) : json_object();
        if (body == NULL)
                return ret;
        json_t *name = json_object_get(body, "name");
        if (name != NULL && !json_is_null(name) && !json_is_string(name))
                return e2b_reply_rest_error(r, 400, "name must be a string");
        _cleanup_json_ json_t *params = json_pack("{s:s}", "sandbox_id", id), *result = NULL, *error = NULL;
        if (json_is_string(name))
                json_object_set(params, "name", name);
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "sandbox.snapshot", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        return http_reply_json(r, MHD_HTTP_CREATED, snapshot_json(result));
}

static enum MHD_Result list_snapshots(struct http_request *r)
{
        const char *of = MHD_lookup_connection_value(r->connection, MHD_GET_ARGUMENT_KIND, "sandboxID");
        const char *named = MHD_lookup_connection_value(r->connection, MHD_GET_ARGUMENT_KIND, "name");
        _cleanup_json_ json_t *params = json_object(), *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "snapshot.list", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        json_t *out = json_array();
        size_t i;
        json_t *snap;
        json_array_foreach(json_object_get(result, "snapshots"), i, snap)
        {
                const char *sandbox = json_string_value(json_object_get(snap, "sandbox_id"));
                const char *name = json_string_value(json_object_get(snap, "name"));
                if ((of != NULL && (sandbox == NULL || strcmp(of, sandbox) != 0)) ||
                    (named != NULL && (name == NULL || strcmp(named, name) != 0)))
                        continue;
                json_array_append_new(out, snapshot_json(snap));
        }
        return http_reply_json(r, MHD_HTTP_OK, out);
}

/* DELETE /templates/{id}: E2B deletes snapshots there; nsbox has no other templates to delete. */
static enum MHD_Result delete_snapshot(struct http_request *r, const char *id)
{
        _cleanup_free_ char *snapshot = snapshot_named(r, id);
        if (snapshot == NULL)
                return e2b_reply_rest_error(r, 404, "no snapshot %.128s", id);
        _cleanup_json_ json_t *params = json_pack("{s:s}", "snapshot_id", snapshot), *result = NULL,
                              *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "snapshot.remove", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        return no_content(r);
}

/* count sandboxes from a snapshot of this one, which goes with the last of them. */
static enum MHD_Result fork_sandbox(struct http_request *r, const char *id)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = r->body_len ? http_body_object(r, &ret) : json_object();
        if (body == NULL)
                return ret;
        json_t *count = json_object_get(body, "count"), *timeout = json_object_get(body, "timeout");
        json_int_t n = count == NULL || json_is_null(count) ? 1
                       : json_is_integer(count)             ? json_integer_value(count)
                                                            : 0;
        if (n < 1 || n > 100)
                return e2b_reply_rest_error(r, 400, "count must be 1 to 100");
        if (timeout != NULL && !json_is_null(timeout) &&
            (!json_is_integer(timeout) || json_integer_value(timeout) < 1 ||
             json_integer_value(timeout) > 7 * 24 * 3600))
                return e2b_reply_rest_error(r, 400, "timeout must be 1 to 604800 seconds");
        _cleanup_json_ json_t *source = NULL, *snap = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (info(r, id, &source, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        _cleanup_json_ json_t *snap_params =
            json_pack("{s:s, s:b}", "sandbox_id", id, "remove_when_unused", 1);
        if (http_call(r, "sandbox.snapshot", snap_params, &snap, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        json_t *out = json_array();
        json_int_t created = 0;
        for (json_int_t k = 0; k < n; k++) {
                _cleanup_json_ json_t *params =
                    json_pack("{s:O, s:I}", "from_snapshot", json_object_get(snap, "snapshot_id"),
                              "idle_timeout_seconds",
                              json_is_integer(timeout)
                                  ? json_integer_value(timeout)
                                  : json_integer_value(json_object_get(source, "idle_timeout_seconds")));
                json_t *labels = json_object_get(source, "labels"), *env = json_object_get(source, "env");
                if (json_is_string(json_object_get(source, "idle_action")))
                        json_object_set(params, "idle_action", json_object_get(source, "idle_action"));
                if (json_is_object(labels))
                        json_object_set(params, "labels", labels);
                if (json_is_object(env))
                        json_object_set(params, "env", env);
                _cleanup_json_ json_t *made = NULL, *failed = NULL;
                _cleanup_error_ nsbox_error_t *e = NULL;
                if (http_call(r, "sandbox.create", params, &made, &failed, &e) < 0) {
                        unsigned status = failed ? http_status_of_rpc_error(failed, NULL) : 503;
                        const char *m = failed ? json_string_value(json_object_get(failed, "message")) : NULL;
                        json_array_append_new(out, json_pack("{s:{s:I, s:s}}", "error", "code",
                                                             (json_int_t)status, "message",
                                                             m   ? m
                                                             : e ? e->message
                                                                 : "error"));
                        continue;
                }
                json_array_append_new(out, json_pack("{s:o}", "sandbox", sandbox_json(r, made, false)));
                created++;
        }
        /* remove_when_unused removes it with its last sandbox: with none, now */
        if (created == 0) {
                _cleanup_json_ json_t *rm = json_pack("{s:O}", "snapshot_id",
                                                      json_object_get(snap, "snapshot_id")),
                                      *removed = NULL, *refused = NULL;
                _cleanup_error_ nsbox_error_t *e = NULL;
                if (http_call(r, "snapshot.remove", rm, &removed, &refused, &e) < 0)
                        log_write(LOG_LEVEL_WARN, "fork of %s: the unused snapshot stays: %s", id,
                                  refused ? json_string_value(json_object_get(refused, "message"))
                                  : e     ? e->message
                                          : "error");
        }
        return http_reply_json(r, MHD_HTTP_OK, out);
}

static enum MHD_Result network(struct http_request *r, const char *id)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = http_body_object(r, &ret);
        if (body == NULL)
                return ret;
        json_t *policy = network_policy(body);
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:o}", "sandbox_id", id, "network", policy ? policy : json_string("none"));
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "sandbox.update", params, &result, &error, &err) < 0)
                return e2b_reply_rest_rpc_error(r, error, err);
        return no_content(r);
}

/* ---- volumes ---- */

/* E2B's VolumeAndToken. The token is for E2B's volume content API
 * (e2b_volumes.c): derived from the key presented, as a sandbox's access
 * token is; none without tokens (a loopback front needs none). */
static json_t *volume_json(struct http_request *r, const char *name)
{
        char token[HTTP_SANDBOX_TOKEN_LEN + 1] = "";
        size_t key_len = 0;
        const char *key = presented_key(r->connection, &key_len);
        if (!http_config.act_as || key == NULL || http_tokens_volume_token(key, key_len, name, token) < 0)
                token[0] = '\0';
        return json_pack("{s:s, s:s, s:s}", "volumeID", name, "name", name, "token", token);
}

static enum MHD_Result create_volume(struct http_request *r)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *body = http_body_object(r, &ret);
        if (body == NULL)
                return ret;
        json_t *name = json_object_get(body, "name");
        if (!json_is_string(name))
                return e2b_reply_rest_error(r, 400, "name must be a string");
        _cleanup_json_ json_t *params = json_pack("{s:O, s:s}", "name", name, "size", E2B_VOLUME_SIZE),
                              *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "volume.create", params, &result, &error, &err) < 0) {
                const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
                if (kind != NULL && strcmp(kind, "exists") == 0)
                        return e2b_reply_rest_error(r, 409, "volume %.128s already exists",
                                                    json_string_value(name));
                return e2b_reply_rest_rpc_error(r, error, err);
        }
        return http_reply_json(r, MHD_HTTP_CREATED, volume_json(r, json_string_value(name)));
}

/* The caller's volume.list, or NULL with the reply made in *ret. */
static json_t *volumes_of(struct http_request *r, enum MHD_Result *ret)
{
        _cleanup_json_ json_t *params = json_object(), *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *result = NULL;
        if (http_call(r, "volume.list", params, &result, &error, &err) < 0) {
                *ret = e2b_reply_rest_rpc_error(r, error, err);
                return NULL;
        }
        return result;
}

static enum MHD_Result list_volumes(struct http_request *r)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *result = volumes_of(r, &ret);
        if (result == NULL)
                return ret;
        json_t *out = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(result, "volumes"), i, v)
        {
                const char *name = json_string_value(json_object_get(v, "name"));
                if (name != NULL)
                        json_array_append_new(out, json_pack("{s:s, s:s}", "volumeID", name, "name", name));
        }
        return http_reply_json(r, MHD_HTTP_OK, out);
}

static enum MHD_Result volume_info(struct http_request *r, const char *id)
{
        enum MHD_Result ret;
        _cleanup_json_ json_t *result = volumes_of(r, &ret);
        if (result == NULL)
                return ret;
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(result, "volumes"), i, v)
        {
                const char *name = json_string_value(json_object_get(v, "name"));
                if (name != NULL && strcmp(name, id) == 0)
                        return http_reply_json(r, MHD_HTTP_OK, volume_json(r, name));
        }
        return e2b_reply_rest_error(r, 404, "no volume %.128s", id);
}

static enum MHD_Result delete_volume(struct http_request *r, const char *id)
{
        _cleanup_json_ json_t *params = json_pack("{s:s}", "name", id), *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (http_call(r, "volume.remove", params, &result, &error, &err) < 0) {
                const char *kind = json_string_value(json_object_get(json_object_get(error, "data"), "kind"));
                const char *message = json_string_value(json_object_get(error, "message"));
                if (kind != NULL && strcmp(kind, "busy") == 0) /* mounted: a conflict, not a rate */
                        return e2b_reply_rest_error(r, 409, "%s",
                                                    message ? message : "the volume is mounted");
                return e2b_reply_rest_rpc_error(r, error, err);
        }
        return no_content(r);
}

enum MHD_Result http_e2b_api(struct http_request *r)
{
        const char *url = r->url, *m = r->method;
        bool v2 = strncmp(url, "/v2/", 4) == 0;
        if (v2)
                url += 3;
        bool get = strcmp(m, "GET") == 0, post = strcmp(m, "POST") == 0;
        if (strcmp(url, "/sandboxes") == 0) {
                if (post)
                        return create(r);
                if (get)
                        return list(r, v2);
        }
        char id[129], action[33];
        int n = 0;
        id[0] = action[0] = '\0';
        if (strncmp(url, "/sandboxes/", 11) == 0 &&
            (sscanf(url + 11, "%128[^/]%n/%32[a-z]%n", id, &n, action, &n) >= 1) && url[11 + n] == '\0' &&
            strcmp(id, "metrics") != 0) {
                if (action[0] == '\0' && get) {
                        _cleanup_json_ json_t *result = NULL, *error = NULL;
                        _cleanup_error_ nsbox_error_t *err = NULL;
                        if (info(r, id, &result, &error, &err) < 0)
                                return e2b_reply_rest_rpc_error(r, error, err);
                        return http_reply_json(r, MHD_HTTP_OK, sandbox_json(r, result, true));
                }
                if (action[0] == '\0' && strcmp(m, "DELETE") == 0)
                        return simple(r, "sandbox.remove", id, true);
                if (post && strcmp(action, "timeout") == 0)
                        return timeout(r, id);
                if (post && (strcmp(action, "connect") == 0 || strcmp(action, "resume") == 0))
                        return connect_sandbox(r, id);
                if (post && strcmp(action, "pause") == 0)
                        return pause_sandbox(r, id);
                if (get && strcmp(action, "metrics") == 0)
                        return metrics(r, id);
                if (strcmp(m, "PUT") == 0 && strcmp(action, "network") == 0)
                        return network(r, id);
                if (post && strcmp(action, "refreshes") == 0)
                        return simple(r, "sandbox.update", id, false);
                if (post && strcmp(action, "snapshots") == 0)
                        return snapshot(r, id);
                if (post && strcmp(action, "fork") == 0)
                        return fork_sandbox(r, id);
        }
        if (get && strcmp(url, "/snapshots") == 0)
                return list_snapshots(r);
        if (strcmp(url, "/volumes") == 0) {
                if (post)
                        return create_volume(r);
                if (get)
                        return list_volumes(r);
        }
        if (strncmp(url, "/volumes/", 9) == 0 && url[9] != '\0' && strchr(url + 9, '/') == NULL &&
            strlen(url + 9) <= 128) {
                if (get)
                        return volume_info(r, url + 9);
                if (strcmp(m, "DELETE") == 0)
                        return delete_volume(r, url + 9);
        }
        if (strcmp(m, "DELETE") == 0 && strncmp(url, "/templates/", 11) == 0 &&
            strchr(url + 11, '/') == NULL && url[11] != '\0')
                return delete_snapshot(r, url + 11);
        return e2b_reply_rest_error(r, 501, "%s %.200s is not implemented by nsbox", m, r->url);
}
