/* SPDX-License-Identifier: Apache-2.0 */
/* Reading a compiled seccomp program: what it answers for one syscall. */
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stdint.h>

/* Run the classic BPF program on `data` as the kernel would. Returns 0 and
 * the program's return value in *action, or -EINVAL for a program that
 * reads outside seccomp_data, jumps out of itself or uses an instruction
 * seccomp programs have no use for. */
int seccomp_check_run(const struct sock_fprog *prog, const struct seccomp_data *data, uint32_t *action);

/* Whether the program lets through, with the arguments nsbox passes, every
 * syscall that nsbox-init, an exec's supervisor and an exec's child make
 * after the init has loaded it. If so, the init loads it once for itself
 * and every process it starts inherits it; if not (a profile stricter than
 * the runtime), each exec loads it as the last step before execve. */
bool seccomp_check_runtime_allowed(const struct sock_fprog *prog);
