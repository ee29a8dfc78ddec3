#pragma once

#include "error.h"

/* In the sandbox's fresh, private mount namespace: mount /proc (masked),
 * /dev and /sys into `root` (already the overlay), then pivot_root into it
 * and detach the old root entirely. */
int mounts_enter_root(const char *root, nsbox_error_t **err);
