/* SPDX-License-Identifier: Apache-2.0 */
/* Seccomp profiles by name, compiled once and kept as sealed memfds that
 * every sandbox using the profile shares read-only. */
#pragma once

#include "error.h"

/* The memfd for profile `name` from the profiles dir (compiled on first use). */
int profiles_get(const char *name, nsbox_error_t **err);
void profiles_clear(void);
