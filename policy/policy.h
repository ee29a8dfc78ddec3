/* What one sandbox may do: image, limits, network, profile, idle timeout.
 * Built from the daemon's defaults and a client's sandbox.create params. */
#pragma once

#include <jansson.h>
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
        char network[16];
        char session_id[129];
        struct sandbox_limits limits;
        uint32_t idle_timeout_seconds;
        json_t *env;    /* object of strings, owned */
        json_t *labels; /* object of strings, owned */
};

/* Bounds a client may ask for. */
#define POLICY_MIN_MEMORY_BYTES (16ull << 20)
#define POLICY_MAX_MEMORY_BYTES (1ull << 40)
#define POLICY_MIN_DISK_BYTES   (1ull << 20)
#define POLICY_MAX_DISK_BYTES   (1ull << 40)
#define POLICY_MAX_PIDS         65536
#define POLICY_MAX_CPUS         1024.0
#define POLICY_MAX_IDLE_SECONDS (7u * 24 * 3600)
#define POLICY_MAX_ENV_ENTRIES  1024
#define POLICY_MAX_LABELS       64

void policy_defaults(struct sandbox_policy *policy);
/* Parse sandbox.create params over a copy of `defaults`. Unknown fields are
 * errors (a typo must not silently yield an unlimited sandbox). */
int policy_from_json(const struct sandbox_policy *defaults, json_t *params, struct sandbox_policy *out,
                     nsbox_error_t **err);
void policy_clear(struct sandbox_policy *policy);
json_t *policy_limits_to_json(const struct sandbox_limits *limits);

/* Names that become file names (images, profiles): [A-Za-z0-9._-], no leading dot. */
int policy_valid_name(const char *name);
/* An environment object: string keys without '=' or NUL, string values. */
int policy_check_env(json_t *env, const char *field, nsbox_error_t **err);
