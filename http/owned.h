/* SPDX-License-Identifier: Apache-2.0 */
/* Tables of entries held for their owners (owned.c): the handles nsbox-http
 * keeps between calls (E2B's processes, code contexts), bounded per owner
 * so that one owner's churn evicts only its own oldest entries, never
 * another's. A leaf: the caller holds its table's lock. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The head of every entry of an owned table. */
struct owned {
        uid_t uid;
        bool used;
        bool ended;             /* what it names is over: evicted before the rest */
        unsigned long long seq; /* order of making: the lowest is the oldest */
};

struct owned_table {
        void *entries; /* `size` entries of `stride` bytes, each starting with struct owned */
        size_t size, stride, per_owner;
        unsigned long long next_seq;
        void (*clear)(void *entry); /* frees what an evicted entry holds */
};

#define OWNED_TABLE(type, max_per_owner, clear_fn)                                        \
        {                                                                                 \
                .stride = sizeof(type), .per_owner = (max_per_owner), .clear = (clear_fn) \
        }

/* The i-th entry. */
static inline void *owned_at(const struct owned_table *t, size_t i)
{
        return (char *)t->entries + i * t->stride;
}

/* A zeroed entry for uid, its head filled: a free slot while the owner has
 * fewer than per_owner entries (the table grows for it), else the owner's
 * oldest ended entry, else its oldest. NULL when out of memory. The
 * pointer holds until the next owned_add. */
void *owned_add(struct owned_table *t, uid_t uid);
/* Forget an entry (cleared, its slot free). */
void owned_remove(struct owned_table *t, void *entry);
