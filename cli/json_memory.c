/* SPDX-License-Identifier: Apache-2.0 */
/* The CLI's JSON memory: jansson's allocations (and the client's line
 * buffer, common/client.c) are taken from one static block first, and from
 * malloc once it is used up. A block is never reused: the whole block goes
 * back at the process's exit.
 *
 * Why: a CLI call is a short process, and musl's malloc (the CLI is linked
 * statically against musl) maps a page of its own for each group of slots
 * it starts and unmaps it as soon as the group's last slot is freed. One
 * `nsbox exec ID /bin/true` made 4 mmap and 4 munmap calls and 26 page
 * faults, each fault 2-3 us on the VMs nsbox is measured on: 0.1 ms of a
 * 1.25 ms call (docs/performance.md). The block's pages are the process's
 * bss: each is faulted in once, on its first write, and never unmapped.
 *
 * Bounded: a long-lived CLI process (nsbox mcp, exec -it, events) uses the
 * block for its first JSON_MEMORY_SIZE bytes and malloc after that, so at
 * most that much is held beyond what is in use. Safe from threads (one
 * atomic add per allocation). The sanitizer build keeps jansson on malloc,
 * so that LeakSanitizer still sees every JSON value the CLI leaks. */
#include "json_memory.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
void json_memory_use(void)
{
}
#else
#define JSON_MEMORY_SIZE  (1u << 20)
#define JSON_MEMORY_ALIGN 16u /* what malloc gives: any type fits */

static _Alignas(JSON_MEMORY_ALIGN) unsigned char block[JSON_MEMORY_SIZE];
static size_t block_used;

static bool in_block(const void *p)
{
        uintptr_t at = (uintptr_t)p, start = (uintptr_t)block;
        return at >= start && at < start + sizeof(block);
}

static void *json_memory_alloc(size_t size)
{
        size_t need = (size + JSON_MEMORY_ALIGN - 1) & ~(size_t)(JSON_MEMORY_ALIGN - 1);
        /* A failed take leaves block_used past the end: every later one
         * goes to malloc without touching it again. */
        if (size > 0 && need >= size && need <= sizeof(block) &&
            __atomic_load_n(&block_used, __ATOMIC_RELAXED) <= sizeof(block) - need) {
                size_t at = __atomic_fetch_add(&block_used, need, __ATOMIC_RELAXED);
                if (at <= sizeof(block) - need)
                        return block + at;
        }
        return malloc(size);
}

static void json_memory_free(void *p)
{
        if (!in_block(p))
                free(p);
}

void json_memory_use(void)
{
        json_set_alloc_funcs(json_memory_alloc, json_memory_free);
}
#endif
