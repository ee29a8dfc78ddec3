/* SPDX-License-Identifier: Apache-2.0 */
/* The network policy matcher: parse errors name the bad entry, names match
 * exactly or below a "*." entry, deny wins, unnamed traffic needs a CIDR,
 * and special addresses open only to an allow entry inside their range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cleanup.h"
#include "netpolicy.h"

static struct netpolicy *compile(const char *text)
{
        json_t *j = json_loads(text, 0, NULL);
        if (j == NULL)
                fail_msg("bad JSON in test: %s", text);
        struct netpolicy *p = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int r = netpolicy_parse(j, &p, &err);
        json_decref(j);
        if (r < 0)
                fail_msg("%s refused: %s", text, err->message);
        return p;
}

/* The error message of a refused policy, or fail. */
static void refused(const char *text, const char *needle)
{
        json_t *j = json_loads(text, JSON_ALLOW_NUL, NULL);
        assert_non_null(j);
        struct netpolicy *p = NULL;
        _cleanup_error_ nsbox_error_t *err = NULL;
        int r = netpolicy_parse(j, &p, &err);
        json_decref(j);
        if (r == 0) {
                netpolicy_free(p);
                fail_msg("accepted %s", text);
        }
        assert_non_null(err);
        if (strstr(err->message, needle) == NULL)
                fail_msg("%s: \"%s\" does not say \"%s\"", text, err->message, needle);
}

static uint32_t ip(const char *text)
{
        uint32_t a;
        if (!netpolicy_parse_ipv4(text, strlen(text), &a))
                fail_msg("bad address in test: %s", text);
        return a;
}

static enum netpolicy_verdict named(const struct netpolicy *p, const char *name, const char *addr)
{
        bool by_name;
        char norm[NETPOLICY_NAME_MAX + 1];
        assert_int_equal(netpolicy_name_normalize(name, strlen(name), norm), 0);
        return netpolicy_check_named(p, norm, ip(addr), NULL, 0, &by_name);
}

static enum netpolicy_verdict unnamed(const struct netpolicy *p, const char *addr)
{
        return netpolicy_check_address(p, ip(addr), NULL, 0);
}

static void test_bad_entries_are_refused_naming_the_entry(void **state)
{
        refused("[]", "not an object");
        refused("{\"allow\":\"x.com\"}", "\"allow\" is not an array");
        refused("{\"allow\":[\"a.com\", 3]}", "allow[1] is not a string");
        refused("{\"allow\":[\"a.com\"],\"deny\":[\"ok.com\",\"bad domain\"]}", "deny[1] \"bad domain\"");
        refused("{\"allow\":[\".\"]}", "allow[0] \".\"");
        refused("{\"allow\":[\"*.\"]}", "allow[0] \"*.\"");
        refused("{\"allow\":[\"*.*\"]}", "allow[0]");
        refused("{\"allow\":[\"a.*.com\"]}", "allow[0]");
        refused("{\"allow\":[\"a..com\"]}", "allow[0]");
        refused("{\"allow\":[\"1.2.3.256\"]}", "not an IPv4 address");
        refused("{\"allow\":[\"1.2.3\"]}", "not an IPv4 address");
        refused("{\"allow\":[\"01.2.3.4\"]}", "not an IPv4 address");
        refused("{\"allow\":[\"1.2.3.0/33\"]}", "prefix length");
        refused("{\"allow\":[\"1.2.3.0/\"]}", "prefix length");
        refused("{\"allow\":[\"1.2.3.0/08\"]}", "prefix length");
        refused("{\"allow\":[\"::1\"]}", "only IPv4");
        refused("{\"allow\":[\"2001:db8::/32\"]}", "only IPv4");
        refused("{\"allow\":[\"a\\u0000b.com\"]}", "NUL");
        refused("{\"allow\":[], \"other\":[]}", "unknown key \"other\"");
        char label[80];
        memset(label, 'a', 64);
        snprintf(label + 64, sizeof(label) - 64, ".com");
        char text[200];
        snprintf(text, sizeof(text), "{\"allow\":[\"%s\"]}", label);
        refused(text, "allow[0]");
        /* 256 entries are fine, 257 are not. */
        _cleanup_free_ char *many = malloc(257 * 16 + 32);
        strcpy(many, "{\"allow\":[");
        for (int i = 0; i < 257; i++)
                sprintf(many + strlen(many), "%s\"h%d.com\"", i ? "," : "", i);
        strcat(many, "]}");
        refused(many, "257 entries (at most 256)");
        char *last = strrchr(many, ',');
        strcpy(last, "]}");
        netpolicy_free(compile(many));
}

static void test_overlong_name_is_refused_and_253_bytes_accepted(void **state)
{
        char name[260], out[NETPOLICY_NAME_MAX + 1];
        /* 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 */
        memset(name, 'a', sizeof(name));
        name[63] = name[127] = name[191] = '.';
        assert_int_equal(netpolicy_name_normalize(name, 253, out), 0);
        assert_int_equal(netpolicy_name_normalize(name, 254, out), -EINVAL);
        name[253] = '.'; /* a trailing dot does not count */
        assert_int_equal(netpolicy_name_normalize(name, 254, out), 0);
        assert_int_equal(netpolicy_name_normalize(".", 1, out), -EINVAL);
        assert_int_equal(netpolicy_name_normalize("", 0, out), -EINVAL);
        assert_int_equal(netpolicy_name_normalize("a b", 3, out), -EINVAL);
        assert_int_equal(netpolicy_name_normalize("a\0b", 3, out), -EINVAL);
        assert_int_equal(netpolicy_name_normalize("\xc3\xa9.com", 6, out), -EINVAL);
        assert_int_equal(netpolicy_name_normalize("PyPI.Org.", 9, out), 0);
        assert_string_equal(out, "pypi.org");
}

static void test_exact_and_below_entries_match_case_insensitively(void **state)
{
        struct netpolicy *p = compile("{\"allow\":[\"PyPI.org.\", \"*.example.com\", \"*.net\"]}");
        assert_int_equal(netpolicy_check_name(p, "pypi.org"), NETPOLICY_ALLOW);
        assert_int_equal(named(p, "PYPI.ORG.", "203.0.113.5"), NETPOLICY_ALLOW);
        assert_int_equal(netpolicy_check_name(p, "www.pypi.org"), NETPOLICY_NOT_ALLOWED);
        assert_int_equal(netpolicy_check_name(p, "xpypi.org"), NETPOLICY_NOT_ALLOWED);
        assert_int_equal(netpolicy_check_name(p, "a.example.com"), NETPOLICY_ALLOW);
        assert_int_equal(netpolicy_check_name(p, "a.b.example.com"), NETPOLICY_ALLOW);
        /* "*.example.com" is below it, not itself, and not a suffix match. */
        assert_int_equal(netpolicy_check_name(p, "example.com"), NETPOLICY_NOT_ALLOWED);
        assert_int_equal(netpolicy_check_name(p, "badexample.com"), NETPOLICY_NOT_ALLOWED);
        /* "*.net" is every name under the TLD, but not "net". */
        assert_int_equal(netpolicy_check_name(p, "x.net"), NETPOLICY_ALLOW);
        assert_int_equal(netpolicy_check_name(p, "net"), NETPOLICY_NOT_ALLOWED);
        assert_int_equal(netpolicy_check_name(p, "com"), NETPOLICY_NOT_ALLOWED);
        netpolicy_free(p);

        p = compile("{\"allow\":[\"com\"]}");
        assert_int_equal(netpolicy_check_name(p, "com"), NETPOLICY_ALLOW);
        assert_int_equal(netpolicy_check_name(p, "x.com"), NETPOLICY_NOT_ALLOWED);
        netpolicy_free(p);
}

static void test_deny_wins_over_allow(void **state)
{
        struct netpolicy *p = compile("{\"allow\":[\"*\", \"0.0.0.0/0\"],"
                                      "\"deny\":[\"*.evil.com\", \"bad.org\", \"203.0.113.0/24\"]}");
        assert_int_equal(netpolicy_check_name(p, "good.org"), NETPOLICY_ALLOW);
        assert_int_equal(netpolicy_check_name(p, "x.evil.com"), NETPOLICY_DENIED);
        assert_int_equal(named(p, "Bad.Org", "198.51.100.1"), NETPOLICY_DENIED);
        assert_int_equal(named(p, "evil.com", "198.51.100.1"), NETPOLICY_ALLOW);
        /* A deny CIDR refuses a named connection to it, and unnamed ones. */
        assert_int_equal(named(p, "good.org", "203.0.113.9"), NETPOLICY_DENIED);
        assert_int_equal(unnamed(p, "203.0.113.9"), NETPOLICY_DENIED);
        assert_int_equal(unnamed(p, "198.51.100.1"), NETPOLICY_ALLOW);
        netpolicy_free(p);

        p = compile("{\"allow\":[\"a.com\"],\"deny\":[\"*\"]}");
        assert_int_equal(netpolicy_check_name(p, "a.com"), NETPOLICY_DENIED);
        netpolicy_free(p);
}

static void test_unnamed_needs_a_cidr_and_star_is_not_one(void **state)
{
        struct netpolicy *p = compile("{\"allow\":[\"*\"]}");
        assert_int_equal(unnamed(p, "198.51.100.1"), NETPOLICY_NOT_ALLOWED);
        bool by_name;
        assert_int_equal(netpolicy_check_named(p, "a.com", ip("198.51.100.1"), NULL, 0, &by_name),
                         NETPOLICY_ALLOW);
        assert_true(by_name);
        netpolicy_free(p);

        p = compile("{\"allow\":[\"198.51.100.0/24\", \"203.0.113.7\"]}");
        assert_int_equal(unnamed(p, "198.51.100.200"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "198.51.101.1"), NETPOLICY_NOT_ALLOWED);
        assert_int_equal(unnamed(p, "203.0.113.7"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "203.0.113.8"), NETPOLICY_NOT_ALLOWED);
        /* A name on an allowed address needs no name entry, nor an
         * address check. */
        assert_int_equal(netpolicy_check_named(p, "any.com", ip("198.51.100.3"), NULL, 0, &by_name),
                         NETPOLICY_ALLOW);
        assert_false(by_name);
        assert_int_equal(named(p, "any.com", "198.51.99.3"), NETPOLICY_NOT_ALLOWED);
        netpolicy_free(p);

        /* Host bits of a CIDR entry are ignored. */
        p = compile("{\"allow\":[\"198.51.100.77/24\"]}");
        assert_int_equal(unnamed(p, "198.51.100.1"), NETPOLICY_ALLOW);
        netpolicy_free(p);

        p = compile("{}");
        assert_int_equal(unnamed(p, "198.51.100.1"), NETPOLICY_NOT_ALLOWED);
        assert_int_equal(netpolicy_check_name(p, "a.com"), NETPOLICY_NOT_ALLOWED);
        netpolicy_free(p);
}

static void test_special_ranges_need_an_entry_inside_them(void **state)
{
        static const char *special[] = { "0.1.2.3",         "10.0.0.1",   "100.64.0.1",      "127.0.0.1",
                                         "169.254.169.254", "172.16.0.1", "172.31.255.255",  "192.0.0.8",
                                         "192.168.1.1",     "198.18.0.1", "198.19.255.1",    "224.0.0.1",
                                         "239.1.1.1",       "240.0.0.1",  "255.255.255.255", "168.63.129.16",
                                         "192.0.2.1",       "192.88.99.1" };
        struct netpolicy *p = compile("{\"allow\":[\"*\", \"0.0.0.0/0\"]}");
        for (size_t i = 0; i < ARRAY_SIZE(special); i++) {
                if (unnamed(p, special[i]) != NETPOLICY_PRIVATE)
                        fail_msg("0.0.0.0/0 opened %s", special[i]);
                if (named(p, "a.com", special[i]) != NETPOLICY_PRIVATE)
                        fail_msg("a name opened %s", special[i]);
        }
        /* Just outside the ranges. */
        assert_int_equal(unnamed(p, "100.128.0.1"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "172.32.0.1"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "198.20.0.1"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "192.0.1.1"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "168.63.129.15"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "168.63.129.17"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "192.88.98.1"), NETPOLICY_ALLOW);
        /* The TEST-NETs the tests use as the internet are not special. */
        assert_int_equal(unnamed(p, "198.51.100.1"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "203.0.113.1"), NETPOLICY_ALLOW);
        assert_false(netpolicy_unblocks_special(p, NULL, 0));
        netpolicy_free(p);

        /* Wider than a special range: opens nothing in it. */
        p = compile("{\"allow\":[\"160.0.0.0/3\"]}");
        assert_int_equal(unnamed(p, "169.254.169.254"), NETPOLICY_PRIVATE);
        assert_int_equal(unnamed(p, "160.1.1.1"), NETPOLICY_ALLOW);
        assert_false(netpolicy_unblocks_special(p, NULL, 0));
        netpolicy_free(p);

        /* Inside: opens exactly what it names. */
        p = compile("{\"allow\":[\"169.254.169.254\", \"10.1.0.0/16\"]}");
        assert_int_equal(unnamed(p, "169.254.169.254"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "169.254.169.253"), NETPOLICY_PRIVATE);
        assert_int_equal(unnamed(p, "10.1.200.3"), NETPOLICY_ALLOW);
        assert_int_equal(unnamed(p, "10.2.0.1"), NETPOLICY_PRIVATE);
        /* A special address is reported as such even where nothing allows it. */
        assert_int_equal(named(p, "a.com", "127.0.0.1"), NETPOLICY_PRIVATE);
        assert_true(netpolicy_unblocks_special(p, NULL, 0));
        netpolicy_free(p);

        /* Deny still wins inside an opened range. */
        p = compile("{\"allow\":[\"10.0.0.0/8\"],\"deny\":[\"10.9.0.0/16\"]}");
        assert_int_equal(unnamed(p, "10.9.1.1"), NETPOLICY_DENIED);
        assert_int_equal(unnamed(p, "10.8.1.1"), NETPOLICY_ALLOW);
        netpolicy_free(p);
}

static void test_no_entry_opens_the_hosts_loopback(void **state)
{
        static const char *const policies[] = { "{\"allow\":[\"127.0.0.0/8\"]}",
                                                "{\"allow\":[\"127.0.0.1\"]}",
                                                "{\"allow\":[\"127.1.2.0/24\", \"*\"]}" };
        for (size_t i = 0; i < ARRAY_SIZE(policies); i++) {
                struct netpolicy *p = compile(policies[i]);
                assert_true(netpolicy_allows_loopback(p));
                bool by_name;
                for (const char *a = "127.0.0.1"; a != NULL;
                     a = strcmp(a, "127.0.0.1") == 0 ? "127.1.2.3" : NULL) {
                        if (unnamed(p, a) != NETPOLICY_PRIVATE)
                                fail_msg("%s opened %s", policies[i], a);
                        if (netpolicy_check_named(p, "a.com", ip(a), NULL, 0, &by_name) != NETPOLICY_PRIVATE)
                                fail_msg("%s opened %s by name", policies[i], a);
                }
                netpolicy_free(p);
        }
        /* Wider than 127.0.0.0/8 (as 0.0.0.0/0) is not "in" it: nothing to refuse there. */
        struct netpolicy *p = compile("{\"allow\":[\"*\", \"0.0.0.0/0\", \"126.0.0.0/8\"]}");
        assert_false(netpolicy_allows_loopback(p));
        netpolicy_free(p);
}

static void test_host_own_addresses_are_special(void **state)
{
        uint32_t host[] = { ip("203.0.113.1"), ip("198.51.100.9") };
        struct netpolicy *p = compile("{\"allow\":[\"*\", \"0.0.0.0/0\", \"203.0.113.0/24\"]}");
        bool by_name;
        assert_int_equal(netpolicy_check_address(p, ip("203.0.113.1"), host, 2), NETPOLICY_PRIVATE);
        assert_int_equal(netpolicy_check_address(p, ip("198.51.100.9"), host, 2), NETPOLICY_PRIVATE);
        assert_int_equal(netpolicy_check_named(p, "a.com", ip("198.51.100.9"), host, 2, &by_name),
                         NETPOLICY_PRIVATE);
        assert_int_equal(netpolicy_check_address(p, ip("203.0.113.2"), host, 2), NETPOLICY_ALLOW);
        assert_false(netpolicy_unblocks_special(p, host, 2));
        netpolicy_free(p);

        p = compile("{\"allow\":[\"203.0.113.1\"]}");
        assert_int_equal(netpolicy_check_address(p, ip("203.0.113.1"), host, 2), NETPOLICY_ALLOW);
        assert_true(netpolicy_unblocks_special(p, host, 2));
        assert_false(netpolicy_unblocks_special(p, NULL, 0));
        netpolicy_free(p);
}

static void test_reasons_are_the_event_words(void **state)
{
        assert_string_equal(netpolicy_reason(NETPOLICY_NOT_ALLOWED), "not allowed");
        assert_string_equal(netpolicy_reason(NETPOLICY_DENIED), "denied");
        assert_string_equal(netpolicy_reason(NETPOLICY_PRIVATE), "private address");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_bad_entries_are_refused_naming_the_entry),
                cmocka_unit_test(test_overlong_name_is_refused_and_253_bytes_accepted),
                cmocka_unit_test(test_exact_and_below_entries_match_case_insensitively),
                cmocka_unit_test(test_deny_wins_over_allow),
                cmocka_unit_test(test_unnamed_needs_a_cidr_and_star_is_not_one),
                cmocka_unit_test(test_special_ranges_need_an_entry_inside_them),
                cmocka_unit_test(test_no_entry_opens_the_hosts_loopback),
                cmocka_unit_test(test_host_own_addresses_are_special),
                cmocka_unit_test(test_reasons_are_the_event_words),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
