/* SPDX-License-Identifier: Apache-2.0 */
/* Host uid ranges of sandboxes, shared safely by every manager on a host. */
#pragma once

#include "sandbox.h"

/* Where managers flock the uid blocks they hold. */
#define UID_LOCK_DIR "/run/nsbox-uid-ranges"

int sandbox_uids_init(void);
/* A free range of the pool for the sandbox (sb->host_uid_base, uid_slot):
 * 0, -ENOSPC when every range is in use here or by another manager, or a
 * negative errno. In the shared uid mode, the one shared range. */
int sandbox_uids_take(struct sandbox *sb);
void sandbox_uids_put(struct sandbox *sb);
