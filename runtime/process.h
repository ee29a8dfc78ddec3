/* Starting one exec'd process inside a sandbox: everything between fork()
 * in the init and execve(). */
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
        int stdio[3];
        int cgroup_procs_fd;              /* write "0" here first to join the exec's cgroup; -1: none */
        const struct sock_fprog *seccomp; /* NULL: none */
};

/* Fork and start the process. Returns the pid, or -errno with `message`
 * (size CTL_MAX_ERROR) saying which step failed. The child starts a new
 * session, has only fds 0-2, no capabilities in any set, no_new_privs,
 * and the seccomp filter loaded as the last step before execve. */
pid_t process_spawn(const struct process_spec *spec, char *message, size_t message_len);

/* The part of process_spawn that runs in the child: from the cgroup join to
 * execve. Failures go to report_fd as a struct process_failure. */
__attribute__((noreturn)) void process_exec_child(const struct process_spec *spec, int report_fd);

/* Wait for the report of a child started with process_exec_child: its pid
 * when it exec'd, or -errno with `message`. */
pid_t process_await_exec(pid_t pid, int report_fd, char *message, size_t message_len);
