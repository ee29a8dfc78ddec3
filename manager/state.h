/* SPDX-License-Identifier: Apache-2.0 */
/* What nsboxd keeps under its state dir so that a restart after a crash
 * (kill -9 at any moment) leaves nothing behind that nothing owns. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

struct sandbox;

/* Record a sandbox (atomically: write aside, fsync, rename). */
int state_save(const struct sandbox *sb, nsbox_error_t **err);

/* The record of sandbox `name` (a dir under STATE_DIR/sandboxes), or NULL
 * with *why: no plain dir and file there, unreadable, or naming another
 * sandbox. The caller checks its fields. */
json_t *state_record_read(const char *name, const char **why);
/* When process `pid` started (clock ticks since boot), 0 when it is gone:
 * with the pid, one process, never a later one that reuses the pid. */
unsigned long long state_process_start_time(pid_t pid);
/* Whether /proc/PID/cgroup puts the process in a cgroup of sandbox `id`
 * (…/<id> or …/<id>/init): a pid reused by a process of no sandbox, or of
 * another one, is not that sandbox's init. True without cgroups (mode
 * none), where only the start time tells. */
bool state_process_in_sandbox(pid_t pid, const char *id);

/* Lock the state dir for this daemon's life (flock on STATE_DIR/nsboxd.lock,
 * which holds our pid). Taken before any recovery: a second nsboxd on the
 * same state dir would kill the first one's live sandboxes as leftovers.
 * Fails with a message naming the other daemon's pid. */
int state_lock(nsbox_error_t **err);

/* At startup, before serving: for every sandbox a previous run left (and
 * no live restore adopted: see restore.h), kill
 * whatever of it still runs, detach its mounts and remove its files.
 * Unreadable records are moved to state/quarantine with a log line. */
void state_recover(void);

/* The last step of a start, after state_recover: per-sandbox dirs (a
 * record, mount points) are runtime state, which only has to outlive a
 * crash of nsboxd, never a reboot. A tmpfs on STATE_DIR/sandboxes holds
 * them: a create then costs no inode of the state dir's file system, where
 * ext4 without a journal scans past every inode freed in the last five
 * minutes to find a free one (recently_deleted), a cost that grew with
 * every create and remove. A tmpfs left there by a run that crashed is
 * used as it is. Not in user namespace mode: there nsboxd's mount
 * namespace is its own and dies with it, and a start after a crash would
 * find no record of the inits left. (Under systemd the service's mount
 * namespace also goes with each run: there systemd kills what is left in
 * the service's cgroup, and cgroup_init removes the cgroups.) */
void state_runtime_fs(void);
/* At a clean stop: unmount that tmpfs if nothing is left in it. */
void state_runtime_fs_release(void);
