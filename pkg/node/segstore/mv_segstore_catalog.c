/* mv_segstore_catalog: segment values, field validation and the catalog.json file (parse, save). */
#include "mv_segstore_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "mv_labelsel.h"
#include "mv_log.h"
#include "mv_segment.h"
#include "mv_util.h"

#define CATALOG_VERSION 1
#define JSON_DEPTH_MAX  8

char *mv_segstore__path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---- Segment values ------------------------------------------------------------ */

void mv_segstore_seg_clear(mv_segstore_seg *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nlabels; i++) {
        free(s->labels[i].name);
        free(s->labels[i].value);
    }
    free(s->labels);
    for (size_t i = 0; i < s->npod_labels; i++) {
        free(s->pod_labels[i].name);
        free(s->pod_labels[i].value);
    }
    free(s->pod_labels);
    for (size_t i = 0; i < s->ndevices; i++)
        free(s->devices[i]);
    free(s->devices);
    free(s->path);
    memset(s, 0, sizeof *s);
}

void mv_segstore_segs_free(mv_segstore_seg *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        mv_segstore_seg_clear(&v[i]);
    free(v);
}

int mv_segstore_seg_copy(mv_segstore_seg *dst, const mv_segstore_seg *src)
{
    memset(dst, 0, sizeof *dst);
    memcpy(dst->id, src->id, sizeof dst->id);
    dst->size = src->size;
    dst->owner_pid = src->owner_pid;
    dst->created_ns = src->created_ns;
    dst->uid = src->uid;
    dst->path = strdup(src->path ? src->path : "");
    if (!dst->path)
        goto fail;
    if (src->nlabels) {
        dst->labels = calloc(src->nlabels, sizeof *dst->labels);
        if (!dst->labels)
            goto fail;
        for (size_t i = 0; i < src->nlabels; i++) {
            dst->nlabels++;
            dst->labels[i].name = strdup(src->labels[i].name);
            dst->labels[i].value = strdup(src->labels[i].value);
            if (!dst->labels[i].name || !dst->labels[i].value)
                goto fail;
        }
    }
    if (src->npod_labels) {
        dst->pod_labels = calloc(src->npod_labels, sizeof *dst->pod_labels);
        if (!dst->pod_labels)
            goto fail;
        for (size_t i = 0; i < src->npod_labels; i++) {
            dst->npod_labels++;
            dst->pod_labels[i].name = strdup(src->pod_labels[i].name);
            dst->pod_labels[i].value = strdup(src->pod_labels[i].value);
            if (!dst->pod_labels[i].name || !dst->pod_labels[i].value)
                goto fail;
        }
    }
    if (src->ndevices) {
        dst->devices = calloc(src->ndevices, sizeof *dst->devices);
        if (!dst->devices)
            goto fail;
        for (size_t i = 0; i < src->ndevices; i++) {
            dst->ndevices++;
            dst->devices[i] = strdup(src->devices[i]);
            if (!dst->devices[i])
                goto fail;
        }
    }
    return 0;
fail:
    mv_segstore_seg_clear(dst);
    return -ENOMEM;
}

int mv_segstore__valid_id(const char *id, size_t len)
{
    if (len != MV_SEGSTORE_ID_LEN || memcmp(id, "seg-", 4) != 0)
        return 0;
    for (size_t i = 4; i < len; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

/* Device IDs: 1..63 bytes of [A-Za-z0-9._-]. */
int mv_segstore__valid_device(const char *d, size_t len)
{
    if (!len || len > MV_SEGSTORE_DEVICE_ID_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = d[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

char *mv_segstore__seg_path(const char *dir, const char *id, int in_dir)
{
    if (!in_dir)
        return mv_segstore__path_join(dir, id);
    size_t n = strlen(dir) + strlen(id) + sizeof MV_SEGSTORE_SEG_FILE + 3;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s/%s", dir, id, MV_SEGSTORE_SEG_FILE);
    return p;
}

long mv_segstore__control_byte(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return (long)i;
    }
    return -1;
}

int mv_segstore_check_label_bytes(size_t idx, const char *name, size_t nlen, const char *value,
                                  size_t vlen, char *err, size_t errlen)
{
    long at = mv_segstore__control_byte(name, nlen);
    const char *what = "name", *s = name;
    if (at < 0) {
        at = mv_segstore__control_byte(value, vlen);
        what = "value";
        s = value;
    }
    if (at < 0)
        return 0;
    mv_util_err_set(
        err, errlen,
        "label %zu: %s has control byte 0x%02x at offset %ld: control bytes (below 0x20, "
        "and 0x7f) are refused in label names and values",
        idx, what, (unsigned)(unsigned char)s[at], at);
    return -EINVAL;
}

int mv_segstore__check_labels(const mv_segstore_label *labels, size_t n, char *err, size_t errlen)
{
    if (n > MV_SEGSTORE_LABELS_MAX) {
        mv_util_err_set(err, errlen, "%zu labels: at most %d are allowed", n,
                        MV_SEGSTORE_LABELS_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = labels[i].name, *v = labels[i].value;
        size_t kl = k ? strlen(k) : 0, vl = v ? strlen(v) : 0;
        if (!k || !kl || kl > MV_SEGSTORE_LABEL_NAME_MAX || !mv_seg_valid_label_name(k, kl)) {
            mv_util_err_set(err, errlen,
                            "label %zu: name must match [a-zA-Z_][a-zA-Z0-9_]*, not start with __, "
                            "and have at most %d bytes",
                            i, MV_SEGSTORE_LABEL_NAME_MAX);
            return -EINVAL;
        }
        if (!v || vl > MV_SEGSTORE_LABEL_VALUE_MAX || !mv_seg_valid_utf8(v, vl)) {
            mv_util_err_set(err, errlen, "label %.64s: value must be UTF-8 of at most %d bytes", k,
                            MV_SEGSTORE_LABEL_VALUE_MAX);
            return -EINVAL;
        }
        long at = mv_segstore__control_byte(v, vl);
        if (at >= 0) {
            mv_util_err_set(err, errlen,
                            "label %.64s: value has control byte 0x%02x at offset %ld: control "
                            "bytes (below 0x20, and 0x7f) are refused in label values",
                            k, (unsigned)(unsigned char)v[at], at);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[j].name, k) == 0) {
                mv_util_err_set(err, errlen, "label %.64s appears twice", k);
                return -EINVAL;
            }
    }
    return 0;
}

int mv_segstore_check_pod_labels(const mv_segstore_label *labels, size_t n, char *err,
                                 size_t errlen)
{
    if (n > MV_SEGSTORE_POD_LABELS_MAX) {
        mv_util_err_set(err, errlen, "%zu pod labels: at most %d are kept", n,
                        MV_SEGSTORE_POD_LABELS_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = labels[i].name, *v = labels[i].value;
        const char *why = k ? mv_lsel_check_key(k, strlen(k)) : "is missing";
        if (why) {
            mv_util_err_set(err, errlen, "pod label %zu: key %s", i, why);
            return -EINVAL;
        }
        why = v ? mv_lsel_check_value(v, strlen(v)) : "is missing";
        if (why) {
            mv_util_err_set(err, errlen, "pod label %.64s: value %s", k, why);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[j].name, k) == 0) {
                mv_util_err_set(err, errlen, "pod label %.64s appears twice", k);
                return -EINVAL;
            }
    }
    return 0;
}

/* ---- Catalog file ---------------------------------------------------------------- */

static int json_u64(json_object *o, const char *key, uint64_t max, uint64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
        return -1;
    errno = 0;
    int64_t x = json_object_get_int64(v);
    if (errno || x < 0 || (uint64_t)x > max)
        return -1;
    *out = (uint64_t)x;
    return 0;
}

static const char *json_str(json_object *o, const char *key, size_t max, size_t *len)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    int n = json_object_get_string_len(v);
    if (n < 0 || (size_t)n > max)
        return NULL;
    const char *s = json_object_get_string(v);
    if (strlen(s) != (size_t)n) /* embedded NUL */
        return NULL;
    *len = (size_t)n;
    return s;
}

static int parse_entry(json_object *e, const char *dir, uint64_t max_size, mv_segstore_seg *seg,
                       char *err, size_t errlen)
{
    size_t idlen;
    uint64_t size, pid, created;
    memset(seg, 0, sizeof *seg);
    if (!json_object_is_type(e, json_type_object)) {
        mv_util_err_set(err, errlen, "entry is not an object");
        return -EINVAL;
    }
    const char *id = json_str(e, "id", MV_SEGSTORE_ID_LEN, &idlen);
    if (!id || !mv_segstore__valid_id(id, idlen)) {
        mv_util_err_set(err, errlen, "entry has no valid id (seg-<16 hex>)");
        return -EINVAL;
    }
    if (json_u64(e, "size_bytes", max_size, &size) || size < MV_SEGSTORE_MIN_SIZE ||
        size % MV_SEGSTORE_PAGE) {
        mv_util_err_set(err, errlen, "%s: size_bytes missing or out of range", id);
        return -EINVAL;
    }
    if (json_u64(e, "owner_pid", INT32_MAX, &pid) ||
        json_u64(e, "created_unix_ns", INT64_MAX, &created)) {
        mv_util_err_set(err, errlen, "%s: owner_pid or created_unix_ns missing or out of range",
                        id);
        return -EINVAL;
    }
    memcpy(seg->id, id, idlen + 1);
    seg->size = size;
    seg->owner_pid = (uint32_t)pid;
    seg->created_ns = created;

    json_object *devs;
    if (json_object_object_get_ex(e, "devices", &devs)) {
        if (!json_object_is_type(devs, json_type_array) ||
            json_object_array_length(devs) > MV_SEGSTORE_DEVICES_MAX) {
            mv_util_err_set(err, errlen, "%s: devices is not an array of at most %d", id,
                            MV_SEGSTORE_DEVICES_MAX);
            goto fail;
        }
        size_t nd = json_object_array_length(devs);
        if (nd) {
            seg->devices = calloc(nd, sizeof *seg->devices);
            if (!seg->devices)
                goto nomem;
        }
        for (size_t i = 0; i < nd; i++) {
            json_object *d = json_object_array_get_idx(devs, i);
            if (!json_object_is_type(d, json_type_string)) {
                mv_util_err_set(err, errlen, "%s: device %zu is not a string", id, i);
                goto fail;
            }
            int dl = json_object_get_string_len(d);
            const char *ds = json_object_get_string(d);
            if (dl < 0 || strlen(ds) != (size_t)dl || !mv_segstore__valid_device(ds, (size_t)dl)) {
                mv_util_err_set(err, errlen, "%s: device %zu is not a valid device ID", id, i);
                goto fail;
            }
            seg->devices[i] = strdup(ds);
            if (!seg->devices[i])
                goto nomem;
            seg->ndevices++;
        }
    }
    seg->path = mv_segstore__seg_path(dir, seg->id, seg->ndevices > 0);
    if (!seg->path)
        goto nomem;

    json_object *labels;
    if (!json_object_object_get_ex(e, "labels", &labels))
        return 0;
    if (!json_object_is_type(labels, json_type_array) ||
        json_object_array_length(labels) > MV_SEGSTORE_LABELS_MAX) {
        mv_util_err_set(err, errlen, "%s: labels is not an array of at most %d", id,
                        MV_SEGSTORE_LABELS_MAX);
        goto fail;
    }
    size_t nl = json_object_array_length(labels);
    if (nl) {
        seg->labels = calloc(nl, sizeof *seg->labels);
        if (!seg->labels)
            goto nomem;
    }
    for (size_t i = 0; i < nl; i++) {
        json_object *l = json_object_array_get_idx(labels, i);
        size_t kl, vl;
        const char *k = json_object_is_type(l, json_type_object)
                            ? json_str(l, "name", MV_SEGSTORE_LABEL_NAME_MAX, &kl)
                            : NULL;
        const char *v = k ? json_str(l, "value", MV_SEGSTORE_LABEL_VALUE_MAX, &vl) : NULL;
        if (!k || !v) {
            mv_util_err_set(err, errlen, "%s: label %zu is not {name, value}", id, i);
            goto fail;
        }
        seg->nlabels++;
        seg->labels[i].name = strdup(k);
        seg->labels[i].value = strdup(v);
        if (!seg->labels[i].name || !seg->labels[i].value)
            goto nomem;
    }
    char lerr[160];
    if (mv_segstore__check_labels(seg->labels, seg->nlabels, lerr, sizeof lerr) < 0) {
        mv_util_err_set(err, errlen, "%s: %s", id, lerr);
        goto fail;
    }
    json_object *pl;
    if (!json_object_object_get_ex(e, "pod_labels", &pl))
        return 0;
    if (!json_object_is_type(pl, json_type_array) ||
        json_object_array_length(pl) > MV_SEGSTORE_POD_LABELS_MAX) {
        mv_util_err_set(err, errlen, "%s: pod_labels is not an array of at most %d", id,
                        MV_SEGSTORE_POD_LABELS_MAX);
        goto fail;
    }
    size_t npl = json_object_array_length(pl);
    if (npl) {
        seg->pod_labels = calloc(npl, sizeof *seg->pod_labels);
        if (!seg->pod_labels)
            goto nomem;
    }
    for (size_t i = 0; i < npl; i++) {
        json_object *l = json_object_array_get_idx(pl, i);
        size_t kl, vl;
        const char *k = json_object_is_type(l, json_type_object)
                            ? json_str(l, "name", MV_SEGSTORE_POD_LABEL_KEY_MAX, &kl)
                            : NULL;
        const char *v = k ? json_str(l, "value", MV_SEGSTORE_POD_LABEL_VALUE_MAX, &vl) : NULL;
        if (!k || !v) {
            mv_util_err_set(err, errlen, "%s: pod label %zu is not {name, value}", id, i);
            goto fail;
        }
        seg->npod_labels++;
        seg->pod_labels[i].name = strdup(k);
        seg->pod_labels[i].value = strdup(v);
        if (!seg->pod_labels[i].name || !seg->pod_labels[i].value)
            goto nomem;
    }
    if (mv_segstore_check_pod_labels(seg->pod_labels, seg->npod_labels, lerr, sizeof lerr) < 0) {
        mv_util_err_set(err, errlen, "%s: %s", id, lerr);
        goto fail;
    }
    return 0;
nomem:
    mv_util_err_set(err, errlen, "out of memory");
    mv_segstore_seg_clear(seg);
    return -ENOMEM;
fail:
    mv_segstore_seg_clear(seg);
    return -EINVAL;
}

int mv_segstore__catalog_parse(const char *text, size_t len, const char *dir, uint64_t max_size,
                               mv_segstore_seg **out, size_t *n, uint64_t *revision, char *err,
                               size_t errlen)
{
    return mv_segstore__catalog_parse_ex(text, len, dir, max_size, NULL, NULL, out, n, revision,
                                         err, errlen);
}

int mv_segstore__entry_from_json(struct json_object *e, const char *dir, uint64_t max_size,
                                 mv_segstore_seg *seg, char *err, size_t errlen)
{
    return parse_entry(e, dir, max_size, seg, err, errlen);
}

int mv_segstore__entry_parse(const char *text, size_t len, const char *dir, uint64_t max_size,
                             mv_segstore_seg *seg, char *err, size_t errlen)
{
    memset(seg, 0, sizeof *seg);
    if (len > INT32_MAX) {
        mv_util_err_set(err, errlen, "entry of %zu bytes is too large", len);
        return -EINVAL;
    }
    json_tokener *tok = json_tokener_new_ex(JSON_DEPTH_MAX);
    if (!tok)
        return -ENOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    int rc = -EINVAL;
    if (!root || json_tokener_get_error(tok) != json_tokener_success ||
        json_tokener_get_parse_end(tok) != len)
        mv_util_err_set(err, errlen, "not one JSON object");
    else
        rc = parse_entry(root, dir, max_size, seg, err, errlen);
    json_object_put(root);
    json_tokener_free(tok);
    return rc;
}

int mv_segstore__catalog_parse_ex(const char *text, size_t len, const char *dir, uint64_t max_size,
                                  segstore_bad_fn bad, void *bad_arg, mv_segstore_seg **out,
                                  size_t *n, uint64_t *revision, char *err, size_t errlen)
{
    int rc = -EINVAL;
    *out = NULL;
    *n = 0;
    *revision = 0;
    if (len > MV_SEGSTORE_CATALOG_MAX || len > INT32_MAX) {
        mv_util_err_set(err, errlen, "catalog is larger than %u bytes",
                        (unsigned)MV_SEGSTORE_CATALOG_MAX);
        return -EINVAL;
    }
    json_tokener *tok = json_tokener_new_ex(JSON_DEPTH_MAX);
    if (!tok)
        return -ENOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    if (!root || jerr != json_tokener_success) {
        mv_util_err_set(err, errlen, "not valid JSON: %s",
                        jerr == json_tokener_continue ? "truncated"
                                                      : json_tokener_error_desc(jerr));
        goto free_tok;
    }
    size_t end = json_tokener_get_parse_end(tok);
    while (end < len &&
           (text[end] == ' ' || text[end] == '\n' || text[end] == '\t' || text[end] == '\r'))
        end++;
    if (end != len) {
        mv_util_err_set(err, errlen, "trailing bytes after the JSON document");
        goto put_root;
    }
    uint64_t version;
    if (!json_object_is_type(root, json_type_object) ||
        json_u64(root, "version", UINT32_MAX, &version) || version != CATALOG_VERSION) {
        mv_util_err_set(err, errlen, "not a version %d catalog object", CATALOG_VERSION);
        goto put_root;
    }
    if (json_u64(root, "revision", INT64_MAX, revision)) {
        mv_util_err_set(err, errlen, "revision missing or out of range");
        goto put_root;
    }
    json_object *arr;
    if (!json_object_object_get_ex(root, "segments", &arr) ||
        !json_object_is_type(arr, json_type_array) ||
        json_object_array_length(arr) > MV_SEGSTORE_SEGMENTS_MAX) {
        mv_util_err_set(err, errlen, "segments is not an array of at most %d entries",
                        MV_SEGSTORE_SEGMENTS_MAX);
        goto put_root;
    }
    size_t cnt = json_object_array_length(arr);
    mv_segstore_seg *v = calloc(cnt ? cnt : 1, sizeof *v);
    if (!v) {
        rc = -ENOMEM;
        goto put_root;
    }
    size_t got = 0;
    for (size_t i = 0; i < cnt; i++) {
        char eerr[200];
        rc = parse_entry(json_object_array_get_idx(arr, i), dir, max_size, &v[got], eerr,
                         sizeof eerr);
        if (rc == -EINVAL && bad) {
            bad(bad_arg, i, eerr);
            continue;
        }
        if (rc < 0) {
            mv_util_err_set(err, errlen, "segment %zu: %s", i, eerr);
            mv_segstore_segs_free(v, got);
            goto put_root;
        }
        /* Duplicates: with a quarantine, the set of ids is checked by the caller. */
        for (size_t j = 0; !bad && j < got; j++)
            if (strcmp(v[j].id, v[got].id) == 0) {
                mv_util_err_set(err, errlen, "segment %s appears twice", v[got].id);
                mv_segstore_segs_free(v, got + 1);
                rc = -EINVAL;
                goto put_root;
            }
        got++;
    }
    *out = v;
    *n = got;
    rc = 0;
put_root:
    json_object_put(root);
free_tok:
    json_tokener_free(tok);
    return rc;
}

int mv_segstore_catalog_parse(const char *text, size_t len, const char *dir, mv_segstore_seg **out,
                              size_t *n, uint64_t *revision, char *err, size_t errlen)
{
    return mv_segstore__catalog_parse(text, len, dir ? dir : MV_SEGSTORE_DEFAULT_DIR,
                                      MV_SEG_MAX_SIZE, out, n, revision, err, errlen);
}

json_object *mv_segstore__entry_json(const mv_segstore_seg *s)
{
    json_object *e = json_object_new_object();
    json_object *labels = json_object_new_array();
    if (!e || !labels) {
        json_object_put(e);
        json_object_put(labels);
        return NULL;
    }
    json_object_object_add(e, "id", json_object_new_string(s->id));
    json_object_object_add(e, "path", json_object_new_string(s->path ? s->path : ""));
    json_object_object_add(e, "size_bytes", json_object_new_int64((int64_t)s->size));
    json_object_object_add(e, "owner_pid", json_object_new_int64(s->owner_pid));
    json_object_object_add(e, "created_unix_ns", json_object_new_int64((int64_t)s->created_ns));
    json_object_object_add(e, "labels", labels);
    if (s->ndevices) {
        json_object *devs = json_object_new_array_ext((int)s->ndevices);
        if (!devs)
            goto fail;
        json_object_object_add(e, "devices", devs);
        for (size_t j = 0; j < s->ndevices; j++)
            if (json_object_array_add(devs, json_object_new_string(s->devices[j])) < 0)
                goto fail;
    }
    for (size_t j = 0; j < s->nlabels; j++) {
        json_object *l = json_object_new_object();
        if (!l || json_object_array_add(labels, l) < 0) {
            json_object_put(l);
            goto fail;
        }
        json_object_object_add(l, "name", json_object_new_string(s->labels[j].name));
        json_object_object_add(l, "value", json_object_new_string(s->labels[j].value));
    }
    if (s->npod_labels) { /* absent when none: catalogs of earlier agents read the same */
        json_object *pl = json_object_new_array_ext((int)s->npod_labels);
        if (!pl)
            goto fail;
        json_object_object_add(e, "pod_labels", pl);
        for (size_t j = 0; j < s->npod_labels; j++) {
            json_object *l = json_object_new_object();
            if (!l || json_object_array_add(pl, l) < 0) {
                json_object_put(l);
                goto fail;
            }
            json_object_object_add(l, "name", json_object_new_string(s->pod_labels[j].name));
            json_object_object_add(l, "value", json_object_new_string(s->pod_labels[j].value));
        }
    }
    return e;
fail:
    json_object_put(e);
    return NULL;
}

int mv_segstore__write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, p + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        off += (size_t)w;
    }
    return 0;
}

int mv_segstore__fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int mv_segstore__catalog_save(const char *dir, uint64_t revision, const mv_segstore_seg *segs,
                              size_t nsegs)
{
    int rc = -ENOMEM;
    json_object *root = json_object_new_object();
    json_object *arr = json_object_new_array_ext(nsegs ? (int)nsegs : 1);
    if (!root || !arr) {
        json_object_put(arr);
        goto put_root;
    }
    json_object_object_add(root, "version", json_object_new_int(CATALOG_VERSION));
    json_object_object_add(root, "revision", json_object_new_int64((int64_t)revision));
    json_object_object_add(root, "segments", arr);
    for (size_t i = 0; i < nsegs; i++) {
        json_object *e = mv_segstore__entry_json(&segs[i]);
        if (!e || json_object_array_add(arr, e) < 0) {
            json_object_put(e);
            goto put_root;
        }
    }
    size_t len;
    /* One line, no indentation: a snapshot is written at every compaction. */
    const char *text = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    char *tmp = mv_segstore__path_join(dir, CATALOG_TMP),
         *dst = mv_segstore__path_join(dir, CATALOG_NAME);
    if (!text || !tmp || !dst)
        goto free_paths;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        goto log_err;
    }
    rc = mv_segstore__write_all(fd, text, len);
    if (rc == 0)
        rc = mv_segstore__write_all(fd, "\n", 1);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, dst) < 0)
        rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        goto log_err;
    }
    /* The rename itself is durable only once the directory is. */
    rc = mv_segstore__fsync_dir(dir);
    if (rc == 0)
        goto free_paths;
log_err:
    MV_ERROR("catalog.save_failed", "path=%s err=%s", mv_log_q(dst ? dst : dir),
             mv_log_q(strerror(-rc)));
free_paths:
    free(tmp);
    free(dst);
put_root:
    json_object_put(root);
    return rc;
}

int mv_segstore__read_file(const char *path, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > MV_SEGSTORE_CATALOG_MAX) {
        close(fd);
        return -EFBIG;
    }
    size_t n = (size_t)sb.st_size, off = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    while (off < n) {
        ssize_t r = read(fd, buf + off, n - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        off += (size_t)r;
    }
    close(fd);
    buf[off] = 0;
    *out = buf;
    *len = off;
    return 0;
}
