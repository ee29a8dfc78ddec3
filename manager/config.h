/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's configuration: built-in defaults, then the JSON config file,
 * then NSBOX_* environment variables, then command-line flags. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

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
        /* nsboxd in a user namespace: clients whose uid it does not map
         * (all read as the overflow uid, so no two can be told apart) are
         * "refuse"d, or served as "one-owner". */
        char *unmapped_clients;
        size_t max_request_bytes;
        unsigned max_sandboxes;
        unsigned max_connections;
        uid_t uid_pool_base; /* first host uid of the per-sandbox ranges */
        unsigned uid_pool_ranges;
        unsigned allow_degraded; /* run sandboxes even where limits cannot be enforced */
        unsigned warm_pool;      /* sandboxes kept pre-created with the default policy */
        /* Sandboxes outlive nsboxd (a stop, an upgrade, a crash) for this
         * long, and the next nsboxd adopts them (docs/design/live-restore.md). */
        unsigned live_restore;
        uint32_t live_restore_grace_seconds;
        /* Fairness between clients: what one non-root uid may hold (root,
         * the operator, is not counted). */
        unsigned max_sandboxes_per_uid;
        unsigned max_connections_per_uid;
        unsigned max_execs_per_uid; /* running execs and python.run calls */
        /* A connection with nothing in flight that sends nothing for this
         * long is closed; a request line must be complete this long after
         * its first byte. */
        uint32_t client_idle_timeout_seconds;
        uint32_t request_timeout_seconds;
        /* Operator ceilings on what a client may ask for in sandbox.create
         * (0 in the file or a flag: derived from the host, see config_load). */
        uint64_t max_memory_bytes;
        uint64_t max_disk_bytes;
        uint64_t max_pids;
        uint32_t max_cpus;
        /* The host's online CPUs, counted once at start (glibc reads a sysfs
         * file for each sysconf call). */
        uint32_t host_cpus;
        struct policy_ceilings ceilings; /* the four above, filled by config_load */
        /* The memory limits of all live sandboxes add up to at most this. */
        uint64_t memory_commit_bytes;
        /* nsboxd's own memory for output waiting for clients and execs. */
        uint64_t max_buffer_bytes;
        struct sandbox_policy defaults;
        /* Network egress (manager/egress.c): the operator's named policies
         * (a JSON object of POLICY objects, only from the config file), and
         * whether a client may pass a POLICY of its own. */
        json_t *network_policies;
        unsigned allow_client_network_policies;
        char *network_subnet;     /* IPv4 CIDR the sandboxes' /30s come from */
        char *egress_ca_file;     /* PEM the proxy trusts beside the system's; "" = none */
        char *egress_dns_servers; /* "IP[:PORT],..." for the proxy; "" = resolv.conf */
        char *egress_path;        /* the nsbox-egress binary */
        uid_t egress_uid;         /* the proxy's uid and gid; 0 = uid_pool_base - 1 */
        /* The per-sandbox Python fork server of stateless python.run
         * (manager/python.c): "lazy" (started by the first stateless call),
         * "eager" (with the sandbox) or "off"; stopped after this many
         * seconds without a stateless call; not started in sandboxes whose
         * memory limit is below the last. */
        char *python_fork_server;
        /* Comma-separated absolute directories: a client's mounts[].host_path
         * must be below one of them (manager/host_mounts.c). */
        char *host_mount_roots;
        uint32_t python_fork_server_idle_seconds;
        uint64_t python_fork_server_min_memory_bytes;
        /* Pausing (sandbox.pause): the default of what the idle reaper does
         * with an idle sandbox, "pause" or "remove" (copied into
         * defaults.idle_action once checked; defaults.paused_timeout_seconds
         * says how long one stays paused, 0: for ever); whether a request that
         * needs a paused sandbox running resumes it (else it fails). */
        char *idle_action;
        unsigned auto_resume;
        /* Snapshots and committed images (manifest snapshot.c, images.c):
         * disk for all of them together, and how many one non-root uid may keep. */
        uint64_t layer_disk_bytes;
        unsigned max_snapshots_per_uid;
        unsigned max_images_per_uid;
        /* Volumes are sparse: their sizes are promises of host disk. What one
         * non-root uid's add up to at most (0: the state dir's file system). */
        uint64_t volume_bytes_per_uid;
        /* Their inodes: empty files, symlinks and FIFOs cost no bytes, yet
         * each is an inode of the state dir's file system. In all, of one
         * non-root uid, of one snapshot or image. */
        uint64_t layer_inodes;
        uint64_t layer_inodes_per_uid;
        uint64_t layer_inodes_per_snapshot;
        /* nr_inodes of each sandbox's disk tmpfs (its writable layer). */
        uint64_t disk_inodes;
};

#define NSBOX_UID_RANGE 65536u
/* From one sandbox's host range to the next: a range and 128 ids unused.
 * The kernel keeps its per-uid accounts (user_struct, looked up at every
 * setuid) in 128 buckets, hashed as ((uid >> 7) + uid) & 127: ranges
 * 65536 apart put uid N of every sandbox in one bucket, a chain as long as
 * there are sandboxes, walked with interrupts off. 128 more moves each
 * range's ids one bucket on. */
#define NSBOX_UID_STRIDE (NSBOX_UID_RANGE + 128u)

/* Fill config from argv/env/file. Returns 0, 1 when --help was printed, or
 * a negative errno with err set. */
int config_load(struct nsbox_config *config, int argc, char **argv, nsbox_error_t **err);
void config_free(struct nsbox_config *config);
