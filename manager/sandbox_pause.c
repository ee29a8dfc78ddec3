/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.pause and sandbox.resume: a sandbox's cgroup frozen and thawed,
 * and the wait until every process of it is stopped. */
#include "sandbox_pause.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cgroup.h"
#include "cleanup.h"
#include "daemon.h"
#include "events.h"
#include "log.h"
#include "state.h"

/* Freezing takes microseconds unless a task sits in an uninterruptible
 * sleep (a hung NFS read, say) where the freezer cannot reach it: then the
 * pause gives up, thaws, and says so, rather than leave it half frozen. */
/* Sleeping tasks freeze as soon as the scheduler gets to them, which is
 * rarely before the first check but usually within a fraction of a
 * millisecond: a first look after PAUSE_FIRST_POLL_US, then every ms. */
#define PAUSE_FIRST_POLL_US 100
#define PAUSE_POLL_MS       1
#define PAUSE_TIMEOUT_MS    5000
/* A v1 freezer left FREEZING (a task it could not stop at that moment)
 * stays so until asked again, as the kernel's freezer documentation says:
 * nsboxd asks again this often until it is frozen or the time is out. */
#define PAUSE_RETRY_MS 200

/* A pause ends (frozen, failed or overtaken): its waiters are answered. */
void sandbox_pause_end(struct sandbox *sb, const char *error, const char *kind)
{
        if (sb->pause_timer != NULL) {
                loop_timer_cancel(nsboxd.loop, sb->pause_timer);
                sb->pause_timer = NULL;
        }
        sb->pause_error_kind = kind;
        sandbox_waiters_run(&sb->pause_waiters, sb, error);
}

/* Live restore: the record says whether it is paused, and since when, so
 * that the next nsboxd pauses it again with its paused_timeout running on. */
static void pause_save(struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (nsboxd.config.live_restore && sb->lease_fd >= 0 && state_save(sb, &err) < 0)
                log_warn("sandbox %s: %s", sb->id, err->message);
}

static void pause_frozen(struct sandbox *sb)
{
        sb->paused = true;
        sb->paused_at_ms = now_realtime_ms();
        sb->paused_mono = now_monotonic_ms();
        log_limited(log_key_uid(sb->owner).text, LOG_LEVEL_INFO, "sandbox %s: paused", sb->id);
        events_emit(sb, "sandbox.paused", NULL, NULL);
        pause_save(sb);
        sandbox_pause_end(sb, NULL, NULL);
}

/* Every PAUSE_POLL_MS until sandbox_pause_end cancels it. */
static void on_pause_timer(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct sandbox *sb = data;
        int frozen = cgroup_sandbox_frozen(sb->cgroup);
        if (frozen == 1) {
                pause_frozen(sb);
                return;
        }
        long long now = now_monotonic_ms();
        if (frozen == 0 && now < sb->pause_deadline_mono) {
                if (now >= sb->pause_retry_mono) {
                        _cleanup_error_ nsbox_error_t *err = NULL;
                        sb->pause_retry_mono = now + PAUSE_RETRY_MS;
                        if (cgroup_sandbox_freeze(sb->cgroup, &err) < 0)
                                log_warn("sandbox %s: freeze again: %s", sb->id, err->message);
                }
                return;
        }
        cgroup_sandbox_thaw(sb->cgroup);
        /* The idle reaper tries again after another idle timeout, not at once. */
        sb->last_active_mono = now_monotonic_ms();
        char why[256];
        if (frozen < 0)
                snprintf(why, sizeof(why), "cannot read the freezer state of sandbox %s: %s; it was resumed",
                         sb->id, strerror(-frozen));
        else
                snprintf(why, sizeof(why),
                         "sandbox %s did not freeze within %d ms (a process in an uninterruptible sleep?); "
                         "it was resumed",
                         sb->id, PAUSE_TIMEOUT_MS);
        log_warn("%s", why);
        sandbox_pause_end(sb, why, frozen < 0 ? "internal" : "timeout");
}

int sandbox_pause(struct sandbox *sb, sandbox_ready_cb done, void *data, nsbox_error_t **err)
{
        if (sb->state != SANDBOX_RUNNING)
                return nsbox_refuse(err, ESRCH, "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
        if (sb->paused) {
                if (done != NULL)
                        done(sb, NULL, data);
                return 0;
        }
        if (sb->pause_timer == NULL) {
                long long started = now_monotonic_ms();
                int r = cgroup_sandbox_freeze(sb->cgroup, err);
                if (r < 0)
                        return r;
                int frozen = cgroup_sandbox_frozen(sb->cgroup);
                if (frozen == 1) {
                        pause_frozen(sb);
                        if (done != NULL)
                                done(sb, NULL, data);
                        return 0;
                }
                /* In ns: the first look comes before a ms is out. */
                sb->pause_timer = loop_timer_add_ns(nsboxd.loop, loop_now_ns() + PAUSE_FIRST_POLL_US * 1000LL,
                                                    PAUSE_POLL_MS * LOOP_NS_PER_MS, on_pause_timer, sb);
                if (sb->pause_timer == NULL) {
                        r = nsbox_error(err, ENOMEM, "watch sandbox %s freezing", sb->id);
                        cgroup_sandbox_thaw(sb->cgroup);
                        return r;
                }
                sb->pause_deadline_mono = started + PAUSE_TIMEOUT_MS;
                sb->pause_retry_mono = started + PAUSE_RETRY_MS;
        }
        if (done != NULL)
                sandbox_waiter_add(&sb->pause_waiters, done, data);
        return 0;
}

bool sandbox_resume(struct sandbox *sb)
{
        if (!sb->paused && sb->pause_timer == NULL)
                return false;
        cgroup_sandbox_thaw(sb->cgroup);
        if (sb->paused) {
                log_limited(log_key_uid(sb->owner).text, LOG_LEVEL_INFO, "sandbox %s: resumed after %lld ms",
                            sb->id, now_monotonic_ms() - sb->paused_mono);
                events_emit(
                    sb, "sandbox.resumed", NULL,
                    json_pack("{s:I}", "paused_ms", (json_int_t)(now_monotonic_ms() - sb->paused_mono)));
        }
        bool was_paused = sb->paused;
        sb->paused = false;
        sandbox_touch(sb);
        if (was_paused)
                pause_save(sb);
        sandbox_pause_end(sb, "the sandbox was resumed before it was frozen", "busy");
        return true;
}

bool sandbox_resume_for(struct rpc_request *req, struct sandbox *sb)
{
        if (sb == NULL || (!sb->paused && sb->pause_timer == NULL))
                return true;
        if (!nsboxd.config.auto_resume) {
                rpc_reply_fail(req, "unavailable", "sandbox %s is paused; resume it first (sandbox.resume)",
                               sb->id);
                return false;
        }
        sandbox_resume(sb);
        log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO, "sandbox %s: resumed for %s by uid %u",
                    sb->id, req->msg.method, req->uid);
        return true;
}
