/* SPDX-License-Identifier: Apache-2.0 */
/* The child side of sandbox creation: runs in the process clone()d by the
 * manager into new user and pid namespaces, and ends by exec'ing nsbox-init. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "policy.h"
#include "sandbox_limits.h"

#define SETUP_MOUNT_PATH_MAX (POLICY_MAX_MOUNT_PATH + 1)

/* Sent by the manager over the sync socket once the id maps are written and
 * the overlay root is made, with one fd: that overlay, a detached mount.
 * The child, born in the base mount namespace (manager/basens.c), attaches
 * it at SETUP_ROOT_AT and makes it its root. */
struct setup_go {
        uint32_t magic;
        uint32_t n_mounts; /* setup_mount packets that follow */
};
/* One mount of the sandbox's (a volume, a host directory), after the go:
 * with one fd, the mount detached and idmapped, attached at `path` in the
 * sandbox's root once it is made. */
struct setup_mount {
        uint32_t magic;
        char path[SETUP_MOUNT_PATH_MAX];
};
#define SETUP_MOUNT_MAGIC 0x6e736d74u
#define SETUP_GO_MAGIC    0x6e73676fu
#define SETUP_ROOT_AT     "/root"

/* The child's first message over the sync socket: it has its own fd table
 * now (errnum 0), or could not get one and exits. Until then it shares the
 * manager's (CLONE_FILES), so the manager changes nothing in it. */
struct setup_unshared {
        uint32_t magic;
        int32_t errnum;
};
#define SETUP_UNSHARED_MAGIC 0x6e73756eu

struct sandbox_setup {
        int sync_fd;    /* child's end of the control socketpair */
        int init_memfd; /* sealed memfd holding nsbox-init */
        int seccomp_fd; /* memfd with the compiled BPF program, or -1 */
        const char *hostname;
        uint64_t shm_bytes; /* its /dev/shm's size (sandbox_shm_bytes) */
        /* Runs first in the child, e.g. to move itself into its cgroups: a
         * cgroup v1 move can wait a whole RCU grace period, which must not
         * stall the manager's loop. */
        int (*prepare)(void *ctx, nsbox_error_t **err);
        void *prepare_ctx;
};

/* Never returns: execs nsbox-init, or reports CTL_FAILED and exits. */
__attribute__((noreturn)) void sandbox_setup_child(const struct sandbox_setup *setup);

/* In the manager, on the process it cloned, before the go: out of the OOM
 * killer's choice (oom_score_adj -1000), which the init and every exec
 * supervisor inherit. Only the host's CAP_SYS_RESOURCE may lower it, and
 * nothing in the sandbox can write the files of the init or a supervisor
 * (see sandbox_setup_child), so nothing there can raise it either. */
int sandbox_setup_protect(pid_t pid, nsbox_error_t **err);
