/* SPDX-License-Identifier: Apache-2.0 */
/* Starting one exec'd process inside a sandbox: everything between fork()
 * and execve(), in two halves. The first half depends on nothing in the
 * request and runs while the child waits for one (see supervisor.c); the
 * second applies the request and execs. */
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

struct process_spec {
        const char *cwd;
        char *const *argv;
        char *const *envp;
        uid_t uid;
        gid_t gid;
        int search_path;
        int tty; /* stdin is a terminal to become the controlling one (CTL_EXEC_TTY) */
        int stdio[3];
        const struct sock_fprog *seccomp; /* NULL: none, or inherited already */
};

/* Failures of either half are written to `report_fd` as a struct
 * process_failure; the caller then sees a message saying which step failed.
 * EOF on the (CLOEXEC) report pipe without one means execve succeeded. */
struct process_failure {
        int errnum;
        int exit_code; /* what the exec's result says, 126 or 127; 0: by errnum */
        char message[256];
};

/* For the init, once, so that every process it starts inherits it: default
 * signal dispositions, an empty bounding and ambient set, and locked
 * securebits that keep root from regaining capabilities through execve or
 * setuid. Its own effective capabilities stay. Returns 0 or -errno. */
int process_limit_privileges(void);

/* In the exec's child, before its request: an empty signal mask and a new
 * session (so no controlling terminal: TIOCSTI into a terminal the sandbox
 * does not own is impossible). */
void process_prepare(int report_fd);

/* The rest, after the request: stdio, only fds 0-2 left, cwd, the exec's
 * uid/gid, no capabilities in any set, no_new_privs, the seccomp filter as
 * the last step, execve. Never returns. */
__attribute__((noreturn)) void process_exec_child(const struct process_spec *spec, int report_fd);

/* Report a failure to the reader of report_fd and _exit(127). */
__attribute__((noreturn)) void process_fail(int report_fd, int errnum, const char *what);
/* The same, with the exit code the exec's result is to give (126 or 127). */
__attribute__((noreturn)) void process_fail_with(int report_fd, int errnum, int exit_code, const char *what);

/* Append the children of `pid`, as the kernel lists them in
 * /proc/PID/task/PID/children ("1 2 3 "), to out[*count..max). Returns 0,
 * or -1 without /proc. */
int process_list_children(pid_t pid, pid_t *out, int *count, int max);
