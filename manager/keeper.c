/* SPDX-License-Identifier: Apache-2.0 */
/* The keeper of a rootless nsboxd's user and mount namespaces between its runs. */
#include "keeper.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "detach.h"
#include "json_cleanup.h"
#include "json_file.h"
#include "log.h"
#include "state.h"

#define KEEPER_RECORD   "rootless-keeper.json"
#define KEEPER_NAME     "nsboxd-keeper"
#define KEEPER_ARG      "--rootless-keeper"
#define KEEPER_HELD_ENV "NSBOX_ROOTLESS_KEEPER"

static bool held;

static void record_path(const char *state_dir, char *path, size_t len)
{
        snprintf(path, len, "%s/%s", state_dir, KEEPER_RECORD);
}

static unsigned long long ns_inode(int fd)
{
        struct stat st;
        return fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

static bool record_uint(json_t *record, const char *key, unsigned long long *out)
{
        json_t *v = json_object_get(record, key);
        if (!json_is_integer(v) || json_integer_value(v) <= 0)
                return false;
        *out = (unsigned long long)json_integer_value(v);
        return true;
}

/* The keeper the record names, checked: its pidfd, and its user and mount
 * namespaces' fds in *user and *mnt (either may be NULL), or -1 with *why. */
static int keeper_open(const char *state_dir, int *user, int *mnt, pid_t *pid_out, const char **why)
{
        char path[4096];
        record_path(state_dir, path, sizeof(path));
        *why = NULL;
        _cleanup_json_ json_t *record = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
        if (record == NULL) {
                if (access(path, F_OK) == 0)
                        *why = "its record cannot be read";
                return -1;
        }
        unsigned long long pid, start, user_ns, mnt_ns;
        if (!record_uint(record, "pid", &pid) || pid <= 1 || pid > INT32_MAX ||
            !record_uint(record, "start_time", &start) || !record_uint(record, "user_ns", &user_ns) ||
            !record_uint(record, "mnt_ns", &mnt_ns)) {
                *why = "its record is malformed";
                return -1;
        }
        /* The pidfd first: while it says the process lives, the pid (and the
         * namespaces opened through /proc/<pid>) are that process's. */
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
        if (pidfd < 0) {
                *why = "the process its record names is gone";
                return -1;
        }
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/%llu", pid);
        struct stat st;
        if (stat(proc, &st) < 0 || st.st_uid != getuid()) {
                *why = "the process its record names is another user's";
                return -1;
        }
        char comm[32] = "";
        snprintf(proc, sizeof(proc), "/proc/%llu/comm", pid);
        _cleanup_close_ int comm_fd = open(proc, O_RDONLY | O_CLOEXEC);
        ssize_t n = comm_fd < 0 ? -1 : read(comm_fd, comm, sizeof(comm) - 1);
        comm[n > 0 ? n : 0] = '\0';
        comm[strcspn(comm, "\n")] = '\0';
        if (strcmp(comm, KEEPER_NAME) != 0 || state_process_start_time((pid_t)pid) != start) {
                *why = "the process its record names is not the keeper (its pid was reused)";
                return -1;
        }
        snprintf(proc, sizeof(proc), "/proc/%llu/ns/user", pid);
        _cleanup_close_ int user_fd = open(proc, O_RDONLY | O_CLOEXEC);
        snprintf(proc, sizeof(proc), "/proc/%llu/ns/mnt", pid);
        _cleanup_close_ int mnt_fd = open(proc, O_RDONLY | O_CLOEXEC);
        if (user_fd < 0 || mnt_fd < 0 || ns_inode(user_fd) != user_ns || ns_inode(mnt_fd) != mnt_ns) {
                *why = "the keeper's namespaces are not those its record names";
                return -1;
        }
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        if (poll(&p, 1, 0) != 0) {
                *why = "the keeper ended while it was checked";
                return -1;
        }
        if (user != NULL)
                *user = steal_fd(&user_fd);
        if (mnt != NULL)
                *mnt = steal_fd(&mnt_fd);
        if (pid_out != NULL)
                *pid_out = (pid_t)pid;
        return steal_fd(&pidfd);
}

bool keeper_join(const char *state_dir)
{
        int user = -1, mnt = -1;
        const char *why;
        _cleanup_close_ int pidfd = keeper_open(state_dir, &user, &mnt, NULL, &why);
        _cleanup_close_ int user_fd = user, mnt_fd = mnt;
        if (pidfd < 0) {
                if (why != NULL)
                        fprintf(stderr,
                                "nsboxd --rootless: not joining the keeper of %s: %s; fresh namespaces\n",
                                state_dir, why);
                return false;
        }
        char cwd[4096];
        bool have_cwd = getcwd(cwd, sizeof(cwd)) != NULL;
        /* The user namespace first: its owner (this user) gets every
         * capability there, which joining its mount namespace takes. */
        if (setns(user_fd, CLONE_NEWUSER) < 0) {
                fprintf(stderr, "nsboxd --rootless: join the keeper's user namespace: %s; fresh namespaces\n",
                        strerror(errno));
                return false;
        }
        if (setns(mnt_fd, CLONE_NEWNS) < 0) {
                /* Half in: no fresh user namespace can be made from here. */
                fprintf(stderr, "nsboxd --rootless: join the keeper's mount namespace: %s\n",
                        strerror(errno));
                _exit(2);
        }
        if (have_cwd && chdir(cwd) < 0)
                fprintf(stderr, "nsboxd --rootless: chdir %s: %s\n", cwd, strerror(errno));
        setenv(KEEPER_HELD_ENV, "1", 1);
        return true;
}

bool keeper_held(void)
{
        static bool looked;
        if (!looked) {
                looked = true;
                const char *v = getenv(KEEPER_HELD_ENV);
                held = v != NULL && strcmp(v, "1") == 0;
                unsetenv(KEEPER_HELD_ENV);
        }
        return held;
}

static void keeper_make(const char *state_dir, unsigned grace_seconds)
{
        char grace[32];
        snprintf(grace, sizeof(grace), "%u", grace_seconds);
        /* Not nsboxd's child: nsboxd's death (kill -9) must not be its. */
        pid_t child = fork_detached();
        if (child < 0) {
                log_warn("live restore: fork the keeper: %s", strerror(-child));
                return;
        }
        if (child == 0) {
                char *argv[] = { KEEPER_NAME, KEEPER_ARG, (char *)state_dir, grace, NULL };
                char *envp[] = { NULL };
                execve("/proc/self/exe", argv, envp);
                _exit(127);
        }
        /* The keeper writes its record itself; wait for it, briefly. */
        const char *why;
        for (int i = 0; i < 500; i++) {
                _cleanup_close_ int pidfd = keeper_open(state_dir, NULL, NULL, NULL, &why);
                if (pidfd >= 0) {
                        held = true;
                        log_info(
                            "live restore: a keeper holds nsboxd's user and mount namespaces for the next "
                            "nsboxd (rootless)");
                        return;
                }
                usleep(10 * 1000);
        }
        log_warn("live restore: the keeper did not start: the next nsboxd cannot adopt these sandboxes");
}

void keeper_ensure(const char *state_dir, unsigned grace_seconds)
{
        /* A keeper of these very namespaces: the one joined (which, with
         * the lock now held, stays), or none: it may have ended between
         * the join and the lock, or the join was refused. */
        const char *why;
        int user = -1;
        _cleanup_close_ int pidfd = keeper_open(state_dir, &user, NULL, NULL, &why);
        _cleanup_close_ int user_fd = user;
        _cleanup_close_ int own = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
        if (pidfd >= 0 && own >= 0 && ns_inode(user_fd) == ns_inode(own)) {
                held = true;
                return;
        }
        keeper_make(state_dir, grace_seconds);
}

void keeper_release(const char *state_dir)
{
        if (!held)
                return;
        const char *why;
        pid_t pid;
        _cleanup_close_ int pidfd = keeper_open(state_dir, NULL, NULL, &pid, &why);
        if (pidfd < 0)
                return;
        char path[4096];
        record_path(state_dir, path, sizeof(path));
        unlink(path);
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        log_info("no sandbox left running: the keeper (pid %d) ends", (int)pid);
}

static bool record_names(const char *path, pid_t pid)
{
        _cleanup_json_ json_t *record = json_load_file(path, 0, NULL);
        json_t *v = json_object_get(record, "pid");
        return json_is_integer(v) && json_integer_value(v) == pid;
}

int keeper_main(int argc, char **argv)
{
        if (argc != 4 || strcmp(argv[1], KEEPER_ARG) != 0)
                return -1;
        prctl(PR_SET_NAME, KEEPER_NAME);
        const char *state_dir = argv[2];
        long long grace = strtoll(argv[3], NULL, 10);
        if (grace <= 0)
                grace = 1;
        char path[4096], lock[4096];
        record_path(state_dir, path, sizeof(path));
        snprintf(lock, sizeof(lock), "%s/nsboxd.lock", state_dir);
        pid_t self = getpid();
        _cleanup_close_ int user = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int mnt = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
        _cleanup_json_ json_t *record =
            json_pack("{s:I, s:I, s:I, s:I}", "pid", (json_int_t)self, "start_time",
                      (json_int_t)state_process_start_time(self), "user_ns", (json_int_t)ns_inode(user),
                      "mnt_ns", (json_int_t)ns_inode(mnt));
        if (record == NULL || json_file_replace(path, record, JSON_COMPACT, false, NULL) < 0)
                return 1;
        /* Once a second: is an nsboxd there (it holds the state dir's lock)?
         * A shared lock taken and dropped at once; nsboxd's own waits for
         * it a moment. */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long alone_since = now.tv_sec;
        for (;;) {
                sleep(1);
                if (!record_names(path, self))
                        return 0; /* replaced: another keeper holds another pair of namespaces */
                clock_gettime(CLOCK_MONOTONIC, &now);
                _cleanup_close_ int fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
                        alone_since = now.tv_sec;
                        continue;
                }
                if (fd >= 0)
                        flock(fd, LOCK_UN);
                if (now.tv_sec - alone_since >= grace) {
                        unlink(path);
                        return 0;
                }
        }
}
