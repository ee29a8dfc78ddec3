/* SPDX-License-Identifier: Apache-2.0 */
/* fs.watch (fs_watch.h). Every watched directory is resolved inside the
 * sandbox's root as fs.* resolves paths (fs_stat_at: openat2 with
 * RESOLVE_IN_ROOT, no final symlink followed, no mount crossed), and the
 * inotify watch is put on that very directory through its O_PATH fd
 * (/proc/self/fd/N), so no path is resolved again from nsboxd's own root:
 * a symlink to / inside the sandbox never watches the host's /. The
 * kernel's queue is bounded (an overflow is said, IN_Q_OVERFLOW); a client
 * that does not read loses events, told so in the next one it gets. */
#include "fs_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "fs_api.h"
#include "fs_ops.h"
#include "fs_path.h"
#include "json_cleanup.h"
#include "log.h"
#include "relpath.h"
#include "loop.h"
#include "sandbox.h"

#define WATCH_MASK                                                                                      \
        (IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | \
         IN_MOVE_SELF | IN_EXCL_UNLINK | IN_ONLYDIR)
/* Bytes of inotify events read per wakeup, at most this many times: a busy
 * directory does not hold the loop. */
#define WATCH_READ_BUFFER      16384
#define WATCH_READS_PER_WAKEUP 8

struct watched_dir {
        int wd;
        char *rel; /* under the watched directory; "" for itself */
};

struct fs_watch {
        struct rpc_request *req;
        struct sandbox *sb;
        struct loop_source *source; /* the inotify fd */
        char *shown;                /* the watched directory, "/workspace/x" */
        bool recursive, dirs_full;
        struct watched_dir *dirs;
        size_t n_dirs, cap_dirs;
        unsigned long long sent, dropped;
        uint32_t staging_cookie; /* of a temporary file's move, its target's event is its write */
        struct fs_watch *next;
};

static struct fs_watch *watches;

static void watch_free(struct fs_watch *w)
{
        for (size_t i = 0; i < w->n_dirs; i++)
                free(w->dirs[i].rel);
        free(w->dirs);
        free(w->shown);
        free(w);
}

static void watch_unlink(struct fs_watch *w)
{
        for (struct fs_watch **p = &watches; *p != NULL; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        if (w->source != NULL)
                loop_remove(nsboxd.loop, w->source);
        w->source = NULL;
}

static json_t *watch_summary(const struct fs_watch *w, const char *ended)
{
        return json_pack("{s:s, s:s, s:I, s:I}", "path", w->shown, "ended", ended, "sent",
                         (json_int_t)w->sent, "dropped", (json_int_t)w->dropped);
}

/* The stream ends: the request is answered with what it sent and lost. */
static void watch_end(struct fs_watch *w, const char *why)
{
        watch_unlink(w);
        rpc_reply_result(w->req, watch_summary(w, why));
        watch_free(w);
}

static void watch_left(struct rpc_request *req, void *data)
{
        watch_end(data, "the client left");
}

static void watch_notify(struct fs_watch *w, json_t *event)
{
        _cleanup_json_ json_t *owned = event;
        if (event == NULL)
                return;
        if (rpc_request_backlogged(w->req)) {
                w->dropped++;
                return;
        }
        if (w->dropped > 0)
                json_object_set_new(event, "dropped_before", json_integer((json_int_t)w->dropped));
        json_object_set_new(event, "sandbox_id", json_string(w->sb->id));
        rpc_notify(w->req, "fs.event", event);
        w->sent++;
}

/* Watch the directory `rel` (under the watched one) of the sandbox path
 * `path`, held open at fd. */
/* Directories the sandbox's watches follow, this one's included. */
static size_t sandbox_dirs(const struct fs_watch *w)
{
        size_t n = w->n_dirs;
        for (const struct fs_watch *o = watches; o != NULL; o = o->next)
                if (o != w && o->sb == w->sb)
                        n += o->n_dirs;
        return n;
}

static int watch_add_fd(struct fs_watch *w, int fd, const char *rel, nsbox_error_t **err)
{
        if (sandbox_dirs(w) >= FS_WATCH_MAX_DIRS) {
                if (!w->dirs_full)
                        watch_notify(
                            w, json_pack(
                                   "{s:s, s:s, s:i}", "type", "overflow", "reason",
                                   "too many directories: the ones past the sandbox's bound are not watched",
                                   "max_directories", FS_WATCH_MAX_DIRS));
                w->dirs_full = true;
                return 0;
        }
        if (w->n_dirs == w->cap_dirs) {
                size_t cap = w->cap_dirs ? 2 * w->cap_dirs : 8;
                struct watched_dir *more = reallocarray(w->dirs, cap, sizeof(*more));
                if (more == NULL)
                        return nsbox_error(err, ENOMEM, "watch %s", w->shown);
                w->dirs = more;
                w->cap_dirs = cap;
        }
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        int wd = inotify_add_watch(w->source->fd, proc, WATCH_MASK);
        if (wd < 0)
                return nsbox_error(err, errno == ENOSPC ? EUSERS : errno, "watch %s%s%s%s", w->shown,
                                   *rel ? "/" : "", rel,
                                   errno == ENOSPC ? " (the host's inotify watches are used up)" : "");
        for (size_t i = 0; i < w->n_dirs; i++)
                if (w->dirs[i].wd == wd)
                        return 0; /* the same directory again (a hard link, a rename) */
        char *copy = strdup(rel);
        if (copy == NULL)
                return nsbox_error(err, ENOMEM, "watch %s", w->shown);
        w->dirs[w->n_dirs++] = (struct watched_dir){ .wd = wd, .rel = copy };
        return 0;
}

/* Resolve `rel` under the watched directory inside the sandbox's root, and
 * watch it (and, for a recursive watch, its directories) when it is a
 * directory; anything else is left alone. */
static int watch_add_tree(struct fs_watch *w, const struct fs_ctx *ctx, const char *rel, nsbox_error_t **err)
{
        _cleanup_free_ char *text = NULL;
        if (asprintf(&text, "%s%s%s", w->shown, *rel ? "/" : "", rel) < 0)
                return nsbox_error(err, ENOMEM, "watch %s", w->shown);
        struct fs_path path;
        int r = fs_path_parse(text, strlen(text), FS_PATH_WORKSPACE, &path, err);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = -1;
        struct stat st;
        if ((r = fs_stat_at(ctx, &path, &fd, &st, err)) < 0)
                return r;
        if (!S_ISDIR(st.st_mode))
                return *rel ? 0 : nsbox_error(err, ENOTDIR, "%s is not a directory", path.shown);
        if ((r = watch_add_fd(w, fd, rel, err)) < 0 || !w->recursive)
                return r;
        int dir = -1;
        char **names = NULL;
        size_t n = 0;
        bool cut = false;
        if (fs_list_names(ctx, &path, &dir, &names, &n, &cut, err) < 0)
                return 0; /* gone meanwhile: its parent's events say so */
        if (dir >= 0)
                close(dir);
        for (size_t i = 0; i < n && r == 0 && !w->dirs_full; i++) {
                _cleanup_free_ char *sub = NULL;
                if (asprintf(&sub, "%s%s%s", rel, *rel ? "/" : "", names[i]) < 0)
                        r = nsbox_error(err, ENOMEM, "watch %s", w->shown);
                else if (strlen(text) + strlen(names[i]) + 1 < FS_PATH_MAX)
                        r = watch_add_tree(w, ctx, sub, err);
        }
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        return r;
}

static const char *event_type(uint32_t mask)
{
        if (mask & (IN_CREATE | IN_MOVED_TO))
                return "create";
        if (mask & IN_MODIFY)
                return "write";
        if (mask & IN_DELETE)
                return "remove";
        if (mask & IN_MOVED_FROM)
                return "rename";
        if (mask & IN_ATTRIB)
                return "chmod";
        return NULL;
}

static struct watched_dir *dir_of(struct fs_watch *w, int wd)
{
        for (size_t i = 0; i < w->n_dirs; i++)
                if (w->dirs[i].wd == wd)
                        return &w->dirs[i];
        return NULL;
}

/* A directory made (or moved) under a recursive watch is watched too. */
static void watch_new_dir(struct fs_watch *w, const char *rel)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        struct fs_ctx ctx;
        if (fs_ctx_open(w->sb, &ctx, &err) < 0)
                return;
        if (watch_add_tree(w, &ctx, rel, &err) < 0)
                log_debug("sandbox %s: watch %s/%s: %s", w->sb->id, w->shown, rel, err->message);
        fs_ctx_close(&ctx);
}

/* One event; false when the watch has ended. */
static bool watch_event(struct fs_watch *w, const struct inotify_event *ev)
{
        if (ev->mask & IN_Q_OVERFLOW) {
                watch_notify(w, json_pack("{s:s, s:s}", "type", "overflow", "reason",
                                          "the kernel's event queue overflowed: events were lost"));
                return true;
        }
        struct watched_dir *d = dir_of(w, ev->wd);
        if (d == NULL)
                return true;
        if (ev->mask & IN_IGNORED) {
                if (d->rel[0] == '\0') {
                        watch_end(w, "the directory is gone");
                        return false;
                }
                free(d->rel);
                *d = w->dirs[--w->n_dirs];
                return true;
        }
        const char *type = event_type(ev->mask);
        if (type == NULL || ev->len == 0 || ev->name[0] == '\0')
                return true; /* a directory's own deletion or move: its parent tells */
        /* nsboxd's (and nsbox cp's) temporary files are not the user's: a
         * file written through the API is a new file under its own name,
         * created and written (a tree copied in, created), when the
         * temporary one takes its place. */
        if (staging_name_is(ev->name)) {
                if (ev->mask & IN_MOVED_FROM)
                        w->staging_cookie = ev->cookie;
                return true;
        }
        bool staged = (ev->mask & IN_MOVED_TO) && ev->cookie != 0 && ev->cookie == w->staging_cookie;
        if (staged)
                w->staging_cookie = 0;
        _cleanup_free_ char *rel = NULL;
        if (asprintf(&rel, "%s%s%s", d->rel, d->rel[0] ? "/" : "", ev->name) < 0)
                return true;
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s%s%s", w->shown, strcmp(w->shown, "/") == 0 ? "" : "/", rel) < 0)
                return true;
        bool is_dir = (ev->mask & IN_ISDIR) != 0;
        watch_notify(
            w, json_pack("{s:s, s:s, s:s, s:b}", "type", type, "name", rel, "path", path, "is_dir", is_dir));
        if (staged && !is_dir)
                watch_notify(w, json_pack("{s:s, s:s, s:s, s:b}", "type", "write", "name", rel, "path", path,
                                          "is_dir", false));
        if (w->recursive && is_dir && (ev->mask & (IN_CREATE | IN_MOVED_TO)))
                watch_new_dir(w, rel);
        return true;
}

static void watch_readable(struct loop_source *source, uint32_t events)
{
        struct fs_watch *w = source->data;
        char buf[WATCH_READ_BUFFER] __attribute__((aligned(__alignof__(struct inotify_event))));
        for (int k = 0; k < WATCH_READS_PER_WAKEUP; k++) {
                ssize_t n = read(source->fd, buf, sizeof(buf));
                if (n <= 0)
                        return;
                for (char *p = buf; p < buf + n;) {
                        const struct inotify_event *ev = (const struct inotify_event *)p;
                        p += sizeof(*ev) + ev->len;
                        if (!watch_event(w, ev))
                                return;
                }
        }
}

void fs_method_watch(struct rpc_request *req, struct sandbox *sb)
{
        static const char *const known[] = { "sandbox_id", "path", "recursive", NULL };
        _cleanup_error_ nsbox_error_t *err = NULL;
        bool recursive = false;
        json_t *path_json = json_object_get(req->msg.params, "path");
        if (!rpc_check_fields(req, known) || !rpc_get_bool(req, "recursive", &recursive))
                return;
        if (!json_is_string(path_json)) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "path must be a string");
                return;
        }
        unsigned mine = 0;
        for (struct fs_watch *o = watches; o != NULL; o = o->next)
                mine += o->sb == sb;
        if (mine >= FS_WATCH_PER_SANDBOX) {
                rpc_reply_fail(req, "limit_reached",
                               "sandbox %s has %u watches already, the most one may have", sb->id, mine);
                return;
        }
        struct fs_path path;
        if (fs_path_parse(json_string_value(path_json), json_string_length(path_json), FS_PATH_WORKSPACE,
                          &path, &err) < 0) {
                rpc_reply_error(req, JSONRPC_INVALID_PARAMS, "invalid_params", "%s", err->message);
                return;
        }
        struct fs_watch *w = calloc(1, sizeof(*w));
        int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (w == NULL || fd < 0 || (w->shown = strdup(path.shown)) == NULL) {
                int e = fd < 0 ? errno : ENOMEM;
                if (fd >= 0)
                        close(fd);
                if (w != NULL)
                        watch_free(w);
                rpc_reply_fail(req, e == EMFILE || e == ENFILE ? "limit_reached" : "internal",
                               "cannot watch: %s", strerror(e));
                return;
        }
        w->req = req;
        w->sb = sb;
        w->recursive = recursive;
        w->source = loop_add(nsboxd.loop, fd, EPOLLIN, watch_readable, w);
        if (w->source == NULL) {
                close(fd);
                watch_free(w);
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        struct fs_ctx ctx;
        int r = fs_ctx_open(sb, &ctx, &err);
        if (r == 0) {
                r = watch_add_tree(w, &ctx, "", &err);
                fs_ctx_close(&ctx);
        }
        if (r == 0 && w->n_dirs == 0)
                r = nsbox_error(&err, EUSERS,
                                "the watches of sandbox %s follow %d directories already, the most "
                                "one sandbox's may",
                                sb->id, FS_WATCH_MAX_DIRS);
        if (r < 0) {
                watch_unlink(w);
                watch_free(w);
                if (r == -EUSERS)
                        rpc_reply_fail(req, "limit_reached", "%s", err->message);
                else
                        fs_reply_failure(req, r, err);
                return;
        }
        w->next = watches;
        watches = w;
        rpc_request_on_disconnect(req, watch_left, w);
        /* From here on no change is missed: the client may act. */
        _cleanup_json_ json_t *hello =
            json_pack("{s:s, s:s, s:b, s:I}", "sandbox_id", sb->id, "path", w->shown, "recursive", recursive,
                      "directories", (json_int_t)w->n_dirs);
        rpc_notify(req, "fs.watching", hello);
}

void fs_watch_sandbox_gone(struct sandbox *sb)
{
        struct fs_watch *w = watches, *next;
        for (; w != NULL; w = next) {
                next = w->next;
                if (w->sb == sb)
                        watch_end(w, "the sandbox is gone");
        }
}
