/* SPDX-License-Identifier: Apache-2.0 */
/* tlscert_make: the server certificates nsbox-egress signs for a secret's
 * host with the sandbox's CA, for every host name a policy accepts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <openssl/x509v3.h>

#include "tlscert.h"

/* The leaf for host, signed by a fresh CA: it verifies against the CA and
 * its SAN names host. */
static void check_leaf_for(const char *host)
{
        EVP_PKEY *ca_key = tlscert_key(NULL), *leaf_key = tlscert_key(NULL);
        assert_non_null(ca_key);
        assert_non_null(leaf_key);
        X509 *ca = tlscert_make(ca_key, "nsbox sandbox CA", NULL, NULL, NULL);
        assert_non_null(ca);
        X509 *leaf = tlscert_make(leaf_key, host, ca, ca_key, NULL);
        assert_non_null(leaf);
        assert_int_equal(X509_verify(leaf, ca_key), 1);
        assert_int_equal(X509_check_host(leaf, host, strlen(host), 0, NULL), 1);
        assert_int_equal(X509_check_host(leaf, "other.example", 13, 0, NULL), 0);
        X509_free(leaf);
        X509_free(ca);
        EVP_PKEY_free(leaf_key);
        EVP_PKEY_free(ca_key);
}

static void test_a_short_host_name(void **state)
{
        check_leaf_for("api.example.com");
}

static void test_a_host_name_of_64_characters_and_longer(void **state)
{
        /* 64 fit a common name; past that only the SAN holds the name. */
        check_leaf_for("a2345678901234567890123456789012345678901234567890123456.example");
        check_leaf_for("a-rather-long-label-for-a-service.some-region-name.internal.corp.example.com");
        char longest[254];
        memset(longest, 'a', sizeof(longest) - 1);
        for (int i = 63; i < 253; i += 64)
                longest[i] = '.';
        longest[253] = '\0';
        check_leaf_for(longest);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_short_host_name),
                cmocka_unit_test(test_a_host_name_of_64_characters_and_longer),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
