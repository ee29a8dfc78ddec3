/* SPDX-License-Identifier: Apache-2.0 */
/* A background exec's kept output: the head (exec.c), a tail ring per stream, and reads across both. */
#include "exec_log.h"

#include "exec_internal.h"

#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "exec_keep.h"

/* The stream's bytes as offsets: the head is [0, len), the ring holds
 * [written - tail_len, written), and what lies between was dropped. */
static size_t ring_from(const struct output *o)
{
        return o->written - o->tail_len;
}

static size_t dropped_between(const struct output *o)
{
        return ring_from(o) - o->len;
}

static char ring_byte(const struct output *o, size_t k)
{
        return o->tail[(o->tail_start + k) % o->tail_cap];
}

/* The ring is made at its full size on first use, charged to nsboxd's
 * output budget: half the exec's max_output per stream, so that a
 * background exec holds at most twice its max_output. */
static bool ring_ready(struct exec *ex, struct output *o)
{
        if (o->tail != NULL)
                return true;
        size_t cap = ex->max_output / 2;
        if (cap == 0 || !budget_take(cap))
                return false;
        o->tail = malloc(cap);
        if (o->tail == NULL) {
                budget_give(cap);
                return false;
        }
        ex->charged += cap;
        o->tail_cap = cap;
        o->tail_start = o->tail_len = 0;
        return true;
}

void exec_log_append_tail(struct exec *ex, int which, const char *data, size_t len)
{
        struct output *o = &ex->out[which];
        o->written += len;
        if (len == 0)
                return;
        if (!ring_ready(ex, o)) {
                ex->truncated = true; /* all of it dropped */
                ex->dropped_output += len;
                return;
        }
        if (len >= o->tail_cap) {
                /* Only its end fits: the ring is that end, from its start. */
                if (o->tail_len > 0 || len > o->tail_cap)
                        ex->truncated = true;
                ex->dropped_output += o->tail_len + len - o->tail_cap;
                memcpy(o->tail, data + len - o->tail_cap, o->tail_cap);
                o->tail_start = 0;
                o->tail_len = o->tail_cap;
                exec_keep_tail(ex, which, 0, o->tail, o->tail_cap);
                return;
        }
        size_t overflow = o->tail_len + len > o->tail_cap ? o->tail_len + len - o->tail_cap : 0;
        if (overflow > 0) {
                ex->truncated = true;
                ex->dropped_output += overflow;
                o->tail_start = (o->tail_start + overflow) % o->tail_cap;
                o->tail_len -= overflow;
        }
        size_t at = (o->tail_start + o->tail_len) % o->tail_cap;
        size_t first = len < o->tail_cap - at ? len : o->tail_cap - at;
        memcpy(o->tail + at, data, first);
        memcpy(o->tail, data + first, len - first);
        o->tail_len += len;
        exec_keep_tail(ex, which, at, data, first);
        exec_keep_tail(ex, which, 0, data + first, len - first);
}

size_t exec_log_written(const struct exec *ex, int which)
{
        return ex->out[which].written;
}

static void ring_copy(const struct output *o, size_t from, size_t n, char *dst)
{
        for (size_t k = 0; k < n; k++)
                dst[k] = ring_byte(o, from + k);
}

int exec_log_read(const struct exec *ex, int which, size_t since, struct exec_log_piece *piece)
{
        const struct output *o = &ex->out[which];
        *piece = (struct exec_log_piece){ 0 };
        if (since > o->written)
                since = o->written;
        size_t gap = dropped_between(o);
        size_t head_part = 0, ring_skip = 0, ring_part = 0;
        if (since < o->len) {
                head_part = o->len - since;
                /* Head and ring are one piece only when nothing fell between. */
                ring_part = gap == 0 ? o->tail_len : 0;
                piece->next = gap == 0 ? o->written : o->len;
                piece->more = gap > 0;
        } else {
                if (since < ring_from(o))
                        piece->dropped = ring_from(o) - since;
                else
                        ring_skip = since - ring_from(o);
                ring_part = o->tail_len - ring_skip;
                piece->next = o->written;
        }
        piece->len = head_part + ring_part;
        if (piece->len == 0)
                return 0;
        piece->data = malloc(piece->len);
        if (piece->data == NULL)
                return -1;
        if (head_part > 0)
                memcpy(piece->data, o->data + since, head_part);
        ring_copy(o, ring_skip, ring_part, piece->data + head_part);
        return 0;
}

/* The byte at stream offset x, which is kept. */
static char kept_byte(const struct output *o, size_t x)
{
        return x >= ring_from(o) ? ring_byte(o, x - ring_from(o)) : o->data[x];
}

size_t exec_log_tail_start(const struct exec *ex, int which, size_t lines)
{
        const struct output *o = &ex->out[which];
        size_t earliest = dropped_between(o) > 0 ? ring_from(o) : 0;
        size_t x = o->written;
        if (lines == 0 || x == earliest)
                return x;
        /* As tail -n: a last line without its newline counts, a final
         * newline starts no line of its own. */
        if (kept_byte(o, x - 1) == '\n')
                x--;
        size_t seen = 0;
        for (; x > earliest; x--) {
                if (kept_byte(o, x - 1) == '\n' && ++seen == lines)
                        return x;
        }
        return earliest;
}
