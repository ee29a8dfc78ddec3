/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's policy from the daemon's defaults, ceilings and a client's sandbox.create params. */
#include "policy.h"

#include "cleanup.h"
#include "params.h"
#include "secrets.h"
#include "size.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void policy_defaults(struct sandbox_policy *policy)
{
        memset(policy, 0, sizeof(*policy));
        snprintf(policy->image, sizeof(policy->image), "python");
        snprintf(policy->seccomp_profile, sizeof(policy->seccomp_profile), "default");
        snprintf(policy->network, sizeof(policy->network), "none");
        policy->limits = (struct sandbox_limits){
                .memory_bytes = 512ull << 20,
                .pids = 256,
                .cpus = 1.0,
                .disk_bytes = 512ull << 20,
        };
        policy->idle_timeout_seconds = 300;
        snprintf(policy->idle_action, sizeof(policy->idle_action), "pause");
        policy->paused_timeout_seconds = 24 * 3600;
}

void policy_clear(struct sandbox_policy *policy)
{
        if (policy->env)
                json_decref(policy->env);
        if (policy->labels)
                json_decref(policy->labels);
        json_decref(policy->network_custom);
        json_decref(policy->mounts);
        policy->mounts = NULL;
        json_decref(policy->secrets);
        policy->network_custom = policy->secrets = NULL;
        policy->env = policy->labels = NULL;
}

bool policy_valid_idle_action(const char *action)
{
        return action != NULL && (strcmp(action, "pause") == 0 || strcmp(action, "remove") == 0);
}

int policy_valid_name(const char *name)
{
        size_t len = strlen(name);
        if (len == 0 || len > 63 || name[0] == '.' || name[0] == '-')
                return 0;
        for (const char *p = name; *p; p++) {
                char c = *p;
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-'))
                        return 0;
        }
        return 1;
}

/* total: NULL for no byte bounds, else the running byte count of the maps
 * that share POLICY_MAX_MAP_BYTES. */
static int check_string_map(json_t *obj, const char *field, size_t max_entries, int env_keys, size_t *total,
                            nsbox_error_t **err)
{
        if (!json_is_object(obj))
                return nsbox_invalid(err, "%s must be an object of strings", field);
        if (json_object_size(obj) > max_entries)
                return nsbox_invalid(err, "%s has more than %zu entries", field, max_entries);
        const char *key;
        json_t *value;
        json_object_foreach(obj, key, value)
        {
                if (!json_is_string(value))
                        return nsbox_invalid(err, "%s.%.64s must be a string", field, key);
                if (memchr(json_string_value(value), '\0', json_string_length(value)) != NULL)
                        return nsbox_invalid(err, "%s.%.64s contains a NUL byte", field, key);
                if (key[0] == '\0')
                        return nsbox_invalid(err, "%s has an empty key", field);
                if (env_keys && strchr(key, '=') != NULL)
                        return nsbox_invalid(err, "%s key \"%.64s\" contains '='", field, key);
                if (total == NULL)
                        continue;
                size_t key_len = strlen(key), value_len = json_string_length(value);
                if (key_len > POLICY_MAX_KEY_BYTES)
                        return nsbox_invalid(err, "%s key \"%.64s...\" is %zu bytes, more than %u", field,
                                             key, key_len, POLICY_MAX_KEY_BYTES);
                if (value_len > POLICY_MAX_VALUE_BYTES)
                        return nsbox_invalid(err, "%s.%.64s is %zu bytes, more than %u", field, key,
                                             value_len, POLICY_MAX_VALUE_BYTES);
                *total += key_len + value_len;
                if (*total > POLICY_MAX_MAP_BYTES)
                        return nsbox_invalid(
                            err, "env and labels hold more than %u bytes together (keys and values)",
                            POLICY_MAX_MAP_BYTES);
        }
        return 0;
}

int policy_check_env(json_t *env, const char *field, nsbox_error_t **err)
{
        return check_string_map(env, field, POLICY_MAX_ENV_ENTRIES, 1, NULL, err);
}

static int get_uint(json_t *obj, const char *key, const char *field, uint64_t min, uint64_t max,
                    uint64_t *out, nsbox_error_t **err)
{
        json_t *v = json_object_get(obj, key);
        if (v == NULL || json_is_null(v))
                return 0;
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return nsbox_invalid(err, "%s must be a non-negative integer", field);
        uint64_t n = (uint64_t)json_integer_value(v);
        if (n < min || n > max)
                return nsbox_invalid(err, "%s must be between %llu and %llu", field, (unsigned long long)min,
                                     (unsigned long long)max);
        *out = n;
        return 0;
}

static int get_name(json_t *obj, const char *key, char *out, size_t size, nsbox_error_t **err)
{
        json_t *v = json_object_get(obj, key);
        if (v == NULL || json_is_null(v))
                return 0;
        if (!json_is_string(v) || !policy_valid_name(json_string_value(v)) || json_string_length(v) >= size)
                return nsbox_invalid(err, "%s must be a name of letters, digits, '.', '_' or '-'", key);
        snprintf(out, size, "%s", json_string_value(v));
        return 0;
}

static int parse_limits(json_t *limits, struct sandbox_limits *out, nsbox_error_t **err)
{
        static const char *const known[] = { "memory_bytes", "pids", "cpus", "disk_bytes", NULL };
        int r;
        if (!json_is_object(limits))
                return nsbox_invalid(err, "limits must be an object");
        if ((r = params_check_known(limits, known, " in limits", err)) < 0)
                return r;
        if ((r = params_get_size(limits, "memory_bytes", "limits.memory_bytes", "nsbox create --memory",
                                 POLICY_MIN_MEMORY_BYTES, POLICY_MAX_MEMORY_BYTES, &out->memory_bytes, err)) <
                0 ||
            (r = get_uint(limits, "pids", "limits.pids (nsbox create --pids)", 8, POLICY_MAX_PIDS, &out->pids,
                          err)) < 0 ||
            (r = params_get_size(limits, "disk_bytes", "limits.disk_bytes", "nsbox create --disk",
                                 POLICY_MIN_DISK_BYTES, POLICY_MAX_DISK_BYTES, &out->disk_bytes, err)) < 0)
                return r;
        json_t *cpus = json_object_get(limits, "cpus");
        if (cpus != NULL && !json_is_null(cpus)) {
                if (!json_is_number(cpus))
                        return nsbox_invalid(err, "limits.cpus must be a number");
                double c = json_number_value(cpus);
                if (!isfinite(c) || c < 0.01 || c > POLICY_MAX_CPUS)
                        return nsbox_invalid(err, "limits.cpus must be between 0.01 and %g", POLICY_MAX_CPUS);
                out->cpus = c;
        }
        return 0;
}

int policy_check_ceilings(const struct sandbox_limits *limits, const struct policy_ceilings *ceilings,
                          const char *what, nsbox_error_t **err)
{
        /* invalid_params, not limit_reached: no amount of waiting or removing
         * makes such a request acceptable on this daemon. A limit of 0 (only
         * a configured default can be 0) is no limit: above any ceiling. */
        char asked[SIZE_FORMAT_MAX], ceiling[SIZE_FORMAT_MAX];
        /* A client's limits are said with the CLI's option too; nsboxd's own
         * defaults (checked at start) are no create's. */
        bool client = strcmp(what, "limits") == 0;
        if (limits->memory_bytes == 0 || limits->memory_bytes > ceilings->memory_bytes)
                return nsbox_invalid(err, "memory %s is over this host's limit of %s (%s.memory_bytes%s; %s)",
                                     size_format(limits->memory_bytes, asked, sizeof(asked)),
                                     size_format(ceilings->memory_bytes, ceiling, sizeof(ceiling)), what,
                                     client ? ", nsbox create --memory" : "",
                                     "the operator's max_memory_bytes");
        if (limits->disk_bytes == 0 || limits->disk_bytes > ceilings->disk_bytes)
                return nsbox_invalid(err, "disk %s is over this host's limit of %s (%s.disk_bytes%s; %s)",
                                     size_format(limits->disk_bytes, asked, sizeof(asked)),
                                     size_format(ceilings->disk_bytes, ceiling, sizeof(ceiling)), what,
                                     client ? ", nsbox create --disk" : "", "the operator's max_disk_bytes");
        if (limits->pids == 0 || limits->pids > ceilings->pids)
                return nsbox_invalid(err, "%llu processes are over this host's limit of %llu (%s.pids%s; %s)",
                                     (unsigned long long)limits->pids, (unsigned long long)ceilings->pids,
                                     what, client ? ", nsbox create --pids" : "", "the operator's max_pids");
        if (limits->cpus <= 0 || limits->cpus > ceilings->cpus)
                return nsbox_invalid(err, "%g CPUs are over this host's limit of %g (%s.cpus%s; %s)",
                                     limits->cpus, ceilings->cpus, what,
                                     client ? ", nsbox create --cpus" : "", "the operator's max_cpus");
        return 0;
}

int policy_network_from_json(json_t *network, char *name, size_t size, json_t **custom, nsbox_error_t **err)
{
        *custom = NULL;
        if (json_is_object(network)) {
                snprintf(name, size, "custom");
                *custom = json_deep_copy(network);
                return *custom != NULL ? 0 : nsbox_error(err, ENOMEM, "copy the network policy");
        }
        if (!json_is_string(network) || json_string_length(network) >= size ||
            !policy_valid_name(json_string_value(network)) ||
            strcmp(json_string_value(network), "custom") == 0)
                return nsbox_invalid(err,
                                     "network must be \"none\", the name of one of the operator's network "
                                     "policies, or a policy object");
        snprintf(name, size, "%s", json_string_value(network));
        return 0;
}

static int parse_policy(const struct sandbox_policy *defaults, const struct policy_ceilings *ceilings,
                        json_t *params, struct sandbox_policy *out, nsbox_error_t **err)
{
        static const char *const known[] = { "session_id",
                                             "image",
                                             "limits",
                                             "network",
                                             "seccomp_profile",
                                             "idle_timeout_seconds",
                                             "env",
                                             "labels",
                                             "idle_action",
                                             "paused_timeout_seconds",
                                             "mounts",
                                             "secrets",
                                             NULL };
        int r;

        *out = *defaults;
        out->env = out->labels = out->network_custom = out->mounts = out->secrets = NULL;
        if ((r = params_check_known(params, known, "", err)) < 0)
                return r;

        json_t *session = json_object_get(params, "session_id");
        if (session != NULL && !json_is_null(session)) {
                if (!json_is_string(session) || json_string_length(session) == 0 ||
                    json_string_length(session) >= sizeof(out->session_id) ||
                    memchr(json_string_value(session), '\0', json_string_length(session)) != NULL)
                        return nsbox_invalid(err, "session_id must be a string of 1 to %zu bytes",
                                             sizeof(out->session_id) - 1);
                snprintf(out->session_id, sizeof(out->session_id), "%s", json_string_value(session));
        }
        if ((r = get_name(params, "image", out->image, sizeof(out->image), err)) < 0 ||
            (r = get_name(params, "seccomp_profile", out->seccomp_profile, sizeof(out->seccomp_profile),
                          err)) < 0)
                return r;
        json_t *network = json_object_get(params, "network");
        if (network != NULL && !json_is_null(network) &&
            (r = policy_network_from_json(network, out->network, sizeof(out->network), &out->network_custom,
                                          err)) < 0)
                return r;
        json_t *limits = json_object_get(params, "limits");
        if (limits != NULL && !json_is_null(limits) && (r = parse_limits(limits, &out->limits, err)) < 0)
                return r;
        if (ceilings != NULL && (r = policy_check_ceilings(&out->limits, ceilings, "limits", err)) < 0)
                return r;
        uint64_t idle = out->idle_timeout_seconds;
        if ((r = get_uint(params, "idle_timeout_seconds",
                          "idle_timeout_seconds (nsbox create --idle-timeout)", 1, POLICY_MAX_IDLE_SECONDS,
                          &idle, err)) < 0)
                return r;
        out->idle_timeout_seconds = (uint32_t)idle;
        json_t *action = json_object_get(params, "idle_action");
        if (action != NULL && !json_is_null(action)) {
                if (!policy_valid_idle_action(json_string_value(action)))
                        return nsbox_invalid(err, "idle_action must be \"pause\" or \"remove\"");
                snprintf(out->idle_action, sizeof(out->idle_action), "%s", json_string_value(action));
        }
        uint64_t paused = out->paused_timeout_seconds;
        if ((r = get_uint(params, "paused_timeout_seconds", "paused_timeout_seconds", 1,
                          POLICY_MAX_PAUSED_SECONDS, &paused, err)) < 0)
                return r;
        out->paused_timeout_seconds = (uint32_t)paused;

        size_t map_bytes = 0;
        json_t *env = json_object_get(params, "env");
        if (env != NULL && !json_is_null(env)) {
                if ((r = check_string_map(env, "env", POLICY_MAX_ENV_ENTRIES, 1, &map_bytes, err)) < 0)
                        return r;
        }
        json_t *labels = json_object_get(params, "labels");
        if (labels != NULL && !json_is_null(labels)) {
                if ((r = check_string_map(labels, "labels", POLICY_MAX_LABELS, 0, &map_bytes, err)) < 0)
                        return r;
        }
        json_t *mounts = json_object_get(params, "mounts");
        if (mounts != NULL && !json_is_null(mounts) &&
            (r = policy_mounts_from_json(mounts, &out->mounts, err)) < 0)
                return r;
        /* Copied only once both are known to fit. */
        if (env != NULL && !json_is_null(env))
                out->env = json_deep_copy(env);
        if (labels != NULL && !json_is_null(labels))
                out->labels = json_deep_copy(labels);
        json_t *secrets = json_object_get(params, "secrets");
        if (secrets != NULL && !json_is_null(secrets) &&
            ((r = policy_secrets_from_json(secrets, &out->secrets, err)) < 0 ||
             (r = policy_secrets_env(out->secrets, &out->env, err)) < 0))
                return r;
        return 0;
}

int policy_from_json(const struct sandbox_policy *defaults, const struct policy_ceilings *ceilings,
                     json_t *params, struct sandbox_policy *out, nsbox_error_t **err)
{
        int r = parse_policy(defaults, ceilings, params, out, err);
        if (r < 0)
                policy_clear(out); /* a custom network copied before a later field failed */
        return r;
}

json_t *policy_limits_to_json(const struct sandbox_limits *limits)
{
        return json_pack("{s:I, s:I, s:f, s:I}", "memory_bytes", (json_int_t)limits->memory_bytes, "pids",
                         (json_int_t)limits->pids, "cpus", limits->cpus, "disk_bytes",
                         (json_int_t)limits->disk_bytes);
}

bool policy_clean_absolute_path(const char *path)
{
        size_t len = strlen(path);
        if (len < 2 || len > POLICY_MAX_MOUNT_PATH || path[0] != '/' || path[len - 1] == '/')
                return false;
        for (const char *p = path; *p != '\0';) {
                const char *c = p + 1, *end = strchr(c, '/');
                size_t n = end != NULL ? (size_t)(end - c) : strlen(c);
                if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                p = c + n;
        }
        return true;
}

/* The kernel's own file systems of the sandbox, which a mount would hide or
 * let a volume stand in for. */
static bool mount_path_reserved(const char *path)
{
        static const char *const reserved[] = { "/proc", "/sys", "/dev" };
        for (size_t i = 0; i < ARRAY_SIZE(reserved); i++) {
                size_t n = strlen(reserved[i]);
                if (strncmp(path, reserved[i], n) == 0 && (path[n] == '\0' || path[n] == '/'))
                        return true;
        }
        return false;
}

static int mount_from_json(json_t *m, size_t i, json_t **out, nsbox_error_t **err)
{
        static const char *const known[] = { "volume", "host_path", "path", "read_only", NULL };
        char field[32];
        snprintf(field, sizeof(field), " in mounts[%zu]", i);
        if (!json_is_object(m))
                return nsbox_invalid(err, "mounts[%zu] must be an object", i);
        int r = params_check_known(m, known, field, err);
        if (r < 0)
                return r;
        json_t *volume = json_object_get(m, "volume"), *host = json_object_get(m, "host_path");
        json_t *path = json_object_get(m, "path"), *ro = json_object_get(m, "read_only");
        if ((volume == NULL) == (host == NULL))
                return nsbox_invalid(err, "mounts[%zu] needs one of volume or host_path", i);
        if (volume != NULL && (!json_is_string(volume) || !policy_valid_name(json_string_value(volume)) ||
                               json_string_length(volume) > POLICY_MAX_VOLUME_NAME))
                return nsbox_invalid(err,
                                     "mounts[%zu].volume must be a volume name ([A-Za-z0-9._-], 1 to %d "
                                     "bytes, no leading dot)",
                                     i, POLICY_MAX_VOLUME_NAME);
        if (host != NULL &&
            (!json_is_string(host) || strlen(json_string_value(host)) != json_string_length(host) ||
             !policy_clean_absolute_path(json_string_value(host))))
                return nsbox_invalid(err,
                                     "mounts[%zu].host_path must be an absolute path without \".\" or "
                                     "\"..\" components (at most %d bytes)",
                                     i, POLICY_MAX_MOUNT_PATH);
        if (!json_is_string(path) || strlen(json_string_value(path)) != json_string_length(path) ||
            !policy_clean_absolute_path(json_string_value(path)))
                return nsbox_invalid(err,
                                     "mounts[%zu].path must be an absolute path in the sandbox, not /, "
                                     "without \".\" or \"..\" components (at most %d bytes)",
                                     i, POLICY_MAX_MOUNT_PATH);
        if (mount_path_reserved(json_string_value(path)))
                return nsbox_invalid(err, "mounts[%zu].path %s is under /proc, /sys or /dev", i,
                                     json_string_value(path));
        if (ro != NULL && !json_is_null(ro) && !json_is_boolean(ro))
                return nsbox_invalid(err, "mounts[%zu].read_only must be a boolean", i);
        /* A host directory is read-only unless asked: the sandbox's code
         * writes into the user's own files only when the user said so. */
        bool read_only = ro != NULL && json_is_boolean(ro) ? json_is_true(ro) : host != NULL;
        *out = json_pack("{s:O, s:O, s:b}", volume != NULL ? "volume" : "host_path",
                         volume != NULL ? volume : host, "path", path, "read_only", read_only);
        return *out == NULL ? nsbox_error(err, ENOMEM, "mounts") : 0;
}

int policy_mounts_from_json(json_t *mounts, json_t **out, nsbox_error_t **err)
{
        *out = NULL;
        if (!json_is_array(mounts) || json_array_size(mounts) > POLICY_MAX_MOUNTS)
                return nsbox_invalid(err, "mounts must be an array of at most %d mounts", POLICY_MAX_MOUNTS);
        json_t *list = json_array();
        if (list == NULL)
                return nsbox_error(err, ENOMEM, "mounts");
        size_t i;
        json_t *m;
        json_array_foreach(mounts, i, m)
        {
                json_t *one;
                int r = mount_from_json(m, i, &one, err);
                if (r < 0) {
                        json_decref(list);
                        return r;
                }
                for (size_t j = 0; j < i; j++) {
                        if (strcmp(json_string_value(json_object_get(json_array_get(list, j), "path")),
                                   json_string_value(json_object_get(one, "path"))) == 0) {
                                json_decref(one);
                                json_decref(list);
                                return nsbox_invalid(err, "mounts[%zu].path is mounts[%zu]'s too", i, j);
                        }
                }
                json_array_append_new(list, one);
        }
        if (json_array_size(list) == 0) {
                json_decref(list);
                return 0;
        }
        *out = list;
        return 0;
}
