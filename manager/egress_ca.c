/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's secrets CA made and its certificate installed in the sandbox. */
#include "egress_ca.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_ops.h"
#include "fs_path.h"
#include "secrets.h"
#include "tlscert.h"

#define BUNDLE_MAX (8u << 20)
static const char bundle_marker[] = "# nsbox: this sandbox's secrets CA\n";

int egress_ca_make(const char *sandbox_id, struct egress_ca *ca, nsbox_error_t **err)
{
        char cn[200];
        snprintf(cn, sizeof(cn), "nsbox secrets CA of sandbox %s", sandbox_id);
        return tlscert_ca_pem(cn, &ca->cert_pem, &ca->key_pem, err);
}

void egress_ca_clear(struct egress_ca *ca)
{
        free(ca->cert_pem);
        if (ca->key_pem != NULL)
                explicit_bzero(ca->key_pem, strlen(ca->key_pem));
        free(ca->key_pem);
        ca->cert_pem = ca->key_pem = NULL;
}

int egress_ca_install(struct sandbox *sb, const struct egress_ca *ca, nsbox_error_t **err)
{
        struct fs_ctx ctx;
        int r = fs_ctx_open(sb, &ctx, err);
        if (r < 0)
                return r;
        size_t cert_len = strlen(ca->cert_pem);
        r = fs_write_path(&ctx, POLICY_SECRETS_CA_FILE, ca->cert_pem, cert_len, 0644, err);
        struct fs_path path;
        struct fs_read_result old = { 0 };
        nsbox_error_t *read_err = NULL;
        if (r == 0 &&
            (r = fs_path_parse(POLICY_SECRETS_CA_BUNDLE, strlen(POLICY_SECRETS_CA_BUNDLE), NULL, &path,
                               err)) == 0 &&
            fs_read_at(&ctx, &path, 0, BUNDLE_MAX, &old, &read_err) < 0)
                old = (struct fs_read_result){ 0 }; /* an image without one: the CA alone */
        nsbox_error_free(&read_err);
        if (r == 0) {
                size_t keep = old.len;
                const char *mark =
                    old.data ? memmem(old.data, old.len, bundle_marker, strlen(bundle_marker)) : NULL;
                if (mark != NULL)
                        keep = (size_t)(mark - old.data);
                size_t len = keep + strlen(bundle_marker) + cert_len + 1;
                char *bundle = malloc(len);
                if (bundle == NULL) {
                        r = nsbox_error(err, ENOMEM, "CA bundle");
                } else {
                        size_t n = 0;
                        memcpy(bundle, old.data ? old.data : "", keep);
                        n = keep;
                        if (n > 0 && bundle[n - 1] != '\n')
                                bundle[n++] = '\n';
                        memcpy(bundle + n, bundle_marker, strlen(bundle_marker));
                        n += strlen(bundle_marker);
                        memcpy(bundle + n, ca->cert_pem, cert_len);
                        n += cert_len;
                        r = fs_write_path(&ctx, POLICY_SECRETS_CA_BUNDLE, bundle, n, 0644, err);
                        free(bundle);
                }
        }
        free(old.data);
        fs_ctx_close(&ctx);
        return r;
}
