/* SPDX-License-Identifier: Apache-2.0 */
/* The CLI's JSON memory: where jansson's allocations come from. */
#pragma once

/* From now on, jansson allocates from the CLI's JSON memory (json_memory.c).
 * Call before any JSON value is made. */
void json_memory_use(void);
