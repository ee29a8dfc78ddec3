/* SPDX-License-Identifier: Apache-2.0 */
/* The control channel between nsboxd and a sandbox's nsbox-init: a
 * SOCK_SEQPACKET socketpair, one message per packet.  Fixed-size headers
 * followed by NUL-separated strings; file descriptors ride along with
 * SCM_RIGHTS so that the init never relays output bytes itself. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#define NSBOX_INIT_CTL_FD     3 /* control socket inside the init */
#define NSBOX_INIT_SECCOMP_FD 4 /* memfd holding the compiled BPF program */
/* Live restore (CTL_LEASE): a copy of the manager's end of the control
 * socket, which the init keeps so that the socket outlives nsboxd and the
 * next nsboxd takes it back (pidfd_getfd), and the init's end of the lease,
 * whose hangup tells the init that nsboxd is gone. Fixed numbers, above
 * what the init's few other fds take. */
#define NSBOX_INIT_KEEP_FD  10
#define NSBOX_INIT_LEASE_FD 11
/* And its writable layer (the disk tmpfs, which only the sandbox's mount
 * namespace has mounted), for the next nsboxd's snapshots and commits. */
#define NSBOX_INIT_DISK_FD 12
/* And the sandbox's secrets (CTL_SECRETS): a memfd nsboxd rewrites in place
 * as they change, for the next nsboxd's proxy (manager/secrets_keep.c). */
#define NSBOX_INIT_SECRETS_FD 13

#define CTL_MAX_MESSAGE (4u << 20) /* argv + env + cwd of one exec */
#define CTL_MAX_ERROR   512
#define CTL_MAX_SIGNAL  64 /* a kill carries 1 to this (SIGRTMAX) */

/* Each exec has a slot: a supervisor process (a child of the init, see
 * runtime/supervisor.c) and, under it, the child that becomes the exec's
 * process. The manager talks to a slot over two socketpairs of its own: the
 * request socket, read by the waiting child, and the slot's control socket,
 * served by the supervisor. A slot is started ahead of its exec, so a
 * request goes straight to a process that only has to execve. */
enum ctl_type {
        /* manager → init (init control socket) */
        CTL_SLOT = 1, /* start slot exec_id: + SCM_RIGHTS {request socket, slot control socket} */
        /* manager → slot child (request socket) */
        CTL_EXEC, /* + payload, + SCM_RIGHTS {stdin, stdout, stderr} */
        /* manager → supervisor (slot control socket) */
        CTL_KILL, /* signal the exec; SIGKILL ends its whole process tree */
        /* init → manager */
        CTL_READY,  /* setup done, the init runs */
        CTL_FAILED, /* setup, a slot or an exec start failed: errnum + message */
        /* supervisor → manager; also manager → supervisor: "tell me" */
        CTL_STARTED, /* exec running: pid (only when asked: background execs) */
        CTL_EXITED,  /* exec's main process ended: wait status (implies started) */
        /* manager → init: outlive me (live restore). + SCM_RIGHTS {lease end,
         * copy of the manager's control end[, its disk]}. Sent at create and
         * again by each nsboxd that adopts the sandbox. */
        CTL_LEASE,
        /* Live restore of execs. manager → init: keep an exec's fds for the
         * next nsboxd, + SCM_RIGHTS {the manager's end of its slot control
         * socket, its record (a memfd: manager/exec_keep.c), its stdout and
         * stderr read ends, and its stdin write end if open}, or {its record}
         * alone: a background exec that has ended, kept for exec.list; */
        CTL_KEEP,
        CTL_UNKEEP,    /* manager → init: the exec is over, drop what was kept */
        CTL_KEPT_LIST, /* manager → init: send what you keep */
        CTL_KEPT,      /* init → manager: one exec's kept fds, as CTL_KEEP sent them */
        CTL_KEPT_END,  /* init → manager: that was all */
        /* manager → init: keep this memfd at NSBOX_INIT_SECRETS_FD (in place
         * of one kept before), + SCM_RIGHTS {the memfd}. Sent to a leased
         * init when its sandbox first has secrets; nsboxd rewrites it after. */
        CTL_SECRETS,
};

#define CTL_KEEP_MAX_FDS 5

struct ctl_header {
        uint32_t type;
        uint32_t exec_id; /* 0 for sandbox-wide messages */
};

/* Payload: cwd \0 argv[0] \0 ... argv[argc-1] \0 env[0] \0 ... env[envc-1] \0 */
struct ctl_exec {
        struct ctl_header hdr;
        uint32_t uid;
        uint32_t gid;
        uint32_t argc;
        uint32_t envc;
        uint32_t flags;
        uint32_t payload_len;
};

#define CTL_EXEC_SEARCH_PATH 0x1 /* resolve argv[0] through PATH */
/* stdin is the slave of a pseudo-terminal of the sandbox's own devpts,
 * which the manager opened (it keeps the master): the exec's process makes
 * it its controlling terminal, so that the line discipline turns a typed
 * ^C into SIGINT for the foreground process group. */
#define CTL_EXEC_TTY 0x2

/* Supervisors run with this as their real and saved uid (effective uid 0):
 * no process of the sandbox, root included, holds CAP_KILL or this uid, so
 * none can signal a supervisor and take its exec's processes out from under
 * it. No exec runs as this uid. */
#define NSBOX_SUPERVISOR_UID 65533

struct ctl_lease {
        struct ctl_header hdr;
        /* How long the init waits for a new nsboxd once the lease hangs up
         * before it ends the sandbox (never left without a manager). */
        uint32_t grace_seconds;
};

struct ctl_kill {
        struct ctl_header hdr;
        int32_t signal;
};

struct ctl_failed {
        struct ctl_header hdr;
        int32_t errnum;
        int32_t exit_code; /* an exec's: 126 or 127 as its result gives, 0 to go by errnum */
        char message[CTL_MAX_ERROR];
};

struct ctl_started {
        struct ctl_header hdr;
        int32_t pid; /* in the sandbox's pid namespace */
};

struct ctl_exited {
        struct ctl_header hdr;
        int32_t wait_status;
        int32_t pid; /* an exit may come without CTL_STARTED before it */
        int32_t
            leftover; /* processes it left running (now the supervisor's children): they end with the exec */
};

union ctl_message {
        struct ctl_header hdr;
        struct ctl_exec exec;
        struct ctl_kill kill;
        struct ctl_lease lease;
        struct ctl_failed failed;
        struct ctl_started started;
        struct ctl_exited exited;
};

/* Send/receive one packet with up to `nfds` descriptors. Return bytes or -errno. */
ssize_t ctl_send(int sock, const void *msg, size_t len, const void *payload, size_t payload_len,
                 const int *fds, unsigned nfds);
ssize_t ctl_recv(int sock, void *buf, size_t len, int *fds, unsigned max_fds, unsigned *nfds);
