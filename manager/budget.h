/* SPDX-License-Identifier: Apache-2.0 */
/* nsboxd's own memory for data waiting on someone: replies a client has not
 * read yet, exec output nobody has collected. One budget for all of it
 * (config max_buffer_bytes), so that many slow clients together cannot
 * grow the daemon without bound either. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Take n bytes from the budget; false (nothing taken) when it would go over. */
bool budget_take(size_t n);
/* Take n bytes even past the budget (data already in hand that must not be
 * lost); the caller then stops producing more until !budget_exhausted(). */
void budget_force(size_t n);
void budget_give(size_t n);
/* True once usage is over the budget: producers pause. */
bool budget_exhausted(void);
