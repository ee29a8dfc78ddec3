#include "host_pools.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "setup.h"

/* What root keeps for itself: the kernel's defaults for instances, and a
 * generous share of watches (the default scales with RAM). */
#define ROOT_OWN_INSTANCES 128ull
#define ROOT_OWN_WATCHES   65536ull

static void reserve(const char *path, unsigned long long needed)
{
        char text[32];
        _cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
        if (n <= 0) {
                log_warn("%s: cannot read it (%s); sandboxes share host root's inotify limit", path,
                         strerror(errno));
                return;
        }
        text[n] = '\0';
        unsigned long long now = strtoull(text, NULL, 10);
        if (now >= needed)
                return;
        int len = snprintf(text, sizeof(text), "%llu", needed);
        if (pwrite(fd, text, len, 0) != len) {
                log_warn("%s: cannot raise it from %llu to %llu (%s): sandboxes can use up host root's share",
                         path, now, needed, strerror(errno));
                return;
        }
        log_info("%s raised from %llu to %llu: room for root's own use and each sandbox's cap", path, now,
                 needed);
}

void host_pools_reserve(unsigned max_sandboxes)
{
        reserve("/proc/sys/fs/inotify/max_user_instances",
                ROOT_OWN_INSTANCES + (unsigned long long)max_sandboxes * SANDBOX_INOTIFY_INSTANCES);
        reserve("/proc/sys/fs/inotify/max_user_watches",
                ROOT_OWN_WATCHES + (unsigned long long)max_sandboxes * SANDBOX_INOTIFY_WATCHES);
}
