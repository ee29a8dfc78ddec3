/* SPDX-License-Identifier: Apache-2.0 */
/* Seccomp profiles by name, compiled once into sealed memfds the sandboxes share. */
#include "profiles.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cleanup.h"
#include "daemon.h"
#include "io.h"
#include "log.h"
#include "policy.h"
#include "seccomp_profile.h"

struct profile {
        char name[64];
        int memfd;
        unsigned instructions;
        struct profile *next;
};

static struct profile *profiles;

static int seal_program(const struct seccomp_program *prog, const char *name, nsbox_error_t **err)
{
        _cleanup_close_ int fd = memfd_create("nsbox-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return nsbox_error(err, errno, "memfd for seccomp profile %s", name);
        size_t len = (size_t)prog->len * sizeof(prog->filter[0]);
        if (write(fd, prog->filter, len) != (ssize_t)len)
                return nsbox_error(err, errno, "write seccomp profile %s", name);
        int r = io_memfd_seal(fd);
        if (r < 0)
                return nsbox_error(err, -r, "seal seccomp profile %s", name);
        return steal_fd(&fd);
}

int profiles_get(const char *name, nsbox_error_t **err)
{
        for (struct profile *p = profiles; p != NULL; p = p->next) {
                if (strcmp(p->name, name) == 0)
                        return p->memfd;
        }
        if (!policy_valid_name(name))
                return nsbox_error(err, EINVAL, "invalid seccomp profile name");
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s.json", nsboxd.config.seccomp_dir, name);
        /* Only a missing file is "not found": nsboxd without host root may
         * simply not be let into the operator's dir, which must say so. */
        if (access(path, F_OK) < 0 && (errno == ENOENT || errno == ENOTDIR))
                return nsbox_error(err, ENOENT, "seccomp profile \"%s\" not found in %s", name,
                                   nsboxd.config.seccomp_dir);
        if (access(path, R_OK) < 0)
                return nsbox_error(err, errno, "seccomp profile \"%s\": cannot read %s", name, path);
        struct seccomp_program prog = { 0 };
        int r = seccomp_profile_compile_file(path, &prog, err);
        if (r < 0)
                return r;
        int fd = seal_program(&prog, name, err);
        unsigned instructions = prog.len;
        seccomp_program_free(&prog);
        if (fd < 0)
                return fd;
        struct profile *p = calloc(1, sizeof(*p));
        if (p == NULL) {
                close(fd);
                return nsbox_error(err, ENOMEM, "seccomp profile cache");
        }
        snprintf(p->name, sizeof(p->name), "%s", name);
        p->memfd = fd;
        p->instructions = instructions;
        p->next = profiles;
        profiles = p;
        log_info("seccomp profile %s: %u BPF instructions", name, instructions);
        return fd;
}

void profiles_clear(void)
{
        while (profiles != NULL) {
                struct profile *p = profiles;
                profiles = p->next;
                close(p->memfd);
                free(p);
        }
}
