/* SPDX-License-Identifier: Apache-2.0 */
/* What one sandbox may hold of the kernel's per-user pools and of open
 * files: set inside the sandbox (mounts.c, setup.c) and reserved for on
 * the host (manager/host_pools.c). */
#pragma once

#include <stdint.h>

/* What one sandbox may take of the pools the kernel counts per user at
 * every user-namespace level: set as the limits of the sandbox's own
 * namespace (its processes are charged there first), while the level above
 * charges every sandbox to the namespace's owner, host root; the manager
 * keeps room for them there (manager/host_pools.c). */
#define SANDBOX_INOTIFY_INSTANCES 16
#define SANDBOX_INOTIFY_WATCHES   8192
/* fs.watch's inotify instances and watches, made by nsboxd (host root) for
 * one sandbox, at most (manager/fs_watch.c); kept room for too. */
#define SANDBOX_WATCH_INSTANCES 16
#define SANDBOX_WATCH_DIRS      1024
/* A sandbox's /dev/shm is a tmpfs of its own (mounts.c): its pages are RAM
 * the sandbox's memory cgroup holds beside its processes and its disk
 * (manager/cgroup.c, cgroup_memory_max). 64 MiB as Docker's, and never
 * more than the sandbox's disk, so that a small sandbox stays small. */
#define SANDBOX_SHM_MAX_BYTES (64ull << 20)
static inline uint64_t sandbox_shm_bytes(uint64_t disk_bytes)
{
        return disk_bytes < SANDBOX_SHM_MAX_BYTES ? disk_bytes : SANDBOX_SHM_MAX_BYTES;
}
/* Open files per process in a sandbox (RLIMIT_NOFILE). */
#define SANDBOX_NOFILE 1024
