/* mv_wh_review: AdmissionReview v1 request -> decision -> AdmissionReview response (json-c). */
#include "mv_webhook.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "mv_util.h"

#define ACCEPTED_FORM                                                                              \
    "a positive Kubernetes quantity of bytes such as 65536, 64Ki, 1Mi, 100k or 1e6"
#define CONTAINERS_FORM                                                                            \
    "container names of spec.containers separated by commas, such as app,sidecar"
#define MAX_CONTAINERS 1024 /* far above what the API server accepts in one pod */
#define MAX_WARNINGS   4
#define JSON_DEPTH     64

void mv_wh_config_default(mv_wh_config *c)
{
    memset(c, 0, sizeof *c);
    c->page_size = 4096;
    c->max_pages_per_pod = 4096;
    snprintf(c->resource_name, sizeof c->resource_name, "%s", "microview.io/metrics");
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* An extended resource name: "<domain>/<name>", DNS-ish characters only. */
static int valid_resource_name(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/'))
        return 0;
    for (const char *p = s; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_' || c == '/'))
            return 0;
    }
    return strncmp(s, "kubernetes.io/", 14) != 0;
}

int mv_wh_config_check(const mv_wh_config *c, char *err, size_t errlen)
{
    if (c->page_size == 0 || c->page_size % 4096 || c->page_size > (1ull << 30)) {
        set_err(err, errlen, "page size %" PRIu64 ": must be a positive multiple of 4096 up to 1Gi",
                c->page_size);
        return -EINVAL;
    }
    if (c->max_pages_per_pod == 0 || c->max_pages_per_pod > 100000000) {
        set_err(err, errlen, "max pages per pod %" PRIu64 ": must be 1 to 100000000",
                c->max_pages_per_pod);
        return -EINVAL;
    }
    size_t n = strnlen(c->resource_name, sizeof c->resource_name);
    if (n == 0 || n > MV_WH_RESOURCE_MAX || !valid_resource_name(c->resource_name)) {
        set_err(err, errlen,
                "resource name \"%.*s\": must look like example.com/name (letters, digits, "
                "'-', '.', '_' and one '/', not under kubernetes.io/)",
                (int)(n > 64 ? 64 : n), c->resource_name);
        return -EINVAL;
    }
    return 0;
}

void mv_wh_result_free(mv_wh_result *r)
{
    if (!r)
        return;
    free(r->body);
    free(r->patch);
    free(r->message);
    r->body = r->patch = r->message = NULL;
}

/* ---- small helpers -------------------------------------------------------------------------- */

typedef struct {
    char msg[1024];
} problem;

static void say(problem *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(problem *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof p->msg, fmt, ap);
    va_end(ap);
}

static const char *type_name(json_object *o)
{
    return o ? json_type_to_name(json_object_get_type(o)) : "null";
}

/* A member of `o` that must have type `want` when present (null counts as absent). Returns 1
 * when present, 0 when absent, -1 when mistyped (with a problem naming `path`). */
static int member(json_object *o, const char *key, json_type want, json_object **out,
                  const char *path, problem *p)
{
    json_object *v = NULL;
    *out = NULL;
    if (!json_object_object_get_ex(o, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, want)) {
        say(p, "%s.%s must be %s, not %s", path, key, json_type_to_name(want), type_name(v));
        return -1;
    }
    *out = v;
    return 1;
}

/* Copies a string member (when present and a string) into dst, truncating. */
static void copy_str(char *dst, size_t cap, json_object *s)
{
    if (!cap)
        return;
    dst[0] = '\0';
    if (s && json_object_is_type(s, json_type_string))
        snprintf(dst, cap, "%s", json_object_get_string(s));
}

static int has_nul(json_object *s)
{
    return strlen(json_object_get_string(s)) != (size_t)json_object_get_string_len(s);
}

/* Quotes a value for a message: at most 64 bytes cut on a character boundary, control
 * characters, '"' and bytes that are not valid UTF-8 as '?', so the message stays valid UTF-8. */
static const char *quoted(const char *s, size_t len, char *buf, size_t cap)
{
    size_t n = 0, lim = mv_util_utf8_cut(s, len, 64);
    buf[n++] = '"';
    for (size_t i = 0; i < lim && n + 9 < cap;) {
        size_t cl = mv_util_utf8_char_len(s + i, len - i);
        unsigned char c = (unsigned char)s[i];
        if (cl > 1) {
            memcpy(buf + n, s + i, cl);
            n += cl;
            i += cl;
            continue;
        }
        buf[n++] = (cl == 0 || c < 0x20 || c == 0x7f || c == '"') ? '?' : (char)c;
        i++;
    }
    if (lim < len) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    return buf;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const char *in, size_t len)
{
    size_t olen = 4 * ((len + 2) / 3);
    char *out = malloc(olen + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        if (i + 2 < len)
            v |= (uint32_t)(unsigned char)in[i + 2];
        out[o++] = B64[(v >> 18) & 63];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = i + 1 < len ? B64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? B64[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

/* "microview.io/metrics" -> "microview.io~1metrics" (RFC 6901). */
static void pointer_escape(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 3 < cap; s++) {
        if (*s == '~' || *s == '/') {
            out[n++] = '~';
            out[n++] = *s == '~' ? '0' : '1';
        } else {
            out[n++] = *s;
        }
    }
    out[n] = '\0';
}

static int set_text(mv_wh_result *r, unsigned status, mv_wh_result_kind kind, const char *msg)
{
    r->kind = kind;
    r->http_status = status;
    r->content_type = "text/plain; charset=utf-8";
    r->message = strdup(msg);
    size_t n = strlen(msg);
    r->body = malloc(n + 2);
    if (!r->message || !r->body) {
        mv_wh_result_free(r);
        return -ENOMEM;
    }
    memcpy(r->body, msg, n);
    r->body[n] = '\n';
    r->body[n + 1] = '\0';
    r->body_len = n + 1;
    return 0;
}

static const char *to_json(json_object *o)
{
    return json_object_to_json_string_ext(o,
                                          JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* Builds the AdmissionReview response. `patch` may be NULL; `code` is used when denied. */
static int set_review(mv_wh_result *r, mv_wh_result_kind kind, json_object *patch, unsigned code,
                      const char *msg, const char *const *warnings, size_t nwarn)
{
    int rc = -ENOMEM;
    json_object *root = json_object_new_object();
    json_object *resp = json_object_new_object();
    if (!root || !resp) {
        json_object_put(root);
        json_object_put(resp);
        return -ENOMEM;
    }
    int allowed = kind == MV_WH_ALLOWED || kind == MV_WH_PATCHED;
    json_object_object_add(root, "apiVersion", json_object_new_string("admission.k8s.io/v1"));
    json_object_object_add(root, "kind", json_object_new_string("AdmissionReview"));
    json_object_object_add(root, "response", resp);
    json_object_object_add(resp, "uid", json_object_new_string(r->uid));
    json_object_object_add(resp, "allowed", json_object_new_boolean(allowed));
    if (patch) {
        const char *ps = to_json(patch);
        r->patch = strdup(ps);
        char *b = base64(ps, strlen(ps));
        if (!r->patch || !b) {
            free(b);
            goto out;
        }
        json_object_object_add(resp, "patchType", json_object_new_string("JSONPatch"));
        json_object_object_add(resp, "patch", json_object_new_string(b));
        free(b);
    }
    if (!allowed) {
        json_object *st = json_object_new_object();
        if (!st)
            goto out;
        json_object_object_add(st, "code", json_object_new_int((int)code));
        json_object_object_add(st, "message", json_object_new_string(msg));
        json_object_object_add(resp, "status", st);
    }
    if (nwarn) {
        json_object *w = json_object_new_array();
        if (!w)
            goto out;
        for (size_t i = 0; i < nwarn; i++)
            json_object_array_add(w, json_object_new_string(warnings[i]));
        json_object_object_add(resp, "warnings", w);
    }
    if (msg && !(r->message = strdup(msg)))
        goto out;
    const char *s = to_json(root);
    r->body_len = strlen(s);
    if (!(r->body = strdup(s)))
        goto out;
    r->kind = kind;
    r->http_status = 200;
    r->content_type = "application/json";
    rc = 0;
out:
    json_object_put(root);
    if (rc)
        mv_wh_result_free(r);
    return rc;
}

/* ---- the pod -------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    json_object *obj;       /* the container object */
    json_object *resources; /* NULL when absent or null */
    json_object *requests, *limits;
    json_object *req_val, *lim_val; /* the resource's entries, NULL when absent */
    int chosen;
} container;

typedef struct {
    container *c;
    size_t n;
} container_list;

static int read_containers(json_object *spec, const char *key, const char *resource,
                           container_list *out, problem *p)
{
    json_object *arr;
    char path[64];
    out->c = NULL;
    out->n = 0;
    snprintf(path, sizeof path, "spec.%s", key);
    int m = member(spec, key, json_type_array, &arr, "spec", p);
    if (m <= 0)
        return m;
    size_t n = json_object_array_length(arr);
    if (n > MAX_CONTAINERS) {
        say(p, "%s has %zu entries, more than %d", path, n, MAX_CONTAINERS);
        return -1;
    }
    if (n == 0)
        return 0;
    out->c = calloc(n, sizeof *out->c);
    if (!out->c) {
        say(p, "out of memory");
        return -1;
    }
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        container *c = &out->c[i];
        json_object *o = json_object_array_get_idx(arr, i), *name;
        char ipath[96];
        snprintf(ipath, sizeof ipath, "%s[%zu]", path, i);
        if (!o || !json_object_is_type(o, json_type_object)) {
            say(p, "%s must be an object, not %s", ipath, type_name(o));
            return -1;
        }
        c->obj = o;
        if (member(o, "name", json_type_string, &name, ipath, p) <= 0 ||
            json_object_get_string_len(name) == 0 || has_nul(name)) {
            if (!p->msg[0])
                say(p, "%s.name must be a non-empty string", ipath);
            return -1;
        }
        c->name = json_object_get_string(name);
        char rpath[128];
        snprintf(rpath, sizeof rpath, "%s.resources", ipath);
        if (member(o, "resources", json_type_object, &c->resources, ipath, p) < 0)
            return -1;
        if (!c->resources)
            continue;
        if (member(c->resources, "requests", json_type_object, &c->requests, rpath, p) < 0 ||
            member(c->resources, "limits", json_type_object, &c->limits, rpath, p) < 0)
            return -1;
        char qpath[160];
        snprintf(qpath, sizeof qpath, "%s.requests", rpath);
        if (c->requests &&
            member(c->requests, resource, json_type_string, &c->req_val, qpath, p) < 0)
            return -1;
        snprintf(qpath, sizeof qpath, "%s.limits", rpath);
        if (c->limits && member(c->limits, resource, json_type_string, &c->lim_val, qpath, p) < 0)
            return -1;
    }
    return 1;
}

/* The pages an existing request or limit names, or -1 when it is not a whole number. */
static int64_t existing_pages(json_object *v)
{
    uint64_t b;
    int rounded;
    if (mv_wh_quantity_bytes(json_object_get_string(v), (size_t)json_object_get_string_len(v), &b,
                             &rounded, NULL, 0) != 0 ||
        rounded)
        return -1;
    return (int64_t)b;
}

static json_object *add_op(const char *path, json_object *value)
{
    json_object *op = json_object_new_object();
    if (!op) {
        json_object_put(value);
        return NULL;
    }
    json_object_object_add(op, "op", json_object_new_string("add"));
    json_object_object_add(op, "path", json_object_new_string(path));
    json_object_object_add(op, "value", value);
    return op;
}

static json_object *one_entry(const char *resource, const char *pages)
{
    json_object *m = json_object_new_object();
    if (m)
        json_object_object_add(m, resource, json_object_new_string(pages));
    return m;
}

/* Appends the operations that give container `idx` requests and limits of `pages`. */
static int patch_container(json_object *ops, size_t idx, const container *c, const char *resource,
                           const char *pages)
{
    char base[64], esc[2 * MV_WH_RESOURCE_MAX + 1], path[2 * MV_WH_RESOURCE_MAX + 128];
    snprintf(base, sizeof base, "/spec/containers/%zu/resources", idx);
    pointer_escape(resource, esc, sizeof esc);
    if (!c->resources) {
        json_object *r = json_object_new_object();
        if (!r)
            return -ENOMEM;
        json_object_object_add(r, "requests", one_entry(resource, pages));
        json_object_object_add(r, "limits", one_entry(resource, pages));
        json_object *op = add_op(base, r);
        return op ? json_object_array_add(ops, op) : -ENOMEM;
    }
    const char *which[2] = {"requests", "limits"};
    json_object *maps[2] = {c->requests, c->limits};
    json_object *vals[2] = {c->req_val, c->lim_val};
    for (int k = 0; k < 2; k++) {
        json_object *op;
        if (vals[k])
            continue; /* present and equal (checked by the caller) */
        if (!maps[k]) {
            snprintf(path, sizeof path, "%s/%s", base, which[k]);
            op = add_op(path, one_entry(resource, pages));
        } else {
            snprintf(path, sizeof path, "%s/%s/%s", base, which[k], esc);
            op = add_op(path, json_object_new_string(pages));
        }
        if (!op || json_object_array_add(ops, op) != 0)
            return -ENOMEM;
    }
    return 0;
}

/* Splits the containers annotation and marks the chosen containers. Returns 0 or -1. */
static int choose(const char *list, size_t len, container_list *cs, const container_list *init,
                  problem *p)
{
    char q[96];
    quoted(list, len, q, sizeof q);
    size_t i = 0;
    if (len == 0) {
        say(p, MV_WH_ANN_CONTAINERS "=%s: empty; write " CONTAINERS_FORM, q);
        return -1;
    }
    while (i <= len) {
        size_t j = i;
        while (j < len && list[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && (list[a] == ' ' || list[a] == '\t'))
            a++;
        while (b > a && (list[b - 1] == ' ' || list[b - 1] == '\t'))
            b--;
        if (a == b) {
            say(p, MV_WH_ANN_CONTAINERS "=%s: empty name in the list; write " CONTAINERS_FORM, q);
            return -1;
        }
        size_t nl = b - a;
        container *hit = NULL;
        for (size_t k = 0; k < cs->n; k++)
            if (strlen(cs->c[k].name) == nl && memcmp(cs->c[k].name, list + a, nl) == 0)
                hit = &cs->c[k];
        char nq[96];
        quoted(list + a, nl, nq, sizeof nq);
        if (!hit) {
            int is_init = 0;
            for (size_t k = 0; k < init->n; k++)
                if (strlen(init->c[k].name) == nl && memcmp(init->c[k].name, list + a, nl) == 0)
                    is_init = 1;
            char names[256];
            size_t o = 0;
            names[0] = '\0';
            for (size_t k = 0; k < cs->n && o + 4 < sizeof names; k++)
                o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", k ? ", " : "",
                                      cs->c[k].name);
            if (o >= sizeof names)
                memcpy(names + sizeof names - 4, "...", 4);
            if (is_init)
                say(p,
                    MV_WH_ANN_CONTAINERS "=%s: %s is an init container; only spec.containers get "
                                         "metrics memory (containers: %s); write " CONTAINERS_FORM,
                    q, nq, names);
            else
                say(p,
                    MV_WH_ANN_CONTAINERS "=%s: no container %s in spec.containers (containers: "
                                         "%s); write " CONTAINERS_FORM,
                    q, nq, names);
            return -1;
        }
        if (hit->chosen) {
            say(p, MV_WH_ANN_CONTAINERS "=%s: container %s is listed twice; write " CONTAINERS_FORM,
                q, nq);
            return -1;
        }
        hit->chosen = 1;
        i = j + 1;
    }
    return 0;
}

typedef enum { D_ALLOW, D_PATCH, D_DENY, D_ERROR } decision;

/* Decides for a Pod CREATE. Fills `ops` (PATCH), `p` (DENY/ERROR), warnings. */
static decision decide(const mv_wh_config *cfg, json_object *pod, mv_wh_result *r, json_object *ops,
                       unsigned *code, problem *p, char warn[][512], size_t *nwarn)
{
    decision d = D_ERROR;
    container_list cs = {0}, init = {0};
    json_object *meta, *ann = NULL, *mem = NULL, *list = NULL, *spec, *nm;
    *code = 400;

    if (member(pod, "metadata", json_type_object, &meta, "object", p) < 0)
        return D_ERROR;
    if (meta) {
        if (member(meta, "name", json_type_string, &nm, "object.metadata", p) < 0)
            return D_ERROR;
        if (!nm && member(meta, "generateName", json_type_string, &nm, "object.metadata", p) < 0)
            return D_ERROR;
        if (nm)
            copy_str(r->name, sizeof r->name, nm);
        if (member(meta, "annotations", json_type_object, &ann, "object.metadata", p) < 0)
            return D_ERROR;
    }
    if (ann) {
        json_object_object_foreach(ann, key, val)
        {
            if (!val || !json_object_is_type(val, json_type_string)) {
                char kq[96];
                say(p, "object.metadata.annotations[%s] must be string, not %s",
                    quoted(key, strlen(key), kq, sizeof kq), type_name(val));
                return D_ERROR;
            }
        }
        json_object_object_get_ex(ann, MV_WH_ANN_MEMORY, &mem);
        json_object_object_get_ex(ann, MV_WH_ANN_CONTAINERS, &list);
    }
    if (!mem) {
        if (list)
            snprintf(warn[(*nwarn)++], 512,
                     MV_WH_ANN_CONTAINERS " has no effect without " MV_WH_ANN_MEMORY
                                          " (such as 64Ki)");
        return D_ALLOW;
    }

    if (member(pod, "spec", json_type_object, &spec, "object", p) <= 0) {
        if (!p->msg[0])
            say(p, "object.spec is missing");
        return D_ERROR;
    }
    if (read_containers(spec, "containers", cfg->resource_name, &cs, p) < 0 ||
        read_containers(spec, "initContainers", cfg->resource_name, &init, p) < 0)
        goto out;
    if (cs.n == 0) {
        say(p, "object.spec.containers is empty");
        goto out;
    }

    /* The value. */
    const char *v = json_object_get_string(mem);
    size_t vlen = (size_t)json_object_get_string_len(mem);
    char vq[96], why[128];
    quoted(v, vlen, vq, sizeof vq);
    uint64_t bytes;
    int qrc = mv_wh_quantity_bytes(v, vlen, &bytes, NULL, why, sizeof why);
    if (qrc == -ENOMEM) {
        say(p, "out of memory");
        goto out;
    }
    d = D_DENY;
    if (qrc != 0) {
        say(p, MV_WH_ANN_MEMORY "=%s: %s; write " ACCEPTED_FORM, vq, why);
        goto out;
    }
    uint64_t pages = bytes / cfg->page_size + (bytes % cfg->page_size != 0);

    /* The containers. */
    if (list) {
        if (choose(json_object_get_string(list), (size_t)json_object_get_string_len(list), &cs,
                   &init, p) < 0)
            goto out;
    } else {
        cs.c[0].chosen = 1;
    }

    /* Totals and conflicts. */
    uint64_t sum = 0, init_max = 0;
    unsigned chosen = 0;
    for (size_t i = 0; i < cs.n; i++) {
        container *c = &cs.c[i];
        if (c->chosen) {
            chosen++;
            json_object *vals[2] = {c->req_val, c->lim_val};
            const char *which[2] = {"requests", "limits"};
            for (int k = 0; k < 2; k++) {
                if (!vals[k])
                    continue;
                int64_t have = existing_pages(vals[k]);
                if (have < 0 || (uint64_t)have != pages) {
                    char hq[96];
                    quoted(json_object_get_string(vals[k]),
                           (size_t)json_object_get_string_len(vals[k]), hq, sizeof hq);
                    say(p,
                        "container \"%s\" already sets resources.%s[%s]=%s but " MV_WH_ANN_MEMORY
                        "=%s asks for %" PRIu64 " pages of %" PRIu64 " bytes; remove one of "
                        "them, or write " ACCEPTED_FORM " that matches",
                        c->name, which[k], cfg->resource_name, hq, vq, pages, cfg->page_size);
                    goto out;
                }
            }
            sum += pages;
        } else {
            json_object *e = c->lim_val ? c->lim_val : c->req_val;
            int64_t have = e ? existing_pages(e) : 0;
            if (have > 0)
                sum += (uint64_t)have;
        }
        if (sum > (1ull << 62)) {
            sum = 1ull << 62;
            break;
        }
    }
    for (size_t i = 0; i < init.n; i++) {
        json_object *e = init.c[i].lim_val ? init.c[i].lim_val : init.c[i].req_val;
        int64_t have = e ? existing_pages(e) : 0;
        if (have > 0 && (uint64_t)have > init_max)
            init_max = (uint64_t)have;
    }
    uint64_t total = sum > init_max ? sum : init_max;
    if (total > cfg->max_pages_per_pod) {
        uint64_t most = cfg->max_pages_per_pod / (chosen ? chosen : 1);
        *code = 403;
        say(p,
            MV_WH_ANN_MEMORY "=%s asks for %" PRIu64 " pages of %" PRIu64
                             " bytes in each of %u container(s), %" PRIu64
                             " pages for the pod, over the limit of %" PRIu64
                             " pages per pod; write " ACCEPTED_FORM " of at most %" PRIu64
                             " bytes per container",
            vq, pages, cfg->page_size, chosen, total, cfg->max_pages_per_pod,
            most * cfg->page_size);
        goto out;
    }

    /* The patch. */
    char ps[32];
    snprintf(ps, sizeof ps, "%" PRIu64, pages);
    r->pages = pages;
    for (size_t i = 0; i < cs.n; i++) {
        container *c = &cs.c[i];
        if (!c->chosen)
            continue;
        size_t before = json_object_array_length(ops);
        if (patch_container(ops, i, c, cfg->resource_name, ps) != 0) {
            say(p, "out of memory");
            d = D_ERROR;
            goto out;
        }
        if (json_object_array_length(ops) > before)
            r->containers++;
    }
    if (bytes % cfg->page_size)
        snprintf(warn[(*nwarn)++], 512,
                 MV_WH_ANN_MEMORY "=%s rounds up to %" PRIu64 " pages of %" PRIu64
                                  " bytes (%" PRIu64 " bytes)",
                 vq, pages, cfg->page_size, pages * cfg->page_size);
    d = json_object_array_length(ops) ? D_PATCH : D_ALLOW;
out:
    free(cs.c);
    free(init.c);
    return d;
}

/* ---- the envelope --------------------------------------------------------------------------- */

int mv_wh_review(const mv_wh_config *cfg, const char *body, size_t len, mv_wh_result *r)
{
    problem p = {{0}};
    memset(r, 0, sizeof *r);
    if (len > MV_WH_BODY_MAX) {
        char m[128];
        snprintf(m, sizeof m, "request body of %zu bytes exceeds the limit of %u bytes", len,
                 MV_WH_BODY_MAX);
        return set_text(r, 413, MV_WH_ERROR, m);
    }

    json_tokener *tok = json_tokener_new_ex(JSON_DEPTH);
    if (!tok)
        return -ENOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = len ? json_tokener_parse_ex(tok, body, (int)len) : NULL;
    enum json_tokener_error jerr = len ? json_tokener_get_error(tok) : json_tokener_continue;
    size_t end = len ? json_tokener_get_parse_end(tok) : 0;
    json_tokener_free(tok);
    if (jerr == json_tokener_success) {
        while (end < len &&
               (body[end] == ' ' || body[end] == '\t' || body[end] == '\n' || body[end] == '\r'))
            end++;
        if (end != len) {
            say(&p, "request body has bytes after the JSON value at offset %zu", end);
            goto bad;
        }
    } else {
        say(&p, "request body is not JSON: %s",
            jerr == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(jerr));
        goto bad;
    }

    json_object *av, *kd, *req, *uid, *rk, *op, *obj, *ns, *sub, *g, *ver, *k;
    if (!json_object_is_type(root, json_type_object)) {
        say(&p, "request body must be a JSON object, not %s", type_name(root));
        goto bad;
    }
    if (member(root, "apiVersion", json_type_string, &av, "AdmissionReview", &p) < 0 ||
        member(root, "kind", json_type_string, &kd, "AdmissionReview", &p) < 0)
        goto bad;
    if (!kd || strcmp(json_object_get_string(kd), "AdmissionReview") != 0) {
        say(&p, "kind must be AdmissionReview");
        goto bad;
    }
    if (!av || strcmp(json_object_get_string(av), "admission.k8s.io/v1") != 0) {
        say(&p, "apiVersion must be admission.k8s.io/v1 (set admissionReviewVersions: [v1] in "
                "the MutatingWebhookConfiguration)");
        goto bad;
    }
    if (member(root, "request", json_type_object, &req, "AdmissionReview", &p) <= 0) {
        if (!p.msg[0])
            say(&p, "AdmissionReview.request is missing");
        goto bad;
    }
    if (member(req, "uid", json_type_string, &uid, "request", &p) <= 0 ||
        json_object_get_string_len(uid) == 0 ||
        (size_t)json_object_get_string_len(uid) >= sizeof r->uid || has_nul(uid)) {
        if (!p.msg[0])
            say(&p, "request.uid must be a non-empty string shorter than %zu bytes", sizeof r->uid);
        goto bad;
    }
    copy_str(r->uid, sizeof r->uid, uid);
    if (member(req, "kind", json_type_object, &rk, "request", &p) <= 0) {
        if (!p.msg[0])
            say(&p, "request.kind is missing");
        goto bad;
    }
    if (member(rk, "group", json_type_string, &g, "request.kind", &p) < 0 ||
        member(rk, "version", json_type_string, &ver, "request.kind", &p) < 0 ||
        member(rk, "kind", json_type_string, &k, "request.kind", &p) <= 0) {
        if (!p.msg[0])
            say(&p, "request.kind.kind is missing");
        goto bad;
    }
    if (member(req, "operation", json_type_string, &op, "request", &p) <= 0) {
        if (!p.msg[0])
            say(&p, "request.operation is missing");
        goto bad;
    }
    if (member(req, "namespace", json_type_string, &ns, "request", &p) < 0 ||
        member(req, "subResource", json_type_string, &sub, "request", &p) < 0 ||
        member(req, "object", json_type_object, &obj, "request", &p) < 0)
        goto bad;
    /* Fields the decision does not use are still checked for their types. */
    static const struct {
        const char *key;
        json_type type;
    } other[] = {
        {"name", json_type_string},
        {"resource", json_type_object},
        {"requestKind", json_type_object},
        {"requestResource", json_type_object},
        {"requestSubResource", json_type_string},
        {"userInfo", json_type_object},
        {"oldObject", json_type_object},
        {"dryRun", json_type_boolean},
        {"options", json_type_object},
    };
    json_object *tmp;
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (member(req, other[i].key, other[i].type, &tmp, "request", &p) < 0)
            goto bad;
    copy_str(r->namespace_, sizeof r->namespace_, ns);
    if (member(req, "name", json_type_string, &tmp, "request", &p) > 0)
        copy_str(r->name, sizeof r->name, tmp);

    int is_pod = (!g || json_object_get_string_len(g) == 0) &&
                 strcmp(json_object_get_string(k), "Pod") == 0 &&
                 (!ver || strcmp(json_object_get_string(ver), "v1") == 0) &&
                 (!sub || json_object_get_string_len(sub) == 0);
    int rc;
    if (!is_pod || strcmp(json_object_get_string(op), "CREATE") != 0) {
        rc = set_review(r, MV_WH_ALLOWED, NULL, 0, NULL, NULL, 0);
        json_object_put(root);
        return rc;
    }
    if (!obj) {
        say(&p, "request.object is missing in a Pod CREATE");
        rc = set_review(r, MV_WH_ERROR, NULL, 400, p.msg, NULL, 0);
        json_object_put(root);
        return rc;
    }

    json_object *ops = json_object_new_array();
    if (!ops) {
        json_object_put(root);
        return -ENOMEM;
    }
    unsigned code = 400;
    char warn[MAX_WARNINGS][512];
    const char *wp[MAX_WARNINGS];
    size_t nwarn = 0;
    decision d = decide(cfg, obj, r, ops, &code, &p, warn, &nwarn);
    for (size_t i = 0; i < nwarn; i++)
        wp[i] = warn[i];
    switch (d) {
    case D_ALLOW:
        rc = set_review(r, MV_WH_ALLOWED, NULL, 0, NULL, wp, nwarn);
        break;
    case D_PATCH:
        rc = set_review(r, MV_WH_PATCHED, ops, 0, NULL, wp, nwarn);
        break;
    case D_DENY:
        rc = set_review(r, MV_WH_DENIED, NULL, code, p.msg, NULL, 0);
        break;
    default:
        rc = set_review(r, MV_WH_ERROR, NULL, 400, p.msg, NULL, 0);
        break;
    }
    if (d != D_PATCH)
        r->pages = d == D_ALLOW ? r->pages : 0;
    json_object_put(ops);
    json_object_put(root);
    return rc;

bad:
    json_object_put(root);
    return set_text(r, 400, MV_WH_ERROR, p.msg);
}
