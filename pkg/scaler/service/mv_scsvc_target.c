/* mv_scsvc_target: the two API objects the scaler reads to name a workload without a selector,
 * parsed strictly from untrusted JSON: a ScaledObject's spec.scaleTargetRef and a Scale's
 * status.selector. The bottom of the module: json-c only, no I/O. */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "mv_scsvc.h"

#define JSON_DEPTH 32

static int bad(char *err, size_t errlen, const char *what, const char *why)
{
    if (errlen)
        snprintf(err, errlen, "%s: %s", what, why);
    return -EINVAL;
}

/* Strict parse: one JSON object, nothing after it. NULL when not. */
static json_object *parse_object(const char *json, size_t len)
{
    if (!json || len == 0 || len > MV_SCSVC_OBJECT_MAX || memchr(json, '\0', len))
        return NULL;
    json_tokener *tok = json_tokener_new_ex(JSON_DEPTH);
    if (!tok)
        return NULL;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *o = json_tokener_parse_ex(tok, json, (int)len);
    int ok = o && json_tokener_get_error(tok) == json_tokener_success &&
             json_object_is_type(o, json_type_object);
    if (ok) {
        size_t at = json_tokener_get_parse_end(tok);
        for (; at < len && ok; at++)
            ok = json[at] == ' ' || json[at] == '\n' || json[at] == '\r' || json[at] == '\t';
    }
    json_tokener_free(tok);
    if (!ok) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

static json_object *member(json_object *o, const char *key)
{
    json_object *x = NULL;
    if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &x))
        return NULL;
    return x;
}

/* A DNS subdomain (object names), at most `max` bytes. */
static int name_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            return 0;
    return 1;
}

/* An optional string member: 1 copied, 0 absent (or null), -1 not a string or too long. */
static int opt_string(json_object *o, const char *key, char *out, size_t cap)
{
    json_object *x = member(o, key);
    if (!x || json_object_is_type(x, json_type_null))
        return 0;
    if (!json_object_is_type(x, json_type_string))
        return -1;
    size_t n = (size_t)json_object_get_string_len(x);
    const char *s = json_object_get_string(x);
    if (n >= cap || memchr(s, '\0', n))
        return -1;
    memcpy(out, s, n + 1);
    return 1;
}

int mv_scsvc_parse_scaledobject(const char *json, size_t len, mv_scsvc_target_ref *out, char *err,
                                size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_object *root = parse_object(json, len);
    if (!root)
        return bad(err, errlen, "ScaledObject", "not a JSON object");
    int rc = 0;
    json_object *ref = member(member(root, "spec"), "scaleTargetRef");
    if (!ref || !json_object_is_type(ref, json_type_object)) {
        rc = bad(err, errlen, "ScaledObject spec.scaleTargetRef", "missing or not an object");
        goto out;
    }
    int r = opt_string(ref, "name", out->name, sizeof out->name);
    if (r <= 0 || !name_ok(out->name, MV_SCSVC_NAME_MAX)) {
        rc = bad(err, errlen, "ScaledObject spec.scaleTargetRef.name",
                 r == 0 ? "missing" : "not an object name");
        goto out;
    }
    r = opt_string(ref, "apiVersion", out->api_version, sizeof out->api_version);
    if (r < 0 || (r == 1 && (!out->api_version[0] ||
                             strspn(out->api_version, "abcdefghijklmnopqrstuvwxyz0123456789-./") !=
                                 strlen(out->api_version)))) {
        rc = bad(err, errlen, "ScaledObject spec.scaleTargetRef.apiVersion", "not a group/version");
        goto out;
    }
    if (!out->api_version[0])
        memcpy(out->api_version, "apps/v1", sizeof "apps/v1");
    r = opt_string(ref, "kind", out->kind, sizeof out->kind);
    if (r < 0 || (r == 1 && (!out->kind[0] ||
                             strspn(out->kind, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXY"
                                               "Z0123456789") != strlen(out->kind)))) {
        rc = bad(err, errlen, "ScaledObject spec.scaleTargetRef.kind", "not a kind name");
        goto out;
    }
    if (!out->kind[0])
        memcpy(out->kind, "Deployment", sizeof "Deployment");
out:
    json_object_put(root);
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}

const char *mv_scsvc_scale_resource(const mv_scsvc_target_ref *t)
{
    static const struct {
        const char *kind, *resource;
    } known[] = {
        {"Deployment", "deployments"},
        {"StatefulSet", "statefulsets"},
        {"ReplicaSet", "replicasets"},
    };
    if (strcmp(t->api_version, "apps/v1") != 0)
        return NULL;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(t->kind, known[i].kind) == 0)
            return known[i].resource;
    return NULL;
}

int mv_scsvc_parse_scale(const char *json, size_t len, char *sel_text, char *err, size_t errlen)
{
    sel_text[0] = '\0';
    json_object *root = parse_object(json, len);
    if (!root)
        return bad(err, errlen, "Scale", "not a JSON object");
    int rc = 0;
    json_object *st = member(root, "status");
    int r = st && json_object_is_type(st, json_type_object)
                ? opt_string(st, "selector", sel_text, MV_SCSVC_SELECTOR_MAX)
                : 0;
    if (r <= 0 || !sel_text[0]) {
        sel_text[0] = '\0';
        rc = bad(err, errlen, "Scale status.selector",
                 r < 0 ? "not a string of at most 2048 bytes" : "missing or empty");
    }
    json_object_put(root);
    return rc;
}
