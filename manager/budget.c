/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's one budget for bytes waiting on someone (unread replies, uncollected output). */
#include "budget.h"

#include "daemon.h"

static size_t used;

bool budget_take(size_t n)
{
        if (used + n > nsboxd.config.max_buffer_bytes)
                return false;
        used += n;
        return true;
}

void budget_force(size_t n)
{
        used += n;
}

void budget_give(size_t n)
{
        used = n > used ? 0 : used - n;
}

bool budget_exhausted(void)
{
        return used >= nsboxd.config.max_buffer_bytes;
}
