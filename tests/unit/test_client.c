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

/* A listening socket in a fresh directory; *path is its path. */
static int listen_at(char *dir, char *path, size_t size)
{
        assert_non_null(mkdtemp(dir));
        snprintf(path, size, "%s/s.sock", dir);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
        assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
        assert_int_equal(listen(fd, 4), 0);
        return fd;
}

static void test_an_error_without_an_id_ends_the_wait(void **state)
{
        char dir[] = "/tmp/nsbox-client-test-XXXXXX", path[256];
        int server = listen_at(dir, path, sizeof(path));
        struct client *c = NULL;
        nsbox_error_t *err = NULL;
        assert_int_equal(client_connect(path, &c, &err), 0);
        int peer = accept(server, NULL, NULL);
        assert_true(peer >= 0);
        /* What nsboxd answers a line it cannot parse: the request it held is lost. */
        /* A client that waited on would be killed by this, and the test with it. */
        alarm(10);
        const char *answer = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,"
                             "\"message\":\"parse error at column 2196: ':' expected\"}}\n";
        assert_int_equal(write(peer, answer, strlen(answer)), (ssize_t)strlen(answer));
        json_t *result = NULL, *error = NULL;
        int r = client_call(c, "server.info", NULL, NULL, NULL, &result, &error, &err);
        assert_true(r < 0);
        assert_null(result);
        assert_non_null(err);
        assert_non_null(strstr(err->message, "parse error at column 2196"));
        assert_int_equal(json_integer_value(json_object_get(error, "code")), -32700);
        alarm(0);
        json_decref(error);
        nsbox_error_free(&err);
        client_close(c);
        close(peer);
        close(server);
        unlink(path);
        rmdir(dir);
}

static void test_an_answer_to_another_request_is_skipped(void **state)
{
        char dir[] = "/tmp/nsbox-client-test-XXXXXX", path[256];
        int server = listen_at(dir, path, sizeof(path));
        struct client *c = NULL;
        nsbox_error_t *err = NULL;
        assert_int_equal(client_connect(path, &c, &err), 0);
        int peer = accept(server, NULL, NULL);
        const char *answers =
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32000,\"message\":\"not ours\"}}\n"
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n";
        assert_int_equal(write(peer, answers, strlen(answers)), (ssize_t)strlen(answers));
        json_t *result = NULL, *error = NULL;
        assert_int_equal(client_call(c, "server.info", NULL, NULL, NULL, &result, &error, &err), 0);
        assert_true(json_is_true(json_object_get(result, "ok")));
        json_decref(result);
        client_close(c);
        close(peer);
        close(server);
        unlink(path);
        rmdir(dir);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_an_error_without_an_id_ends_the_wait),
                cmocka_unit_test(test_an_answer_to_another_request_is_skipped),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
