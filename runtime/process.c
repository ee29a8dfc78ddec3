/* SPDX-License-Identifier: Apache-2.0 */
/* Starting one exec'd process in a sandbox: everything between fork() and execve(). */
#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

void process_fail_with(int report_fd, int errnum, int exit_code, const char *what)
{
        struct process_failure failure = { .errnum = errnum, .exit_code = exit_code };
        snprintf(failure.message, sizeof(failure.message), "%s", what);
        ssize_t ignored = write(report_fd, &failure, sizeof(failure));
        (void)ignored;
        _exit(127);
}

void process_fail(int report_fd, int errnum, const char *what)
{
        process_fail_with(report_fd, errnum, 0, what);
}

int process_limit_privileges(void)
{
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        /* The bounding set must go while we still hold CAP_SETPCAP. */
        for (cap_value_t cap = 0; cap <= CAP_LAST_CAP; cap++) {
                if (cap_drop_bound(cap) < 0 && errno != EINVAL)
                        return -errno;
        }
        if (cap_reset_ambient() < 0)
                return -errno;
        /* Lock root out of regaining capabilities on execve of any binary. */
        unsigned bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                        SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                        SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
                return -errno;
        return 0;
}

void process_prepare(int report_fd)
{
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (setsid() < 0)
                process_fail(report_fd, errno, "setsid");
}

/* Not libcap's cap_set_proc: its cap_t comes from the heap, and until its
 * execve this process shares its supervisor's heap (supervisor.c) while a
 * process of its new uid may kill it at any instruction. The call itself,
 * with everything on the stack. */
static int clear_capability_sets(void)
{
        struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = { { 0 } };
        return (int)syscall(SYS_capset, &header, none);
}

void process_exec_child(const struct process_spec *spec, int report_fd)
{
        /* Move the report pipe out of the way of 0-2 before the dup2s. */
        if (report_fd <= 2) {
                int moved = fcntl(report_fd, F_DUPFD_CLOEXEC, 3);
                if (moved < 0)
                        process_fail(report_fd, errno, "dup report fd");
                report_fd = moved;
        }
        int stdio[3];
        for (int i = 0; i < 3; i++) {
                stdio[i] = spec->stdio[i] > 2 ? spec->stdio[i] : fcntl(spec->stdio[i], F_DUPFD_CLOEXEC, 3);
                if (stdio[i] < 0)
                        process_fail(report_fd, errno, "dup stdio");
        }
        for (int i = 0; i < 3; i++) {
                if (dup2(stdio[i], i) < 0)
                        process_fail(report_fd, errno, "dup2 stdio");
        }
        /* A session leader (process_prepare) without a controlling terminal
         * takes this one; the pty is the sandbox's own, so TIOCSTI on it
         * reaches nothing outside. */
        if (spec->tty && ioctl(0, TIOCSCTTY, 0) < 0)
                process_fail(report_fd, errno, "make the pty the controlling terminal");
        /* Only 0-2 survive execve: everything else is closed now or on exec. */
        if (report_fd != 3) {
                if (dup3(report_fd, 3, O_CLOEXEC) < 0)
                        process_fail(report_fd, errno, "dup report fd");
                report_fd = 3;
        }
        if (syscall(SYS_close_range, 4, ~0U, 0) < 0)
                process_fail(report_fd, errno, "close_range");

        /* A new gid or uid makes our memory dumpable again if the host's
         * fs.suid_dumpable says so, and it is the supervisor's memory too
         * (supervisor.c). Until the flag is reset below, every signal waits:
         * none sent by a process of the new ids may dump a core of it. No
         * capless process may ptrace us either: until the capability sets
         * are cleared, ours are no subset of its; from then on we are not
         * dumpable, until execve gives us memory of our own. */
        sigset_t all, none;
        sigfillset(&all);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &all, NULL);
        if (setresgid(spec->gid, spec->gid, spec->gid) < 0)
                process_fail(report_fd, errno, "setresgid");
        if (setresuid(spec->uid, spec->uid, spec->uid) < 0)
                process_fail(report_fd, errno, "setresuid");
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                process_fail(report_fd, errno, "not dumpable");
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (clear_capability_sets() < 0)
                process_fail(report_fd, errno, "clear capabilities");
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                process_fail(report_fd, errno, "no_new_privs");
        /* Entered with the exec's own credentials, not the supervisor's: a
         * uid 1000 exec must not start inside root's 0700 /root. */
        if (chdir(spec->cwd) < 0) {
                /* 126, as docker exec's runtime gives for a workdir it cannot
                 * enter: 127 would say the command was not found. */
                char what[128];
                snprintf(what, sizeof(what), "working directory %s", spec->cwd);
                process_fail_with(report_fd, errno, 126, what);
        }

        /* Last step before execve: everything after this runs under the filter. */
        if (spec->seccomp != NULL && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, spec->seccomp) < 0)
                process_fail(report_fd, errno, "load seccomp filter");

        if (spec->search_path)
                execvpe(spec->argv[0], spec->argv, spec->envp);
        else
                execve(spec->argv[0], spec->argv, spec->envp);
        process_fail(report_fd, errno, spec->argv[0]);
}

int process_list_children(pid_t pid, pid_t *out, int *count, int max)
{
        char path[64], buf[8192];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : -1; /* ENOENT: it is gone already */
        size_t have = 0;
        while (have < sizeof(buf) - 1) {
                ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
                if (n <= 0)
                        break;
                have += n;
        }
        close(fd);
        buf[have] = '\0';
        for (char *p = buf, *end; *count < max; p = end) {
                long child = strtol(p, &end, 10);
                if (end == p)
                        break;
                if (child > 0)
                        out[(*count)++] = (pid_t)child;
        }
        return 0;
}
