/* mv_authz_json: TokenReview and SubjectAccessReview bodies and the parsers of their answers
 * (untrusted JSON from the API server). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "mv_authz.h"
#include "mv_kubec.h"
#include "mv_util.h"

#define JSON_DEPTH 32

void mv_authz_user_clear(mv_authz_user *u)
{
    if (!u)
        return;
    free(u->username);
    free(u->uid);
    for (size_t i = 0; i < u->ngroups; i++)
        free(u->groups[i]);
    free(u->groups);
    memset(u, 0, sizeof *u);
}

/* Parses strict UTF-8 JSON into *root; the object must have kind == `kind`. */
static int parse_root(const char *json, size_t len, const char *kind, json_object **root,
                      json_object **status, char *err, size_t errlen)
{
    *root = *status = NULL;
    json_object *r;
    int rc = mv_kubec_json_parse(json, len, MV_AUTHZ_BODY_MAX, JSON_DEPTH, &r);
    if (rc == -E2BIG) {
        mv_util_err_set(err, errlen, "answer larger than %u bytes", MV_AUTHZ_BODY_MAX);
        return -EINVAL;
    }
    if (rc == -ENOMEM)
        return rc;
    if (rc < 0) {
        mv_util_err_set(err, errlen, "answer is not valid JSON");
        return -EINVAL;
    }
    json_object *k, *st;
    if (!json_object_is_type(r, json_type_object) || !json_object_object_get_ex(r, "kind", &k) ||
        !json_object_is_type(k, json_type_string) || strcmp(json_object_get_string(k), kind)) {
        json_object_put(r);
        mv_util_err_set(err, errlen, "answer is not a %s", kind);
        return -EINVAL;
    }
    if (!json_object_object_get_ex(r, "status", &st) ||
        !json_object_is_type(st, json_type_object)) {
        json_object_put(r);
        mv_util_err_set(err, errlen, "%s answer has no status object", kind);
        return -EINVAL;
    }
    *root = r;
    *status = st;
    return 0;
}

/* A boolean member: absent/null = 0; another type = -EINVAL. */
static int get_bool(json_object *o, const char *key, int *out)
{
    json_object *v;
    *out = 0;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_boolean))
        return -EINVAL;
    *out = json_object_get_boolean(v) ? 1 : 0;
    return 0;
}

/* A string member of at most `max` bytes without NUL: absent/null = NULL. */
static int get_str(json_object *o, const char *key, size_t max, const char **out)
{
    json_object *v;
    *out = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return -EINVAL;
    int n = json_object_get_string_len(v);
    const char *s = json_object_get_string(v);
    if (n < 0 || (size_t)n > max || strlen(s) != (size_t)n)
        return -EINVAL;
    *out = s;
    return 0;
}

/* Copies s into buf, cut at `len - 1` bytes on a UTF-8 character boundary. */
static void copy_cut(char *buf, size_t len, const char *s)
{
    if (!len)
        return;
    size_t n = s ? strlen(s) : 0;
    if (n >= len) {
        n = len - 1;
        while (n && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    if (n)
        memcpy(buf, s, n);
    buf[n] = 0;
}

int mv_authz_parse_token_review(const char *json, size_t len, mv_authz_user *u, char *err,
                                size_t errlen)
{
    memset(u, 0, sizeof *u);
    json_object *root, *st, *user = NULL, *groups = NULL;
    int rc = parse_root(json, len, "TokenReview", &root, &st, err, errlen);
    if (rc)
        return rc;
    const char *e, *name, *uid;
    if (get_bool(st, "authenticated", &u->authenticated) < 0 ||
        get_str(st, "error", 1u << 16, &e) < 0) {
        mv_util_err_set(err, errlen,
                        "TokenReview status.authenticated or .error of the wrong type");
        goto invalid;
    }
    copy_cut(u->error, sizeof u->error, e);
    if (!u->authenticated) {
        json_object_put(root);
        return 0;
    }
    if (!json_object_object_get_ex(st, "user", &user) ||
        !json_object_is_type(user, json_type_object)) {
        mv_util_err_set(err, errlen, "TokenReview authenticated without status.user");
        goto invalid;
    }
    if (get_str(user, "username", MV_AUTHZ_NAME_MAX, &name) < 0 || !name || !name[0] ||
        get_str(user, "uid", MV_AUTHZ_NAME_MAX, &uid) < 0) {
        mv_util_err_set(err, errlen,
                        "TokenReview status.user.username missing, or username/uid not a string of "
                        "at most %d bytes",
                        MV_AUTHZ_NAME_MAX);
        goto invalid;
    }
    if (json_object_object_get_ex(user, "groups", &groups) &&
        !json_object_is_type(groups, json_type_null)) {
        if (!json_object_is_type(groups, json_type_array) ||
            json_object_array_length(groups) > MV_AUTHZ_GROUPS_MAX) {
            mv_util_err_set(err, errlen,
                            "TokenReview status.user.groups not an array of at most %d",
                            MV_AUTHZ_GROUPS_MAX);
            goto invalid;
        }
    } else {
        groups = NULL;
    }
    u->username = strdup(name);
    u->uid = uid ? strdup(uid) : NULL;
    size_t ng = groups ? json_object_array_length(groups) : 0;
    u->groups = calloc(ng ? ng : 1, sizeof *u->groups);
    if (!u->username || (uid && !u->uid) || !u->groups) {
        rc = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < ng; i++) {
        json_object *g = json_object_array_get_idx(groups, i);
        const char *gs;
        if (!json_object_is_type(g, json_type_string)) {
            mv_util_err_set(err, errlen, "TokenReview group %zu is not a string", i);
            goto invalid;
        }
        int n = json_object_get_string_len(g);
        gs = json_object_get_string(g);
        if (n < 0 || (size_t)n > MV_AUTHZ_NAME_MAX || strlen(gs) != (size_t)n) {
            mv_util_err_set(err, errlen, "TokenReview group %zu longer than %d bytes or has NUL", i,
                            MV_AUTHZ_NAME_MAX);
            goto invalid;
        }
        if (!(u->groups[i] = strdup(gs))) {
            rc = -ENOMEM;
            goto fail;
        }
        u->ngroups++;
    }
    json_object_put(root);
    return 0;
invalid:
    rc = -EINVAL;
fail:
    json_object_put(root);
    mv_authz_user_clear(u);
    return rc;
}

int mv_authz_parse_access_review(const char *json, size_t len, int *allowed, char *reason,
                                 size_t reasonlen, char *err, size_t errlen)
{
    *allowed = 0;
    if (reason && reasonlen)
        reason[0] = 0;
    json_object *root, *st;
    int rc = parse_root(json, len, "SubjectAccessReview", &root, &st, err, errlen);
    if (rc)
        return rc;
    int a, d;
    const char *r;
    if (get_bool(st, "allowed", &a) < 0 || get_bool(st, "denied", &d) < 0 ||
        get_str(st, "reason", 1u << 16, &r) < 0) {
        mv_util_err_set(err, errlen,
                        "SubjectAccessReview status.allowed, .denied or .reason of the wrong type");
        json_object_put(root);
        return -EINVAL;
    }
    *allowed = a && !d;
    if (reason)
        copy_cut(reason, reasonlen, r);
    json_object_put(root);
    return 0;
}

static char *to_text(json_object *o)
{
    const char *s = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE)
                      : NULL;
    char *t = s ? strdup(s) : NULL;
    json_object_put(o);
    return t;
}

static json_object *review(const char *api_version, const char *kind, json_object *spec)
{
    json_object *o = json_object_new_object();
    if (!o || !spec) {
        json_object_put(o);
        json_object_put(spec);
        return NULL;
    }
    json_object_object_add(o, "apiVersion", json_object_new_string(api_version));
    json_object_object_add(o, "kind", json_object_new_string(kind));
    json_object_object_add(o, "spec", spec);
    return o;
}

char *mv_authz_token_review_body(const char *token)
{
    json_object *spec = json_object_new_object();
    if (spec)
        json_object_object_add(spec, "token", json_object_new_string(token));
    return to_text(review("authentication.k8s.io/v1", "TokenReview", spec));
}

char *mv_authz_access_review_body(const mv_authz_user *u, const char *path, const char *verb)
{
    json_object *spec = json_object_new_object();
    if (!spec)
        return NULL;
    json_object_object_add(spec, "user", json_object_new_string(u->username ? u->username : ""));
    if (u->uid)
        json_object_object_add(spec, "uid", json_object_new_string(u->uid));
    json_object *g = json_object_new_array();
    for (size_t i = 0; g && i < u->ngroups; i++)
        json_object_array_add(g, json_object_new_string(u->groups[i]));
    json_object_object_add(spec, "groups", g);
    json_object *nr = json_object_new_object();
    if (nr) {
        json_object_object_add(nr, "path", json_object_new_string(path));
        json_object_object_add(nr, "verb", json_object_new_string(verb));
    }
    json_object_object_add(spec, "nonResourceAttributes", nr);
    return to_text(review("authorization.k8s.io/v1", "SubjectAccessReview", spec));
}
