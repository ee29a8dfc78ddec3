/* SPDX-License-Identifier: Apache-2.0 */
/* Room in the host's per-user kernel pools (inotify, keys, ...) for the sandboxes' share. */
#include "host_pools.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "sandbox_limits.h"

/* What the host keeps for itself: the kernel's defaults for root's inotify
 * instances, a generous share of watches and of files (the kernel's own
 * defaults scale with RAM). */
#define ROOT_OWN_INSTANCES 128ull
#define ROOT_OWN_WATCHES   65536ull
#define HOST_OWN_FILES     (1ull << 21)

static void reserve(const char *path, unsigned long long needed)
{
        char text[32];
        _cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
        if (n <= 0) {
                log_warn("%s: cannot read it (%s); sandboxes share the host's limit", path, strerror(errno));
                return;
        }
        text[n] = '\0';
        unsigned long long now = strtoull(text, NULL, 10);
        if (now >= needed)
                return;
        int len = snprintf(text, sizeof(text), "%llu", needed);
        if (pwrite(fd, text, len, 0) != len) {
                log_warn("%s: cannot raise it from %llu to %llu (%s): sandboxes can use up the host's share",
                         path, now, needed, strerror(errno));
                return;
        }
        log_info("%s raised from %llu to %llu: room for root's own use and each sandbox's cap", path, now,
                 needed);
}

void host_pools_reserve(const struct nsbox_config *config)
{
        unsigned long long sandboxes = config->max_sandboxes;
        reserve("/proc/sys/fs/inotify/max_user_instances",
                ROOT_OWN_INSTANCES + sandboxes * (SANDBOX_INOTIFY_INSTANCES + SANDBOX_WATCH_INSTANCES));
        reserve("/proc/sys/fs/inotify/max_user_watches",
                ROOT_OWN_WATCHES + sandboxes * (SANDBOX_INOTIFY_WATCHES + SANDBOX_WATCH_DIRS));
        reserve("/proc/sys/fs/file-max", HOST_OWN_FILES + sandboxes * config->max_pids * SANDBOX_NOFILE);
}
