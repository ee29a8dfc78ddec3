/* SPDX-License-Identifier: Apache-2.0 */
/* How sandboxes get host uids: a range of their own each (idmapped image),
 * or, where the kernel cannot idmap the image, one range shared by all with
 * a copy of the image owned by that range. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

/* Decide the mode from the config ("per-sandbox", "shared" or "auto") and
 * what the kernel can do. "per-sandbox" on a kernel that cannot fails with
 * what is missing; "auto" falls back to shared and says so. */
int uidmode_init(const char *wanted, nsbox_error_t **err);
bool uidmode_shared(void);
const char *uidmode_name(void); /* "per-sandbox", "shared" or "userns" (nsboxd in a user namespace) */
/* The base of the one range of shared mode: the pool's, or 0 in userns mode. */
uid_t uidmode_shared_base(void);

/* The lower layer for an image: the image itself (idmapped per sandbox), or
 * in shared mode its copy owned by the shared range (made on first use). */
int uidmode_image_lower(const char *image, char *out, size_t len, nsbox_error_t **err);
