/* SPDX-License-Identifier: Apache-2.0 */
/* The supervisor of one exec slot: a child of nsbox-init that owns one
 * exec's process tree. */
#pragma once

#include <linux/filter.h>
#include <stdint.h>

/* Runs in a child the init has just forked; never returns.
 *
 * `request` is the socket the exec request will arrive on, `control` the
 * slot's socket to the manager, and `seccomp` the filter the exec loads last
 * (NULL when the init carries it already). */
__attribute__((noreturn)) void supervisor_main(uint32_t exec_id, int request, int control,
                                               const struct sock_fprog *seccomp);
