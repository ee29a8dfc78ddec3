/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON-RPC client of nsboxd (common/client.c) against a socket that answers as a broken or
 * confused nsboxd would: it never waits for an answer that cannot come. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "error.h"
#include "json_cleanup.h"

/* A client connected to a socket of our own in a fresh directory, and
 * our end of its connection, which answers as nsboxd would. */
struct pair {
        char dir[64], path[128];
        int server, peer;
        struct client *c;
};

static void pair_open(struct pair *p)
{
        snprintf(p->dir, sizeof(p->dir), "/tmp/nsbox-client-test-XXXXXX");
        assert_non_null(mkdtemp(p->dir));
        snprintf(p->path, sizeof(p->path), "%s/s.sock", p->dir);
        p->server = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", p->path);
        assert_int_equal(bind(p->server, (struct sockaddr *)&addr, sizeof(addr)), 0);
        assert_int_equal(listen(p->server, 4), 0);
        nsbox_error_t *err = NULL;
        assert_int_equal(client_connect(p->path, &p->c, &err), 0);
        p->peer = accept(p->server, NULL, NULL);
        assert_true(p->peer >= 0);
}

static void pair_answer(struct pair *p, const char *lines)
{
        assert_int_equal(write(p->peer, lines, strlen(lines)), (ssize_t)strlen(lines));
}

static void pair_close(struct pair *p)
{
        client_close(p->c);
        close(p->peer);
        close(p->server);
        unlink(p->path);
        rmdir(p->dir);
}

static void test_an_error_without_an_id_ends_the_wait(void **state)
{
        struct pair p;
        pair_open(&p);
        nsbox_error_t *err = NULL;
        /* What nsboxd answers a line it cannot parse: the request it held is lost. */
        /* A client that waited on would be killed by this, and the test with it. */
        alarm(10);
        const char *answer = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,"
                             "\"message\":\"parse error at column 2196: ':' expected\"}}\n";
        pair_answer(&p, answer);
        json_t *result = NULL, *error = NULL;
        int r = client_call(p.c, "server.info", NULL, NULL, NULL, &result, &error, &err);
        assert_true(r < 0);
        assert_null(result);
        assert_non_null(err);
        assert_non_null(strstr(err->message, "parse error at column 2196"));
        assert_int_equal(json_integer_value(json_object_get(error, "code")), -32700);
        alarm(0);
        json_decref(error);
        nsbox_error_free(&err);
        pair_close(&p);
}

static void test_an_answer_to_another_request_is_skipped(void **state)
{
        struct pair p;
        pair_open(&p);
        nsbox_error_t *err = NULL;
        const char *answers =
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32000,\"message\":\"not ours\"}}\n"
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n";
        pair_answer(&p, answers);
        json_t *result = NULL, *error = NULL;
        assert_int_equal(client_call(p.c, "server.info", NULL, NULL, NULL, &result, &error, &err), 0);
        assert_true(json_is_true(json_object_get(result, "ok")));
        json_decref(result);
        pair_close(&p);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_an_error_without_an_id_ends_the_wait),
                cmocka_unit_test(test_an_answer_to_another_request_is_skipped),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
