/* What nsboxd keeps under its state dir so that a restart after a crash
 * (kill -9 at any moment) leaves nothing behind that nothing owns. */
#pragma once

#include "error.h"

struct sandbox;

/* Record a sandbox (atomically: write aside, fsync, rename). */
int state_save(const struct sandbox *sb, nsbox_error_t **err);

/* At startup, before serving: for every sandbox a previous run left, kill
 * whatever of it still runs, detach its mounts and remove its files.
 * Unreadable records are moved to state/quarantine with a log line. */
void state_recover(void);
