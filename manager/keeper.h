/* SPDX-License-Identifier: Apache-2.0 */
/* The keeper of `nsboxd --rootless` with live restore: a small process left
 * in nsboxd's user and mount namespaces, so that the next nsboxd joins them
 * (and is an ancestor of the sandboxes it adopts, with their records' tmpfs
 * in view) instead of making new ones. Podman's "pause process" is the
 * model. It is found by a record in the state dir, `rootless-keeper.json`
 * ({pid, start_time, user_ns, mnt_ns}), and joined only when the process
 * the record names is that very process: same start time, same owner,
 * same namespaces, checked through a pidfd. */
#pragma once

#include <stdbool.h>

/* Before the re-exec, as the user: join the keeper of state_dir's nsboxd.
 * Returns true when this process is now in its user and mount namespaces;
 * false when there is none, or one that cannot be trusted (then said on
 * stderr): the caller makes fresh namespaces. */
bool keeper_join(const char *state_dir);

/* After the re-exec: whether the namespaces nsboxd runs in are a keeper's
 * (joined, or made by this start and then kept by keeper_make). */
bool keeper_held(void);

/* With live restore, state_dir's lock held: make sure a keeper holds the
 * namespaces nsboxd runs in for the next one (the one joined, or a new
 * one). A keeper ends when no nsboxd has held state_dir's lock for
 * grace_seconds (by then every kept sandbox has ended itself), or when the
 * record names another keeper. */
void keeper_ensure(const char *state_dir, unsigned grace_seconds);

/* A stop that leaves no sandbox running: the keeper is not needed. */
void keeper_release(const char *state_dir);

/* argv of the keeper process itself (nsboxd re-executed): returns its exit
 * status, or -1 when argv is not a keeper's. */
int keeper_main(int argc, char **argv);
