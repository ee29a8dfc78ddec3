/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON-RPC methods of nsboxd: parameter checks, ownership, and the
 * calls into the sandbox and exec modules. */
#include "methods.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cgroup.h"
#include "cleanup.h"
#include "daemon.h"
#include "egress.h"
#include "exec.h"
#include "fs_api.h"
#include "images.h"
#include "json_cleanup.h"
#include "log.h"
#include "python.h"
#include "idle.h"
#include "sandbox_life.h"
#include "sandbox_pause.h"
#include "shell.h"
#include "snapshot.h"
#include "uidmode.h"
#include "userns.h"
#include "version.h"

/* The sandbox named by params.sandbox_id that the caller may use, or NULL
 * after replying not_found / invalid_params. */
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
        if (sb == NULL) {
                rpc_reply_fail(req, "not_found", "no sandbox %.64s", text);
                return NULL;
        }
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
        json_object_set_new(obj, "loadavg", json_pack("[f, f, f]", avg[0], avg[1], avg[2]));
        json_object_set_new(obj, "cpus", json_integer(nsboxd.config.host_cpus));
}

/* server.info without what costs more than a look at memory (the images
 * list reads a directory): for health checks and probes. */
static void method_server_load(struct rpc_request *req)
{
        static const char *const known[] = { NULL };
        if (!rpc_check_fields(req, known))
                return;
        json_t *load = json_pack("{s:s, s:s}", "version", NSBOX_VERSION, "cgroup", cgroup_mode_name());
        if (load != NULL)
                add_load(load);
        rpc_reply_result(req, load);
}

static void method_server_info(struct rpc_request *req)
{
        static const char *const known[] = { NULL };
        if (!rpc_check_fields(req, known))
                return;
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

static void reply_created(struct sandbox *sb, const char *error, void *data, bool existing)
{
        struct rpc_request *req = data;
        if (error != NULL) {
                rpc_reply_fail(req, "internal", "sandbox create failed: %s", error);
                return;
        }
        rpc_reply_result(req, sandbox_to_json(sb, existing));
}

/* A new sandbox whose client left before its reply: nobody has its id (a
 * session's sandbox is found again by its session), so it goes now rather
 * than live on unseen until the idle reaper. */
static bool created_for_nobody(struct sandbox *sb, const char *error, struct rpc_request *req)
{
        if (error != NULL || rpc_request_connected(req) || sb->policy.session_id[0] != '\0')
                return false;
        log_limited(log_key_uid(sb->owner).text, LOG_LEVEL_INFO,
                    "sandbox %s: its client left before learning its id; removing it", sb->id);
        sandbox_remove(sb, NULL, NULL);
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

/* A session's sandbox made again after the idle reaper removed its last one. */
static void create_done_recreated(struct sandbox *sb, const char *error, void *data)
{
        struct rpc_request *req = data;
        if (error != NULL) {
                rpc_reply_fail(req, "internal", "sandbox create failed: %s", error);
                return;
        }
        if (created_for_nobody(sb, error, req))
                return;
        json_t *result = sandbox_to_json(sb, false);
        json_object_set_new(result, "recreated", json_true());
        json_object_set_new(result, "reason", json_string("idle timeout"));
        rpc_reply_result(req, result);
}

static void method_sandbox_create(struct rpc_request *req)
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
        if (!image_usable(policy.image, req->uid)) {
                rpc_reply_fail(req, "invalid_params", "no image \"%s\" in %s", policy.image,
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
        struct sandbox *sb;
        bool recreated = policy.session_id[0] != '\0' && sandbox_session_reaped(policy.session_id, req->uid);
        const char *snapshot_id =
            snapshot ? json_string_value(json_object_get(snapshot, "snapshot_id")) : NULL;
        int r = sandbox_create_from(req->uid, &policy, snapshot_id,
                                    recreated ? create_done_recreated : create_done, req, &sb, &err);
        if (r == -EUSERS) {
                rpc_reply_fail(req, "limit_reached", "%s", err->message);
                return;
        }
        if (r < 0) {
                rpc_reply_fail(req, "internal", "%s", err->message);
                return;
        }
}

static void method_sandbox_list(struct rpc_request *req)
{
        static const char *const known[] = { "include_inactive", NULL };
        bool all;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "include_inactive", &all))
                return;
        json_t *list = json_array();
        for (struct sandbox *sb = nsboxd.sandboxes; sb != NULL; sb = sb->next) {
                if ((req->uid != 0 && sb->owner != req->uid) || sb->pooled)
                        continue;
                if (!all && sb->state != SANDBOX_RUNNING)
                        continue;
                json_array_append_new(list, sandbox_to_json(sb, false));
        }
        rpc_reply_result(req,
                         json_pack("{s:o, s:i}", "sandboxes", list, "count", (int)json_array_size(list)));
}

static void method_sandbox_info(struct rpc_request *req)
{
        static const char *const known[] = { "sandbox_id", NULL };
        if (!rpc_check_fields(req, known))
                return;
        struct sandbox *sb = require_sandbox(req);
        if (sb == NULL)
                return;
        json_t *info = sandbox_to_json(sb, false);
        json_object_set_new(info, "stats", cgroup_sandbox_stats(sb->cgroup));
        json_t *network = egress_info(sb);
        if (network != NULL)
                json_object_set_new(info, "egress", network);
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

/* What may change in a live sandbox: its network policy. */
static void method_sandbox_update(struct rpc_request *req)
{
        static const char *const known[] = { "sandbox_id", "network", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        struct sandbox *sb = require_sandbox(req);
        if (sb == NULL)
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
        sandbox_touch(sb);
        json_t *info = sandbox_to_json(sb, false);
        json_t *egress_object = egress_info(sb);
        if (egress_object != NULL)
                json_object_set_new(info, "egress", egress_object);
        rpc_reply_result(req, info);
}

/* sandbox.expose and sandbox.unexpose: {sandbox_id, port}; NULL after
 * replying to a bad one. */
static struct sandbox *require_sandbox_port(struct rpc_request *req, unsigned *port)
{
        static const char *const known[] = { "sandbox_id", "port", NULL };
        if (!rpc_check_fields(req, known))
                return NULL;
        struct sandbox *sb = require_sandbox(req);
        if (sb == NULL)
                return NULL;
        json_t *p = json_object_get(req->msg.params, "port");
        if (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "port must be an integer from 1 to 65535");
                return NULL;
        }
        *port = (unsigned)json_integer_value(p);
        return sb;
}

static void method_sandbox_expose(struct rpc_request *req)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        unsigned port;
        struct sandbox *sb = require_sandbox_port(req, &port);
        if (sb == NULL)
                return;
        json_t *result = NULL;
        int r = egress_expose(sb, port, &result, &err);
        if (r < 0)
                reply_egress_error(req, r, err);
        else
                rpc_reply_result(req, result);
}

static void method_sandbox_unexpose(struct rpc_request *req)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        unsigned port;
        struct sandbox *sb = require_sandbox_port(req, &port);
        if (sb == NULL)
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

static void method_sandbox_remove(struct rpc_request *req)
{
        static const char *const known[] = { "sandbox_id", "force", NULL };
        bool force;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "force", &force))
                return;
        struct sandbox *sb = require_sandbox(req);
        if (sb == NULL)
                return;
        if (sb->running_execs > 0 && !force) {
                rpc_reply_fail(req, "busy", "sandbox %s has %u running exec(s); use force to kill them",
                               sb->id, sb->running_execs);
                return;
        }
        log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO, "sandbox %s: remove requested by uid %u%s",
                    sb->id, req->uid, force ? " (force)" : "");
        sandbox_remove(sb, remove_done, req);
}

/* --- pause and resume ------------------------------------------------------ */

static void pause_done(struct sandbox *sb, const char *error, void *data)
{
        struct rpc_request *req = data;
        if (error != NULL) {
                rpc_reply_fail(req, sb->pause_error_kind ? sb->pause_error_kind : "internal", "%s", error);
                return;
        }
        rpc_reply_result(req, sandbox_to_json(sb, false));
}

/* Pausing an already paused sandbox is no error: the answer is the same. */
static void method_sandbox_pause(struct rpc_request *req)
{
        static const char *const known[] = { "sandbox_id", "force", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool force;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "force", &force))
                return;
        struct sandbox *sb = require_sandbox(req);
        if (sb == NULL)
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
                               "sandbox %s has work running (%u exec(s), or a python.run or shell command); "
                               "use force to freeze it too (its timeouts keep counting while paused)",
                               sb->id, sb->running_execs);
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
static void method_sandbox_resume(struct rpc_request *req)
{
        static const char *const known[] = { "sandbox_id", NULL };
        if (!rpc_check_fields(req, known))
                return;
        struct sandbox *sb = require_sandbox(req);
        if (sb == NULL)
                return;
        if (sandbox_resume(sb))
                log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO, "sandbox %s: resumed by uid %u",
                            sb->id, req->uid);
        rpc_reply_result(req, sandbox_to_json(sb, false));
}

/* The sandbox a request acts on, by sandbox_id, session_id (python.run's
 * get-or-create) or exec_id; NULL when it names none the caller may use
 * (the method then says so itself). */
static struct sandbox *request_sandbox(struct rpc_request *req)
{
        json_t *params = req->msg.params;
        const char *id = json_string_value(json_object_get(params, "sandbox_id"));
        if (id != NULL)
                return sandbox_lookup(id, req->uid);
        const char *session = json_string_value(json_object_get(params, "session_id"));
        if (session != NULL)
                return sandbox_find_session(session, req->uid);
        const char *exec = json_string_value(json_object_get(params, "exec_id"));
        if (exec != NULL)
                return exec_find_sandbox(exec, req->uid);
        return NULL;
}

/* Before a request that needs the sandbox's processes to run (the init
 * starts execs, supervisors deliver signals and input, the interpreter
 * answers): a paused sandbox is resumed (auto_resume), or the request
 * fails. The file API works on a paused sandbox as it is (it goes through
 * /proc/PID/root from nsboxd, whose workers are not frozen), and so do the
 * methods that only read what nsboxd holds (info, exec.status/output).
 * False after replying. */
static bool resume_for(struct rpc_request *req)
{
        struct sandbox *sb = request_sandbox(req);
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

#define RESUMING(handler)                                       \
        static void resuming_##handler(struct rpc_request *req) \
        {                                                       \
                if (resume_for(req))                            \
                        handler(req);                           \
        }

static void method_sandbox_exec(struct rpc_request *req)
{
        struct sandbox *sb = require_sandbox(req);
        if (sb == NULL)
                return;
        exec_handle_request(req, sb);
}

/* fs.*: every method names a sandbox the caller must own. */
#define FS_METHOD(name)                                       \
        static void method_fs_##name(struct rpc_request *req) \
        {                                                     \
                struct sandbox *sb = require_sandbox(req);    \
                if (sb != NULL) {                             \
                        sandbox_touch(sb);                    \
                        fs_method_##name(req, sb);            \
                }                                             \
        }
FS_METHOD(list)
FS_METHOD(read)
FS_METHOD(write)
FS_METHOD(remove)
FS_METHOD(mkdir)
FS_METHOD(stat)
FS_METHOD(rename)
FS_METHOD(symlink)
FS_METHOD(chmod)

static void method_exec_list(struct rpc_request *req)
{
        struct sandbox *sb = require_sandbox(req);
        if (sb != NULL)
                exec_method_list(req, sb);
}

static void method_sandbox_snapshot(struct rpc_request *req)
{
        struct sandbox *sb = require_sandbox(req);
        if (sb != NULL)
                snapshot_method_create(req, sb);
}

static void method_image_commit(struct rpc_request *req)
{
        struct sandbox *sb = require_sandbox(req);
        if (sb != NULL)
                image_method_commit(req, sb);
}

static void method_package_install(struct rpc_request *req)
{
        struct sandbox *sb = require_sandbox(req);
        if (sb != NULL) {
                sandbox_touch(sb);
                package_method_install(req, sb);
        }
}

RESUMING(method_sandbox_exec)
RESUMING(python_method_run)
RESUMING(method_package_install)
RESUMING(exec_method_kill)
RESUMING(exec_method_stdin)
RESUMING(exec_method_resize)
RESUMING(shell_method_create)
RESUMING(shell_method_run)
RESUMING(shell_method_terminate)

const struct rpc_method nsboxd_methods[] = {
        { "server.info", method_server_info },
        { "server.load", method_server_load },
        { "sandbox.create", method_sandbox_create },
        { "sandbox.list", method_sandbox_list },
        { "sandbox.info", method_sandbox_info },
        { "sandbox.remove", method_sandbox_remove },
        { "sandbox.update", method_sandbox_update },
        { "sandbox.expose", method_sandbox_expose },
        { "sandbox.unexpose", method_sandbox_unexpose },
        { "sandbox.pause", method_sandbox_pause },
        { "sandbox.resume", method_sandbox_resume },
        { "sandbox.exec", resuming_method_sandbox_exec },
        { "sandbox.snapshot", method_sandbox_snapshot },
        { "snapshot.list", snapshot_method_list },
        { "snapshot.remove", snapshot_method_remove },
        { "image.commit", method_image_commit },
        { "image.list", image_method_list },
        { "image.remove", image_method_remove },
        { "image.import", image_method_import },
        { "python.run", resuming_python_method_run },
        { "package.install", resuming_method_package_install },
        { "exec.status", exec_method_status },
        { "exec.output", exec_method_output },
        { "exec.kill", resuming_exec_method_kill },
        { "exec.stdin", resuming_exec_method_stdin },
        { "exec.resize", resuming_exec_method_resize },
        { "exec.list", method_exec_list },
        { "fs.list", method_fs_list },
        { "fs.read", method_fs_read },
        { "fs.write", method_fs_write },
        { "fs.remove", method_fs_remove },
        { "fs.mkdir", method_fs_mkdir },
        { "fs.stat", method_fs_stat },
        { "fs.rename", method_fs_rename },
        { "fs.symlink", method_fs_symlink },
        { "fs.chmod", method_fs_chmod },
        { "shell.create", resuming_shell_method_create },
        { "shell.run", resuming_shell_method_run },
        { "shell.check", shell_method_check },
        { "shell.terminate", resuming_shell_method_terminate },
        { "shell.list", shell_method_list },
        { NULL, NULL },
};
