/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON-RPC methods of nsboxd: parameter checks, ownership, and the
 * calls into the sandbox and exec modules. */
#include "methods.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "browser.h"
#include "cgroup.h"
#include "cleanup.h"
#include "daemon.h"
#include "desktop.h"
#include "egress.h"
#include "events.h"
#include "exec.h"
#include "fs_api.h"
#include "fs_watch.h"
#include "images.h"
#include "json_cleanup.h"
#include "log.h"
#include "observe.h"
#include "python.h"
#include "removals.h"
#include "idle.h"
#include "sandbox_life.h"
#include "sandbox_limits.h"
#include "sandbox_pause.h"
#include "shell.h"
#include "secrets.h"
#include "snapshot.h"
#include "state.h"
#include "uidmode.h"
#include "userns.h"
#include "version.h"
#include "volumes.h"

/* `ref` names a sandbox of the caller's that was removed: the reply says
 * when and why (kind "gone"), and true. Another user's removed sandbox is
 * not found, as a missing one. */
static bool reply_gone(struct rpc_request *req, const char *ref)
{
        const struct sandbox_removal *r = sandbox_removal_find(ref, req->uid);
        if (r == NULL)
                return false;
        sandbox_removal_reply_gone(req, r, NULL);
        return true;
}

/* The sandbox named by params.sandbox_id that the caller may use, or NULL
 * after replying not_found / gone / invalid_params. */
static struct sandbox *require_sandbox(struct rpc_request *req)
{
        json_t *id = json_object_get(req->msg.params, "sandbox_id");
        if (!json_is_string(id)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "sandbox_id must be a string");
                return NULL;
        }
        /* Only ids in the registry match: the text is never used otherwise. */
        const char *text = json_string_value(id);
        size_t matched;
        struct sandbox *sb = sandbox_resolve(text, req->uid, &matched);
        if (sb == NULL && matched > 1) {
                /* invalid_params: SPEC's kinds are a closed list. */
                rpc_reply_fail(req, "invalid_params",
                               "ambiguous sandbox id prefix %.64s: it matches %zu of your sandboxes; give "
                               "more of the id",
                               text, matched);
                return NULL;
        }
        if (sb == NULL && !reply_gone(req, text))
                rpc_reply_fail(req, "not_found", "no sandbox %.64s", text);
        return sb;
}

/* The load and the capacity, for a front that places work (nsbox-http's
 * /health): all at hand in memory, nothing read from disk. */
static void add_load(json_t *obj)
{
        double avg[3] = { 0, 0, 0 };
        if (getloadavg(avg, 3) < 0)
                avg[0] = avg[1] = avg[2] = 0;
        json_object_set_new(obj, "sandboxes", json_integer((json_int_t)nsboxd.n_sandboxes));
        json_object_set_new(obj, "max_sandboxes", json_integer((json_int_t)nsboxd.config.max_sandboxes));
        json_object_set_new(obj, "memory_committed_bytes",
                            json_integer((json_int_t)sandbox_memory_committed()));
        json_object_set_new(obj, "memory_commit_limit_bytes",
                            json_integer((json_int_t)nsboxd.config.memory_commit_bytes));
        json_object_set_new(obj, "running_execs", json_integer(sandbox_running_execs()));
        json_object_set_new(obj, "sandboxes_ending", json_integer(sandbox_ending()));
        json_object_set_new(obj, "loadavg", json_pack("[f, f, f]", avg[0], avg[1], avg[2]));
        json_object_set_new(obj, "cpus", json_integer(nsboxd.config.host_cpus));
}

/* server.info without what costs more than a look at memory (the images
 * list reads a directory): for health checks and probes. */
static void server_method_load(struct rpc_request *req, struct sandbox *sb)
{
        json_t *load = json_pack("{s:s, s:s}", "version", NSBOX_VERSION, "cgroup", cgroup_mode_name());
        if (load != NULL)
                add_load(load);
        rpc_reply_result(req, load);
}

static void server_method_info(struct rpc_request *req, struct sandbox *sb)
{
        struct utsname u;
        uname(&u);
        json_t *features = json_pack("[s, s, s]", "seccomp", "session_id", "stream");
        if (!userns_active())
                json_array_append_new(features, json_string("idmapped-image"));
        if (cgroup_degraded())
                json_array_append_new(features, json_string("limits-not-enforced"));
        if (cgroup_freezer_available())
                json_array_append_new(features, json_string("pause"));
        json_array_append_new(features, json_string("snapshot"));
        if (!userns_active()) {
                json_array_append_new(features, json_string("image-commit"));
                json_array_append_new(features, json_string("image-import"));
        }
        json_t *policies = json_array();
        const char *name;
        json_t *ignored;
        json_object_foreach(nsboxd.config.network_policies, name, ignored)
        {
                json_array_append_new(policies, json_string(name));
        }
        if ((json_array_size(policies) > 0 || nsboxd.config.allow_client_network_policies) &&
            !userns_active())
                json_array_append_new(features, json_string("network"));
        /* Sandboxes outlive a restart of nsboxd (docs/design/live-restore.md),
         * and so do a client's foreground execs, which it takes back by id
         * (sandbox.exec's notify_started, exec.output). */
        if (nsboxd.config.live_restore) {
                json_array_append_new(features, json_string("live-restore"));
                json_array_append_new(features, json_string("exec-kept"));
        }
        json_t *info =
            json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:b}", "version", NSBOX_VERSION, "kernel",
                      u.release, "cgroup", cgroup_mode_name(), "uid_isolation", uidmode_name(), "images",
                      images_list(req->uid), "features", features, "network_policies", policies,
                      "client_network_policies", (bool)nsboxd.config.allow_client_network_policies);
        if (info == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        /* Where nsboxd stands: what isolates sandboxes from each other and
         * what is enforced (README "Without host root"). */
        json_object_set_new(info, "per_sandbox_host_ranges", json_boolean(!uidmode_shared()));
        json_object_set_new(info, "limits",
                            json_string(cgroup_degraded() ? "limits-not-enforced" : "enforced"));
        if (cgroup_degraded())
                json_object_set_new(info, "limits_reason", json_string(cgroup_degraded_reason()));
        json_object_set_new(info, "userns", userns_active() ? userns_json() : json_null());
        add_load(info);
        rpc_reply_result(req, info);
}

/* A sandbox's JSON with when the idle reaper will pause or remove it. */
static json_t *sandbox_json(struct sandbox *sb, bool existing)
{
        json_t *j = sandbox_to_json(sb, existing);
        sandbox_expiry_to_json(sb, j);
        return j;
}

static void reply_created(struct sandbox *sb, const char *error, void *data, bool existing)
{
        struct rpc_request *req = data;
        if (error != NULL) {
                rpc_reply_fail(req, "internal", "sandbox create failed: %s", error);
                return;
        }
        json_t *result = sandbox_json(sb, existing);
        /* A session's new sandbox says whether (and why) its last one went. */
        if (!existing && sb->policy.session_id[0] != '\0')
                sandbox_removal_note_recreated(result,
                                               sandbox_removal_of_session(sb->policy.session_id, sb->owner));
        rpc_reply_result(req, result);
}

/* A new sandbox whose client left before its reply: nobody has its id (a
 * session's sandbox is found again by its session), so it goes now rather
 * than live on unseen until the idle reaper. */
static bool created_for_nobody(struct sandbox *sb, const char *error, struct rpc_request *req)
{
        if (error != NULL || rpc_request_connected(req) || sb->policy.session_id[0] != '\0')
                return false;
        sandbox_remove(sb, "its client left before learning its id", NULL, NULL);
        /* The request is answered all the same: nothing goes out on the
         * closed connection, and answering is what releases the request
         * and the connection's reference (without it both leaked, once per
         * such create). */
        rpc_reply_fail(req, "unavailable", "the client left before the sandbox was made");
        return true;
}

static void create_done(struct sandbox *sb, const char *error, void *data)
{
        if (!created_for_nobody(sb, error, data))
                reply_created(sb, error, data, false);
}

static void create_done_existing(struct sandbox *sb, const char *error, void *data)
{
        reply_created(sb, error, data, true);
}

static void sandbox_method_create(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct sandbox_policy policy;

        /* from_snapshot: the snapshot's image, and its files over it. */
        _cleanup_json_ json_t *params = json_incref(req->msg.params);
        _cleanup_json_ json_t *snapshot = NULL;
        if (json_object_get(req->msg.params, "from_snapshot") != NULL) {
                if ((snapshot = snapshot_require(req, "from_snapshot")) == NULL)
                        return;
                json_t *image = json_object_get(snapshot, "image");
                json_t *asked = json_object_get(req->msg.params, "image");
                if (asked != NULL && !json_equal(asked, image)) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                        "snapshot %s is of image \"%s\": leave image out",
                                        json_string_value(json_object_get(snapshot, "snapshot_id")),
                                        json_string_value(image));
                        return;
                }
                json_decref(params);
                params = json_copy(req->msg.params);
                json_object_del(params, "from_snapshot");
                json_object_set(params, "image", image);
        }
        if (policy_from_json(&nsboxd.config.defaults, &nsboxd.config.ceilings, params, &policy, &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        int egress_r = egress_check(&policy, &err);
        if (egress_r == -ENOTSUP) {
                rpc_reply_fail(req, "unavailable", "%s", err->message);
                policy_clear(&policy);
                return;
        }
        if (egress_r < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                policy_clear(&policy);
                return;
        }
        if (policy.mounts != NULL && userns_active()) {
                rpc_reply_fail(req, "unavailable", "%s", VOLUMES_USERNS_REFUSAL);
                policy_clear(&policy);
                return;
        }
        if (!image_usable(policy.image, req->uid)) {
                rpc_reply_fail(req, "invalid_params",
                               "no image \"%s\" in %s (nsbox images lists those you may use)", policy.image,
                               nsboxd.config.image_dir);
                policy_clear(&policy);
                return;
        }
        if (policy.session_id[0] != '\0') {
                struct sandbox *existing = sandbox_find_session(policy.session_id, req->uid);
                if (existing != NULL) {
                        policy_clear(&policy);
                        sandbox_touch(existing);
                        if (existing->state == SANDBOX_CREATING)
                                sandbox_when_ready(existing, create_done_existing, req);
                        else
                                create_done_existing(existing, NULL, req);
                        return;
                }
        }
        struct sandbox *made;
        const char *snapshot_id =
            snapshot ? json_string_value(json_object_get(snapshot, "snapshot_id")) : NULL;
        int r = sandbox_create_from(req->uid, &policy, snapshot_id, create_done, req, &made, &err);
        if (r == -EUSERS) {
                rpc_reply_fail(req, "limit_reached", "%s", err->message);
                return;
        }
        /* Its mounts: a volume the caller lacks, a host directory it may not have. */
        if (r == -ENOENT || r == -EPERM) {
                rpc_reply_fail(req, r == -ENOENT ? "not_found" : "permission_denied", "%s", err->message);
                return;
        }
        if (r < 0) {
                rpc_reply_fail(req, "internal", "%s", err->message);
                return;
        }
}

static void sandbox_method_list(struct rpc_request *req, struct sandbox *sb)
{
        bool all;
        if (!rpc_get_bool(req, "include_inactive", &all))
                return;
        json_t *list = json_array();
        for (sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if ((req->uid != 0 && sb->owner != req->uid) || sb->pooled || sb->released)
                        continue;
                if (!all && sb->state != SANDBOX_RUNNING)
                        continue;
                json_array_append_new(list, sandbox_json(sb, false));
        }
        json_t *result = json_pack("{s:o, s:i}", "sandboxes", list, "count", (int)json_array_size(list));
        /* include_inactive: the ones removed lately too, and why. */
        if (all && result != NULL)
                json_object_set_new(result, "removed", sandbox_removals_json(req->uid));
        rpc_reply_result(req, result);
}

/* A sandbox's memory and disk as its user reasons about them: memory for
 * its processes, a disk for its files (a tmpfs: in RAM), /dev/shm, and
 * what its memory cgroup holds of all three (cgroup_memory_max). */
static json_t *sandbox_budgets(const struct sandbox *sb)
{
        const struct sandbox_limits *limits = &sb->policy.limits;
        json_t *budgets =
            json_pack("{s:I, s:I, s:s, s:I, s:I}", "memory_bytes", (json_int_t)limits->memory_bytes,
                      "disk_bytes", (json_int_t)limits->disk_bytes, "disk_backing", "tmpfs", "shm_bytes",
                      (json_int_t)sandbox_shm_bytes(limits->disk_bytes), "cgroup_memory_bytes",
                      (json_int_t)cgroup_memory_max(limits));
        struct statfs disk;
        if (budgets != NULL && sb->disk_fd >= 0 && fstatfs(sb->disk_fd, &disk) == 0) {
                json_object_set_new(
                    budgets, "disk_used_bytes",
                    json_integer((json_int_t)((disk.f_blocks - disk.f_bfree) * disk.f_bsize)));
                json_object_set_new(budgets, "disk_used_inodes",
                                    json_integer((json_int_t)(disk.f_files - disk.f_ffree)));
        }
        return budgets;
}

static void sandbox_method_info(struct rpc_request *req, struct sandbox *sb)
{
        json_t *info = sandbox_json(sb, false);
        json_object_set_new(info, "stats", sandbox_stats(sb));
        json_object_set_new(info, "budgets", sandbox_budgets(sb));
        json_t *network = egress_info(sb);
        if (network != NULL)
                json_object_set_new(info, "egress", network);
        json_t *browser = browser_info(sb);
        if (browser != NULL)
                json_object_set_new(info, "browser", browser);
        rpc_reply_result(req, info);
}

/* An egress call's failure: a request the operator's settings refuse, a
 * pool exhausted, or nsboxd's own trouble. */
static void reply_egress_error(struct rpc_request *req, int r, const nsbox_error_t *err)
{
        if (r == -EINVAL)
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
        else
                rpc_reply_fail(req,
                               r == -EUSERS    ? "limit_reached"
                               : r == -ENOTSUP ? "unavailable"
                                               : "internal",
                               "%s", err->message);
}

/* sandbox.update's secrets: they replace the sandbox's (null or {}: none
 * left); false after replying. */
static bool update_secrets(struct rpc_request *req, struct sandbox *sb, json_t *secrets)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        _cleanup_json_ json_t *fresh = NULL;
        if (!json_is_null(secrets) && policy_secrets_from_json(secrets, &fresh, &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return false;
        }
        if (fresh != NULL && json_object_size(fresh) == 0) {
                json_decref(fresh);
                fresh = NULL;
        }
        if (policy_secrets_replace(fresh, sb->policy.secrets, &sb->policy.env, &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return false;
        }
        if (egress_update_secrets(sb, fresh, &err) < 0) {
                rpc_reply_fail(req, "internal", "%s", err->message);
                return false;
        }
        json_decref(sb->policy.secrets);
        sb->policy.secrets = json_incref(fresh);
        /* For the next nsboxd: the values where its init keeps them, the
         * names' placeholders (in its env) in its record. */
        egress_keep_secrets(sb);
        if (nsboxd.config.live_restore && state_save(sb, &err) < 0)
                log_warn("sandbox %s: %s", sb->id, err->message);
        log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO, "sandbox %s: %zu secrets set by uid %u",
                    sb->id, fresh ? json_object_size(fresh) : 0, req->uid);
        return true;
}

/* What may change in a live sandbox: its network policy, its idle timeout and its secrets. */
static void sandbox_method_update(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        /* Checked before anything changes. */
        json_t *idle = json_object_get(req->msg.params, "idle_timeout_seconds");
        if (idle != NULL && (!json_is_integer(idle) || json_integer_value(idle) < 1 ||
                             json_integer_value(idle) > POLICY_MAX_IDLE_SECONDS)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "idle_timeout_seconds must be an integer from 1 to %u",
                                POLICY_MAX_IDLE_SECONDS);
                return;
        }
        json_t *secrets = json_object_get(req->msg.params, "secrets");
        if (secrets != NULL && sb->state != SANDBOX_RUNNING) {
                rpc_reply_fail(req, "unavailable", "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
                return;
        }
        if (secrets != NULL && !update_secrets(req, sb, secrets))
                return;
        json_t *network = json_object_get(req->msg.params, "network");
        if (network != NULL) {
                char name[sizeof(sb->policy.network)];
                _cleanup_json_ json_t *custom = NULL;
                if (policy_network_from_json(network, name, sizeof(name), &custom, &err) < 0) {
                        rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                        return;
                }
                if (sb->state != SANDBOX_RUNNING) {
                        rpc_reply_fail(req, "unavailable", "sandbox %s is %s", sb->id,
                                       sandbox_state_name(sb->state));
                        return;
                }
                int r = egress_update(sb, name, custom, &err);
                if (r < 0) {
                        reply_egress_error(req, r, err);
                        return;
                }
                log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO,
                            "sandbox %s: network set to %s by uid %u", sb->id, name, req->uid);
        }
        if (idle != NULL) {
                sb->policy.idle_timeout_seconds = (uint32_t)json_integer_value(idle);
                if (state_save(sb, &err) < 0)
                        log_warn("sandbox %s: %s", sb->id, err->message);
        }
        sandbox_touch(sb);
        json_t *info = sandbox_json(sb, false);
        json_t *egress_object = egress_info(sb);
        if (egress_object != NULL)
                json_object_set_new(info, "egress", egress_object);
        rpc_reply_result(req, info);
}

/* sandbox.expose and sandbox.unexpose's port; false after replying to a bad one. */
static bool request_port(struct rpc_request *req, unsigned *port)
{
        json_t *p = json_object_get(req->msg.params, "port");
        if (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "port must be an integer from 1 to 65535");
                return false;
        }
        *port = (unsigned)json_integer_value(p);
        return true;
}

static void sandbox_method_expose(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        unsigned port;
        if (!request_port(req, &port))
                return;
        json_t *result = NULL;
        int r = egress_expose(sb, port, &result, &err);
        if (r < 0)
                reply_egress_error(req, r, err);
        else
                rpc_reply_result(req, result);
}

static void sandbox_method_unexpose(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        unsigned port;
        if (!request_port(req, &port))
                return;
        int r = egress_unexpose(sb, port, &err);
        if (r < 0)
                reply_egress_error(req, r, err);
        else
                rpc_reply_result(
                    req, json_pack("{s:s, s:i, s:b}", "sandbox_id", sb->id, "port", (int)port, "exposed", 0));
}

static void remove_done(struct sandbox *sb, const char *error, void *data)
{
        struct rpc_request *req = data;
        json_t *id = json_object_get(req->msg.params, "sandbox_id");
        rpc_reply_result(req, json_pack("{s:O, s:b}", "sandbox_id", id, "removed", 1));
}

static void sandbox_method_remove(struct rpc_request *req, struct sandbox *sb)
{
        bool force;
        if (!rpc_get_bool(req, "force", &force))
                return;
        unsigned running = exec_running_unkilled(sb);
        if (running > 0 && !force) {
                rpc_reply_fail(
                    req, "busy",
                    "sandbox %s has %u running command(s): nsbox rm --force %s kills them and removes "
                    "it (force: true in sandbox.remove)",
                    sb->id, running, sb->id);
                return;
        }
        char why[64];
        snprintf(why, sizeof(why), "asked by uid %u%s", req->uid, force ? " (force)" : "");
        sandbox_remove(sb, why, remove_done, req);
}

/* --- pause and resume ------------------------------------------------------ */

static void pause_done(struct sandbox *sb, const char *error, void *data)
{
        struct rpc_request *req = data;
        if (error != NULL) {
                rpc_reply_fail(req, sb->pause_error_kind ? sb->pause_error_kind : "internal", "%s", error);
                return;
        }
        rpc_reply_result(req, sandbox_json(sb, false));
}

/* Pausing an already paused sandbox is no error: the answer is the same. */
static void sandbox_method_pause(struct rpc_request *req, struct sandbox *sb)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool force;
        if (!rpc_get_bool(req, "force", &force))
                return;
        if (sb->state != SANDBOX_RUNNING) {
                rpc_reply_fail(req, "unavailable", "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
                return;
        }
        /* Frozen work keeps its timeout running (a deadline passed while
         * paused kills it as soon as it is resumed): only on purpose. */
        bool working = sandbox_working(sb);
        if (!sb->paused && working && !force) {
                rpc_reply_fail(req, "busy",
                               "sandbox %s has work running (%u command(s), or python or a shell command): "
                               "nsbox pause --force %s freezes it too, its timeouts counting on while paused "
                               "(force: true in sandbox.pause)",
                               sb->id, sb->running_execs, sb->id);
                return;
        }
        if (!sb->paused)
                log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO,
                            "sandbox %s: pause requested by uid %u%s", sb->id, req->uid,
                            force && working ? " (force, with work running)" : "");
        int r = sandbox_pause(sb, pause_done, req, &err);
        if (r < 0)
                rpc_reply_fail(req, r == -ENOTSUP || r == -ESRCH ? "unavailable" : "internal", "%s",
                               err->message);
}

/* Resuming a sandbox that runs is no error either. */
static void sandbox_method_resume(struct rpc_request *req, struct sandbox *sb)
{
        if (sandbox_resume(sb))
                log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO, "sandbox %s: resumed by uid %u",
                            sb->id, req->uid);
        rpc_reply_result(req, sandbox_json(sb, false));
}

/* The sandbox a request acts on, by sandbox_id or session_id (python.run's
 * get-or-create); NULL when it names none the caller may use (the method
 * then says so itself). */
static struct sandbox *request_sandbox(struct rpc_request *req)
{
        json_t *params = req->msg.params;
        const char *id = json_string_value(json_object_get(params, "sandbox_id"));
        if (id != NULL)
                return sandbox_lookup(id, req->uid);
        const char *session = json_string_value(json_object_get(params, "session_id"));
        if (session != NULL)
                return sandbox_find_session(session, req->uid);
        return NULL;
}

/* --- the method table ------------------------------------------------------ */

/* What the dispatcher does for a method before its handler runs (redis's
 * command flags): the handler gets the sandbox resolved once, or NULL. */
enum method_flags {
        /* params.sandbox_id names a sandbox of the caller (full id or unique
         * prefix): resolved, or the request is answered invalid_params or
         * not_found and the handler never runs. */
        M_SANDBOX = 1 << 0,
        /* The sandbox params name by sandbox_id or session_id, if any: found
         * for M_RESUME and handed over; a handler that needs one says so
         * itself when it is NULL (python.run makes a session's). Methods on
         * an exec find it, and resume its sandbox, themselves
         * (exec_api.c): an exec id may be a prefix. */
        M_FIND = 1 << 1,
        /* Needs the sandbox's processes to run: a paused one is resumed
         * first (auto_resume), or the request fails unavailable. */
        M_RESUME = 1 << 2,
        /* Counts as activity for the idle reaper. */
        M_TOUCH = 1 << 3,
};

typedef void (*method_handler)(struct rpc_request *req, struct sandbox *sb);

struct method {
        const char *name;
        method_handler handler;
        unsigned flags;
        /* Its params, checked before anything else when given (NULL: the
         * handler checks them). */
        const char *const *params;
};

#define PARAMS(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void auth_method_act_as(struct rpc_request *req, struct sandbox *sb)
{
        rpc_act_as(req);
}

static const struct method methods[] = {
        { "auth.act_as", auth_method_act_as, 0, NULL },
        { "server.info", server_method_info, 0, PARAMS(NULL) },
        { "server.load", server_method_load, 0, PARAMS(NULL) },
        { "sandbox.create", sandbox_method_create, 0, NULL },
        { "sandbox.list", sandbox_method_list, 0, PARAMS("include_inactive") },
        { "server.metrics", server_method_metrics, 0, PARAMS(NULL) },
        { "sandbox.info", sandbox_method_info, M_SANDBOX, PARAMS("sandbox_id") },
        { "sandbox.stats", sandbox_method_stats, M_FIND, PARAMS("sandbox_id") },
        { "events.subscribe", events_method_subscribe, M_FIND, PARAMS("sandbox_id") },
        { "sandbox.remove", sandbox_method_remove, M_SANDBOX, PARAMS("sandbox_id", "force") },
        { "sandbox.update", sandbox_method_update, M_SANDBOX,
          PARAMS("sandbox_id", "network", "idle_timeout_seconds", "secrets") },
        { "sandbox.expose", sandbox_method_expose, M_SANDBOX, PARAMS("sandbox_id", "port") },
        { "sandbox.unexpose", sandbox_method_unexpose, M_SANDBOX, PARAMS("sandbox_id", "port") },
        { "sandbox.pause", sandbox_method_pause, M_SANDBOX, PARAMS("sandbox_id", "force") },
        { "sandbox.resume", sandbox_method_resume, M_SANDBOX, PARAMS("sandbox_id") },
        { "sandbox.exec", exec_method_run, M_SANDBOX | M_RESUME, NULL },
        { "sandbox.snapshot", snapshot_method_create, M_SANDBOX, NULL },
        { "snapshot.list", snapshot_method_list, 0, NULL },
        { "snapshot.remove", snapshot_method_remove, 0, NULL },
        { "volume.create", volume_method_create, 0, NULL },
        { "volume.list", volume_method_list, 0, NULL },
        { "volume.remove", volume_method_remove, 0, NULL },
        /* A volume's files without a sandbox: fs.*'s handlers, named by volume. */
        { "volume.fs.list", fs_method_list, 0, NULL },
        { "volume.fs.read", fs_method_read, 0, NULL },
        { "volume.fs.write", fs_method_write, 0, NULL },
        { "volume.fs.remove", fs_method_remove, 0, NULL },
        { "volume.fs.mkdir", fs_method_mkdir, 0, NULL },
        { "volume.fs.stat", fs_method_stat, 0, NULL },
        { "volume.fs.rename", fs_method_rename, 0, NULL },
        { "volume.fs.symlink", fs_method_symlink, 0, NULL },
        { "volume.fs.chmod", fs_method_chmod, 0, NULL },
        { "image.commit", image_method_commit, M_SANDBOX, NULL },
        { "image.list", image_method_list, 0, NULL },
        { "image.remove", image_method_remove, 0, NULL },
        { "image.import", image_method_import, 0, NULL },
        { "python.run", python_method_run, M_FIND | M_RESUME, NULL },
        { "python.reset", python_method_reset, M_SANDBOX | M_RESUME,
          PARAMS("sandbox_id", "context", "remove") },
        { "desktop.start", desktop_method_start, M_SANDBOX | M_RESUME | M_TOUCH,
          PARAMS("sandbox_id", "width", "height") },
        { "desktop.screenshot", desktop_method_screenshot, M_SANDBOX | M_RESUME | M_TOUCH,
          PARAMS("sandbox_id") },
        { "desktop.click", desktop_method_click, M_SANDBOX | M_RESUME | M_TOUCH,
          PARAMS("sandbox_id", "x", "y", "button", "double") },
        { "desktop.move", desktop_method_move, M_SANDBOX | M_RESUME | M_TOUCH,
          PARAMS("sandbox_id", "x", "y") },
        { "desktop.scroll", desktop_method_scroll, M_SANDBOX | M_RESUME | M_TOUCH,
          PARAMS("sandbox_id", "x", "y", "direction", "amount") },
        { "desktop.type", desktop_method_type, M_SANDBOX | M_RESUME | M_TOUCH, PARAMS("sandbox_id", "text") },
        { "desktop.key", desktop_method_key, M_SANDBOX | M_RESUME | M_TOUCH, PARAMS("sandbox_id", "keys") },
        { "package.install", package_method_install, M_SANDBOX | M_RESUME | M_TOUCH, NULL },
        { "exec.status", exec_method_status, 0, NULL },
        { "exec.output", exec_method_output, 0, NULL },
        { "exec.kill", exec_method_kill, 0, NULL },
        { "exec.stdin", exec_method_stdin, 0, NULL },
        { "exec.resize", exec_method_resize, 0, NULL },
        { "exec.list", exec_method_list, M_SANDBOX, NULL },
        { "fs.list", fs_method_list, M_SANDBOX | M_TOUCH, NULL },
        { "fs.read", fs_method_read, M_SANDBOX | M_TOUCH, NULL },
        { "fs.write", fs_method_write, M_SANDBOX | M_TOUCH, NULL },
        { "fs.remove", fs_method_remove, M_SANDBOX | M_TOUCH, NULL },
        { "fs.mkdir", fs_method_mkdir, M_SANDBOX | M_TOUCH, NULL },
        { "fs.stat", fs_method_stat, M_SANDBOX | M_TOUCH, NULL },
        { "fs.rename", fs_method_rename, M_SANDBOX | M_TOUCH, NULL },
        { "fs.symlink", fs_method_symlink, M_SANDBOX | M_TOUCH, NULL },
        { "fs.chmod", fs_method_chmod, M_SANDBOX | M_TOUCH, NULL },
        { "fs.watch", fs_method_watch, M_SANDBOX | M_TOUCH, NULL },
        { "shell.create", shell_method_create, M_FIND | M_RESUME, NULL },
        { "shell.run", shell_method_run, M_FIND | M_RESUME, NULL },
        { "shell.check", shell_method_check, M_FIND, NULL },
        { "shell.terminate", shell_method_terminate, M_FIND | M_RESUME, NULL },
        { "shell.list", shell_method_list, M_FIND, NULL },
        { "browser.start", browser_method_start, M_SANDBOX | M_RESUME | M_TOUCH,
          PARAMS("sandbox_id", "timeout_seconds") },
        { "browser.navigate", browser_method_navigate, M_SANDBOX | M_RESUME | M_TOUCH,
          PARAMS("sandbox_id", "url", "timeout_seconds") },
        { "browser.screenshot", browser_method_screenshot, M_SANDBOX | M_RESUME | M_TOUCH,
          PARAMS("sandbox_id", "url", "full_page", "width", "height", "timeout_seconds") },
};

const void *methods_find(const char *name)
{
        for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
                if (strcmp(methods[i].name, name) == 0)
                        return &methods[i];
        }
        return NULL;
}

void methods_run(const void *found, struct rpc_request *req)
{
        const struct method *m = found;
        if (m->params != NULL && !rpc_check_fields(req, m->params))
                return;
        struct sandbox *sb = NULL;
        if (m->flags & M_SANDBOX) {
                if ((sb = require_sandbox(req)) == NULL)
                        return;
        } else if (m->flags & M_FIND) {
                sb = request_sandbox(req);
                const char *id = json_string_value(json_object_get(req->msg.params, "sandbox_id"));
                if (sb == NULL && id != NULL && reply_gone(req, id))
                        return;
        }
        if ((m->flags & M_RESUME) && !sandbox_resume_for(req, sb))
                return;
        if ((m->flags & M_TOUCH) && sb != NULL)
                sandbox_touch(sb);
        m->handler(req, sb);
}
