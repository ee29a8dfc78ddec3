/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox stats, events and metrics: what sandboxes use, live (as docker
 * stats), nsboxd's lifecycle events as they happen, and its metrics. */
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "client.h"
#include "json_cleanup.h"
#include "jsonrpc.h"
#include "size.h"

enum { OPT_NO_STREAM = CLI_OPT_FIRST_FREE };

static void human_bytes(json_t *bytes, char *out, size_t len)
{
        if (json_is_integer(bytes) && json_integer_value(bytes) >= 0)
                size_format((uint64_t)json_integer_value(bytes), out, len);
        else
                snprintf(out, len, "-");
}

static long long now_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static json_t *stats_call(const struct cli *cli, struct client *c, const char *id)
{
        _cleanup_json_ json_t *params = id ? json_pack("{s:s}", "sandbox_id", id) : json_object();
        return cli_call(cli, c, "sandbox.stats", params);
}

static json_t *find_by_id(json_t *list, json_t *id)
{
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e)
        {
                if (json_equal(json_object_get(e, "sandbox_id"), id))
                        return e;
        }
        return NULL;
}

static double percent(json_t *part, json_t *whole)
{
        if (!json_is_integer(part) || !json_is_integer(whole) || json_integer_value(whole) <= 0)
                return -1;
        return 100.0 * (double)json_integer_value(part) / (double)json_integer_value(whole);
}

/* One table of `now`, with CPU % from the cpu time used since `before`. */
static void print_stats(json_t *before, json_t *now, long long elapsed_us)
{
        printf("%-12s  %-16s  %6s  %-23s  %6s  %-23s  %5s\n", "SANDBOX", "SESSION", "CPU %",
               "MEM USAGE / LIMIT", "MEM %", "DISK USAGE / LIMIT", "PIDS");
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(now, "sandboxes"), i, e)
        {
                json_t *id = json_object_get(e, "sandbox_id");
                json_t *then = find_by_id(json_object_get(before, "sandboxes"), id);
                char cpu[16] = "-", mem[16], mem_limit[16], disk[16], disk_limit[16], mem_pct[16] = "-",
                     pids[16] = "-";
                json_t *used = json_object_get(e, "cpu_usage_us");
                if (then != NULL && json_is_integer(used) &&
                    json_is_integer(json_object_get(then, "cpu_usage_us")) && elapsed_us > 0)
                        snprintf(cpu, sizeof(cpu), "%.1f",
                                 100.0 *
                                     (double)(json_integer_value(used) -
                                              json_integer_value(json_object_get(then, "cpu_usage_us"))) /
                                     (double)elapsed_us);
                human_bytes(json_object_get(e, "memory_bytes"), mem, sizeof(mem));
                human_bytes(json_object_get(e, "memory_limit_bytes"), mem_limit, sizeof(mem_limit));
                human_bytes(json_object_get(e, "disk_bytes"), disk, sizeof(disk));
                human_bytes(json_object_get(e, "disk_limit_bytes"), disk_limit, sizeof(disk_limit));
                double p =
                    percent(json_object_get(e, "memory_bytes"), json_object_get(e, "memory_limit_bytes"));
                if (p >= 0)
                        snprintf(mem_pct, sizeof(mem_pct), "%.1f", p);
                if (json_is_integer(json_object_get(e, "pids")))
                        snprintf(pids, sizeof(pids), "%lld",
                                 (long long)json_integer_value(json_object_get(e, "pids")));
                char mem_both[48], disk_both[48];
                snprintf(mem_both, sizeof(mem_both), "%s / %s", mem, mem_limit);
                snprintf(disk_both, sizeof(disk_both), "%s / %s", disk, disk_limit);
                const char *session = json_string_value(json_object_get(e, "session_id"));
                printf("%-12.12s  %-16.16s  %6s  %-23s  %6s  %-23s  %5s%s\n", json_string_value(id),
                       session ? session : "-", cpu, mem_both, mem_pct, disk_both, pids,
                       json_is_true(json_object_get(e, "paused")) ? "  (paused)" : "");
        }
        fflush(stdout);
}

int cmd_stats(const struct cli *cli, int argc, char **argv)
{
        static const struct option longopts[] = { { "no-stream", no_argument, NULL, OPT_NO_STREAM }, { 0 } };
        bool once = false;
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", longopts)) != -1) {
                if (opt < -1)
                        return cli_opt_exit(opt);
                once = true;
        }
        if (argc - optind > 1)
                return cli_usage_error(cli);
        const char *id = argc - optind == 1 ? argv[optind] : NULL;
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *before = stats_call(cli, c, id);
        if (before == NULL) {
                client_close(c);
                return EXIT_NSBOX_FAILED;
        }
        if (cli->json && once) {
                cli_print_json(before);
                client_close(c);
                return 0;
        }
        bool live = !once && isatty(STDOUT_FILENO);
        _cleanup_close_ int signals = live ? cli_catch_signals() : -1;
        long long then = now_us();
        int rc = 0;
        for (;;) {
                /* One second between samples (half one for a single table). */
                struct pollfd p = { .fd = signals, .events = POLLIN };
                if (poll(&p, signals >= 0 ? 1 : 0, live ? 1000 : 500) > 0)
                        break;
                json_t *now = stats_call(cli, c, id);
                if (now == NULL) {
                        rc = EXIT_NSBOX_FAILED;
                        break;
                }
                long long at = now_us();
                if (live)
                        fputs("\033[H\033[J", stdout);
                if (cli->json)
                        cli_print_json(now);
                else
                        print_stats(before, now, at - then);
                json_decref(before);
                before = now;
                then = at;
                if (!live)
                        break;
        }
        client_close(c);
        return rc;
}

static void print_event(const char *method, json_t *params, void *data)
{
        const struct cli *cli = data;
        /* The stream is open: said in --json, for scripts that must not miss an event they cause. */
        if (strcmp(method, "events.subscribed") == 0 && cli->json) {
                puts("{\"type\":\"events.subscribed\"}");
                fflush(stdout);
        }
        if (strcmp(method, "event") != 0)
                return;
        if (cli->json) {
                char *line = json_text(params, JSON_COMPACT, NULL);
                if (line != NULL)
                        puts(line);
                free(line);
        } else {
                json_t *reason = json_object_get(params, "reason");
                json_t *exec = json_object_get(params, "exec_id");
                printf("%s  %-16s  %.12s", json_string_value(json_object_get(params, "time")) ?: "",
                       json_string_value(json_object_get(params, "type")) ?: "",
                       json_string_value(json_object_get(params, "sandbox_id")) ?: "");
                if (json_is_string(exec))
                        printf("  exec %.12s", json_string_value(exec));
                if (json_is_integer(json_object_get(params, "exit_code")))
                        printf("  exit %lld",
                               (long long)json_integer_value(json_object_get(params, "exit_code")));
                if (json_is_true(json_object_get(params, "timed_out")))
                        printf("  (timed out)");
                if (json_is_string(reason))
                        printf("  %s", json_string_value(reason));
                if (json_is_integer(json_object_get(params, "dropped_before")))
                        printf("  (%lld events dropped before this one: read faster)",
                               (long long)json_integer_value(json_object_get(params, "dropped_before")));
                putchar('\n');
        }
        fflush(stdout);
}

int cmd_events(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (argc - optind > 1)
                return cli_usage_error(cli);
        struct client *c = cli_connect(cli);
        if (c == NULL)
                return EXIT_NSBOX_FAILED;
        _cleanup_json_ json_t *params =
            argc - optind == 1 ? json_pack("{s:s}", "sandbox_id", argv[optind]) : json_object();
        /* Answered only when nsboxd goes away (or refuses): until then each
         * event is printed as it comes. */
        _cleanup_json_ json_t *result =
            cli_call_notified(cli, c, "events.subscribe", params, print_event, (void *)cli);
        client_close(c);
        return result == NULL ? EXIT_NSBOX_FAILED : 0;
}

int cmd_metrics(const struct cli *cli, int argc, char **argv)
{
        int opt;
        optind = 1;
        while ((opt = cli_getopt(cli, argc, argv, "", NULL)) != -1)
                return cli_opt_exit(opt);
        if (argc != optind)
                return cli_usage_error(cli);
        _cleanup_json_ json_t *params = json_object();
        _cleanup_json_ json_t *result = cli_call_once(cli, "server.metrics", params);
        if (result == NULL)
                return EXIT_NSBOX_FAILED;
        fputs(json_string_value(json_object_get(result, "text")) ?: "", stdout);
        return 0;
}
