/* What nsboxd keeps under its state dir so that a restart after a crash
 * (kill -9 at any moment) leaves nothing behind that nothing owns. */
#pragma once

#include "error.h"

struct sandbox;

/* Record a sandbox (atomically: write aside, fsync, rename). */
int state_save(const struct sandbox *sb, nsbox_error_t **err);

/* Lock the state dir for this daemon's life (flock on STATE_DIR/nsboxd.lock,
 * which holds our pid). Taken before any recovery: a second nsboxd on the
 * same state dir would kill the first one's live sandboxes as leftovers.
 * Fails with a message naming the other daemon's pid. */
int state_lock(nsbox_error_t **err);

/* At startup, before serving: for every sandbox a previous run left, kill
 * whatever of it still runs, detach its mounts and remove its files.
 * Unreadable records are moved to state/quarantine with a log line. */
void state_recover(void);
