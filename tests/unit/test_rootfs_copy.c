/* SPDX-License-Identifier: Apache-2.0 */
/* rootfs_copy_layer's bounds: bytes (layer_disk_bytes) and inodes (the
 * layer_inodes bounds), counted in the walk that copies, which stops at the
 * bound. Empty files, symlinks, FIFOs and whiteouts cost no bytes: only
 * the inode count bounds them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "rootfs.h"

struct dirs {
        char base[64];
        int src, dst;
};

/* src: 10 empty files, a symlink, a FIFO, a whiteout, and a directory
 * with one 5000-byte file: 15 inodes, 4 KiB for the directory and 8 for
 * the file. */
static int setup(void **state)
{
        struct dirs *d = calloc(1, sizeof(*d));
        char path[128];
        snprintf(d->base, sizeof(d->base), "/tmp/nsbox-test-copy-XXXXXX");
        assert_non_null(mkdtemp(d->base));
        snprintf(path, sizeof(path), "%s/src", d->base);
        assert_int_equal(mkdir(path, 0755), 0);
        d->src = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        snprintf(path, sizeof(path), "%s/dst", d->base);
        assert_int_equal(mkdir(path, 0755), 0);
        d->dst = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        for (int i = 0; i < 10; i++) {
                char name[16];
                snprintf(name, sizeof(name), "empty%d", i);
                int fd = openat(d->src, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                assert_true(fd >= 0);
                close(fd);
        }
        assert_int_equal(symlinkat("empty0", d->src, "link"), 0);
        assert_int_equal(mknodat(d->src, "fifo", S_IFIFO | 0644, 0), 0);
        assert_int_equal(mknodat(d->src, "deleted", S_IFCHR | 0644, makedev(0, 0)), 0);
        assert_int_equal(mkdirat(d->src, "sub", 0755), 0);
        int fd = openat(d->src, "sub/data", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        char block[5000] = { 0 };
        assert_int_equal(write(fd, block, sizeof(block)), (ssize_t)sizeof(block));
        close(fd);
        *state = d;
        return 0;
}

static int teardown(void **state)
{
        struct dirs *d = *state;
        close(d->src);
        close(d->dst);
        assert_int_equal(rootfs_remove_dir(d->base, NULL), 0);
        free(d);
        return 0;
}

static unsigned entries(const struct dirs *d)
{
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "find %s/dst -mindepth 1 | wc -l", d->base);
        FILE *p = popen(cmd, "r");
        unsigned n = 0;
        assert_int_equal(fscanf(p, "%u", &n), 1);
        pclose(p);
        return n;
}

static void test_every_inode_is_counted_bytes_only_for_data(void **state)
{
        struct dirs *d = *state;
        struct rootfs_copy c = { 0 };
        assert_int_equal(rootfs_copy_layer(d->src, d->dst, &c), 0);
        rootfs_copy_done(&c);
        assert_int_equal(c.inodes, 15);
        assert_int_equal(c.bytes, 4096 + 8192);
        assert_int_equal(entries(d), 15);
}

static void test_the_copy_stops_at_max_inodes(void **state)
{
        struct dirs *d = *state;
        struct rootfs_copy c = { .max_inodes = 5 };
        assert_int_equal(rootfs_copy_layer(d->src, d->dst, &c), -EDQUOT);
        rootfs_copy_done(&c);
        assert_int_equal(c.inodes, 5);
        /* Never past the bound: the sixth inode was not made. */
        assert_int_equal(entries(d), 5);
}

static void test_a_merge_into_an_existing_directory_makes_no_inode(void **state)
{
        struct dirs *d = *state;
        struct rootfs_copy first = { 0 }, again = { .max_inodes = 14 };
        assert_int_equal(rootfs_copy_layer(d->src, d->dst, &first), 0);
        rootfs_copy_done(&first);
        assert_int_equal(unlinkat(d->dst, "sub/data", 0), 0);
        /* The copy reads src through a dup of the fd, which shares its offset. */
        assert_int_equal(lseek(d->src, 0, SEEK_SET), 0);
        /* sub is there: merged into, not made; its file and the 13 others are. */
        assert_int_equal(rootfs_copy_layer(d->src, d->dst, &again), 0);
        rootfs_copy_done(&again);
        assert_int_equal(again.inodes, 14);
}

static void test_the_byte_bound_still_holds(void **state)
{
        struct dirs *d = *state;
        struct rootfs_copy c = { .max_bytes = 8192 };
        assert_int_equal(rootfs_copy_layer(d->src, d->dst, &c), -ENOSPC);
        rootfs_copy_done(&c);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_every_inode_is_counted_bytes_only_for_data, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_the_copy_stops_at_max_inodes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_merge_into_an_existing_directory_makes_no_inode, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_the_byte_bound_still_holds, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
