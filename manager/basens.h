/* SPDX-License-Identifier: Apache-2.0 */
/* The mount namespace sandboxes are cloned into (see basens.c). */
#pragma once

#include "error.h"

/* Make it, with a helper whose private copy of the mount table lays out its
 * root on `at` (an existing directory; the host's stays as it is). */
int basens_init(const char *at, nsbox_error_t **err);
/* Join it, for a clone only; basens_leave goes back, with nsboxd's root and
 * working directory (and aborts if it cannot: every host path would be
 * wrong). */
int basens_enter(nsbox_error_t **err);
void basens_leave(void);
