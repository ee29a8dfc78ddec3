/* SPDX-License-Identifier: Apache-2.0 */
/* The certificates of secrets over HTTPS (OpenSSL's libcrypto): a sandbox's
 * own CA, made by nsboxd for each sandbox with secrets and never reused,
 * and the certificate nsbox-egress signs with it for one of the secrets'
 * hosts when it intercepts TLS to that host. */
#pragma once

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "error.h"

/* A fresh P-256 key. */
EVP_PKEY *tlscert_key(nsbox_error_t **err);

/* A certificate for key: a CA named cn when issuer is NULL (self-signed),
 * else a server certificate for the DNS name cn signed by issuer. */
X509 *tlscert_make(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, nsbox_error_t **err);

/* A new CA named cn as PEM: its certificate and its key (*key_pem, which
 * the caller wipes before freeing). */
int tlscert_ca_pem(const char *cn, char **cert_pem, char **key_pem, nsbox_error_t **err);
