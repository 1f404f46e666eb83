/* mv_scaler_discover: which collectors to ask, from the API server: the nodes of the workload's
 * running pods, and the collector pod of each of those nodes (see mv_scaler.h). */
#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_kubec.h"
#include "mv_scaler.h"
#include "mv_util.h"

#define PODLIST_MAX (16u << 20) /* bytes of one pod list accepted */
#define JSON_DEPTH  32

static const char *str_at(json_object *o, const char *a, const char *b)
{
    json_object *x;
    if (!json_object_object_get_ex(o, a, &x) || !json_object_object_get_ex(x, b, &x) ||
        !json_object_is_type(x, json_type_string))
        return NULL;
    return json_object_get_string(x);
}

typedef struct labels_ctx {
    json_object *labels; /* metadata.labels, or NULL */
} labels_ctx;

static const char *pod_label(void *ctx, const char *key, size_t klen)
{
    labels_ctx *l = ctx;
    if (!l->labels)
        return NULL;
    json_object_object_foreach(l->labels, k, v)
    {
        if (strlen(k) == klen && memcmp(k, key, klen) == 0 &&
            json_object_is_type(v, json_type_string))
            return json_object_get_string(v);
    }
    return NULL;
}

/* GETs the pods of `ns` that `sel` selects (asked of the API server and checked here again),
 * Running ones only. Returns 0 with *items (an array owned by *root), or -EIO with err. */
static int list_pods(const mv_scaler_discovery *d, const char *ns, const mv_lsel *sel,
                     json_object **root, json_object **items, char *err, size_t errlen)
{
    char text[4 * MV_LSEL_TEXT_MAX], url[16384];
    mv_lsel_format(sel, text, sizeof text);
    CURL *e = curl_easy_init();
    char *esc = e ? curl_easy_escape(e, text, 0) : NULL;
    curl_easy_cleanup(e);
    if (!esc)
        return -ENOMEM;
    snprintf(url, sizeof url, "%s/api/v1/namespaces/%s/pods?labelSelector=%s", d->api, ns, esc);
    curl_free(esc);
    mv_util_buf b = {.cap = PODLIST_MAX};
    long status = 0;
    char what[160];
    snprintf(what, sizeof what, "pods of namespace %s", ns);
    int rc = mv_kubec_request(d->cred, url, what, NULL, d->timeout_ms, &b, &status, err, errlen);
    if (rc == 0 && status != 200) {
        snprintf(err, errlen, "GET %s: HTTP %ld", what, status);
        rc = -EIO;
    }
    if (rc == 0 &&
        mv_kubec_json_parse(b.data ? b.data : "", b.len, PODLIST_MAX, JSON_DEPTH, root) != 0) {
        snprintf(err, errlen, "GET %s: the answer is not a pod list", what);
        rc = -EIO;
    }
    mv_util_buf_free(&b);
    if (rc)
        return rc;
    if (!json_object_object_get_ex(*root, "items", items) ||
        !json_object_is_type(*items, json_type_array)) {
        json_object_put(*root);
        *root = NULL;
        snprintf(err, errlen, "GET %s: the answer has no items", what);
        return -EIO;
    }
    return 0;
}

static int selected_running(json_object *pod, const mv_lsel *sel)
{
    const char *phase = str_at(pod, "status", "phase");
    json_object *md = NULL, *labels = NULL;
    if (!phase || strcmp(phase, "Running") != 0)
        return 0;
    if (json_object_object_get_ex(pod, "metadata", &md))
        json_object_object_get_ex(md, "labels", &labels);
    labels_ctx l = {labels && json_object_is_type(labels, json_type_object) ? labels : NULL};
    return mv_lsel_match(sel, pod_label, &l);
}

void mv_scaler_targets_clear(mv_scaler_targets *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->bases[i]);
    free(t->bases);
    memset(t, 0, sizeof *t);
}

int mv_scaler_discover(const mv_scaler_discovery *d, const mv_scaler_meta *m,
                       mv_scaler_targets *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_object *wroot = NULL, *witems, *croot = NULL, *citems;
    int rc = list_pods(d, m->namespace_, &m->selector, &wroot, &witems, err, errlen);
    if (rc == 0)
        rc = list_pods(d, d->collector_namespace, &d->collector_selector, &croot, &citems, err,
                       errlen);
    if (rc) {
        json_object_put(wroot);
        return rc;
    }
    size_t nw = json_object_array_length(witems), nc = json_object_array_length(citems);
    out->bases = calloc(nc ? nc : 1, sizeof *out->bases);
    if (!out->bases) {
        rc = -ENOMEM;
        goto done;
    }
    /* Every node that runs a selected pod, once. */
    for (size_t i = 0; i < nw; i++) {
        json_object *p = json_object_array_get_idx(witems, i);
        const char *node = str_at(p, "spec", "nodeName");
        if (!node || !selected_running(p, &m->selector))
            continue;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) {
            json_object *q = json_object_array_get_idx(witems, j);
            const char *qn = str_at(q, "spec", "nodeName");
            seen = qn && strcmp(qn, node) == 0 && selected_running(q, &m->selector);
        }
        if (seen)
            continue;
        out->nodes++;
        const char *ip = NULL;
        for (size_t j = 0; j < nc && !ip; j++) {
            json_object *c = json_object_array_get_idx(citems, j);
            const char *cn = str_at(c, "spec", "nodeName");
            if (cn && strcmp(cn, node) == 0 && selected_running(c, &d->collector_selector))
                ip = str_at(c, "status", "podIP");
        }
        if (!ip || strlen(ip) > 45 || strspn(ip, "0123456789abcdefABCDEF.:") != strlen(ip)) {
            out->uncovered++; /* a node of the workload without a collector to ask */
            if (!out->first_uncovered[0])
                snprintf(out->first_uncovered, sizeof out->first_uncovered, "%.200s", node);
            continue;
        }
        char base[96];
        snprintf(base, sizeof base, strchr(ip, ':') ? "http://[%s]:%u" : "http://%s:%u", ip,
                 d->collector_port);
        if (out->n == MV_SCALER_COLLECTORS_MAX || !(out->bases[out->n] = strdup(base))) {
            rc = out->n == MV_SCALER_COLLECTORS_MAX ? -E2BIG : -ENOMEM;
            goto done;
        }
        out->n++;
    }
done:
    json_object_put(wroot);
    json_object_put(croot);
    if (rc)
        mv_scaler_targets_clear(out);
    return rc;
}
