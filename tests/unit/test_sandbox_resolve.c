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
#include "removals.h"
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

/* The record of removals: what a call naming a removed sandbox is told. */
static void removed(const char *id, uid_t owner, const char *session, const char *why)
{
        struct sandbox sb;
        memset(&sb, 0, sizeof(sb));
        snprintf(sb.id, sizeof(sb.id), "%s", id);
        snprintf(sb.policy.session_id, sizeof(sb.policy.session_id), "%s", session);
        sb.owner = owner;
        sandbox_removal_record(&sb, "%s", why);
}

static void test_a_removal_is_found_by_its_owner_only(void **state)
{
        removed("dead0001-0000-4000-8000-000000000001", 2000, "agent", "idle for 5 min");
        const struct sandbox_removal *r = sandbox_removal_find("dead0001-0000-4000-8000-000000000001", 2000);
        assert_non_null(r);
        assert_string_equal(r->reason, "idle for 5 min");
        assert_ptr_equal(sandbox_removal_find("dead0001", 2000), r);
        assert_ptr_equal(sandbox_removal_find("agent", 2000), r);
        /* Another user learns nothing, by id, prefix or session; root, by full id. */
        assert_null(sandbox_removal_find("dead0001-0000-4000-8000-000000000001", 2001));
        assert_null(sandbox_removal_find("dead0001", 2001));
        assert_null(sandbox_removal_find("agent", 2001));
        assert_ptr_equal(sandbox_removal_find("dead0001-0000-4000-8000-000000000001", 0), r);
        char message[512];
        sandbox_removal_message(r, message, sizeof(message));
        assert_non_null(strstr(message, "(session agent) was removed at "));
        assert_non_null(strstr(message, "ago: idle for 5 min; its files are gone"));
        /* Its session's next sandbox hears of it once. */
        assert_ptr_equal(sandbox_removal_of_session("agent", 2000), r);
        assert_null(sandbox_removal_of_session("agent", 2000));
}

static void test_one_owner_keeps_at_most_32_removals_and_cannot_push_out_anothers(void **state)
{
        removed("feed0000-0000-4000-8000-000000000000", 3001, "", "removed by uid 3001 (sandbox.remove)");
        char id[37];
        for (unsigned k = 0; k < 300; k++) {
                snprintf(id, sizeof(id), "cafe%04x-0000-4000-8000-000000000000", k);
                removed(id, 3000, "", "removed by uid 3000 (sandbox.remove)");
        }
        json_t *mine = sandbox_removals_json(3000);
        assert_int_equal(json_array_size(mine), 32);
        /* Newest first. */
        assert_string_equal(json_string_value(json_object_get(json_array_get(mine, 0), "sandbox_id")),
                            "cafe012b-0000-4000-8000-000000000000");
        json_decref(mine);
        assert_non_null(sandbox_removal_find("feed0000-0000-4000-8000-000000000000", 3001));
        assert_null(sandbox_removal_find("cafe0000-0000-4000-8000-000000000000", 3000));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_a_unique_prefix_names_the_callers_sandbox, setup),
                cmocka_unit_test_setup(test_an_ambiguous_prefix_counts_only_the_callers_sandboxes, setup),
                cmocka_unit_test_setup(test_a_prefix_never_matches_another_owners_sandbox, setup),
                cmocka_unit_test_setup(test_short_and_pooled_and_exited_do_not_match, setup),
                cmocka_unit_test_setup(test_a_removal_is_found_by_its_owner_only, setup),
                cmocka_unit_test_setup(test_one_owner_keeps_at_most_32_removals_and_cannot_push_out_anothers,
                                       setup),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
