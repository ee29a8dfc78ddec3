/* SPDX-License-Identifier: Apache-2.0 */
/* A private nsboxd for `nsbox run` when no daemon listens: the nsboxd binary
 * beside this one, on a socket and state dir of its own in a fresh 0700
 * directory. It never outlives the CLI: it asks for SIGTERM when its parent
 * dies, and nsboxd stops cleanly on SIGTERM, removing its sandboxes; a small
 * child of it removes the directory once it is gone. (The CLI does not link
 * the manager: every command starts faster without its libraries.) */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"

#define PRIVATE_RUN_DIR       "/run/nsbox-run"
#define PRIVATE_START_TIMEOUT 30000 /* ms until the socket must accept */
#define PRIVATE_STOP_TIMEOUT  30000 /* ms for a clean stop before SIGKILL */
#define PRIVATE_RM_TIMEOUT    5000  /* ms for the directory to be gone once it stopped */

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        if (type == FTW_DP)
                rmdir(path);
        else
                unlink(path);
        return 0;
}

/* Remove the private directory without leaving its file system: a mount a
 * failed cleanup left behind makes the rmdir fail instead of being emptied. */
static void remove_private_dir(const char *dir)
{
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* A root-owned directory nobody else can write: where the private dir goes. */
static const char *private_base_dir(void)
{
        struct stat st;
        if (geteuid() != 0) {
                const char *runtime = getenv("XDG_RUNTIME_DIR");
                return runtime != NULL && runtime[0] == '/' && access(runtime, W_OK) == 0 ? runtime : "/tmp";
        }
        if (mkdir(PRIVATE_RUN_DIR, 0700) < 0 && errno != EEXIST)
                return "/tmp";
        if (lstat(PRIVATE_RUN_DIR, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
            (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
                return "/tmp";
        return PRIVATE_RUN_DIR;
}

/* Forked by the private nsboxd-to-be: wait for it to end, then remove the
 * directory, also when the CLI was killed and could not. */
static void __attribute__((noreturn)) run_janitor(const char *dir, pid_t daemon)
{
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGUSR1);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        if (prctl(PR_SET_PDEATHSIG, SIGUSR1) == 0 && getppid() == daemon) {
                int sig;
                sigwait(&mask, &sig);
        }
        remove_private_dir(dir);
        _exit(0);
}

static void __attribute__((noreturn))
run_child(const char *dir, const char *socket_path, pid_t parent, int stderr_fd)
{
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
                _exit(1);
        prctl(PR_SET_NAME, "nsboxd-private");
        /* Out of the terminal's process group: Ctrl-C is the CLI's to handle. */
        setpgid(0, 0);
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
                dup2(null, STDIN_FILENO);
                dup2(null, STDOUT_FILENO);
                close(null);
        }
        if (stderr_fd >= 0)
                dup2(stderr_fd, STDERR_FILENO);
        char *state = NULL, nsboxd[4096];
        if (asprintf(&state, "%s/state", dir) < 0 || cli_sibling_binary("nsboxd", nsboxd, sizeof(nsboxd)) < 0)
                _exit(1);
        pid_t self = getpid();
        pid_t janitor = fork();
        if (janitor == 0)
                run_janitor(dir, self);
        /* One sandbox for one command: a warm pool would only cost time (and
         * room for 64 would draw nsboxd's overcommit warning on small hosts). */
        char *args[] = {
                "nsboxd",      "--socket", (char *)socket_path, "--state-dir", state, "--log-level", "warn",
                "--warm-pool", "0",        "--max-sandboxes",   "1",           NULL,  NULL
        };
        /* A user's: as root of a user namespace of its own (nsboxd --rootless). */
        if (geteuid() != 0)
                args[11] = "--rootless";
        execv(nsboxd, args);
        fprintf(stderr, "nsbox: cannot run %s: %s\n", nsboxd, strerror(errno));
        _exit(127);
}

/* The last line a private nsboxd that failed to start wrote, without its
 * timestamp and level. Its janitor may still hold the pipe: read only what
 * is there. */
static bool last_line_said(int fd, char *out, size_t len)
{
        if (fd < 0)
                return false;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        char buf[8192];
        size_t used = 0;
        ssize_t n;
        while (used < sizeof(buf) - 1 && (n = read(fd, buf + used, sizeof(buf) - 1 - used)) > 0)
                used += (size_t)n;
        buf[used] = '\0';
        while (used > 0 && buf[used - 1] == '\n')
                buf[--used] = '\0';
        if (used == 0)
                return false;
        char *line = strrchr(buf, '\n');
        line = line ? line + 1 : buf;
        /* "2026-...Z error: message" or "nsboxd: message" -> message */
        char *sep = strstr(line, ": ");
        if (sep != NULL && (line[0] == '2' || strncmp(line, "nsboxd", 6) == 0))
                line = sep + 2;
        snprintf(out, len, "%s", line);
        return true;
}

static bool socket_accepts(const char *path)
{
        struct client *c = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (client_connect(path, &c, &err) < 0)
                return false;
        client_close(c);
        return true;
}

int private_daemon_start(struct private_daemon *pd, int signal_fd, nsbox_error_t **err)
{
        pd->pid = -1;
        if (asprintf(&pd->dir, "%s/nsbox-run-XXXXXX", private_base_dir()) < 0) {
                pd->dir = NULL;
                return nsbox_error(err, ENOMEM, "private dir");
        }
        if (mkdtemp(pd->dir) == NULL) {
                int r = nsbox_error(err, errno, "mkdtemp %s", pd->dir);
                free(pd->dir);
                pd->dir = NULL;
                return r;
        }
        if (asprintf(&pd->socket_path, "%s/sock", pd->dir) < 0) {
                pd->socket_path = NULL;
                return nsbox_error(err, ENOMEM, "private socket path");
        }
        /* A user's nsboxd --rootless says why it could not start on a pipe,
         * so that the CLI says it in its one line; once it serves, the pipe
         * is closed and what it logs is dropped (root's writes to the
         * terminal, as before). */
        int said[2] = { -1, -1 };
        if (geteuid() != 0 && pipe2(said, O_CLOEXEC) < 0)
                said[0] = said[1] = -1;
        fflush(NULL);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0)
                return nsbox_error(err, errno, "fork");
        if (pid == 0)
                run_child(pd->dir, pd->socket_path, parent, said[1]);
        pd->pid = pid;
        if (said[1] >= 0)
                close(said[1]);
        _cleanup_close_ int said_fd = said[0];

        for (int waited = 0; !socket_accepts(pd->socket_path); waited += 20) {
                int status;
                if (waitpid(pd->pid, &status, WNOHANG) == pd->pid) {
                        pd->pid = -1;
                        char why[1024];
                        if (WIFEXITED(status) && last_line_said(said_fd, why, sizeof(why)))
                                return nsbox_error(err, 0, "exited at start with status %d: %s",
                                                   WEXITSTATUS(status), why);
                        if (WIFEXITED(status))
                                return nsbox_error(err, 0, "exited at start with status %d",
                                                   WEXITSTATUS(status));
                        return nsbox_error(err, 0, "killed at start by signal %d", WTERMSIG(status));
                }
                if (waited >= PRIVATE_START_TIMEOUT)
                        return nsbox_error(err, ETIMEDOUT, "%s did not accept connections", pd->socket_path);
                struct pollfd pfd = { .fd = signal_fd, .events = POLLIN };
                if (poll(&pfd, signal_fd >= 0 ? 1 : 0, 20) > 0)
                        return nsbox_error(err, EINTR, "interrupted while starting");
        }
        return 0;
}

void private_daemon_stop(struct private_daemon *pd)
{
        if (pd->pid > 0) {
                kill(pd->pid, SIGTERM);
                int status;
                for (int waited = 0; waitpid(pd->pid, &status, WNOHANG) == 0; waited += 20) {
                        if (waited == PRIVATE_STOP_TIMEOUT) {
                                cli_fail("private nsboxd did not stop in %d s; killing it",
                                         PRIVATE_STOP_TIMEOUT / 1000);
                                kill(pd->pid, SIGKILL);
                        }
                        usleep(20000);
                }
                pd->pid = -1;
        }
        /* Its janitor (run_janitor) removes the directory too once the
         * daemon is gone, at the same time: an rmdir of ours that finds
         * entries the janitor is still removing fails, so what is left is
         * tried again for a while before it is said. */
        if (pd->dir != NULL) {
                remove_private_dir(pd->dir);
                for (int waited = 0; access(pd->dir, F_OK) == 0 && waited < PRIVATE_RM_TIMEOUT;
                     waited += 20) {
                        usleep(20000);
                        remove_private_dir(pd->dir);
                }
                if (access(pd->dir, F_OK) == 0)
                        cli_fail("could not remove %s", pd->dir);
        }
        free(pd->dir);
        free(pd->socket_path);
        pd->dir = NULL;
        pd->socket_path = NULL;
}
