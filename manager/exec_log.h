/* SPDX-License-Identifier: Apache-2.0 */
/* A background exec's kept output (exec.output, nsbox logs): the head of
 * each stream up to the exec's max_output, and a ring of the tail, so that
 * the end of a long job is not lost; what falls between is counted. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct exec;

/* Bytes of one stream past the shared head (exec.c keeps that): into the
 * stream's tail ring, the oldest dropped when it is full. */
void exec_log_append_tail(struct exec *ex, int which, const char *data, size_t len);

/* One contiguous piece of a stream's kept output, from stream offset
 * `since` on (offsets count every byte the stream wrote, kept or not). */
struct exec_log_piece {
        char *data; /* malloc'd, NULL when empty */
        size_t len;
        size_t next;    /* the offset to ask from next */
        size_t dropped; /* bytes lost between `since` and this piece */
        bool more;      /* more is kept past `next` (ask again from there) */
};
int exec_log_read(const struct exec *ex, int which, size_t since, struct exec_log_piece *piece);
/* The offset at which the last `lines` lines of what is kept begin, not
 * reaching back across bytes that were dropped. */
size_t exec_log_tail_start(const struct exec *ex, int which, size_t lines);
/* Every byte the stream wrote, kept or not. */
size_t exec_log_written(const struct exec *ex, int which);
