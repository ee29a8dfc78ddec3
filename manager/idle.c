/* SPDX-License-Identifier: Apache-2.0 */
/* Idle sandboxes: what counts as work in one, and the reaper that pauses or
 * removes those idle longer than their idle timeout. */
#include "idle.h"

#include <string.h>

#include "cleanup.h"
#include "daemon.h"
#include "log.h"
#include "python.h"
#include "sandbox_life.h"
#include "sandbox_pause.h"
#include "shell.h"

/* Work in progress is never idle: an exec, a package install, a python.run
 * (stateless ones are execs; stateful ones run in the interpreter, a service
 * exec that does not count as work itself), a shell command. */
bool sandbox_working(struct sandbox *sb)
{
        return sb->running_execs > 0 || python_busy(sb) || shell_busy(sb);
}

/* A paused sandbox is kept until resumed, or removed after
 * paused_timeout_seconds when that is set. */
static bool paused_too_long(const struct sandbox *sb, long long now)
{
        uint32_t limit = nsboxd.config.paused_timeout_seconds;
        if (limit == 0 || now - sb->paused_mono < (long long)limit * 1000)
                return false;
        log_info("sandbox %s: paused for %us, reaping", sb->id, limit);
        return true;
}

/* idle_action "pause": an idle sandbox is paused instead of removed, where
 * it can be (else it is removed, as without the setting). */
static bool pause_idle(struct sandbox *sb)
{
        if (strcmp(nsboxd.config.idle_action, "pause") != 0)
                return false;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (sandbox_pause(sb, NULL, NULL, &err) < 0) {
                log_warn("sandbox %s: idle, and cannot be paused: %s; reaping", sb->id, err->message);
                return false;
        }
        log_info("sandbox %s: idle for %us, pausing", sb->id, sb->policy.idle_timeout_seconds);
        return true;
}

void sandbox_reap_idle(void)
{
        long long now = now_monotonic_ms();
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                char why[96];
                if (sb->state != SANDBOX_RUNNING || sb->pooled || sb->pause_timer != NULL)
                        continue;
                if (sb->paused) {
                        if (!paused_too_long(sb, now))
                                continue;
                        snprintf(why, sizeof(why), "paused for %us (paused_timeout_seconds)",
                                 nsboxd.config.paused_timeout_seconds);
                } else {
                        /* Work in progress is never idle: an exec, a package install, a
                         * python.run (stateless ones are execs; stateful ones run in the
                         * interpreter, a service exec that does not count as work itself). */
                        if (sandbox_working(sb))
                                continue;
                        if (now - sb->last_active_mono < (long long)sb->policy.idle_timeout_seconds * 1000)
                                continue;
                        if (pause_idle(sb))
                                continue;
                        log_info("sandbox %s: idle for %us, reaping", sb->id,
                                 sb->policy.idle_timeout_seconds);
                        snprintf(why, sizeof(why), "idle for %us (idle_timeout_seconds)",
                                 sb->policy.idle_timeout_seconds);
                }
                if (sb->policy.session_id[0] != '\0')
                        sandbox_session_remember(sb);
                sandbox_remove(sb, why, NULL, NULL);
        }
}
