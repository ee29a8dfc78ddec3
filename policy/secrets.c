/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.create's "secrets" checked and given their placeholders. */
#include "secrets.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "netpolicy.h"

static bool valid_secret_name(const char *name)
{
        size_t len = strlen(name);
        if (len == 0 || len > POLICY_SECRET_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
                return false;
        for (size_t i = 0; i < len; i++) {
                char ch = name[i];
                if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                      ch == '_'))
                        return false;
        }
        return true;
}

/* Bytes that would end or split a header line, or a NUL. */
static bool header_safe(const char *text, size_t len)
{
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char)text[i];
                if (ch == '\0' || ch == '\r' || ch == '\n')
                        return false;
        }
        return true;
}

static bool token_char(char ch)
{
        return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
               strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* "Field-Name: text with {value} once". */
static int check_header(const char *name, json_t *header, nsbox_error_t **err)
{
        const char *text = json_string_value(header);
        size_t len = json_string_length(header);
        const char *colon = text ? memchr(text, ':', len) : NULL;
        bool ok = text != NULL && len <= POLICY_SECRET_HEADER_MAX && header_safe(text, len) &&
                  colon != NULL && colon != text;
        for (const char *p = text; ok && p < colon; p++)
                ok = token_char(*p);
        const char *slot = ok ? strstr(text, "{value}") : NULL;
        if (!ok || slot == NULL || slot < colon || strstr(slot + 1, "{value}") != NULL)
                return nsbox_invalid(err,
                                     "secrets.%s.header must be one header line with {value} once, as "
                                     "\"Authorization: Bearer {value}\" (at most %u bytes)",
                                     name, POLICY_SECRET_HEADER_MAX);
        return 0;
}

static int check_hosts(const char *name, json_t *hosts, json_t **out, nsbox_error_t **err)
{
        if (!json_is_array(hosts) || json_array_size(hosts) == 0 ||
            json_array_size(hosts) > POLICY_SECRET_HOSTS_MAX)
                return nsbox_invalid(err, "secrets.%s.hosts must be a list of 1 to %u host names", name,
                                     POLICY_SECRET_HOSTS_MAX);
        *out = json_array();
        size_t i;
        json_t *host;
        json_array_foreach(hosts, i, host)
        {
                char normal[NETPOLICY_NAME_MAX + 1];
                uint32_t literal;
                const char *text = json_string_value(host);
                if (text == NULL || netpolicy_parse_ipv4(text, json_string_length(host), &literal) ||
                    netpolicy_name_normalize(text, json_string_length(host), normal) < 0) {
                        json_decref(*out);
                        *out = NULL;
                        return nsbox_invalid(err, "secrets.%s.hosts[%zu] is not a host name", name, i);
                }
                json_array_append_new(*out, json_string(normal));
        }
        return 0;
}

static int make_placeholder(char out[64], nsbox_error_t **err)
{
        unsigned char random[16];
        if (getrandom(random, sizeof(random), 0) != (ssize_t)sizeof(random))
                return nsbox_error(err, errno ? errno : EIO, "getrandom");
        int n = snprintf(out, 64, "%s", POLICY_SECRET_PLACEHOLDER);
        for (size_t i = 0; i < sizeof(random); i++)
                n += snprintf(out + n, 64 - (size_t)n, "%02x", random[i]);
        return 0;
}

static int parse_one(const char *name, json_t *secret, json_t *out, nsbox_error_t **err)
{
        static const char *const known[] = { "value", "hosts", "header", NULL };
        if (!valid_secret_name(name))
                return nsbox_invalid(err,
                                     "secret names are 1 to %u letters, digits and '_', not starting with a "
                                     "digit",
                                     POLICY_SECRET_NAME_MAX);
        if (!json_is_object(secret))
                return nsbox_invalid(err, "secrets.%s must be an object {value, hosts, header?}", name);
        const char *key;
        json_t *field;
        json_object_foreach(secret, key, field)
        {
                bool listed = false;
                for (size_t i = 0; known[i] != NULL; i++)
                        listed = listed || strcmp(known[i], key) == 0;
                if (!listed)
                        return nsbox_invalid(err, "secrets.%s: unknown field (value, hosts, header)", name);
        }
        json_t *value = json_object_get(secret, "value");
        if (!json_is_string(value) || json_string_length(value) == 0 ||
            json_string_length(value) > POLICY_SECRET_VALUE_MAX ||
            !header_safe(json_string_value(value), json_string_length(value)))
                return nsbox_invalid(err,
                                     "secrets.%s.value must be a string of 1 to %u bytes without a line "
                                     "break or NUL",
                                     name, POLICY_SECRET_VALUE_MAX);
        json_t *header = json_object_get(secret, "header");
        int r;
        if (header != NULL && !json_is_null(header) && (r = check_header(name, header, err)) < 0)
                return r;
        json_t *hosts = NULL;
        if ((r = check_hosts(name, json_object_get(secret, "hosts"), &hosts, err)) < 0)
                return r;
        char placeholder[64];
        if ((r = make_placeholder(placeholder, err)) < 0) {
                json_decref(hosts);
                return r;
        }
        json_t *one =
            json_pack("{s:O, s:o, s:s}", "value", value, "hosts", hosts, "placeholder", placeholder);
        if (one == NULL)
                return nsbox_error(err, ENOMEM, "secrets");
        if (header != NULL && !json_is_null(header))
                json_object_set(one, "header", header);
        json_object_set_new(out, name, one);
        return 0;
}

int policy_secrets_from_json(json_t *secrets, json_t **out, nsbox_error_t **err)
{
        *out = NULL;
        if (!json_is_object(secrets) || json_object_size(secrets) > POLICY_SECRETS_MAX)
                return nsbox_invalid(err,
                                     "secrets must be an object of at most %u secrets, {NAME: {value, hosts: "
                                     "[...], header?}}",
                                     POLICY_SECRETS_MAX);
        json_t *made = json_object();
        if (made == NULL)
                return nsbox_error(err, ENOMEM, "secrets");
        const char *name;
        json_t *secret;
        json_object_foreach(secrets, name, secret)
        {
                int r = parse_one(name, secret, made, err);
                if (r < 0) {
                        json_decref(made);
                        return r;
                }
        }
        *out = made;
        return 0;
}

static bool valid_placeholder(json_t *placeholder)
{
        const char *text = json_string_value(placeholder);
        size_t prefix = strlen(POLICY_SECRET_PLACEHOLDER);
        if (text == NULL || json_string_length(placeholder) != prefix + 32 ||
            strncmp(text, POLICY_SECRET_PLACEHOLDER, prefix) != 0)
                return false;
        for (const char *p = text + prefix; *p != '\0'; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        return true;
}

int policy_secrets_from_kept(json_t *kept, json_t **out, nsbox_error_t **err)
{
        *out = NULL;
        if (!json_is_object(kept))
                return nsbox_invalid(err, "secrets must be an object");
        /* What a client gives, checked as its: the placeholders aside. */
        json_t *given = json_deep_copy(kept), *placeholders = json_object();
        const char *name;
        json_t *secret;
        int r = given != NULL && placeholders != NULL ? 0 : nsbox_error(err, ENOMEM, "secrets");
        json_object_foreach(given, name, secret)
        {
                json_t *placeholder = json_object_get(secret, "placeholder");
                if (r == 0 && !valid_placeholder(placeholder))
                        r = nsbox_invalid(err, "secrets.%s.placeholder is not one nsboxd makes", name);
                if (r == 0) {
                        json_object_set(placeholders, name, placeholder);
                        json_object_del(secret, "placeholder");
                }
        }
        json_t *made = NULL;
        if (r == 0 && (r = policy_secrets_from_json(given, &made, err)) == 0) {
                json_object_foreach(made, name, secret)
                    json_object_set(secret, "placeholder", json_object_get(placeholders, name));
                *out = made;
        }
        json_decref(given);
        json_decref(placeholders);
        return r;
}

int policy_secrets_env(json_t *secrets, json_t **env, nsbox_error_t **err)
{
        if (secrets == NULL)
                return 0;
        const char *name;
        json_t *secret;
        json_object_foreach(secrets, name, secret)
        {
                char key[sizeof(POLICY_SECRET_ENV_PREFIX) + POLICY_SECRET_NAME_MAX];
                snprintf(key, sizeof(key), "%s%s", POLICY_SECRET_ENV_PREFIX, name);
                if (*env != NULL && json_object_get(*env, key) != NULL)
                        return nsbox_invalid(
                            err, "env.%s is the placeholder of secret %s: leave it out of env", key, name);
        }
        if (*env == NULL && (*env = json_object()) == NULL)
                return nsbox_error(err, ENOMEM, "env");
        json_object_foreach(secrets, name, secret)
        {
                char key[sizeof(POLICY_SECRET_ENV_PREFIX) + POLICY_SECRET_NAME_MAX];
                snprintf(key, sizeof(key), "%s%s", POLICY_SECRET_ENV_PREFIX, name);
                json_object_set(*env, key, json_object_get(secret, "placeholder"));
        }
        /* OpenSSL (Python's ssl, curl, git), Python requests and pip (their
         * own certifi bundle otherwise), Node.js (its built-in list, plus
         * this file). */
        static const char *const bundle_vars[] = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                                                   "PIP_CERT",      "GIT_SSL_CAINFO",     NULL };
        for (size_t i = 0; bundle_vars[i] != NULL; i++)
                if (json_object_get(*env, bundle_vars[i]) == NULL)
                        json_object_set_new(*env, bundle_vars[i], json_string(POLICY_SECRETS_CA_BUNDLE));
        if (json_object_get(*env, "NODE_EXTRA_CA_CERTS") == NULL)
                json_object_set_new(*env, "NODE_EXTRA_CA_CERTS", json_string(POLICY_SECRETS_CA_FILE));
        return 0;
}

int policy_secrets_replace(json_t *fresh, json_t *current, json_t **env, nsbox_error_t **err)
{
        json_t *next = *env != NULL ? json_deep_copy(*env) : json_object();
        if (next == NULL)
                return nsbox_error(err, ENOMEM, "env");
        const char *name;
        json_t *secret;
        json_object_foreach(current, name, secret)
        {
                char key[sizeof(POLICY_SECRET_ENV_PREFIX) + POLICY_SECRET_NAME_MAX];
                snprintf(key, sizeof(key), "%s%s", POLICY_SECRET_ENV_PREFIX, name);
                json_object_del(next, key);
                json_t *kept = json_object_get(fresh, name);
                if (kept != NULL)
                        json_object_set(kept, "placeholder", json_object_get(secret, "placeholder"));
        }
        int r = policy_secrets_env(fresh, &next, err);
        if (r < 0) {
                json_decref(next);
                return r;
        }
        json_decref(*env);
        *env = next;
        return 0;
}

json_t *policy_secrets_names(json_t *secrets)
{
        json_t *names = json_array();
        const char *name;
        json_t *secret;
        json_object_foreach(secrets, name, secret) json_array_append_new(names, json_string(name));
        return names;
}
