/* SPDX-License-Identifier: Apache-2.0 */
/* Lifecycle events (sandbox created, removed with its reason, paused,
 * resumed; exec started and ended) streamed to events.subscribe clients
 * as "event" notifications, each client seeing its own sandboxes only. */
#include "events.h"

#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "daemon.h"
#include "json_cleanup.h"
#include "log.h"
#include "metrics.h"

struct subscriber {
        struct rpc_request *req;
        char sandbox_id[37]; /* only this sandbox's events, or "" for all the caller may see */
        uint64_t sent, dropped;
        struct subscriber *next;
};

static struct subscriber *subscribers;

static void unsubscribe(struct subscriber *gone)
{
        for (struct subscriber **p = &subscribers; *p != NULL; p = &(*p)->next) {
                if (*p == gone) {
                        *p = gone->next;
                        return;
                }
        }
}

static void subscriber_left(struct rpc_request *req, void *data)
{
        struct subscriber *s = data;
        unsubscribe(s);
        rpc_reply_result(
            req, json_pack("{s:I, s:I}", "sent", (json_int_t)s->sent, "dropped", (json_int_t)s->dropped));
        free(s);
}

bool events_wanted(void)
{
        return subscribers != NULL;
}

void events_emit(const struct sandbox *sb, const char *type, const char *reason, json_t *fields)
{
        _cleanup_json_ json_t *owned = fields;
        metrics_event(type, reason);
        if (subscribers == NULL)
                return;
        char now[40];
        format_timestamp(now_realtime_ms(), now, sizeof(now));
        _cleanup_json_ json_t *event =
            json_pack("{s:s, s:s, s:s}", "time", now, "type", type, "sandbox_id", sb->id);
        if (event == NULL)
                return;
        if (sb->policy.session_id[0] != '\0')
                json_object_set_new(event, "session_id", json_string(sb->policy.session_id));
        if (reason != NULL)
                json_object_set_new(event, "reason", json_string(reason));
        if (owned != NULL)
                json_object_update(event, owned);
        _cleanup_json_ json_t *with_owner = json_deep_copy(event);
        if (with_owner != NULL)
                json_object_set_new(with_owner, "owner", json_integer(sb->owner));
        for (struct subscriber *s = subscribers; s != NULL; s = s->next) {
                if (s->req->uid != 0 && s->req->uid != sb->owner)
                        continue;
                if (s->sandbox_id[0] != '\0' && strcmp(s->sandbox_id, sb->id) != 0)
                        continue;
                /* A reader that does not keep up loses events, told so in
                 * the next one it gets: nsboxd never waits for it. */
                if (rpc_request_backlogged(s->req)) {
                        s->dropped++;
                        continue;
                }
                json_t *shown = s->req->uid == 0 && with_owner != NULL ? with_owner : event;
                if (s->dropped > 0) {
                        _cleanup_json_ json_t *copy = json_deep_copy(shown);
                        if (copy == NULL)
                                continue;
                        json_object_set_new(copy, "dropped_before", json_integer((json_int_t)s->dropped));
                        rpc_notify(s->req, "event", copy);
                } else {
                        rpc_notify(s->req, "event", shown);
                }
                s->sent++;
        }
}

void events_method_subscribe(struct rpc_request *req, struct sandbox *sb)
{
        json_t *id = json_object_get(req->msg.params, "sandbox_id");
        if (sb == NULL && id != NULL) {
                rpc_reply_fail(req, "not_found", "no sandbox %.64s",
                               json_string_value(id) ?: "(not a string)");
                return;
        }
        unsigned mine = 0;
        for (struct subscriber *s = subscribers; s != NULL; s = s->next)
                mine += s->req->uid == req->uid;
        if (mine >= EVENTS_SUBSCRIBERS_PER_UID) {
                rpc_reply_fail(req, "limit_reached",
                               "uid %u already has %u event streams open, the most one user may have",
                               req->uid, mine);
                return;
        }
        struct subscriber *s = calloc(1, sizeof(*s));
        if (s == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        s->req = req;
        if (sb != NULL)
                snprintf(s->sandbox_id, sizeof(s->sandbox_id), "%s", sb->id);
        s->next = subscribers;
        subscribers = s;
        rpc_request_on_disconnect(req, subscriber_left, s);
        /* The stream is open: a client knows from this that no event it
         * causes from now on can be missed. */
        _cleanup_json_ json_t *hello = json_pack("{s:s?}", "sandbox_id", sb ? sb->id : NULL);
        rpc_notify(req, "events.subscribed", hello);
}
