/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd without host root: the user namespace it runs in and the ids it may hand out. */
#include "userns.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "log.h"

extern char **environ;

#define USERNS_MAX_EXTENTS 340 /* the kernel's limit per map */

/* A sandbox's map must follow nsboxd's own extents: the kernel takes each
 * line's whole range from a single extent of the parent's map. So the
 * identity map of 0-65535 is split where nsboxd's map is (with
 * `nsboxd --rootless`: 0 is the user, 1 up the subordinate range). */
struct userns_map {
        char text[USERNS_MAX_EXTENTS * 36];
};

static struct {
        bool active;
        uint32_t delegated; /* ids mapped from 0 up, without a gap */
        struct userns_map uid_map, gid_map;
} userns;

/* What a daemon in a user namespace cannot do, and why: shown in
 * server.info, each checked by tests/integration/daemon/test_rootless.py. */
static const struct {
        const char *feature;
        const char *why;
} userns_unavailable[] = {
        { "network",
          "egress needs host root: a veth pair into the host's network namespace and nftables there; "
          "sandboxes get network \"none\" (a network namespace of their own, loopback only)" },
        { "per-sandbox-uid-ranges",
          "each sandbox needs a host uid range of its own and an idmapped mount of the image, which "
          "take host root; all sandboxes share the namespace's delegated range" },
        { "image-commit", "committed and imported images need per-sandbox uid isolation" },
        { "image-import", "committed and imported images need per-sandbox uid isolation" },
        { "host-pools",
          "host-wide sysctls (fs.inotify.max_user_*, fs.file-max) need host root: the host's values apply" },
        { "oom-protection",
          "lowering oom_score_adj needs CAP_SYS_RESOURCE on the host: sandbox inits and exec "
          "supervisors stay at nsboxd's own OOM score" },
};

/* *ids: the contiguous ids from 0 that a /proc/self/{uid,gid}_map maps,
 * or -1 when it is the initial namespace's identity map; *out gets the
 * sandboxes' identity map of 0-65535 in pieces along those extents. */
static int mapped_from_zero(const char *path, struct userns_map *out, int64_t *ids, nsbox_error_t **err)
{
        FILE *f = fopen(path, "re");
        if (f == NULL)
                return nsbox_error(err, errno, "open %s", path);
        unsigned long long inside[340], count[340];
        size_t n = 0;
        unsigned long long a, b, c;
        bool identity = false;
        while (n < ARRAY_SIZE(inside) && fscanf(f, "%llu %llu %llu", &a, &b, &c) == 3) {
                if (a == 0 && b == 0 && c == 4294967295ull)
                        identity = true;
                inside[n] = a;
                count[n] = c;
                n++;
        }
        fclose(f);
        *ids = -1;
        if (identity && n == 1)
                return 0;
        /* Walk up from 0 through extents that touch (the kernel keeps them
         * disjoint, in any order). */
        unsigned long long next = 0;
        size_t used = 0;
        out->text[0] = '\0';
        for (bool grew = true; grew;) {
                grew = false;
                for (size_t i = 0; i < n; i++)
                        if (inside[i] == next && count[i] > 0) {
                                if (next < USERNS_SANDBOX_IDS) {
                                        unsigned long long piece = count[i];
                                        if (next + piece > USERNS_SANDBOX_IDS)
                                                piece = USERNS_SANDBOX_IDS - next;
                                        used += (size_t)snprintf(out->text + used, sizeof(out->text) - used,
                                                                 "%llu %llu %llu\n", next, next, piece);
                                }
                                next += count[i];
                                grew = true;
                        }
        }
        *ids = (int64_t)(next > UINT32_MAX ? UINT32_MAX : next);
        return 0;
}

int userns_detect(nsbox_error_t **err)
{
        int64_t uids, gids;
        int r;
        if ((r = mapped_from_zero("/proc/self/uid_map", &userns.uid_map, &uids, err)) < 0 ||
            (r = mapped_from_zero("/proc/self/gid_map", &userns.gid_map, &gids, err)) < 0)
                return r;
        if (uids == -1 && gids == -1)
                return 0;
        userns.active = true;
        if (uids < 0 || gids < 0)
                return nsbox_refuse(err, EINVAL,
                                    "nsboxd's uid_map and gid_map disagree (one is the host's identity "
                                    "map, the other not): give its user namespace both");
        userns.delegated = (uint32_t)(uids < gids ? uids : gids);
        if (geteuid() != 0)
                return nsbox_refuse(
                    err, EPERM,
                    "nsboxd runs in a user namespace as uid %u: it must be uid 0 there (start "
                    "it with nsboxd --rootless, or as the root of the pod's namespace)",
                    (unsigned)geteuid());
        if (userns.delegated < USERNS_SANDBOX_IDS)
                return nsbox_refuse(
                    err, ERANGE,
                    "nsboxd's user namespace maps %u ids from 0 (uid_map and gid_map); sandboxes "
                    "need %u (0 to 65535): delegate a larger range (/etc/subuid and "
                    "/etc/subgid, or the pod's user namespace)",
                    userns.delegated, USERNS_SANDBOX_IDS);
        log_info("userns mode: nsboxd is root of a user namespace with %u delegated ids; sandboxes share ids "
                 "0 to %u of it",
                 userns.delegated, USERNS_SANDBOX_IDS - 1);
        return 0;
}

const char *userns_sandbox_map(bool gids)
{
        return gids ? userns.gid_map.text : userns.uid_map.text;
}

bool userns_client_unmapped(uid_t uid)
{
        static int overflow = -1;
        if (overflow < 0) {
                overflow = 65534;
                FILE *f = fopen("/proc/sys/kernel/overflowuid", "re");
                if (f != NULL) {
                        if (fscanf(f, "%d", &overflow) != 1)
                                overflow = 65534;
                        fclose(f);
                }
        }
        return userns.active && uid == (uid_t)overflow;
}

bool userns_active(void)
{
        return userns.active;
}

uint32_t userns_delegated_ids(void)
{
        return userns.delegated;
}

json_t *userns_json(void)
{
        json_t *unavailable = json_array();
        for (size_t i = 0; i < ARRAY_SIZE(userns_unavailable); i++)
                json_array_append_new(unavailable,
                                      json_pack("{s:s, s:s}", "feature", userns_unavailable[i].feature, "why",
                                                userns_unavailable[i].why));
        return json_pack("{s:I, s:I, s:o, s:s}", "delegated_ids", (json_int_t)userns.delegated, "sandbox_ids",
                         (json_int_t)USERNS_SANDBOX_IDS, "unavailable", unavailable, "unmapped_clients",
                         nsboxd.config.unmapped_clients);
}

int userns_enter_mount_namespace(nsbox_error_t **err)
{
        /* Mounting (the disk tmpfs, the overlay) takes CAP_SYS_ADMIN over
         * the mount namespace's owner: a namespace made here is ours. Slave,
         * so that nothing mounted here shows outside. */
        if (unshare(CLONE_NEWNS) < 0)
                return nsbox_error(err, errno, "unshare a mount namespace");
        if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
                return nsbox_error(err, errno, "make / a slave mount");
        return 0;
}

/* --- nsboxd --rootless ------------------------------------------------------ */

/* The first range of at least `need` ids that /etc/subuid (or subgid)
 * gives the user, by name or by number. */
static int find_subordinate(const char *file, const char *name, unsigned id, uint32_t need,
                            unsigned long *start, unsigned long *count, nsbox_error_t **err)
{
        FILE *f = fopen(file, "re");
        if (f == NULL)
                return nsbox_error(err, errno, "open %s", file);
        char line[512], number[32];
        snprintf(number, sizeof(number), "%u", id);
        bool found = false;
        while (!found && fgets(line, sizeof(line), f) != NULL) {
                char *first = strtok(line, ":\n");
                char *s = strtok(NULL, ":\n");
                char *c = strtok(NULL, ":\n");
                if (first == NULL || s == NULL || c == NULL ||
                    (strcmp(first, name) != 0 && strcmp(first, number) != 0))
                        continue;
                *start = strtoul(s, NULL, 10);
                *count = strtoul(c, NULL, 10);
                found = *count >= need;
        }
        fclose(f);
        if (!found)
                return nsbox_refuse(err, ENOENT,
                                    "%s has no range of %u ids for %s: add one (e.g. usermod --add-subuids "
                                    "and --add-subgids), as rootless podman needs too",
                                    file, need, name);
        return 0;
}

static int run_map_tool(const char *tool, pid_t pid, unsigned own, unsigned long start, unsigned long count)
{
        char spid[32], sown[32], sstart[32], scount[32];
        snprintf(spid, sizeof(spid), "%d", (int)pid);
        snprintf(sown, sizeof(sown), "%u", own);
        snprintf(sstart, sizeof(sstart), "%lu", start);
        snprintf(scount, sizeof(scount), "%lu", count);
        /* 0 is the user itself (files it owns stay its own), 1 up the
         * subordinate range. */
        char *argv[] = { (char *)tool, spid, "0", sown, "1", "1", sstart, scount, NULL };
        pid_t child;
        if (posix_spawnp(&child, tool, NULL, NULL, argv, environ) != 0)
                return -1;
        int status;
        while (waitpid(child, &status, 0) < 0)
                if (errno != EINTR)
                        return -1;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Map the user namespace just unshared, through the set-user-ID tools. */
static int map_new_namespace(const struct passwd *pw, nsbox_error_t **err)
{
        uid_t uid = getuid();
        gid_t gid = getgid();
        unsigned long uid_start, uid_count, gid_start, gid_count;
        int r;
        if ((r = find_subordinate("/etc/subuid", pw->pw_name, uid, USERNS_SANDBOX_IDS - 1, &uid_start,
                                  &uid_count, err)) < 0 ||
            (r = find_subordinate("/etc/subgid", pw->pw_name, uid, USERNS_SANDBOX_IDS - 1, &gid_start,
                                  &gid_count, err)) < 0)
                return r;

        /* newuidmap is set-user-ID root: it must start outside the new
         * namespace (where host root is not mapped, the bit is ignored), so
         * the helper is forked first and waits for the unshare. */
        int sync[2];
        if (pipe2(sync, O_CLOEXEC) < 0)
                return nsbox_error(err, errno, "pipe");
        pid_t self = getpid();
        pid_t helper = fork();
        if (helper < 0)
                return nsbox_error(err, errno, "fork");
        if (helper == 0) {
                close(sync[1]);
                char c;
                if (read(sync[0], &c, 1) != 1)
                        _exit(1);
                if (run_map_tool("newuidmap", self, (unsigned)uid, uid_start, uid_count) < 0)
                        _exit(2);
                if (run_map_tool("newgidmap", self, (unsigned)gid, gid_start, gid_count) < 0)
                        _exit(3);
                _exit(0);
        }
        close(sync[0]);
        int unshared = unshare(CLONE_NEWUSER) < 0 ? -errno : 0;
        if (unshared == 0 && write(sync[1], "g", 1) != 1)
                unshared = -errno;
        close(sync[1]);
        int status;
        while (waitpid(helper, &status, 0) < 0 && errno == EINTR)
                ;
        if (unshared < 0)
                return nsbox_error(err, -unshared, "unshare a user namespace");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return nsbox_refuse(err, EPERM,
                                    "%s failed for uid %u (subordinate ids %lu+%lu; is the uidmap package "
                                    "installed?)",
                                    WIFEXITED(status) && WEXITSTATUS(status) == 3 ? "newgidmap" : "newuidmap",
                                    (unsigned)uid, uid_start, uid_count);
        return 0;
}

int userns_reexec_rootless(char **argv, bool (*join)(const char *arg), const char *arg, nsbox_error_t **err)
{
        struct passwd *pw = getpwuid(getuid());
        if (pw == NULL)
                return nsbox_error(err, errno ? errno : ENOENT, "who is uid %u", (unsigned)getuid());
        int pdeath = 0;
        prctl(PR_GET_PDEATHSIG, &pdeath);
        pid_t parent = getppid();
        int r;
        if (!(join != NULL && join(arg)) && (r = map_new_namespace(pw, err)) < 0)
                return r;
        if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
                return nsbox_error(err, errno, "become root of the new user namespace");
        /* A credentials change clears the parent-death signal that `nsbox
         * run` asked for; it must still hold. */
        if (pdeath != 0) {
                prctl(PR_SET_PDEATHSIG, pdeath);
                if (getppid() != parent)
                        raise(pdeath);
        }
        setenv("NSBOX_ROOTLESS_USER", pw->pw_name, 1);
        execv("/proc/self/exe", argv);
        return nsbox_error(err, errno, "re-exec nsboxd in the user namespace");
}
