/* SPDX-License-Identifier: Apache-2.0 */
/* How sandboxes get host uids: a range each (idmapped image) or one shared range. */
#include "uidmode.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/mount.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "config.h"
#include "daemon.h"
#include "host_mounts.h"
#include "log.h"
#include "rootfs.h"
#include "userns.h"

static bool shared;

bool uidmode_shared(void)
{
        return shared;
}

const char *uidmode_name(void)
{
        if (userns_active())
                return "userns";
        return shared ? "shared" : "per-sandbox";
}

uid_t uidmode_shared_base(void)
{
        /* In a user namespace: its own ids, the range the image is owned by. */
        return userns_active() ? 0 : nsboxd.config.uid_pool_base;
}

/* Can this kernel idmap a mount of the image dir? Try it through a user
 * namespace of one mapping. */
static int probe_idmapped_mounts(const char *dir, char *why, size_t why_len)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        uid_t base = nsboxd.config.uid_pool_base;
        _cleanup_close_ int userns = host_mount_userns(0, 0, base, base, &err);
        if (userns < 0) {
                snprintf(why, why_len, "%s", err->message);
                return -1;
        }
        _cleanup_close_ int tree =
            (int)syscall(SYS_open_tree, AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (tree < 0) {
                snprintf(why, why_len, "open_tree (kernel < 5.2?): %s", strerror(errno));
                return -1;
        }
        struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns };
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
                snprintf(why, why_len, "idmapped mounts of %s (kernel < 5.12 or filesystem without them): %s",
                         dir, strerror(errno));
                return -1;
        }
        return 0;
}

int uidmode_init(const char *wanted, nsbox_error_t **err)
{
        if (strcmp(wanted, "shared") != 0 && strcmp(wanted, "per-sandbox") != 0 &&
            strcmp(wanted, "auto") != 0)
                return nsbox_invalid(err, "uid_isolation must be \"per-sandbox\", \"shared\" or \"auto\"");
        if (userns_active()) {
                /* No host ranges to hand out, no idmapped mounts of host file
                 * systems: every sandbox maps the delegated range as is. */
                shared = true;
                log_info("uid isolation: userns (nsboxd is not host root): sandboxes share the ids of "
                         "nsboxd's user namespace");
                return 0;
        }
        if (strcmp(wanted, "shared") == 0) {
                shared = true;
                log_warn("uid isolation: shared (configured): all sandboxes share one host uid range");
                return 0;
        }
        char why[512];
        if (probe_idmapped_mounts(nsboxd.config.image_dir, why, sizeof(why)) == 0)
                return 0;
        if (strcmp(wanted, "auto") == 0) {
                shared = true;
                log_warn("uid isolation: shared, because this host cannot do per-sandbox ranges: %s", why);
                return 0;
        }
        return nsbox_error(err, ENOTSUP,
                           "per-sandbox uid ranges need idmapped mounts, which this host lacks (%s); set "
                           "uid_isolation to \"shared\" or \"auto\" to run with one shared range instead",
                           why);
}

static uid_t shift_by;

static int shift_owner(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        if (lchown(path, st->st_uid + shift_by, st->st_gid + shift_by) < 0)
                return -1;
        /* chown drops setuid bits; the image has none, but keep the mode exact. */
        if (type != FTW_SL && type != FTW_SLN && chmod(path, st->st_mode & 07777) < 0)
                return -1;
        return 0;
}

static int make_shifted_copy(const char *src, const char *dst, nsbox_error_t **err)
{
        _cleanup_free_ char *tmp = NULL;
        if (asprintf(&tmp, "%s.tmp", dst) < 0)
                return nsbox_error(err, ENOMEM, "path");
        rootfs_remove_dir(tmp, NULL);
        log_info("uid isolation shared: copying %s to %s owned by host uids %u+", src, dst,
                 nsboxd.config.uid_pool_base);
        char *const argv[] = { "cp", "-a", "--reflink=auto", "--", (char *)src, tmp, NULL };
        pid_t pid;
        int r = posix_spawn(&pid, "/bin/cp", NULL, NULL, argv, NULL);
        if (r != 0)
                return nsbox_error(err, r, "run cp");
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return nsbox_error(err, EIO, "copy %s to %s failed", src, tmp);
        shift_by = nsboxd.config.uid_pool_base;
        if (nftw(tmp, shift_owner, 64, FTW_PHYS | FTW_MOUNT) != 0)
                return nsbox_error(err, errno, "chown the copy %s", tmp);
        if (rename(tmp, dst) < 0)
                return nsbox_error(err, errno, "rename %s", tmp);
        return 0;
}

/* The image of a daemon in a user namespace is used as it is: its files
 * must be owned by ids of the namespace. Owners the namespace does not map
 * read as the overflow id (nobody), and overlayfs copies no such file up. */
static int check_image_owned_by_namespace(const char *rootfs, nsbox_error_t **err)
{
        struct stat st;
        if (stat(rootfs, &st) < 0)
                return nsbox_error(err, errno, "stat %s", rootfs);
        unsigned overflow = 65534;
        FILE *f = fopen("/proc/sys/kernel/overflowuid", "re");
        if (f != NULL) {
                if (fscanf(f, "%u", &overflow) != 1)
                        overflow = 65534;
                fclose(f);
        }
        if (st.st_uid == overflow)
                return nsbox_refuse(
                    err, EOVERFLOW,
                    "image %s is owned by a uid nsboxd's user namespace does not map (it shows "
                    "as %u): give nsboxd an image owned by its namespace's ids (an idmapped "
                    "mount, as a pod's runtime makes, or one unpacked inside the namespace)",
                    rootfs, overflow);
        return 0;
}

int uidmode_image_lower(const char *image, char *out, size_t len, nsbox_error_t **err)
{
        if (userns_active()) {
                snprintf(out, len, "%s/%s/rootfs", nsboxd.config.image_dir, image);
                return check_image_owned_by_namespace(out, err);
        }
        if (!shared) {
                snprintf(out, len, "%s/%s/rootfs", nsboxd.config.image_dir, image);
                return 0;
        }
        /* The copy is keyed by the image's manifest: a rebuilt image gets a new one. */
        char src[4096], manifest[4096], dir[4096];
        snprintf(src, sizeof(src), "%s/%s/rootfs", nsboxd.config.image_dir, image);
        snprintf(manifest, sizeof(manifest), "%s/%s/manifest.json", nsboxd.config.image_dir, image);
        struct stat st;
        if (stat(manifest, &st) < 0)
                return nsbox_error(err, errno, "stat %s", manifest);
        snprintf(dir, sizeof(dir), "%s/shifted", nsboxd.config.state_dir);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", dir);
        snprintf(out, len, "%s/%s-%lld-%u", dir, image, (long long)st.st_mtime, nsboxd.config.uid_pool_base);
        if (access(out, F_OK) == 0)
                return 0;
        return make_shifted_copy(src, out, err);
}
