/* SPDX-License-Identifier: Apache-2.0 */
/* The tokens file: one owner per line, `UID TOKEN` or `UID sha256:HEX` (the
 * SHA-256 of the token, so the file need not hold the secret), `#`
 * comments and blank lines ignored. Presented tokens are hashed and compared
 * with every entry in constant time. SIGHUP reloads the file; a file that is
 * refused then leaves the tokens as they were. */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"

#define DIGEST_LEN       32
#define TOKEN_MIN_LENGTH 16

struct token {
        uid_t uid;
        unsigned char digest[DIGEST_LEN];
};

/* Read by every connection's thread, replaced whole on SIGHUP. */
static pthread_rwlock_t tokens_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct token *tokens;
static size_t n_tokens;

static int hex_value(int c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

static int sha256(const void *data, size_t len, unsigned char out[DIGEST_LEN])
{
        return gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, out) == 0 ? 0 : -EIO;
}

static int parse_line(char *line, unsigned lineno, const char *path, struct token *out, bool *plain,
                      nsbox_error_t **err)
{
        char *uid_text = strtok(line, " \t");
        char *secret = strtok(NULL, " \t");
        if (uid_text == NULL || secret == NULL || strtok(NULL, " \t") != NULL)
                return nsbox_invalid(err, "%s:%u: expected `UID TOKEN` or `UID sha256:HEX`", path, lineno);
        char *end;
        errno = 0;
        unsigned long uid = strtoul(uid_text, &end, 10);
        if (errno != 0 || *end != '\0' || !isdigit((unsigned char)uid_text[0]) || uid == 0 ||
            uid >= UINT32_MAX)
                return nsbox_invalid(
                    err, "%s:%u: the uid must be a number from 1 to 4294967294 (0, root, is refused)", path,
                    lineno);
        out->uid = (uid_t)uid;
        if (strncmp(secret, "sha256:", 7) == 0) {
                const char *hex = secret + 7;
                if (strlen(hex) != 2 * DIGEST_LEN)
                        return nsbox_invalid(err, "%s:%u: sha256: wants 64 hex digits", path, lineno);
                for (size_t i = 0; i < DIGEST_LEN; i++) {
                        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
                        if (hi < 0 || lo < 0)
                                return nsbox_invalid(err, "%s:%u: sha256: wants 64 hex digits", path, lineno);
                        out->digest[i] = (unsigned char)(hi << 4 | lo);
                }
                *plain = false;
                return 0;
        }
        if (strlen(secret) < TOKEN_MIN_LENGTH)
                return nsbox_invalid(err, "%s:%u: a token must be at least %d characters", path, lineno,
                                     TOKEN_MIN_LENGTH);
        *plain = true;
        return sha256(secret, strlen(secret), out->digest) < 0
                   ? nsbox_error(err, EIO, "%s:%u: sha256", path, lineno)
                   : 0;
}

static void tokens_replace(struct token *with, size_t n)
{
        pthread_rwlock_wrlock(&tokens_lock);
        struct token *old = tokens;
        tokens = with;
        n_tokens = n;
        pthread_rwlock_unlock(&tokens_lock);
        free(old);
}

void http_tokens_clear(void)
{
        tokens_replace(NULL, 0);
}

int http_tokens_load(const char *path, nsbox_error_t **err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return nsbox_error(err, errno, "open tokens file %s", path);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return nsbox_error(err, errno, "stat %s", path);
        if (!S_ISREG(st.st_mode))
                return nsbox_invalid(err, "tokens file %s is not a regular file", path);
        /* Whoever can write the file can mint owners: root or nsbox-http's
         * own uid alone. */
        if (st.st_uid != 0 && st.st_uid != geteuid())
                return nsbox_refuse(err, EPERM,
                                    "tokens file %s is owned by uid %u, who could make itself any owner: it "
                                    "must be root's (or this process's uid %u)",
                                    path, (unsigned)st.st_uid, (unsigned)geteuid());
        if (st.st_mode & (S_IWGRP | S_IWOTH))
                return nsbox_refuse(err, EPERM, "tokens file %s is writable by group or others (mode %04o)",
                                    path, (unsigned)(st.st_mode & 07777));
        FILE *f = fdopen(fd, "r");
        if (f == NULL)
                return nsbox_error(err, errno, "fdopen %s", path);
        steal_fd(&fd);
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        unsigned lineno = 0;
        bool any_plain = false;
        int r = 0;
        _cleanup_free_ struct token *loaded = NULL;
        size_t n_loaded = 0;
        while (getline(&line, &cap, f) >= 0) {
                lineno++;
                line[strcspn(line, "\r\n")] = '\0';
                char *p = line + strspn(line, " \t");
                if (*p == '\0' || *p == '#')
                        continue;
                struct token t;
                bool plain = false;
                if ((r = parse_line(p, lineno, path, &t, &plain, err)) < 0)
                        break;
                for (size_t i = 0; i < n_loaded; i++)
                        if (memcmp(loaded[i].digest, t.digest, DIGEST_LEN) == 0)
                                r = nsbox_invalid(err, "%s:%u: the same token is given twice", path, lineno);
                if (r < 0)
                        break;
                struct token *grown = realloc(loaded, (n_loaded + 1) * sizeof(*loaded));
                if (grown == NULL) {
                        r = nsbox_error(err, ENOMEM, "tokens");
                        break;
                }
                loaded = grown;
                loaded[n_loaded++] = t;
                any_plain |= plain;
        }
        fclose(f);
        if (r == 0 && n_loaded == 0)
                r = nsbox_invalid(err, "tokens file %s holds no token", path);
        if (r < 0)
                return r; /* the tokens loaded before stay */
        tokens_replace(steal_pointer(&loaded), n_loaded);
        if (any_plain && (st.st_mode & (S_IRGRP | S_IROTH)))
                fprintf(stderr,
                        "nsbox-http: warning: %s holds plain tokens and is readable by group or others; "
                        "chmod 600 it or store sha256:HEX digests\n",
                        path);
        return 0;
}

uid_t http_tokens_lookup(const char *token, size_t len)
{
        unsigned char digest[DIGEST_LEN];
        if (len == 0 || sha256(token, len, digest) < 0)
                return 0;
        uid_t found = 0;
        pthread_rwlock_rdlock(&tokens_lock);
        for (size_t i = 0; i < n_tokens; i++) {
                unsigned char diff = 0;
                for (size_t j = 0; j < DIGEST_LEN; j++)
                        diff |= digest[j] ^ tokens[i].digest[j];
                /* branch-free select: no entry ends the scan early */
                uid_t mask = (uid_t)0 - (uid_t)(diff == 0);
                found |= tokens[i].uid & mask;
        }
        pthread_rwlock_unlock(&tokens_lock);
        return found;
}

/* This process's secret: a sandbox token needs the key (not its digest,
 * which a tokens file may show) and this process, so a restart revokes
 * them (the SDKs get new ones from connect). */
static unsigned char process_secret[DIGEST_LEN];
static pthread_once_t process_secret_once = PTHREAD_ONCE_INIT;
static bool process_secret_ok;

static void process_secret_make(void)
{
        process_secret_ok = getrandom(process_secret, sizeof(process_secret), 0) == sizeof(process_secret);
}

/* HMAC-SHA256(secret + key digest, sandbox id) in hex: the sandbox's token
 * as one key's, which ends when that key leaves the file. */
static int sandbox_token_of(const unsigned char key[DIGEST_LEN], const char *sandbox_id,
                            char out[HTTP_SANDBOX_TOKEN_LEN + 1])
{
        pthread_once(&process_secret_once, process_secret_make);
        if (!process_secret_ok)
                return -EIO;
        unsigned char both[2 * DIGEST_LEN], mac[DIGEST_LEN];
        memcpy(both, process_secret, DIGEST_LEN);
        memcpy(both + DIGEST_LEN, key, DIGEST_LEN);
        if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, both, sizeof(both), sandbox_id, strlen(sandbox_id), mac) != 0)
                return -EIO;
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < DIGEST_LEN; i++) {
                out[2 * i] = hex[mac[i] >> 4];
                out[2 * i + 1] = hex[mac[i] & 15];
        }
        out[HTTP_SANDBOX_TOKEN_LEN] = '\0';
        return 0;
}

int http_tokens_sandbox_token(const char *token, size_t len, const char *sandbox_id,
                              char out[HTTP_SANDBOX_TOKEN_LEN + 1])
{
        unsigned char digest[DIGEST_LEN];
        if (len == 0 || sha256(token, len, digest) < 0)
                return -EIO;
        return sandbox_token_of(digest, sandbox_id, out);
}

uid_t http_tokens_lookup_sandbox(const char *presented, const char *sandbox_id)
{
        if (strlen(presented) != HTTP_SANDBOX_TOKEN_LEN)
                return 0;
        uid_t found = 0;
        pthread_rwlock_rdlock(&tokens_lock);
        for (size_t i = 0; i < n_tokens; i++) {
                char expected[HTTP_SANDBOX_TOKEN_LEN + 1];
                if (sandbox_token_of(tokens[i].digest, sandbox_id, expected) < 0)
                        continue;
                unsigned char diff = 0;
                for (size_t j = 0; j < HTTP_SANDBOX_TOKEN_LEN; j++)
                        diff |= (unsigned char)(expected[j] ^ presented[j]);
                uid_t mask = (uid_t)0 - (uid_t)(diff == 0);
                found |= tokens[i].uid & mask;
        }
        pthread_rwlock_unlock(&tokens_lock);
        return found;
}

/* "volume/NAME" in buf, or false when the name is too long to be one. */
static bool volume_subject(const char *volume, char *buf, size_t size)
{
        int n = snprintf(buf, size, "volume/%s", volume);
        return n > 0 && (size_t)n < size;
}

int http_tokens_volume_token(const char *token, size_t len, const char *volume,
                             char out[HTTP_SANDBOX_TOKEN_LEN + 1])
{
        char subject[256];
        if (!volume_subject(volume, subject, sizeof(subject)))
                return -EINVAL;
        return http_tokens_sandbox_token(token, len, subject, out);
}

uid_t http_tokens_lookup_volume(const char *presented, const char *volume)
{
        char subject[256];
        return volume_subject(volume, subject, sizeof(subject))
                   ? http_tokens_lookup_sandbox(presented, subject)
                   : 0;
}
