/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's secrets and secrets CA kept in a memfd its init holds, for the next nsboxd. */
#include "secrets_keep.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "json_cleanup.h"
#include "secrets.h"

#define PEM_MAX (64u << 10)

int secrets_keep_create(nsbox_error_t **err)
{
        /* A name that says nothing of what it holds: it shows in
         * /proc/PID/fd of whoever holds it. */
        int fd = memfd_create("nsbox-keep", MFD_CLOEXEC);
        return fd < 0 ? nsbox_error(err, errno, "memfd_create") : fd;
}

int secrets_keep_write(int fd, json_t *secrets, const struct egress_ca *ca, nsbox_error_t **err)
{
        if (secrets == NULL)
                return ftruncate(fd, 0) < 0 ? nsbox_error(err, errno, "empty the kept secrets") : 0;
        _cleanup_json_ json_t *kept = json_pack("{s:O}", "secrets", secrets);
        if (kept != NULL && ca != NULL && ca->cert_pem != NULL)
                json_object_set_new(kept, "ca",
                                    json_pack("{s:s, s:s}", "cert", ca->cert_pem, "key", ca->key_pem));
        char *text = kept != NULL ? json_dumps(kept, JSON_COMPACT) : NULL;
        if (text == NULL)
                return nsbox_error(err, ENOMEM, "keep the secrets");
        size_t len = strlen(text);
        int r = 0;
        if (len > SECRETS_KEEP_MAX)
                r = nsbox_error(err, EFBIG, "the secrets to keep are over %u bytes", SECRETS_KEEP_MAX);
        else if (pwrite(fd, text, len, 0) != (ssize_t)len || ftruncate(fd, (off_t)len) < 0)
                r = nsbox_error(err, errno ? errno : EIO, "write the kept secrets");
        explicit_bzero(text, len);
        free(text);
        return r;
}

static bool is_memfd(int fd)
{
        char link[64], target[16];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n < 0)
                return false;
        target[n] = '\0';
        return strncmp(target, "/memfd:", strlen("/memfd:")) == 0;
}

static char *pem_copy(json_t *pem, const char *begins)
{
        const char *text = json_string_value(pem);
        if (text == NULL || json_string_length(pem) > PEM_MAX || strncmp(text, begins, strlen(begins)) != 0 ||
            strlen(text) != json_string_length(pem))
                return NULL;
        return strdup(text);
}

static int parse_ca(json_t *kept, struct egress_ca *ca, nsbox_error_t **err)
{
        if (kept == NULL)
                return 0;
        size_t fields = json_is_object(kept) ? json_object_size(kept) : 0;
        ca->cert_pem = pem_copy(json_object_get(kept, "cert"), "-----BEGIN CERTIFICATE-----");
        ca->key_pem = pem_copy(json_object_get(kept, "key"), "-----BEGIN ");
        if (fields != 2 || ca->cert_pem == NULL || ca->key_pem == NULL) {
                egress_ca_clear(ca);
                return nsbox_invalid(err, "its kept secrets CA is not one nsboxd makes");
        }
        return 0;
}

int secrets_keep_read(int fd, json_t **secrets, struct egress_ca *ca, nsbox_error_t **err)
{
        *secrets = NULL;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !is_memfd(fd))
                return nsbox_error(err, EPROTO, "its init holds no memfd where its secrets should be");
        if (st.st_size == 0)
                return nsbox_error(err, ENOENT, "its secrets were not kept");
        if (st.st_size > (off_t)SECRETS_KEEP_MAX)
                return nsbox_error(err, EFBIG, "its kept secrets are over %u bytes", SECRETS_KEEP_MAX);
        size_t len = (size_t)st.st_size;
        char *text = malloc(len);
        if (text == NULL)
                return nsbox_error(err, ENOMEM, "read its kept secrets");
        ssize_t n = pread(fd, text, len, 0);
        json_error_t parse_error;
        _cleanup_json_ json_t *kept =
            n == (ssize_t)len ? json_loadb(text, len, JSON_REJECT_DUPLICATES, &parse_error) : NULL;
        explicit_bzero(text, len);
        free(text);
        if (kept == NULL || !json_is_object(kept) || json_object_get(kept, "secrets") == NULL ||
            json_object_size(kept) != (json_object_get(kept, "ca") != NULL ? 2u : 1u))
                return nsbox_error(err, EINVAL, "its kept secrets are not what nsboxd writes");
        int r = policy_secrets_from_kept(json_object_get(kept, "secrets"), secrets, err);
        if (r < 0)
                return r;
        if ((r = parse_ca(json_object_get(kept, "ca"), ca, err)) < 0) {
                json_decref(*secrets);
                *secrets = NULL;
        }
        return r;
}
