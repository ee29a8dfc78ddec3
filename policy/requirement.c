/* SPDX-License-Identifier: Apache-2.0 */
/* Package requirements nsbox hands to pip: PEP 508 only, nothing pip could read as an option. */
#include "requirement.h"

#include <string.h>

static bool is_alnum(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* PEP 508 name: letters/digits, with '.', '_', '-' only between them. */
static const char *scan_name(const char *p)
{
        if (!is_alnum(*p))
                return NULL;
        while (is_alnum(*p) || ((*p == '.' || *p == '_' || *p == '-') && is_alnum(p[1])))
                p++;
        return p;
}

static const char *skip_spaces(const char *p)
{
        while (*p == ' ')
                p++;
        return p;
}

/* One version: letters, digits, '.', '*', '+', '!' (epochs, local versions, wildcards). */
static const char *scan_version(const char *p)
{
        const char *start = p;
        while (is_alnum(*p) || *p == '.' || *p == '*' || *p == '+' || *p == '!' || *p == '_' || *p == '-')
                p++;
        return p == start ? NULL : p;
}

static const char *scan_operator(const char *p)
{
        static const char *const ops[] = { "===", "==", "!=", "~=", "<=", ">=", "<", ">" };
        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
                size_t n = strlen(ops[i]);
                if (strncmp(p, ops[i], n) == 0)
                        return p + n;
        }
        return NULL;
}

bool requirement_valid(const char *text, const char **why)
{
        if (text == NULL || text[0] == '\0') {
                *why = "empty requirement";
                return false;
        }
        if (strlen(text) > REQUIREMENT_MAX_LEN) {
                *why = "requirement too long";
                return false;
        }
        if (text[0] == '-') {
                *why = "requirements may not be pip options";
                return false;
        }
        const char *p = scan_name(text);
        if (p == NULL) {
                *why = "a requirement must start with a package name (letters, digits, '.', '_', '-')";
                return false;
        }
        p = skip_spaces(p);
        if (*p == '[') {
                p = skip_spaces(p + 1);
                for (;;) {
                        p = scan_name(p);
                        if (p == NULL) {
                                *why = "bad extra name";
                                return false;
                        }
                        p = skip_spaces(p);
                        if (*p == ']')
                                break;
                        if (*p != ',') {
                                *why = "extras must be names separated by ','";
                                return false;
                        }
                        p = skip_spaces(p + 1);
                }
                p = skip_spaces(p + 1);
        }
        /* Version specifiers, comma-separated, optionally in parentheses. */
        bool paren = *p == '(';
        if (paren)
                p = skip_spaces(p + 1);
        while (*p != '\0' && *p != ')') {
                const char *q = scan_operator(p);
                if (q == NULL) {
                        *why =
                            "expected a version specifier such as ==1.2 or >=2 (no URLs, paths, markers or "
                            "options)";
                        return false;
                }
                p = scan_version(skip_spaces(q));
                if (p == NULL) {
                        *why = "bad version";
                        return false;
                }
                p = skip_spaces(p);
                if (*p == ',')
                        p = skip_spaces(p + 1);
                else
                        break;
        }
        if (paren) {
                if (*p != ')') {
                        *why = "unbalanced parenthesis";
                        return false;
                }
                p = skip_spaces(p + 1);
        }
        if (*p != '\0') {
                *why = "unexpected characters after the requirement";
                return false;
        }
        return true;
}
