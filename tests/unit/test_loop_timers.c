/* SPDX-License-Identifier: Apache-2.0 */
/* The loop's timers (manager/loop.c): order of firing, cancel from a callback
 * (of itself, of another timer due in the same batch), re-adding and moving
 * from a callback, intervals, sub-millisecond times, thousands at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loop.h"

#define US 1000LL
#define MS LOOP_NS_PER_MS

struct record {
        int fired[20000];
        long long fired_ns[20000];
        int n;
};

struct probe {
        struct record *record;
        int id;
        struct loop_timer *timer;
        struct probe *victim; /* its timer is cancelled by this one's callback */
        int repeat_left;      /* re-added from its own callback this many times */
};

static void on_record(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct probe *p = data;
        p->record->fired_ns[p->record->n] = loop_now_ns();
        p->record->fired[p->record->n++] = p->id;
}

/* Run the loop until `want` callbacks ran, for 5 s at most. */
static void run_until(struct loop *loop, struct record *r, int want)
{
        long long give_up = loop_now_ns() + 5000 * MS;
        while (r->n < want && loop_now_ns() < give_up)
                assert_true(loop_run_once(loop, 100) >= 0);
        assert_int_equal(r->n, want);
}

/* Run the loop until at least `want` callbacks ran, for 5 s at most: for
 * a repeating timer, which fires again if the test is kept off the CPU
 * longer than its period (a loaded machine), so no exact count is due. */
static void run_until_at_least(struct loop *loop, struct record *r, int want)
{
        long long give_up = loop_now_ns() + 5000 * MS;
        while (r->n < want && loop_now_ns() < give_up)
                assert_true(loop_run_once(loop, 100) >= 0);
        assert_true(r->n >= want);
}

/* Run the loop for ms, whatever fires. */
static void run_for(struct loop *loop, long long ms)
{
        long long end = loop_now_ns() + ms * MS;
        while (loop_now_ns() < end)
                loop_run_once(loop, 1);
}

static void test_timers_fire_in_order_of_time_then_of_adding(void **state)
{
        struct loop *loop = loop_new();
        assert_non_null(loop);
        struct record *r = calloc(1, sizeof(*r));
        struct probe p[5];
        long long base = loop_now_ns();
        long long at[5] = { base + 30 * MS, base + 10 * MS, base + 20 * MS, base + 10 * MS, base + 5 * MS };
        for (int i = 0; i < 5; i++) {
                p[i] = (struct probe){ .record = r, .id = i };
                assert_non_null(loop_timer_add_ns(loop, at[i], 0, on_record, &p[i]));
        }
        run_until(loop, r, 5);
        int want[5] = { 4, 1, 3, 2, 0 };
        for (int i = 0; i < 5; i++) {
                assert_int_equal(r->fired[i], want[i]);
                assert_true(r->fired_ns[i] >= at[want[i]]);
        }
        run_for(loop, 20);
        assert_int_equal(r->n, 5); /* one-shot */
        free(r);
        loop_free(loop);
}

static void test_ms_times_are_those_of_the_monotonic_clock(void **state)
{
        struct loop *loop = loop_new();
        struct record *r = calloc(1, sizeof(*r));
        struct probe p = { .record = r, .id = 1 };
        long long at_ms = loop_now_ns() / MS + 15;
        assert_non_null(loop_timer_add(loop, at_ms, on_record, &p));
        run_until(loop, r, 1);
        assert_true(r->fired_ns[0] / MS >= at_ms);
        long long start = loop_now_ns();
        assert_non_null(loop_timer_add_in(loop, 7, on_record, &p));
        run_until(loop, r, 2);
        assert_true(r->fired_ns[1] - start >= 7 * MS);
        free(r);
        loop_free(loop);
}

static void test_a_cancelled_timer_never_fires(void **state)
{
        struct loop *loop = loop_new();
        struct record *r = calloc(1, sizeof(*r));
        struct probe p[3];
        struct loop_timer *t[3];
        for (int i = 0; i < 3; i++) {
                p[i] = (struct probe){ .record = r, .id = i };
                t[i] = loop_timer_add_in(loop, 5 + i, on_record, &p[i]);
                assert_non_null(t[i]);
        }
        loop_timer_cancel(loop, t[1]);
        loop_timer_cancel(loop, t[0]); /* the earliest, that the timerfd is armed for */
        loop_timer_cancel(loop, NULL);
        run_until(loop, r, 1);
        assert_int_equal(r->fired[0], 2);
        run_for(loop, 20);
        assert_int_equal(r->n, 1);
        free(r);
        loop_free(loop);
}

static void on_cancel_victim(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct probe *p = data;
        on_record(loop, timer, data);
        loop_timer_cancel(loop, p->victim->timer);
        p->victim->timer = NULL;
}

/* Both due when the timerfd expires: the first's callback ends the second
 * (an exec finishing ends another), which then must not run. */
static void test_cancel_of_another_due_timer_from_a_callback(void **state)
{
        struct loop *loop = loop_new();
        struct record *r = calloc(1, sizeof(*r));
        struct probe killer = { .record = r, .id = 1 }, victim = { .record = r, .id = 2 },
                     after = { .record = r, .id = 3 };
        killer.victim = &victim;
        long long at = loop_now_ns() + 5 * MS;
        assert_non_null(loop_timer_add_ns(loop, at, 0, on_cancel_victim, &killer));
        victim.timer = loop_timer_add_ns(loop, at, 0, on_record, &victim);
        assert_non_null(loop_timer_add_ns(loop, at + 1, 0, on_record, &after));
        run_until(loop, r, 2);
        assert_int_equal(r->fired[0], 1);
        assert_int_equal(r->fired[1], 3);
        assert_null(victim.timer);
        run_for(loop, 10);
        assert_int_equal(r->n, 2);
        free(r);
        loop_free(loop);
}

static void on_cancel_self(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct probe *p = data;
        on_record(loop, timer, data);
        assert_ptr_equal(p->timer, timer);
        loop_timer_cancel(loop, p->timer);
        p->timer = NULL;
}

/* A repeating timer cancelled from its own callback stops; its memory is
 * released after the callback (ASan: make asan). */
static void test_cancel_of_itself_from_its_callback(void **state)
{
        struct loop *loop = loop_new();
        struct record *r = calloc(1, sizeof(*r));
        struct probe p = { .record = r, .id = 1 };
        p.timer = loop_timer_add_ns(loop, loop_now_ns() + 2 * MS, 2 * MS, on_cancel_self, &p);
        assert_non_null(p.timer);
        run_until(loop, r, 1);
        run_for(loop, 15);
        assert_int_equal(r->n, 1);
        free(r);
        loop_free(loop);
}

static void on_readd(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct probe *p = data;
        on_record(loop, timer, data);
        p->timer = NULL; /* a one-shot: gone once this returns */
        if (p->repeat_left-- > 0) {
                p->timer = loop_timer_add_in(loop, 0, on_readd, p);
                assert_non_null(p->timer);
        }
}

/* A timer added from a callback, due at once, fires in the next batch: the
 * loop still serves its fds in between. */
static void test_readd_from_a_callback(void **state)
{
        struct loop *loop = loop_new();
        struct record *r = calloc(1, sizeof(*r));
        struct probe p = { .record = r, .id = 7, .repeat_left = 50 };
        p.timer = loop_timer_add_in(loop, 1, on_readd, &p);
        int batches = 0;
        long long give_up = loop_now_ns() + 5000 * MS;
        while (r->n < 51 && loop_now_ns() < give_up) {
                int before = r->n;
                loop_run_once(loop, 100);
                assert_true(r->n - before <= 1);
                batches++;
        }
        assert_int_equal(r->n, 51);
        assert_true(batches >= 51);
        assert_null(p.timer);
        run_for(loop, 5);
        assert_int_equal(r->n, 51);
        free(r);
        loop_free(loop);
}

static void on_move_self(struct loop *loop, struct loop_timer *timer, void *data)
{
        struct probe *p = data;
        on_record(loop, timer, data);
        if (p->repeat_left-- > 0)
                loop_timer_move_in(loop, timer, 2); /* kept: it fires again */
        else
                p->timer = NULL;
}

static void test_move_earlier_later_and_from_its_callback(void **state)
{
        struct loop *loop = loop_new();
        struct record *r = calloc(1, sizeof(*r));
        struct probe a = { .record = r, .id = 1 }, b = { .record = r, .id = 2 };
        long long now_ms = loop_now_ns() / MS;
        struct loop_timer *ta = loop_timer_add(loop, now_ms + 5, on_record, &a);
        struct loop_timer *tb = loop_timer_add(loop, now_ms + 500, on_record, &b);
        loop_timer_move(loop, tb, now_ms + 3); /* earlier than the armed one */
        loop_timer_move(loop, ta, now_ms + 10);
        run_until(loop, r, 2);
        assert_int_equal(r->fired[0], 2);
        assert_int_equal(r->fired[1], 1);

        struct probe c = { .record = r, .id = 3, .repeat_left = 3 };
        c.timer = loop_timer_add_in(loop, 1, on_move_self, &c);
        run_until(loop, r, 6);
        assert_null(c.timer);
        for (int i = 3; i < 6; i++)
                assert_true(r->fired_ns[i] - r->fired_ns[i - 1] >= 2 * MS);
        run_for(loop, 10);
        assert_int_equal(r->n, 6);
        free(r);
        loop_free(loop);
}

/* An interval keeps its grid (as a timerfd's it_interval) and a first
 * expiry under a ms, as sandbox_pause.c's first look after 100 us. */
static void test_intervals_and_sub_millisecond_times(void **state)
{
        struct loop *loop = loop_new();
        struct record *r = calloc(1, sizeof(*r));
        struct probe tick = { .record = r, .id = 1 }, late = { .record = r, .id = 2 };
        long long start = loop_now_ns();
        struct loop_timer *t = loop_timer_add_ns(loop, start + 100 * US, 3 * MS, on_record, &tick);
        assert_non_null(loop_timer_add_ns(loop, start + 1 * MS, 0, on_record, &late));
        run_until_at_least(loop, r, 2);
        assert_int_equal(r->fired[0], 1);
        assert_int_equal(r->fired[1], 2);
        assert_true(r->fired_ns[0] >= start + 100 * US);
        run_until_at_least(loop, r, 6);
        for (int i = 2; i < 6; i++) {
                assert_int_equal(r->fired[i], 1);
                assert_true(r->fired_ns[i] >= start + 100 * US + (i - 1) * 3 * MS);
        }
        loop_timer_cancel(loop, t);
        int fired = r->n;
        run_for(loop, 10);
        assert_int_equal(r->n, fired);
        free(r);
        loop_free(loop);
}

static int compare_ns(const void *a, const void *b)
{
        long long x = *(const long long *)a, y = *(const long long *)b;
        return x < y ? -1 : x > y;
}

/* An exec each at a thousand sandboxes and more: 20000 timers, a third
 * cancelled, the rest fire in order of their times. */
static void test_many_timers(void **state)
{
        enum { N = 20000 };
        struct loop *loop = loop_new();
        struct record *r = calloc(1, sizeof(*r));
        struct probe *p = calloc(N, sizeof(*p));
        long long *at = calloc(N, sizeof(*at));
        long long *want = calloc(N, sizeof(*want));
        srandom(28);
        long long base = loop_now_ns();
        for (int i = 0; i < N; i++) {
                p[i] = (struct probe){ .record = r, .id = i };
                at[i] = base + (random() % 40000) * US; /* within 40 ms, many due together */
                p[i].timer = loop_timer_add_ns(loop, at[i], 0, on_record, &p[i]);
                assert_non_null(p[i].timer);
        }
        int n_want = 0;
        for (int i = 0; i < N; i++) {
                if (i % 3 == 0)
                        loop_timer_cancel(loop, p[i].timer);
                else
                        want[n_want++] = at[i];
        }
        qsort(want, n_want, sizeof(*want), compare_ns);
        run_until(loop, r, n_want);
        for (int i = 0; i < n_want; i++) {
                assert_true(r->fired[i] % 3 != 0);
                assert_true(at[r->fired[i]] == want[i]);
                assert_true(r->fired_ns[i] >= want[i]);
                if (i > 0 && want[i] == want[i - 1])
                        assert_true(r->fired[i] > r->fired[i - 1]); /* ties: in order of adding */
        }
        run_for(loop, 10);
        assert_int_equal(r->n, n_want);
        free(want);
        free(at);
        free(p);
        free(r);
        loop_free(loop);
}

/* Timers still pending when the loop goes are released with it. */
static void test_loop_free_releases_pending_timers(void **state)
{
        struct loop *loop = loop_new();
        struct probe p = { 0 };
        for (int i = 0; i < 100; i++)
                assert_non_null(loop_timer_add_in(loop, 60000, on_record, &p));
        loop_free(loop);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_timers_fire_in_order_of_time_then_of_adding),
                cmocka_unit_test(test_ms_times_are_those_of_the_monotonic_clock),
                cmocka_unit_test(test_a_cancelled_timer_never_fires),
                cmocka_unit_test(test_cancel_of_another_due_timer_from_a_callback),
                cmocka_unit_test(test_cancel_of_itself_from_its_callback),
                cmocka_unit_test(test_readd_from_a_callback),
                cmocka_unit_test(test_move_earlier_later_and_from_its_callback),
                cmocka_unit_test(test_intervals_and_sub_millisecond_times),
                cmocka_unit_test(test_many_timers),
                cmocka_unit_test(test_loop_free_releases_pending_timers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
