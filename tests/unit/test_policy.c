/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.create's policy checks against what the operator allows: limits
 * within nsboxd's ceilings (max_memory_bytes, ...), env and labels within
 * their byte bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cleanup.h"
#include "policy.h"
#include "secrets.h"

static const struct policy_ceilings ceilings = {
        .memory_bytes = 1ull << 30,
        .disk_bytes = 2ull << 30,
        .pids = 1024,
        .cpus = 2,
};

/* Parse `text` with the ceilings above: 0, or the error's message in *why. */
static int parse(const char *text, const struct policy_ceilings *c, char *why, size_t why_len)
{
        struct sandbox_policy defaults, p;
        _cleanup_error_ nsbox_error_t *err = NULL;
        policy_defaults(&defaults);
        json_t *params = json_loads(text, 0, NULL);
        assert_non_null(params);
        int r = policy_from_json(&defaults, c, params, &p, &err);
        json_decref(params);
        if (r == 0) {
                policy_clear(&p);
                return 0;
        }
        assert_non_null(err);
        snprintf(why, why_len, "%s", err->message);
        return r;
}

static void test_limits_above_a_ceiling_name_it_and_its_config_key(void **state)
{
        static const struct {
                const char *params, *key;
        } above[] = {
                { "{\"limits\":{\"memory_bytes\":1099511627776}}", "max_memory_bytes" },
                { "{\"limits\":{\"disk_bytes\":1099511627776}}", "max_disk_bytes" },
                { "{\"limits\":{\"pids\":65536}}", "max_pids" },
                { "{\"limits\":{\"cpus\":2.5}}", "max_cpus" },
        };
        char why[512];
        for (size_t i = 0; i < ARRAY_SIZE(above); i++) {
                if (parse(above[i].params, &ceilings, why, sizeof(why)) == 0)
                        fail_msg("accepted %s", above[i].params);
                if (strstr(why, above[i].key) == NULL)
                        fail_msg("%s: \"%s\" does not name %s", above[i].params, why, above[i].key);
        }
        /* Without ceilings only the built-in bounds apply. */
        for (size_t i = 0; i < ARRAY_SIZE(above); i++)
                assert_int_equal(parse(above[i].params, NULL, why, sizeof(why)), 0);
}

static void test_limits_at_the_ceilings_are_accepted(void **state)
{
        char why[512];
        assert_int_equal(parse("{\"limits\":{\"memory_bytes\":1073741824,\"disk_bytes\":2147483648,"
                               "\"pids\":1024,\"cpus\":2}}",
                               &ceilings, why, sizeof(why)),
                         0);
        assert_int_equal(parse("{}", &ceilings, why, sizeof(why)), 0);
}

static void test_defaults_are_checked_against_the_ceilings(void **state)
{
        struct sandbox_policy defaults;
        policy_defaults(&defaults);
        _cleanup_error_ nsbox_error_t *err = NULL;
        assert_int_equal(policy_check_ceilings(&defaults.limits, &ceilings, "the default limits", &err), 0);
        struct policy_ceilings small = ceilings;
        small.memory_bytes = 64ull << 20;
        assert_true(policy_check_ceilings(&defaults.limits, &small, "the default limits", &err) < 0);
        assert_non_null(strstr(err->message, "the default limits.memory_bytes"));
        nsbox_error_free(&err);
        /* 0 is "no limit": above every ceiling. */
        struct sandbox_limits unlimited = defaults.limits;
        unlimited.pids = 0;
        assert_true(policy_check_ceilings(&unlimited, &ceilings, "the default limits", &err) < 0);
        assert_non_null(strstr(err->message, "max_pids"));
}

/* {"env":{...}} or {"labels":{...}} with one entry of the given sizes. */
static char *map_params(const char *field, size_t key_len, size_t value_len)
{
        char *key = malloc(key_len + 1), *value = malloc(value_len + 1);
        memset(key, 'K', key_len);
        key[key_len] = '\0';
        memset(value, 'v', value_len);
        value[value_len] = '\0';
        json_t *params = json_pack("{s:{s:s}}", field, key, value);
        char *text = json_dumps(params, 0);
        json_decref(params);
        free(key);
        free(value);
        return text;
}

static void test_env_and_label_sizes_are_bounded(void **state)
{
        char why[512];
        static const char *const fields[] = { "env", "labels" };
        for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
                char *ok = map_params(fields[i], POLICY_MAX_KEY_BYTES, POLICY_MAX_VALUE_BYTES);
                assert_int_equal(parse(ok, &ceilings, why, sizeof(why)), 0);
                free(ok);
                char *long_key = map_params(fields[i], POLICY_MAX_KEY_BYTES + 1, 1);
                assert_true(parse(long_key, &ceilings, why, sizeof(why)) < 0);
                assert_non_null(strstr(why, "more than 1024"));
                free(long_key);
                char *long_value = map_params(fields[i], 1, POLICY_MAX_VALUE_BYTES + 1);
                assert_true(parse(long_value, &ceilings, why, sizeof(why)) < 0);
                assert_non_null(strstr(why, "more than 65536"));
                free(long_value);
        }
}

static void test_env_and_labels_share_one_byte_budget(void **state)
{
        /* Four 60 KiB env values and one 60 KiB label: each is fine, 300 KiB
         * together is not (a 20 MiB env fails the same way). */
        json_t *env = json_object(), *labels = json_object();
        char *value = malloc(60 << 10 | 1);
        memset(value, 'v', 60 << 10);
        value[60 << 10] = '\0';
        for (int i = 0; i < 4; i++) {
                char key[8];
                snprintf(key, sizeof(key), "E%d", i);
                json_object_set_new(env, key, json_string(value));
        }
        json_object_set_new(labels, "l", json_string(value));
        free(value);
        json_t *params = json_pack("{s:O}", "env", env);
        char *text = json_dumps(params, 0);
        char why[512];
        assert_int_equal(parse(text, &ceilings, why, sizeof(why)), 0);
        free(text);
        json_object_set(params, "labels", labels);
        text = json_dumps(params, 0);
        assert_true(parse(text, &ceilings, why, sizeof(why)) < 0);
        assert_non_null(strstr(why, "env and labels hold more than 262144 bytes"));
        free(text);
        json_decref(params);
        json_decref(env);
        json_decref(labels);
}

static void test_mount_paths_must_be_clean_and_absolute(void **state)
{
        static const char *const good[] = { "/data", "/workspace/project", "/a/b.c/..d", "/x/.hidden" };
        static const char *const bad[] = { "",       "/",       "data", "/data/", "//data", "/a//b",
                                           "/a/./b", "/a/../b", "/..",  "/.",     "/a/.." };
        for (size_t i = 0; i < ARRAY_SIZE(good); i++)
                assert_true(policy_clean_absolute_path(good[i]));
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
                assert_false(policy_clean_absolute_path(bad[i]));
        char *long_path = malloc(POLICY_MAX_MOUNT_PATH + 2);
        long_path[0] = '/';
        memset(long_path + 1, 'a', POLICY_MAX_MOUNT_PATH);
        long_path[POLICY_MAX_MOUNT_PATH + 1] = '\0';
        assert_false(policy_clean_absolute_path(long_path));
        long_path[POLICY_MAX_MOUNT_PATH] = '\0';
        assert_true(policy_clean_absolute_path(long_path));
        free(long_path);
}

static void test_mounts_are_normalized_and_checked(void **state)
{
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *out = NULL;
        json_t *in = json_loads("[{\"volume\":\"v\",\"path\":\"/data\"},"
                                "{\"host_path\":\"/home/u/p\",\"path\":\"/w/p\"},"
                                "{\"host_path\":\"/home/u/q\",\"path\":\"/w/q\",\"read_only\":false}]",
                                0, NULL);
        assert_int_equal(policy_mounts_from_json(in, &out, &err), 0);
        /* A volume is writable, a host directory read-only, unless asked. */
        assert_false(json_is_true(json_object_get(json_array_get(out, 0), "read_only")));
        assert_true(json_is_true(json_object_get(json_array_get(out, 1), "read_only")));
        assert_false(json_is_true(json_object_get(json_array_get(out, 2), "read_only")));
        json_decref(in);
        json_decref(out);
        static const char *const bad[][2] = {
                { "{}", "must be an array" },
                { "[1]", "mounts[0] must be an object" },
                { "[{\"volume\":\"v\",\"path\":\"/sys/x\"}]", "under /proc, /sys or /dev" },
                { "[{\"volume\":\"../v\",\"path\":\"/x\"}]", "must be a volume name" },
                { "[{\"volume\":\"v\",\"path\":\"/x\"},{\"volume\":\"w\",\"path\":\"/x\"}]",
                  "mounts[1].path is mounts[0]'s too" },
                { "[{\"volume\":\"v\",\"host_path\":\"/h\",\"path\":\"/x\"}]", "one of volume or host_path" },
                { "[{\"host_path\":\"/h/../etc\",\"path\":\"/x\"}]", "host_path must be" },
                { "[{\"host_path\":\"/h\\u0000x\",\"path\":\"/x\"}]", "host_path must be" },
                { "[{\"volume\":\"v\",\"path\":\"/x\",\"rw\":true}]", "unknown field \"rw\" in mounts[0]" },
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                nsbox_error_free(&err);
                in = json_loads(bad[i][0], JSON_ALLOW_NUL, NULL);
                assert_non_null(in);
                assert_true(policy_mounts_from_json(in, &out, &err) < 0);
                assert_null(out);
                if (strstr(err->message, bad[i][1]) == NULL)
                        fail_msg("%s: %s", bad[i][0], err->message);
                json_decref(in);
        }
        char many[1024] = "[";
        for (int i = 0; i <= POLICY_MAX_MOUNTS; i++)
                snprintf(many + strlen(many), sizeof(many) - strlen(many),
                         "%s{\"volume\":\"v\",\"path\":\"/d%d\"}", i ? "," : "", i);
        strcat(many, "]");
        nsbox_error_free(&err);
        in = json_loads(many, 0, NULL);
        assert_true(policy_mounts_from_json(in, &out, &err) < 0);
        json_decref(in);
}

/* Live restore reads back what nsboxd kept: as strict as a client's
 * secrets, each placeholder one nsboxd makes, and kept as it was. */
static void test_kept_secrets_are_checked_as_a_create_and_keep_their_placeholders(void **state)
{
        static const char good[] = "nsbox-secret-0123456789abcdef0123456789abcdef";
        char text[512];
        snprintf(text, sizeof(text),
                 "{\"T\": {\"value\": \"v\", \"hosts\": [\"A.test\"], \"header\": \"X-K: {value}\", "
                 "\"placeholder\": \"%s\"}}",
                 good);
        _cleanup_error_ nsbox_error_t *err = NULL;
        json_t *in = json_loads(text, 0, NULL), *out = NULL;
        assert_int_equal(policy_secrets_from_kept(in, &out, &err), 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(out, "T"), "placeholder")),
                            good);
        assert_string_equal(
            json_string_value(json_array_get(json_object_get(json_object_get(out, "T"), "hosts"), 0)),
            "a.test");
        json_decref(in);
        json_decref(out);
        static const char *const bad[][2] = {
                { "[]", "secrets must be an object" },
                { "{\"T\": {\"value\": \"v\", \"hosts\": [\"a.test\"]}}", "placeholder" },
                { "{\"T\": {\"value\": \"v\", \"hosts\": [\"a.test\"], \"placeholder\": "
                  "\"nsbox-secret-xyz\"}}",
                  "placeholder" },
                { "{\"T\": {\"value\": \"v\", \"hosts\": [\"a.test\"], \"placeholder\": 1}}", "placeholder" },
                { "{\"T\": {\"value\": \"v\\r\\nX: y\", \"hosts\": [\"a.test\"], \"placeholder\": "
                  "\"nsbox-secret-0123456789abcdef0123456789abcdef\"}}",
                  "secrets.T.value" },
                { "{\"T\": {\"value\": \"v\", \"hosts\": [\"a.test\"], \"other\": 1, \"placeholder\": "
                  "\"nsbox-secret-0123456789abcdef0123456789abcdef\"}}",
                  "unknown field" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                nsbox_error_free(&err);
                in = json_loads(bad[i][0], 0, NULL);
                assert_non_null(in);
                assert_true(policy_secrets_from_kept(in, &out, &err) < 0);
                assert_null(out);
                if (strstr(err->message, bad[i][1]) == NULL)
                        fail_msg("%s: %s", bad[i][0], err->message);
                json_decref(in);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_limits_above_a_ceiling_name_it_and_its_config_key),
                cmocka_unit_test(test_limits_at_the_ceilings_are_accepted),
                cmocka_unit_test(test_defaults_are_checked_against_the_ceilings),
                cmocka_unit_test(test_env_and_label_sizes_are_bounded),
                cmocka_unit_test(test_env_and_labels_share_one_byte_budget),
                cmocka_unit_test(test_mount_paths_must_be_clean_and_absolute),
                cmocka_unit_test(test_mounts_are_normalized_and_checked),
                cmocka_unit_test(test_kept_secrets_are_checked_as_a_create_and_keep_their_placeholders),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
