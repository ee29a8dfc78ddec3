/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-init: PID 1 of a sandbox.  It is exec'd from a sealed memfd (so
 * /proc/1/exe is no writable host file, CVE-2019-5736), is non-dumpable,
 * reaps every orphan, and starts the exec slots the manager asks for (see
 * runtime/supervisor.c).  Requests and output never pass through it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "process.h"
#include "proto.h"
#include "seccomp_check.h"
#include "supervisor.h"

static struct sock_fprog seccomp_program;

/* Live restore: set once nsboxd sent a lease (CTL_LEASE). Then the control
 * socket never hangs up (we hold the manager's end too): the lease does
 * when nsboxd goes, and we wait grace_ms for the next one to adopt us. */
static bool leased;
static int lease_grace_ms;
static long long orphaned_at_ms = -1; /* monotonic; -1 while a manager holds the lease */
/* Whether NSBOX_INIT_SECRETS_FD is ours (CTL_SECRETS): until then that
 * number may be any fd a receive gave, a slot's socket included. */
static bool holds_secrets;

/* Live restore of execs: the fds nsboxd asked us to keep per exec
 * (CTL_KEEP), handed to the next nsboxd on CTL_KEPT_LIST. */
struct kept_exec {
        uint32_t exec_id;
        unsigned nfds;
        int fds[CTL_KEEP_MAX_FDS];
};
static struct kept_exec *kept;
static size_t kept_count, kept_room;

static void kept_drop(uint32_t exec_id)
{
        for (size_t i = 0; i < kept_count; i++) {
                if (kept[i].exec_id == exec_id) {
                        for (unsigned k = 0; k < kept[i].nfds; k++)
                                close(kept[i].fds[k]);
                        kept[i] = kept[--kept_count];
                        return;
                }
        }
}

/* Takes the fds (set to -1) when kept. */
static int kept_add(uint32_t exec_id, int *fds, unsigned nfds)
{
        kept_drop(exec_id);
        if (kept_count == kept_room) {
                size_t room = kept_room ? 2 * kept_room : 16;
                struct kept_exec *grown = realloc(kept, room * sizeof(*grown));
                if (grown == NULL)
                        return -1;
                kept = grown;
                kept_room = room;
        }
        struct kept_exec *k = &kept[kept_count++];
        k->exec_id = exec_id;
        k->nfds = nfds;
        for (unsigned i = 0; i < nfds; i++) {
                k->fds[i] = fds[i];
                fds[i] = -1;
        }
        return 0;
}

/* In a supervisor we fork: none of it, or a slot's control socket would
 * never hang up for its own supervisor. */
static void kept_close_all(void)
{
        for (size_t i = 0; i < kept_count; i++)
                for (unsigned k = 0; k < kept[i].nfds; k++)
                        close(kept[i].fds[k]);
}

static void kept_send_all(int ctl)
{
        for (size_t i = 0; i < kept_count; i++) {
                struct ctl_header msg = { CTL_KEPT, kept[i].exec_id };
                ctl_send(ctl, &msg, sizeof(msg), NULL, 0, kept[i].fds, kept[i].nfds);
        }
        struct ctl_header end = { CTL_KEPT_END, 0 };
        ctl_send(ctl, &end, sizeof(end), NULL, 0, NULL, 0);
}

static long long monotonic_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Our children that are exec supervisors. Any other child of ours is an
 * orphan: a process of an exec whose supervisor died (the OOM killer, or
 * kill -9 from the host), reparented to us as the namespace's reaper. It
 * must not live on unsupervised, beyond its exec's timeout and kill. */
static pid_t *supervisors;
static size_t supervisor_count, supervisor_room;

static bool is_supervisor(pid_t pid)
{
        for (size_t i = 0; i < supervisor_count; i++) {
                if (supervisors[i] == pid)
                        return true;
        }
        return false;
}

static int supervisor_add(pid_t pid)
{
        if (supervisor_count == supervisor_room) {
                size_t room = supervisor_room ? 2 * supervisor_room : 16;
                pid_t *grown = realloc(supervisors, room * sizeof(*grown));
                if (grown == NULL)
                        return -1;
                supervisors = grown;
                supervisor_room = room;
        }
        supervisors[supervisor_count++] = pid;
        return 0;
}

static void supervisor_remove(pid_t pid)
{
        for (size_t i = 0; i < supervisor_count; i++) {
                if (supervisors[i] == pid) {
                        supervisors[i] = supervisors[--supervisor_count];
                        return;
                }
        }
}

#define ORPHAN_BATCH 4096

/* SIGKILL every child of ours that is no supervisor, and its descendants,
 * top-down so that none forks past the walk. What they forked just before
 * their signal is reparented to us; their deaths bring us back here. */
static void kill_orphans(void)
{
        static pid_t pids[ORPHAN_BATCH];
        int n = 0, children = 0;
        if (process_list_children(getpid(), pids, &children, ORPHAN_BATCH) < 0)
                return;
        for (int i = 0; i < children; i++) {
                if (!is_supervisor(pids[i]))
                        pids[n++] = pids[i];
        }
        for (int i = 0; i < n; i++) {
                kill(pids[i], SIGKILL);
                process_list_children(pids[i], pids, &n, ORPHAN_BATCH);
        }
}

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

/* Start exec slot exec_id: a supervisor with the two sockets the manager
 * sent (see runtime/supervisor.c). We only reap it. */
static void handle_slot(int ctl, int sfd, const struct ctl_header *req, int *fds, unsigned nfds)
{
        if (nfds != 2) {
                send_failed(ctl, req->exec_id, EINVAL, "slot request without its two sockets");
                return;
        }
        pid_t pid = fork();
        if (pid < 0) {
                send_failed(ctl, req->exec_id, errno, "fork the exec's supervisor");
                return;
        }
        if (pid == 0) {
                close(ctl);
                close(sfd);
                /* No exec's process may hold the manager's end of our socket. */
                close(NSBOX_INIT_KEEP_FD);
                close(NSBOX_INIT_LEASE_FD);
                close(NSBOX_INIT_DISK_FD);
                if (holds_secrets)
                        close(NSBOX_INIT_SECRETS_FD);
                kept_close_all();
                supervisor_main(req->exec_id, fds[0], fds[1],
                                seccomp_program.len > 0 ? &seccomp_program : NULL);
        }
        if (supervisor_add(pid) < 0) {
                /* Unknown, it would be taken for an orphan: better no slot. */
                kill(pid, SIGKILL);
                send_failed(ctl, req->exec_id, ENOMEM, "record the exec's supervisor");
        }
}

/* A supervisor that ends leaves orphans only if it died before ending its
 * exec's processes; an orphan that ends may leave its own children to us. */
static void reap_children(void)
{
        pid_t pid;
        bool look = false;
        while ((pid = waitpid(-1, NULL, WNOHANG)) > 0) {
                supervisor_remove(pid);
                look = true;
        }
        if (look)
                kill_orphans();
}

/* Put a received fd at its fixed number; the received one is closed by
 * the caller (unless it already is that number). */
static int place_fd(int *fd, int target)
{
        if (*fd == target) {
                *fd = -1;
                return 0;
        }
        return dup3(*fd, target, O_CLOEXEC) < 0 ? -1 : 0;
}

/* A manager (the one that made us, or one that adopts us) holds a new
 * lease: we are no orphan, and outlive it for grace_seconds. */
static void handle_lease(int ctl, const struct ctl_lease *msg, int *fds, unsigned nfds)
{
        /* A received fd takes the lowest free number, which may be the fixed
         * one of another (the lease's, freed as it hung up): placing that
         * other would replace it, and closing it after would close what was
         * placed there. So all of them go above the fixed numbers first. */
        for (unsigned i = 0; i < nfds; i++) {
                if (fds[i] > NSBOX_INIT_SECRETS_FD)
                        continue;
                int moved = fcntl(fds[i], F_DUPFD_CLOEXEC, NSBOX_INIT_SECRETS_FD + 1);
                if (moved < 0) {
                        send_failed(ctl, 0, errno, "init: take the lease");
                        return;
                }
                close(fds[i]);
                fds[i] = moved;
        }
        if ((nfds != 2 && nfds != 3) || place_fd(&fds[1], NSBOX_INIT_KEEP_FD) < 0 ||
            place_fd(&fds[0], NSBOX_INIT_LEASE_FD) < 0 ||
            (nfds == 3 && place_fd(&fds[2], NSBOX_INIT_DISK_FD) < 0)) {
                send_failed(ctl, 0, nfds < 2 ? EINVAL : errno, "init: take the lease");
                return;
        }
        leased = true;
        lease_grace_ms = msg->grace_seconds > INT32_MAX / 1000 ? INT32_MAX : (int)msg->grace_seconds * 1000;
        orphaned_at_ms = -1;
}

/* The sandbox's secrets, at their fixed fd. A kept exec's fd that a
 * receive put at that number first is moved off it. */
static void handle_secrets(int ctl, int *fds, unsigned nfds)
{
        for (size_t i = 0; i < kept_count; i++) {
                for (unsigned k = 0; k < kept[i].nfds; k++) {
                        if (kept[i].fds[k] != NSBOX_INIT_SECRETS_FD)
                                continue;
                        int moved = fcntl(NSBOX_INIT_SECRETS_FD, F_DUPFD_CLOEXEC, NSBOX_INIT_SECRETS_FD + 1);
                        if (moved < 0) {
                                send_failed(ctl, 0, errno, "init: keep the secrets");
                                return;
                        }
                        kept[i].fds[k] = moved;
                }
        }
        if (nfds != 1 || place_fd(&fds[0], NSBOX_INIT_SECRETS_FD) < 0) {
                send_failed(ctl, 0, nfds != 1 ? EINVAL : errno, "init: keep the secrets");
                return;
        }
        holds_secrets = true;
}

/* Returns 0 to go on, -1 when the manager is gone. */
static int handle_control(int ctl, int sfd)
{
        int fds[CTL_KEEP_MAX_FDS];
        unsigned nfds = 0;
        union ctl_message msg;
        ssize_t n = ctl_recv(ctl, &msg, sizeof(msg), fds, CTL_KEEP_MAX_FDS, &nfds);
        if (n == 0)
                return -1;
        if (n < 0)
                return (n == -EAGAIN || n == -EINTR || n == -EMSGSIZE) ? 0 : -1;
        if ((size_t)n == sizeof(msg.hdr) && msg.hdr.type == CTL_SLOT)
                handle_slot(ctl, sfd, &msg.hdr, fds, nfds);
        else if ((size_t)n == sizeof(msg.lease) && msg.hdr.type == CTL_LEASE)
                handle_lease(ctl, &msg.lease, fds, nfds);
        else if ((size_t)n == sizeof(msg.hdr) && msg.hdr.type == CTL_KEEP && leased && nfds >= 1)
                kept_add(msg.hdr.exec_id, fds,
                         nfds); /* out of memory: the exec ends with nsboxd, as before */
        else if ((size_t)n == sizeof(msg.hdr) && msg.hdr.type == CTL_UNKEEP)
                kept_drop(msg.hdr.exec_id);
        else if ((size_t)n == sizeof(msg.hdr) && msg.hdr.type == CTL_KEPT_LIST)
                kept_send_all(ctl);
        else if ((size_t)n == sizeof(msg.hdr) && msg.hdr.type == CTL_SECRETS && leased)
                handle_secrets(ctl, fds, nfds);
        for (unsigned i = 0; i < nfds; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        return 0;
}

/* How long poll may sleep: until the grace of an orphan runs out. */
static int poll_timeout(void)
{
        if (orphaned_at_ms < 0)
                return -1;
        long long left = orphaned_at_ms + lease_grace_ms - monotonic_ms();
        return left > 0 ? (int)(left < INT32_MAX ? left : INT32_MAX) : 0;
}

int main(void)
{
        /* Nothing in the sandbox may ptrace or open our memory or exe. */
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

        int ctl = NSBOX_INIT_CTL_FD;
        int r = process_limit_privileges();
        if (r < 0) {
                send_failed(ctl, 0, -r, "init: drop the bounding set and lock securebits");
                return 1;
        }
        r = load_seccomp_program();
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

        /* Where the profile lets the runtime itself through, the init takes
         * the filter on now, once: its supervisors and execs inherit it
         * instead of each exec building its own in the kernel (JIT, action
         * cache) on the way to its execve. CAP_SYS_ADMIN in our user
         * namespace stands in for no_new_privs, which each exec sets. */
        if (seccomp_program.len > 0 && seccomp_check_runtime_allowed(&seccomp_program)) {
                if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &seccomp_program) < 0) {
                        send_failed(ctl, 0, errno, "init: load the seccomp filter");
                        return 1;
                }
                free(seccomp_program.filter);
                seccomp_program = (struct sock_fprog){ 0 };
        }

        struct ctl_header ready = { CTL_READY, 0 };
        if (ctl_send(ctl, &ready, sizeof(ready), NULL, 0, NULL, 0) < 0)
                return 1;

        struct pollfd pfds[3] = { { .fd = ctl, .events = POLLIN },
                                  { .fd = sfd, .events = POLLIN },
                                  { .fd = -1, .events = 0 } /* the lease: POLLHUP only */ };
        for (;;) {
                pfds[2].fd = leased && orphaned_at_ms < 0 ? NSBOX_INIT_LEASE_FD : -1;
                int woke = poll(pfds, 3, poll_timeout());
                if (woke < 0) {
                        if (errno == EINTR)
                                continue;
                        return 1;
                }
                if (woke == 0 && orphaned_at_ms >= 0 && poll_timeout() == 0)
                        break; /* no nsboxd adopted us within the grace period */
                if (pfds[2].fd >= 0 && (pfds[2].revents & (POLLHUP | POLLERR))) {
                        /* nsboxd is gone (stopped with live restore, upgraded,
                         * crashed): wait for the next one to send a lease. */
                        close(NSBOX_INIT_LEASE_FD);
                        orphaned_at_ms = monotonic_ms();
                }
                if (pfds[1].revents & POLLIN) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                ;
                        reap_children();
                }
                if (pfds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                        if (handle_control(ctl, sfd) < 0)
                                break;
                }
        }
        /* The manager is gone (and none adopted us in time): end the sandbox
         * rather than run unsupervised.
         * PID 1 exiting makes the kernel kill every process in the namespace. */
        return 0;
}
