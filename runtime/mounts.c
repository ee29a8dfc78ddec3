/* SPDX-License-Identifier: Apache-2.0 */
/* Mounts inside a new sandbox: its root, /proc, /dev, masked paths, read-only binds. */
#include "mounts.h"
#include "sandbox_limits.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"

#define PROC_FLAGS (MS_NOSUID | MS_NODEV | MS_NOEXEC)

#define MOUNTS_MAX_PTYS 64
#define STRINGIFY_(x)   #x
#define STRINGIFY(x)    STRINGIFY_(x)

/* As Docker and runc mask them: kernel memory, keys, timers and scheduler
 * internals of the host, and the trigger that reboots it; and what
 * identifies the host or its boot: the kernel's command line (root device,
 * console, sometimes secrets), its build configuration, and the boot id. */
static const char *const masked_files[] = {
        "proc/kcore",
        "proc/keys",
        "proc/latency_stats",
        "proc/timer_list",
        "proc/timer_stats",
        "proc/sched_debug",
        "proc/sysrq-trigger",
        "proc/kallsyms",
        "proc/kmsg",
        "proc/config.gz",
        "proc/pagetypeinfo",
        "proc/slabinfo",
        "proc/vmallocinfo",
        "proc/buddyinfo",
        "proc/zoneinfo",
        "proc/cmdline",
        "proc/sys/kernel/random/boot_id",
};
/* sysfs files after /sys is mounted: the physical address of the kernel's
 * crash-dump note, the kernel image's build id, and the host's kernel
 * event counter. */
static const char *const masked_sys_files[] = {
        "sys/kernel/vmcoreinfo",
        "sys/kernel/notes",
        "sys/kernel/uevent_seqnum",
};
static const char *const masked_dirs[] = {
        "proc/acpi",
        "proc/asound",
        "proc/scsi",
        "proc/driver",
        "sys/firmware",
        "sys/devices/virtual/powercap",
        "sys/kernel/debug",
        "sys/kernel/tracing",
        "sys/kernel/security",
        "sys/fs/bpf",
        "sys/devices/virtual/dmi", /* the machine's vendor, model, serial */
};
static const char *const readonly_dirs[] = {
        "proc/sys",
        "proc/bus",
        "proc/fs",
        "proc/irq",
};
const char *const mounts_device_nodes[MOUNTS_DEVICE_NODES] = { "null",   "zero",    "full",
                                                               "random", "urandom", "tty" };

static int path_exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

static int mask_file(const char *root, const char *rel, nsbox_error_t **err)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", root, rel);
        if (!path_exists(path))
                return 0;
        if (mount("/dev/null", path, NULL, MS_BIND, NULL) < 0)
                return nsbox_error(err, errno, "mask %s", rel);
        return 0;
}

/* The masked directories show one empty, read-only tmpfs: mounted on the
 * first of them, bound onto the rest. Every superblock costs the kernel a
 * shrinker whose per-memory-cgroup arrays grow with the host's count of
 * both, so a tmpfs for each (seven of them) made every create slower the
 * more sandboxes were live. */
static int mask_dirs(const char *root, nsbox_error_t **err)
{
        char first[4096] = "";
        for (size_t i = 0; i < ARRAY_SIZE(masked_dirs); i++) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", root, masked_dirs[i]);
                if (!path_exists(path))
                        continue;
                if (first[0] == '\0') {
                        if (mount("tmpfs", path, "tmpfs", MS_RDONLY | PROC_FLAGS,
                                  "size=4k,nr_inodes=1,mode=0555") < 0)
                                return nsbox_error(err, errno, "mask %s", masked_dirs[i]);
                        snprintf(first, sizeof(first), "%s", path);
                        continue;
                }
                if (mount(first, path, NULL, MS_BIND, NULL) < 0)
                        return nsbox_error(err, errno, "mask %s", masked_dirs[i]);
                if (mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | PROC_FLAGS, NULL) < 0)
                        return nsbox_error(err, errno, "make the mask of %s read-only", masked_dirs[i]);
        }
        return 0;
}

static int bind_readonly(const char *root, const char *rel, nsbox_error_t **err)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", root, rel);
        if (!path_exists(path))
                return 0;
        if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0)
                return nsbox_error(err, errno, "bind %s", rel);
        if (mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | PROC_FLAGS, NULL) < 0)
                return nsbox_error(err, errno, "make %s read-only", rel);
        return 0;
}

/* inotify instances and watches are counted per user in each user
 * namespace and, a level up, against the namespace's owner: every sandbox's
 * inotify_init1 was charged to host root's 128 instances, so one sandbox
 * could leave the host's own services (systemd, root's daemons) without
 * inotify. The limits of the sandbox's namespace, written from inside it
 * with its CAP_SYS_RESOURCE, bound what it can take. Written through the
 * sandbox's own procfs: through the host's, /proc/sys/user's dentries of
 * every live user namespace share one hash chain, and each create walked
 * all of them (5 ms a create at 1000 live sandboxes). */
static int cap_namespace_pools(const char *proc, nsbox_error_t **err)
{
        static const struct {
                const char *path;
                unsigned value;
        } caps[] = {
                { "sys/user/max_inotify_instances", SANDBOX_INOTIFY_INSTANCES },
                { "sys/user/max_inotify_watches", SANDBOX_INOTIFY_WATCHES },
        };
        for (size_t i = 0; i < ARRAY_SIZE(caps); i++) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", proc, caps[i].path);
                _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd < 0 && errno == ENOENT)
                        continue; /* a kernel without that count */
                char text[16];
                int len = snprintf(text, sizeof(text), "%u", caps[i].value);
                if (fd < 0 || write(fd, text, len) != len)
                        return nsbox_error(err, errno, "write /proc/%s", caps[i].path);
        }
        return 0;
}

static int setup_proc(const char *root, nsbox_error_t **err)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/proc", root);
        mkdir(path, 0555);
        if (mount("proc", path, "proc", PROC_FLAGS, NULL) < 0)
                return nsbox_error(err, errno, "mount /proc");
        int r = cap_namespace_pools(path, err); /* before /proc/sys turns read-only */
        if (r < 0)
                return r;
        for (size_t i = 0; i < ARRAY_SIZE(readonly_dirs); i++) {
                r = bind_readonly(root, readonly_dirs[i], err);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < ARRAY_SIZE(masked_files); i++) {
                r = mask_file(root, masked_files[i], err);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int setup_sys(const char *root, nsbox_error_t **err)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/sys", root);
        if (!path_exists(path))
                return 0;
        /* Read-only, or absent where the kernel will not let a user
         * namespace mount it: both keep host state out of reach. */
        if (mount("sysfs", path, "sysfs", MS_RDONLY | PROC_FLAGS, NULL) < 0)
                return 0;
        for (size_t i = 0; i < ARRAY_SIZE(masked_sys_files); i++) {
                int r = mask_file(root, masked_sys_files[i], err);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int setup_dev(const char *root, uint64_t shm_bytes, nsbox_error_t **err)
{
        char dev[4096], path[4096], options[64];
        snprintf(dev, sizeof(dev), "%s/dev", root);
        mkdir(dev, 0755);
        if (mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=256k,nr_inodes=64") < 0)
                return nsbox_error(err, errno, "mount /dev");
        for (size_t i = 0; i < MOUNTS_DEVICE_NODES; i++) {
                char node[64];
                snprintf(node, sizeof(node), "/dev/%s", mounts_device_nodes[i]);
                snprintf(path, sizeof(path), "%s/%s", dev, mounts_device_nodes[i]);
                _cleanup_close_ int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
                if (fd < 0)
                        return nsbox_error(err, errno, "create /dev/%s", mounts_device_nodes[i]);
                if (mount(node, path, NULL, MS_BIND | MS_NOSUID | MS_NOEXEC, NULL) < 0)
                        return nsbox_error(err, errno, "bind /dev/%s", mounts_device_nodes[i]);
        }
        snprintf(path, sizeof(path), "%s/pts", dev);
        mkdir(path, 0755);
        /* A private devpts instance: the sandbox's ptys are its own, and at
         * most MOUNTS_MAX_PTYS of them. Every instance but the host's own
         * draws on one pool of kernel.pty.max - kernel.pty.reserve (3072 by
         * default): without a cap one sandbox empties it for all. */
        if (mount("devpts", path, "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=0620,max=" STRINGIFY(MOUNTS_MAX_PTYS)) < 0)
                return nsbox_error(err, errno, "mount /dev/pts");
        snprintf(path, sizeof(path), "%s/shm", dev);
        mkdir(path, 01777);
        snprintf(options, sizeof(options), "mode=1777,size=%llu", (unsigned long long)shm_bytes);
        if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) < 0)
                return nsbox_error(err, errno, "mount /dev/shm");

        static const char *const links[][2] = {
                { "pts/ptmx", "ptmx" },          { "/proc/self/fd", "fd" },
                { "/proc/self/fd/0", "stdin" },  { "/proc/self/fd/1", "stdout" },
                { "/proc/self/fd/2", "stderr" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
                snprintf(path, sizeof(path), "%s/%s", dev, links[i][1]);
                if (symlink(links[i][0], path) < 0)
                        return nsbox_error(err, errno, "symlink /dev/%s", links[i][1]);
        }
        if (mount(NULL, dev, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "mode=0755") < 0)
                return nsbox_error(err, errno, "make /dev read-only");
        return 0;
}

int mounts_enter_root(const char *root, uint64_t shm_bytes, nsbox_error_t **err)
{
        int r;

        if ((r = setup_proc(root, err)) < 0 || (r = setup_dev(root, shm_bytes, err)) < 0 ||
            (r = setup_sys(root, err)) < 0)
                return r;
        if ((r = mask_dirs(root, err)) < 0)
                return r;

        if (strcmp(root, ".") != 0 && chdir(root) < 0)
                return nsbox_error(err, errno, "chdir %s", root);
        /* chroot, not pivot_root (which walks every task of the host): the
         * mount namespace around the root is a copy of the base one, whose
         * tmpfs, empty procfs and sysfs hold nothing of the host's. Leaving
         * a chroot takes CAP_SYS_CHROOT: only the init and the supervisors
         * (nsbox's own code) keep it; no exec'd process has a capability,
         * and none may make a user namespace to get one (seccomp, and the
         * kernel refuses one to a chrooted process). */
        if (chroot(".") < 0)
                return nsbox_error(err, errno, "chroot into %s", root);
        if (chdir("/") < 0)
                return nsbox_error(err, errno, "chdir /");
        return 0;
}

int mounts_attach(int tree, const char *path, nsbox_error_t **err)
{
        struct open_how how = {
                .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH,
        };
        _cleanup_close_ int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0)
                return nsbox_error(err, errno, "open /");
        char name[4096];
        for (const char *p = path + 1; *p != '\0';) {
                size_t n = strcspn(p, "/");
                if (n == 0 || n >= sizeof(name))
                        return nsbox_error(err, EINVAL, "mount path %s", path);
                memcpy(name, p, n);
                name[n] = '\0';
                p += n + (p[n] == '/');
                int next = (int)syscall(SYS_openat2, dir, name, &how, sizeof(how));
                if (next < 0 && errno == ENOENT) {
                        if (mkdirat(dir, name, 0755) < 0 && errno != EEXIST)
                                return nsbox_error(err, errno, "make the mount point %s", path);
                        next = (int)syscall(SYS_openat2, dir, name, &how, sizeof(how));
                }
                if (next < 0)
                        return nsbox_error(
                            err, errno,
                            errno == ELOOP ? "mount point %s: a symlink on the way" : "mount point %s", path);
                close(dir);
                dir = next;
        }
        if (syscall(SYS_move_mount, tree, "", dir, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return nsbox_error(err, errno, "attach the mount at %s", path);
        return 0;
}
