/* SPDX-License-Identifier: Apache-2.0 */
/* What a sandbox uses (sandbox.stats, sandbox.info's stats: memory, cpu,
 * processes, disk) and nsboxd's metrics in the Prometheus text format
 * (server.metrics): its counters and each visible sandbox's use. */
#include "observe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>

#include "cgroup.h"
#include "cleanup.h"
#include "daemon.h"
#include "json_cleanup.h"
#include "metrics.h"
#include "version.h"

json_t *sandbox_stats(struct sandbox *sb)
{
        json_t *stats = cgroup_sandbox_stats(sb->cgroup);
        if (stats == NULL)
                return NULL;
        json_object_set_new(stats, "memory_limit_bytes",
                            json_integer((json_int_t)sb->policy.limits.memory_bytes));
        struct statfs fs;
        if (sb->disk_fd >= 0 && fstatfs(sb->disk_fd, &fs) == 0) {
                uint64_t unit = (uint64_t)fs.f_frsize ? (uint64_t)fs.f_frsize : (uint64_t)fs.f_bsize;
                json_object_set_new(stats, "disk_bytes",
                                    json_integer((json_int_t)((fs.f_blocks - fs.f_bfree) * unit)));
                json_object_set_new(stats, "disk_limit_bytes",
                                    json_integer((json_int_t)(fs.f_blocks * unit)));
                json_object_set_new(stats, "disk_inodes",
                                    json_integer((json_int_t)(fs.f_files - fs.f_ffree)));
                json_object_set_new(stats, "disk_inodes_limit", json_integer((json_int_t)fs.f_files));
        } else {
                json_object_set_new(stats, "disk_bytes", json_null());
                json_object_set_new(stats, "disk_limit_bytes",
                                    json_integer((json_int_t)sb->policy.limits.disk_bytes));
        }
        return stats;
}

static bool visible(const struct sandbox *sb, uid_t uid)
{
        return !sb->pooled && sb->state == SANDBOX_RUNNING && (uid == 0 || sb->owner == uid);
}

void sandbox_method_stats(struct rpc_request *req, struct sandbox *sb)
{
        if (sb == NULL && json_object_get(req->msg.params, "sandbox_id") != NULL) {
                rpc_reply_fail(req, "not_found", "no sandbox %.64s",
                               json_string_value(json_object_get(req->msg.params, "sandbox_id"))
                                   ?: "(not a string)");
                return;
        }
        json_t *list = json_array();
        for (struct sandbox *s = nsboxd.sandboxes; s != NULL; s = s->next) {
                if ((sb != NULL && s != sb) || !visible(s, req->uid))
                        continue;
                json_t *entry = sandbox_stats(s);
                if (entry == NULL)
                        continue;
                json_object_set_new(entry, "sandbox_id", json_string(s->id));
                if (s->policy.session_id[0] != '\0')
                        json_object_set_new(entry, "session_id", json_string(s->policy.session_id));
                json_object_set_new(entry, "paused", json_boolean(s->paused));
                if (req->uid == 0)
                        json_object_set_new(entry, "owner", json_integer(s->owner));
                json_array_append_new(list, entry);
        }
        rpc_reply_result(req,
                         json_pack("{s:o, s:i}", "sandboxes", list, "count", (int)json_array_size(list)));
}

/* A label value as the text format wants it: \ " and newline escaped. */
static void write_label(FILE *out, const char *name, const char *value)
{
        fprintf(out, "%s=\"", name);
        for (const char *p = value; *p; p++) {
                if (*p == '\\' || *p == '"')
                        fprintf(out, "\\%c", *p);
                else if (*p == '\n')
                        fputs("\\n", out);
                else
                        fputc(*p, out);
        }
        fputc('"', out);
}

struct gauge {
        const char *name, *type, *help, *key;
        double scale;
};

static const struct gauge gauges[] = {
        { "nsbox_sandbox_memory_bytes", "gauge", "Memory the sandbox's cgroup holds", "memory_bytes", 1 },
        { "nsbox_sandbox_memory_limit_bytes", "gauge", "The sandbox's memory limit", "memory_limit_bytes",
          1 },
        { "nsbox_sandbox_cpu_seconds_total", "counter", "CPU time the sandbox's processes used",
          "cpu_usage_us", 1e-6 },
        { "nsbox_sandbox_processes", "gauge", "Processes in the sandbox", "pids", 1 },
        { "nsbox_sandbox_disk_bytes", "gauge", "Bytes the sandbox's writable layer holds", "disk_bytes", 1 },
        { "nsbox_sandbox_disk_limit_bytes", "gauge", "The sandbox's disk limit", "disk_limit_bytes", 1 },
        { "nsbox_sandbox_oom_kills_total", "counter", "Processes of the sandbox killed for memory",
          "oom_kills", 1 },
};

static void write_sandbox_labels(FILE *out, const struct sandbox *sb, bool owner)
{
        fputc('{', out);
        write_label(out, "sandbox_id", sb->id);
        if (sb->policy.session_id[0] != '\0') {
                fputc(',', out);
                write_label(out, "session_id", sb->policy.session_id);
        }
        if (owner)
                fprintf(out, ",owner=\"%u\"", (unsigned)sb->owner);
        fputc('}', out);
}

void server_method_metrics(struct rpc_request *req, struct sandbox *unused)
{
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        if (out == NULL) {
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        bool all = req->uid == 0;
        if (all) {
                fprintf(out,
                        "# HELP nsbox_info nsboxd's version\n# TYPE nsbox_info "
                        "gauge\nnsbox_info{version=\"%s\"} 1\n",
                        NSBOX_VERSION);
                unsigned running = 0, paused = 0;
                for (struct sandbox *s = nsboxd.sandboxes; s != NULL; s = s->next) {
                        if (!visible(s, 0))
                                continue;
                        running += !s->paused;
                        paused += s->paused;
                }
                fprintf(out,
                        "# HELP nsbox_sandboxes Sandboxes by state\n# TYPE nsbox_sandboxes gauge\n"
                        "nsbox_sandboxes{state=\"running\"} %u\nnsbox_sandboxes{state=\"paused\"} %u\n",
                        running, paused);
                metrics_write_counters(out);
        }
        /* One stats read per sandbox, then each gauge's lines together. */
        size_t n = 0;
        for (struct sandbox *s = nsboxd.sandboxes; s != NULL; s = s->next)
                n += visible(s, req->uid);
        struct sandbox **list = calloc(n ? n : 1, sizeof(*list));
        json_t **stats = calloc(n ? n : 1, sizeof(*stats));
        if (list == NULL || stats == NULL) {
                free(list);
                free(stats);
                fclose(out);
                free(text);
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        size_t i = 0;
        for (struct sandbox *s = nsboxd.sandboxes; s != NULL && i < n; s = s->next) {
                if (visible(s, req->uid)) {
                        list[i] = s;
                        stats[i++] = sandbox_stats(s);
                }
        }
        for (size_t g = 0; g < ARRAY_SIZE(gauges) && n > 0; g++) {
                fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", gauges[g].name, gauges[g].help, gauges[g].name,
                        gauges[g].type);
                for (i = 0; i < n; i++) {
                        json_t *v = json_object_get(stats[i], gauges[g].key);
                        if (!json_is_integer(v))
                                continue;
                        fputs(gauges[g].name, out);
                        write_sandbox_labels(out, list[i], all);
                        fprintf(out, " %.17g\n", (double)json_integer_value(v) * gauges[g].scale);
                }
        }
        for (i = 0; i < n; i++)
                json_decref(stats[i]);
        free(list);
        free(stats);
        if (fclose(out) != 0) {
                free(text);
                rpc_reply_fail(req, "internal", "out of memory");
                return;
        }
        rpc_reply_result(
            req, json_pack("{s:s, s:s%}", "content_type", "text/plain; version=0.0.4", "text", text, len));
        free(text);
}
