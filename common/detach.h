/* SPDX-License-Identifier: Apache-2.0 */
/* A process that outlives its maker: forked twice, PID 1's child. */
#pragma once

#include <sys/types.h>

/* As fork(), but the child returned 0 in is a grandchild that the caller
 * never reaps: its session of its own, / as its cwd, default signals with
 * none blocked, /dev/null as stdio and no other fd. The caller gets its
 * pid (> 0) once the middle process has ended, or -errno. */
pid_t fork_detached(void);
