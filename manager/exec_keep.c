/* SPDX-License-Identifier: Apache-2.0 */
/* Live restore of background execs: their record and kept output in a memfd the sandbox's init holds. */
#include "exec_keep.h"

#include "exec_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "budget.h"
#include "cleanup.h"
#include "daemon.h"
#include "exec_params.h"
#include "json_cleanup.h"
#include "log.h"
#include "proto.h"

/* The memfd: this header, the request as JSON at META_AT, then each
 * stream's head (max_output bytes of room) and each stream's tail ring
 * (max_output / 2). It is sparse: only what was written takes memory. */
#define KEEP_MAGIC   0x6e73626f786b6570ull /* "nsboxkep" */
#define KEEP_VERSION 1
#define META_AT      4096
#define META_MAX     (60u << 10)
#define DATA_AT      (64u << 10)

struct keep_stream {
        uint64_t head_len, written, tail_len, tail_start, tail_cap;
};

/* A streamed exec's bytes on their way from the pipe into its ring
 * (exec_keep_read): `len` bytes at stream offset `at`, whose first bytes in
 * the ring were `canary` before the move. Cleared by the counters after it. */
struct keep_move {
        uint64_t canary, at, len;
        uint32_t which, set;
};

struct keep_header {
        uint64_t magic;
        uint32_t version, meta_len;
        uint64_t max_output, total_output, dropped_output;
        uint32_t truncated, pad;
        struct keep_stream stream[2];
        struct keep_move move; /* zero in the records of nsboxd before it */
};

#define CANARY_LEN 8

static uint64_t head_at(const struct exec *ex, int which)
{
        return DATA_AT + (uint64_t)which * ex->max_output;
}

static uint64_t tail_at(const struct exec *ex, int which)
{
        return DATA_AT + 2 * (uint64_t)ex->max_output + (uint64_t)which * (ex->max_output / 2);
}

/* A streamed exec's ring: what its client may not have had yet when
 * nsboxd stopped (rpc.c queues up to 4 MiB for a client before it pauses
 * the exec, the sockets hold more), within its room of the memfd. */
#define STREAM_RING_MAX (8u << 20)

static uint64_t stream_ring_cap(const struct exec *ex)
{
        return ex->max_output / 2 < STREAM_RING_MAX ? ex->max_output / 2 : STREAM_RING_MAX;
}

bool exec_keep_wanted(const struct exec *ex)
{
        if (!nsboxd.config.live_restore || ex->sb->lease_fd < 0 || ex->sb->ctl == NULL || ex->slot == NULL ||
            ex->out[0].source == NULL || (ex->tty ? ex->stdin_src == NULL : ex->out[1].source == NULL))
                return false;
        /* A client's exec (its stdin, if any, is closed at adoption: what
         * nsboxd had not written into it is lost; a tty's stays open); or a
         * helper that says how to take it over, with its stdin. */
        if (ex->keep_kind == NULL)
                return ex->hooks == NULL;
        return ex->stdin_src != NULL && ex->stdin_len == ex->stdin_off;
}

static void keep_lost(struct exec *ex, const char *what)
{
        log_warn("sandbox %s: exec %s: %s: it will not outlive nsboxd", ex->sb->id, ex->id, what);
        if (ex->keep_fd >= 0)
                close(ex->keep_fd);
        ex->keep_fd = -1;
}

void exec_keep_meta(struct exec *ex)
{
        if (ex->keep_fd < 0)
                return;
        _cleanup_json_ json_t *meta =
            json_pack("{s:s, s:I, s:b, s:I, s:I, s:I, s:I, s:s?, s:s?, s:b, s:I, s:b, s:b, s:b, s:I, s:b}",
                      "exec_id", ex->id, "number", (json_int_t)ex->number, "base64", ex->base64, "max_output",
                      (json_int_t)ex->max_output, "timeout_s", (json_int_t)ex->timeout_s, "start_realtime_ms",
                      (json_int_t)ex->start_realtime_ms, "uid", (json_int_t)ex->uid, "audit", ex->audit,
                      "command", ex->command_text, "started", ex->started, "pid", (json_int_t)ex->pid,
                      "background", ex->background, "service", ex->service, "counted", ex->counted,
                      "quota_uid", (json_int_t)ex->quota_uid, "streamed", ex->stream);
        if (meta != NULL && ex->tty)
                json_object_set_new(meta, "tty", json_true());
        if (meta != NULL && ex->finished)
                json_object_set_new(meta, "end",
                                    json_pack("{s:b, s:i, s:b, s:b, s:b, s:i, s:I, s:s?, s:i, s:i}", "exited",
                                              ex->exited, "wait_status", ex->wait_status, "timed_out",
                                              ex->timed_out, "killed", ex->killed, "supervisor_died",
                                              ex->supervisor_died, "leftover", (int)ex->leftover,
                                              "duration_ms", (json_int_t)(ex->end_mono - ex->start_mono),
                                              "start_error", ex->start_error, "start_errno", ex->start_errno,
                                              "start_exit_code", ex->start_exit_code));
        if (meta != NULL && ex->keep_kind != NULL) {
                json_t *state = ex->keep_state != NULL ? ex->keep_state(ex, ex->hooks_data) : NULL;
                json_object_set_new(meta, "kind", json_string(ex->keep_kind));
                json_object_set_new(meta, "state", state != NULL ? state : json_object());
        }
        _cleanup_free_ char *text = meta != NULL ? json_dumps(meta, JSON_COMPACT) : NULL;
        size_t len = text != NULL ? strlen(text) : 0;
        if (text == NULL || len > META_MAX) {
                keep_lost(ex, "its record does not fit");
                return;
        }
        struct keep_header h = { .magic = KEEP_MAGIC, .version = KEEP_VERSION, .meta_len = (uint32_t)len };
        size_t fixed = offsetof(struct keep_header, max_output); /* magic, version, meta_len */
        if (pwrite(ex->keep_fd, text, len, META_AT) != (ssize_t)len ||
            pwrite(ex->keep_fd, &h, fixed, 0) != (ssize_t)fixed)
                keep_lost(ex, "write its record");
}

void exec_keep_counters(struct exec *ex)
{
        if (ex->keep_fd < 0)
                return;
        struct keep_header h = { .max_output = ex->max_output,
                                 .total_output = ex->total_output,
                                 .dropped_output = ex->dropped_output,
                                 .truncated = ex->truncated };
        for (int i = 0; i < 2; i++) {
                const struct output *o = &ex->out[i];
                h.stream[i] =
                    (struct keep_stream){ o->len, o->written, o->tail_len, o->tail_start, o->tail_cap };
                if (ex->stream) {
                        /* Its ring in the memfd only: byte x at x % cap (exec_keep_streamed). */
                        uint64_t cap = stream_ring_cap(ex), kept = o->written < cap ? o->written : cap;
                        h.stream[i] = (struct keep_stream){ 0, o->written, kept,
                                                            cap > 0 ? (o->written - kept) % cap : 0, cap };
                }
        }
        size_t from = offsetof(struct keep_header, max_output), len = sizeof(h) - from;
        if (pwrite(ex->keep_fd, (char *)&h + from, len, from) != (ssize_t)len)
                keep_lost(ex, "write its counters");
}

void exec_keep_head(struct exec *ex, int which, size_t at, const char *data, size_t len)
{
        if (ex->keep_fd >= 0 && len > 0 &&
            pwrite(ex->keep_fd, data, len, head_at(ex, which) + at) != (ssize_t)len)
                keep_lost(ex, "copy its output");
}

void exec_keep_tail(struct exec *ex, int which, size_t at, const char *data, size_t len)
{
        if (ex->keep_fd >= 0 && len > 0 &&
            pwrite(ex->keep_fd, data, len, tail_at(ex, which) + at) != (ssize_t)len)
                keep_lost(ex, "copy its output");
}

void exec_keep_streamed(struct exec *ex, int which, size_t at, const char *data, size_t len)
{
        size_t cap = stream_ring_cap(ex);
        bool there = ex->keep_in_ring; /* moved into the ring by exec_keep_read */
        ex->keep_in_ring = false;
        if (ex->keep_fd < 0 || cap == 0 || there)
                return;
        if (len > cap) { /* only its end fits */
                data += len - cap;
                at += len - cap;
                len = cap;
        }
        size_t pos = at % cap, first = len < cap - pos ? len : cap - pos;
        exec_keep_tail(ex, which, pos, data, first);
        exec_keep_tail(ex, which, 0, data + first, len - first);
}

ssize_t exec_keep_read(struct exec *ex, int which, int fd, char *buf, size_t len)
{
        static uint64_t canary_base, canaries;
        uint64_t cap = stream_ring_cap(ex), at = ex->out[which].written, pos = cap > 0 ? at % cap : 0;
        int avail = 0;
        if (ex->keep_fd < 0 || !ex->stream || ex->tty || cap == 0 || ioctl(fd, FIONREAD, &avail) < 0 ||
            avail < CANARY_LEN || cap - pos < CANARY_LEN)
                return read(fd, buf, len);
        size_t n = len < (size_t)avail ? len : (size_t)avail;
        if (n > cap - pos)
                n = cap - pos;
        if (canary_base == 0 && getrandom(&canary_base, sizeof(canary_base), 0) != sizeof(canary_base))
                canary_base = (uint64_t)now_monotonic_ms() * 0x9e3779b97f4a7c15ull;
        struct keep_move move = { .canary = canary_base ^ (++canaries * 0x9e3779b97f4a7c15ull),
                                  .at = at,
                                  .len = n,
                                  .which = (uint32_t)which,
                                  .set = 1 };
        off_t ring = (off_t)(tail_at(ex, which) + pos);
        if (pwrite(ex->keep_fd, &move.canary, CANARY_LEN, ring) != CANARY_LEN ||
            pwrite(ex->keep_fd, &move, sizeof(move), offsetof(struct keep_header, move)) != sizeof(move)) {
                keep_lost(ex, "record a move of its output");
                return read(fd, buf, len);
        }
        loff_t off = ring;
        ssize_t got = splice(fd, NULL, ex->keep_fd, &off, n, SPLICE_F_NONBLOCK);
        if (got < 0 && errno != EAGAIN && errno != EINTR)
                return read(fd, buf, len); /* no splice here: nothing moved, the note is void */
        if (got <= 0)
                return got;
        /* Ours to pass on: the ring has it already (exec_keep_streamed skips it). */
        if (pread(ex->keep_fd, buf, (size_t)got, ring) != got) {
                keep_lost(ex, "read its output back");
                return -1;
        }
        ex->keep_in_ring = true;
        return got;
}

void exec_keep_start(struct exec *ex)
{
        ex->keep_fd = memfd_create("nsbox-exec", MFD_CLOEXEC);
        if (ex->keep_fd < 0) {
                keep_lost(ex, "memfd_create");
                return;
        }
        /* Its full size (sparse: free until written), so that a ring read
         * back whole is there even where nothing was written. */
        if (ftruncate(ex->keep_fd, (off_t)tail_at(ex, 2)) < 0) {
                keep_lost(ex, "size its record");
                return;
        }
        exec_keep_meta(ex);
        exec_keep_counters(ex);
        /* What was read before now (a quick start's first output). */
        for (int i = 0; i < 2; i++) {
                exec_keep_head(ex, i, 0, ex->out[i].data, ex->out[i].len);
                if (ex->out[i].tail != NULL)
                        exec_keep_tail(ex, i, 0, ex->out[i].tail, ex->out[i].tail_cap);
        }
        if (ex->keep_fd < 0)
                return;
        struct ctl_header msg = { CTL_KEEP, ex->number };
        /* A tty's one stream: its pty master, the fd we read and the one we write. */
        int fds[CTL_KEEP_MAX_FDS] = { ex->slot->fd, ex->keep_fd, ex->out[0].source->fd,
                                      ex->tty ? ex->stdin_src->fd : ex->out[1].source->fd,
                                      !ex->tty && ex->stdin_src != NULL ? ex->stdin_src->fd : -1 };
        ssize_t n = ctl_send(ex->sb->ctl->fd, &msg, sizeof(msg), NULL, 0, fds,
                             !ex->tty && ex->stdin_src != NULL ? 5 : 4);
        if (n < 0)
                keep_lost(ex, "hand its fds to the init");
        else
                ex->kept_by_init = true;
}

void exec_keep_ended(struct exec *ex)
{
        exec_keep_meta(ex); /* with its end */
        exec_keep_counters(ex);
        if (ex->keep_fd < 0 || !ex->kept_by_init || ex->sb->ctl == NULL) {
                exec_keep_end(ex);
                return;
        }
        /* Its pipes and slot let go of (an older init, which keeps no
         * record alone, drops them too), its record kept alone. */
        struct ctl_header unkeep = { CTL_UNKEEP, ex->number }, keep = { CTL_KEEP, ex->number };
        ctl_send(ex->sb->ctl->fd, &unkeep, sizeof(unkeep), NULL, 0, NULL, 0);
        if (ctl_send(ex->sb->ctl->fd, &keep, sizeof(keep), NULL, 0, &ex->keep_fd, 1) < 0) {
                ex->kept_by_init = false;
                keep_lost(ex, "hand its record to the init");
        }
}

void exec_keep_end(struct exec *ex)
{
        if (ex->keep_fd >= 0)
                close(ex->keep_fd);
        ex->keep_fd = -1;
        /* Even when its record was lost since: the init must let go of its
         * slot's control socket, or its supervisor would wait on for good. */
        if (ex->kept_by_init && ex->sb->ctl != NULL) {
                ex->kept_by_init = false;
                struct ctl_header msg = { CTL_UNKEEP, ex->number };
                ctl_send(ex->sb->ctl->fd, &msg, sizeof(msg), NULL, 0, NULL, 0);
        }
}

/* `len` bytes at `at` of the memfd into a new buffer of `cap` bytes,
 * charged to the output budget; false when it cannot be had. */
static bool load_region(struct exec *ex, int memfd, uint64_t at, size_t len, size_t cap, char **out)
{
        *out = NULL;
        if (cap == 0)
                return true;
        if (!budget_take(cap))
                return false;
        char *buf = calloc(1, cap);
        if (buf == NULL) {
                budget_give(cap);
                return false;
        }
        ex->charged += cap;
        *out = buf;
        return len == 0 || pread(memfd, buf, len, at) == (ssize_t)len;
}

json_t *exec_keep_load(struct exec *ex, int memfd, nsbox_error_t **err)
{
        struct keep_header h;
        if (pread(memfd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.magic != KEEP_MAGIC ||
            h.version != KEEP_VERSION || h.meta_len == 0 || h.meta_len > META_MAX) {
                nsbox_error(err, EPROTO, "its record is not one nsboxd writes");
                return NULL;
        }
        _cleanup_free_ char *text = calloc(1, h.meta_len + 1);
        if (text == NULL || pread(memfd, text, h.meta_len, META_AT) != (ssize_t)h.meta_len) {
                nsbox_error(err, EIO, "read its record");
                return NULL;
        }
        _cleanup_json_ json_t *meta = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
        json_t *max = json_object_get(meta, "max_output");
        if (!json_is_object(meta) || !json_is_integer(max) ||
            (uint64_t)json_integer_value(max) != h.max_output || h.max_output > EXEC_MAX_MAX_OUTPUT) {
                nsbox_error(err, EPROTO, "its record is not one nsboxd writes");
                return NULL;
        }
        ex->max_output = h.max_output;
        /* A move from a streamed exec's pipe into its ring that the record
         * does not count yet: done if its canary is no longer there. */
        struct keep_move *move = &h.move;
        if (move->set && move->which < 2 && move->len >= CANARY_LEN &&
            move->len <= h.stream[move->which].tail_cap && h.stream[move->which].head_len == 0 &&
            move->at == h.stream[move->which].written) {
                struct keep_stream *s = &h.stream[move->which];
                uint64_t canary = 0;
                if (pread(memfd, &canary, CANARY_LEN,
                          (off_t)(tail_at(ex, (int)move->which) + move->at % s->tail_cap)) == CANARY_LEN &&
                    canary != move->canary) {
                        s->written += move->len;
                        s->tail_len = s->written < s->tail_cap ? s->written : s->tail_cap;
                        s->tail_start = (s->written - s->tail_len) % s->tail_cap;
                        h.total_output += move->len;
                }
        }
        for (int i = 0; i < 2; i++) {
                const struct keep_stream *s = &h.stream[i];
                struct output *o = &ex->out[i];
                /* Every count within its room: the record is ours, but a
                 * torn one must not make us read past a buffer. */
                if (s->head_len > h.max_output || s->tail_cap > h.max_output / 2 ||
                    s->tail_len > s->tail_cap || (s->tail_cap > 0 && s->tail_start >= s->tail_cap) ||
                    s->written < s->head_len + s->tail_len) {
                        nsbox_error(err, EPROTO, "its record's counts do not add up");
                        return NULL;
                }
                if (!load_region(ex, memfd, head_at(ex, i), s->head_len, s->head_len, &o->data) ||
                    !load_region(ex, memfd, tail_at(ex, i), s->tail_cap, s->tail_cap, &o->tail)) {
                        nsbox_error(err, ENOMEM, "room for its output");
                        return NULL;
                }
                o->len = o->cap = s->head_len;
                o->written = s->written;
                o->tail_cap = s->tail_cap;
                o->tail_len = s->tail_len;
                o->tail_start = s->tail_start;
        }
        ex->total_output = h.total_output;
        ex->dropped_output = h.dropped_output;
        ex->truncated = h.truncated != 0;
        return steal_pointer(&meta);
}
