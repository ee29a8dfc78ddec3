/* SPDX-License-Identifier: Apache-2.0 */
/* Idle sandboxes: what counts as work, and the reaper. */
#pragma once

#include <stdbool.h>

#include "sandbox.h"

/* An exec, python.run, package.install or shell command runs in it. */
bool sandbox_working(struct sandbox *sb);
/* Pause or remove the sandboxes idle longer than their idle timeout (and
 * paused ones past paused_timeout_seconds). From the daemon's tick. */
void sandbox_reap_idle(void);
