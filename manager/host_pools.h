/* SPDX-License-Identifier: Apache-2.0 */
/* Room in the host's per-user kernel pools for the sandboxes' share. */
#pragma once

#include "config.h"

/* Room in host-wide counts for what max_sandboxes sandboxes may take, beside
 * what the host keeps for itself; limits are raised, never lowered, and what
 * changed is logged:
 *  - inotify (fs.inotify.max_user_*): every sandbox's user namespace is
 *    owned by host root, so at the host's level the kernel charges what
 *    sandboxes take to root, next to root's own services; each sandbox is
 *    capped in its namespace (runtime/setup.h);
 *  - the file table (fs.file-max): a sandbox holds at most its pids limit
 *    times its open files limit, and every struct file is charged to its
 *    memory cgroup, so its memory limit bounds them too; without room, a few
 *    sandboxes could leave the host's other users with ENFILE. */
void host_pools_reserve(const struct nsbox_config *config);
