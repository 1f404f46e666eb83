/* mv_kube: pod lookups on the API server, pod JSON and label annotation parsing. */
#include "mv_kube.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "mv_kubec.h"
#include "mv_log.h"
#include "mv_util.h"
#include "mv_segment.h"

#define JSON_DEPTH  64
#define NAME_MAX_K8 253

struct mv_kube {
    char *url;
    int timeout_ms;
    mv_kubec_cred *cred;
};

/* ---- Small value helpers ------------------------------------------------------- */

void mv_kube_kvs_free(mv_kube_kv *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        free(v[i].key);
        free(v[i].value);
    }
    free(v);
}

void mv_kube_pod_clear(mv_kube_pod *p)
{
    if (!p)
        return;
    free(p->namespace_);
    free(p->name);
    free(p->uid);
    free(p->node_name);
    mv_kube_kvs_free(p->labels, p->nlabels);
    mv_kube_kvs_free(p->annotations, p->nannotations);
    for (size_t i = 0; i < p->ncontainers; i++)
        free(p->containers[i].name);
    free(p->containers);
    memset(p, 0, sizeof *p);
}

void mv_kube_pod_owner(const mv_kube_pod *p, const char *container, int64_t *uid, int64_t *gid)
{
    const mv_kube_container *c = NULL;
    for (size_t i = 0; container && i < p->ncontainers && !c; i++)
        if (p->containers[i].name && strcmp(p->containers[i].name, container) == 0)
            c = &p->containers[i];
    *uid = c && c->run_as_user >= 0 ? c->run_as_user : p->run_as_user;
    *gid = c && c->run_as_group >= 0 ? c->run_as_group
           : p->run_as_group >= 0    ? p->run_as_group
                                     : p->fs_group;
}

const char *mv_kube_pod_annotation(const mv_kube_pod *p, const char *key)
{
    for (size_t i = 0; i < p->nannotations; i++)
        if (strcmp(p->annotations[i].key, key) == 0)
            return p->annotations[i].value;
    return NULL;
}

/* ---- Pod JSON -------------------------------------------------------------------- */

static int get_str(json_object *o, const char *key, char **out)
{
    json_object *v;
    *out = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return -EINVAL;
    int n = json_object_get_string_len(v);
    const char *s = json_object_get_string(v);
    if (n < 0 || strlen(s) != (size_t)n) /* embedded NUL */
        return -EINVAL;
    *out = strdup(s);
    return *out ? 0 : -ENOMEM;
}

static int get_map(json_object *o, const char *key, mv_kube_kv **out, size_t *n)
{
    json_object *m;
    *out = NULL;
    *n = 0;
    if (!o || !json_object_object_get_ex(o, key, &m) || json_object_is_type(m, json_type_null))
        return 0;
    if (!json_object_is_type(m, json_type_object))
        return -EINVAL;
    size_t cnt = (size_t)json_object_object_length(m);
    if (cnt > MV_KUBE_KV_MAX)
        return -E2BIG;
    mv_kube_kv *v = calloc(cnt ? cnt : 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t i = 0;
    json_object_object_foreach(m, k, val)
    {
        if (i >= cnt || !json_object_is_type(val, json_type_string)) {
            mv_kube_kvs_free(v, i);
            return -EINVAL;
        }
        const char *s = json_object_get_string(val);
        if (strlen(s) != (size_t)json_object_get_string_len(val)) {
            mv_kube_kvs_free(v, i);
            return -EINVAL;
        }
        v[i].key = strdup(k);
        v[i].value = strdup(s);
        i++;
        if (!v[i - 1].key || !v[i - 1].value) {
            mv_kube_kvs_free(v, i);
            return -ENOMEM;
        }
    }
    *out = v;
    *n = i;
    return 0;
}

/* securityContext ids: absent or null = -1; otherwise an integer in 0..2^31-1. */
static int get_id(json_object *o, const char *key, int64_t *out)
{
    json_object *v;
    *out = -1;
    if (!o || !json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_int))
        return -EINVAL;
    int64_t x = json_object_get_int64(v);
    if (x < 0 || x > INT32_MAX)
        return -EINVAL;
    *out = x;
    return 0;
}

static json_object *get_obj(json_object *o, const char *key)
{
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_object)
               ? v
               : NULL;
}

/* spec.securityContext and the containers' (containers and initContainers). */
static int parse_security(json_object *spec, mv_kube_pod *out, char *err, size_t errlen)
{
    json_object *psc = get_obj(spec, "securityContext");
    if (get_id(psc, "runAsUser", &out->run_as_user) < 0 ||
        get_id(psc, "runAsGroup", &out->run_as_group) < 0 ||
        get_id(psc, "fsGroup", &out->fs_group) < 0) {
        mv_util_err_set(err, errlen,
                        "pod securityContext: runAsUser, runAsGroup and fsGroup must be "
                        "integers in 0..2147483647");
        return -EINVAL;
    }
    static const char *const lists[2] = {"containers", "initContainers"};
    size_t total = 0;
    json_object *arr[2] = {NULL, NULL};
    for (int l = 0; l < 2; l++) {
        json_object *a;
        if (spec && json_object_object_get_ex(spec, lists[l], &a) &&
            json_object_is_type(a, json_type_array)) {
            arr[l] = a;
            total += json_object_array_length(a);
        }
    }
    if (total > MV_KUBE_KV_MAX) {
        mv_util_err_set(err, errlen, "pod has more than %d containers", MV_KUBE_KV_MAX);
        return -EINVAL;
    }
    out->containers = calloc(total ? total : 1, sizeof *out->containers);
    if (!out->containers)
        return -ENOMEM;
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; arr[l] && i < json_object_array_length(arr[l]); i++) {
            json_object *c = json_object_array_get_idx(arr[l], i);
            mv_kube_container *k = &out->containers[out->ncontainers];
            if (!json_object_is_type(c, json_type_object))
                continue;
            int rc = get_str(c, "name", &k->name);
            json_object *csc = get_obj(c, "securityContext");
            if (rc == 0 && (get_id(csc, "runAsUser", &k->run_as_user) < 0 ||
                            get_id(csc, "runAsGroup", &k->run_as_group) < 0))
                rc = -EINVAL;
            out->ncontainers++;
            if (rc < 0) {
                mv_util_err_set(err, errlen, "container %zu of %s: bad name or securityContext ids",
                                i, lists[l]);
                return rc;
            }
        }
    return 0;
}

int mv_kube_parse_pod(const char *json, size_t len, mv_kube_pod *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_object *root;
    int rc = mv_kubec_json_parse(json, len, MV_KUBE_BODY_MAX, JSON_DEPTH, &root);
    if (rc == -E2BIG) {
        mv_util_err_set(err, errlen, "pod JSON larger than %u bytes", MV_KUBE_BODY_MAX);
        return -EINVAL;
    }
    if (rc == -ENOMEM)
        return rc;
    rc = -EINVAL;
    if (!root) {
        mv_util_err_set(err, errlen, "pod is not valid JSON");
        return rc;
    }
    json_object *kind, *meta = NULL, *spec = NULL;
    if (!json_object_is_type(root, json_type_object) ||
        !json_object_object_get_ex(root, "kind", &kind) ||
        !json_object_is_type(kind, json_type_string) ||
        strcmp(json_object_get_string(kind), "Pod") != 0) {
        mv_util_err_set(err, errlen, "not a Pod object");
        goto put_root;
    }
    if (!json_object_object_get_ex(root, "metadata", &meta) ||
        !json_object_is_type(meta, json_type_object)) {
        mv_util_err_set(err, errlen, "pod has no metadata object");
        goto put_root;
    }
    if (json_object_object_get_ex(root, "spec", &spec) &&
        !json_object_is_type(spec, json_type_object))
        spec = NULL;
    if ((rc = get_str(meta, "namespace", &out->namespace_)) < 0 ||
        (rc = get_str(meta, "name", &out->name)) < 0 ||
        (rc = get_str(meta, "uid", &out->uid)) < 0 ||
        (rc = get_str(spec, "nodeName", &out->node_name)) < 0) {
        mv_util_err_set(err, errlen, "pod metadata field is not a string");
        goto clear;
    }
    if (!out->name || !out->namespace_) {
        rc = -EINVAL;
        mv_util_err_set(err, errlen, "pod metadata lacks name or namespace");
        goto clear;
    }
    if ((rc = get_map(meta, "labels", &out->labels, &out->nlabels)) < 0 ||
        (rc = get_map(meta, "annotations", &out->annotations, &out->nannotations)) < 0) {
        mv_util_err_set(err, errlen, "pod labels or annotations are not a string map of at most %d",
                        MV_KUBE_KV_MAX);
        goto clear;
    }
    if ((rc = parse_security(spec, out, err, errlen)) < 0)
        goto clear;
    rc = 0;
    goto put_root;
clear:
    if (rc != -ENOMEM)
        rc = -EINVAL;
    mv_kube_pod_clear(out);
put_root:
    json_object_put(root);
    return rc;
}

/* ---- Annotation ------------------------------------------------------------------- */

static int reserved(const char *k)
{
    return strcmp(k, "namespace") == 0 || strcmp(k, "pod") == 0 || strcmp(k, "container") == 0 ||
           strcmp(k, "device") == 0 || strncmp(k, "__", 2) == 0;
}

int mv_kube_parse_labels(const char *s, mv_kube_kv **out, size_t *n,
                         void (*on_invalid)(void *arg, const char *entry, const char *why),
                         void *arg)
{
    *out = NULL;
    *n = 0;
    if (!s)
        return 0;
    mv_kube_kv *v = calloc(MV_KUBE_POD_LABELS_MAX, sizeof *v);
    char *copy = strdup(s);
    if (!v || !copy) {
        free(v);
        free(copy);
        return -ENOMEM;
    }
    size_t cnt = 0;
    char *save = NULL;
    for (char *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        while (*e == ' ' || *e == '\t' || *e == '\n')
            e++;
        size_t el = strlen(e);
        while (el && (e[el - 1] == ' ' || e[el - 1] == '\t' || e[el - 1] == '\n'))
            e[--el] = 0;
        if (!el)
            continue;
        const char *why = NULL;
        char *eq = strchr(e, '=');
        if (!eq) {
            why = "expected name=value";
        } else {
            *eq = 0;
            const char *k = e, *val = eq + 1;
            size_t kl = strlen(k), vl = strlen(val);
            if (!kl || kl > 127 || !mv_seg_valid_label_name(k, kl))
                why = "label name must match [a-zA-Z_][a-zA-Z0-9_]*";
            else if (reserved(k))
                why = "label name is reserved";
            else if (vl > MV_KUBE_LABEL_VALUE_MAX || !mv_seg_valid_utf8(val, vl))
                why = "value must be UTF-8 of at most 255 bytes";
            else if (cnt == MV_KUBE_POD_LABELS_MAX)
                why = "too many labels (at most 13)";
            for (size_t i = 0; !why && i < cnt; i++)
                if (strcmp(v[i].key, k) == 0)
                    why = "label given twice";
            if (!why) {
                v[cnt].key = strdup(k);
                v[cnt].value = strdup(val);
                cnt++;
                if (!v[cnt - 1].key || !v[cnt - 1].value) {
                    mv_kube_kvs_free(v, cnt);
                    free(copy);
                    return -ENOMEM;
                }
                continue;
            }
            *eq = '=';
        }
        if (on_invalid)
            on_invalid(arg, e, why);
    }
    free(copy);
    if (!cnt) {
        free(v);
        v = NULL;
    }
    *out = v;
    *n = cnt;
    return (int)cnt;
}

/* ---- HTTP -------------------------------------------------------------------------- */

/* DNS-1123 names: what namespaces and pod names may be. */
static int valid_k8s_name(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (!n || n > NAME_MAX_K8)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            return 0;
    return 1;
}

int mv_kube_get_pod(mv_kube *k, const char *ns, const char *name, mv_kube_pod *out, char *err,
                    size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!valid_k8s_name(ns) || !valid_k8s_name(name)) {
        mv_util_err_set(err, errlen, "not a valid namespace/pod name");
        return -EINVAL;
    }
    size_t ul = strlen(k->url) + strlen(ns) + strlen(name) + 64;
    char *url = malloc(ul);
    if (!url)
        return -ENOMEM;
    snprintf(url, ul, "%s/api/v1/namespaces/%s/pods/%s", k->url, ns, name);
    long status = 0;
    mv_util_buf b = {.cap = MV_KUBE_BODY_MAX};
    int rc = mv_kubec_request(k->cred, url, url, NULL, k->timeout_ms, &b, &status, err, errlen);
    if (rc == 0) {
        if (status == 200) {
            rc = mv_kube_parse_pod(b.data ? b.data : "", b.len, out, err, errlen);
            if (rc < 0)
                rc = -EIO;
        } else if (status == 404) {
            mv_util_err_set(err, errlen, "pod %s/%s not found", ns, name);
            rc = -ENOENT;
        } else if (status == 401 || status == 403) {
            mv_util_err_set(err, errlen, "GET %s: HTTP %ld (check the token and RBAC: pods get)",
                            url, status);
            rc = -EACCES;
        } else {
            mv_util_err_set(err, errlen, "GET %s: HTTP %ld", url, status);
            rc = -EIO;
        }
    }
    mv_util_buf_free(&b);
    free(url);
    return rc;
}

int mv_kube_create(const mv_kube_opts *o, mv_kube **out)
{
    *out = NULL;
    if (!o || !o->url || (strncmp(o->url, "http://", 7) && strncmp(o->url, "https://", 8))) {
        MV_ERROR("kube.bad_url", "url=%s detail=%s", mv_log_q(o && o->url ? o->url : ""),
                 mv_log_q("need http:// or https://"));
        return -EINVAL;
    }
    mv_kube *k = calloc(1, sizeof *k);
    if (!k)
        return -ENOMEM;
    int reread_s = o->token_reread_s > 0 ? o->token_reread_s : 60;
    mv_kubec_cred_opts co = {.token_file = o->token_file,
                             .ca_file = o->ca_file,
                             .log_area = "kube",
                             .reread_s = reread_s,
                             .retry_s = reread_s};
    k->url = strdup(o->url);
    k->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
    if (!k->url || mv_kubec_cred_create(&co, &k->cred) < 0) {
        mv_kube_destroy(k);
        return -ENOMEM;
    }
    size_t ul = strlen(k->url);
    while (ul > 8 && k->url[ul - 1] == '/')
        k->url[--ul] = 0;
    *out = k;
    return 0;
}

void mv_kube_destroy(mv_kube *k)
{
    if (!k)
        return;
    mv_kubec_cred_destroy(k->cred);
    free(k->url);
    free(k);
}
