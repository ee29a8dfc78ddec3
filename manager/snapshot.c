/* SPDX-License-Identifier: Apache-2.0 */
/* File snapshots of sandboxes, forks from them, and the layer copy images.c commits. */
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "cleanup.h"
#include "json_file.h"
#include "daemon.h"
#include "fs_worker.h"
#include "json_cleanup.h"
#include "log.h"
#include "policy.h"
#include "rootfs.h"
#include "sandbox.h"
#include "size.h"
#include "uidmode.h"

#define SNAPSHOT_NAME_MAX       128
#define SNAPSHOT_COPIES_PER_UID 4

/* Sandboxes mounting each snapshot: a snapshot in use is not removed
 * (snapshot.remove answers busy), so its layer never changes under them. */
static struct snapshot_use {
        char id[37];
        unsigned sandboxes;
        struct snapshot_use *next;
} * uses;

/* Copies in flight: their estimated size and inodes count against
 * layer_disk_bytes and the layer_inodes bounds before they are done, so
 * parallel snapshots cannot overshoot them. */
static struct snapshot_copy {
        uid_t owner;
        uint64_t reserved, reserved_inodes;
        int upper_fd, parent_fd, dst_fd;
        bool shift, dists;
        uid_t from_base;
        uint64_t max_bytes;
        uint64_t estimate;               /* what the copy should come to, for its progress */
        struct rpc_request *progress_to; /* told how far the copy is, or NULL */
        /* The tightest inode bound of this copy, said when it is hit. */
        uint64_t max_inodes;
        char inode_bound[256];
        snapshot_copy_done_fn done;
        void *data;
        struct snapshot_copy *next;
} * copies;

static void discard_if_unused(const char *id, const char *why);

void snapshot_hold(const char *id)
{
        for (struct snapshot_use *u = uses; u != NULL; u = u->next) {
                if (strcmp(u->id, id) == 0) {
                        u->sandboxes++;
                        return;
                }
        }
        struct snapshot_use *u = calloc(1, sizeof(*u));
        if (u == NULL) {
                log_error("out of memory counting the users of snapshot %s", id);
                return;
        }
        snprintf(u->id, sizeof(u->id), "%s", id);
        u->sandboxes = 1;
        u->next = uses;
        uses = u;
}

void snapshot_release(const char *id)
{
        for (struct snapshot_use **p = &uses; *p != NULL; p = &(*p)->next) {
                struct snapshot_use *u = *p;
                if (strcmp(u->id, id) == 0) {
                        if (--u->sandboxes == 0) {
                                *p = u->next;
                                free(u);
                                discard_if_unused(id, "its last sandbox was removed");
                        }
                        return;
                }
        }
}

static unsigned snapshot_users(const char *id)
{
        for (struct snapshot_use *u = uses; u != NULL; u = u->next) {
                if (strcmp(u->id, id) == 0)
                        return u->sandboxes;
        }
        return 0;
}

/* The only ids that ever reach a path: lowercase UUIDs, as libuuid writes them. */
static bool snapshot_id_valid(const char *id)
{
        if (strlen(id) != 36)
                return false;
        for (size_t i = 0; i < 36; i++) {
                char c = id[i];
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return false;
        }
        return true;
}

static void snapshots_dir(char *out, size_t len)
{
        snprintf(out, len, "%s/snapshots", nsboxd.config.state_dir);
}

void snapshot_layer_path(const char *id, char *out, size_t len)
{
        snprintf(out, len, "%s/snapshots/%s/layer", nsboxd.config.state_dir, id);
}

/* The record of snapshot id: 0 and *out, -ENOENT when there is none, or
 * -EBADMSG with why when its directory is damaged. */
static int snapshot_load(const char *id, json_t **out, char *why, size_t why_len)
{
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/snapshots/%s", nsboxd.config.state_dir, id);
        if (lstat(path, &st) < 0)
                return errno == ENOENT ? -ENOENT : -errno;
        snprintf(path, sizeof(path), "%s/snapshots/%s/snapshot.json", nsboxd.config.state_dir, id);
        json_error_t jerr;
        _cleanup_json_ json_t *meta = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
        if (meta == NULL) {
                snprintf(why, why_len, "snapshot.json: %s", jerr.text);
                return -EBADMSG;
        }
        json_t *owner = json_object_get(meta, "owner"), *image = json_object_get(meta, "image"),
               *size = json_object_get(meta, "size_bytes"), *sid = json_object_get(meta, "snapshot_id");
        if (!json_is_integer(owner) || json_integer_value(owner) < 0 || !json_is_string(image) ||
            !policy_valid_name(json_string_value(image)) || !json_is_integer(size) || !json_is_string(sid) ||
            strcmp(json_string_value(sid), id) != 0) {
                snprintf(why, why_len, "snapshot.json lacks owner, image, size_bytes or its id");
                return -EBADMSG;
        }
        snapshot_layer_path(id, path, sizeof(path));
        if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
                snprintf(why, why_len, "its layer directory is missing");
                return -EBADMSG;
        }
        *out = steal_pointer(&meta);
        return 0;
}

static uid_t meta_owner(const json_t *meta)
{
        return (uid_t)json_integer_value(json_object_get(meta, "owner"));
}

/* Resolve params[key] for req's caller: the record, or NULL after replying.
 * Another uid's snapshot is not_found, as one that does not exist; a
 * damaged one is reported as such (its owner is not known). */
static json_t *snapshot_lookup_reply(struct rpc_request *req, const char *key, char *id_out)
{
        json_t *v = json_object_get(req->msg.params, key);
        if (!json_is_string(v) || !snapshot_id_valid(json_string_value(v))) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "%s must be a snapshot id (a lowercase UUID, as sandbox.snapshot returns)",
                                key);
                return NULL;
        }
        const char *id = json_string_value(v);
        char why[256];
        json_t *meta = NULL;
        int r = snapshot_load(id, &meta, why, sizeof(why));
        if (r == -ENOENT || (r == 0 && req->uid != 0 && meta_owner(meta) != req->uid)) {
                json_decref(meta);
                rpc_reply_fail(req, "not_found", "no snapshot %s", id);
                return NULL;
        }
        if (r == -EBADMSG) {
                rpc_reply_fail(req, "internal",
                               "snapshot %s is damaged (%s); root may remove it with snapshot.remove", id,
                               why);
                return NULL;
        }
        if (r < 0) {
                rpc_reply_fail(req, "internal", "snapshot %s: %s", id, strerror(-r));
                return NULL;
        }
        if (id_out != NULL)
                snprintf(id_out, 37, "%s", id);
        return meta;
}

json_t *snapshot_require(struct rpc_request *req, const char *key)
{
        json_t *meta = snapshot_lookup_reply(req, key, NULL);
        if (meta == NULL)
                return NULL;
        json_t *mode = json_object_get(meta, "uid_isolation");
        if (!json_is_string(mode) || strcmp(json_string_value(mode), uidmode_name()) != 0) {
                rpc_reply_fail(req, "invalid_params",
                               "snapshot %s was taken under uid_isolation \"%s\"; this nsboxd runs \"%s\"",
                               json_string_value(json_object_get(meta, "snapshot_id")),
                               json_is_string(mode) ? json_string_value(mode) : "?", uidmode_name());
                json_decref(meta);
                return NULL;
        }
        return meta;
}

/* Calls fn on the record of every whole snapshot. */
static void snapshots_foreach(void (*fn)(const char *id, json_t *meta, void *ctx), void *ctx)
{
        char dir[4096];
        snapshots_dir(dir, sizeof(dir));
        DIR *d = opendir(dir);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                char why[256];
                json_t *meta = NULL;
                if (!snapshot_id_valid(de->d_name))
                        continue;
                int r = snapshot_load(de->d_name, &meta, why, sizeof(why));
                fn(de->d_name, r == 0 ? meta : NULL, ctx);
                json_decref(meta);
        }
        closedir(d);
}

struct image_use {
        const char *image;
        bool used;
};

static void check_image_use(const char *id, json_t *meta, void *ctx)
{
        struct image_use *u = ctx;
        if (meta != NULL && strcmp(json_string_value(json_object_get(meta, "image")), u->image) == 0)
                u->used = true;
}

bool snapshot_image_used(const char *image)
{
        struct image_use u = { image, false };
        snapshots_foreach(check_image_use, &u);
        return u.used;
}

struct usage {
        uid_t uid;
        unsigned count;      /* of uid's snapshots */
        uint64_t bytes;      /* of all */
        uint64_t inodes;     /* of all */
        uint64_t uid_inodes; /* of uid's */
};

/* A record's inodes. Records written before inodes were counted say none:
 * they count 0 (a guess from their bytes, one a 4 KiB block, made 8 GiB of
 * large files fill layer_inodes on an upgraded host and refused every
 * snapshot there; the layers they hold are what they were, and every new
 * one is bounded). */
static uint64_t record_inodes(const json_t *record)
{
        json_t *inodes = json_object_get(record, "inodes");
        return json_is_integer(inodes) && json_integer_value(inodes) >= 0
                   ? (uint64_t)json_integer_value(inodes)
                   : 0;
}

static void usage_add(struct usage *u, uid_t owner, uint64_t bytes, uint64_t inodes)
{
        u->bytes += bytes;
        u->inodes += inodes;
        if (owner == u->uid)
                u->uid_inodes += inodes;
}

static void add_usage(const char *id, json_t *meta, void *ctx)
{
        struct usage *u = ctx;
        if (meta == NULL)
                return;
        usage_add(u, meta_owner(meta), (uint64_t)json_integer_value(json_object_get(meta, "size_bytes")),
                  record_inodes(meta));
        u->count += meta_owner(meta) == u->uid;
}

static void add_committed_images(struct usage *u)
{
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/images", nsboxd.config.state_dir);
        DIR *d = opendir(dir);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                char path[4096];
                if (!policy_valid_name(de->d_name))
                        continue;
                snprintf(path, sizeof(path), "%s/%s/manifest.json", dir, de->d_name);
                _cleanup_json_ json_t *m = json_load_file(path, 0, NULL);
                json_t *size = m ? json_object_get(m, "size_bytes") : NULL,
                       *owner = json_object_get(m, "owner");
                /* Imported images are the operator's, as the image dir's are. */
                if (m == NULL || json_is_true(json_object_get(m, "public")))
                        continue;
                usage_add(u, json_is_integer(owner) ? (uid_t)json_integer_value(owner) : (uid_t)-1,
                          json_is_integer(size) && json_integer_value(size) > 0
                              ? (uint64_t)json_integer_value(size)
                              : 0,
                          record_inodes(m));
        }
        closedir(d);
}

/* What snapshots, committed images and copies in flight hold: in all, and of uid. */
static void layer_usage(uid_t uid, struct usage *u)
{
        *u = (struct usage){ .uid = uid };
        snapshots_foreach(add_usage, u);
        add_committed_images(u);
        for (struct snapshot_copy *c = copies; c != NULL; c = c->next)
                usage_add(u, c->owner, c->reserved, c->reserved_inodes);
}

const char *snapshot_copy_error_kind(int r)
{
        if (r == -ENOSPC || r == -EDQUOT)
                return "limit_reached";
        return r == -EBUSY ? "busy" : "internal";
}

/* Python distributions a layer adds (NAME-VERSION.dist-info directories)
 * or removes (whiteouts of them), in the usual site directories. */
static void scan_dists(int layer, const char *site, json_t *added, json_t *removed)
{
        _cleanup_close_ int dir = openat(layer, site, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir < 0)
                return;
        DIR *d = fdopendir(dir);
        if (d == NULL)
                return;
        steal_fd(&dir);
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                const char *suffix = strstr(de->d_name, ".dist-info");
                if (suffix == NULL || suffix[10] != '\0')
                        continue;
                const char *dash = strchr(de->d_name, '-');
                if (dash == NULL || dash > suffix)
                        continue;
                char name[256], version[256];
                snprintf(name, sizeof(name), "%.*s", (int)(dash - de->d_name), de->d_name);
                snprintf(version, sizeof(version), "%.*s", (int)(suffix - dash - 1), dash + 1);
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (S_ISCHR(st.st_mode))
                        json_array_append_new(removed, json_string(name));
                else if (S_ISDIR(st.st_mode))
                        json_object_set_new(added, name, json_string(version));
        }
        closedir(d);
}

static json_t *layer_dists(int layer)
{
        static const char *const sites[] = { "usr/local/lib/python3/dist-packages",
                                             "usr/lib/python3/dist-packages" };
        json_t *added = json_object(), *removed = json_array();
        for (size_t i = 0; i < ARRAY_SIZE(sites); i++)
                scan_dists(layer, sites[i], added, removed);
        /* pip's own prefix carries the minor version: python3.N. */
        _cleanup_close_ int lib =
            openat(layer, "usr/local/lib", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = lib >= 0 ? fdopendir(lib) : NULL;
        if (d != NULL) {
                steal_fd(&lib);
                struct dirent *de;
                while ((de = readdir(d)) != NULL) {
                        if (strncmp(de->d_name, "python3.", 8) != 0)
                                continue;
                        char site[512];
                        snprintf(site, sizeof(site), "usr/local/lib/%s/dist-packages", de->d_name);
                        scan_dists(layer, site, added, removed);
                }
                closedir(d);
        }
        return json_pack("{s:o, s:o}", "added", added, "removed", removed);
}

/* In the worker: the snapshot layer the sandbox was forked from, then its
 * upper on top, merged into one layer. */
/* In the copy's worker: its estimated size, for the progress it reports. */
static uint64_t copy_estimate;

static long long copy_said_at_ms;

/* At most every 100 ms: a copy of many small files charges thousands a second. */
static void copy_progress(const struct rootfs_copy *c)
{
        long long now = now_monotonic_ms();
        if (now - copy_said_at_ms < 100)
                return;
        copy_said_at_ms = now;
        fs_worker_progress(c->bytes, copy_estimate > c->bytes ? copy_estimate : c->bytes);
}

static int copy_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct snapshot_copy *job = data;
        _cleanup_(rootfs_copy_done) struct rootfs_copy c = { .max_bytes = job->max_bytes,
                                                             .max_inodes = job->max_inodes,
                                                             .progress = copy_progress };
        copy_estimate = job->estimate;
        copy_said_at_ms = now_monotonic_ms();
        fs_worker_progress(0, copy_estimate);
        int r;
        if (job->parent_fd >= 0 && (r = rootfs_copy_layer(job->parent_fd, job->dst_fd, &c)) < 0)
                return r == -EDQUOT
                           ? nsbox_error(err, EDQUOT, "the copy would make %s", job->inode_bound)
                           : nsbox_error(err, -r, "copy the layer of the snapshot the sandbox was made from");
        _cleanup_close_ int upper =
            openat(job->upper_fd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (upper < 0)
                return nsbox_error(err, errno, "open the sandbox's upper layer");
        c.shift = job->shift;
        c.from_base = job->from_base;
        if ((r = rootfs_copy_layer(upper, job->dst_fd, &c)) < 0) {
                char room[SIZE_FORMAT_MAX];
                if (r == -ENOSPC)
                        return nsbox_error(err, ENOSPC,
                                           "the copy would take more than the %s left of layer_disk_bytes",
                                           size_format(job->max_bytes, room, sizeof(room)));
                if (r == -EDQUOT)
                        return nsbox_error(err, EDQUOT, "the copy would make %s", job->inode_bound);
                if (r == -EBUSY)
                        return nsbox_error(
                            err, EBUSY,
                            "the sandbox kept changing its files while they were copied (a file "
                            "replaced by one of another type %d times, or names made as fast as they "
                            "were read); copy it when no exec is writing there",
                            ROOTFS_COPY_RETRIES);
                if (r == -ELOOP)
                        return nsbox_error(err, ELOOP, "the sandbox's directories nest deeper than %d levels",
                                           ROOTFS_COPY_MAX_DEPTH);
                return nsbox_error(err, -r, "copy the sandbox's files");
        }
        /* The data reaches the disk before the record says the snapshot exists. */
        syncfs(job->dst_fd);
        fs_worker_progress(c.bytes, c.bytes);
        out->result =
            json_pack("{s:I, s:I}", "size_bytes", (json_int_t)c.bytes, "inodes", (json_int_t)c.inodes);
        if (job->dists)
                json_object_set_new(out->result, "dists", layer_dists(job->dst_fd));
        return 0;
}

static void copy_forget(struct snapshot_copy *job)
{
        for (struct snapshot_copy **p = &copies; *p != NULL; p = &(*p)->next) {
                if (*p == job) {
                        *p = job->next;
                        break;
                }
        }
        if (job->upper_fd >= 0)
                close(job->upper_fd);
        if (job->parent_fd >= 0)
                close(job->parent_fd);
        if (job->dst_fd >= 0)
                close(job->dst_fd);
        free(job);
}

static void copy_done(void *data, int r, json_t *result, const char *message)
{
        struct snapshot_copy *job = data;
        snapshot_copy_done_fn done = job->done;
        void *done_data = job->data;
        copy_forget(job);
        uint64_t size = 0;
        if (r == 0)
                size = (uint64_t)json_integer_value(json_object_get(result, "size_bytes"));
        done(done_data, r, size, result, message);
        json_decref(result);
}

static unsigned copies_of(uid_t uid);

static void copy_told(void *data, uint64_t done, uint64_t total)
{
        struct snapshot_copy *job = data;
        if (job->progress_to == NULL)
                return;
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:I, s:I}", "operation", job->progress_to->msg.method, "done_bytes",
                      (json_int_t)done, "total_bytes", (json_int_t)total);
        rpc_notify(job->progress_to, "progress", params);
}

int snapshot_copy_sandbox(struct sandbox *sb, int dst_fd, uid_t owner, bool dists,
                          struct rpc_request *progress_to, snapshot_copy_done_fn done, void *data,
                          nsbox_error_t **err)
{
        if (sb->disk_fd < 0)
                return nsbox_error(err, EBADF, "sandbox %s has no writable layer to copy", sb->id);
        /* Copies run in file workers, which every client's large fs.* calls share. */
        if (owner != 0 && copies_of(owner) >= SNAPSHOT_COPIES_PER_UID)
                return nsbox_error(err, EBUSY,
                                   "uid %u has %d snapshot or commit copies running; wait for one", owner,
                                   SNAPSHOT_COPIES_PER_UID);
        struct usage u;
        layer_usage(owner, &u);
        uint64_t limit = nsboxd.config.layer_disk_bytes, stored = u.bytes;
        /* What the upper holds now, and the layer below it: the copy's size
         * unless the sandbox writes more meanwhile (the copy stops at the
         * bound then). */
        struct statfs fs;
        uint64_t estimate = 0, inodes = 0, most_bytes = UINT64_MAX, most_inodes = UINT64_MAX;
        if (fstatfs(sb->disk_fd, &fs) == 0) {
                estimate = (uint64_t)(fs.f_blocks - fs.f_bfree) * (uint64_t)fs.f_bsize;
                /* Less the disk's own: its root, upper, work and what overlay keeps in work. */
                inodes = fs.f_files - fs.f_ffree > ROOTFS_DISK_OWN_INODES
                             ? fs.f_files - fs.f_ffree - ROOTFS_DISK_OWN_INODES
                             : 0;
                /* The most the copy can reach while the sandbox writes on: a
                 * full disk (and the layer below it). */
                most_bytes = (uint64_t)fs.f_blocks * (uint64_t)fs.f_bsize;
                most_inodes = fs.f_files;
        }
        _cleanup_close_ int parent = -1;
        if (sb->snapshot_id[0] != '\0') {
                char path[4096];
                snapshot_layer_path(sb->snapshot_id, path, sizeof(path));
                parent = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (parent < 0)
                        return nsbox_error(err, errno, "open the layer of snapshot %s", sb->snapshot_id);
                _cleanup_json_ json_t *meta = NULL;
                char why[256];
                if (snapshot_load(sb->snapshot_id, &meta, why, sizeof(why)) == 0) {
                        uint64_t below = (uint64_t)json_integer_value(json_object_get(meta, "size_bytes"));
                        estimate += below;
                        inodes += record_inodes(meta);
                        most_bytes = most_bytes > UINT64_MAX - below ? UINT64_MAX : most_bytes + below;
                        most_inodes = most_inodes > UINT64_MAX - record_inodes(meta)
                                          ? UINT64_MAX
                                          : most_inodes + record_inodes(meta);
                }
        }
        char stored_text[SIZE_FORMAT_MAX], most[SIZE_FORMAT_MAX], needs[SIZE_FORMAT_MAX];
        if (stored >= limit || estimate > limit - stored)
                return nsbox_error(
                    err, ENOSPC,
                    "snapshots and committed images hold %s of the %s of layer_disk_bytes; this "
                    "copy needs about %s (nsbox snapshot rm and nsbox image rm free some)",
                    size_format(stored, stored_text, sizeof(stored_text)),
                    size_format(limit, most, sizeof(most)), size_format(estimate, needs, sizeof(needs)));
        /* The inode bounds (root's copies count in all, not as a uid's):
         * the tightest one left bounds the copy, and a refusal names it. */
        char uid_held[64], all_held[64];
        snprintf(uid_held, sizeof(uid_held), "uid %u's snapshots and images", owner);
        snprintf(all_held, sizeof(all_held), "all snapshots and images");
        struct {
                const char *key, *held; /* NULL: a bound of this copy alone */
                uint64_t limit, used;
        } bounds[] = {
                { "layer_inodes_per_snapshot", NULL, nsboxd.config.layer_inodes_per_snapshot, 0 },
                { "layer_inodes_per_uid", uid_held,
                  owner != 0 ? nsboxd.config.layer_inodes_per_uid : UINT64_MAX, u.uid_inodes },
                { "layer_inodes", all_held, nsboxd.config.layer_inodes, u.inodes },
        };
        size_t b = 0;
        uint64_t inodes_left = UINT64_MAX;
        for (size_t i = 0; i < ARRAY_SIZE(bounds); i++) {
                uint64_t left = bounds[i].used >= bounds[i].limit ? 0 : bounds[i].limit - bounds[i].used;
                if (left < inodes_left) {
                        inodes_left = left;
                        b = i;
                }
        }
        char held[160] = "";
        if (bounds[b].held != NULL)
                snprintf(held, sizeof(held), "; %s hold %llu of %llu", bounds[b].held,
                         (unsigned long long)bounds[b].used, (unsigned long long)bounds[b].limit);
        if (inodes > inodes_left || inodes_left == 0)
                return nsbox_error(
                    err, EDQUOT,
                    "the copy would have about %llu inodes, more than the %llu left (limit %s%s)",
                    (unsigned long long)inodes, (unsigned long long)inodes_left, bounds[b].key, held);
        struct snapshot_copy *job = calloc(1, sizeof(*job));
        if (job == NULL)
                return nsbox_error(err, ENOMEM, "snapshot job");
        job->owner = owner;
        /* Each copy holds back the most it may write, not its estimate:
         * copies running side by side (up to SNAPSHOT_COPIES_PER_UID of a
         * uid, more of others) each grown to the bound left would pass it
         * together. */
        job->max_bytes = most_bytes < limit - stored ? most_bytes : limit - stored;
        job->max_inodes = most_inodes < inodes_left ? most_inodes : inodes_left;
        job->reserved = job->max_bytes;
        job->estimate = estimate;
        job->progress_to = progress_to;
        job->reserved_inodes = job->max_inodes;
        snprintf(job->inode_bound, sizeof(job->inode_bound), "more than the %llu inodes left (limit %s%s)",
                 (unsigned long long)inodes_left, bounds[b].key, held);
        job->upper_fd = fcntl(sb->disk_fd, F_DUPFD_CLOEXEC, 3);
        job->parent_fd = steal_fd(&parent);
        job->dst_fd = fcntl(dst_fd, F_DUPFD_CLOEXEC, 3);
        /* Shared uid mode: every sandbox has the same range, and layers keep host ids. */
        job->shift = !uidmode_shared();
        job->from_base = sb->host_uid_base;
        job->dists = dists;
        job->done = done;
        job->data = data;
        job->next = copies;
        copies = job;
        if (job->upper_fd < 0 || job->dst_fd < 0) {
                copy_forget(job);
                return nsbox_error(err, errno, "dup");
        }
        int keep[] = { job->upper_fd, job->parent_fd, job->dst_fd };
        struct fs_worker *worker = NULL;
        int r = fs_worker_start(keep, ARRAY_SIZE(keep), copy_run, copy_done, job, &worker, err);
        if (r < 0) {
                copy_forget(job);
                return r;
        }
        fs_worker_on_progress(worker, copy_told, job);
        return 0;
}

struct remove_job {
        char *dir;
        snapshot_copy_done_fn done;
        void *data;
};

static int remove_run(void *data, struct fs_worker_output *out, nsbox_error_t **err)
{
        struct remove_job *job = data;
        int r = rootfs_remove_dir(job->dir, err);
        if (r == 0)
                out->result = json_object();
        return r;
}

static void remove_done(void *data, int r, json_t *result, const char *message)
{
        struct remove_job *job = data;
        if (r < 0)
                log_error("remove %s: %s", job->dir, message);
        if (job->done != NULL)
                job->done(job->data, r, 0, NULL, message);
        json_decref(result);
        free(job->dir);
        free(job);
}

int snapshot_remove_dir_async(const char *dir, snapshot_copy_done_fn done, void *data, nsbox_error_t **err)
{
        struct remove_job *job = calloc(1, sizeof(*job));
        if (job == NULL || (job->dir = strdup(dir)) == NULL) {
                free(job);
                return nsbox_error(err, ENOMEM, "remove job");
        }
        job->done = done;
        job->data = data;
        const int keep[] = { -1 }; /* none: an empty keep[], not a null one */
        int r = fs_worker_start(keep, ARRAY_SIZE(keep), remove_run, remove_done, job, NULL, err);
        if (r < 0) {
                free(job->dir);
                free(job);
        }
        return r;
}

/* What a previous run left half-made or half-removed. */
static void remove_leftovers(const char *dir)
{
        DIR *d = opendir(dir);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (strncmp(de->d_name, ".tmp-", 5) != 0)
                        continue;
                char path[4096];
                _cleanup_error_ nsbox_error_t *err = NULL;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                log_info("removing %s, left by an earlier run", path);
                if (rootfs_remove_dir(path, &err) < 0)
                        log_warn("%s", err->message);
        }
        closedir(d);
}

int snapshots_init(nsbox_error_t **err)
{
        char dir[4096];
        snapshots_dir(dir, sizeof(dir));
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", dir);
        remove_leftovers(dir);
        snprintf(dir, sizeof(dir), "%s/images", nsboxd.config.state_dir);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return nsbox_error(err, errno, "mkdir %s", dir);
        remove_leftovers(dir);
        return 0;
}

/* sandbox.snapshot */

struct snapshot_request {
        struct rpc_request *req;
        char id[37];
        char sandbox_id[37];
        char image[64];
        char *name;
        bool remove_when_unused;
        uid_t owner;
        long long created_at_ms;
        char tmp[4096];
};

static void snapshot_request_free(struct snapshot_request *s)
{
        free(s->name);
        free(s);
}

static void snapshot_created(void *data, int r, uint64_t size, json_t *result, const char *message)
{
        struct snapshot_request *s = data;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (r < 0) {
                rootfs_remove_dir(s->tmp, NULL);
                rpc_reply_fail(s->req, snapshot_copy_error_kind(r), "snapshot of sandbox %s: %s",
                               s->sandbox_id, message);
                snapshot_request_free(s);
                return;
        }
        char created[40], path[4096], final[4096];
        format_timestamp(s->created_at_ms, created, sizeof(created));
        _cleanup_json_ json_t *meta = json_pack(
            "{s:s, s:s?, s:I, s:s, s:s, s:s, s:I, s:O?, s:s, s:b}", "snapshot_id", s->id, "name", s->name,
            "owner", (json_int_t)s->owner, "image", s->image, "sandbox_id", s->sandbox_id, "created_at",
            created, "size_bytes", (json_int_t)size, "inodes", json_object_get(result, "inodes"),
            "uid_isolation", uidmode_name(), "remove_when_unused", s->remove_when_unused);
        snprintf(path, sizeof(path), "%s/snapshot.json", s->tmp);
        snprintf(final, sizeof(final), "%s/snapshots/%s", nsboxd.config.state_dir, s->id);
        if (meta == NULL || json_file_replace(path, meta, JSON_COMPACT, true, &err) < 0 ||
            rename(s->tmp, final) < 0) {
                rootfs_remove_dir(s->tmp, NULL);
                rpc_reply_fail(s->req, "internal", "snapshot of sandbox %s: %s", s->sandbox_id,
                               err ? err->message : strerror(errno));
                snapshot_request_free(s);
                return;
        }
        log_limited(
            log_key_uid(s->owner).text, LOG_LEVEL_INFO,
            "snapshot %s: %llu bytes, %lld inodes of sandbox %s, for uid %u", s->id, (unsigned long long)size,
            (long long)json_integer_value(json_object_get(result, "inodes")), s->sandbox_id, s->owner);
        json_object_del(meta, "owner");
        json_object_del(meta, "uid_isolation");
        rpc_reply_result(s->req, json_incref(meta));
        snapshot_request_free(s);
}

/* A label for people: printable, bounded; never part of a path. */
static bool snapshot_name_valid(const char *name)
{
        size_t len = strlen(name);
        if (len == 0 || len > SNAPSHOT_NAME_MAX)
                return false;
        for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
                if (*p < 0x20 || *p == 0x7f)
                        return false;
        }
        return true;
}

static unsigned copies_of(uid_t uid)
{
        unsigned n = 0;
        for (struct snapshot_copy *c = copies; c != NULL; c = c->next)
                n += c->owner == uid;
        return n;
}

void snapshot_method_create(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "name", "remove_when_unused", "progress", NULL };
        bool progress = false;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        json_t *name = json_object_get(req->msg.params, "name");
        if (!rpc_get_bool(req, "progress", &progress))
                return;
        json_t *auto_remove = json_object_get(req->msg.params, "remove_when_unused");
        if (auto_remove != NULL && !json_is_boolean(auto_remove)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "remove_when_unused must be true or false");
                return;
        }
        if (name != NULL && !json_is_null(name) &&
            (!json_is_string(name) || !snapshot_name_valid(json_string_value(name)))) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params",
                                "name must be a string of 1 to %d printable characters", SNAPSHOT_NAME_MAX);
                return;
        }
        if (sb->state != SANDBOX_RUNNING) {
                rpc_reply_fail(req, "unavailable", "sandbox %s is %s", sb->id, sandbox_state_name(sb->state));
                return;
        }
        if (req->uid != 0) {
                struct usage u = { .uid = req->uid };
                snapshots_foreach(add_usage, &u);
                if (u.count + copies_of(req->uid) >= nsboxd.config.max_snapshots_per_uid) {
                        rpc_reply_fail(
                            req, "limit_reached",
                            "uid %u has %u snapshots, the most one user may have (max_snapshots_per_uid)",
                            req->uid, u.count);
                        return;
                }
        }
        struct snapshot_request *s = calloc(1, sizeof(*s));
        if (s == NULL || (json_is_string(name) && (s->name = strdup(json_string_value(name))) == NULL)) {
                free(s);
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        s->req = req;
        s->remove_when_unused = json_is_true(auto_remove);
        s->owner = req->uid;
        s->created_at_ms = now_realtime_ms();
        snprintf(s->sandbox_id, sizeof(s->sandbox_id), "%s", sb->id);
        snprintf(s->image, sizeof(s->image), "%s", sb->policy.image);
        uuid_t uuid;
        uuid_generate_random(uuid);
        uuid_unparse_lower(uuid, s->id);
        snprintf(s->tmp, sizeof(s->tmp), "%s/snapshots/.tmp-%s", nsboxd.config.state_dir, s->id);
        char layer[4096];
        snprintf(layer, sizeof(layer), "%s/layer", s->tmp);
        if (mkdir(s->tmp, 0700) < 0 || mkdir(layer, 0755) < 0) {
                rpc_reply_fail(req, "internal", "mkdir %s: %s", layer, strerror(errno));
                rootfs_remove_dir(s->tmp, NULL);
                snapshot_request_free(s);
                return;
        }
        _cleanup_close_ int dst = open(layer, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int r = dst < 0 ? nsbox_error(&err, errno, "open %s", layer)
                        : snapshot_copy_sandbox(sb, dst, req->uid, false, progress ? req : NULL,
                                                snapshot_created, s, &err);
        if (r < 0) {
                rootfs_remove_dir(s->tmp, NULL);
                rpc_reply_fail(req, snapshot_copy_error_kind(r), "%s", err->message);
                snapshot_request_free(s);
                return;
        }
        sandbox_touch(sb);
}

/* snapshot.list */

struct list_ctx {
        uid_t uid;
        json_t *list;
};

static void list_one(const char *id, json_t *meta, void *ctx)
{
        struct list_ctx *l = ctx;
        if (meta == NULL) {
                if (l->uid == 0)
                        json_array_append_new(l->list,
                                              json_pack("{s:s, s:b}", "snapshot_id", id, "damaged", 1));
                return;
        }
        if (l->uid != 0 && meta_owner(meta) != l->uid)
                return;
        json_t *entry = json_deep_copy(meta);
        json_object_del(entry, "uid_isolation");
        if (l->uid != 0)
                json_object_del(entry, "owner");
        json_object_set_new(entry, "sandboxes", json_integer(snapshot_users(id)));
        json_array_append_new(l->list, entry);
}

void snapshot_method_list(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { NULL };
        if (!rpc_check_fields(req, known))
                return;
        struct list_ctx l = { req->uid, json_array() };
        snapshots_foreach(list_one, &l);
        rpc_reply_result(req,
                         json_pack("{s:o, s:i}", "snapshots", l.list, "count", (int)json_array_size(l.list)));
}

/* Take snapshot id out of every listing and lookup at once (a rename);
 * its files go in a worker, then done(data) (done may be NULL). */
static int snapshot_discard(const char *id, snapshot_copy_done_fn done, void *data, nsbox_error_t **err)
{
        char path[4096], doomed[4096];
        snprintf(path, sizeof(path), "%s/snapshots/%s", nsboxd.config.state_dir, id);
        snprintf(doomed, sizeof(doomed), "%s/snapshots/.tmp-rm-%s", nsboxd.config.state_dir, id);
        if (rename(path, doomed) < 0)
                return nsbox_error(err, errno, "rename %s", path);
        _cleanup_error_ nsbox_error_t *async_err = NULL;
        if (snapshot_remove_dir_async(doomed, done, data, &async_err) < 0) {
                /* No worker free: remove it here, blocking for once. */
                _cleanup_error_ nsbox_error_t *now_err = NULL;
                int r = rootfs_remove_dir(doomed, &now_err);
                if (done != NULL)
                        done(data, r, 0, NULL, now_err ? now_err->message : NULL);
        }
        return 0;
}

/* A snapshot made for forks only (remove_when_unused, as `nsbox fork`
 * takes one) goes with the last sandbox made from it. */
static void discard_unused_one(const char *id, json_t *meta, void *why)
{
        if (meta == NULL || snapshot_users(id) > 0 ||
            !json_is_true(json_object_get(meta, "remove_when_unused")))
                return;
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (snapshot_discard(id, NULL, NULL, &err) < 0) {
                log_error("snapshot %s: not removed though unused: %s", id, err->message);
                return;
        }
        log_limited(log_key_uid(meta_owner(meta)).text, LOG_LEVEL_INFO,
                    "snapshot %s: removed, %s (it was taken for forks only)", id, (const char *)why);
}

static void discard_if_unused(const char *id, const char *why)
{
        char reason[256];
        _cleanup_json_ json_t *meta = NULL;
        if (snapshot_load(id, &meta, reason, sizeof(reason)) == 0)
                discard_unused_one(id, meta, (void *)why);
}

void snapshots_discard_unused(void)
{
        snapshots_foreach(discard_unused_one, "no sandbox made from it is left");
}

/* snapshot.remove */

struct remove_request {
        struct rpc_request *req;
        char id[37];
};

static void snapshot_removed(void *data, int r, uint64_t size, json_t *result, const char *message)
{
        struct remove_request *rr = data;
        if (r < 0)
                rpc_reply_fail(rr->req, "internal", "remove snapshot %s: %s", rr->id, message);
        else
                rpc_reply_result(rr->req, json_pack("{s:s, s:b}", "snapshot_id", rr->id, "removed", 1));
        free(rr);
}

void snapshot_method_remove(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "snapshot_id", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        if (!rpc_check_fields(req, known))
                return;
        json_t *v = json_object_get(req->msg.params, "snapshot_id");
        char id[37];
        /* A damaged snapshot has no known owner: root removes it. */
        if (req->uid == 0 && json_is_string(v) && snapshot_id_valid(json_string_value(v))) {
                snprintf(id, sizeof(id), "%s", json_string_value(v));
                char path[4096];
                struct stat st;
                snprintf(path, sizeof(path), "%s/snapshots/%s", nsboxd.config.state_dir, id);
                if (lstat(path, &st) < 0) {
                        rpc_reply_fail(req, "not_found", "no snapshot %s", id);
                        return;
                }
        } else {
                _cleanup_json_ json_t *meta = snapshot_lookup_reply(req, "snapshot_id", id);
                if (meta == NULL)
                        return;
        }
        unsigned users = snapshot_users(id);
        if (users > 0) {
                rpc_reply_fail(req, "busy",
                               "snapshot %s is the base of %u live sandbox(es); remove them first", id,
                               users);
                return;
        }
        struct remove_request *rr = calloc(1, sizeof(*rr));
        if (rr == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        rr->req = req;
        snprintf(rr->id, sizeof(rr->id), "%s", id);
        if (snapshot_discard(id, snapshot_removed, rr, &err) < 0) {
                rpc_reply_fail(req, "internal", "%s", err->message);
                free(rr);
                return;
        }
        log_limited(log_key_uid(req->uid).text, LOG_LEVEL_INFO, "snapshot %s: removed by uid %u", id,
                    req->uid);
}
