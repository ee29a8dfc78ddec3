/* SPDX-License-Identifier: Apache-2.0 */
/* forkrun: the attach client of the sandbox's Python fork server
 * (image-files/usr/lib/nsbox/forkserver.py), installed in the image as
 * /usr/lib/nsbox/forkrun and run by nsboxd as a stateless python.run's exec:
 *
 *   forkrun TOKEN SCRIPT REPORT [NAME [ARG...]]
 *
 * It hands its stdin, stdout, stderr and cwd (SCM_RIGHTS) with its umask,
 * run.py's arguments (SCRIPT REPORT [NAME [ARG...]]) and environment to the server listening on the abstract
 * socket "nsbox-forkserver-TOKEN", waits for the call's wait status and ends
 * the same way: the exit code, or the same fatal signal. So the exec around
 * it (output capture, timeout, kill, exit code) sees what it would see of
 * `python3 run.py SCRIPT REPORT ...`, which is what it runs instead whenever the
 * server does not take the call (absent, not ready, refusing).
 *
 * The server is two templates: the heavy one ("nsbox-forkserver-TOKEN", with
 * the image's heavy modules imported) either takes the call or answers "L":
 * the light one ("nsbox-forkserver-light-TOKEN") takes it then.
 *
 * When this process is killed (the exec's timeout, exec.kill) its connection
 * closes and the server kills the call's whole tree.
 *
 * Static, no allocation, no stdio: it starts in well under a millisecond. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUNNER        "/usr/lib/nsbox/run.py"
#define PYTHON        "/usr/bin/python3"
#define SOCKET_PREFIX "nsbox-forkserver-"
#define LIGHT_PREFIX  "nsbox-forkserver-light-"
#define MAX_REQUEST   (256u << 10)

extern char **environ;

static char request[MAX_REQUEST];

static void say(const char *text)
{
        ssize_t r = write(2, text, strlen(text));
        (void)r;
}

/* The plain path: what nsboxd runs when there is no fork server. */
/* run.py's own argv: SCRIPT REPORT [NAME [ARG...]], after "python3 RUNNER". */
static void run_plain(int nargs, char **args)
{
        char *argv[nargs + 3];
        argv[0] = "python3";
        argv[1] = RUNNER;
        memcpy(argv + 2, args, (size_t)nargs * sizeof(char *));
        argv[nargs + 2] = NULL;
        execve(PYTHON, argv, environ);
        say("nsbox: cannot run " PYTHON "\n");
        _exit(127);
}

static size_t append(size_t at, const char *text)
{
        size_t n = strlen(text) + 1;
        if (at + n > sizeof(request))
                return 0;
        memcpy(request + at, text, n);
        return at + n;
}

/* The request: "NSBOX2\0UMASK\0COUNT\0" then run.py's COUNT arguments
 * (SCRIPT REPORT [NAME [ARG...]]) and one "K=V" per environment entry, each
 * NUL-terminated; 0 when it does not fit (the plain path takes it). */
static size_t build_request(int nargs, char **args)
{
        char umask_text[8], count_text[16];
        mode_t mask = umask(0);
        umask(mask);
        snprintf(umask_text, sizeof(umask_text), "%o", (unsigned)mask);
        snprintf(count_text, sizeof(count_text), "%d", nargs);
        size_t at = append(0, "NSBOX2");
        at = at ? append(at, umask_text) : 0;
        at = at ? append(at, count_text) : 0;
        for (int i = 0; at != 0 && i < nargs; i++)
                at = append(at, args[i]);
        for (char **e = environ; at != 0 && *e != NULL; e++)
                at = append(at, *e);
        return at;
}

static int connect_server(const char *prefix, const char *token)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        size_t plen = strlen(prefix), len = strlen(token);
        if (len == 0 || 1 + plen + len > sizeof(addr.sun_path))
                return -1;
        /* Abstract (leading NUL): the name belongs to the sandbox's own
         * network namespace, and no file of the sandbox can stand in for it. */
        memcpy(addr.sun_path + 1, prefix, plen);
        memcpy(addr.sun_path + 1 + plen, token, len);
        socklen_t addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + plen + len);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        if (connect(fd, (struct sockaddr *)&addr, addr_len) < 0) {
                close(fd);
                return -1;
        }
        /* Only a server of our own uid (not another user of the sandbox
         * that took the name) gets our fds. */
        struct ucred cred;
        socklen_t cred_len = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0 || cred.uid != getuid()) {
                close(fd);
                return -1;
        }
        return fd;
}

static int send_request(int fd, size_t len)
{
        int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (cwd < 0)
                return -1;
        int fds[4] = { 0, 1, 2, cwd };
        union {
                char buf[CMSG_SPACE(sizeof(fds))];
                struct cmsghdr align;
        } control;
        memset(&control, 0, sizeof(control));
        struct iovec iov = { .iov_base = request, .iov_len = len };
        struct msghdr msg = { .msg_iov = &iov,
                              .msg_iovlen = 1,
                              .msg_control = control.buf,
                              .msg_controllen = sizeof(control.buf) };
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(fds));
        memcpy(CMSG_DATA(cmsg), fds, sizeof(fds));
        ssize_t n;
        do
                n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        close(cwd);
        return n == (ssize_t)len ? 0 : -1;
}

/* End as the call ended: its exit code, or killed by its signal. */
__attribute__((noreturn)) static void exit_like(int status)
{
        if (WIFEXITED(status))
                _exit(WEXITSTATUS(status));
        int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
        signal(sig, SIG_DFL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        raise(sig);
        _exit(128 + sig);
}

/* The call, if the server at PREFIX TOKEN takes it: then this process
 * ends as the call does. Returns when it did not take it (absent or
 * refusing: 0; 'L': the light template's): nothing of the call ran. */
static int call_server(const char *prefix, const char *token, size_t len)
{
        int fd = connect_server(prefix, token);
        if (fd < 0)
                return 0;
        if (send_request(fd, len) < 0) {
                close(fd);
                return 0;
        }
        int accepted = 0, redirect = 0;
        for (;;) {
                char reply[16];
                ssize_t n = recv(fd, reply, sizeof(reply), 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n == 1 && reply[0] == 'A') {
                        accepted = 1;
                        continue;
                }
                if (n == 1 && reply[0] == 'L' && !accepted)
                        redirect = 'L';
                if (n == (ssize_t)sizeof(int)) {
                        int status;
                        memcpy(&status, reply, sizeof(status));
                        exit_like(status);
                }
                break;
        }
        if (!accepted) {
                close(fd);
                return redirect;
        }
        say("nsbox: the python fork server ended during the call\n");
        exit_like(SIGKILL);
}

int main(int argc, char **argv)
{
        if (argc < 4) {
                say("usage: forkrun TOKEN SCRIPT REPORT [NAME [ARG...]]\n");
                return 2;
        }
        int nargs = argc - 2;
        char **args = argv + 2;
        size_t len = build_request(nargs, args);
        if (len != 0 && call_server(SOCKET_PREFIX, argv[1], len) == 'L')
                call_server(LIGHT_PREFIX, argv[1], len);
        run_plain(nargs, args);
}
