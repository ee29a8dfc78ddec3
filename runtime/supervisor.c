/* SPDX-License-Identifier: Apache-2.0 */
/* One exec slot.
 *
 * The exec's child gets done what does not depend on the request
 * (process_prepare), receives it, and does its own setup and execve. Once
 * the slot has served an exec, the next child is started ahead, so that a
 * request costs it only its own setup and execve: starting it with the
 * request put a clone, and often the wakeup of another CPU for the new
 * task, on the way of every exec. A child made ahead that gets no request
 * for SLOT_IDLE_MS ends (it "retires"); the slot then waits as a new one
 * does, with no child, until the request socket turns readable, and starts
 * one for it. So an idle sandbox is its init and one supervisor: a child
 * kept waiting would be one more process, its kernel stack and task and,
 * counted as every process's RSS is, our pages a second time.
 *
 * The child shares the supervisor's memory up to its execve (clone with
 * CLONE_VM, as posix_spawn does): no page tables to copy, no copy-on-write
 * faults on either side, no copy to tear down at the execve. On a VM, where
 * a page fault is tens of microseconds, that is most of what an exec of a
 * small program costs beyond the program itself. Meanwhile the supervisor
 * only waits for the child to leave its memory (wait_child_leaves), and the
 * child keeps nothing there: its stack and the room it reads its request
 * into are the supervisor's, made once (struct child_memory).
 *
 * The supervisor reports to the manager on the slot's control socket
 * (started, failed, exited) and takes kill requests there.
 *
 * When the exec is over the manager either closes the slot or hands it on
 * (CTL_SLOT with the next exec's number on the control socket): the
 * supervisor then ends what is left of the exec and starts the child for
 * the next request on the same sockets.
 *
 * It is the child subreaper of everything the exec starts: a daemonized
 * (setsid, double-forked) descendant is reparented to it, not to the init,
 * so killing "the exec" means killing the supervisor's descendants, with no
 * cgroup move on the way of any exec. No process of the sandbox can signal
 * it: its real and saved uid is NSBOX_SUPERVISOR_UID, which no exec has, and
 * no exec holds CAP_KILL. When the manager closes the control socket (the
 * exec is over, or the manager is gone) it kills what is left and exits. */
#include "supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "process.h"
#include "proto.h"

struct supervisor {
        uint32_t exec_id;
        int control;
        pid_t child;
        int report; /* read end of the child's report pipe, or -1 */
        size_t report_len;
        char report_data[sizeof(struct process_failure)];
        bool started, failed, exited;
        bool watch_start;  /* the manager wants CTL_STARTED (a background exec's pid) */
        bool started_told; /* CTL_STARTED sent */
};

static pid_t supervisor_pid; /* ours, in the sandbox */

static void send_failed_with(struct supervisor *s, int errnum, int exit_code, const char *message)
{
        struct ctl_failed msg = { .hdr = { CTL_FAILED, s->exec_id },
                                  .errnum = errnum,
                                  .exit_code = exit_code };
        snprintf(msg.message, sizeof(msg.message), "%s", message);
        ctl_send(s->control, &msg, sizeof(msg), NULL, 0, NULL, 0);
        s->failed = true;
}

static void send_failed(struct supervisor *s, int errnum, const char *message)
{
        send_failed_with(s, errnum, 0, message);
}

#define MAX_EXEC_STRINGS (1u << 16) /* argv entries, and env entries */

/* The memory the exec's child uses in ours: its stack, and room for the
 * request and for the pointers into it that become argv and envp. */
#define CHILD_STACK_SIZE  (8u << 20) /* what execvpe may put on it for a script: one pointer per arg */
#define CHILD_GUARD_SIZE  4096u
#define CHILD_STRING_ROOM ((3 + 2 * (size_t)MAX_EXEC_STRINGS) * sizeof(char *))

/* The stack grows down from `top`; above it lie CTL_MAX_MESSAGE bytes of
 * request room, then CHILD_STRING_ROOM of argv and envp pointers. */
struct child_memory {
        char *top;
        size_t request_len; /* what the last child received */
};

static void *child_request(const struct child_memory *m)
{
        return m->top;
}

static char **child_strings(const struct child_memory *m)
{
        return (char **)(m->top + CTL_MAX_MESSAGE);
}

/* Split the payload into cwd, argv and envp, pointers into `strings`;
 * every string must end inside the payload. */
static int unpack_exec(const struct ctl_exec *req, size_t len, char **strings, const char **cwd, char ***argv,
                       char ***envp)
{
        if (len < sizeof(*req) || req->payload_len != len - sizeof(*req) || req->argc == 0 ||
            req->argc > MAX_EXEC_STRINGS || req->envc > MAX_EXEC_STRINGS)
                return -EINVAL;
        const char *p = (const char *)(req + 1);
        const char *end = p + req->payload_len;
        size_t nstrings = 1 + (size_t)req->argc + req->envc;
        for (size_t i = 0; i < nstrings; i++) {
                const char *nul = memchr(p, '\0', end - p);
                if (nul == NULL)
                        return -EINVAL;
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

/* Made once, the first time a child is started; kept for every child after. */
static int child_memory_get(struct child_memory *m)
{
        if (m->top != NULL)
                return 0;
        size_t size = CHILD_GUARD_SIZE + CHILD_STACK_SIZE + CTL_MAX_MESSAGE + CHILD_STRING_ROOM;
        char *base =
            mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED)
                return -1;
        if (mprotect(base, CHILD_GUARD_SIZE, PROT_NONE) < 0) {
                munmap(base, size);
                return -1;
        }
        m->top = base + CHILD_GUARD_SIZE + CHILD_STACK_SIZE;
        return 0;
}

/* How long a child made ahead waits for its request before it retires. */
#define SLOT_IDLE_MS 5000

/* Set by a child that retired unused, before its exit; read by us once we
 * have reaped it (it shares our memory). */
static volatile bool child_retired;

struct slot_child_args {
        int request, report;
        const struct sock_fprog *seccomp;
        struct child_memory *memory;
        bool ahead; /* started before its request: it may retire */
};

/* The exec's process, in the supervisor's memory until its execve:
 * prepare, wait for the request, exec. It allocates nothing: what it kept
 * there would stay with the supervisor, and a process of its new uid may
 * kill it halfway through any call. */
static int slot_child(void *opaque)
{
        const struct slot_child_args *a = opaque;
        /* Only the request socket (3) and the report pipe (4) stay open. */
        int r = fcntl(a->request, F_DUPFD_CLOEXEC, 10), w = fcntl(a->report, F_DUPFD_CLOEXEC, 10);
        if (r < 0 || w < 0 || dup3(r, 3, O_CLOEXEC) < 0 || dup3(w, 4, O_CLOEXEC) < 0)
                _exit(127);
        int request = 3, report = 4;
        syscall(SYS_close_range, 5, ~0U, 0);
        process_prepare(report);
        /* A slot whose supervisor is gone (the OOM killer) must not take a
         * request: nobody would report the exec's end. Its child goes with
         * it, and the manager, finding no reader, asks for a fresh slot. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != supervisor_pid)
                _exit(0);

        /* Nothing is taken when no request came in time: one that comes
         * after stays in the socket for the next child. */
        struct pollfd wait_request = { .fd = request, .events = POLLIN };
        if (a->ahead && poll(&wait_request, 1, SLOT_IDLE_MS) == 0) {
                child_retired = true;
                _exit(0);
        }
        int fds[3];
        unsigned nfds = 0;
        ssize_t n = ctl_recv(request, child_request(a->memory), CTL_MAX_MESSAGE, fds, 3, &nfds);
        a->memory->request_len = n < 0 ? CTL_MAX_MESSAGE : (size_t)n;
        if (n == 0)
                _exit(0); /* the manager dropped the slot unused */
        if (n < 0)
                process_fail(report, (int)-n, "receive the exec request");
        close(request);
        prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0); /* the exec's process is the exec's own */
        const struct ctl_exec *req = child_request(a->memory);
        const char *cwd;
        char **argv, **envp;
        if ((size_t)n < sizeof(*req) || req->hdr.type != CTL_EXEC || nfds != 3)
                process_fail(report, EINVAL, "exec request without three stdio fds");
        r = unpack_exec(req, (size_t)n, child_strings(a->memory), &cwd, &argv, &envp);
        if (r < 0)
                process_fail(report, -r, "malformed exec request");
        struct process_spec spec = {
                .cwd = cwd,
                .argv = argv,
                .envp = envp,
                .uid = req->uid,
                .gid = req->gid,
                .search_path = (req->flags & CTL_EXEC_SEARCH_PATH) != 0,
                .tty = (req->flags & CTL_EXEC_TTY) != 0,
                .stdio = { fds[0], fds[1], fds[2] },
                .seccomp = a->seccomp,
        };
        process_exec_child(&spec, report);
}

static void read_report(struct supervisor *s);

#define KILL_BATCH 4096
static pid_t tree_pids[KILL_BATCH]; /* for the walks below, one at a time */

/* What the exec's main process left running (`nohup cmd &`, a daemon):
 * orphans are reparented to us, the subreaper, so they are our children
 * now. Said to the manager so that the user learns they end with the exec.
 * Without children left (the usual case) this costs one waitid. */
static int32_t count_leftovers(void)
{
        siginfo_t info = { 0 };
        if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0)
                return 0; /* ECHILD: none */
        int n = 0;
        if (process_list_children(supervisor_pid, tree_pids, &n, KILL_BATCH) < 0)
                return 0;
        return n;
}

static void on_reaped(struct supervisor *s, pid_t pid, int status)
{
        if (pid != s->child || s->exited)
                return;
        if (child_retired) {
                /* No exec: nothing to tell; the next request starts a child. */
                child_retired = false;
                s->child = -1;
                if (s->report >= 0)
                        close(s->report);
                s->report = -1;
                return;
        }
        s->exited = true;
        read_report(s); /* complete now: the child's end closed with it */
        if (s->failed)
                return;
        struct ctl_exited msg = { .hdr = { CTL_EXITED, s->exec_id }, .wait_status = status, .pid = s->child };
        msg.leftover = count_leftovers();
        ctl_send(s->control, &msg, sizeof(msg), NULL, 0, NULL, 0);
}

/* Returns false when no child at all is left. */
static bool reap(struct supervisor *s, int flags)
{
        for (;;) {
                int status;
                pid_t pid = waitpid(-1, &status, flags);
                if (pid < 0 && errno == ECHILD)
                        return false;
                if (pid <= 0)
                        return true;
                on_reaped(s, pid, status);
                flags |= WNOHANG; /* block for one at most */
        }
}

/* SIGKILL every descendant, reap them, and return when none is left. Each
 * round walks the whole tree top-down, killing as it goes: a killed
 * process forks no more, and what one forked just before its signal is
 * reparented to us and found by the next round. The walk runs in the
 * sandbox's cpu cgroup, where a fork bomb may leave it a small share: it
 * does not wait for the dying between rounds longer than it must. */
static void kill_tree(struct supervisor *s)
{
        pid_t *pids = tree_pids;
        for (;;) {
                if (!reap(s, WNOHANG))
                        return; /* the usual end of an exec: nothing left to walk */
                int n = 0;
                if (process_list_children(supervisor_pid, pids, &n, KILL_BATCH) < 0) {
                        /* No /proc: the session and group of the exec, at least. */
                        if (s->child > 0) {
                                kill(-s->child, SIGKILL);
                                kill(s->child, SIGKILL);
                        }
                } else {
                        for (int i = 0; i < n; i++) {
                                kill(pids[i], SIGKILL);
                                process_list_children(pids[i], pids, &n, KILL_BATCH);
                        }
                }
                int status;
                pid_t pid = waitpid(-1, &status, 0);
                if (pid < 0 && errno == ECHILD)
                        return;
                if (pid > 0)
                        on_reaped(s, pid, status);
        }
}

/* What the exec's processes get: OOM_SCORE_GAP above our own value, so
 * that the OOM killer takes any process of an exec before a supervisor or
 * the init (a sandbox whose init it killed would be gone). With nsboxd's
 * CAP_SYS_RESOURCE we are at -1000 (sandbox_setup_protect) and execs at
 * 0, ordinary processes; without it we stay at nsboxd's own value (0 as a
 * rule: lowering takes that capability) and execs go to 1000. */
#define OOM_SCORE_GAP 1000
static int exec_oom_score;

static void exec_oom_score_init(void)
{
        char value[16];
        int own = 0;
        int fd = open("/proc/self/oom_score_adj", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                ssize_t n = read(fd, value, sizeof(value) - 1);
                if (n > 0) {
                        value[n] = '\0';
                        own = atoi(value);
                }
                close(fd);
        }
        exec_oom_score = own + OOM_SCORE_GAP > 1000 ? 1000 : own + OOM_SCORE_GAP;
}

/* Raise the oom_score_adj of `pid` to exec_oom_score if below; true if it was. */
static bool raise_oom_score(pid_t pid)
{
        char path[64], value[16];
        snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", pid);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, value, sizeof(value) - 1);
        bool raised = false;
        if (n > 0) {
                value[n] = '\0';
                if (atoi(value) < exec_oom_score) {
                        int len = snprintf(value, sizeof(value), "%d", exec_oom_score);
                        raised = pwrite(fd, value, (size_t)len, 0) == len;
                }
        }
        close(fd);
        return raised;
}

/* We and the init are out of the OOM killer's choice (oom_score_adj
 * -1000, see sandbox_setup_protect, or below every exec as said above),
 * and the exec's process starts with our value: it must be raised to
 * exec_oom_score. Only now, with
 * memory of its own since its execve: the kernel applies a write to every
 * process that shares the memory of its target, so while it ran in ours
 * we would have gone with it. Raising takes no privilege; nothing in the
 * sandbox can lower it below its floor (oom_score_adj_min, which stayed 0):
 * at 1000 an exec may go back to 0, beside us, and put only its own
 * sandbox at risk.
 * What it forked meanwhile is walked too, top-down, and a pass that raised
 * any is followed by another, for a fork that raced it. */
static void release_oom_protection(void)
{
        pid_t *pids = tree_pids;
        for (int pass = 0; pass < 8; pass++) {
                int n = 0;
                bool raised = false;
                if (process_list_children(supervisor_pid, pids, &n, KILL_BATCH) < 0)
                        return;
                for (int i = 0; i < n; i++) {
                        raised |= raise_oom_score(pids[i]);
                        process_list_children(pids[i], pids, &n, KILL_BATCH);
                }
                if (!raised)
                        return;
        }
}

/* Returns false when the manager has closed the slot; *next is set when
 * it hands the slot on to exec *next. */
static bool on_control(struct supervisor *s, uint32_t *next)
{
        union ctl_message msg;
        unsigned nfds;
        ssize_t n = ctl_recv(s->control, &msg, sizeof(msg), NULL, 0, &nfds);
        if (n == -EAGAIN || n == -EINTR)
                return true;
        if (n <= 0)
                return false;
        if ((size_t)n >= sizeof(struct ctl_kill) && msg.hdr.type == CTL_KILL) {
                if (msg.kill.signal == SIGKILL) {
                        kill_tree(s);
                } else if (s->child > 0 && !s->exited) {
                        /* The exec leads its own session and process group:
                         * the signal goes to the group once, as a terminal's
                         * Ctrl-C does. The exec itself gets it apart only when
                         * it has left its group: a second copy to the group's
                         * leader ran a shell's trap twice whenever the first
                         * was handled before the second arrived. */
                        kill(-s->child, msg.kill.signal);
                        if (getpgid(s->child) != s->child)
                                kill(s->child, msg.kill.signal);
                }
        } else if ((size_t)n >= sizeof(struct ctl_header) && msg.hdr.type == CTL_SLOT &&
                   msg.hdr.exec_id != 0) {
                *next = msg.hdr.exec_id;
        } else if ((size_t)n >= sizeof(struct ctl_header) && msg.hdr.type == CTL_STARTED) {
                s->watch_start = true;
        }
        return true;
}

/* The child writes a struct process_failure into its report pipe if a step
 * before execve fails; EOF comes at its execve (the pipe is CLOEXEC) or its
 * end. Read without waiting, and only when it matters: at the child's exit,
 * or for a background exec whose pid the manager wants at once. */
static void read_report(struct supervisor *s)
{
        while (s->report >= 0) {
                ssize_t n =
                    read(s->report, s->report_data + s->report_len, sizeof(s->report_data) - s->report_len);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                if (n > 0) {
                        s->report_len += n;
                        continue;
                }
                close(s->report);
                s->report = -1;
        }
        if (s->failed || s->started)
                return;
        if (s->report_len == sizeof(struct process_failure)) {
                struct process_failure failure;
                memcpy(&failure, s->report_data, sizeof(failure));
                failure.message[sizeof(failure.message) - 1] = '\0';
                send_failed_with(s, failure.errnum > 0 ? failure.errnum : EIO, failure.exit_code,
                                 failure.message);
        } else {
                s->started = true;
        }
}

/* Until the child's execve, or its end, it runs in our memory: we use
 * nothing it may use but errno (a receive that poll says is ready does not
 * fail on it) and do nothing but serve the manager. EOF on the report pipe,
 * which it holds CLOEXEC, comes when its execve has given it memory of its
 * own or its exit has dropped ours. A kill meanwhile ends it as it would
 * end its exec (a child stopped by a process of its uid must not hold the
 * slot); so does the manager's hangup, which on_control sees again next. */
static void wait_child_leaves(struct supervisor *s, int report)
{
        bool watch_control = true;
        for (;;) {
                struct pollfd pfds[2] = {
                        { .fd = report, .events = 0 }, /* POLLHUP: the only event that counts */
                        { .fd = watch_control ? s->control : -1, .events = POLLIN },
                };
                if (poll(pfds, 2, -1) <= 0)
                        continue; /* EINTR only: every signal is blocked, or a signalfd's */
                if (pfds[0].revents != 0)
                        return;
                uint32_t next = 0; /* the manager hands a slot on only once its exec has ended */
                if (pfds[1].revents != 0 && !on_control(s, &next)) {
                        kill(s->child, SIGKILL);
                        watch_control = false;
                }
        }
}

/* Start the child for exec s->exec_id: ahead of its request, or once
 * `request` is readable (or hung up: the child then finds no request and
 * ends). Returns 0, or -1 after telling the manager why not. */
static int start_child(struct supervisor *s, int request, const struct sock_fprog *seccomp,
                       struct child_memory *memory, bool ahead)
{
        int report[2];
        s->report = -1;
        if (child_memory_get(memory) < 0) {
                send_failed(s, errno, "map the stack of the exec's process");
                return -1;
        }
        if (pipe2(report, O_CLOEXEC | O_NONBLOCK) < 0) {
                send_failed(s, errno, "pipe");
                return -1;
        }
        struct slot_child_args args = {
                .request = request, .report = report[1], .seccomp = seccomp, .memory = memory, .ahead = ahead
        };
        s->child = clone(slot_child, memory->top, CLONE_VM | SIGCHLD, &args);
        if (s->child < 0) {
                send_failed(s, errno, "start the exec's process");
                close(report[0]);
                close(report[1]);
                return -1;
        }
        close(report[1]);
        wait_child_leaves(s, report[0]);
        release_oom_protection();
        /* What the child left here: the request (its argv and env, which
         * nothing else need ever see again), and the dumpable flag its new
         * ids may have set if it died before resetting it. */
        explicit_bzero(child_request(memory), memory->request_len);
        memory->request_len = 0;
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        s->report = report[0];
        return 0;
}

void supervisor_main(uint32_t exec_id, int request, int control, const struct sock_fprog *seccomp)
{
        struct supervisor s = { .exec_id = exec_id, .control = control, .child = -1, .report = -1 };
        struct child_memory memory = { 0 };
        supervisor_pid = getpid();
        exec_oom_score_init();
        if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
                send_failed(&s, errno, "become the exec's subreaper");
                _exit(1);
        }
        /* Effective uid 0 keeps the capabilities the child needs for its
         * setresuid; the real and saved uid make us unsignalable. */
        if (setresuid(NSBOX_SUPERVISOR_UID, 0, NSBOX_SUPERVISOR_UID) < 0) {
                send_failed(&s, errno, "set the supervisor's uid");
                _exit(1);
        }
        fcntl(control, F_SETFL, O_NONBLOCK);
        /* SIGCHLD is blocked since the init; read it from a signalfd. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0) {
                send_failed(&s, errno, "signalfd");
                _exit(1);
        }
        for (;;) {
                /* No child for exec s.exec_id (a new slot, or its child
                 * retired): the request starts one. */
                bool waiting = s.child < 0;
                /* The report pipe only while the manager waits for a start;
                 * otherwise an exec wakes us once, when it ends. */
                bool watch = s.watch_start && !s.started_told && s.report >= 0;
                struct pollfd pfds[4] = {
                        { .fd = sfd, .events = POLLIN },
                        { .fd = control, .events = POLLIN },
                        { .fd = watch ? s.report : -1, .events = POLLIN },
                        { .fd = waiting ? request : -1, .events = POLLIN },
                };
                if (poll(pfds, 4, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                /* The request first: a kill or a start watch that came with
                 * it is for the child it starts. */
                if (pfds[3].revents != 0 && start_child(&s, request, seccomp, &memory, false) < 0)
                        break;
                if (pfds[0].revents & POLLIN) {
                        /* The exec's own process first: its exit is what the
                         * manager waits for; the signalfd and orphans after. */
                        int status;
                        if (!s.exited && s.child > 0 && waitpid(s.child, &status, WNOHANG) == s.child)
                                on_reaped(&s, s.child, status);
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                ;
                        reap(&s, WNOHANG);
                }
                uint32_t next = 0;
                if ((pfds[1].revents & (POLLIN | POLLHUP | POLLERR)) && !on_control(&s, &next))
                        break;
                if (next != 0) {
                        /* The exec is over and the manager keeps the slot: end
                         * what is left of it and wait for the next request. */
                        kill_tree(&s);
                        if (s.report >= 0)
                                close(s.report);
                        s = (struct supervisor){
                                .exec_id = next, .control = control, .child = -1, .report = -1
                        };
                        if (start_child(&s, request, seccomp, &memory, true) < 0)
                                break;
                        continue;
                }
                if (s.watch_start && s.child > 0 && !s.exited && !s.started_told) {
                        read_report(&s);
                        if (s.started) {
                                struct ctl_started msg = { .hdr = { CTL_STARTED, s.exec_id },
                                                           .pid = s.child };
                                ctl_send(s.control, &msg, sizeof(msg), NULL, 0, NULL, 0);
                                s.started_told = true;
                        }
                }
        }
        kill_tree(&s);
        _exit(0);
}
