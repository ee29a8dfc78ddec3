/* SPDX-License-Identifier: Apache-2.0 */
/* Per-owner bounded tables of handles (owned.h). */
#include "owned.h"

#include <stdlib.h>
#include <string.h>

static void reset(struct owned_table *t, struct owned *o, uid_t uid)
{
        if (o->used && t->clear != NULL)
                t->clear(o);
        memset(o, 0, t->stride);
        o->uid = uid;
        o->used = true;
        o->seq = ++t->next_seq;
}

void *owned_add(struct owned_table *t, uid_t uid)
{
        struct owned *free_slot = NULL, *oldest = NULL, *oldest_ended = NULL;
        size_t mine = 0;
        for (size_t i = 0; i < t->size; i++) {
                struct owned *o = owned_at(t, i);
                if (!o->used) {
                        free_slot = free_slot ? free_slot : o;
                        continue;
                }
                if (o->uid != uid)
                        continue;
                mine++;
                if (oldest == NULL || o->seq < oldest->seq)
                        oldest = o;
                if (o->ended && (oldest_ended == NULL || o->seq < oldest_ended->seq))
                        oldest_ended = o;
        }
        struct owned *slot = mine >= t->per_owner ? (oldest_ended ? oldest_ended : oldest) : free_slot;
        if (slot == NULL) {
                size_t more = t->size ? t->size * 2 : 64;
                char *grown = realloc(t->entries, more * t->stride);
                if (grown == NULL)
                        return NULL;
                memset(grown + t->size * t->stride, 0, (more - t->size) * t->stride);
                t->entries = grown;
                slot = owned_at(t, t->size);
                t->size = more;
        }
        reset(t, slot, uid);
        return slot;
}

void owned_remove(struct owned_table *t, void *entry)
{
        struct owned *o = entry;
        if (o->used && t->clear != NULL)
                t->clear(o);
        memset(o, 0, t->stride);
}
