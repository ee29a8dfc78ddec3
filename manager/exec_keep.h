/* SPDX-License-Identifier: Apache-2.0 */
/* Live restore of execs (docs/design/live-restore.md): a client's exec (or
 * a helper) in a leased sandbox has its fds kept by the sandbox's init
 * (CTL_KEEP) and its record in a memfd kept with them: what the client
 * asked, a copy of its kept output (head and tail rings; a streamed exec's
 * ring of what it sent) and, once it has ended, how, so that the next
 * nsboxd takes it over with its output. Used by exec.c and exec_log.c only. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct exec;
struct sandbox;

/* Whether ex is one to keep: live restore is on, the sandbox is leased, and
 * ex is a client's exec (background, foreground or streamed; its stdio
 * pipes nsboxd reads, or a tty's pty master), or a helper that says how to
 * take it over. */
bool exec_keep_wanted(const struct exec *ex);
/* Make its record and hand the init its fds; on failure ex simply ends
 * with nsboxd, as without live restore (logged). */
void exec_keep_start(struct exec *ex);
/* Its record again: what changed after the start (pid, started). */
void exec_keep_meta(struct exec *ex);
/* Mirror what exec.c and exec_log.c put in ex's buffers: `len` bytes at
 * `at` of a stream's head, or at index `at` of its tail ring; then the
 * counters (lengths, offsets, dropped bytes). */
void exec_keep_head(struct exec *ex, int which, size_t at, const char *data, size_t len);
void exec_keep_tail(struct exec *ex, int which, size_t at, const char *data, size_t len);
/* A streamed exec keeps no head: the bytes sent to its client, from stream
 * offset `at`, go to its tail ring in the memfd only, so that the client
 * takes it back after a restart from the offset it has. */
void exec_keep_streamed(struct exec *ex, int which, size_t at, const char *data, size_t len);
/* read(2) of a stream's pipe; for a kept streamed exec, the bytes go from
 * the pipe into its ring in the memfd in one step (splice) before nsboxd has
 * them, with a record of the move the next nsboxd checks: a kill -9 at any
 * moment leaves them in the pipe or in the ring, counted. */
ssize_t exec_keep_read(struct exec *ex, int which, int fd, char *buf, size_t len);
void exec_keep_counters(struct exec *ex);
/* The exec is over: the init drops what it kept. */
void exec_keep_end(struct exec *ex);
/* A client's background exec is over: the init drops its pipes and slot
 * but keeps its record (with how it ended), so that the next nsboxd still
 * answers exec.status and exec.output for it; exec_keep_end when it is
 * forgotten. */
void exec_keep_ended(struct exec *ex);

/* At adoption: read a kept record into ex (output buffers, counters: its
 * fds are the caller's) and return what the client asked (NULL with err). */
json_t *exec_keep_load(struct exec *ex, int memfd, nsbox_error_t **err);
