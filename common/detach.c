/* SPDX-License-Identifier: Apache-2.0 */
/* fork_detached: a process no child of its maker, whose death (a kill -9) is not its own. */
#include "detach.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"

static void detach_self(void)
{
        setsid();
        if (chdir("/") < 0) /* holding no dir of its maker's busy */
                _exit(127);
        for (int s = 1; s < NSIG; s++)
                signal(s, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        for (int fd = 0; fd < 3 && null >= 0; fd++)
                dup2(null, fd);
        syscall(SYS_close_range, 3U, ~0U, 0U);
}

pid_t fork_detached(void)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        _cleanup_close_ int rd = p[0];
        pid_t mid = fork();
        if (mid < 0) {
                int e = errno;
                close(p[1]);
                return -e;
        }
        if (mid == 0) {
                pid_t child = fork();
                if (child == 0) {
                        detach_self();
                        return 0;
                }
                ssize_t n = write(p[1], &child, sizeof(child));
                _exit(n == sizeof(child) && child > 0 ? 0 : 1);
        }
        close(p[1]);
        pid_t child = -1;
        ssize_t n;
        while ((n = read(rd, &child, sizeof(child))) < 0 && errno == EINTR)
                ;
        while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
                ;
        return n == sizeof(child) && child > 0 ? child : -EAGAIN;
}
