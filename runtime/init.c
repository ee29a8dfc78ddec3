/* nsbox-init: PID 1 of a sandbox.  It is exec'd from a sealed memfd (so
 * /proc/1/exe is no writable host file, CVE-2019-5736), is non-dumpable,
 * reaps every orphan, and starts the processes the manager asks for with the
 * stdio pipes the manager passes it.  It never relays output bytes. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "process.h"
#include "proto.h"

#define MAX_EXECS 1024

struct running_exec {
        uint32_t exec_id;
        pid_t pid;
};

static struct running_exec execs[MAX_EXECS];

/* A child forked ahead of the next exec that has already joined that exec's
 * cgroup: joining a cgroup v1 can wait a whole RCU grace period, which this
 * way is never on the path of a request. */
#define MAX_SPARES 2

struct spare {
        pid_t pid; /* 0: the slot is free */
        int sock;  /* to the spare: the exec request and its fds */
        uint32_t exec_id;
};

static struct spare spares[MAX_SPARES];

/* Requests up to this size are relayed to the spare; larger ones (near the
 * default socket buffer) take the ordinary fork. */
#define SPARE_MAX_REQUEST (128u * 1024)
static unsigned n_execs;
static struct sock_fprog seccomp_program;
static union ctl_message *request_buffer;

static void send_failed(int ctl, uint32_t exec_id, int errnum, const char *message)
{
        struct ctl_failed msg = { .hdr = { CTL_FAILED, exec_id }, .errnum = errnum };
        snprintf(msg.message, sizeof(msg.message), "%s", message);
        ctl_send(ctl, &msg, sizeof(msg), NULL, 0, NULL, 0);
}

static int load_seccomp_program(void)
{
        struct stat st;
        if (fstat(NSBOX_INIT_SECCOMP_FD, &st) < 0)
                return errno == EBADF ? 0 : -errno; /* no filter configured */
        if (st.st_size == 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
            st.st_size / sizeof(struct sock_filter) > 0xffff)
                return -EINVAL;
        struct sock_filter *filter = malloc(st.st_size);
        if (filter == NULL)
                return -ENOMEM;
        if (pread(NSBOX_INIT_SECCOMP_FD, filter, st.st_size, 0) != st.st_size) {
                free(filter);
                return -EIO;
        }
        close(NSBOX_INIT_SECCOMP_FD);
        seccomp_program.filter = filter;
        seccomp_program.len = st.st_size / sizeof(struct sock_filter);
        return 0;
}

/* Split the payload into cwd, argv and envp; every string must end inside it. */
static int unpack_exec(const struct ctl_exec *req, size_t len, const char **cwd, char ***argv, char ***envp)
{
        if (len < sizeof(*req) || req->payload_len != len - sizeof(*req) || req->argc == 0 ||
            req->argc > 1u << 16 || req->envc > 1u << 16)
                return -EINVAL;
        const char *p = (const char *)(req + 1);
        const char *end = p + req->payload_len;
        size_t nstrings = 1 + (size_t)req->argc + req->envc;
        char **strings = calloc(nstrings + 2, sizeof(char *));
        if (strings == NULL)
                return -ENOMEM;
        for (size_t i = 0; i < nstrings; i++) {
                const char *nul = memchr(p, '\0', end - p);
                if (nul == NULL) {
                        free(strings);
                        return -EINVAL;
                }
                strings[i + (i > req->argc ? 1 : 0)] = (char *)p;
                p = nul + 1;
        }
        /* Layout: [cwd, argv..., NULL, env..., NULL] */
        *cwd = strings[0];
        *argv = &strings[1];
        (*argv)[req->argc] = NULL;
        *envp = &strings[req->argc + 2];
        (*envp)[req->envc] = NULL;
        return 0;
}

static struct process_spec spec_of(const struct ctl_exec *req, const char *cwd, char **argv, char **envp,
                                   const int *stdio, int cgroup_procs_fd)
{
        return (struct process_spec){
                .cwd = cwd,
                .argv = argv,
                .envp = envp,
                .uid = req->uid,
                .gid = req->gid,
                .search_path = (req->flags & CTL_EXEC_SEARCH_PATH) != 0,
                .stdio = { stdio[0], stdio[1], stdio[2] },
                .cgroup_procs_fd = cgroup_procs_fd,
                .seccomp = seccomp_program.len > 0 ? &seccomp_program : NULL,
        };
}

static void spare_discard(struct spare *sp)
{
        if (sp->pid > 0) {
                kill(sp->pid, SIGKILL); /* reaped as an unknown child */
                close(sp->sock);
        }
        sp->pid = 0;
        sp->sock = -1;
}

static struct spare *spare_for(uint32_t exec_id)
{
        for (int i = 0; i < MAX_SPARES; i++) {
                if (spares[i].pid > 0 && spares[i].exec_id == exec_id)
                        return &spares[i];
        }
        return NULL;
}

static __attribute__((noreturn)) void spare_main(int sock, int procs_fd)
{
        close(NSBOX_INIT_CTL_FD);
        if (write(procs_fd, "0\n", 2) != 2)
                _exit(1);
        close(procs_fd);
        int fds[4];
        unsigned nfds = 0;
        ssize_t n = ctl_recv(sock, request_buffer, SPARE_MAX_REQUEST, fds, 4, &nfds);
        const struct ctl_exec *req = &request_buffer->exec;
        const char *cwd;
        char **argv, **envp;
        if (n <= 0 || nfds != 4 || unpack_exec(req, (size_t)n, &cwd, &argv, &envp) < 0)
                _exit(1);
        /* Alive past the request: from here on the exec is ours. */
        if (write(sock, "k", 1) != 1)
                _exit(1);
        close(sock);
        struct process_spec spec = spec_of(req, cwd, argv, envp, fds, -1 /* joined already */);
        process_exec_child(&spec, fds[3]);
}

static void handle_spare(const struct ctl_header *req, int *fds, unsigned nfds)
{
        if (nfds != 1 || spare_for(req->exec_id) != NULL)
                return;
        /* A free slot, or the one for the oldest exec (it was never used). */
        struct spare *sp = &spares[0];
        for (int i = 0; i < MAX_SPARES; i++) {
                if (spares[i].pid == 0) {
                        sp = &spares[i];
                        break;
                }
                if (spares[i].exec_id < sp->exec_id)
                        sp = &spares[i];
        }
        spare_discard(sp);
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return;
        pid_t pid = fork();
        if (pid == 0) {
                close(sv[0]);
                spare_main(sv[1], fds[0]);
        }
        close(sv[1]);
        if (pid < 0) {
                close(sv[0]);
                return;
        }
        *sp = (struct spare){ .pid = pid, .sock = sv[0], .exec_id = req->exec_id };
}

/* Hand the request to the spare prepared for it: its pid, -errno, or 0
 * when the spare is gone. */
static pid_t spawn_with_spare(struct spare *sp, const struct ctl_exec *req, size_t len, int *fds,
                              char *message, size_t message_len)
{
        int report[2];
        if (pipe2(report, O_CLOEXEC) < 0)
                return -errno;
        int relay[4] = { fds[0], fds[1], fds[2], report[1] };
        ssize_t n = ctl_send(sp->sock, req, len, NULL, 0, relay, 4);
        close(report[1]);
        /* The spare acknowledges the request. A spare killed from inside may
         * not have exited yet when the request is sent: without the ack its
         * death would read as an exec that started and was killed. */
        char ack = 0;
        if (n >= 0) {
                do {
                        n = read(sp->sock, &ack, 1);
                } while (n < 0 && errno == EINTR);
        }
        pid_t pid = sp->pid;
        close(sp->sock);
        sp->sock = -1;
        sp->pid = 0;
        if (n != 1) {
                /* The spare is gone: the caller starts the exec itself. */
                close(report[0]);
                kill(pid, SIGKILL);
                return 0;
        }
        return process_await_exec(pid, report[0], message, message_len);
}

static void handle_exec(int ctl, const struct ctl_exec *req, size_t len, int *fds, unsigned nfds)
{
        const char *cwd;
        char **argv, **envp;
        char message[CTL_MAX_ERROR];

        if (nfds != 3 && nfds != 4) {
                send_failed(ctl, req->hdr.exec_id, EINVAL, "exec request without three stdio fds");
                return;
        }
        if (n_execs == MAX_EXECS) {
                send_failed(ctl, req->hdr.exec_id, EAGAIN, "too many running execs in this sandbox");
                return;
        }
        int r = unpack_exec(req, len, &cwd, &argv, &envp);
        if (r < 0) {
                send_failed(ctl, req->hdr.exec_id, -r, "malformed exec request");
                return;
        }
        struct process_spec spec = spec_of(req, cwd, argv, envp, fds, nfds == 4 ? fds[3] : -1);
        /* The manager always sends the exec's cgroup.procs: a spare that is
         * missing (killed from inside) costs only the wait for the join. */
        struct spare *sp = spare_for(req->hdr.exec_id);
        pid_t pid = 0;
        if (sp != NULL && nfds == 4 && len <= SPARE_MAX_REQUEST)
                pid = spawn_with_spare(sp, req, len, fds, message, sizeof(message));
        if (pid == 0)
                pid = process_spawn(&spec, message, sizeof(message));
        free(argv - 1);
        if (pid < 0) {
                send_failed(ctl, req->hdr.exec_id, (int)-pid, message);
                return;
        }
        execs[n_execs++] = (struct running_exec){ .exec_id = req->hdr.exec_id, .pid = pid };
        struct ctl_started started = { .hdr = { CTL_STARTED, req->hdr.exec_id }, .pid = pid };
        ctl_send(ctl, &started, sizeof(started), NULL, 0, NULL, 0);
}

static void handle_kill(const struct ctl_kill *req)
{
        for (unsigned i = 0; i < n_execs; i++) {
                if (execs[i].exec_id == req->hdr.exec_id) {
                        /* Each exec leads its own session and process group. */
                        kill(-execs[i].pid, req->signal);
                        kill(execs[i].pid, req->signal);
                }
        }
}

static void reap_children(int ctl)
{
        for (;;) {
                int status;
                pid_t pid = waitpid(-1, &status, WNOHANG);
                if (pid <= 0)
                        return;
                for (int i = 0; i < MAX_SPARES; i++) {
                        if (spares[i].pid == pid) { /* it died unused (killed from inside?) */
                                close(spares[i].sock);
                                spares[i].pid = 0;
                                spares[i].sock = -1;
                        }
                }
                for (unsigned i = 0; i < n_execs; i++) {
                        if (execs[i].pid != pid)
                                continue;
                        struct ctl_exited exited = { .hdr = { CTL_EXITED, execs[i].exec_id },
                                                     .wait_status = status };
                        ctl_send(ctl, &exited, sizeof(exited), NULL, 0, NULL, 0);
                        execs[i] = execs[--n_execs];
                        break;
                }
        }
}

/* Returns 0 to go on, -1 when the manager is gone. */
static int handle_control(int ctl)
{
        int fds[4];
        unsigned nfds = 0;
        ssize_t n = ctl_recv(ctl, request_buffer, CTL_MAX_MESSAGE, fds, 4, &nfds);
        if (n == 0)
                return -1;
        if (n < 0)
                return (n == -EAGAIN || n == -EINTR || n == -EMSGSIZE) ? 0 : -1;
        if ((size_t)n >= sizeof(struct ctl_header)) {
                switch (request_buffer->hdr.type) {
                case CTL_EXEC:
                        handle_exec(ctl, &request_buffer->exec, n, fds, nfds);
                        break;
                case CTL_KILL:
                        if ((size_t)n >= sizeof(struct ctl_kill))
                                handle_kill(&request_buffer->kill);
                        break;
                case CTL_SPARE:
                        handle_spare(&request_buffer->hdr, fds, nfds);
                        break;
                default:
                        break;
                }
        }
        for (unsigned i = 0; i < nfds; i++)
                close(fds[i]);
        return 0;
}

int main(void)
{
        /* Nothing in the sandbox may ptrace or open our memory or exe. */
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

        int ctl = NSBOX_INIT_CTL_FD;
        request_buffer = malloc(CTL_MAX_MESSAGE);
        if (request_buffer == NULL)
                return 1;
        int r = load_seccomp_program();
        if (r < 0) {
                send_failed(ctl, 0, -r, "init: read the seccomp program");
                return 1;
        }

        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0) {
                send_failed(ctl, 0, errno, "init: signalfd");
                return 1;
        }

        struct ctl_header ready = { CTL_READY, 0 };
        if (ctl_send(ctl, &ready, sizeof(ready), NULL, 0, NULL, 0) < 0)
                return 1;

        struct pollfd pfds[2] = { { .fd = ctl, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
        for (;;) {
                if (poll(pfds, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return 1;
                }
                if (pfds[1].revents & POLLIN) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                ;
                        reap_children(ctl);
                }
                if (pfds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                        if (handle_control(ctl) < 0)
                                break;
                }
        }
        /* The manager is gone: end the sandbox rather than run unsupervised.
         * PID 1 exiting makes the kernel kill every process in the namespace. */
        return 0;
}
