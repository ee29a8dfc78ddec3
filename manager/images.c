/* SPDX-License-Identifier: Apache-2.0 */
/* Images: the operator's read-only ones and those committed from sandboxes, listed, committed,
 * removed. */
#include "images.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "fs_worker.h"
#include "json_cleanup.h"
#include "json_file.h"
#include "log.h"
#include "policy.h"
#include "rootfs.h"
#include "sandbox.h"
#include "snapshot.h"
#include "uidmode.h"

/* Where the image lives: the operator's dir first (its names cannot be
 * taken by a commit), then the committed ones. */
static bool image_dir(const char *name, char *out, size_t len, bool *committed)
{
        struct stat st;
        if (!policy_valid_name(name))
                return false;
        snprintf(out, len, "%s/%s", nsboxd.config.image_dir, name);
        char rootfs[4096];
        snprintf(rootfs, sizeof(rootfs), "%s/rootfs", out);
        if (stat(rootfs, &st) == 0 && S_ISDIR(st.st_mode)) {
                *committed = false;
                return true;
        }
        snprintf(out, len, "%s/images/%s", nsboxd.config.state_dir, name);
        snprintf(rootfs, sizeof(rootfs), "%s/rootfs", out);
        if (stat(rootfs, &st) == 0 && S_ISDIR(st.st_mode)) {
                *committed = true;
                return true;
        }
        return false;
}

bool image_committed(const char *name)
{
        char dir[4096];
        bool committed = false;
        return image_dir(name, dir, sizeof(dir), &committed) && committed;
}

static json_t *image_manifest(const char *dir)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/manifest.json", dir);
        json_t *m = json_load_file(path, 0, NULL);
        if (m != NULL && !json_is_object(m)) {
                json_decref(m);
                return NULL;
        }
        return m;
}

bool image_exists(const char *name)
{
        char dir[4096];
        bool committed;
        return image_dir(name, dir, sizeof(dir), &committed);
}

bool image_usable(const char *name, uid_t uid)
{
        char dir[4096];
        bool committed;
        if (!image_dir(name, dir, sizeof(dir), &committed))
                return false;
        if (!committed || uid == 0)
                return true;
        _cleanup_json_ json_t *m = image_manifest(dir);
        json_t *owner = m ? json_object_get(m, "owner") : NULL;
        /* Imported by the operator: everyone's. */
        if (m != NULL && json_is_true(json_object_get(m, "public")))
                return true;
        return json_is_integer(owner) && json_integer_value(owner) == (json_int_t)uid;
}

int image_layers(const char *name, char **layers, size_t max, size_t *n, nsbox_error_t **err)
{
        char dir[4096], current[64];
        bool committed;
        *n = 0;
        snprintf(current, sizeof(current), "%s", name);
        for (;;) {
                if (*n >= max || *n >= IMAGE_MAX_DEPTH)
                        return nsbox_error(err, ELOOP, "image \"%s\" has more than %zu layers", name, *n);
                if (!image_dir(current, dir, sizeof(dir), &committed))
                        return nsbox_error(err, ENOENT, "image \"%s\" (a layer of \"%s\") not found", current,
                                           name);
                if (!committed) {
                        char lower[4096];
                        int r = uidmode_image_lower(current, lower, sizeof(lower), err);
                        if (r < 0)
                                return r;
                        if ((layers[(*n)++] = strdup(lower)) == NULL)
                                return nsbox_error(err, ENOMEM, "image layers");
                        return 0;
                }
                if (asprintf(&layers[*n], "%s/rootfs", dir) < 0)
                        return nsbox_error(err, ENOMEM, "image layers");
                (*n)++;
                _cleanup_json_ json_t *m = image_manifest(dir);
                json_t *parent = m ? json_object_get(m, "parent") : NULL;
                /* An imported image is whole: no parent below it. */
                if (m != NULL && parent == NULL && json_is_string(json_object_get(m, "imported_from")))
                        return 0;
                if (!json_is_string(parent) || json_string_length(parent) >= sizeof(current))
                        return nsbox_error(err, EBADMSG, "image \"%s\": its manifest names no parent",
                                           current);
                snprintf(current, sizeof(current), "%s", json_string_value(parent));
        }
}

static void list_dir(json_t *list, const char *base, bool committed, uid_t uid)
{
        DIR *d = opendir(base);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                char dir[4096];
                bool is_committed;
                /* A committed name shadowed by an operator's image is not listed twice. */
                if (!image_dir(de->d_name, dir, sizeof(dir), &is_committed) || is_committed != committed)
                        continue;
                if (committed && !image_usable(de->d_name, uid))
                        continue;
                _cleanup_json_ json_t *manifest = image_manifest(dir);
                json_t *entry = json_pack("{s:s}", "name", de->d_name);
                if (manifest != NULL) {
                        static const char *const keys[] = {
                                "distribution", "suite",          "python_version",  "build_date",
                                "size_bytes",   "inodes",         "parent",          "owner",
                                "created_at",   "committed_from", "python_packages", "imported_from",
                                "format"
                        };
                        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
                                json_t *v = json_object_get(manifest, keys[i]);
                                if (v != NULL)
                                        json_object_set(entry, keys[i], v);
                        }
                }
                json_object_set_new(entry, "removable", json_boolean(committed));
                json_array_append_new(list, entry);
        }
        closedir(d);
}

json_t *images_list(uid_t uid)
{
        json_t *list = json_array();
        char committed[4096];
        list_dir(list, nsboxd.config.image_dir, false, uid);
        snprintf(committed, sizeof(committed), "%s/images", nsboxd.config.state_dir);
        list_dir(list, committed, true, uid);
        return list;
}

int images_init(nsbox_error_t **err)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/images", nsboxd.config.state_dir);
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", path);
        return 0;
}

static unsigned committed_images_of(uid_t uid)
{
        char base[4096];
        unsigned n = 0;
        snprintf(base, sizeof(base), "%s/images", nsboxd.config.state_dir);
        DIR *d = opendir(base);
        if (d == NULL)
                return 0;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                char dir[4096];
                bool committed;
                if (image_dir(de->d_name, dir, sizeof(dir), &committed) && committed) {
                        _cleanup_json_ json_t *m = image_manifest(dir);
                        json_t *owner = m ? json_object_get(m, "owner") : NULL;
                        n += json_is_integer(owner) && json_integer_value(owner) == (json_int_t)uid;
                }
        }
        closedir(d);
        return n;
}

struct commit_request {
        struct rpc_request *req;
        char name[64];
        char parent[64];
        char sandbox_id[37];
        uid_t owner;
        long long created_at_ms;
        char tmp[4096];
};

/* The parent's manifest, told what the commit changed: build inputs no
 * longer describe it, its Python distributions are the parent's plus and
 * minus those whose dist-info the layer adds or removes. */
static json_t *commit_manifest(const struct commit_request *c, uint64_t size, json_t *dists)
{
        char dir[4096], created[40];
        bool committed;
        json_t *parent = image_dir(c->parent, dir, sizeof(dir), &committed) ? image_manifest(dir) : NULL;
        json_t *m = parent ? parent : json_object();
        /* Not inherited: how the parent was made, and an imported parent's being everyone's. */
        static const char *const stale[] = { "input_hash", "base_hash",     "image_files", "committed_from",
                                             "public",     "imported_from", "format",      "tag" };
        for (size_t i = 0; i < ARRAY_SIZE(stale); i++)
                json_object_del(m, stale[i]);
        format_timestamp(c->created_at_ms, created, sizeof(created));
        json_object_set_new(m, "name", json_string(c->name));
        json_object_set_new(m, "parent", json_string(c->parent));
        json_object_set_new(m, "owner", json_integer(c->owner));
        json_object_set_new(m, "created_at", json_string(created));
        json_object_set_new(m, "build_date", json_string(created));
        json_object_set_new(m, "committed_from", json_string(c->sandbox_id));
        json_object_set_new(m, "size_bytes", json_integer((json_int_t)size));
        json_t *packages = json_object_get(m, "python_packages");
        if (!json_is_object(packages)) {
                packages = json_object();
                json_object_set_new(m, "python_packages", packages);
        }
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(dists, "removed"), i, v)
        {
                /* Distribution names compare case-insensitively, '-' and '_' alike. */
                const char *key;
                json_t *ignored;
                void *tmp;
                json_object_foreach_safe(packages, tmp, key, ignored)
                {
                        const char *a = key, *b = json_string_value(v);
                        while (
                            *a && *b &&
                            ((*a == '-' || *a == '_') ? (*b == '-' || *b == '_') : (*a | 32) == (*b | 32))) {
                                a++;
                                b++;
                        }
                        if (*a == '\0' && *b == '\0')
                                json_object_del(packages, key);
                }
        }
        json_object_update(packages, json_object_get(dists, "added"));
        return m;
}

static void commit_done(void *data, int r, uint64_t size, json_t *result, const char *message)
{
        struct commit_request *c = data;
        if (r < 0) {
                rootfs_remove_dir(c->tmp, NULL);
                rpc_reply_fail(c->req, snapshot_copy_error_kind(r), "commit of sandbox %s: %s", c->sandbox_id,
                               message);
                free(c);
                return;
        }
        char path[4096], final[4096];
        _cleanup_json_ json_t *manifest = commit_manifest(c, size, json_object_get(result, "dists"));
        json_object_set(manifest, "inodes", json_object_get(result, "inodes"));
        snprintf(path, sizeof(path), "%s/manifest.json", c->tmp);
        snprintf(final, sizeof(final), "%s/images/%s", nsboxd.config.state_dir, c->name);
        struct stat st;
        const char *failed = NULL;
        _cleanup_error_ nsbox_error_t *write_err = NULL;
        if (json_file_replace(path, manifest, JSON_INDENT(2), true, &write_err) < 0)
                failed = "write manifest.json";
        else if (image_exists(c->name) || lstat(final, &st) == 0)
                failed = "an image of that name appeared meanwhile";
        else if (rename(c->tmp, final) < 0)
                failed = strerror(errno);
        if (failed != NULL) {
                rootfs_remove_dir(c->tmp, NULL);
                rpc_reply_fail(c->req, "internal", "commit of sandbox %s as image %s: %s", c->sandbox_id,
                               c->name, failed);
                free(c);
                return;
        }
        log_limited(log_key_uid(c->owner).text, LOG_LEVEL_INFO,
                    "image %s: committed from sandbox %s by uid %u (%llu bytes over %s)", c->name,
                    c->sandbox_id, c->owner, (unsigned long long)size, c->parent);
        json_t *reply = json_pack("{s:s, s:s, s:s, s:I, s:O?, s:O, s:O}", "name", c->name, "parent",
                                  c->parent, "sandbox_id", c->sandbox_id, "size_bytes", (json_int_t)size,
                                  "inodes", json_object_get(manifest, "inodes"), "created_at",
                                  json_object_get(manifest, "created_at"), "python_packages",
                                  json_object_get(manifest, "python_packages"));
        rpc_reply_result(c->req, reply);
        free(c);
}

/* The name of a new image (image.commit, image.import): valid, free, and
 * per-sandbox uid isolation there to use it; false after replying why. */
static bool new_image_name_ok(struct rpc_request *req, json_t *name, const char *what)
{
        if (!json_is_string(name) || !policy_valid_name(json_string_value(name))) {
                rpc_reply_error(
                    req, JSONRPC_INVALID_PARAMS, "invalid_params",
                    "name must be 1 to 63 letters, digits, '.', '_' or '-', not starting with '.' or "
                    "'-'");
                return false;
        }
        if (image_exists(json_string_value(name))) {
                rpc_reply_fail(req, "invalid_params", "an image named %s exists", json_string_value(name));
                return false;
        }
        if (uidmode_shared()) {
                rpc_reply_fail(req, "unavailable", "%s images need per-sandbox uid isolation", what);
                return false;
        }
        return true;
}

void image_method_commit(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "name", "progress", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool progress = false;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "progress", &progress))
                return;
        json_t *name = json_object_get(req->msg.params, "name");
        if (!new_image_name_ok(req, name, "committed"))
                return;
        if (sb->state != SANDBOX_RUNNING) {
                rpc_reply_fail(req, "unavailable", "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
                return;
        }
        size_t depth = 0;
        char *layers[IMAGE_MAX_DEPTH];
        if (image_layers(sb->policy.image, layers, IMAGE_MAX_DEPTH, &depth, &err) < 0 ||
            depth >= IMAGE_MAX_DEPTH) {
                for (size_t i = 0; i < depth; i++)
                        free(layers[i]);
                rpc_reply_fail(req, "limit_reached", "image %s is already %zu layers deep (at most %d)",
                               sb->policy.image, depth, IMAGE_MAX_DEPTH);
                return;
        }
        for (size_t i = 0; i < depth; i++)
                free(layers[i]);
        if (req->uid != 0 && committed_images_of(req->uid) >= nsboxd.config.max_images_per_uid) {
                rpc_reply_fail(
                    req, "limit_reached",
                    "uid %u has the most committed images one user may have (max_images_per_uid %u)",
                    req->uid, nsboxd.config.max_images_per_uid);
                return;
        }
        struct commit_request *c = calloc(1, sizeof(*c));
        if (c == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        c->req = req;
        c->owner = req->uid;
        c->created_at_ms = now_realtime_ms();
        snprintf(c->name, sizeof(c->name), "%s", json_string_value(name));
        snprintf(c->parent, sizeof(c->parent), "%s", sb->policy.image);
        snprintf(c->sandbox_id, sizeof(c->sandbox_id), "%s", sb->id);
        /* The temporary dir's name is the lock on the name while the copy runs. */
        snprintf(c->tmp, sizeof(c->tmp), "%s/images/.tmp-%s", nsboxd.config.state_dir, c->name);
        if (mkdir(c->tmp, 0700) < 0) {
                rpc_reply_fail(req, errno == EEXIST ? "busy" : "internal", "image %s: %s", c->name,
                               errno == EEXIST ? "a commit of that name is in progress" : strerror(errno));
                free(c);
                return;
        }
        char rootfs[4096];
        snprintf(rootfs, sizeof(rootfs), "%s/rootfs", c->tmp);
        _cleanup_close_ int dst =
            mkdir(rootfs, 0755) < 0 ? -1 : open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int r = dst < 0 ? nsbox_error(&err, errno, "mkdir %s", rootfs)
                        : snapshot_copy_sandbox(sb, dst, req->uid, true, progress ? req : NULL, commit_done,
                                                c, &err);
        if (r < 0) {
                rootfs_remove_dir(c->tmp, NULL);
                rpc_reply_fail(req, snapshot_copy_error_kind(r), "%s", err->message);
                free(c);
                return;
        }
        sandbox_touch(sb);
}

void image_method_list(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { NULL };
        if (!rpc_check_fields(req, known))
                return;
        json_t *list = images_list(req->uid);
        rpc_reply_result(req, json_pack("{s:o, s:i}", "images", list, "count", (int)json_array_size(list)));
}

/* Is `name` the parent of another committed image? */
static bool image_has_children(const char *name)
{
        char base[4096];
        bool found = false;
        snprintf(base, sizeof(base), "%s/images", nsboxd.config.state_dir);
        DIR *d = opendir(base);
        if (d == NULL)
                return false;
        struct dirent *de;
        while (!found && (de = readdir(d)) != NULL) {
                char dir[4096];
                bool committed;
                if (image_dir(de->d_name, dir, sizeof(dir), &committed) && committed) {
                        _cleanup_json_ json_t *m = image_manifest(dir);
                        json_t *parent = m ? json_object_get(m, "parent") : NULL;
                        found = json_is_string(parent) && strcmp(json_string_value(parent), name) == 0;
                }
        }
        closedir(d);
        return found;
}

struct image_remove_request {
        struct rpc_request *req;
        char name[64];
};

static void image_removed(void *data, int r, uint64_t size, json_t *result, const char *message)
{
        struct image_remove_request *ir = data;
        if (r < 0)
                rpc_reply_fail(ir->req, "internal", "remove image %s: %s", ir->name, message);
        else
                rpc_reply_result(ir->req, json_pack("{s:s, s:b}", "name", ir->name, "removed", 1));
        free(ir);
}

void image_method_remove(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "name", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        json_t *v = json_object_get(req->msg.params, "name");
        if (!json_is_string(v)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "name must be a string");
                return;
        }
        const char *name = json_string_value(v);
        char dir[4096];
        bool committed;
        if (!image_usable(name, req->uid) || !image_dir(name, dir, sizeof(dir), &committed)) {
                rpc_reply_fail(req, "not_found", "no image %.64s", name);
                return;
        }
        if (committed && req->uid != 0) {
                _cleanup_json_ json_t *m = image_manifest(dir);
                if (m != NULL && json_is_true(json_object_get(m, "public"))) {
                        rpc_reply_fail(req, "permission_denied", "image %s was imported by the operator",
                                       name);
                        return;
                }
        }
        if (!committed) {
                rpc_reply_fail(req, "permission_denied",
                               "image %s is the operator's (in %s): it is not removed through the API", name,
                               nsboxd.config.image_dir);
                return;
        }
        for (struct sandbox *user = nsboxd.sandboxes; user != NULL; user = user->next) {
                if (user->state != SANDBOX_EXITED && strcmp(user->policy.image, name) == 0) {
                        rpc_reply_fail(req, "busy", "image %s is used by sandbox %s%s", name,
                                       req->uid == 0 || user->owner == req->uid ? user->id
                                                                                : "(of another user)",
                                       user->pooled ? " (warm pool)" : "");
                        return;
                }
        }
        if (snapshot_image_used(name) || image_has_children(name)) {
                rpc_reply_fail(req, "busy",
                               "image %s is the base of snapshots or of other images; remove them first",
                               name);
                return;
        }
        char doomed[4096];
        snprintf(doomed, sizeof(doomed), "%s/images/.tmp-rm-%s", nsboxd.config.state_dir, name);
        if (rename(dir, doomed) < 0) {
                rpc_reply_fail(req, "internal", "rename %s: %s", dir, strerror(errno));
                return;
        }
        struct image_remove_request *ir = calloc(1, sizeof(*ir));
        if (ir == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        ir->req = req;
        snprintf(ir->name, sizeof(ir->name), "%s", name);
        log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO, "image %s: removed by uid %u", name,
                    req->uid);
        if (snapshot_remove_dir_async(doomed, image_removed, ir, &err) < 0) {
                _cleanup_error_ nsbox_error_t *now_err = NULL;
                int r = rootfs_remove_dir(doomed, &now_err);
                image_removed(ir, r, 0, NULL, now_err ? now_err->message : NULL);
        }
}

/* image.import: an OCI image layout (a directory with oci-layout) or a
 * docker-archive tarball (docker save), unpacked with umoci (after skopeo
 * turned a tarball into a layout) into one whole layer. */

struct import_request {
        struct rpc_request *req;
        char name[64];
        char path[4000];
        char tag[129];
        bool archive;
        bool progress; /* the client asked to be told each step */
        long long created_at_ms;
        char tmp[4096];
};

/* The steps of an import, as its progress notifications name them. */
enum { IMPORT_CONVERT, IMPORT_UNPACK, IMPORT_MEASURE, IMPORT_STEPS };
static const char *const import_steps[IMPORT_STEPS] = {
        [IMPORT_CONVERT] = "convert the docker archive to an OCI layout (skopeo)",
        [IMPORT_UNPACK] = "unpack the layers (umoci)",
        [IMPORT_MEASURE] = "measure and record the image",
};

static void import_told(void *data, uint64_t done, uint64_t total)
{
        struct import_request *im = data;
        if (!im->progress || done >= IMPORT_STEPS)
                return;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:I, s:I, s:s}", "operation", "image.import", "done_steps", (json_int_t)done,
                      "total_steps", (json_int_t)total, "step", import_steps[done]);
        rpc_notify(im->req, "progress", params);
}

/* Run a tool to its end, its output into log_path; its last lines become
 * the error. Runs in the worker, where blocking is allowed. */
static int run_tool(char *const argv[], const char *log_path, nsbox_error_t **err)
{
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&actions, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        posix_spawn_file_actions_adddup2(&actions, 1, 2);
        char *const envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               "HOME=/nonexistent", NULL };
        pid_t pid;
        int r = posix_spawnp(&pid, argv[0], &actions, NULL, argv, envp);
        posix_spawn_file_actions_destroy(&actions);
        if (r != 0)
                return nsbox_error(err, r, "run %s (install it: apt-get install %s)", argv[0], argv[0]);
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return 0;
        char tail[301] = "";
        _cleanup_close_ int fd = open(log_path, O_RDONLY | O_CLOEXEC);
        off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
        if (fd >= 0 && size > 0) {
                off_t from = size > 300 ? size - 300 : 0;
                ssize_t n = pread(fd, tail, sizeof(tail) - 1, from);
                tail[n > 0 ? n : 0] = '\0';
        }
        return nsbox_error(err, EINVAL, "%s failed: %s", argv[0], tail);
}

static uint64_t import_bytes;

static int add_size(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        import_bytes += (uint64_t)st->st_blocks * 512;
        return 0;
}

/* What every sandbox root needs and a minimal image may lack. */
static int import_add_sandbox_dirs(const char *rootfs, nsbox_error_t **err)
{
        static const struct {
                const char *name;
                mode_t mode;
                uid_t owner;
        } dirs[] = { { "proc", 0555, 0 },
                     { "dev", 0755, 0 },
                     { "sys", 0555, 0 },
                     { "tmp", 01777, 0 },
                     { "workspace", 0755, 1000 } };
        _cleanup_close_ int root = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0)
                return nsbox_error(err, errno, "open %s", rootfs);
        for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
                if (mkdirat(root, dirs[i].name, dirs[i].mode) < 0) {
                        if (errno == EEXIST)
                                continue;
                        return nsbox_error(err, errno, "mkdir /%s in the image", dirs[i].name);
                }
                if (fchownat(root, dirs[i].name, dirs[i].owner, dirs[i].owner, AT_SYMLINK_NOFOLLOW) < 0 ||
                    fchmodat(root, dirs[i].name, dirs[i].mode, 0) < 0)
                        return nsbox_error(err, errno, "set up /%s in the image", dirs[i].name);
        }
        return 0;
}

static int import_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct import_request *im = data;
        char log_path[4200], layout[4200], bundle[4200], image_ref[8400], rootfs[4200];
        snprintf(log_path, sizeof(log_path), "%s/import.log", im->tmp);
        snprintf(bundle, sizeof(bundle), "%s/bundle", im->tmp);
        snprintf(layout, sizeof(layout), "%s", im->path);
        int r;
        if (im->archive) {
                fs_worker_progress(IMPORT_CONVERT, IMPORT_STEPS);
                char source[4100], dest[8400];
                snprintf(layout, sizeof(layout), "%s/layout", im->tmp);
                snprintf(source, sizeof(source), "docker-archive:%s", im->path);
                snprintf(dest, sizeof(dest), "oci:%s:%s", layout, im->tag);
                char *const argv[] = { "skopeo", "--insecure-policy", "copy", "--quiet", source, dest, NULL };
                if ((r = run_tool(argv, log_path, err)) < 0)
                        return r;
        }
        snprintf(image_ref, sizeof(image_ref), "%s:%s", layout, im->tag);
        fs_worker_progress(IMPORT_UNPACK, IMPORT_STEPS);
        char *const argv[] = { "umoci", "unpack", "--image", image_ref, bundle, NULL };
        if ((r = run_tool(argv, log_path, err)) < 0)
                return r;
        snprintf(rootfs, sizeof(rootfs), "%s/rootfs", bundle);
        char final[4200];
        snprintf(final, sizeof(final), "%s/rootfs", im->tmp);
        if (rename(rootfs, final) < 0)
                return nsbox_error(err, errno, "rename %s", rootfs);
        if ((r = import_add_sandbox_dirs(final, err)) < 0)
                return r;
        fs_worker_progress(IMPORT_MEASURE, IMPORT_STEPS);
        import_bytes = 0;
        nftw(final, add_size, 64, FTW_PHYS | FTW_MOUNT);
        out->result = json_pack("{s:I}", "size_bytes", (json_int_t)import_bytes);
        /* What it is, if it says: os-release's ID. */
        char os_release[4300], line[256];
        snprintf(os_release, sizeof(os_release), "%s/etc/os-release", final);
        struct stat st;
        FILE *f = lstat(os_release, &st) == 0 && S_ISREG(st.st_mode) ? fopen(os_release, "re") : NULL;
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
                if (strncmp(line, "ID=", 3) == 0) {
                        line[strcspn(line, "\r\n")] = '\0';
                        char *v = line + 3;
                        if (*v == '"')
                                v++;
                        v[strcspn(v, "\"")] = '\0';
                        json_object_set_new(out->result, "distribution", json_string(v));
                }
        }
        if (f != NULL)
                fclose(f);
        rootfs_remove_dir(bundle, NULL);
        if (im->archive)
                rootfs_remove_dir(layout, NULL);
        unlink(log_path);
        _cleanup_close_ int sync_fd = open(final, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sync_fd >= 0)
                syncfs(sync_fd);
        return 0;
}

static void import_done(void *data, int r, json_t *result, const char *message)
{
        struct import_request *im = data;
        char created[40], path[4200], final[4200];
        if (r < 0) {
                rootfs_remove_dir(im->tmp, NULL);
                rpc_reply_fail(im->req, r == -EINVAL ? "invalid_params" : "internal", "import of %s: %s",
                               im->path, message);
                free(im);
                return;
        }
        format_timestamp(im->created_at_ms, created, sizeof(created));
        _cleanup_json_ json_t *manifest = json_pack(
            "{s:s, s:s, s:s, s:s, s:s, s:s, s:O, s:b, s:O?}", "name", im->name, "imported_from", im->path,
            "tag", im->tag, "format", im->archive ? "docker-archive" : "oci-layout", "created_at", created,
            "build_date", created, "size_bytes", json_object_get(result, "size_bytes"), "public", 1,
            "distribution", json_object_get(result, "distribution"));
        json_decref(result);
        snprintf(path, sizeof(path), "%s/manifest.json", im->tmp);
        snprintf(final, sizeof(final), "%s/images/%s", nsboxd.config.state_dir, im->name);
        struct stat st;
        const char *failed = NULL;
        _cleanup_error_ nsbox_error_t *write_err = NULL;
        if (manifest == NULL || json_file_replace(path, manifest, JSON_INDENT(2), true, &write_err) < 0)
                failed = "write manifest.json";
        else if (image_exists(im->name) || lstat(final, &st) == 0)
                failed = "an image of that name appeared meanwhile";
        else if (rename(im->tmp, final) < 0)
                failed = strerror(errno);
        if (failed != NULL) {
                rootfs_remove_dir(im->tmp, NULL);
                rpc_reply_fail(im->req, "internal", "import of %s as image %s: %s", im->path, im->name,
                               failed);
                free(im);
                return;
        }
        log_info("image %s: imported from %s (%s)", im->name, im->path,
                 im->archive ? "docker-archive" : "oci-layout");
        json_object_del(manifest, "public");
        rpc_reply_result(im->req, json_incref(manifest));
        free(im);
}

static bool import_tag_valid(const char *tag)
{
        size_t len = strlen(tag);
        if (len == 0 || len > 128)
                return false;
        for (const char *p = tag; *p; p++) {
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                      *p == '.' || *p == '_' || *p == '-'))
                        return false;
        }
        return true;
}

void image_method_import(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "path", "name", "tag", "progress", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool progress = false;
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "progress", &progress))
                return;
        /* nsboxd reads the path as root: only the operator may name one. */
        if (req->uid != 0) {
                rpc_reply_fail(req, "permission_denied",
                               "only root imports images (nsboxd reads the path as root)");
                return;
        }
        json_t *path = json_object_get(req->msg.params, "path"),
               *name = json_object_get(req->msg.params, "name"),
               *tag = json_object_get(req->msg.params, "tag");
        if (!json_is_string(path) || json_string_value(path)[0] != '/' || json_string_length(path) >= 4000 ||
            strchr(json_string_value(path), ':') != NULL || strchr(json_string_value(path), '\n') != NULL) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "path must be an absolute path (without ':') of an OCI layout directory or a "
                                "docker-archive tarball");
                return;
        }
        if (tag != NULL && (!json_is_string(tag) || !import_tag_valid(json_string_value(tag)))) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "tag must be 1 to 128 letters, digits, '.', '_' or '-'");
                return;
        }
        if (!new_image_name_ok(req, name, "imported"))
                return;
        struct stat st;
        char marker[4100];
        snprintf(marker, sizeof(marker), "%s/oci-layout", json_string_value(path));
        bool layout = stat(json_string_value(path), &st) == 0 && S_ISDIR(st.st_mode);
        if (!(layout ? access(marker, F_OK) == 0
                     : (stat(json_string_value(path), &st) == 0 && S_ISREG(st.st_mode)))) {
                rpc_reply_fail(req, "invalid_params",
                               "%s is neither an OCI image layout (a directory with oci-layout) nor a file",
                               json_string_value(path));
                return;
        }
        struct import_request *im = calloc(1, sizeof(*im));
        if (im == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        im->req = req;
        im->progress = progress;
        im->archive = !layout;
        im->created_at_ms = now_realtime_ms();
        snprintf(im->name, sizeof(im->name), "%s", json_string_value(name));
        snprintf(im->path, sizeof(im->path), "%s", json_string_value(path));
        snprintf(im->tag, sizeof(im->tag), "%s", tag ? json_string_value(tag) : "latest");
        snprintf(im->tmp, sizeof(im->tmp), "%s/images/.tmp-%s", nsboxd.config.state_dir, im->name);
        if (mkdir(im->tmp, 0700) < 0) {
                rpc_reply_fail(req, errno == EEXIST ? "busy" : "internal", "image %s: %s", im->name,
                               errno == EEXIST ? "an import or commit of that name is in progress"
                                               : strerror(errno));
                free(im);
                return;
        }
        /* No fd to keep (an empty keep[] is not a null one: fs_worker copies it). */
        const int keep[] = { -1 };
        struct fs_worker *worker = NULL;
        if (fs_worker_start(keep, ARRAY_SIZE(keep), import_run, import_done, im, &worker, &err) < 0) {
                rootfs_remove_dir(im->tmp, NULL);
                rpc_reply_fail(req, "busy", "%s", err->message);
                free(im);
                return;
        }
        fs_worker_on_progress(worker, import_told, im);
}

json_t *image_manifest_get(const char *name, const char *key)
{
        char dir[4096];
        bool committed;
        if (!image_dir(name, dir, sizeof(dir), &committed))
                return NULL;
        _cleanup_json_ json_t *manifest = image_manifest(dir);
        json_t *value = json_object_get(manifest, key);
        return value != NULL ? json_deep_copy(value) : NULL;
}

json_t *image_python_preload(const char *name)
{
        char dir[4096];
        bool committed;
        if (!image_dir(name, dir, sizeof(dir), &committed))
                return NULL;
        /* A committed image keeps its parent's manifest keys, python_preload included. */
        _cleanup_json_ json_t *manifest = image_manifest(dir);
        json_t *list = json_object_get(manifest, "python_preload");
        if (!json_is_array(list))
                return NULL;
        json_t *out = json_array();
        size_t i;
        json_t *v;
        /* Module names only: each becomes an argument of the server. */
        json_array_foreach(list, i, v)
        {
                const char *m = json_string_value(v);
                if (m != NULL && m[0] != '\0' && m[0] != '-' && strlen(m) < 128 &&
                    strspn(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") ==
                        strlen(m))
                        json_array_append(out, v);
        }
        return out;
}
