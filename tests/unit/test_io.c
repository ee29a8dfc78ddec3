/* SPDX-License-Identifier: Apache-2.0 */
/* common/io.c's fd helpers: sealing a memfd through the kernel's transient refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "io.h"

static int filled_memfd(void)
{
        int fd = memfd_create("io-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        assert_true(fd >= 0);
        char page[4096];
        memset(page, 'x', sizeof(page));
        assert_int_equal(write(fd, page, sizeof(page)), (ssize_t)sizeof(page));
        return fd;
}

static void test_a_sealed_memfd_takes_no_more_writes(void **state)
{
        int fd = filled_memfd();
        assert_int_equal(io_memfd_seal(fd), 0);
        assert_int_equal(write(fd, "y", 1), -1);
        assert_int_equal(errno, EPERM);
        assert_int_equal(ftruncate(fd, 1), -1);
        close(fd);
}

struct unmap_later {
        void *map;
        long ms;
};

static void *unmap_later(void *arg)
{
        struct unmap_later *u = arg;
        struct timespec t = { .tv_sec = u->ms / 1000, .tv_nsec = (u->ms % 1000) * 1000000L };
        nanosleep(&t, NULL);
        munmap(u->map, 4096);
        return NULL;
}

/* The write seal is refused (EBUSY) while the file is held writable: one that
 * is let go a little later gets sealed, where a single try failed. */
static void test_a_seal_refused_for_a_moment_is_tried_again(void **state)
{
        int fd = filled_memfd();
        struct unmap_later u = { mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), 50 };
        assert_true(u.map != MAP_FAILED);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, unmap_later, &u), 0);
        assert_int_equal(io_memfd_seal(fd), 0);
        pthread_join(t, NULL);
        close(fd);
}

/* Held for good: the refusal is said, after a bounded wait. */
static void test_a_seal_refused_for_good_is_said(void **state)
{
        int fd = filled_memfd();
        void *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        assert_true(map != MAP_FAILED);
        assert_int_equal(io_memfd_seal(fd), -EBUSY);
        munmap(map, 4096);
        close(fd);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_sealed_memfd_takes_no_more_writes),
                cmocka_unit_test(test_a_seal_refused_for_a_moment_is_tried_again),
                cmocka_unit_test(test_a_seal_refused_for_good_is_said),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
