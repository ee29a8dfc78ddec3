/* SPDX-License-Identifier: Apache-2.0 */
/* nsbox-http's per-owner tables: an owner at its bound evicts its own
 * oldest ended entry, else its own oldest, never another owner's; freed
 * slots are reused, and the table grows only for owners below the bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "owned.h"

struct entry {
        struct owned head;
        int value;
        char *held;
};

static int cleared;

static void clear(void *e)
{
        free(((struct entry *)e)->held);
        cleared++;
}

static size_t count(struct owned_table *t, uid_t uid, int value)
{
        size_t n = 0;
        for (size_t i = 0; i < t->size; i++) {
                struct entry *e = owned_at(t, i);
                n += e->head.used && e->head.uid == uid && (value < 0 || e->value == value);
        }
        return n;
}

static struct entry *add(struct owned_table *t, uid_t uid, int value)
{
        struct entry *e = owned_add(t, uid);
        assert_non_null(e);
        assert_int_equal(e->value, 0);
        e->value = value;
        e->held = malloc(8);
        return e;
}

static void test_an_owner_at_its_bound_evicts_only_its_own_oldest(void **state)
{
        struct owned_table t = OWNED_TABLE(struct entry, 4, clear);
        cleared = 0;
        add(&t, 1, 100);
        for (int i = 1; i <= 4; i++)
                add(&t, 2, i);
        size_t size = t.size;
        for (int i = 5; i <= 40; i++) {
                add(&t, 2, i);
                assert_int_equal(count(&t, 2, -1), 4);
                assert_int_equal(count(&t, 2, i - 4), 0); /* its oldest went */
        }
        assert_int_equal(count(&t, 1, 100), 1); /* the other owner's stays */
        assert_int_equal(cleared, 36);
        assert_int_equal(t.size, size); /* no growth for an owner at its bound */
        for (size_t i = 0; i < t.size; i++)
                if (((struct entry *)owned_at(&t, i))->head.used)
                        owned_remove(&t, owned_at(&t, i));
        free(t.entries);
}

static void test_ended_entries_go_first_and_freed_slots_are_reused(void **state)
{
        struct owned_table t = OWNED_TABLE(struct entry, 3, clear);
        struct entry *e = add(&t, 7, 1);
        add(&t, 7, 2);
        e = add(&t, 7, 3);
        e->head.ended = true; /* the newest ended: it goes before the older running ones */
        add(&t, 7, 4);
        assert_int_equal(count(&t, 7, 3), 0);
        assert_int_equal(count(&t, 7, 1), 1);
        size_t size = t.size;
        for (size_t i = 0; i < t.size; i++) {
                struct entry *x = owned_at(&t, i);
                if (x->head.used && x->value == 1)
                        owned_remove(&t, x);
        }
        add(&t, 7, 5);
        assert_int_equal(count(&t, 7, -1), 3);
        assert_int_equal(count(&t, 7, 2), 1);
        assert_int_equal(t.size, size);
        for (size_t i = 0; i < t.size; i++)
                if (((struct entry *)owned_at(&t, i))->head.used)
                        owned_remove(&t, owned_at(&t, i));
        free(t.entries);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_an_owner_at_its_bound_evicts_only_its_own_oldest),
                cmocka_unit_test(test_ended_entries_go_first_and_freed_slots_are_reused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
