/* SPDX-License-Identifier: Apache-2.0 */
/* Host uid ranges of sandboxes: a slot of the pool each, and the flocked
 * 65536-uid blocks that keep managers sharing a host from giving out one uid
 * twice, or a range whose processes still run. */
#include "sandbox_uids.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "log.h"
#include "setup.h"
#include "uidmode.h"

/* Several managers may share a host (a service, `nsbox run`'s private
 * one, test daemons), each with its own pool. A manager takes, with an
 * flock on its lock file, every 65536-aligned block of uids that one of its
 * ranges touches (a range straddles two, its ranges being 65664 apart), and
 * keeps it while any of its ranges does: no two managers share a block, so
 * no two sandboxes anywhere on the host share a uid, whatever the pools.
 * The files are named by the block's first uid, as an nsboxd of 65536-apart
 * ranges named the lock of each range: with one, they exclude each other too. */
#define UID_BLOCK_SHIFT 16

static struct {
        uint32_t first; /* block of the pool's first uid */
        uint32_t n;
        int *fd;                /* the flocked file, or -1 */
        unsigned *users;        /* ranges of ours in the block */
        long long *stale_until; /* monotonic ms: a previous holder's process was seen; not before */
} uid_blocks;

static int uid_blocks_init(void)
{
        uint64_t last = (uint64_t)nsboxd.config.uid_pool_base +
                        (uint64_t)nsboxd.config.uid_pool_ranges * NSBOX_UID_STRIDE;
        uid_blocks.first = nsboxd.config.uid_pool_base >> UID_BLOCK_SHIFT;
        uid_blocks.n = (uint32_t)(last >> UID_BLOCK_SHIFT) - uid_blocks.first + 1;
        uid_blocks.fd = malloc(uid_blocks.n * sizeof(*uid_blocks.fd));
        uid_blocks.users = calloc(uid_blocks.n, sizeof(*uid_blocks.users));
        uid_blocks.stale_until = calloc(uid_blocks.n, sizeof(*uid_blocks.stale_until));
        if (uid_blocks.fd == NULL || uid_blocks.users == NULL || uid_blocks.stale_until == NULL)
                return -ENOMEM;
        for (uint32_t i = 0; i < uid_blocks.n; i++)
                uid_blocks.fd[i] = -1;
        return 0;
}

static void uid_block_put(uint32_t block)
{
        uint32_t i = block - uid_blocks.first;
        if (--uid_blocks.users[i] == 0) {
                /* Every sandbox of ours in the block is reaped: say so to the
                 * next holder, which then need not look for leftovers. */
                if (ftruncate(uid_blocks.fd[i], 0) < 0)
                        log_warn("uid block %u: clear its lock file: %s", block << UID_BLOCK_SHIFT,
                                 strerror(errno));
                close(uid_blocks.fd[i]);
                uid_blocks.fd[i] = -1;
        }
}

/* Whether a "Uid:" or "Gid:" line of a status file names an id of the block. */
static bool status_ids_in_block(const char *status, const char *key, uint32_t block)
{
        const char *line = strstr(status, key);
        if (line == NULL)
                return false;
        char *p = (char *)line + strlen(key);
        for (int i = 0; i < 4; i++) {
                char *end;
                unsigned long id = strtoul(p, &end, 10);
                if (end == p)
                        break;
                if ((id >> UID_BLOCK_SHIFT) == block)
                        return true;
                p = end;
        }
        return false;
}

/* A process (or thread: credentials are per thread) of the host that runs
 * with a uid or gid of the block: its pid, or 0. */
static pid_t uid_block_process(uint32_t block)
{
        _cleanup_closedir_ DIR *proc = opendir("/proc");
        if (proc == NULL)
                return -errno;
        struct dirent *de;
        while ((de = readdir(proc)) != NULL) {
                char path[64], status[4096];
                if (de->d_name[0] < '1' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/task", de->d_name);
                _cleanup_closedir_ DIR *tasks = opendir(path);
                if (tasks == NULL)
                        continue; /* gone meanwhile */
                struct dirent *te;
                while ((te = readdir(tasks)) != NULL) {
                        if (te->d_name[0] == '.')
                                continue;
                        snprintf(path, sizeof(path), "/proc/%s/task/%s/status", de->d_name, te->d_name);
                        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
                        ssize_t n = fd < 0 ? -1 : read(fd, status, sizeof(status) - 1);
                        if (n <= 0)
                                continue;
                        status[n] = '\0';
                        /* A zombie runs nothing; its reaper may be slow (or none). */
                        const char *state = strstr(status, "\nState:\t");
                        if (state != NULL && (state[8] == 'Z' || state[8] == 'X'))
                                continue;
                        if (status_ids_in_block(status, "\nUid:", block) ||
                            status_ids_in_block(status, "\nGid:", block))
                                return (pid_t)atoi(de->d_name);
                }
        }
        return 0;
}

#define UID_STALE_RECHECK_MS 200

/* adopting: the block holds a sandbox of a previous run that live restore
 * takes over, whose processes the stale check would find. */
static int uid_block_take(uint32_t block, bool adopting)
{
        uint32_t i = block - uid_blocks.first;
        if (uid_blocks.users[i] > 0) {
                uid_blocks.users[i]++;
                return 0;
        }
        /* A block whose previous holder's processes were seen a moment ago
         * is passed over without a new scan of /proc: every create would
         * otherwise scan it again (twice: ranges straddle two blocks). */
        if (now_monotonic_ms() < uid_blocks.stale_until[i])
                return -EWOULDBLOCK;
        char path[128];
        if (mkdir(UID_LOCK_DIR, 0700) < 0 && errno != EEXIST)
                return -errno;
        snprintf(path, sizeof(path), UID_LOCK_DIR "/%u.lock", block << UID_BLOCK_SHIFT);
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                int saved = errno;
                close(fd);
                return -saved;
        }
        /* A lock file that is not empty was left by a holder that died with
         * sandboxes in the block (a clean release empties it). The kernel
         * ends their processes only after the lock is gone: until the last
         * one is, the block is not ours to give out. */
        struct stat st = { 0 };
        if (fstat(fd, &st) == 0 && st.st_size > 0 && !adopting) {
                pid_t left = uid_block_process(block);
                if (left < 0)
                        log_limited("uid blocks", LOG_LEVEL_WARN,
                                    "uid block %u: cannot look for a previous holder's processes (%s); not "
                                    "handed out",
                                    block << UID_BLOCK_SHIFT, strerror(-left));
                else if (left > 0)
                        log_limited(
                            "uid blocks", LOG_LEVEL_INFO,
                            "uid block %u: process %d of a previous holder still runs; not handed out",
                            block << UID_BLOCK_SHIFT, (int)left);
                if (left != 0) {
                        uid_blocks.stale_until[i] = now_monotonic_ms() + UID_STALE_RECHECK_MS;
                        close(fd);
                        return -EWOULDBLOCK;
                }
        }
        /* Our pid, for the next holder to know the block was not given back
         * clean if we die; the file is empty unless that just happened. */
        char holder[32];
        int len = snprintf(holder, sizeof(holder), "%d\n", (int)getpid());
        if ((st.st_size > 0 && ftruncate(fd, 0) < 0) || pwrite(fd, holder, len, 0) != len) {
                int saved = errno;
                close(fd);
                return -saved;
        }
        uid_blocks.fd[i] = fd;
        uid_blocks.users[i] = 1;
        return 0;
}

/* Take the blocks of the range at base: 0, -EWOULDBLOCK when another
 * manager has one of them, or another negative errno. */
static int uid_range_take(uid_t base, bool adopting)
{
        uint32_t first = base >> UID_BLOCK_SHIFT, last = (base + NSBOX_UID_RANGE - 1) >> UID_BLOCK_SHIFT;
        for (uint32_t block = first; block <= last; block++) {
                int r = uid_block_take(block, adopting);
                if (r < 0) {
                        while (block-- > first)
                                uid_block_put(block);
                        return r;
                }
        }
        return 0;
}

static void uid_range_put(uid_t base)
{
        uint32_t first = base >> UID_BLOCK_SHIFT, last = (base + NSBOX_UID_RANGE - 1) >> UID_BLOCK_SHIFT;
        for (uint32_t block = first; block <= last; block++)
                uid_block_put(block);
}

int sandbox_uids_init(void)
{
        nsboxd.uid_slots = calloc(nsboxd.config.uid_pool_ranges, 1);
        if (nsboxd.uid_slots == NULL || uid_blocks_init() < 0)
                return -ENOMEM;
        return 0;
}

int sandbox_uids_take(struct sandbox *sb)
{
        if (uidmode_shared()) {
                /* One range for every sandbox, matching the image copy's owners. */
                sb->host_uid_base = uidmode_shared_base();
                return 0;
        }
        for (unsigned i = 0; i < nsboxd.config.uid_pool_ranges; i++) {
                if (nsboxd.uid_slots[i])
                        continue;
                uid_t base = nsboxd.config.uid_pool_base + i * NSBOX_UID_STRIDE;
                int r = uid_range_take(base, false);
                if (r == -EWOULDBLOCK)
                        continue; /* another manager has a block of it */
                if (r < 0)
                        return r;
                nsboxd.uid_slots[i] = 1;
                sb->uid_slot = i;
                sb->host_uid_base = base;
                return 0;
        }
        return -ENOSPC;
}

void sandbox_uids_put(struct sandbox *sb)
{
        if (sb->uid_slot < nsboxd.config.uid_pool_ranges) {
                nsboxd.uid_slots[sb->uid_slot] = 0;
                uid_range_put(sb->host_uid_base);
        }
}

int sandbox_uids_adopt(struct sandbox *sb, uid_t base)
{
        if (uidmode_shared()) {
                if (base != uidmode_shared_base())
                        return -ERANGE;
                sb->host_uid_base = base;
                return 0;
        }
        if (base < nsboxd.config.uid_pool_base ||
            (base - nsboxd.config.uid_pool_base) % NSBOX_UID_STRIDE != 0)
                return -ERANGE;
        unsigned slot = (base - nsboxd.config.uid_pool_base) / NSBOX_UID_STRIDE;
        if (slot >= nsboxd.config.uid_pool_ranges)
                return -ERANGE;
        if (nsboxd.uid_slots[slot])
                return -EEXIST; /* two records name one range: neither is trusted */
        int r = uid_range_take(base, true);
        if (r < 0)
                return r;
        nsboxd.uid_slots[slot] = 1;
        sb->uid_slot = slot;
        sb->host_uid_base = base;
        return 0;
}
