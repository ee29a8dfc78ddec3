/* SPDX-License-Identifier: Apache-2.0 */
/* What one sandbox may do: image, limits, network, profile, idle timeout
 * and what idling does.
 * Built from the daemon's defaults and a client's sandbox.create params. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

struct sandbox_limits {
        uint64_t memory_bytes;
        uint64_t pids;
        double cpus;
        uint64_t disk_bytes;
};

struct sandbox_policy {
        char image[64];
        char seccomp_profile[64];
        char network[64];       /* "none", a policy name of nsboxd's config, or "custom" */
        json_t *network_custom; /* the client's POLICY object when "custom", owned */
        char session_id[129];
        struct sandbox_limits limits;
        uint32_t idle_timeout_seconds;
        /* Idle that long: "pause" (then removed after paused_timeout_seconds
         * paused, 0: never) or "remove". */
        char idle_action[8];
        uint32_t paused_timeout_seconds;
        json_t *env;    /* object of strings, owned */
        json_t *labels; /* object of strings, owned */
        /* What is mounted into it at create, checked by policy_mounts_from_json:
         * an array of {volume | host_path, path, read_only}, owned (NULL: none). */
        json_t *mounts;
        /* {NAME: {value, hosts, header?, placeholder}} (secrets.h), owned:
         * nsbox-egress's, never shown or saved. */
        json_t *secrets;
};

/* Bounds a client may ask for. */
#define POLICY_MIN_MEMORY_BYTES (16ull << 20)
#define POLICY_MAX_MEMORY_BYTES (1ull << 40)
#define POLICY_MIN_DISK_BYTES   (1ull << 20)
#define POLICY_MAX_DISK_BYTES   (1ull << 40)
#define POLICY_MAX_PIDS         65536
#define POLICY_MAX_CPUS         1024.0
#define POLICY_MAX_IDLE_SECONDS (7u * 24 * 3600)
/* A client may keep its sandbox paused for at most this long. */
#define POLICY_MAX_PAUSED_SECONDS (30u * 24 * 3600)
#define POLICY_MAX_ENV_ENTRIES    1024
#define POLICY_MAX_LABELS         64
/* env and labels are kept in nsboxd's memory for the sandbox's life and
 * copied into every listing: bounded per key, per value and together. */
#define POLICY_MAX_KEY_BYTES   1024
#define POLICY_MAX_VALUE_BYTES (64u << 10)
#define POLICY_MAX_MAP_BYTES   (256u << 10) /* env and labels together, keys and values */

/* The operator's ceilings on limits a client may ask for (nsboxd's
 * max_memory_bytes, max_disk_bytes, max_pids and max_cpus), within the
 * bounds above. */
struct policy_ceilings {
        uint64_t memory_bytes;
        uint64_t disk_bytes;
        uint64_t pids;
        double cpus;
};

/* Volumes and host directories one sandbox may mount. */
#define POLICY_MAX_MOUNTS      8
#define POLICY_MAX_MOUNT_PATH  1024
#define POLICY_MAX_VOLUME_NAME 63

void policy_defaults(struct sandbox_policy *policy);
/* Parse sandbox.create params over a copy of `defaults`. Unknown fields are
 * errors (a typo must not silently yield an unlimited sandbox); so are
 * limits above `ceilings` (NULL: the built-in bounds only). */
int policy_from_json(const struct sandbox_policy *defaults, const struct policy_ceilings *ceilings,
                     json_t *params, struct sandbox_policy *out, nsbox_error_t **err);
/* Limits within `ceilings`; `what` names them in the message ("limits",
 * "the default limits"). */
int policy_check_ceilings(const struct sandbox_limits *limits, const struct policy_ceilings *ceilings,
                          const char *what, nsbox_error_t **err);
void policy_clear(struct sandbox_policy *policy);
/* sandbox.create's and sandbox.update's "network": a name into `name`, or
 * "custom" and a copy of the object into *custom. Whether the name exists
 * and the object is a valid policy the operator allows is the egress
 * module's to say. */
int policy_network_from_json(json_t *network, char *name, size_t size, json_t **custom, nsbox_error_t **err);
json_t *policy_limits_to_json(const struct sandbox_limits *limits);

/* Names that become file names (images, profiles): [A-Za-z0-9._-], no leading dot. */
int policy_valid_name(const char *name);
/* "pause" or "remove". */
bool policy_valid_idle_action(const char *action);
/* An environment object: string keys without '=' or NUL, string values. */
int policy_check_env(json_t *env, const char *field, nsbox_error_t **err);

/* sandbox.create's "mounts": an array of at most POLICY_MAX_MOUNTS objects,
 * each with one of "volume" (a name) or "host_path" (an absolute path),
 * "path" (absolute, normalized, not / and not under /proc, /sys or /dev)
 * and "read_only" (default: false for a volume, true for a host path).
 * *out is a normalized copy, read_only always present. */
int policy_mounts_from_json(json_t *mounts, json_t **out, nsbox_error_t **err);
/* An absolute path without "." or ".." components, empty components or a
 * trailing slash, at most POLICY_MAX_MOUNT_PATH bytes. */
bool policy_clean_absolute_path(const char *path);
