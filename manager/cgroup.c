/* SPDX-License-Identifier: Apache-2.0 */
/* Resource limits of sandboxes.
 *
 * cgroup v2: nsboxd works inside the cgroup it was started in (a delegated
 * subtree, e.g. systemd Delegate=yes). It moves itself into a leaf of its own
 * so that the controllers can be enabled (no internal processes), then lays
 * out
 *     <own>/nsbox-<hash>/<sandbox id>/       limits: memory.max, memory.swap.max,
 *                                            pids.max, cpu.max
 *     <own>/nsbox-<hash>/<sandbox id>/init   every process of the sandbox, born
 *                                            there (CLONE_INTO_CGROUP)
 *
 * cgroup v1 / hybrid: the same layout under nsboxd's own cgroup in each of the
 * memory, pids, cpu and cpuacct hierarchies, with the init in the sandbox dir
 * itself.
 *
 * Pausing (sandbox.pause) freezes the sandbox's cgroup: cgroup.freeze on v2;
 * on v1 a dir <own freezer>/nsbox-<hash>/<sandbox id> made at the first pause
 * only, so that a sandbox never paused pays no extra cgroup move at create
 * (a v1 move waits for an RCU grace period). A frozen task sits in D state
 * and, on v1, does not even die of SIGKILL until thawed: a daemon killed
 * while sandboxes are paused leaves them frozen, so the next start thaws
 * every stale dir before it kills anything (clean_stale, the freezer
 * hierarchy first), and removal kills, then thaws.
 *
 * Execs get no cgroups of their own: their process trees are held together
 * by their supervisors (runtime/supervisor.c). A cgroup move waits for an RCU
 * grace period while it holds the cgroup mutex, which no exec should pay.
 *
 * <hash> is derived from the state dir, so that two daemons started from the
 * same cgroup (tests run several at once) never touch each other's trees.
 *
 * Under systemd's DelegateSubgroup= (the live-restore drop-in) nsboxd starts
 * in a subgroup of the cgroup delegated to its unit: <own> is then that
 * delegated cgroup, and the subgroup is nsboxd's leaf. systemd puts the next
 * nsboxd into the same subgroup, which never has controllers handed down, so
 * it can while the sandboxes' cgroups live on beside it (a process cannot
 * join a cgroup whose controllers are handed to its children).
 *
 * Under systemd with live restore (and no DelegateSubgroup=), <own> is a
 * transient scope beside nsboxd's unit, <slice>/nsbox-<hash>.scope, which
 * systemd makes on nsboxd's request and delegates to it (cgroup_scope.c):
 *     <scope>/holder                  the process that keeps the scope
 *     <scope>/nsbox-<hash>/<id>/...   the sandboxes, as above
 * nsboxd itself stays in its unit's cgroup, which never has controllers
 * handed down, so systemd can start the next nsboxd there while sandboxes
 * live. The next nsboxd finds the scope by its name and adopts what is in it;
 * one with live restore off removes it and what it holds. */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "cgroup_scope.h"
#include "cleanup.h"
#include "daemon.h"
#include "log.h"
#include "sandbox_limits.h"
#include "userns.h"

enum controller { CTRL_MEMORY, CTRL_PIDS, CTRL_CPU, CTRL_CPUACCT, CTRL_COUNT };

static const char *const controller_names[CTRL_COUNT] = { "memory", "pids", "cpu", "cpuacct" };

/* Controllers without which a sandbox would run with a limit unenforced. */
#define REQUIRED_CONTROLLERS ((1u << CTRL_MEMORY) | (1u << CTRL_PIDS) | (1u << CTRL_CPU))

/* One mounted hierarchy: its parent of the sandbox dirs, <own>/nsbox-<hash>. */
struct hierarchy {
        char *parent;
        unsigned controllers; /* bitmask of enum controller */
};

#define MAX_HIERARCHIES CTRL_COUNT
_Static_assert(MAX_HIERARCHIES <= CGROUP_MAX_HIERARCHIES, "cgroup.h's bound");

static struct {
        enum cgroup_mode mode;
        bool degraded;
        pid_t owner_pid; /* atexit runs in nsboxd only, not in forked children */
        char name[32];   /* nsbox-<hash> */
        struct hierarchy hier[MAX_HIERARCHIES];
        unsigned n_hier;
        int by_controller[CTRL_COUNT]; /* index into hier, or -1 */
        bool have_memsw, have_swap_max, have_kill;
        bool have_freeze;       /* v2: cgroup.freeze (5.2+) */
        bool in_subgroup;       /* v2: started in a DelegateSubgroup= of <own> */
        bool in_unit_cgroup;    /* v2: <own> is the cgroup systemd delegated, and nsboxd started in it */
        bool want_scope;        /* v2 under systemd: lay the sandboxes out in a scope of their own */
        char *scope;            /* v2: <own> when it is that scope, else NULL */
        char *freezer_parent;   /* v1: <own freezer cgroup>/nsbox-<hash>, or NULL */
        int freezer_hier;       /* v1: a hierarchy of ours the freezer is co-mounted with, or -1 */
        char why_degraded[512]; /* why limits are not enforced, when they are not */
} cg = { .mode = CGROUP_NONE, .degraded = true, .freezer_hier = -1 };

struct sandbox_cgroup {
        char *dir[MAX_HIERARCHIES]; /* <parent>/<id> in each hierarchy */
        char *freezer_dir;          /* v1: made at the first pause */
        int oom_fd;                 /* memory.oom_control (v1) or memory.events (v2), read twice per exec */
};

/* --- small file helpers ----------------------------------------------------
 */

static int write_string(const char *path, const char *value)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t len = strlen(value);
        ssize_t n = write(fd, value, len);
        if (n < 0)
                return -errno;
        return (size_t)n == len ? 0 : -EIO;
}

static int write_at(const char *dir, const char *file, const char *value)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        return write_string(path, value);
}

static ssize_t read_at(const char *dir, const char *file, char *buf, size_t size)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t len = 0;
        while (len + 1 < size) {
                ssize_t n = read(fd, buf + len, size - 1 - len);
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        buf[len] = '\0';
        return (ssize_t)len;
}

static bool exists_at(const char *dir, const char *file)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        return access(path, F_OK) == 0;
}

/* A file holding one number ("max" counts as unknown). */
static int read_u64_at(const char *dir, const char *file, uint64_t *out)
{
        char buf[64];
        if (dir == NULL || read_at(dir, file, buf, sizeof(buf)) <= 0)
                return -ENOENT;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(buf, &end, 10);
        if (errno != 0 || end == buf)
                return -EINVAL;
        *out = v;
        return 0;
}

/* A "key value" per line file (memory.events, cpu.stat, memory.oom_control). */
static int find_key(char *buf, const char *key, uint64_t *out)
{
        size_t klen = strlen(key);
        for (char *line = buf; line != NULL && *line != '\0';) {
                char *next = strchr(line, '\n');
                if (next != NULL)
                        *next++ = '\0';
                if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
                        *out = strtoull(line + klen + 1, NULL, 10);
                        return 0;
                }
                line = next;
        }
        return -ENOENT;
}

static int read_keyed_at(const char *dir, const char *file, const char *key, uint64_t *out)
{
        char buf[4096];
        if (dir == NULL || read_at(dir, file, buf, sizeof(buf)) < 0)
                return -ENOENT;
        return find_key(buf, key, out);
}

static void sleep_ms(long ms)
{
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}

/* --- killing and removing trees ------------------------------------------- */

/* SIGKILL every process listed in dir and below it; returns how many. */
static unsigned kill_listed(const char *dir)
{
        unsigned killed = 0;
        char path[4096];
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        FILE *f = fopen(path, "re");
        if (f != NULL) {
                long pid;
                while (fscanf(f, "%ld", &pid) == 1) {
                        if (pid > 0 && pid != getpid() && kill((pid_t)pid, SIGKILL) == 0)
                                killed++;
                }
                fclose(f);
        }
        DIR *d = opendir(dir);
        if (d == NULL)
                return killed;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                killed += kill_listed(path);
        }
        closedir(d);
        return killed;
}

/* SIGKILL everything in a cgroup tree. v2: cgroup.kill, atomic against forks.
 * v1: kill what is listed until nothing is left; a process forked between a
 * read of cgroup.procs and the kills is caught by the next round, and the
 * pids limit bounds how many there can be. */
static void kill_tree(const char *dir)
{
        if (cg.mode == CGROUP_V2 && cg.have_kill && write_at(dir, "cgroup.kill", "1") == 0)
                return;
        for (int i = 0; i < 200 && kill_listed(dir) > 0; i++)
                sleep_ms(1);
}

/* rmdir a cgroup and its children. A killed task leaves its cgroup when it
 * exits, a moment after the signal: retry briefly on EBUSY. */
static int remove_tree(const char *dir, int wait_ms)
{
        DIR *d = opendir(dir);
        if (d == NULL)
                return errno == ENOENT ? 0 : -errno;
        struct dirent *de;
        int r = 0;
        while ((de = readdir(d)) != NULL) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                int rr = remove_tree(path, wait_ms);
                if (rr < 0)
                        r = rr;
        }
        closedir(d);
        for (int waited = 0;; waited += 2) {
                if (rmdir(dir) == 0 || errno == ENOENT)
                        return 0;
                if (errno != EBUSY || waited >= wait_ms)
                        return r < 0 ? r : -errno;
                sleep_ms(2);
        }
}

/* --- discovery --------------------------------------------------------------
 */

static void hash_name(const char *state_dir, char *out, size_t len)
{
        /* FNV-1a: stable across runs and trivial to recompute in tests. */
        uint32_t h = 2166136261u;
        for (const unsigned char *p = (const unsigned char *)state_dir; *p; p++) {
                h ^= *p;
                h *= 16777619u;
        }
        snprintf(out, len, "nsbox-%08" PRIx32, h);
}

/* Our path in the v1 hierarchy of controller `want`, or in the unified
 * hierarchy ("0::path") when want is NULL. */
static char *own_cgroup_path(const char *want)
{
        FILE *f = fopen("/proc/self/cgroup", "re");
        if (f == NULL)
                return NULL;
        char line[4096];
        char *found = NULL;
        while (found == NULL && fgets(line, sizeof(line), f) != NULL) {
                line[strcspn(line, "\n")] = '\0';
                char *ctrls = strchr(line, ':');
                char *path = ctrls ? strchr(ctrls + 1, ':') : NULL;
                if (path == NULL)
                        continue;
                *ctrls++ = '\0';
                *path++ = '\0';
                if (want == NULL) {
                        if (strcmp(line, "0") == 0 && ctrls[0] == '\0')
                                found = strdup(path);
                        continue;
                }
                char *save = NULL;
                for (char *c = strtok_r(ctrls, ",", &save); c != NULL; c = strtok_r(NULL, ",", &save))
                        if (strcmp(c, want) == 0)
                                found = strdup(path);
        }
        fclose(f);
        return found;
}

/* Mount point of the cgroup2 fs (want == NULL) or of the v1 hierarchy with
 * controller `want`; *root is the mount's root within the hierarchy. */
static char *find_mount(const char *want, char **root, char **options)
{
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (f == NULL)
                return NULL;
        char *line = NULL;
        size_t cap = 0;
        char *found = NULL;
        while (found == NULL && getline(&line, &cap, f) > 0) {
                line[strcspn(line, "\n")] = '\0';
                char *sep = strstr(line, " - ");
                if (sep == NULL)
                        continue;
                *sep = '\0';
                char fstype[64], source[256], opts[1024];
                if (sscanf(sep + 3, "%63s %255s %1023s", fstype, source, opts) != 3)
                        continue;
                char mroot[4096], mpoint[4096];
                if (sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, mpoint) != 2)
                        continue;
                if (want == NULL) {
                        if (strcmp(fstype, "cgroup2") != 0)
                                continue;
                } else {
                        if (strcmp(fstype, "cgroup") != 0)
                                continue;
                        bool match = false;
                        char *save = NULL;
                        char copy[1024];
                        snprintf(copy, sizeof(copy), "%s", opts);
                        for (char *o = strtok_r(copy, ",", &save); o != NULL; o = strtok_r(NULL, ",", &save))
                                if (strcmp(o, want) == 0)
                                        match = true;
                        if (!match)
                                continue;
                }
                found = strdup(mpoint);
                *root = strdup(mroot);
                if (options != NULL)
                        *options = strdup(opts);
        }
        free(line);
        fclose(f);
        return found;
}

/* <mount point>/<own path relative to the mount's root> */
static char *join_own_dir(const char *mount_point, const char *mount_root, const char *own)
{
        const char *rel = own;
        size_t rlen = strlen(mount_root);
        if (strcmp(mount_root, "/") != 0 && strncmp(own, mount_root, rlen) == 0)
                rel = own + rlen;
        while (*rel == '/')
                rel++;
        char *dir;
        if (asprintf(&dir, "%s%s%s", mount_point, *rel ? "/" : "", rel) < 0)
                return NULL;
        return dir;
}

/* Thaw a cgroup and every cgroup below it, whichever freezer it has (none:
 * nothing to do). v1 children keep a FROZEN of their own when only their
 * parent is thawed, hence each dir. */
static void thaw_tree(const char *dir)
{
        write_at(dir, "freezer.state", "THAWED");
        write_at(dir, "cgroup.freeze", "0");
        DIR *d = opendir(dir);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                thaw_tree(path);
        }
        closedir(d);
}

static cgroup_keep_fn keep_stale;

void cgroup_keep_when(cgroup_keep_fn keep)
{
        keep_stale = keep;
}

/* Kill and remove what a previous nsboxd with the same state dir left behind
 * (it may have crashed with sandboxes running), but for the sandboxes keep
 * names (those live restore adopts; NULL keeps none): those are only thawed
 * (a pause does not outlive its nsboxd). */
static void clean_stale(const char *parent, cgroup_keep_fn keep)
{
        DIR *d = opendir(parent);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", parent, de->d_name);
                if (keep != NULL && keep(de->d_name)) {
                        thaw_tree(path);
                        continue;
                }
                log_warn("cgroup: removing stale %s", path);
                /* A sandbox paused when its daemon died is frozen: on v1 its
                 * tasks would keep their SIGKILL pending for good. */
                thaw_tree(path);
                kill_tree(path);
                int r = remove_tree(path, 1000);
                if (r < 0)
                        log_error("cgroup: cannot remove stale %s: %s", path, strerror(-r));
        }
        closedir(d);
}

/* A daemon that was SIGKILLed leaves its empty nsbox-<hash> behind. rmdir
 * never removes a cgroup that still has children, and a live daemon whose
 * parent vanishes recreates it (ensure_parent), so this is safe next to
 * other daemons. */
static void reap_empty_siblings(const char *own_dir)
{
        DIR *d = opendir(own_dir);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (de->d_type != DT_DIR || strcmp(de->d_name, cg.name) == 0 ||
                    (strncmp(de->d_name, "nsbox-", 6) != 0 && strncmp(de->d_name, "nsboxd-", 7) != 0))
                        continue;
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", own_dir, de->d_name);
                if (rmdir(path) == 0)
                        log_debug("cgroup: removed empty %s of a daemon gone", path);
        }
        closedir(d);
}

/* The parent of the sandbox dirs in hierarchy i, created again if another
 * daemon's reap_empty_siblings took it while we had no sandbox. */
static int ensure_parent(unsigned i)
{
        struct hierarchy *h = &cg.hier[i];
        if (mkdir(h->parent, 0755) < 0 && errno != EEXIST)
                return -errno;
        if (cg.mode != CGROUP_V2)
                return 0;
        for (int c = 0; c < CTRL_COUNT; c++) {
                if (!(h->controllers & (1u << c)) || c == CTRL_CPUACCT)
                        continue;
                char buf[32];
                snprintf(buf, sizeof(buf), "+%s", controller_names[c]);
                int r = write_at(h->parent, "cgroup.subtree_control", buf);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int make_sandbox_dir(unsigned i, const char *dir)
{
        for (int attempt = 0; attempt < 2; attempt++) {
                int r = ensure_parent(i);
                if (r < 0)
                        return r;
                if (mkdir(dir, 0755) == 0)
                        return 0;
                if (errno != ENOENT)
                        return -errno;
        }
        return -ENOENT;
}

static int add_hierarchy(const char *own_dir, unsigned controllers, nsbox_error_t **err)
{
        struct hierarchy *h = &cg.hier[cg.n_hier];
        reap_empty_siblings(own_dir);
        if (asprintf(&h->parent, "%s/%s", own_dir, cg.name) < 0)
                return nsbox_error(err, ENOMEM, "cgroup path");
        if (mkdir(h->parent, 0755) < 0 && errno != EEXIST) {
                int e = errno;
                nsbox_error(err, e, "create cgroup %s", h->parent);
                free(h->parent);
                h->parent = NULL;
                return -e;
        }
        h->controllers = controllers;
        for (int c = 0; c < CTRL_COUNT; c++)
                if (controllers & (1u << c))
                        cg.by_controller[c] = (int)cg.n_hier;
        cg.n_hier++;
        return 0;
}

static unsigned v1_available(void)
{
        unsigned mask = 0;
        for (int c = 0; c < CTRL_COUNT; c++) {
                _cleanup_free_ char *root = NULL;
                _cleanup_free_ char *mnt = find_mount(controller_names[c], &root, NULL);
                _cleanup_free_ char *own = own_cgroup_path(controller_names[c]);
                if (mnt != NULL && own != NULL)
                        mask |= 1u << c;
        }
        return mask;
}

/* systemd marks the cgroup it delegates to a unit (never the unit's
 * DelegateSubgroup=) with trusted.delegate, and newer releases with
 * user.delegate too. */
static bool marked_delegated(const char *dir)
{
        static const char *const names[] = { "trusted.delegate", "user.delegate" };
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                char value[8];
                ssize_t n = getxattr(dir, names[i], value, sizeof(value));
                if (n == 1 && value[0] == '1')
                        return true;
        }
        return false;
}

/* --- the sandboxes' systemd scope ------------------------------------------ */

/* The scope, <unit dir's parent>/nsbox-<hash>.scope, started with the
 * holder `pid` moved into it (or a previous nsboxd's, kept by its holder):
 * the holder goes into <scope>/holder, the scope's processes' leaf. */
static int enter_scope(const char *scope, const char *slice, nsbox_error_t **err)
{
        const char *unit = strrchr(scope, '/') + 1;
        char leaf[4096];
        snprintf(leaf, sizeof(leaf), "%s/holder", scope);
        if (exists_at(scope, "cgroup.procs")) {
                log_info("cgroup v2: the sandboxes' cgroups are in the scope %s of a previous nsboxd", scope);
                return 0;
        }
        pid_t holder;
        int r = cgroup_scope_holder(&holder, err);
        if (r < 0)
                return r;
        if ((r = cgroup_scope_start(unit, slice, holder, err)) < 0) {
                kill(holder, SIGKILL);
                return r == -EEXIST
                           ? nsbox_error(err, EEXIST, "systemd's unit %s exists without its cgroup %s", unit,
                                         scope)
                           : r;
        }
        /* systemd moves the holder as its start job runs, which the call's
         * answer does not wait for. */
        char proc[64], buf[4096];
        snprintf(proc, sizeof(proc), "/proc/%d", (int)holder);
        bool moved = false;
        for (int i = 0; i < 500 && !moved; i++) {
                moved = read_at(proc, "cgroup", buf, sizeof(buf)) > 0 && strstr(buf, unit) != NULL;
                if (!moved)
                        sleep_ms(10);
        }
        snprintf(buf, sizeof(buf), "%d", (int)holder);
        r = moved ? 0 : -ETIMEDOUT;
        if (r == 0 && mkdir(leaf, 0755) < 0 && errno != EEXIST)
                r = -errno;
        if (r == 0)
                r = write_at(leaf, "cgroup.procs", buf);
        if (r < 0) {
                kill(holder, SIGKILL);
                return nsbox_error(err, -r, "cgroup v2: move the holder of %s into %s", unit, leaf);
        }
        log_info("cgroup v2: the sandboxes' cgroups go in the scope %s systemd made", scope);
        return 0;
}

/* A scope a previous nsboxd with live restore left, when this one will not
 * adopt: its sandboxes are removed, its holder ended, and systemd stops it. */
static void drop_scope(const char *scope)
{
        if (!exists_at(scope, "cgroup.procs"))
                return;
        log_warn("cgroup: removing the sandboxes' scope %s of a previous nsboxd (live restore is off)",
                 scope);
        char parent[4096];
        snprintf(parent, sizeof(parent), "%s/%s", scope, cg.name);
        clean_stale(parent, NULL);
        rmdir(parent);
        kill_listed(scope);
}

/* Under systemd: the scope dir when the sandboxes go in it, else NULL (and
 * a scope left by a previous nsboxd removed). unit_dir is nsboxd's unit's. */
static char *sandboxes_scope(const char *unit_dir)
{
        const char *slash = strrchr(unit_dir, '/');
        if (slash == NULL)
                return NULL;
        const char *slice = slash;
        while (slice > unit_dir && slice[-1] != '/')
                slice--;
        size_t slice_len = (size_t)(slash - slice);
        if (slice_len <= 6 || strncmp(slash - 6, ".slice", 6) != 0)
                return NULL;
        char *scope = NULL;
        if (asprintf(&scope, "%.*s/%s.scope", (int)(slash - unit_dir), unit_dir, cg.name) < 0)
                return NULL;
        if (!cg.want_scope) {
                drop_scope(scope);
                free(scope);
                return NULL;
        }
        char slice_name[256];
        snprintf(slice_name, sizeof(slice_name), "%.*s", (int)slice_len, slice);
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (enter_scope(scope, slice_name, &err) < 0) {
                log_warn("cgroup v2: no scope of the sandboxes' own: %s", err->message);
                free(scope);
                return NULL;
        }
        cg.scope = scope;
        return strdup(scope);
}

void cgroup_sandboxes_in_scope(bool on)
{
        cg.want_scope = on;
}

/* dir's parent when dir is a subgroup of a delegated cgroup, else NULL. */
static char *delegated_parent(const char *dir)
{
        const char *slash = strrchr(dir, '/');
        if (slash == NULL || slash == dir || marked_delegated(dir))
                return NULL;
        char *parent = strndup(dir, (size_t)(slash - dir));
        if (parent != NULL && !marked_delegated(parent)) {
                free(parent);
                parent = NULL;
        }
        return parent;
}

static unsigned v2_available(char **own_dir_out)
{
        _cleanup_free_ char *root = NULL;
        _cleanup_free_ char *mnt = find_mount(NULL, &root, NULL);
        _cleanup_free_ char *own = own_cgroup_path(NULL);
        if (mnt == NULL || own == NULL)
                return 0;
        char *dir = join_own_dir(mnt, root, own);
        if (dir == NULL)
                return 0;
        char *parent = delegated_parent(dir);
        cg.in_subgroup = parent != NULL;
        if (parent != NULL) {
                free(dir);
                dir = parent;
        } else if (!userns_active() && geteuid() == 0 && marked_delegated(dir) &&
                   cgroup_scope_under_systemd()) {
                char *scope = sandboxes_scope(dir);
                if (scope != NULL) {
                        free(dir);
                        dir = scope;
                }
        }
        char buf[1024];
        unsigned mask = 0;
        if (read_at(dir, "cgroup.controllers", buf, sizeof(buf)) >= 0) {
                char *save = NULL;
                for (char *w = strtok_r(buf, " \n", &save); w != NULL; w = strtok_r(NULL, " \n", &save))
                        for (int c = 0; c < CTRL_COUNT; c++)
                                if (strcmp(w, controller_names[c]) == 0)
                                        mask |= 1u << c;
        }
        /* cpu.stat (usage) and cgroup.kill need no controller in v2. */
        mask |= 1u << CTRL_CPUACCT;
        *own_dir_out = dir;
        return mask;
}

static void missing_names(unsigned missing, char *buf, size_t len)
{
        buf[0] = '\0';
        for (int c = 0; c < CTRL_COUNT; c++) {
                if (!(missing & (1u << c)))
                        continue;
                size_t used = strlen(buf);
                snprintf(buf + used, len - used, "%s%s", used ? ", " : "", controller_names[c]);
        }
}

static void cgroup_atexit(void)
{
        if (getpid() != cg.owner_pid)
                return;
        for (unsigned i = 0; i < cg.n_hier; i++)
                if (cg.hier[i].parent != NULL && rmdir(cg.hier[i].parent) < 0 && errno != ENOENT)
                        log_warn("cgroup: cannot remove %s: %s", cg.hier[i].parent, strerror(errno));
        /* No sandbox left in the scope: its holder ends, and systemd stops it. */
        if (cg.scope != NULL && cg.n_hier > 0 && !exists_at(cg.hier[0].parent, "cgroup.procs")) {
                char leaf[4096];
                snprintf(leaf, sizeof(leaf), "%s/holder", cg.scope);
                kill_listed(leaf);
        }
        if (cg.freezer_parent != NULL && cg.freezer_hier < 0 && rmdir(cg.freezer_parent) < 0 &&
            errno != ENOENT)
                log_warn("cgroup: cannot remove %s: %s", cg.freezer_parent, strerror(errno));
}

static int v2_init(char *own_dir, unsigned available, nsbox_error_t **err)
{
        _cleanup_free_ char *dir = own_dir;
        char buf[256];

        cg.mode = CGROUP_V2;
        /* No internal processes: controllers can only be handed to children of
         * a cgroup that holds no process, so nsboxd leaves its own cgroup for a
         * leaf (the root cgroup is exempt). */
        _cleanup_free_ char *own = own_cgroup_path(NULL);
        if (cg.scope != NULL)
                ; /* nsboxd stays in its unit's cgroup, beside the scope */
        else if (cg.in_subgroup)
                log_info("cgroup v2: nsboxd runs in a subgroup (%s) of its delegated cgroup %s: the "
                         "sandboxes' cgroups go beside it",
                         own, dir);
        else if (own != NULL && strcmp(own, "/") != 0) {
                char leaf[4096];
                snprintf(leaf, sizeof(leaf), "%s/nsboxd-%s", dir, cg.name + strlen("nsbox-"));
                if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
                        return nsbox_error(err, errno, "cgroup v2: create %s", leaf);
                if (write_at(leaf, "cgroup.procs", "0") < 0)
                        return nsbox_error(err, errno, "cgroup v2: move nsboxd into %s", leaf);
        }
        unsigned enabled = 1u << CTRL_CPUACCT;
        for (int c = 0; c < CTRL_COUNT; c++) {
                if (!(available & (1u << c)) || c == CTRL_CPUACCT)
                        continue;
                snprintf(buf, sizeof(buf), "+%s", controller_names[c]);
                int r = write_at(dir, "cgroup.subtree_control", buf);
                if (r < 0)
                        log_warn("cgroup v2: enable %s in %s: %s%s", controller_names[c], dir, strerror(-r),
                                 r == -EBUSY ? " (other processes live in nsboxd's cgroup: give nsboxd a "
                                               "delegated cgroup of its own, e.g. systemd Delegate=yes)"
                                             : "");
                else
                        enabled |= 1u << c;
        }
        int r = add_hierarchy(dir, enabled, err);
        if (r < 0)
                return r;
        cg.in_unit_cgroup = !cg.in_subgroup && cg.scope == NULL && marked_delegated(dir);
        const char *parent = cg.hier[0].parent;
        clean_stale(parent, keep_stale);
        for (int c = 0; c < CTRL_COUNT; c++) {
                if (!(enabled & (1u << c)) || c == CTRL_CPUACCT)
                        continue;
                snprintf(buf, sizeof(buf), "+%s", controller_names[c]);
                if ((r = write_at(parent, "cgroup.subtree_control", buf)) < 0) {
                        log_warn("cgroup v2: enable %s in %s: %s", controller_names[c], parent, strerror(-r));
                        cg.hier[0].controllers &= ~(1u << c);
                        cg.by_controller[c] = -1;
                }
        }
        cg.have_kill = exists_at(parent, "cgroup.kill");
        cg.have_freeze = exists_at(parent, "cgroup.freeze");
        return 0;
}

/* v1: the freezer hierarchy, for sandbox.pause only (no freezer: no pause).
 * Set up before the other hierarchies: their stale sandboxes can only be
 * killed once thawed. */
static void v1_freezer_init(void)
{
        _cleanup_free_ char *root = NULL;
        _cleanup_free_ char *mnt = find_mount("freezer", &root, NULL);
        _cleanup_free_ char *own = own_cgroup_path("freezer");
        _cleanup_free_ char *dir = mnt && own ? join_own_dir(mnt, root, own) : NULL;
        if (dir == NULL) {
                log_info("cgroup v1: no freezer hierarchy: sandbox.pause is unavailable");
                return;
        }
        reap_empty_siblings(dir);
        if (asprintf(&cg.freezer_parent, "%s/%s", dir, cg.name) < 0) {
                cg.freezer_parent = NULL;
                return;
        }
        if (mkdir(cg.freezer_parent, 0755) < 0 && errno != EEXIST) {
                log_warn("cgroup v1: create %s: %s (sandbox.pause is unavailable)", cg.freezer_parent,
                         strerror(errno));
                free(cg.freezer_parent);
                cg.freezer_parent = NULL;
                return;
        }
        clean_stale(cg.freezer_parent, keep_stale);
}

static int v1_init(unsigned available, nsbox_error_t **err)
{
        cg.mode = CGROUP_V1;
        v1_freezer_init();
        for (int c = 0; c < CTRL_COUNT; c++) {
                if (!(available & (1u << c)) || cg.by_controller[c] >= 0)
                        continue;
                _cleanup_free_ char *root = NULL;
                _cleanup_free_ char *opts = NULL;
                _cleanup_free_ char *mnt = find_mount(controller_names[c], &root, &opts);
                _cleanup_free_ char *own = own_cgroup_path(controller_names[c]);
                _cleanup_free_ char *dir = mnt && own ? join_own_dir(mnt, root, own) : NULL;
                if (dir == NULL)
                        continue;
                /* Co-mounted controllers (cpu,cpuacct) share one hierarchy. */
                unsigned mask = 0;
                char *save = NULL;
                for (char *o = strtok_r(opts, ",", &save); o != NULL; o = strtok_r(NULL, ",", &save))
                        for (int k = 0; k < CTRL_COUNT; k++)
                                if (strcmp(o, controller_names[k]) == 0)
                                        mask |= 1u << k;
                int r = add_hierarchy(dir, mask & available, err);
                if (r < 0) {
                        if (REQUIRED_CONTROLLERS & (1u << c))
                                return r;
                        nsbox_error_free(err);
                        continue;
                }
                clean_stale(cg.hier[cg.n_hier - 1].parent, keep_stale);
        }
        int m = cg.by_controller[CTRL_MEMORY];
        cg.have_memsw = m >= 0 && exists_at(cg.hier[m].parent, "memory.memsw.limit_in_bytes");
        /* A freezer co-mounted with a controller of ours: the sandbox dir there is its freezer. */
        for (unsigned i = 0; cg.freezer_parent != NULL && i < cg.n_hier; i++)
                if (strcmp(cg.hier[i].parent, cg.freezer_parent) == 0)
                        cg.freezer_hier = (int)i;
        return 0;
}

/* Is nsboxd's own v2 cgroup delegated to it: the required controllers
 * offered, and the dir and the files that hand out and move processes
 * writable by its uid (as systemd and container runtimes chown them)? */
static bool userns_cgroup_delegated(const char *dir, unsigned available, char *why, size_t len)
{
        if (dir == NULL) {
                snprintf(why, len, "no cgroup v2 hierarchy mounted%s",
                         v1_available() ? " (this host uses cgroup v1)" : "");
                return false;
        }
        if ((available & REQUIRED_CONTROLLERS) != REQUIRED_CONTROLLERS) {
                char names[128];
                missing_names(REQUIRED_CONTROLLERS & ~available, names, sizeof(names));
                snprintf(why, len, "%s offers no %s controller%s", dir, names,
                         v1_available() ? " (this host keeps them in cgroup v1 hierarchies)" : "");
                return false;
        }
        static const char *const files[] = { ".", "cgroup.procs", "cgroup.subtree_control" };
        for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
                if (access(path, W_OK) < 0) {
                        snprintf(why, len, "%s is not writable by nsboxd: %s", path, strerror(errno));
                        return false;
                }
        }
        return true;
}

bool cgroup_in_unit_cgroup(void)
{
        return cg.in_unit_cgroup;
}

int cgroup_init(bool allow_degraded, nsbox_error_t **err)
{
        for (int c = 0; c < CTRL_COUNT; c++)
                cg.by_controller[c] = -1;
        hash_name(nsboxd.config.state_dir ? nsboxd.config.state_dir : "", cg.name, sizeof(cg.name));
        cg.owner_pid = getpid();

        /* Registered first: a failed init still removes the parents it made. */
        atexit(cgroup_atexit);
        char *v2_dir = NULL;
        unsigned v2 = v2_available(&v2_dir);
        unsigned v1 = v1_available();
        int r;
        /* v2 where it has the controllers; a hybrid host whose unified
         * hierarchy has none of them uses the v1 hierarchies. */
        if (userns_active()) {
                /* In a user namespace only a delegated v2 subtree is ours
                 * (systemd Delegate=yes, a pod's cgroup namespace); v1
                 * hierarchies belong to host root and cannot be delegated
                 * safely. Anything less: no limits, said plainly. */
                char why[256];
                if (userns_cgroup_delegated(v2_dir, v2, why, sizeof(why))) {
                        r = v2_init(v2_dir, v2, err);
                        if (r < 0 && cg.n_hier == 0) {
                                snprintf(cg.why_degraded, sizeof(cg.why_degraded),
                                         "the delegated cgroup v2 subtree is not usable: %s",
                                         (*err)->message);
                                nsbox_error_free(err);
                                r = 0;
                        }
                } else {
                        free(v2_dir);
                        snprintf(cg.why_degraded, sizeof(cg.why_degraded),
                                 "nsboxd runs in a user namespace without a delegated cgroup v2 subtree: %s",
                                 why);
                        r = 0;
                }
        } else if ((v2 & REQUIRED_CONTROLLERS) == REQUIRED_CONTROLLERS ||
                   (v2 & REQUIRED_CONTROLLERS && !(v1 & REQUIRED_CONTROLLERS))) {
                r = v2_init(v2_dir, v2, err);
        } else {
                free(v2_dir);
                r = v1 ? v1_init(v1, err) : 0;
        }
        if (r < 0)
                return nsbox_error_wrap(err, "cgroup");

        unsigned have = 0;
        for (int c = 0; c < CTRL_COUNT; c++)
                if (cg.by_controller[c] >= 0)
                        have |= 1u << c;
        if (cg.n_hier == 0)
                cg.mode = CGROUP_NONE;
        unsigned missing = REQUIRED_CONTROLLERS & ~have;
        cg.degraded = missing != 0;
        if (missing) {
                char names[128];
                missing_names(missing, names, sizeof(names));
                if (cg.why_degraded[0] == '\0')
                        snprintf(cg.why_degraded, sizeof(cg.why_degraded), "no usable %s controller", names);
                if (!allow_degraded)
                        return nsbox_error(err, ENOTSUP,
                                           "cgroup: cannot enforce sandbox limits: no usable %s controller "
                                           "(neither a delegated cgroup v2 subtree nor a v1 hierarchy "
                                           "has it); set allow_degraded to run sandboxes without them",
                                           names);
                log_warn("cgroup: %s controller(s) unavailable: sandboxes run without those limits "
                         "(limits-not-enforced: %s)",
                         names, cg.why_degraded);
        }
        if (cg.mode == CGROUP_V2)
                cg.have_swap_max = true;
        log_info("cgroup: %s, sandboxes under %s", cgroup_mode_name(),
                 cg.n_hier
                     ? cg.hier[cg.by_controller[CTRL_MEMORY] >= 0 ? cg.by_controller[CTRL_MEMORY] : 0].parent
                     : "(none)");
        return 0;
}

enum cgroup_mode cgroup_mode(void)
{
        return cg.mode;
}

const char *cgroup_mode_name(void)
{
        switch (cg.mode) {
        case CGROUP_V2:
                return "v2";
        case CGROUP_V1:
                return "v1";
        default:
                return "none";
        }
}

bool cgroup_degraded(void)
{
        return cg.degraded;
}

const char *cgroup_degraded_reason(void)
{
        return cg.degraded ? cg.why_degraded : NULL;
}

/* --- per sandbox ------------------------------------------------------------
 */

static const char *dir_of(const struct sandbox_cgroup *sc, enum controller c)
{
        int h = cg.by_controller[c];
        return sc != NULL && h >= 0 ? sc->dir[h] : NULL;
}

/* Write one limit; a limit that cannot be applied fails the create unless
 * the daemon was told to degrade. */
static int apply(const char *dir, const char *file, const char *value, nsbox_error_t **err)
{
        int r = write_at(dir, file, value);
        if (r == 0)
                return 0;
        if (cg.degraded) {
                log_warn("cgroup: cannot set %s/%s to %s: %s (running without it)", dir, file, value,
                         strerror(-r));
                return 0;
        }
        return nsbox_error(err, -r, "cgroup: set %s/%s to %s", dir, file, value);
}

uint64_t cgroup_memory_max(const struct sandbox_limits *limits)
{
        if (limits->memory_bytes == 0)
                return 0;
        return limits->memory_bytes + limits->disk_bytes + sandbox_shm_bytes(limits->disk_bytes);
}

static int apply_limits(struct sandbox_cgroup *sc, const struct sandbox_limits *limits, nsbox_error_t **err)
{
        char value[64];
        const char *mem = dir_of(sc, CTRL_MEMORY);
        const char *pids = dir_of(sc, CTRL_PIDS);
        const char *cpu = dir_of(sc, CTRL_CPU);
        int r;
        bool v2 = cg.mode == CGROUP_V2;

        /* memory.oom.group stays 0 (the default), here and in the init
         * leaf: an OOM kill takes one process, never the whole sandbox. */
        if (mem != NULL && limits->memory_bytes > 0) {
                snprintf(value, sizeof(value), "%" PRIu64, cgroup_memory_max(limits));
                if ((r = apply(mem, v2 ? "memory.max" : "memory.limit_in_bytes", value, err)) < 0)
                        return r;
                /* No swap: the limit is the limit (memsw counts memory+swap). */
                if (v2 && exists_at(mem, "memory.swap.max") &&
                    (r = apply(mem, "memory.swap.max", "0", err)) < 0)
                        return r;
                if (!v2 && cg.have_memsw && (r = apply(mem, "memory.memsw.limit_in_bytes", value, err)) < 0)
                        return r;
        }
        if (pids != NULL && limits->pids > 0) {
                snprintf(value, sizeof(value), "%" PRIu64, limits->pids);
                if ((r = apply(pids, "pids.max", value, err)) < 0)
                        return r;
        }
        if (cpu != NULL && limits->cpus > 0) {
                const long period = 100000; /* v1: the kernel's default, which a new cgroup has */
                long long quota = (long long)(limits->cpus * period + 0.5);
                if (quota < 1000)
                        quota = 1000;
                if (v2) {
                        snprintf(value, sizeof(value), "%lld %ld", quota, period);
                        if ((r = apply(cpu, "cpu.max", value, err)) < 0)
                                return r;
                } else {
                        /* The period is not written: the cgroup is new
                         * (cgroup_sandbox_create's mkdir fails on an old
                         * one), so it has the kernel's default, 100 ms, and
                         * every write walks all of the host's cpu cgroups
                         * (the kernel checks the quotas of the whole tree). */
                        snprintf(value, sizeof(value), "%lld", quota);
                        if ((r = apply(cpu, "cpu.cfs_quota_us", value, err)) < 0)
                                return r;
                }
        }
        return 0;
}

static void sandbox_cgroup_free(struct sandbox_cgroup *sc)
{
        for (unsigned i = 0; i < MAX_HIERARCHIES; i++)
                free(sc->dir[i]);
        free(sc->freezer_dir);
        if (sc->oom_fd >= 0)
                close(sc->oom_fd);
        free(sc);
}

int cgroup_sandbox_create(const char *id, const struct sandbox_limits *limits, struct sandbox_cgroup **out,
                          int *clone_fd, nsbox_error_t **err)
{
        *clone_fd = -1;
        *out = NULL;
        if (cg.n_hier == 0)
                return 0;
        struct sandbox_cgroup *sc = calloc(1, sizeof(*sc));
        if (sc == NULL)
                return nsbox_error(err, ENOMEM, "sandbox cgroup");
        sc->oom_fd = -1;
        int r = 0;
        for (unsigned i = 0; i < cg.n_hier; i++) {
                if (asprintf(&sc->dir[i], "%s/%s", cg.hier[i].parent, id) < 0) {
                        sc->dir[i] = NULL;
                        r = nsbox_error(err, ENOMEM, "cgroup path");
                        goto fail;
                }
                int made = make_sandbox_dir(i, sc->dir[i]);
                if (made < 0) {
                        r = nsbox_error(err, -made, "create cgroup %s", sc->dir[i]);
                        free(sc->dir[i]);
                        sc->dir[i] = NULL;
                        goto fail;
                }
        }
        if ((r = apply_limits(sc, limits, err)) < 0)
                goto fail;
        if (cg.mode == CGROUP_V2) {
                /* The sandbox's processes live in a leaf of their own: the
                 * sandbox dir holds none, so controllers can be enabled below
                 * it (no internal processes) without moving anyone. */
                const char *dir = sc->dir[0];
                char leaf[4096];
                snprintf(leaf, sizeof(leaf), "%s/init", dir);
                if (mkdir(leaf, 0755) < 0) {
                        r = nsbox_error(err, errno, "create cgroup %s", leaf);
                        goto fail;
                }
                int fd = open(leaf, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
                if (fd < 0) {
                        r = nsbox_error(err, errno, "open cgroup %s", leaf);
                        goto fail;
                }
                *clone_fd = fd;
        }
        *out = sc;
        return 0;
fail:
        for (unsigned i = 0; i < cg.n_hier; i++)
                if (sc->dir[i] != NULL)
                        remove_tree(sc->dir[i], 0);
        sandbox_cgroup_free(sc);
        return r;
}

int cgroup_sandbox_adopt(const char *id, struct sandbox_cgroup **out, nsbox_error_t **err)
{
        *out = NULL;
        if (cg.n_hier == 0)
                return 0;
        struct sandbox_cgroup *sc = calloc(1, sizeof(*sc));
        if (sc == NULL)
                return nsbox_error(err, ENOMEM, "sandbox cgroup");
        sc->oom_fd = -1;
        for (unsigned i = 0; i < cg.n_hier; i++) {
                struct stat st;
                if (asprintf(&sc->dir[i], "%s/%s", cg.hier[i].parent, id) < 0) {
                        sc->dir[i] = NULL;
                        sandbox_cgroup_free(sc);
                        return nsbox_error(err, ENOMEM, "cgroup path");
                }
                if (lstat(sc->dir[i], &st) < 0 || !S_ISDIR(st.st_mode)) {
                        int saved = errno ? errno : ENOTDIR;
                        nsbox_error(err, saved, "find cgroup %s", sc->dir[i]);
                        sandbox_cgroup_free(sc);
                        return -saved;
                }
        }
        /* v1 with a freezer of its own: the dir of a pause before the restart. */
        char freezer[4096];
        struct stat st;
        if (cg.freezer_parent != NULL && cg.freezer_hier < 0) {
                snprintf(freezer, sizeof(freezer), "%s/%s", cg.freezer_parent, id);
                if (lstat(freezer, &st) == 0 && S_ISDIR(st.st_mode))
                        sc->freezer_dir = strdup(freezer);
        }
        *out = sc;
        return 0;
}

int cgroup_sandbox_procs_open(struct sandbox_cgroup *sc, int fds[CGROUP_MAX_HIERARCHIES], size_t *n,
                              nsbox_error_t **err)
{
        *n = 0;
        /* v2: CLONE_INTO_CGROUP puts it there. Writing anyway would be no
         * free no-op: every write to cgroup.procs takes the locks of a move. */
        if (sc == NULL || cg.mode == CGROUP_V2)
                return 0;
        for (unsigned i = 0; i < cg.n_hier; i++) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/cgroup.procs", sc->dir[i]);
                fds[i] = open(path, O_WRONLY | O_CLOEXEC);
                if (fds[i] < 0) {
                        int r = nsbox_error(err, errno, "open %s", path);
                        while (i > 0)
                                close(fds[--i]);
                        return r;
                }
        }
        *n = cg.n_hier;
        return 0;
}

int cgroup_procs_join(const int *fds, size_t n, nsbox_error_t **err)
{
        for (size_t i = 0; i < n; i++) {
                if (write(fds[i], "0", 1) != 1)
                        return nsbox_error(err, errno,
                                           "move the sandbox init into the cgroup of hierarchy %zu of %zu",
                                           i + 1, n);
        }
        return 0;
}

void cgroup_sandbox_kill(struct sandbox_cgroup *sc)
{
        /* v2: cgroup.kill, one write. v1 has nothing as quick, and needs
         * nothing: every process of a sandbox is in its pid namespace, which
         * the kernel empties when the manager kills the init. */
        if (sc == NULL || cg.mode != CGROUP_V2)
                return;
        kill_tree(sc->dir[0]);
}

/* A sandbox's cgroup can stay busy for a moment after its init is gone
 * while the kernel reaps the rest of its pid namespace: retry from a timer
 * rather than wait in the event loop. */
struct removal {
        char *dir;
        int tries;
        struct removal *next;
};

#define REMOVAL_RETRY_MS 5
#define REMOVAL_TRIES    400 /* about 2 s, then the stragglers are killed */

static struct removal *removals;
static struct loop_timer *removal_timer;

static void on_removal_timer(struct loop *loop, struct loop_timer *timer, void *data);

/* Try again REMOVAL_RETRY_MS from now; false when there is no timer to. */
static bool arm_removal_timer(void)
{
        if (removal_timer != NULL)
                loop_timer_move_in(nsboxd.loop, removal_timer, REMOVAL_RETRY_MS);
        else if (nsboxd.loop != NULL)
                removal_timer = loop_timer_add_in(nsboxd.loop, REMOVAL_RETRY_MS, on_removal_timer, NULL);
        return removal_timer != NULL;
}

static void on_removal_timer(struct loop *loop, struct loop_timer *timer, void *data)
{
        removal_timer = NULL; /* a one-shot timer, gone once this returns */
        for (struct removal **p = &removals; *p != NULL;) {
                struct removal *rm = *p;
                if (++rm->tries > REMOVAL_TRIES)
                        kill_tree(rm->dir); /* something outlived its sandbox */
                int r = remove_tree(rm->dir, 0);
                if (r == 0 || rm->tries > REMOVAL_TRIES + 100) {
                        if (r < 0)
                                log_error("cgroup: cannot remove %s: %s", rm->dir, strerror(-r));
                        *p = rm->next;
                        free(rm->dir);
                        free(rm);
                        continue;
                }
                p = &rm->next;
        }
        if (removals != NULL)
                arm_removal_timer();
}

static void remove_later(const char *dir)
{
        struct removal *rm = calloc(1, sizeof(*rm));
        if (rm == NULL || (rm->dir = strdup(dir)) == NULL || !arm_removal_timer()) {
                if (rm != NULL)
                        free(rm->dir);
                free(rm);
                kill_tree(dir);
                if (remove_tree(dir, 1000) < 0)
                        log_error("cgroup: cannot remove %s", dir);
                return;
        }
        rm->next = removals;
        removals = rm;
}

unsigned cgroup_removals_pending(void)
{
        unsigned n = 0;
        for (struct removal *rm = removals; rm != NULL; rm = rm->next)
                n++;
        return n;
}

void cgroup_sandbox_destroy(struct sandbox_cgroup *sc)
{
        if (sc == NULL)
                return;
        for (unsigned i = 0; i < cg.n_hier; i++) {
                if (remove_tree(sc->dir[i], 0) < 0)
                        remove_later(sc->dir[i]);
        }
        if (sc->freezer_dir != NULL && cg.freezer_hier < 0 && remove_tree(sc->freezer_dir, 0) < 0)
                remove_later(sc->freezer_dir);
        sandbox_cgroup_free(sc);
}

json_t *cgroup_sandbox_stats(struct sandbox_cgroup *sc)
{
        uint64_t mem = 0, peak = 0, cpu = 0, pids = 0, ooms = 0;
        bool v2 = cg.mode == CGROUP_V2;
        bool has_mem =
            read_u64_at(dir_of(sc, CTRL_MEMORY), v2 ? "memory.current" : "memory.usage_in_bytes", &mem) == 0;
        bool has_peak = read_u64_at(dir_of(sc, CTRL_MEMORY), v2 ? "memory.peak" : "memory.max_usage_in_bytes",
                                    &peak) == 0;
        bool has_cpu;
        if (v2) {
                has_cpu = read_keyed_at(sc ? sc->dir[0] : NULL, "cpu.stat", "usage_usec", &cpu) == 0;
        } else {
                has_cpu = read_u64_at(dir_of(sc, CTRL_CPUACCT), "cpuacct.usage", &cpu) == 0;
                cpu /= 1000;
        }
        bool has_pids = read_u64_at(dir_of(sc, CTRL_PIDS), "pids.current", &pids) == 0;
        ooms = cgroup_sandbox_oom_kills(sc);
        return json_pack("{s:o, s:o, s:o, s:o, s:I}", "memory_bytes",
                         has_mem ? json_integer((json_int_t)mem) : json_null(), "memory_peak_bytes",
                         has_peak ? json_integer((json_int_t)peak) : json_null(), "cpu_usage_us",
                         has_cpu ? json_integer((json_int_t)cpu) : json_null(), "pids",
                         has_pids ? json_integer((json_int_t)pids) : json_null(), "oom_kills",
                         (json_int_t)ooms);
}

uint64_t cgroup_sandbox_oom_kills(struct sandbox_cgroup *sc)
{
        uint64_t n = 0;
        const char *mem = dir_of(sc, CTRL_MEMORY);
        if (mem == NULL)
                return 0;
        if (sc->oom_fd < 0) {
                char path[4200];
                snprintf(path, sizeof(path), "%s/%s", mem,
                         cg.mode == CGROUP_V2 ? "memory.events" : "memory.oom_control");
                sc->oom_fd = open(path, O_RDONLY | O_CLOEXEC);
                if (sc->oom_fd < 0)
                        return 0;
        }
        /* Each read from offset 0 is the file's current text. */
        char buf[1024];
        ssize_t len = pread(sc->oom_fd, buf, sizeof(buf) - 1, 0);
        if (len <= 0)
                return 0;
        buf[len] = '\0';
        find_key(buf, "oom_kill", &n);
        return n;
}

/* --- pause ------------------------------------------------------------------
 */

bool cgroup_freezer_available(void)
{
        return (cg.mode == CGROUP_V2 && cg.have_freeze) ||
               (cg.mode == CGROUP_V1 && cg.freezer_parent != NULL);
}

bool cgroup_sandbox_can_freeze(const struct sandbox_cgroup *sc, const char **why)
{
        *why = NULL;
        if (sc == NULL)
                *why = "this host runs sandboxes without cgroups";
        else if (cg.mode == CGROUP_V2 && !cg.have_freeze)
                *why = "the kernel's cgroup v2 has no cgroup.freeze (Linux 5.2+)";
        else if (cg.mode == CGROUP_V1 && cg.freezer_parent == NULL)
                *why = "no cgroup v1 freezer hierarchy is mounted";
        return *why == NULL;
}

/* The pids listed in dir/cgroup.procs (NULL when none); *count of them. */
static pid_t *read_pids(const char *dir, size_t *count)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        *count = 0;
        FILE *f = fopen(path, "re");
        if (f == NULL)
                return NULL;
        size_t cap = 0;
        pid_t *pids = NULL;
        long pid;
        while (fscanf(f, "%ld", &pid) == 1) {
                if (*count == cap) {
                        cap = cap ? cap * 2 : 64;
                        pid_t *more = realloc(pids, cap * sizeof(*pids));
                        if (more == NULL)
                                break;
                        pids = more;
                }
                pids[(*count)++] = (pid_t)pid;
        }
        fclose(f);
        return pids;
}

static int compare_pids(const void *a, const void *b)
{
        pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
        return (x > y) - (x < y);
}

/* Bounds the rounds of moves; each round moves what the last one missed
 * (a fork by a task not moved yet). The pids limit bounds the tasks. */
#define FREEZER_MOVE_ROUNDS 64

static bool pid_listed(pid_t pid, const pid_t *sorted, size_t n)
{
        return sorted != NULL && bsearch(&pid, sorted, n, sizeof(*sorted), compare_pids) != NULL;
}

/* v1: every task of the sandbox into its (already FROZEN) freezer dir,
 * where each is frozen as it arrives: a task moved cannot fork any more,
 * so the rounds converge. A task that exits meanwhile fails with ESRCH, or
 * is accepted and not moved while it exits: it is tried once only. */
static int v1_move_into_freezer(struct sandbox_cgroup *sc, nsbox_error_t **err)
{
        _cleanup_free_ pid_t *tried = NULL;
        size_t n_tried = 0;
        for (int round = 0; round < FREEZER_MOVE_ROUNDS; round++) {
                size_t n_all, n_in;
                _cleanup_free_ pid_t *all = read_pids(sc->dir[0], &n_all);
                _cleanup_free_ pid_t *in = read_pids(sc->freezer_dir, &n_in);
                if (in != NULL)
                        qsort(in, n_in, sizeof(*in), compare_pids);
                pid_t *more = n_all ? realloc(tried, (n_tried + n_all) * sizeof(*tried)) : tried;
                if (n_all && more == NULL)
                        return nsbox_error(err, ENOMEM, "freeze: list of tasks");
                tried = more;
                size_t n_before = n_tried;
                for (size_t i = 0; i < n_all; i++) {
                        if (pid_listed(all[i], in, n_in) || pid_listed(all[i], tried, n_before))
                                continue;
                        char value[32];
                        snprintf(value, sizeof(value), "%d", (int)all[i]);
                        int r = write_at(sc->freezer_dir, "cgroup.procs", value);
                        if (r < 0 && r != -ESRCH)
                                return nsbox_error(err, -r, "move task %d into %s", (int)all[i],
                                                   sc->freezer_dir);
                        tried[n_tried++] = all[i];
                }
                if (n_tried == n_before)
                        return 0;
                qsort(tried, n_tried, sizeof(*tried), compare_pids);
        }
        return nsbox_refuse(err, EAGAIN, "the sandbox's tasks kept multiplying while being frozen");
}

int cgroup_sandbox_freeze(struct sandbox_cgroup *sc, nsbox_error_t **err)
{
        const char *why;
        if (!cgroup_sandbox_can_freeze(sc, &why))
                return nsbox_refuse(err, ENOTSUP, "cannot pause: %s", why);
        int r;
        if (cg.mode == CGROUP_V2) {
                if ((r = write_at(sc->dir[0], "cgroup.freeze", "1")) < 0)
                        return nsbox_error(err, -r, "freeze cgroup %s", sc->dir[0]);
                return 0;
        }
        if (sc->freezer_dir == NULL) {
                if (cg.freezer_hier >= 0) {
                        sc->freezer_dir = strdup(sc->dir[cg.freezer_hier]);
                } else {
                        /* Another daemon's reap_empty_siblings may have taken our empty parent. */
                        if (mkdir(cg.freezer_parent, 0755) < 0 && errno != EEXIST)
                                return nsbox_error(err, errno, "create cgroup %s", cg.freezer_parent);
                        const char *id = strrchr(sc->dir[0], '/') + 1;
                        if (asprintf(&sc->freezer_dir, "%s/%s", cg.freezer_parent, id) < 0)
                                sc->freezer_dir = NULL;
                        else if (mkdir(sc->freezer_dir, 0755) < 0 && errno != EEXIST) {
                                r = nsbox_error(err, errno, "create cgroup %s", sc->freezer_dir);
                                free(sc->freezer_dir);
                                sc->freezer_dir = NULL;
                                return r;
                        }
                }
                if (sc->freezer_dir == NULL)
                        return nsbox_error(err, ENOMEM, "freezer cgroup path");
        }
        if ((r = write_at(sc->freezer_dir, "freezer.state", "FROZEN")) < 0)
                return nsbox_error(err, -r, "freeze cgroup %s", sc->freezer_dir);
        if (cg.freezer_hier < 0 && (r = v1_move_into_freezer(sc, err)) < 0) {
                cgroup_sandbox_thaw(sc);
                return r;
        }
        return 0;
}

int cgroup_sandbox_frozen(struct sandbox_cgroup *sc)
{
        if (cg.mode == CGROUP_V2) {
                uint64_t frozen = 0;
                int r = read_keyed_at(sc->dir[0], "cgroup.events", "frozen", &frozen);
                return r < 0 ? r : frozen == 1;
        }
        char state[32];
        ssize_t n =
            sc->freezer_dir ? read_at(sc->freezer_dir, "freezer.state", state, sizeof(state)) : -ENOENT;
        if (n < 0)
                return (int)n;
        return strncmp(state, "FROZEN", 6) == 0;
}

void cgroup_sandbox_thaw(struct sandbox_cgroup *sc)
{
        int r = 0;
        const char *dir = NULL;
        if (sc != NULL && cg.mode == CGROUP_V2 && cg.have_freeze)
                r = write_at(dir = sc->dir[0], "cgroup.freeze", "0");
        else if (sc != NULL && sc->freezer_dir != NULL)
                r = write_at(dir = sc->freezer_dir, "freezer.state", "THAWED");
        if (r < 0)
                log_error("cgroup: cannot thaw %s: %s", dir, strerror(-r));
}
