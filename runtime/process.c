#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/securebits.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"

struct spawn_failure {
        int errnum;
        char message[256];
};

/* Runs in the forked child only: report through the CLOEXEC pipe and die. */
static __attribute__((noreturn)) void child_fail(int report_fd, int errnum, const char *what)
{
        struct spawn_failure failure = { .errnum = errnum };
        snprintf(failure.message, sizeof(failure.message), "%s", what);
        ssize_t ignored = write(report_fd, &failure, sizeof(failure));
        (void)ignored;
        _exit(127);
}

static int drop_all_capabilities(void)
{
        /* The bounding set must go while we still hold CAP_SETPCAP. */
        for (cap_value_t cap = 0; cap <= CAP_LAST_CAP; cap++) {
                if (cap_drop_bound(cap) < 0 && errno != EINVAL)
                        return -1;
        }
        if (cap_reset_ambient() < 0)
                return -1;
        /* Lock root out of regaining capabilities on execve of any binary. */
        unsigned bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                        SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                        SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
                return -1;
        return 0;
}

static int clear_capability_sets(void)
{
        cap_t empty = cap_init();
        if (empty == NULL)
                return -1;
        int r = cap_set_proc(empty);
        int saved = errno;
        cap_free(empty);
        errno = saved;
        return r;
}

void process_exec_child(const struct process_spec *spec, int report_fd)
{
        /* Join the exec's own cgroup before anything else, so that the whole
         * tree it forks, daemons included, can be killed as one. */
        if (spec->cgroup_procs_fd >= 0 && write(spec->cgroup_procs_fd, "0\n", 2) != 2)
                child_fail(report_fd, errno, "join the exec cgroup");
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);

        /* A new session has no controlling terminal, so TIOCSTI into a
         * terminal the sandbox does not own is impossible. */
        if (setsid() < 0)
                child_fail(report_fd, errno, "setsid");

        /* Move the report pipe out of the way of 0-2 before the dup2s. */
        if (report_fd <= 2) {
                int moved = fcntl(report_fd, F_DUPFD_CLOEXEC, 3);
                if (moved < 0)
                        child_fail(report_fd, errno, "dup report fd");
                report_fd = moved;
        }
        int stdio[3];
        for (int i = 0; i < 3; i++) {
                stdio[i] = spec->stdio[i] > 2 ? spec->stdio[i] : fcntl(spec->stdio[i], F_DUPFD_CLOEXEC, 3);
                if (stdio[i] < 0)
                        child_fail(report_fd, errno, "dup stdio");
        }
        for (int i = 0; i < 3; i++) {
                if (dup2(stdio[i], i) < 0)
                        child_fail(report_fd, errno, "dup2 stdio");
        }
        /* Only 0-2 survive execve: everything else is closed now or on exec. */
        int keep_report = fcntl(report_fd, F_DUPFD_CLOEXEC, 3);
        if (keep_report < 0)
                child_fail(report_fd, errno, "dup report fd");
        if (keep_report != 3) {
                if (dup3(keep_report, 3, O_CLOEXEC) < 0)
                        child_fail(report_fd, errno, "dup report fd");
        }
        report_fd = 3;
        if (syscall(SYS_close_range, 4, ~0U, 0) < 0)
                child_fail(report_fd, errno, "close_range");

        if (chdir(spec->cwd) < 0)
                child_fail(report_fd, errno, "chdir to the working directory");

        if (drop_all_capabilities() < 0)
                child_fail(report_fd, errno, "drop bounding and ambient capabilities");
        if (setresgid(spec->gid, spec->gid, spec->gid) < 0)
                child_fail(report_fd, errno, "setresgid");
        if (setresuid(spec->uid, spec->uid, spec->uid) < 0)
                child_fail(report_fd, errno, "setresuid");
        if (clear_capability_sets() < 0)
                child_fail(report_fd, errno, "clear capabilities");
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                child_fail(report_fd, errno, "no_new_privs");

        /* Last step before execve: everything after this runs under the filter. */
        if (spec->seccomp != NULL && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, spec->seccomp) < 0)
                child_fail(report_fd, errno, "load seccomp filter");

        if (spec->search_path)
                execvpe(spec->argv[0], spec->argv, spec->envp);
        else
                execve(spec->argv[0], spec->argv, spec->envp);
        child_fail(report_fd, errno, spec->argv[0]);
}

pid_t process_spawn(const struct process_spec *spec, char *message, size_t message_len)
{
        int report[2];
        if (pipe2(report, O_CLOEXEC) < 0) {
                snprintf(message, message_len, "pipe");
                return -errno;
        }
        pid_t pid = fork();
        if (pid < 0) {
                int saved = errno;
                close(report[0]);
                close(report[1]);
                snprintf(message, message_len, "fork");
                return -saved;
        }
        if (pid == 0) {
                close(report[0]);
                process_exec_child(spec, report[1]);
        }
        close(report[1]);
        return process_await_exec(pid, report[0], message, message_len);
}

pid_t process_await_exec(pid_t pid, int report_fd, char *message, size_t message_len)
{
        /* EOF without a report means execve succeeded (the pipe was CLOEXEC). */
        struct spawn_failure failure;
        ssize_t n;
        do {
                n = read(report_fd, &failure, sizeof(failure));
        } while (n < 0 && errno == EINTR);
        close(report_fd);
        if (n == (ssize_t)sizeof(failure)) {
                int status;
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                        ;
                snprintf(message, message_len, "%s", failure.message);
                return failure.errnum > 0 ? -failure.errnum : -EIO;
        }
        return pid;
}
