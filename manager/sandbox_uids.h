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
/* Live restore: the range at `base` that a previous run gave a sandbox now
 * adopted (its blocks' lock files say a holder died with sandboxes in
 * them: this one). -ERANGE when base is no range of the pool, -EEXIST
 * when it is already given out. */
int sandbox_uids_adopt(struct sandbox *sb, uid_t base);
