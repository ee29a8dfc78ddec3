/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox_resolve: docker-like id prefixes that only ever match the caller's
 * own sandboxes. The registry is filled by hand; no sandbox runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "daemon.h"
#include "sandbox.h"

static struct sandbox registry[4];

static void add(unsigned i, const char *id, uid_t owner)
{
        struct sandbox *sb = &registry[i];
        memset(sb, 0, sizeof(*sb));
        snprintf(sb->id, sizeof(sb->id), "%s", id);
        sb->owner = owner;
        sb->state = SANDBOX_RUNNING;
        sb->next = nsboxd.sandboxes;
        nsboxd.sandboxes = sb;
}

static int setup(void **state)
{
        nsboxd.sandboxes = NULL;
        add(0, "abcd1111-0000-4000-8000-000000000001", 1000);
        add(1, "abcd2222-0000-4000-8000-000000000002", 1000);
        add(2, "beef3333-0000-4000-8000-000000000003", 0);
        add(3, "abcd4444-0000-4000-8000-000000000004", 0);
        return 0;
}

static void test_a_unique_prefix_names_the_callers_sandbox(void **state)
{
        size_t matched;
        assert_ptr_equal(sandbox_resolve("abcd1", 1000, &matched), &registry[0]);
        assert_int_equal(matched, 1);
        assert_ptr_equal(sandbox_lookup("abcd2222", 1000), &registry[1]);
}

static void test_an_ambiguous_prefix_counts_only_the_callers_sandboxes(void **state)
{
        size_t matched;
        /* uid 1000 owns two "abcd" sandboxes; root's third is not counted. */
        assert_null(sandbox_resolve("abcd", 1000, &matched));
        assert_int_equal(matched, 2);
        assert_null(sandbox_lookup("abcd", 1000));
}

static void test_a_prefix_never_matches_another_owners_sandbox(void **state)
{
        size_t matched;
        assert_null(sandbox_resolve("beef", 1000, &matched));
        assert_int_equal(matched, 0);
        /* Root's prefixes match root's own sandboxes only, not uid 1000's. */
        assert_null(sandbox_resolve("abcd1", 0, &matched));
        assert_int_equal(matched, 0);
        assert_ptr_equal(sandbox_resolve("abcd", 0, &matched), &registry[3]);
        /* A full id still reaches any sandbox for root, as before. */
        assert_ptr_equal(sandbox_lookup("abcd1111-0000-4000-8000-000000000001", 0), &registry[0]);
}

static void test_short_and_pooled_and_exited_do_not_match(void **state)
{
        size_t matched;
        assert_null(sandbox_resolve("bee", 0, &matched));
        assert_null(sandbox_resolve("", 0, &matched));
        registry[2].pooled = true;
        assert_null(sandbox_resolve("beef", 0, &matched));
        registry[2].pooled = false;
        registry[2].state = SANDBOX_EXITED;
        assert_null(sandbox_resolve("beef", 0, &matched));
        registry[2].state = SANDBOX_RUNNING;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_a_unique_prefix_names_the_callers_sandbox, setup),
                cmocka_unit_test_setup(test_an_ambiguous_prefix_counts_only_the_callers_sandboxes, setup),
                cmocka_unit_test_setup(test_a_prefix_never_matches_another_owners_sandbox, setup),
                cmocka_unit_test_setup(test_short_and_pooled_and_exited_do_not_match, setup),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
