/* SPDX-License-Identifier: Apache-2.0 */
/* envd's file watching (e2b_watch.h). Each watch is an fs.watch call on a
 * connection of its own, whose fs.event notifications become E2B's
 * FilesystemEvent. While waiting for them the thread also watches the
 * HTTP client (gone: the stream ends, and with its connection the watch)
 * and a keepalive timer, all through one epoll fd given to the client as
 * its interrupt. */
#include "e2b_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "e2b_wire.h"
#include "json_cleanup.h"
#include "nsboxd.h"
#include "reply.h"

static const char *event_type(const char *type)
{
        static const char *const map[][2] = {
                { "create", "EVENT_TYPE_CREATE" }, { "write", "EVENT_TYPE_WRITE" },
                { "remove", "EVENT_TYPE_REMOVE" }, { "rename", "EVENT_TYPE_RENAME" },
                { "chmod", "EVENT_TYPE_CHMOD" },
        };
        for (size_t i = 0; type != NULL && i < sizeof(map) / sizeof(map[0]); i++)
                if (strcmp(type, map[i][0]) == 0)
                        return map[i][1];
        return NULL;
}

/* FilesystemEvent of an fs.event, or NULL for one E2B has no word for. */
static json_t *filesystem_event(json_t *params)
{
        const char *type = event_type(json_string_value(json_object_get(params, "type")));
        const char *name = json_string_value(json_object_get(params, "name"));
        return type && name ? json_pack("{s:s, s:s}", "name", name, "type", type) : NULL;
}

/* One fs.watch on its own nsboxd connection. */
struct watch_call {
        struct client *c;
        long long id;
        int epoll_fd, event_fd;
        bool watching;
};

static void watch_call_close(struct watch_call *w)
{
        if (w->c != NULL)
                client_close(w->c);
        if (w->epoll_fd >= 0)
                close(w->epoll_fd);
        if (w->event_fd >= 0)
                close(w->event_fd);
        w->c = NULL;
        w->epoll_fd = w->event_fd = -1;
}

/* Connect, start fs.watch and wait for fs.watching. -EPROTO with *error on
 * nsboxd's refusal. `extra` fds (readable = stop waiting) join the epoll
 * set; `hangup_fd`, a socket, joins it for its peer's hang-up alone (bytes
 * its peer sends, a pipelined request, are no leaving). */
static int watch_call_start(struct watch_call *w, const struct http_request *r, const char *sandbox_id,
                            const char *path, bool recursive, const int *extra, size_t n_extra, int hangup_fd,
                            client_notify_cb notify, void *data, json_t **error, nsbox_error_t **err)
{
        *w = (struct watch_call){ .epoll_fd = -1, .event_fd = -1 };
        w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        w->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w->epoll_fd < 0 || w->event_fd < 0)
                return nsbox_error(err, errno, "watch");
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = w->event_fd };
        if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->event_fd, &ev) < 0)
                return nsbox_error(err, errno, "watch");
        for (size_t i = 0; i < n_extra; i++) {
                struct epoll_event x = { .events = EPOLLIN, .data.fd = extra[i] };
                if (extra[i] >= 0 && epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, extra[i], &x) < 0)
                        return nsbox_error(err, errno, "watch");
        }
        struct epoll_event hangup = { .events = EPOLLRDHUP, .data.fd = hangup_fd };
        if (hangup_fd >= 0 && epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, hangup_fd, &hangup) < 0)
                return nsbox_error(err, errno, "watch");
        int ret = http_nsboxd_connect(r, &w->c, error, err);
        if (ret < 0)
                return ret;
        client_set_interrupt_fd(w->c, w->epoll_fd);
        _cleanup_json_ json_t *params =
            json_pack("{s:s, s:s, s:b}", "sandbox_id", sandbox_id, "path", path, "recursive", recursive);
        if ((ret = client_send(w->c, "fs.watch", params, &w->id, err)) < 0)
                return ret;
        while (!w->watching) {
                _cleanup_json_ json_t *result = NULL;
                _cleanup_error_ nsbox_error_t *e = NULL;
                ret = client_wait(w->c, w->id, notify, data, &result, error, &e);
                if (ret == 0)
                        return nsbox_error(err, EPROTO, "the watch ended at once");
                if (ret != -EINTR) {
                        *err = steal_pointer(&e);
                        return ret;
                }
                uint64_t n;
                if (read(w->event_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
                        return nsbox_error(err, errno, "watch");
                /* the HTTP client left, or a stop: nothing more to wait for */
                struct epoll_event got;
                if (!w->watching && epoll_wait(w->epoll_fd, &got, 1, 0) > 0 && got.data.fd != w->event_fd)
                        return nsbox_error(err, ECONNABORTED, "the client left");
        }
        return 0;
}

/* ---- WatchDir: a stream ---- */

struct watch_stream {
        struct watch_call call;
        int http_fd, timer_fd;
        struct e2b_body body;
};

static void stream_notify(const char *method, json_t *params, void *data)
{
        struct watch_stream *s = data;
        if (strcmp(method, "fs.watching") == 0) {
                s->call.watching = true;
        } else if (strcmp(method, "fs.event") == 0) {
                json_t *event = filesystem_event(params);
                if (event != NULL) {
                        _cleanup_json_ json_t *message = json_pack("{s:o}", "filesystem", event);
                        e2b_envelope_append(&s->body.buf, &s->body.len, &s->body.cap, 0, message);
                }
        }
        uint64_t one = 1;
        if (write(s->call.event_fd, &one, sizeof(one)) < 0) {
                /* the counter is full: a wakeup is pending anyway */
        }
}

static void stream_end(struct watch_stream *s, json_t *error)
{
        _cleanup_json_ json_t *owned = error;
        e2b_envelope_append(&s->body.buf, &s->body.len, &s->body.cap, E2B_FLAG_END, error);
        s->body.done = true;
}

/* The next events, the end, or a keepalive when the timer fired; false
 * when the client left. */
static bool stream_more(void *data)
{
        struct watch_stream *s = data;
        _cleanup_json_ json_t *result = NULL, *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int r = client_wait(s->call.c, s->call.id, stream_notify, s, &result, &error, &err);
        if (r == 0) {
                stream_end(s, NULL); /* the directory or the sandbox is gone */
                return true;
        }
        if (r != -EINTR) {
                const char *m = error ? json_string_value(json_object_get(error, "message")) : NULL;
                stream_end(s, e2b_connect_error_json(e2b_connect_code(error), m     ? m
                                                                              : err ? err->message
                                                                                    : "error"));
                return true;
        }
        uint64_t n;
        if (read(s->call.event_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
                return false;
        struct epoll_event got[3];
        int k = epoll_wait(s->call.epoll_fd, got, 3, 0);
        for (int i = 0; i < k; i++) {
                if (got[i].data.fd == s->http_fd)
                        return false; /* the client left */
                if (got[i].data.fd == s->timer_fd) {
                        uint64_t ticks;
                        if (read(s->timer_fd, &ticks, sizeof(ticks)) > 0 && s->body.len == 0) {
                                _cleanup_json_ json_t *ka = json_pack("{s:{}}", "keepalive");
                                e2b_envelope_append(&s->body.buf, &s->body.len, &s->body.cap, 0, ka);
                        }
                }
        }
        return true;
}

static ssize_t stream_read(void *data, uint64_t pos, char *out, size_t max)
{
        struct watch_stream *s = data;
        return e2b_body_read(&s->body, out, max, stream_more, s);
}

static void stream_free(void *data)
{
        struct watch_stream *s = data;
        watch_call_close(&s->call);
        if (s->timer_fd >= 0)
                close(s->timer_fd);
        free(s->body.buf);
        free(s);
}

static enum MHD_Result reply_stream_error(struct http_request *r, const char *code, const char *message)
{
        char *buf = NULL;
        size_t len = 0, cap = 0;
        _cleanup_json_ json_t *e = e2b_connect_error_json(code, message);
        if (e2b_envelope_append(&buf, &len, &cap, E2B_FLAG_END, e) < 0)
                return MHD_NO;
        return http_reply_bytes(r, MHD_HTTP_OK, "application/connect+json", buf, len);
}

enum MHD_Result http_e2b_watch_dir(struct http_request *r, const char *sandbox_id, json_t *msg)
{
        const char *path = json_string_value(json_object_get(msg, "path"));
        if (path == NULL || *path == '\0')
                return reply_stream_error(r, "invalid_argument", "path must be a non-empty string");
        struct watch_stream *s = calloc(1, sizeof(*s));
        if (s == NULL)
                return MHD_NO;
        s->call.epoll_fd = s->call.event_fd = -1;
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(r->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        s->http_fd = info ? info->connect_fd : -1;
        const char *ping =
            MHD_lookup_connection_value(r->connection, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
        unsigned long seconds = ping ? strtoul(ping, NULL, 10) : 0;
        if (seconds < 1 || seconds > 60)
                seconds = 50;
        s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        struct itimerspec every = { .it_interval = { (time_t)seconds, 0 },
                                    .it_value = { (time_t)seconds, 0 } };
        if (s->timer_fd < 0 || timerfd_settime(s->timer_fd, 0, &every, NULL) < 0) {
                stream_free(s);
                return reply_stream_error(r, "internal", "out of resources");
        }
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int ret =
            watch_call_start(&s->call, r, sandbox_id, path, json_is_true(json_object_get(msg, "recursive")),
                             &s->timer_fd, 1, s->http_fd, stream_notify, s, &error, &err);
        if (ret < 0) {
                const char *m = error ? json_string_value(json_object_get(error, "message")) : NULL;
                enum MHD_Result reply = reply_stream_error(r, e2b_connect_code(error),
                                                           m     ? m
                                                           : err ? err->message
                                                                 : "error");
                stream_free(s);
                return reply;
        }
        /* start first, then any event that came with fs.watching */
        char *events = s->body.buf;
        size_t events_len = s->body.len;
        s->body.buf = NULL;
        s->body.len = s->body.cap = 0;
        _cleanup_json_ json_t *start = json_pack("{s:{}}", "start");
        int appended = e2b_envelope_append(&s->body.buf, &s->body.len, &s->body.cap, 0, start);
        char *both = appended == 0 ? realloc(s->body.buf, s->body.len + events_len) : NULL;
        if (both == NULL) {
                free(events);
                stream_free(s);
                return reply_stream_error(r, "internal", "out of memory");
        }
        if (events_len > 0)
                memcpy(both + s->body.len, events, events_len);
        free(events);
        s->body.buf = both;
        s->body.len += events_len;
        s->body.cap = s->body.len;
        return http_reply_stream(r, "application/connect+json", stream_read, s, stream_free);
}

/* ---- the polling watcher ---- */

struct watcher {
        char id[40];
        uid_t uid;
        char sandbox_id[E2B_MAX_SANDBOX_ID + 1];
        struct watch_call call;
        pthread_t thread;
        int stop_fd;    /* written to end the thread */
        json_t *events; /* FilesystemEvents since the last poll */
        unsigned long long lost;
        bool ended;
        char *end_message; /* why it ended, for the next poll */
        time_t last_poll;
        bool starting; /* counted against its owner, not yet watching: no call finds it */
        struct watcher *next;
};

static pthread_mutex_t watchers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watcher *watchers;

static void watcher_notify(const char *method, json_t *params, void *data)
{
        struct watcher *w = data;
        if (strcmp(method, "fs.watching") == 0) {
                w->call.watching = true;
                uint64_t one = 1;
                if (write(w->call.event_fd, &one, sizeof(one)) < 0) {
                        /* a wakeup is pending anyway */
                }
                return;
        }
        json_t *event = strcmp(method, "fs.event") == 0 ? filesystem_event(params) : NULL;
        if (event == NULL)
                return;
        pthread_mutex_lock(&watchers_lock);
        if (json_array_size(w->events) < E2B_WATCHER_MAX_EVENTS)
                json_array_append_new(w->events, event);
        else {
                w->lost++;
                json_decref(event);
        }
        pthread_mutex_unlock(&watchers_lock);
}

static void *watcher_main(void *data)
{
        struct watcher *w = data;
        for (;;) {
                _cleanup_json_ json_t *result = NULL, *error = NULL;
                _cleanup_error_ nsbox_error_t *err = NULL;
                int r = client_wait(w->call.c, w->call.id, watcher_notify, w, &result, &error, &err);
                if (r == -EINTR) {
                        uint64_t n;
                        if (read(w->call.event_fd, &n, sizeof(n)) < 0) {
                                /* nothing pending there: the stop */
                        }
                        if (read(w->stop_fd, &n, sizeof(n)) > 0)
                                break;
                        continue;
                }
                pthread_mutex_lock(&watchers_lock);
                w->ended = true;
                w->end_message = strdup(r == 0 ? "the watched directory is gone"
                                        : err  ? err->message
                                               : "error");
                pthread_mutex_unlock(&watchers_lock);
                break;
        }
        return NULL;
}

static void watcher_free(struct watcher *w)
{
        uint64_t one = 1;
        if (write(w->stop_fd, &one, sizeof(one)) < 0) {
                /* the thread ends on the client's close below too */
        }
        pthread_join(w->thread, NULL);
        watch_call_close(&w->call);
        close(w->stop_fd);
        json_decref(w->events);
        free(w->end_message);
        free(w);
}

/* Take out (under the lock) the watchers nobody polled for too long. */
static struct watcher *watchers_expired(time_t now)
{
        struct watcher *gone = NULL;
        for (struct watcher **p = &watchers; *p != NULL;) {
                struct watcher *w = *p;
                if (!w->starting && now - w->last_poll > E2B_WATCHER_IDLE_SECONDS) {
                        *p = w->next;
                        w->next = gone;
                        gone = w;
                } else {
                        p = &w->next;
                }
        }
        return gone;
}

static void free_list(struct watcher *w)
{
        while (w != NULL) {
                struct watcher *next = w->next;
                watcher_free(w);
                w = next;
        }
}

static enum MHD_Result create_watcher(struct http_request *r, const char *sandbox_id, json_t *msg)
{
        const char *path = json_string_value(json_object_get(msg, "path"));
        if (path == NULL || *path == '\0')
                return e2b_reply_connect_error(r, "invalid_argument", "path must be a non-empty string");
        struct watcher *w = calloc(1, sizeof(*w));
        if (w == NULL)
                return MHD_NO;
        w->uid = r->uid;
        w->last_poll = time(NULL);
        w->starting = true;
        w->stop_fd = -1;
        w->call.epoll_fd = w->call.event_fd = -1;
        snprintf(w->sandbox_id, sizeof(w->sandbox_id), "%s", sandbox_id);
        /* counted and listed under one lock: concurrent creates cannot pass the bound */
        pthread_mutex_lock(&watchers_lock);
        struct watcher *expired = watchers_expired(w->last_poll);
        unsigned mine = 0;
        for (struct watcher *o = watchers; o != NULL; o = o->next)
                mine += o->uid == r->uid;
        if (mine < E2B_WATCHERS_PER_OWNER) {
                w->next = watchers;
                watchers = w;
        }
        pthread_mutex_unlock(&watchers_lock);
        free_list(expired);
        if (mine >= E2B_WATCHERS_PER_OWNER) {
                free(w);
                return e2b_reply_connect_error(r, "resource_exhausted",
                                               "%u watchers are open already, the most one owner may have",
                                               mine);
        }
        w->events = json_array();
        uint64_t random[2];
        int urandom = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        bool random_ok = urandom >= 0 && read(urandom, random, sizeof(random)) == sizeof(random);
        if (urandom >= 0)
                close(urandom);
        snprintf(w->id, sizeof(w->id), "%016llx%016llx", (unsigned long long)random[0],
                 (unsigned long long)random[1]);
        w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        _cleanup_json_ json_t *error = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int ret = !random_ok || w->stop_fd < 0
                      ? nsbox_error(&err, EIO, "out of resources")
                      : watch_call_start(&w->call, r, sandbox_id, path,
                                         json_is_true(json_object_get(msg, "recursive")), &w->stop_fd, 1, -1,
                                         watcher_notify, w, &error, &err);
        if (ret == 0 && pthread_create(&w->thread, NULL, watcher_main, w) != 0)
                ret = nsbox_error(&err, EAGAIN, "cannot start a thread");
        char id[sizeof(w->id)];
        memcpy(id, w->id, sizeof(id)); /* w is its poller's once listed */
        pthread_mutex_lock(&watchers_lock);
        if (ret < 0) {
                for (struct watcher **p = &watchers; *p != NULL; p = &(*p)->next)
                        if (*p == w) {
                                *p = w->next;
                                break;
                        }
        } else {
                w->starting = false;
        }
        pthread_mutex_unlock(&watchers_lock);
        if (ret < 0) {
                watch_call_close(&w->call);
                if (w->stop_fd >= 0)
                        close(w->stop_fd);
                json_decref(w->events);
                free(w);
                return e2b_reply_connect_rpc_error(r, error, err);
        }
        return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:s}", "watcherId", id));
}

/* The owner's watcher of this sandbox with this id, under the lock. */
static struct watcher **find(struct http_request *r, const char *sandbox_id, const char *id)
{
        for (struct watcher **p = &watchers; *p != NULL; p = &(*p)->next)
                if (!(*p)->starting && (*p)->uid == r->uid && strcmp((*p)->sandbox_id, sandbox_id) == 0 &&
                    id != NULL && strcmp((*p)->id, id) == 0)
                        return p;
        return NULL;
}

enum MHD_Result http_e2b_watcher(struct http_request *r, const char *sandbox_id, const char *method,
                                 json_t *msg)
{
        if (strcmp(method, "CreateWatcher") == 0)
                return create_watcher(r, sandbox_id, msg);
        /* proto3 JSON parsers take the field's proto name too */
        const char *id = json_string_value(json_object_get(msg, "watcherId"));
        if (id == NULL)
                id = json_string_value(json_object_get(msg, "watcher_id"));
        pthread_mutex_lock(&watchers_lock);
        struct watcher *expired = watchers_expired(time(NULL));
        pthread_mutex_unlock(&watchers_lock);
        free_list(expired);
        pthread_mutex_lock(&watchers_lock);
        struct watcher **p = find(r, sandbox_id, id);
        if (p == NULL) {
                pthread_mutex_unlock(&watchers_lock);
                return e2b_reply_connect_error(r, "not_found", "no watcher %.64s", id ? id : "(none)");
        }
        struct watcher *w = *p;
        if (strcmp(method, "RemoveWatcher") == 0) {
                *p = w->next;
                pthread_mutex_unlock(&watchers_lock);
                watcher_free(w);
                return http_reply_json(r, MHD_HTTP_OK, json_object());
        }
        json_t *events = w->events;
        w->events = json_array();
        w->last_poll = time(NULL);
        bool ended = w->ended && json_array_size(events) == 0;
        _cleanup_free_ char *why = ended && w->end_message ? strdup(w->end_message) : NULL;
        pthread_mutex_unlock(&watchers_lock);
        if (ended) {
                json_decref(events);
                return e2b_reply_connect_error(r, "not_found", "the watcher ended: %s", why ? why : "gone");
        }
        return http_reply_json(r, MHD_HTTP_OK, json_pack("{s:o}", "events", events));
}
