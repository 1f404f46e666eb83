/* mv_labelsel: a Kubernetes label selector in its text form, the one `kubectl get -l`, a
 * Deployment's status.selector and KEDA's scale target use:
 *
 *   app=checkout,tier in (web,api),!canary,track!=beta,release
 *
 * Requirements are ANDed. Operators: `=` and `==` (equal), `!=` (absent or different),
 * `in (v,...)`, `notin (v,...)` (absent or not listed), `key` (present), `!key` (absent).
 * Keys and values are validated as the API server validates labels: a key is an optional DNS
 * subdomain prefix (<= 253 bytes, lowercase) and '/', then a name of 1-63 bytes of
 * [A-Za-z0-9._-] starting and ending alphanumeric; a value is empty or such a name. The set-based
 * `>`/`<` (gt/lt) of the API server are refused (no workload selector carries them), and so is an
 * empty selector (it would select everything). Parsing is bounded: at most MV_LSEL_TEXT_MAX bytes,
 * MV_LSEL_REQS_MAX requirements and MV_LSEL_VALUES_MAX values per set.
 *
 * Ownership: an mv_lsel holds a copy of the text; it needs no cleanup and may be copied.
 */
#ifndef MV_LABELSEL_H
#define MV_LABELSEL_H

#include <stddef.h>
#include <stdint.h>

#define MV_LSEL_TEXT_MAX   2048 /* bytes of selector text */
#define MV_LSEL_REQS_MAX   16   /* requirements of one selector */
#define MV_LSEL_VALUES_MAX 16   /* values of one in/notin set */
#define MV_LSEL_PREFIX_MAX 253  /* key prefix (DNS subdomain) */
#define MV_LSEL_NAME_MAX   63   /* key name, and a value */

typedef enum mv_lsel_op {
    MV_LSEL_EQ,       /* key=value, key==value */
    MV_LSEL_NE,       /* key!=value */
    MV_LSEL_IN,       /* key in (a,b) */
    MV_LSEL_NOTIN,    /* key notin (a,b) */
    MV_LSEL_EXISTS,   /* key */
    MV_LSEL_NOTEXIST, /* !key */
} mv_lsel_op;

/* A piece of the selector's text: text[off, off + len). */
typedef struct mv_lsel_str {
    uint16_t off, len;
} mv_lsel_str;

typedef struct mv_lsel_req {
    mv_lsel_op op;
    mv_lsel_str key;
    size_t nvalues; /* 1 for EQ/NE, 1..MV_LSEL_VALUES_MAX for IN/NOTIN, 0 otherwise */
    mv_lsel_str values[MV_LSEL_VALUES_MAX];
} mv_lsel_req;

typedef struct mv_lsel {
    char text[MV_LSEL_TEXT_MAX + 1];
    size_t nreqs;
    mv_lsel_req reqs[MV_LSEL_REQS_MAX];
} mv_lsel;

/* Parses `len` bytes of `s` (need not be NUL-terminated). Returns 0, or -EINVAL with a reason in
 * `err` naming the requirement (1-based), the byte offset and what was wrong. */
int mv_lsel_parse(const char *s, size_t len, mv_lsel *out, char *err, size_t errlen);

/* Looks a label up by key (`key`, `klen` bytes, not NUL-terminated): its value (NUL-terminated),
 * or NULL when the labels do not carry that key. */
typedef const char *(*mv_lsel_get_fn)(void *ctx, const char *key, size_t klen);

/* 1 if labels looked up through `get` satisfy every requirement, else 0. */
int mv_lsel_match(const mv_lsel *sel, mv_lsel_get_fn get, void *ctx);

/* Writes the selector back in canonical form (`k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
 * `!k`, requirements joined by ','), NUL-terminated and cut to `cap`. Returns the length it needs
 * (excluding the NUL), like snprintf. */
size_t mv_lsel_format(const mv_lsel *sel, char *buf, size_t cap);

/* Checks a Kubernetes label key (`n` bytes) or value as the API server does. Returns NULL when
 * valid, else a static reason ("is longer than 63 bytes", ...). */
const char *mv_lsel_check_key(const char *key, size_t n);
const char *mv_lsel_check_value(const char *value, size_t n);

#endif
