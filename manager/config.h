/* nsboxd's configuration: built-in defaults, then the JSON config file,
 * then NSBOX_* environment variables, then command-line flags. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"
#include "policy.h"

struct nsbox_config {
        char *socket_path;
        char *state_dir;
        char *image_dir;
        char *seccomp_dir;
        char *init_path; /* nsbox-init binary */
        char *config_path;
        char *log_level;
        char *uid_isolation; /* "per-sandbox", "shared" or "auto" */
        size_t max_request_bytes;
        unsigned max_sandboxes;
        unsigned max_connections;
        uid_t uid_pool_base; /* first host uid of the per-sandbox ranges */
        unsigned uid_pool_ranges;
        unsigned allow_degraded; /* run sandboxes even where limits cannot be enforced */
        unsigned warm_pool;      /* sandboxes kept pre-created with the default policy */
        struct sandbox_policy defaults;
};

#define NSBOX_UID_RANGE 65536u

/* Fill config from argv/env/file. Returns 0, 1 when --help was printed, or
 * a negative errno with err set. */
int config_load(struct nsbox_config *config, int argc, char **argv, nsbox_error_t **err);
void config_free(struct nsbox_config *config);
