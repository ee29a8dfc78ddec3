/* SPDX-License-Identifier: Apache-2.0 */
/* Per-sandbox CAs and the server certificates they sign (libcrypto). */
#include "tlscert.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int crypto_error(nsbox_error_t **err, const char *what)
{
        char text[256];
        ERR_error_string_n(ERR_get_error(), text, sizeof(text));
        ERR_clear_error();
        return nsbox_error(err, EIO, "%s: %s", what, text);
}

EVP_PKEY *tlscert_key(nsbox_error_t **err)
{
        EVP_PKEY *key = EVP_EC_gen("P-256");
        if (key == NULL)
                crypto_error(err, "make a P-256 key");
        return key;
}

static bool add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
        X509V3_CTX ctx;
        X509V3_set_ctx_nodb(&ctx);
        X509V3_set_ctx(&ctx, issuer ? issuer : cert, cert, NULL, NULL, 0);
        X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
        if (ext == NULL)
                return false;
        bool ok = X509_add_ext(cert, ext, -1) == 1;
        X509_EXTENSION_free(ext);
        return ok;
}

X509 *tlscert_make(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, nsbox_error_t **err)
{
        X509 *cert = X509_new();
        unsigned char serial[16];
        BIGNUM *bn = NULL;
        bool ok = cert != NULL && RAND_bytes(serial, sizeof(serial)) == 1;
        if (ok) {
                serial[0] &= 0x7f; /* positive */
                bn = BN_bin2bn(serial, sizeof(serial), NULL);
                ok = bn != NULL && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != NULL;
        }
        BN_free(bn);
        ok = ok && X509_set_version(cert, 2) == 1 &&
             X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != NULL &&
             X509_gmtime_adj(X509_getm_notAfter(cert), issuer ? 7L * 24 * 3600 : 366L * 24 * 3600) != NULL &&
             X509_set_pubkey(cert, key) == 1;
        X509_NAME *name = ok ? X509_get_subject_name(cert) : NULL;
        /* A common name holds at most 64 characters (X.520); a longer
         * host name is in the server certificate's SAN alone, which is
         * what clients check. */
        const char *common = strlen(cn) <= 64 ? cn : "nsbox egress";
        ok = ok &&
             X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)common, -1, -1,
                                        0) == 1 &&
             X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name) == 1 &&
             add_ext(cert, issuer, NID_subject_key_identifier, "hash");
        if (ok && issuer == NULL) {
                ok = add_ext(cert, NULL, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
                     add_ext(cert, NULL, NID_key_usage, "critical,keyCertSign,cRLSign") &&
                     add_ext(cert, NULL, NID_authority_key_identifier, "keyid:always");
        } else if (ok) {
                char san[300];
                snprintf(san, sizeof(san), "DNS:%s", cn);
                ok = add_ext(cert, issuer, NID_basic_constraints, "critical,CA:FALSE") &&
                     add_ext(cert, issuer, NID_key_usage, "critical,digitalSignature") &&
                     add_ext(cert, issuer, NID_ext_key_usage, "serverAuth") &&
                     add_ext(cert, issuer, NID_authority_key_identifier, "keyid:always") &&
                     add_ext(cert, issuer, NID_subject_alt_name, san);
        }
        ok = ok && X509_sign(cert, issuer_key ? issuer_key : key, EVP_sha256()) > 0;
        if (!ok) {
                X509_free(cert);
                crypto_error(err, "make a certificate");
                return NULL;
        }
        return cert;
}

static char *bio_text(BIO *bio)
{
        char *data;
        long len = BIO_get_mem_data(bio, &data);
        char *out = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (out != NULL) {
                memcpy(out, data, (size_t)len);
                out[len] = '\0';
        }
        return out;
}

int tlscert_ca_pem(const char *cn, char **cert_pem, char **key_pem, nsbox_error_t **err)
{
        *cert_pem = *key_pem = NULL;
        EVP_PKEY *key = tlscert_key(err);
        if (key == NULL)
                return -EIO;
        X509 *cert = tlscert_make(key, cn, NULL, NULL, err);
        if (cert == NULL) {
                EVP_PKEY_free(key);
                return -EIO;
        }
        BIO *cb = BIO_new(BIO_s_mem()), *kb = BIO_new(BIO_s_mem());
        bool ok = cb != NULL && kb != NULL && PEM_write_bio_X509(cb, cert) == 1 &&
                  PEM_write_bio_PrivateKey(kb, key, NULL, NULL, 0, NULL, NULL) == 1;
        if (ok) {
                *cert_pem = bio_text(cb);
                *key_pem = bio_text(kb);
                ok = *cert_pem != NULL && *key_pem != NULL;
        }
        if (kb != NULL) {
                char *data;
                long len = BIO_get_mem_data(kb, &data);
                if (len > 0)
                        OPENSSL_cleanse(data, (size_t)len);
        }
        BIO_free(cb);
        BIO_free(kb);
        X509_free(cert);
        EVP_PKEY_free(key);
        if (!ok) {
                free(*cert_pem);
                if (*key_pem != NULL)
                        explicit_bzero(*key_pem, strlen(*key_pem));
                free(*key_pem);
                *cert_pem = *key_pem = NULL;
                return crypto_error(err, "write the CA as PEM");
        }
        return 0;
}
