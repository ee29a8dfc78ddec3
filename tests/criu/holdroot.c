/* SPDX-License-Identifier: Apache-2.0 */
/* holdroot PID DIR: clone the root mount of PID's mount namespace (the
 * sandbox's overlay) and attach it at DIR in ours, so that the overlay and its
 * upper layer outlive the sandbox's processes (CRIU kills them after a dump;
 * nsboxd detached every host mount of the sandbox once it was running).
 * A mount of another namespace cannot be bind-mounted from outside
 * (check_mnt): enter it, open_tree(OPEN_TREE_CLONE) there, come back, and
 * move_mount the detached clone here. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
        if (argc != 3) {
                fprintf(stderr, "usage: holdroot PID DIR\n");
                return 2;
        }
        char path[64];
        snprintf(path, sizeof(path), "/proc/%s/ns/mnt", argv[1]);
        int theirs = open(path, O_RDONLY | O_CLOEXEC);
        int ours = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
        snprintf(path, sizeof(path), "/proc/%s/root", argv[1]);
        int root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (theirs < 0 || ours < 0 || root < 0) {
                perror("open");
                return 1;
        }
        if (setns(theirs, CLONE_NEWNS) < 0) {
                perror("setns sandbox");
                return 1;
        }
        int tree = (int)syscall(SYS_open_tree, root, "", AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (tree < 0) {
                perror("open_tree");
                return 1;
        }
        if (setns(ours, CLONE_NEWNS) < 0) {
                perror("setns back");
                return 1;
        }
        if (syscall(SYS_move_mount, tree, "", AT_FDCWD, argv[2], MOVE_MOUNT_F_EMPTY_PATH) < 0) {
                perror("move_mount");
                return 1;
        }
        return 0;
}
