/* SPDX-License-Identifier: Apache-2.0 */
/* The file API of nsboxd (fs.*) and the file helpers of python.run.
 *
 * nsboxd is host root, so every path the sandbox can influence is resolved
 * by the kernel, never by string checks: openat2() under a root fd pinned
 * from /proc/<init>/root with
 *   RESOLVE_IN_ROOT        absolute symlinks and ".." stay inside the
 *                          sandbox's root, even when the sandbox renames or
 *                          swaps directories during the call;
 *   RESOLVE_NO_XDEV        only the overlay root file system: the sandbox's
 *                          /proc and /sys are host-global kernel knobs when
 *                          written by host root, /dev holds host devices;
 *   RESOLVE_NO_MAGICLINKS  no /proc/<pid>/root or /proc/<pid>/fd jumps.
 * The last component of write/remove/mkdir is handled on the parent's fd
 * with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, so a final symlink is never
 * followed. Files are opened O_PATH first and reopened only once they are
 * known to be regular: a FIFO or device is never opened at all. */
#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "fs_path.h"
#include "fs_worker.h"
#include "json_cleanup.h"
#include "log.h"
#include "params.h"
#include "sandbox.h"
#include "textenc.h"

#define FS_READ_DEFAULT_BYTES (10u << 20)
#define FS_READ_MAX_BYTES     (64u << 20)
/* fs.list answers at most max_entries (default 10000, at most 100000)
 * entries, sorted by name, with truncated and total_entries saying what
 * was left out; a directory is read to at most FS_LIST_SCAN_MAX names. */
#define FS_LIST_DEFAULT_ENTRIES 10000
#define FS_LIST_MAX_ENTRIES     100000
#define FS_LIST_SCAN_MAX        (4u << 20)
/* Reads and writes up to this size run on the loop; larger in a worker. */
/* The deepest tree fs.remove takes apart: one open fd per level, in a
 * worker whose fd limit is raised to match. */
#define FS_TREE_MAX_DEPTH    16384
#define FS_DIRENT_BUFFER     (64u << 10)
#define FS_SANDBOX_USER      1000
#define FS_DEFAULT_FILE_MODE 0644
#define FS_DEFAULT_DIR_MODE  0755
/* openat2 answers EAGAIN when a rename raced a ".." walk; the sandbox can
 * keep that up forever, so the retries are bounded. */
#define FS_RESOLVE_RETRIES 64

#define FS_RESOLVE       (RESOLVE_IN_ROOT | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS)
#define FS_RESOLVE_ENTRY (RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* One call's view of a sandbox: its pinned root and the sandbox user. */
struct fs_ctx {
        int root;
        uid_t uid;
        gid_t gid;
        uid_t uid_base;
        unsigned long long disk_bytes;
        int watch_fd; /* in a worker: the init's pidfd, to stop when the sandbox goes; else -1 */
};

static void fs_ctx_close(struct fs_ctx *ctx)
{
        if (ctx->root >= 0)
                close(ctx->root);
        ctx->root = -1;
}

static int fs_resolve_error(nsbox_error_t **err, int errnum, const char *path)
{
        switch (errnum) {
        case ENOENT:
                return nsbox_refuse(err, errnum, "%s: no such file or directory", path);
        case ENOTDIR:
                return nsbox_refuse(err, errnum, "%s: a path component is not a directory", path);
        case EXDEV:
                return nsbox_refuse(err, errnum,
                                    "%s: outside the sandbox's root file system (/proc, /dev and /sys are "
                                    "not reachable through fs.*)",
                                    path);
        case ELOOP:
                return nsbox_refuse(err, errnum, "%s: too many levels of symlinks, or a /proc magic link",
                                    path);
        case EAGAIN:
                return nsbox_refuse(err, errnum, "%s: the sandbox kept renaming the path during resolution",
                                    path);
        default:
                return nsbox_error(err, errnum, "resolve %s", path);
        }
}

static const char *fs_type_name(mode_t mode)
{
        if (S_ISREG(mode))
                return "file";
        if (S_ISDIR(mode))
                return "dir";
        if (S_ISLNK(mode))
                return "symlink";
        return "other";
}

static const char *fs_special_name(mode_t mode)
{
        if (S_ISFIFO(mode))
                return "a FIFO";
        if (S_ISSOCK(mode))
                return "a socket";
        if (S_ISCHR(mode) || S_ISBLK(mode))
                return "a device";
        if (S_ISDIR(mode))
                return "a directory";
        if (S_ISLNK(mode))
                return "a symlink";
        return "not a regular file";
}

static int fs_refuse_type(nsbox_error_t **err, mode_t mode, const char *path)
{
        return nsbox_refuse(err, S_ISDIR(mode) ? EISDIR : EINVAL,
                            "%s is %s: only regular files are read or written", path, fs_special_name(mode));
}

static int fs_openat2(int dirfd, const char *path, int flags, mode_t mode, uint64_t resolve)
{
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .mode = (flags & O_CREAT) ? mode : 0,
                .resolve = resolve,
        };
        for (int attempt = 0;; attempt++) {
                int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
                if (fd >= 0)
                        return fd;
                if (errno != EAGAIN || attempt >= FS_RESOLVE_RETRIES)
                        return -errno;
        }
}

/* Pin the sandbox's root for one call. The init is nsboxd's child and is
 * only reaped by this loop, so its pid cannot be reused under us; the pidfd
 * check after the open still proves the root belongs to that init. */
static int fs_ctx_open(struct sandbox *sb, struct fs_ctx *ctx, nsbox_error_t **err)
{
        ctx->root = -1;
        ctx->watch_fd = -1;
        if (sb->state != SANDBOX_RUNNING || sb->pidfd == NULL)
                return nsbox_refuse(err, ESRCH, "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/root", (int)sb->pid);
        _cleanup_close_ int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return nsbox_error(err, errno, "open the root of sandbox %s", sb->id);
        if (pidfd_send_signal(sb->pidfd->fd, 0, NULL, 0) < 0)
                return nsbox_refuse(err, ESRCH, "sandbox %s: its init is gone", sb->id);
        ctx->root = steal_fd(&fd);
        ctx->uid_base = sb->host_uid_base;
        ctx->uid = sb->host_uid_base + FS_SANDBOX_USER;
        ctx->gid = sb->host_uid_base + FS_SANDBOX_USER;
        ctx->disk_bytes = (unsigned long long)sb->policy.limits.disk_bytes;
        return 0;
}

/* Turn an O_PATH fd into a real open file of the same inode, through nsboxd's
 * own /proc (not the sandbox's). */
static int fs_reopen(int path_fd, int flags, const char *shown, nsbox_error_t **err)
{
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", path_fd);
        int fd = open(proc, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return nsbox_error(err, errno, "open %s", shown);
        return fd;
}

/* What this call created is owned by host root: nothing in the sandbox can
 * own an unmapped uid. Hand it to the sandbox user. */
static int fs_claim(const struct fs_ctx *ctx, int fd, mode_t mode, const char *shown, nsbox_error_t **err)
{
        struct stat st;
        if (fstat(fd, &st) < 0)
                return nsbox_error(err, errno, "stat %s", shown);
        if (st.st_uid != 0)
                return 0;
        if (fchown(fd, ctx->uid, ctx->gid) < 0)
                return nsbox_error(err, errno, "chown %s to the sandbox user", shown);
        if (fchmod(fd, mode) < 0)
                return nsbox_error(err, errno, "chmod %s", shown);
        return 0;
}

/* mkdir in a held directory, owned by the sandbox user. EEXIST is the
 * caller's to judge. */
static int fs_mkdir_entry(const struct fs_ctx *ctx, int parent, const char *name, const char *shown,
                          nsbox_error_t **err)
{
        if (mkdirat(parent, name, 0700) < 0)
                return -errno;
        _cleanup_close_ int fd =
            fs_openat2(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (fd < 0) /* swapped already: the sandbox's own business */
                return 0;
        return fs_claim(ctx, fd, FS_DEFAULT_DIR_MODE, shown, err);
}

static void fs_shown(char *shown, size_t size, const char *rel)
{
        snprintf(shown, size, "/%s", strcmp(rel, ".") == 0 ? "" : rel);
}

/* O_PATH fd of the directory `rel`, creating what is missing (mkdir -p).
 * A loop, not a recursion: a client's path of a thousand missing levels
 * once took nsboxd's stack with it. The deepest existing prefix is found
 * first; then each missing level is made in its parent's fd and the prefix
 * reopened from the root with RESOLVE_IN_ROOT, as one openat2 of the whole
 * path would resolve it. The component count is bounded by fs_path_parse. */
static int fs_open_dir_creating(const struct fs_ctx *ctx, const char *rel, int *out, nsbox_error_t **err)
{
        char prefix[FS_PATH_MAX + 16];
        char shown[FS_PATH_MAX + 16];
        unsigned total = 0;
        if (strcmp(rel, ".") != 0)
                while (fs_path_prefix_len(rel, total + 1) > 0)
                        total++;
        if (total > FS_PATH_MAX_COMPONENTS + 1)
                return nsbox_refuse(err, ENAMETOOLONG, "the path has more than %d components",
                                    FS_PATH_MAX_COMPONENTS);

        unsigned have = total;
        _cleanup_close_ int dir = -1;
        for (;; have--) {
                size_t len = fs_path_prefix_len(rel, have);
                if (have == 0) {
                        strcpy(prefix, ".");
                } else {
                        memcpy(prefix, rel, len);
                        prefix[len] = '\0';
                }
                dir = fs_openat2(ctx->root, prefix, O_PATH | O_DIRECTORY, 0, FS_RESOLVE);
                if (dir >= 0)
                        break;
                fs_shown(shown, sizeof(shown), have == total ? rel : prefix);
                if (dir != -ENOENT || have == 0)
                        return fs_resolve_error(err, -dir, shown);
        }
        for (unsigned level = have + 1; level <= total; level++) {
                size_t start = level == 1 ? 0 : fs_path_prefix_len(rel, level - 1) + 1;
                size_t len = fs_path_prefix_len(rel, level);
                memcpy(prefix, rel, len);
                prefix[len] = '\0';
                const char *name = prefix + start;
                fs_shown(shown, sizeof(shown), prefix);
                if (strcmp(name, "..") != 0) {
                        int r = fs_mkdir_entry(ctx, dir, name, shown, err);
                        if (r == -ENOSPC || r == -EDQUOT)
                                return nsbox_refuse(
                                    err, ENOSPC, "mkdir %s: no space left in the sandbox (disk_bytes=%llu)",
                                    shown, ctx->disk_bytes);
                        if (r < 0 && r != -EEXIST)
                                return nsbox_error(err, -r, "mkdir %s", shown);
                }
                close(dir);
                dir = fs_openat2(ctx->root, prefix, O_PATH | O_DIRECTORY, 0, FS_RESOLVE);
                if (dir < 0)
                        return fs_resolve_error(err, -dir, shown);
        }
        *out = steal_fd(&dir);
        return 0;
}

static int fs_open_parent(const struct fs_ctx *ctx, const struct fs_path *p, bool create, int *out,
                          nsbox_error_t **err)
{
        if (create)
                return fs_open_dir_creating(ctx, p->parent, out, err);
        int fd = fs_openat2(ctx->root, p->parent, O_PATH | O_DIRECTORY, 0, FS_RESOLVE);
        if (fd < 0)
                return fs_resolve_error(err, -fd, p->shown);
        *out = fd;
        return 0;
}

/* ---- read ---- */

struct fs_read_result {
        char *data;
        size_t len;
        unsigned long long size; /* of the whole file */
        bool truncated;
};

/* At most max_bytes from `offset` on (beyond the end: nothing). */
static int fs_read_at(const struct fs_ctx *ctx, const struct fs_path *p, uint64_t offset, size_t max_bytes,
                      struct fs_read_result *out, nsbox_error_t **err)
{
        _cleanup_close_ int path_fd = fs_openat2(ctx->root, p->rel, O_PATH, 0, FS_RESOLVE);
        if (path_fd < 0)
                return fs_resolve_error(err, -path_fd, p->shown);
        struct stat st;
        if (fstat(path_fd, &st) < 0)
                return nsbox_error(err, errno, "stat %s", p->shown);
        if (!S_ISREG(st.st_mode))
                return fs_refuse_type(err, st.st_mode, p->shown);
        _cleanup_close_ int fd = fs_reopen(path_fd, O_RDONLY, p->shown, err);
        if (fd < 0)
                return fd;

        uint64_t left = (uint64_t)st.st_size > offset ? (uint64_t)st.st_size - offset : 0;
        size_t cap = left < max_bytes ? (size_t)left : max_bytes;
        _cleanup_free_ char *buf = malloc(cap + 1);
        if (buf == NULL)
                return nsbox_error(err, ENOMEM, "read %s", p->shown);
        size_t len = 0;
        for (;;) {
                if (len == cap) {
                        if (cap >= max_bytes)
                                break;
                        /* The file grew since the fstat. */
                        size_t grown = cap < max_bytes / 2 ? cap * 2 + 4096 : max_bytes;
                        if (grown > max_bytes)
                                grown = max_bytes;
                        char *bigger = realloc(buf, grown + 1);
                        if (bigger == NULL)
                                return nsbox_error(err, ENOMEM, "read %s", p->shown);
                        buf = bigger;
                        cap = grown;
                }
                ssize_t n = pread(fd, buf + len, cap - len, (off_t)(offset + len));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return nsbox_error(err, errno, "read %s", p->shown);
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        char probe;
        out->truncated = len == max_bytes && pread(fd, &probe, 1, (off_t)(offset + len)) == 1;
        if (fstat(fd, &st) == 0)
                out->size = (unsigned long long)st.st_size;
        buf[len] = '\0';
        out->data = steal_pointer(&buf);
        out->len = len;
        return 0;
}

/* ---- write ---- */

struct fs_write_options {
        mode_t mode;
        bool mode_set;
        bool append;
        bool parents;
};

static int fs_write_all(const struct fs_ctx *ctx, int fd, const void *data, size_t len, const char *shown,
                        nsbox_error_t **err)
{
        size_t done = 0;
        while (done < len) {
                ssize_t n = write(fd, (const char *)data + done, len - done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == ENOSPC || errno == EDQUOT))
                        return nsbox_refuse(
                            err, ENOSPC,
                            "write %s: no space left in the sandbox (disk_bytes=%llu); %zu of %zu "
                            "bytes written",
                            shown, ctx->disk_bytes, done, len);
                if (n < 0)
                        return nsbox_error(err, errno, "write %s (%zu of %zu bytes written)", shown, done,
                                           len);
                done += (size_t)n;
        }
        return 0;
}

static int fs_write_at(const struct fs_ctx *ctx, const struct fs_path *p, const void *data, size_t len,
                       const struct fs_write_options *opts, nsbox_error_t **err)
{
        if (p->name == NULL || p->dir_only)
                return nsbox_refuse(err, EISDIR, "%s names a directory, not a file", p->shown);
        _cleanup_close_ int parent = -1;
        int r = fs_open_parent(ctx, p, opts->parents, &parent, err);
        if (r < 0)
                return r;

        _cleanup_close_ int fd = -1;
        bool created = false;
        struct stat st;
        /* Open the existing file, or create it exclusively: either way the
         * inode is known to be a regular file before any byte moves. */
        for (int attempt = 0; fd < 0; attempt++) {
                if (attempt >= FS_RESOLVE_RETRIES)
                        return nsbox_refuse(err, EAGAIN, "%s: the sandbox kept replacing the file", p->shown);
                _cleanup_close_ int path_fd =
                    fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
                if (path_fd >= 0) {
                        if (fstat(path_fd, &st) < 0)
                                return nsbox_error(err, errno, "stat %s", p->shown);
                        if (S_ISLNK(st.st_mode))
                                return nsbox_refuse(
                                    err, ELOOP, "%s is a symlink: fs.write does not follow a final symlink",
                                    p->shown);
                        if (!S_ISREG(st.st_mode))
                                return fs_refuse_type(err, st.st_mode, p->shown);
                        fd = fs_reopen(path_fd, O_WRONLY | (opts->append ? O_APPEND : 0), p->shown, err);
                        if (fd < 0)
                                return fd;
                        break;
                }
                if (path_fd != -ENOENT)
                        return fs_resolve_error(err, -path_fd, p->shown);
                fd = fs_openat2(parent, p->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY, 0600,
                                FS_RESOLVE_ENTRY);
                if (fd == -EEXIST)
                        continue;
                if (fd == -ENOSPC || fd == -EDQUOT)
                        return nsbox_refuse(err, ENOSPC,
                                            "create %s: no space left in the sandbox (disk_bytes=%llu)",
                                            p->shown, ctx->disk_bytes);
                if (fd < 0)
                        return nsbox_error(err, -fd, "create %s", p->shown);
                created = true;
        }

        mode_t mode = opts->mode_set ? (opts->mode & 0777) : FS_DEFAULT_FILE_MODE;
        if (created) {
                r = fs_claim(ctx, fd, mode, p->shown, err);
                if (r < 0)
                        return r;
        } else {
                if (!opts->mode_set)
                        mode = st.st_mode & 01777; /* setuid/setgid never survive a write */
                if ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0)
                        return nsbox_error(err, errno, "chmod %s", p->shown);
                if (!opts->append && ftruncate(fd, 0) < 0)
                        return nsbox_error(err, errno, "truncate %s", p->shown);
        }
        off_t start = opts->append ? lseek(fd, 0, SEEK_END) : 0;
        r = fs_write_all(ctx, fd, data, len, p->shown, err);
        if (r < 0) {
                /* No half-written file, and the space it took goes back to the sandbox. */
                if (ftruncate(fd, start < 0 ? 0 : start) < 0)
                        log_warn("truncate %s after a failed write: %s", p->shown, strerror(errno));
                struct stat now, entry;
                if (created && fstat(fd, &now) == 0 &&
                    fstatat(parent, p->name, &entry, AT_SYMLINK_NOFOLLOW) == 0 &&
                    now.st_dev == entry.st_dev && now.st_ino == entry.st_ino)
                        unlinkat(parent, p->name, 0);
        }
        return r;
}

/* ---- remove ---- */

/* A directory entry as getdents64 returns it. */
struct fs_dirent64 {
        uint64_t d_ino;
        int64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
};

struct fs_tree_level {
        int fd;
        char name[NAME_MAX + 1]; /* in the level above */
};

/* The sandbox being removed ends the walk: its init is gone (watch_fd is
 * the init's pidfd, readable once it exited). */
static bool fs_cancelled(const struct fs_ctx *ctx)
{
        if (ctx->watch_fd < 0)
                return false;
        struct pollfd pfd = { .fd = ctx->watch_fd, .events = POLLIN };
        return poll(&pfd, 1, 0) > 0;
}

/* Open directory `name` in `parent` for the tree walk; 1 when it is no
 * directory (any more) and was unlinked instead, 0 when gone. */
static int fs_tree_open(int parent, const char *name, int *out, const char *shown, nsbox_error_t **err)
{
        int fd = fs_openat2(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (fd == -ENOTDIR || fd == -ELOOP) {
                /* No longer a directory: the sandbox swapped it; remove what is there. */
                if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
                        return nsbox_error(err, errno, "remove %s", shown);
                return 0;
        }
        if (fd == -ENOENT)
                return 0;
        if (fd == -EXDEV)
                return nsbox_refuse(err, EXDEV, "remove %s: a mount point is inside", shown);
        if (fd < 0)
                return nsbox_error(err, -fd, "open %s", shown);
        *out = fd;
        return 1;
}

/* Remove directory `name` in `parent` and everything under it. A loop with
 * its stack of open directories on the heap, not a recursion: the sandbox
 * can make a tree thousands of levels deep, which must cost neither
 * nsboxd's stack nor a refusal. No directory stream stays open across
 * levels: after a subdirectory is gone its parent is read from the start
 * again, where only what is left remains. */
static int fs_remove_tree(const struct fs_ctx *ctx, int parent, const char *name, const char *shown,
                          nsbox_error_t **err)
{
        _cleanup_free_ struct fs_tree_level *levels = NULL;
        size_t depth = 0, cap = 0;
        _cleanup_free_ char *buf = malloc(FS_DIRENT_BUFFER);
        if (buf == NULL)
                return nsbox_error(err, ENOMEM, "remove %s", shown);
        int top_fd = -1;
        int r = fs_tree_open(parent, name, &top_fd, shown, err);
        if (r <= 0)
                return r;
        levels = malloc(sizeof(*levels));
        if (levels == NULL) {
                close(top_fd);
                return nsbox_error(err, ENOMEM, "remove %s", shown);
        }
        cap = 1;
        levels[0].fd = top_fd;
        snprintf(levels[0].name, sizeof(levels[0].name), "%s", name);
        depth = 1;
        unsigned long ops = 0;
        r = 0;
        while (r == 0 && depth > 0) {
                struct fs_tree_level *top = &levels[depth - 1];
                bool descended = false;
                if (lseek(top->fd, 0, SEEK_SET) < 0) {
                        r = nsbox_error(err, errno, "read directory %s", shown);
                        break;
                }
                while (r == 0 && !descended) {
                        long n = syscall(SYS_getdents64, top->fd, buf, FS_DIRENT_BUFFER);
                        if (n < 0) {
                                r = nsbox_error(err, errno, "read directory %s", shown);
                                break;
                        }
                        if (n == 0)
                                break;
                        for (long off = 0; off < n && r == 0 && !descended;) {
                                struct fs_dirent64 *d = (struct fs_dirent64 *)(buf + off);
                                off += d->d_reclen;
                                if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                                        continue;
                                if (++ops % 1024 == 0 && fs_cancelled(ctx)) {
                                        r = nsbox_refuse(err, ESRCH, "remove %s: the sandbox is gone", shown);
                                        break;
                                }
                                if (unlinkat(top->fd, d->d_name, 0) == 0 || errno == ENOENT)
                                        continue;
                                if (errno != EISDIR && errno != EPERM) {
                                        r = nsbox_error(err, errno, "remove %s/.../%s", shown, d->d_name);
                                        break;
                                }
                                if (depth >= FS_TREE_MAX_DEPTH) {
                                        r = nsbox_refuse(err, ELOOP, "remove %s: deeper than %d levels",
                                                         shown, FS_TREE_MAX_DEPTH);
                                        break;
                                }
                                int fd = -1;
                                r = fs_tree_open(top->fd, d->d_name, &fd, shown, err);
                                if (r <= 0)
                                        continue;
                                r = 0;
                                if (depth == cap) {
                                        size_t grown = cap * 2;
                                        struct fs_tree_level *bigger =
                                            realloc(levels, grown * sizeof(*levels));
                                        if (bigger == NULL) {
                                                close(fd);
                                                r = nsbox_error(err, ENOMEM, "remove %s", shown);
                                                break;
                                        }
                                        levels = bigger;
                                        cap = grown;
                                        top = &levels[depth - 1];
                                }
                                levels[depth].fd = fd;
                                snprintf(levels[depth].name, sizeof(levels[depth].name), "%s", d->d_name);
                                depth++;
                                descended = true;
                        }
                }
                if (r < 0 || descended)
                        continue;
                /* Emptied: remove it from the level above. */
                close(top->fd);
                depth--;
                int above = depth > 0 ? levels[depth - 1].fd : parent;
                if (unlinkat(above, levels[depth].name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                        r = nsbox_error(err, errno, "remove %s%s%s", shown, depth > 0 ? "/.../" : "",
                                        depth > 0 ? levels[depth].name : "");
        }
        while (depth > 0)
                close(levels[--depth].fd);
        return r;
}

static int fs_remove_at(const struct fs_ctx *ctx, const struct fs_path *p, bool recursive,
                        nsbox_error_t **err)
{
        if (p->name == NULL)
                return nsbox_refuse(err, EINVAL, "refusing to remove %s", p->shown);
        _cleanup_close_ int parent = -1;
        int r = fs_open_parent(ctx, p, false, &parent, err);
        if (r < 0)
                return r;
        _cleanup_close_ int entry = fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (entry == -EXDEV)
                return nsbox_refuse(err, EXDEV, "refusing to remove %s: it is a mount point", p->shown);
        if (entry < 0)
                return fs_resolve_error(err, -entry, p->shown);
        struct stat st;
        if (fstat(entry, &st) < 0)
                return nsbox_error(err, errno, "stat %s", p->shown);
        if (!S_ISDIR(st.st_mode)) {
                if (p->dir_only)
                        return nsbox_refuse(err, ENOTDIR, "%s is not a directory", p->shown);
                if (unlinkat(parent, p->name, 0) < 0)
                        return nsbox_error(err, errno, "remove %s", p->shown);
                return 0;
        }
        if (recursive)
                return fs_remove_tree(ctx, parent, p->name, p->shown, err);
        if (unlinkat(parent, p->name, AT_REMOVEDIR) < 0) {
                if (errno == ENOTEMPTY || errno == EEXIST)
                        return nsbox_refuse(err, ENOTEMPTY,
                                            "%s is a directory that is not empty (use recursive)", p->shown);
                return nsbox_error(err, errno, "remove %s", p->shown);
        }
        return 0;
}

/* ---- mkdir ---- */

static int fs_mkdir_at(const struct fs_ctx *ctx, const struct fs_path *p, bool parents, bool *created,
                       nsbox_error_t **err)
{
        *created = false;
        if (p->name == NULL) {
                if (!parents)
                        return nsbox_refuse(err, EEXIST, "%s already exists", p->shown);
                _cleanup_close_ int fd = -1;
                return fs_open_dir_creating(ctx, p->rel, &fd, err);
        }
        _cleanup_close_ int parent = -1;
        int r = fs_open_parent(ctx, p, parents, &parent, err);
        if (r < 0)
                return r;
        r = fs_mkdir_entry(ctx, parent, p->name, p->shown, err);
        if (r == -EEXIST) {
                _cleanup_close_ int fd =
                    fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
                struct stat st;
                if (parents && fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
                        return 0;
                return nsbox_refuse(err, EEXIST, "%s already exists", p->shown);
        }
        if (r == -ENOSPC || r == -EDQUOT)
                return nsbox_refuse(err, ENOSPC, "mkdir %s: no space left in the sandbox (disk_bytes=%llu)",
                                    p->shown, ctx->disk_bytes);
        if (r < 0)
                return nsbox_error(err, -r, "mkdir %s", p->shown);
        *created = true;
        return 0;
}

/* ---- JSON ---- */

static json_t *fs_json_string(const char *text, size_t len)
{
        size_t valid_len;
        _cleanup_free_ char *valid = utf8_make_valid(text, len, &valid_len);
        return valid ? json_stringn(valid, valid_len) : json_string("");
}

static json_t *fs_json_time(const struct timespec *ts)
{
        char buf[64];
        format_timestamp((long long)ts->tv_sec * 1000 + ts->tv_nsec / 1000000, buf, sizeof(buf));
        return json_string(buf);
}

/* Ids as the sandbox sees them: 65534 (nobody) for what it cannot map. */
static json_int_t fs_sandbox_id(const struct fs_ctx *ctx, unsigned host_id)
{
        if (host_id >= ctx->uid_base && host_id - ctx->uid_base < 65536)
                return host_id - ctx->uid_base;
        return 65534;
}

static json_t *fs_stat_json(const struct fs_ctx *ctx, const char *name, size_t name_len,
                            const struct stat *st)
{
        return json_pack("{s:o, s:s, s:I, s:I, s:o}", "name", fs_json_string(name, name_len), "type",
                         fs_type_name(st->st_mode), "size", (json_int_t)st->st_size, "mode",
                         (json_int_t)(st->st_mode & 07777), "mtime", fs_json_time(&st->st_mtim));
}

/* ---- request plumbing ---- */

static const char *fs_error_kind(int errnum)
{
        switch (errnum) {
        case ENOENT:
                return "not_found";
        case EACCES:
        case EPERM:
        case EROFS:
                return "permission_denied";
        case ENOSPC:
        case EDQUOT:
        case EFBIG:
                return "limit_reached";
        case ESRCH:
                return "unavailable";
        case EAGAIN:
                return "busy";
        case EXDEV:
        case ELOOP:
        case ENOTDIR:
        case EISDIR:
        case EEXIST:
        case ENOTEMPTY:
        case ENAMETOOLONG:
        case EINVAL:
        case EBUSY:
        case ENXIO:
                return "invalid_params";
        default:
                return "internal";
        }
}

static void fs_reply_failure(struct rpc_request *req, int r, nsbox_error_t *err)
{
        rpc_reply_fail_errno(req, fs_error_kind(-r), -r, "%s",
                             err && err->message ? err->message : strerror(-r));
}

/* encoding: "utf-8" (default) or "base64". */
static bool fs_get_base64(struct rpc_request *req, bool *base64)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (params_get_encoding(req->msg.params, base64, &err) == 0)
                return true;
        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
        return false;
}

/* Parse params[key] (default: `fallback`, or required when NULL). Replies
 * and returns false on failure. */
static bool fs_get_path(struct rpc_request *req, const char *key, const char *fallback, struct fs_path *path)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *v = json_object_get(req->msg.params, key);
        const char *text = fallback;
        size_t len = fallback ? strlen(fallback) : 0;
        if (v != NULL && !json_is_null(v)) {
                if (!json_is_string(v)) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s must be a string",
                                        key);
                        return false;
                }
                text = json_string_value(v);
                len = json_string_length(v);
        } else if (text == NULL) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s is required", key);
                return false;
        }
        int r = fs_path_parse(text, len, path, &err);
        if (r < 0) {
                /* Methods with one path keep the message they always had. */
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s%s%s",
                                strcmp(key, "path") == 0 ? "" : key, strcmp(key, "path") == 0 ? "" : ": ",
                                err->message);
                return false;
        }
        return true;
}

/* Parse params.path (default: `fallback`, or required when NULL) and pin the
 * sandbox's root. Replies and returns false on failure. */
static bool fs_begin(struct rpc_request *req, struct sandbox *sb, const char *fallback, struct fs_path *path,
                     struct fs_ctx *ctx)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!fs_get_path(req, "path", fallback, path))
                return false;
        int r = fs_ctx_open(sb, ctx, &err);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return false;
        }
        return true;
}

/* ---- work done by a forked worker (fs_worker.c) ---- */

/* One fs.* request handed to a worker. The child runs on its own copy of
 * this (and of the request's params, so content is not copied); nsboxd
 * keeps the request until the worker answers. */
struct fs_job {
        struct rpc_request *req;
        struct fs_ctx ctx;
        struct fs_path path;
        size_t max_entries;           /* list */
        size_t max_bytes;             /* read */
        uint64_t offset;              /* read */
        bool base64;                  /* read, write */
        const char *content;          /* write: as sent, decoded in the worker */
        size_t content_len;           /* write */
        struct fs_write_options opts; /* write */
};

/* Invalid base64 found by the worker: a client error like the inline one. */
#define FS_JOB_INVALID_CONTENT EBADMSG

static void fs_job_done(void *data, int r, json_t *result, const char *message)
{
        struct fs_job *job = data;
        if (r == -FS_JOB_INVALID_CONTENT)
                rpc_reply_error(job->req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", message);
        else if (r < 0)
                rpc_reply_fail_errno(job->req, fs_error_kind(-r), -r, "%s", message);
        else
                rpc_reply_result(job->req, result);
        free(job);
}

static void fs_job_client_gone(struct rpc_request *req, void *worker)
{
        fs_worker_cancel(worker);
}

static int fs_list_run(void *data, struct fs_worker_output *out, nsbox_error_t **err);
static int fs_read_run(void *data, struct fs_worker_output *out, nsbox_error_t **err);

/* Fork a worker that runs `run` on `data` with the sandbox's root `ctx`
 * (open; closed here, the worker keeps its copy), watching the sandbox. */
static int fs_ctx_fork(struct fs_ctx *ctx, struct sandbox *sb, fs_worker_run_fn run, fs_worker_done_fn done,
                       void *data, struct fs_worker **worker, nsbox_error_t **err)
{
        ctx->watch_fd = sb->pidfd ? sb->pidfd->fd : -1;
        int keep[] = { ctx->root, ctx->watch_fd };
        int r = fs_worker_start(keep, ARRAY_SIZE(keep), run, done, data, worker, err);
        fs_ctx_close(ctx);
        return r;
}

/* Start `run` in a worker on a job whose ctx is open; the job is the
 * worker's from here on (answered and freed by fs_job_done). */
static void fs_job_start(struct fs_job *job, struct sandbox *sb, fs_worker_run_fn run)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_worker *worker;
        int r = fs_ctx_fork(&job->ctx, sb, run, fs_job_done, job, &worker, &err);
        if (r < 0) {
                rpc_reply_fail(job->req, "busy", "%s: %s", job->path.shown,
                               err ? err->message : strerror(-r));
                free(job);
                return;
        }
        /* Nobody will read a listing or a file whose client has gone: stop
         * the worker. Writes and removes run to their end. */
        if (run == fs_list_run || run == fs_read_run)
                rpc_request_on_disconnect(job->req, fs_job_client_gone, worker);
}

static struct fs_job *fs_job_new(struct rpc_request *req, const struct fs_path *path,
                                 const struct fs_ctx *ctx)
{
        struct fs_job *job = calloc(1, sizeof(*job));
        if (job == NULL) {
                struct fs_ctx copy = *ctx;
                fs_ctx_close(&copy);
                rpc_reply_fail(req, "internal", "out of memory");
                return NULL;
        }
        job->req = req;
        job->path = *path;
        job->ctx = *ctx;
        return job;
}

/* ---- list ---- */

static int fs_name_compare(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* All names of a directory (up to FS_LIST_SCAN_MAX), sorted; the first
 * max_entries of them described. Sorting the whole directory makes a
 * truncated listing the same prefix each time, not a random hash order. */
static int fs_list_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_job *job = data;
        const struct fs_path *p = &job->path;
        _cleanup_close_ int fd = fs_openat2(job->ctx.root, p->rel, O_RDONLY | O_DIRECTORY, 0, FS_RESOLVE);
        if (fd < 0)
                return fs_resolve_error(err, -fd, p->shown);
        _cleanup_free_ char *buf = malloc(FS_DIRENT_BUFFER);
        char **names = NULL;
        size_t n = 0, cap = 0;
        bool scan_cut = false;
        int r = buf ? 0 : nsbox_error(err, ENOMEM, "list %s", p->shown);
        while (r == 0 && !scan_cut) {
                long got = syscall(SYS_getdents64, fd, buf, FS_DIRENT_BUFFER);
                if (got < 0) {
                        r = nsbox_error(err, errno, "read directory %s", p->shown);
                        break;
                }
                if (got == 0)
                        break;
                for (long off = 0; off < got;) {
                        struct fs_dirent64 *d = (struct fs_dirent64 *)(buf + off);
                        off += d->d_reclen;
                        if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                                continue;
                        if (n == FS_LIST_SCAN_MAX) {
                                scan_cut = true;
                                break;
                        }
                        if (n == cap) {
                                size_t grown = cap ? cap * 2 : 256;
                                char **bigger = realloc(names, grown * sizeof(*names));
                                if (bigger == NULL) {
                                        r = nsbox_error(err, ENOMEM, "list %s", p->shown);
                                        break;
                                }
                                names = bigger;
                                cap = grown;
                        }
                        if ((names[n] = strdup(d->d_name)) == NULL) {
                                r = nsbox_error(err, ENOMEM, "list %s", p->shown);
                                break;
                        }
                        n++;
                }
        }
        /* The child exits right after: the names are not freed one by one. */
        if (r < 0)
                return r;
        if (n > 0)
                qsort(names, n, sizeof(*names), fs_name_compare);
        json_t *list = json_array();
        for (size_t i = 0; i < n && json_array_size(list) < job->max_entries; i++) {
                struct stat st;
                /* lstat semantics: a symlink is listed, never followed. */
                if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* removed meanwhile */
                json_array_append_new(list, fs_stat_json(&job->ctx, names[i], strlen(names[i]), &st));
        }
        out->result =
            json_pack("{s:s, s:b, s:I, s:I}", "path", p->shown, "truncated", scan_cut || n > job->max_entries,
                      "total_entries", (json_int_t)n, "max_entries", (json_int_t)job->max_entries);
        out->parts_key = "entries";
        out->parts = list;
        return out->result ? 0 : nsbox_error(err, ENOMEM, "list %s", p->shown);
}

void fs_method_list(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "max_entries", NULL };
        if (!rpc_check_fields(req, known))
                return;
        size_t max_entries = FS_LIST_DEFAULT_ENTRIES;
        json_t *v = json_object_get(req->msg.params, "max_entries");
        if (v != NULL && !json_is_null(v)) {
                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    json_integer_value(v) > FS_LIST_MAX_ENTRIES) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "max_entries must be an integer from 0 to %d", FS_LIST_MAX_ENTRIES);
                        return;
                }
                max_entries = (size_t)json_integer_value(v);
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, ".", &path, &ctx))
                return;
        /* A directory can hold millions of entries: never read on the loop. */
        struct fs_job *job = fs_job_new(req, &path, &ctx);
        if (job == NULL)
                return;
        job->max_entries = max_entries;
        fs_job_start(job, sb, fs_list_run);
}

/* ---- read ---- */

static json_t *fs_read_result_json(const struct fs_read_result *res, bool base64)
{
        return json_pack("{s:s, s:I, s:b}", "encoding", base64 ? "base64" : "utf-8", "size",
                         (json_int_t)res->size, "truncated", res->truncated);
}

static int fs_read_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_job *job = data;
        struct fs_read_result res = { 0 };
        int r = fs_read_at(&job->ctx, &job->path, job->offset, job->max_bytes, &res, err);
        if (r < 0)
                return r;
        size_t out_len;
        char *text = job->base64 ? base64_encode(res.data, res.len, &out_len)
                                 : utf8_make_valid(res.data, res.len, &out_len);
        if (text == NULL)
                return nsbox_error(err, ENOMEM, "encode %s", job->path.shown);
        out->result = fs_read_result_json(&res, job->base64);
        out->raw_key = "content";
        out->raw = text;
        out->raw_len = out_len;
        return 0;
}

/* Whether what is to read of the regular file at p from `offset` on is
 * more than what is read on the loop. */
static bool fs_read_is_large(const struct fs_ctx *ctx, const struct fs_path *p, uint64_t offset)
{
        _cleanup_close_ int fd = fs_openat2(ctx->root, p->rel, O_PATH, 0, FS_RESOLVE);
        struct stat st;
        return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
               (uint64_t)st.st_size > offset + FS_INLINE_BYTES;
}

void fs_method_read(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "encoding", "max_bytes", "offset", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool base64;
        if (!rpc_check_fields(req, known) || !fs_get_base64(req, &base64))
                return;
        uint64_t offset = 0;
        json_t *o = json_object_get(req->msg.params, "offset");
        if (o != NULL && !json_is_null(o)) {
                if (!json_is_integer(o) || json_integer_value(o) < 0) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "offset must be a non-negative integer");
                        return;
                }
                offset = (uint64_t)json_integer_value(o);
        }
        size_t max_bytes = FS_READ_DEFAULT_BYTES;
        json_t *v = json_object_get(req->msg.params, "max_bytes");
        if (v != NULL && !json_is_null(v)) {
                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    json_integer_value(v) > (json_int_t)FS_READ_MAX_BYTES) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "max_bytes must be an integer from 0 to %u", FS_READ_MAX_BYTES);
                        return;
                }
                max_bytes = (size_t)json_integer_value(v);
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        if (max_bytes > FS_INLINE_BYTES && fs_read_is_large(&ctx, &path, offset)) {
                struct fs_job *job = fs_job_new(req, &path, &ctx);
                if (job == NULL)
                        return;
                job->max_bytes = max_bytes;
                job->offset = offset;
                job->base64 = base64;
                fs_job_start(job, sb, fs_read_run);
                return;
        }
        struct fs_read_result res = { 0 };
        int r = fs_read_at(&ctx, &path, offset, max_bytes, &res, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        _cleanup_free_ char *data = res.data;
        size_t out_len;
        _cleanup_free_ char *text =
            base64 ? base64_encode(data, res.len, &out_len) : utf8_make_valid(data, res.len, &out_len);
        if (text == NULL) {
                rpc_reply_fail(req, "internal", "out of memory encoding %s", path.shown);
                return;
        }
        json_t *result = fs_read_result_json(&res, base64);
        json_object_set_new(result, "content", json_stringn(text, out_len));
        rpc_reply_result(req, result);
}

/* ---- write ---- */

static int fs_write_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_job *job = data;
        const char *content = job->content;
        size_t len = job->content_len;
        char *decoded = NULL;
        if (job->base64) {
                decoded = base64_decode(content, len, &len);
                if (decoded == NULL)
                        return nsbox_refuse(err, FS_JOB_INVALID_CONTENT, "content is not valid base64");
                content = decoded;
        }
        int r = fs_write_at(&job->ctx, &job->path, content, len, &job->opts, err);
        if (r < 0)
                return r;
        out->result = json_pack("{s:s, s:I}", "path", job->path.shown, "bytes_written", (json_int_t)len);
        return 0;
}

void fs_method_write(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path",   "content", "encoding",
                                             "mode",       "append", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_write_options opts = { .parents = true };
        bool base64;
        if (!rpc_check_fields(req, known) || !fs_get_base64(req, &base64) ||
            !rpc_get_bool(req, "append", &opts.append))
                return;
        json_t *content = json_object_get(req->msg.params, "content");
        if (!json_is_string(content)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "content must be a string");
                return;
        }
        json_t *mode = json_object_get(req->msg.params, "mode");
        if (mode != NULL && !json_is_null(mode)) {
                if (!json_is_integer(mode) || json_integer_value(mode) < 0 ||
                    json_integer_value(mode) > 07777) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "mode must be an integer from 0 to 0o7777");
                        return;
                }
                opts.mode = (mode_t)json_integer_value(mode);
                opts.mode_set = true;
        }
        const char *data = json_string_value(content);
        size_t len = json_string_length(content);
        if (len > FS_INLINE_BYTES) {
                /* Decoding and writing tens of MB: in a worker. */
                struct fs_path path;
                struct fs_ctx ctx;
                if (!fs_begin(req, sb, NULL, &path, &ctx))
                        return;
                struct fs_job *job = fs_job_new(req, &path, &ctx);
                if (job == NULL)
                        return;
                job->content = data;
                job->content_len = len;
                job->base64 = base64;
                job->opts = opts;
                fs_job_start(job, sb, fs_write_run);
                return;
        }
        _cleanup_free_ char *decoded = NULL;
        if (base64) {
                decoded = base64_decode(data, len, &len);
                if (decoded == NULL) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "content is not valid base64");
                        return;
                }
                data = decoded;
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        int r = fs_write_at(&ctx, &path, data, len, &opts, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        rpc_reply_result(req, json_pack("{s:s, s:I}", "path", path.shown, "bytes_written", (json_int_t)len));
}

/* ---- remove ---- */

/* A tree can be any size or depth: its walk has a worker to itself, whose
 * fd limit allows one open directory per level. */
static int fs_remove_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_job *job = data;
        struct rlimit lim;
        rlim_t want = FS_TREE_MAX_DEPTH + 64;
        if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < want) {
                lim.rlim_cur = want;
                if (lim.rlim_max < want)
                        lim.rlim_max = want;
                setrlimit(RLIMIT_NOFILE, &lim);
        }
        int r = fs_remove_at(&job->ctx, &job->path, true, err);
        if (r < 0)
                return r;
        out->result = json_pack("{s:s, s:b}", "path", job->path.shown, "removed", 1);
        return 0;
}

void fs_method_remove(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "recursive", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool recursive;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "recursive", &recursive))
                return;
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        if (recursive) {
                struct fs_job *job = fs_job_new(req, &path, &ctx);
                if (job != NULL)
                        fs_job_start(job, sb, fs_remove_run);
                return;
        }
        int r = fs_remove_at(&ctx, &path, false, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        rpc_reply_result(req, json_pack("{s:s, s:b}", "path", path.shown, "removed", 1));
}

void fs_method_mkdir(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "parents", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool parents;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "parents", &parents))
                return;
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        bool created;
        int r = fs_mkdir_at(&ctx, &path, parents, &created, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        rpc_reply_result(req, json_pack("{s:s, s:b}", "path", path.shown, "created", created));
}

void fs_method_stat(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_path path;
        struct fs_ctx ctx;
        if (!rpc_check_fields(req, known) || !fs_begin(req, sb, NULL, &path, &ctx))
                return;
        /* O_PATH | O_NOFOLLOW: a final symlink is described, not followed. */
        _cleanup_close_ int fd = fs_openat2(ctx.root, path.rel, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE);
        struct stat st;
        int r = fd < 0 ? fs_resolve_error(&err, -fd, path.shown)
                       : (fstat(fd, &st) < 0 ? nsbox_error(&err, errno, "stat %s", path.shown) : 0);
        if (r < 0) {
                fs_ctx_close(&ctx);
                fs_reply_failure(req, r, err);
                return;
        }
        const char *name = path.name ? path.name : (strcmp(path.rel, ".") == 0 ? "/" : path.rel);
        json_t *result = fs_stat_json(&ctx, name, strlen(name), &st);
        json_object_set_new(result, "path", json_string(path.shown));
        json_object_set_new(result, "uid", json_integer(fs_sandbox_id(&ctx, st.st_uid)));
        json_object_set_new(result, "gid", json_integer(fs_sandbox_id(&ctx, st.st_gid)));
        if (S_ISLNK(st.st_mode)) {
                char target[FS_PATH_MAX + 1];
                ssize_t n = readlinkat(fd, "", target, sizeof(target) - 1);
                if (n >= 0)
                        json_object_set_new(result, "target", fs_json_string(target, (size_t)n));
        }
        fs_ctx_close(&ctx);
        rpc_reply_result(req, result);
}

/* ---- rename, symlink, chmod ---- */

/* The entry `p` names, held without following it, in its parent `parent`
 * (opened by fs_open_parent). A mount point (the sandbox's /proc, a bind
 * mount) is refused: renaming or re-moding one is never the client's to do. */
static int fs_open_entry(int parent, const struct fs_path *p, const char *what, int *out, struct stat *st,
                         nsbox_error_t **err)
{
        int fd = fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        if (fd == -EXDEV)
                return nsbox_refuse(err, EXDEV, "refusing to %s %s: it is a mount point", what, p->shown);
        if (fd < 0)
                return fs_resolve_error(err, -fd, p->shown);
        if (fstat(fd, st) < 0) {
                int e = errno;
                close(fd);
                return nsbox_error(err, e, "stat %s", p->shown);
        }
        if (p->dir_only && !S_ISDIR(st->st_mode)) {
                close(fd);
                return nsbox_refuse(err, ENOTDIR, "%s is not a directory", p->shown);
        }
        *out = fd;
        return 0;
}

/* Both ends are resolved to a parent directory fd inside the root and the
 * last components are renamed between those fds, so neither a symlink in
 * `from`/`to` nor one swapped in meanwhile moves anything out of (or into)
 * the sandbox. The parents of `to` must exist, as for rename(2). */
static int fs_rename_at(const struct fs_ctx *ctx, const struct fs_path *from, const struct fs_path *to,
                        bool overwrite, nsbox_error_t **err)
{
        if (from->name == NULL || strcmp(from->name, "..") == 0)
                return nsbox_refuse(err, EINVAL, "refusing to rename %s", from->shown);
        if (to->name == NULL || strcmp(to->name, "..") == 0)
                return nsbox_refuse(err, EINVAL, "refusing to rename onto %s", to->shown);
        _cleanup_close_ int from_parent = -1, to_parent = -1, entry = -1;
        int r = fs_open_parent(ctx, from, false, &from_parent, err);
        if (r < 0)
                return r;
        struct stat st;
        r = fs_open_entry(from_parent, from, "rename", &entry, &st, err);
        if (r < 0)
                return r;
        r = fs_open_parent(ctx, to, false, &to_parent, err);
        if (r < 0)
                return r;
        if (renameat2(from_parent, from->name, to_parent, to->name, overwrite ? 0 : RENAME_NOREPLACE) == 0)
                return 0;
        switch (errno) {
        case EEXIST:
                return nsbox_refuse(err, EEXIST, "%s already exists (set overwrite to replace it)",
                                    to->shown);
        case ENOTEMPTY:
                return nsbox_refuse(err, ENOTEMPTY, "%s is a directory that is not empty", to->shown);
        case EISDIR:
                return nsbox_refuse(err, EISDIR, "%s is a directory and %s is not", to->shown, from->shown);
        case ENOTDIR:
                return nsbox_refuse(err, ENOTDIR, "%s is a directory and %s is not", from->shown, to->shown);
        case EINVAL:
                return nsbox_refuse(err, EINVAL, "cannot move %s into itself (%s)", from->shown, to->shown);
        case EXDEV:
                /* overlayfs without redirect_dir cannot rename a directory
                 * that comes from the image; mount points are other file
                 * systems. */
                return nsbox_refuse(err, EXDEV,
                                    "cannot rename %s to %s: a directory from the image, or a move between "
                                    "file systems (copy and remove instead)",
                                    from->shown, to->shown);
        case ENOSPC:
        case EDQUOT:
                return nsbox_refuse(err, ENOSPC, "rename %s: no space left in the sandbox (disk_bytes=%llu)",
                                    from->shown, ctx->disk_bytes);
        default:
                return nsbox_error(err, errno, "rename %s to %s", from->shown, to->shown);
        }
}

void fs_method_rename(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "from", "to", "overwrite", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool overwrite;
        struct fs_path from, to;
        struct fs_ctx ctx;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "overwrite", &overwrite) ||
            !fs_get_path(req, "from", NULL, &from) || !fs_get_path(req, "to", NULL, &to))
                return;
        int r = fs_ctx_open(sb, &ctx, &err);
        if (r == 0)
                r = fs_rename_at(&ctx, &from, &to, overwrite, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        rpc_reply_result(req, json_pack("{s:s, s:s}", "from", from.shown, "to", to.shown));
}

/* The link's own path is resolved like any other (its parent inside the
 * root, its name never followed); the target is stored as given, since the
 * sandbox resolves it later in its own root, as the kernel always does. */
static int fs_symlink_at(const struct fs_ctx *ctx, const char *target, const struct fs_path *p,
                         bool overwrite, nsbox_error_t **err)
{
        if (p->name == NULL || strcmp(p->name, "..") == 0 || p->dir_only)
                return nsbox_refuse(err, EINVAL, "refusing to create a symlink at %s", p->shown);
        _cleanup_close_ int parent = -1;
        int r = fs_open_parent(ctx, p, false, &parent, err);
        if (r < 0)
                return r;
        for (int attempt = 0; symlinkat(target, parent, p->name) < 0; attempt++) {
                if (errno == ENOSPC || errno == EDQUOT)
                        return nsbox_refuse(err, ENOSPC,
                                            "symlink %s: no space left in the sandbox (disk_bytes=%llu)",
                                            p->shown, ctx->disk_bytes);
                if (errno != EEXIST)
                        return nsbox_error(err, errno, "symlink %s", p->shown);
                if (!overwrite)
                        return nsbox_refuse(err, EEXIST, "%s already exists (set overwrite to replace it)",
                                            p->shown);
                if (attempt >= FS_RESOLVE_RETRIES)
                        return nsbox_refuse(err, EAGAIN, "%s: the sandbox kept recreating the path",
                                            p->shown);
                /* As ln -sf: a file or link is replaced, a directory is not. */
                _cleanup_close_ int old = -1;
                struct stat st;
                r = fs_open_entry(parent, p, "replace", &old, &st, err);
                if (r < 0)
                        return r;
                if (S_ISDIR(st.st_mode))
                        return nsbox_refuse(err, EISDIR, "%s is a directory", p->shown);
                if (unlinkat(parent, p->name, 0) < 0 && errno != ENOENT)
                        return nsbox_error(err, errno, "replace %s", p->shown);
        }
        _cleanup_close_ int link = fs_openat2(parent, p->name, O_PATH | O_NOFOLLOW, 0, FS_RESOLVE_ENTRY);
        struct stat st;
        if (link < 0 || fstat(link, &st) < 0 || !S_ISLNK(st.st_mode) || st.st_uid != 0)
                return 0; /* swapped already: the sandbox's own business */
        if (fchownat(link, "", ctx->uid, ctx->gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
                return nsbox_error(err, errno, "chown %s to the sandbox user", p->shown);
        return 0;
}

void fs_method_symlink(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "target", "path", "overwrite", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool overwrite;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "overwrite", &overwrite))
                return;
        json_t *target = json_object_get(req->msg.params, "target");
        if (!json_is_string(target)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "target must be a string");
                return;
        }
        size_t len = json_string_length(target);
        if (len == 0 || len >= FS_PATH_MAX || memchr(json_string_value(target), '\0', len) != NULL) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "target must be 1 to %d bytes without a NUL byte", FS_PATH_MAX - 1);
                return;
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        int r = fs_symlink_at(&ctx, json_string_value(target), &path, overwrite, &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        rpc_reply_result(req, json_pack("{s:s, s:O}", "path", path.shown, "target", target));
}

/* setuid and setgid bits are refused: on a file of the sandbox's root they
 * would hand the sandbox user that root, which the client may not mean. */
#define FS_CHMOD_ALLOWED 01777

static int fs_chmod_at(const struct fs_ctx *ctx, const struct fs_path *p, mode_t mode, nsbox_error_t **err)
{
        /* A final symlink is followed, inside the root, as chmod(1) does. */
        _cleanup_close_ int fd = fs_openat2(ctx->root, p->rel, O_PATH, 0, FS_RESOLVE);
        if (fd < 0)
                return fs_resolve_error(err, -fd, p->shown);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return nsbox_error(err, errno, "stat %s", p->shown);
        if (p->dir_only && !S_ISDIR(st.st_mode))
                return nsbox_refuse(err, ENOTDIR, "%s is not a directory", p->shown);
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
                return fs_refuse_type(err, st.st_mode, p->shown);
        /* fchmod does not take O_PATH fds; nsboxd's own /proc reaches the
         * inode already resolved, with no path walk left. */
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        if (chmod(proc, mode) < 0)
                return nsbox_error(err, errno, "chmod %s", p->shown);
        return 0;
}

void fs_method_chmod(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "mode", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        json_t *mode = json_object_get(req->msg.params, "mode");
        if (!json_is_integer(mode) || json_integer_value(mode) < 0 ||
            (json_integer_value(mode) & ~(json_int_t)FS_CHMOD_ALLOWED) != 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "mode must be an integer from 0 to 0o1777 (setuid and setgid are refused)");
                return;
        }
        struct fs_path path;
        struct fs_ctx ctx;
        if (!fs_begin(req, sb, NULL, &path, &ctx))
                return;
        int r = fs_chmod_at(&ctx, &path, (mode_t)json_integer_value(mode), &err);
        fs_ctx_close(&ctx);
        if (r < 0) {
                fs_reply_failure(req, r, err);
                return;
        }
        rpc_reply_result(req, json_pack("{s:s, s:I}", "path", path.shown, "mode", json_integer_value(mode)));
}

/* ---- helpers for python.run ---- */

/* ---- python.run's files ---- */

/* fs_write_file's write, with the sandbox's root already pinned. */
static int fs_write_path(struct fs_ctx *ctx, const char *path, const void *data, size_t len, mode_t mode,
                         nsbox_error_t **err)
{
        struct fs_path p;
        struct fs_write_options opts = { .mode = mode, .mode_set = true, .parents = true };
        int r = fs_path_parse(path, strlen(path), &p, err);
        return r < 0 ? r : fs_write_at(ctx, &p, data, len, &opts, err);
}

/* A value of `files`: text, or {content, encoding?} whose content may be
 * base64. */
static json_t *fs_files_content(json_t *v)
{
        return json_is_object(v) ? json_object_get(v, "content") : v;
}

static int fs_files_write(struct fs_ctx *ctx, json_t *files, nsbox_error_t **err)
{
        const char *key;
        json_t *v;
        json_object_foreach(files, key, v)
        {
                const char *text = json_string_value(fs_files_content(v));
                size_t len = json_string_length(fs_files_content(v));
                const char *encoding = json_string_value(json_object_get(v, "encoding"));
                _cleanup_free_ char *decoded = NULL;
                if (json_is_object(v) && encoding != NULL && strcmp(encoding, "base64") == 0) {
                        decoded = base64_decode(text, len, &len);
                        if (decoded == NULL)
                                return base64_valid(text, len)
                                           ? nsbox_error(err, ENOMEM, "files[\"%.200s\"]: decode", key)
                                           : nsbox_refuse(err, FS_JOB_INVALID_CONTENT,
                                                          "files[\"%.100s\"]: content is not valid base64",
                                                          key);
                        text = decoded;
                }
                int r = fs_write_path(ctx, key, text, len, 0644, err);
                if (r < 0) {
                        nsbox_error_wrap(err, "write files[\"%.200s\"]", key);
                        return r;
                }
        }
        return 0;
}

struct fs_files_job {
        struct fs_ctx ctx;
        json_t *files;
        fs_files_done_fn done;
        void *data;
};

static int fs_files_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct fs_files_job *job = data;
        int r = fs_files_write(&job->ctx, job->files, err);
        if (r == 0 && (out->result = json_object()) == NULL)
                r = nsbox_error(err, ENOMEM, "files");
        return r;
}

static void fs_files_job_done(void *data, int r, json_t *result, const char *message)
{
        struct fs_files_job *job = data;
        json_decref(result);
        json_decref(job->files);
        job->done(job->data, r < 0 ? message : NULL, r == -FS_JOB_INVALID_CONTENT);
        free(job);
}

bool fs_files_inline(json_t *files)
{
        size_t total = 0;
        const char *key;
        json_t *v;
        json_object_foreach(files, key, v) total += json_string_length(fs_files_content(v));
        return total <= FS_INLINE_BYTES;
}

void fs_write_files(struct sandbox *sb, json_t *files, fs_files_done_fn done, void *data)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_ctx ctx;
        int r = fs_ctx_open(sb, &ctx, &err);
        if (r == 0 && fs_files_inline(files)) {
                r = fs_files_write(&ctx, files, &err);
                fs_ctx_close(&ctx);
        } else if (r == 0) {
                /* Decoding and writing tens of MB: in a worker. */
                struct fs_files_job *job = calloc(1, sizeof(*job));
                if (job == NULL) {
                        fs_ctx_close(&ctx);
                        r = nsbox_error(&err, ENOMEM, "files");
                } else {
                        *job = (struct fs_files_job){ ctx, json_incref(files), done, data };
                        r = fs_ctx_fork(&job->ctx, sb, fs_files_run, fs_files_job_done, job, NULL, &err);
                        if (r == 0)
                                return;
                        json_decref(job->files);
                        free(job);
                }
        }
        done(data, r < 0 ? (err ? err->message : strerror(-r)) : NULL, r == -FS_JOB_INVALID_CONTENT);
}

static int fs_begin_internal(struct sandbox *sb, const char *path, struct fs_path *p, struct fs_ctx *ctx,
                             nsbox_error_t **err)
{
        int r = fs_path_parse(path, strlen(path), p, err);
        if (r < 0)
                return r;
        return fs_ctx_open(sb, ctx, err);
}

int fs_write_file(struct sandbox *sb, const char *path, const void *data, size_t len, mode_t mode,
                  nsbox_error_t **err)
{
        struct fs_ctx ctx;
        int r = fs_ctx_open(sb, &ctx, err);
        if (r < 0)
                return r;
        r = fs_write_path(&ctx, path, data, len, mode, err);
        fs_ctx_close(&ctx);
        return r;
}

int fs_read_file(struct sandbox *sb, const char *path, size_t max_bytes, char **data, size_t *len,
                 nsbox_error_t **err)
{
        struct fs_path p;
        struct fs_ctx ctx;
        int r = fs_begin_internal(sb, path, &p, &ctx, err);
        if (r < 0)
                return r;
        struct fs_read_result res = { 0 };
        r = fs_read_at(&ctx, &p, 0, max_bytes, &res, err);
        fs_ctx_close(&ctx);
        if (r < 0)
                return r;
        if (res.truncated) {
                /* A cut report or PNG is worse than none: callers skip it. */
                free(res.data);
                return nsbox_error(err, EFBIG, "%s is larger than %zu bytes", path, max_bytes);
        }
        *data = res.data;
        *len = res.len;
        return 0;
}

int fs_remove_file(struct sandbox *sb, const char *path, nsbox_error_t **err)
{
        struct fs_path p;
        struct fs_ctx ctx;
        int r = fs_begin_internal(sb, path, &p, &ctx, err);
        if (r < 0)
                return r;
        r = fs_remove_at(&ctx, &p, false, err);
        fs_ctx_close(&ctx);
        return r == -ENOENT ? 0 : r;
}
