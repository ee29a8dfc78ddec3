/* SPDX-License-Identifier: Apache-2.0 */
/* Idle sandboxes: what counts as work in one, when one is paused or removed
 * (shown in its JSON), and the reaper that does it. */
#include "idle.h"

#include <stdio.h>
#include <string.h>

#include "cgroup.h"
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

/* What the idle clock does next to a sandbox. */
enum idle_step { IDLE_NEVER, IDLE_PAUSE, IDLE_REMOVE };

/* The next step for sb, when it is due (monotonic ms) and why, from its
 * policy (idle_timeout_seconds, idle_action, paused_timeout_seconds): the
 * reaper acts on it and sandbox.info / sandbox.list show it, so that what
 * is shown is what happens. */
static enum idle_step idle_next(struct sandbox *sb, long long *at, char *why, size_t len)
{
        const struct sandbox_policy *p = &sb->policy;
        char idle[32], paused[32];
        format_duration(p->idle_timeout_seconds, idle, sizeof(idle));
        format_duration(p->paused_timeout_seconds, paused, sizeof(paused));
        if (sb->paused) {
                if (p->paused_timeout_seconds == 0)
                        return IDLE_NEVER;
                /* Reading its files (fs.*) while paused counts as use too. */
                long long since =
                    sb->paused_mono > sb->last_active_mono ? sb->paused_mono : sb->last_active_mono;
                *at = since + p->paused_timeout_seconds * 1000LL;
                snprintf(why, len, "paused for %s (paused_timeout_seconds)", paused);
                return IDLE_REMOVE;
        }
        /* Work in progress is never idle: an exec, a package install, a
         * python.run (stateless ones are execs; stateful ones run in the
         * interpreter, a service exec that does not count as work itself). */
        if (sandbox_working(sb))
                return IDLE_NEVER;
        *at = sb->last_active_mono + p->idle_timeout_seconds * 1000LL;
        if (strcmp(p->idle_action, "pause") != 0) {
                snprintf(why, len, "idle for %s (idle_timeout_seconds)", idle);
                return IDLE_REMOVE;
        }
        if (cgroup_freezer_available()) {
                snprintf(why, len, "idle for %s (idle_timeout_seconds)", idle);
                return IDLE_PAUSE;
        }
        /* No freezer on this host: an idle sandbox is kept running where it
         * would have been paused, and removed when it would have been. */
        if (p->paused_timeout_seconds == 0)
                return IDLE_NEVER;
        *at += p->paused_timeout_seconds * 1000LL;
        snprintf(why, len,
                 "idle for %s + %s (idle_timeout_seconds + paused_timeout_seconds; this host cannot pause)",
                 idle, paused);
        return IDLE_REMOVE;
}

/* An idle sandbox is paused; one that cannot be is tried again after
 * another idle timeout (as a pause that does not freeze in time is). */
static void pause_idle(struct sandbox *sb, const char *why)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (sandbox_pause(sb, NULL, NULL, &err) < 0) {
                log_warn("sandbox %s: %s, and cannot be paused: %s; trying again after its idle timeout",
                         sb->id, why, err->message);
                sb->last_active_mono = now_monotonic_ms();
                return;
        }
        log_info("sandbox %s: %s, pausing", sb->id, why);
}

void sandbox_reap_idle(void)
{
        long long now = now_monotonic_ms();
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if (sb->state != SANDBOX_RUNNING || sb->pooled || sb->pause_timer != NULL)
                        continue;
                long long at = 0;
                char why[160];
                enum idle_step step = idle_next(sb, &at, why, sizeof(why));
                if (step == IDLE_NEVER || now < at)
                        continue;
                if (step == IDLE_PAUSE) {
                        pause_idle(sb, why);
                        continue;
                }
                log_info("sandbox %s: %s, removing", sb->id, why);
                sandbox_remove(sb, why, NULL, NULL);
        }
}

void sandbox_expiry_to_json(struct sandbox *sb, json_t *j)
{
        if (j == NULL)
                return;
        long long now_mono = now_monotonic_ms(), now_real = now_realtime_ms();
        char when[40];
        format_timestamp(now_real - (now_mono - sb->last_active_mono), when, sizeof(when));
        json_object_set_new(j, "last_active", json_string(when));
        json_object_set_new(j, "idle_action", json_string(sb->policy.idle_action));
        json_object_set_new(j, "paused_timeout_seconds", json_integer(sb->policy.paused_timeout_seconds));
        long long at = 0;
        char why[160];
        enum idle_step step =
            sb->state == SANDBOX_RUNNING && !sb->pooled ? idle_next(sb, &at, why, sizeof(why)) : IDLE_NEVER;
        if (step == IDLE_NEVER) {
                json_object_set_new(j, "expires", json_null());
                return;
        }
        long long in_ms = at > now_mono ? at - now_mono : 0;
        format_timestamp(now_real + in_ms, when, sizeof(when));
        json_object_set_new(j, "expires",
                            json_pack("{s:s, s:s, s:I, s:s}", "action",
                                      step == IDLE_PAUSE ? "pause" : "remove", "at", when, "in_seconds",
                                      (json_int_t)((in_ms + 999) / 1000), "reason", why));
}
