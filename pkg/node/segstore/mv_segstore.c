/* mv_segstore: segment files, persisted catalog, watchers and owner reaping. */
#include "mv_segstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "mv_log.h"
#include "mv_segment.h"

#define CATALOG_NAME     "catalog.json"
#define CATALOG_TMP      "catalog.json.tmp"
#define CATALOG_VERSION  1
#define JSON_DEPTH_MAX   8
#define DEFAULT_REAP_MS  2000
#define DEFAULT_FILEMODE 0660

struct mv_segstore_sub {
    mv_segstore_watch_fn fn;
    void *arg;
    struct mv_segstore_sub *next;
};

struct mv_segstore {
    char *dir;
    uint64_t max_size;
    mode_t file_mode;
    int reap_ms;
    pthread_mutex_t mu;
    mv_segstore_seg *segs;
    size_t nsegs, cap;
    uint64_t revision;
    uint64_t pool_pages, page_size, pages_used;
    mv_segstore_sub *subs;
    /* reaper */
    pthread_t reaper;
    int reaper_running;
    int stopping;
    pthread_cond_t cv;
};

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

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static char *path_join(const char *dir, const char *name)
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

static int valid_id(const char *id, size_t len)
{
    if (len != MV_SEGSTORE_ID_LEN || memcmp(id, "seg-", 4) != 0)
        return 0;
    for (size_t i = 4; i < len; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

/* Device IDs: 1..63 bytes of [A-Za-z0-9._-]. */
static int valid_device(const char *d, size_t len)
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

static char *seg_path(const char *dir, const char *id, int in_dir)
{
    if (!in_dir)
        return path_join(dir, id);
    size_t n = strlen(dir) + strlen(id) + sizeof MV_SEGSTORE_SEG_FILE + 3;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s/%s", dir, id, MV_SEGSTORE_SEG_FILE);
    return p;
}

static int check_labels(const mv_segstore_label *labels, size_t n, char *err, size_t errlen)
{
    if (n > MV_SEGSTORE_LABELS_MAX) {
        set_err(err, errlen, "%zu labels: at most %d are allowed", n, MV_SEGSTORE_LABELS_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *k = labels[i].name, *v = labels[i].value;
        size_t kl = k ? strlen(k) : 0, vl = v ? strlen(v) : 0;
        if (!k || !kl || kl > MV_SEGSTORE_LABEL_NAME_MAX || !mv_seg_valid_label_name(k, kl)) {
            set_err(err, errlen,
                    "label %zu: name must match [a-zA-Z_][a-zA-Z0-9_]*, not start with __, "
                    "and have at most %d bytes",
                    i, MV_SEGSTORE_LABEL_NAME_MAX);
            return -EINVAL;
        }
        if (!v || vl > MV_SEGSTORE_LABEL_VALUE_MAX || !mv_seg_valid_utf8(v, vl)) {
            set_err(err, errlen, "label %.64s: value must be UTF-8 of at most %d bytes", k,
                    MV_SEGSTORE_LABEL_VALUE_MAX);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[j].name, k) == 0) {
                set_err(err, errlen, "label %.64s appears twice", k);
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
        set_err(err, errlen, "entry is not an object");
        return -EINVAL;
    }
    const char *id = json_str(e, "id", MV_SEGSTORE_ID_LEN, &idlen);
    if (!id || !valid_id(id, idlen)) {
        set_err(err, errlen, "entry has no valid id (seg-<16 hex>)");
        return -EINVAL;
    }
    if (json_u64(e, "size_bytes", max_size, &size) || size < MV_SEGSTORE_MIN_SIZE ||
        size % MV_SEGSTORE_PAGE) {
        set_err(err, errlen, "%s: size_bytes missing or out of range", id);
        return -EINVAL;
    }
    if (json_u64(e, "owner_pid", INT32_MAX, &pid) ||
        json_u64(e, "created_unix_ns", INT64_MAX, &created)) {
        set_err(err, errlen, "%s: owner_pid or created_unix_ns missing or out of range", id);
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
            set_err(err, errlen, "%s: devices is not an array of at most %d", id,
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
                set_err(err, errlen, "%s: device %zu is not a string", id, i);
                goto fail;
            }
            int dl = json_object_get_string_len(d);
            const char *ds = json_object_get_string(d);
            if (dl < 0 || strlen(ds) != (size_t)dl || !valid_device(ds, (size_t)dl)) {
                set_err(err, errlen, "%s: device %zu is not a valid device ID", id, i);
                goto fail;
            }
            seg->devices[i] = strdup(ds);
            if (!seg->devices[i])
                goto nomem;
            seg->ndevices++;
        }
    }
    seg->path = seg_path(dir, seg->id, seg->ndevices > 0);
    if (!seg->path)
        goto nomem;

    json_object *labels;
    if (!json_object_object_get_ex(e, "labels", &labels))
        return 0;
    if (!json_object_is_type(labels, json_type_array) ||
        json_object_array_length(labels) > MV_SEGSTORE_LABELS_MAX) {
        set_err(err, errlen, "%s: labels is not an array of at most %d", id,
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
            set_err(err, errlen, "%s: label %zu is not {name, value}", id, i);
            goto fail;
        }
        seg->nlabels++;
        seg->labels[i].name = strdup(k);
        seg->labels[i].value = strdup(v);
        if (!seg->labels[i].name || !seg->labels[i].value)
            goto nomem;
    }
    char lerr[160];
    if (check_labels(seg->labels, seg->nlabels, lerr, sizeof lerr) < 0) {
        set_err(err, errlen, "%s: %s", id, lerr);
        goto fail;
    }
    return 0;
nomem:
    set_err(err, errlen, "out of memory");
    mv_segstore_seg_clear(seg);
    return -ENOMEM;
fail:
    mv_segstore_seg_clear(seg);
    return -EINVAL;
}

static int catalog_parse(const char *text, size_t len, const char *dir, uint64_t max_size,
                         mv_segstore_seg **out, size_t *n, uint64_t *revision, char *err,
                         size_t errlen)
{
    int rc = -EINVAL;
    *out = NULL;
    *n = 0;
    *revision = 0;
    if (len > MV_SEGSTORE_CATALOG_MAX || len > INT32_MAX) {
        set_err(err, errlen, "catalog is larger than %u bytes", MV_SEGSTORE_CATALOG_MAX);
        return -EINVAL;
    }
    json_tokener *tok = json_tokener_new_ex(JSON_DEPTH_MAX);
    if (!tok)
        return -ENOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    if (!root || jerr != json_tokener_success) {
        set_err(err, errlen, "not valid JSON: %s",
                jerr == json_tokener_continue ? "truncated" : json_tokener_error_desc(jerr));
        goto free_tok;
    }
    size_t end = json_tokener_get_parse_end(tok);
    while (end < len &&
           (text[end] == ' ' || text[end] == '\n' || text[end] == '\t' || text[end] == '\r'))
        end++;
    if (end != len) {
        set_err(err, errlen, "trailing bytes after the JSON document");
        goto put_root;
    }
    uint64_t version;
    if (!json_object_is_type(root, json_type_object) ||
        json_u64(root, "version", UINT32_MAX, &version) || version != CATALOG_VERSION) {
        set_err(err, errlen, "not a version %d catalog object", CATALOG_VERSION);
        goto put_root;
    }
    if (json_u64(root, "revision", INT64_MAX, revision)) {
        set_err(err, errlen, "revision missing or out of range");
        goto put_root;
    }
    json_object *arr;
    if (!json_object_object_get_ex(root, "segments", &arr) ||
        !json_object_is_type(arr, json_type_array) ||
        json_object_array_length(arr) > MV_SEGSTORE_SEGMENTS_MAX) {
        set_err(err, errlen, "segments is not an array of at most %d entries",
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
        if (rc < 0) {
            set_err(err, errlen, "segment %zu: %s", i, eerr);
            mv_segstore_segs_free(v, got);
            goto put_root;
        }
        for (size_t j = 0; j < got; j++)
            if (strcmp(v[j].id, v[got].id) == 0) {
                set_err(err, errlen, "segment %s appears twice", v[got].id);
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
    return catalog_parse(text, len, dir ? dir : MV_SEGSTORE_DEFAULT_DIR, MV_SEG_MAX_SIZE, out, n,
                         revision, err, errlen);
}

/* Writes the catalog atomically (tmp + fsync + rename). Caller holds st->mu. */
static int catalog_save(mv_segstore *st)
{
    int rc = -ENOMEM;
    json_object *root = json_object_new_object();
    json_object *arr = json_object_new_array();
    if (!root || !arr) {
        json_object_put(arr);
        goto put_root;
    }
    json_object_object_add(root, "version", json_object_new_int(CATALOG_VERSION));
    json_object_object_add(root, "revision", json_object_new_int64((int64_t)st->revision));
    json_object_object_add(root, "segments", arr);
    for (size_t i = 0; i < st->nsegs; i++) {
        const mv_segstore_seg *s = &st->segs[i];
        json_object *e = json_object_new_object();
        json_object *labels = json_object_new_array();
        if (!e || !labels) {
            json_object_put(e);
            json_object_put(labels);
            goto put_root;
        }
        json_object_array_add(arr, e);
        json_object_object_add(e, "id", json_object_new_string(s->id));
        json_object_object_add(e, "path", json_object_new_string(s->path));
        json_object_object_add(e, "size_bytes", json_object_new_int64((int64_t)s->size));
        json_object_object_add(e, "owner_pid", json_object_new_int64(s->owner_pid));
        json_object_object_add(e, "created_unix_ns", json_object_new_int64((int64_t)s->created_ns));
        json_object_object_add(e, "labels", labels);
        if (s->ndevices) {
            json_object *devs = json_object_new_array_ext((int)s->ndevices);
            if (!devs)
                goto put_root;
            json_object_object_add(e, "devices", devs);
            for (size_t j = 0; j < s->ndevices; j++)
                json_object_array_add(devs, json_object_new_string(s->devices[j]));
        }
        for (size_t j = 0; j < s->nlabels; j++) {
            json_object *l = json_object_new_object();
            if (!l)
                goto put_root;
            json_object_array_add(labels, l);
            json_object_object_add(l, "name", json_object_new_string(s->labels[j].name));
            json_object_object_add(l, "value", json_object_new_string(s->labels[j].value));
        }
    }
    size_t len;
    const char *text = json_object_to_json_string_length(root, JSON_C_TO_STRING_PRETTY, &len);
    char *tmp = path_join(st->dir, CATALOG_TMP), *dst = path_join(st->dir, CATALOG_NAME);
    if (!text || !tmp || !dst)
        goto free_paths;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        goto log_err;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = w < 0 ? -errno : -EIO;
            close(fd);
            unlink(tmp);
            goto log_err;
        }
        off += (size_t)w;
    }
    if (fsync(fd) < 0 || close(fd) < 0) {
        rc = -errno;
        unlink(tmp);
        goto log_err;
    }
    if (rename(tmp, dst) < 0) {
        rc = -errno;
        unlink(tmp);
        goto log_err;
    }
    rc = 0;
    goto free_paths;
log_err:
    MV_ERROR("catalog.save_failed", "path=%s err=%s", mv_log_q(dst), mv_log_q(strerror(-rc)));
free_paths:
    free(tmp);
    free(dst);
put_root:
    json_object_put(root);
    return rc;
}

static int read_file(const char *path, char **out, size_t *len)
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

/* ---- Store ---------------------------------------------------------------------------- */

static void notify(mv_segstore *st, int ev, const mv_segstore_seg *seg)
{
    for (mv_segstore_sub *s = st->subs; s; s = s->next)
        s->fn(s->arg, ev, seg, st->revision);
}

static int seg_file_ok(const mv_segstore_seg *s)
{
    struct stat sb;
    return lstat(s->path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == s->size;
}

static int load(mv_segstore *st)
{
    char *path = path_join(st->dir, CATALOG_NAME);
    if (!path)
        return -ENOMEM;
    char *text = NULL;
    size_t len = 0;
    int rc = read_file(path, &text, &len);
    if (rc == -ENOENT) {
        MV_INFO("catalog.loaded", "count=0 path=%s note=%s", mv_log_q(path),
                mv_log_q("no catalog yet"));
        free(path);
        return 0;
    }
    if (rc < 0) {
        MV_ERROR("catalog.load_failed", "path=%s err=%s", mv_log_q(path), mv_log_q(strerror(-rc)));
        free(path);
        return rc;
    }
    char err[256];
    mv_segstore_seg *v;
    size_t n;
    uint64_t rev;
    /* Entries above today's max_size were valid when created: accept up to the format's limit. */
    rc = catalog_parse(text, len, st->dir, MV_SEG_MAX_SIZE, &v, &n, &rev, err, sizeof err);
    free(text);
    if (rc < 0) {
        MV_ERROR("catalog.invalid", "path=%s err=%s action=%s", mv_log_q(path), mv_log_q(err),
                 mv_log_q("fix or remove the file, then restart"));
        free(path);
        return rc;
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (!seg_file_ok(&v[i])) {
            MV_WARN("catalog.entry_dropped", "id=%s path=%s reason=%s", v[i].id,
                    mv_log_q(v[i].path), mv_log_q("segment file missing or wrong size"));
            mv_segstore_seg_clear(&v[i]);
            continue;
        }
        if (kept != i)
            v[kept] = v[i];
        kept++;
    }
    st->segs = v;
    st->nsegs = kept;
    st->cap = n ? n : 1;
    st->revision = rev;
    for (size_t i = 0; i < kept; i++)
        st->pages_used += v[i].ndevices;
    if (st->pages_used > st->pool_pages && st->pool_pages)
        MV_WARN("pool.overcommitted", "used=%" PRIu64 " pool=%" PRIu64 " action=%s", st->pages_used,
                st->pool_pages,
                mv_log_q("existing segments kept; new allocations wait for pages to be freed"));
    MV_INFO("catalog.loaded", "count=%zu dropped=%zu revision=%" PRIu64 " path=%s", kept, n - kept,
            rev, mv_log_q(path));
    free(path);
    if (kept != n) {
        st->revision++;
        catalog_save(st);
    }
    return 0;
}

static void log_strays(mv_segstore *st)
{
    DIR *d = opendir(st->dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (nm[0] == '.' || strcmp(nm, CATALOG_NAME) == 0 || strcmp(nm, CATALOG_TMP) == 0 ||
            strcmp(nm, "agent.sock") == 0)
            continue;
        int known = 0;
        for (size_t i = 0; i < st->nsegs && !known; i++)
            known = strcmp(st->segs[i].id, nm) == 0;
        if (!known)
            MV_WARN("segment.stray_file", "dir=%s name=%s action=%s", mv_log_q(st->dir),
                    mv_log_q(nm), mv_log_q("left alone: not in the catalog"));
    }
    closedir(d);
}

static int mkdir_p(const char *dir)
{
    char *p = strdup(dir);
    if (!p)
        return -ENOMEM;
    for (char *c = p + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = 0;
        if (mkdir(p, 0755) < 0 && errno != EEXIST) {
            int e = -errno;
            free(p);
            return e;
        }
        *c = '/';
    }
    free(p);
    if (mkdir(dir, 0755) < 0) {
        if (errno != EEXIST)
            return -errno;
    } else {
        chmod(dir, 0755); /* not subject to umask */
    }
    struct stat sb;
    if (stat(dir, &sb) < 0)
        return -errno;
    return S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
}

static void *reaper_main(void *arg)
{
    mv_segstore *st = arg;
    pthread_mutex_lock(&st->mu);
    while (!st->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += st->reap_ms / 1000;
        ts.tv_nsec += (long)(st->reap_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!st->stopping && pthread_cond_timedwait(&st->cv, &st->mu, &ts) != ETIMEDOUT)
            ;
        if (st->stopping)
            break;
        pthread_mutex_unlock(&st->mu);
        mv_segstore_reap(st);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

int mv_segstore_open(const mv_segstore_opts *opts, mv_segstore **out)
{
    int rc;
    *out = NULL;
    mv_segstore *st = calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    st->dir = strdup(opts && opts->dir ? opts->dir : MV_SEGSTORE_DEFAULT_DIR);
    if (!st->dir) {
        rc = -ENOMEM;
        goto free_st;
    }
    size_t dl = strlen(st->dir);
    while (dl > 1 && st->dir[dl - 1] == '/')
        st->dir[--dl] = 0;
    st->max_size = opts && opts->max_size ? opts->max_size : MV_SEGSTORE_DEFAULT_MAX_SIZE;
    st->file_mode = opts && opts->file_mode ? opts->file_mode : DEFAULT_FILEMODE;
    st->reap_ms = opts && opts->reap_interval_ms ? opts->reap_interval_ms : DEFAULT_REAP_MS;
    if (st->max_size < MV_SEGSTORE_MIN_SIZE || st->max_size > MV_SEG_MAX_SIZE) {
        MV_ERROR("segstore.bad_option", "max_size=%" PRIu64 " valid=%s", st->max_size,
                 mv_log_q("4096..1073741824"));
        rc = -EINVAL;
        goto free_dir;
    }
    st->max_size -= st->max_size % MV_SEGSTORE_PAGE;
    st->pool_pages = opts ? opts->pool_pages : 0;
    st->page_size = opts && opts->page_size ? opts->page_size : MV_SEGSTORE_PAGE;
    if (st->page_size % MV_SEGSTORE_PAGE || st->page_size > st->max_size ||
        st->pool_pages > UINT32_MAX) {
        MV_ERROR("segstore.bad_option", "page_size=%" PRIu64 " pool_pages=%" PRIu64 " valid=%s",
                 st->page_size, st->pool_pages,
                 mv_log_q("page_size a multiple of 4096 up to max_size"));
        rc = -EINVAL;
        goto free_dir;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv, &ca);
    pthread_condattr_destroy(&ca);

    rc = mkdir_p(st->dir);
    if (rc < 0) {
        MV_ERROR("segstore.dir_failed", "dir=%s err=%s", mv_log_q(st->dir),
                 mv_log_q(strerror(-rc)));
        goto destroy_sync;
    }
    rc = load(st);
    if (rc < 0)
        goto destroy_sync;
    log_strays(st);
    if (st->reap_ms > 0) {
        int e = pthread_create(&st->reaper, NULL, reaper_main, st);
        if (e) {
            rc = -e;
            goto free_segs;
        }
        st->reaper_running = 1;
    }
    *out = st;
    return 0;
free_segs:
    mv_segstore_segs_free(st->segs, st->nsegs);
destroy_sync:
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
free_dir:
    free(st->dir);
free_st:
    free(st);
    return rc;
}

void mv_segstore_close(mv_segstore *st)
{
    if (!st)
        return;
    pthread_mutex_lock(&st->mu);
    st->stopping = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    if (st->reaper_running)
        pthread_join(st->reaper, NULL);
    while (st->subs) {
        mv_segstore_sub *s = st->subs;
        st->subs = s->next;
        free(s);
    }
    mv_segstore_segs_free(st->segs, st->nsegs);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    free(st->dir);
    free(st);
}

const char *mv_segstore_dir(const mv_segstore *st)
{
    return st->dir;
}

/* Creates, sizes and formats the file. Returns 0 or a negative errno. */
static int make_file(mv_segstore *st, mv_segstore_seg *seg, int in_dir, char *err, size_t errlen)
{
    int rc, fd = -1;
    char *segdir = NULL;
    for (int attempt = 0; attempt < 8; attempt++) {
        uint8_t rnd[8];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
            set_err(err, errlen, "getrandom failed: %s", strerror(errno));
            return -EIO;
        }
        snprintf(seg->id, sizeof seg->id, "seg-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
                 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
        free(seg->path);
        seg->path = seg_path(st->dir, seg->id, in_dir);
        if (!seg->path)
            return -ENOMEM;
        if (in_dir) {
            free(segdir);
            segdir = path_join(st->dir, seg->id);
            if (!segdir)
                return -ENOMEM;
            if (mkdir(segdir, 0755) < 0) {
                if (errno == EEXIST)
                    continue;
                rc = -errno;
                set_err(err, errlen, "cannot create %s: %s", segdir, strerror(errno));
                free(segdir);
                return rc;
            }
            chmod(segdir, 0755); /* not subject to umask */
        }
        fd = open(seg->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0 || errno != EEXIST)
            break;
    }
    if (fd < 0) {
        rc = -errno;
        set_err(err, errlen, "cannot create %s: %s", seg->path, strerror(errno));
        goto remove_dir;
    }
    if (fchmod(fd, st->file_mode) < 0) {
        rc = -errno;
        set_err(err, errlen, "chmod %s: %s", seg->path, strerror(errno));
        goto unlink_file;
    }
    rc = -posix_fallocate(fd, 0, (off_t)seg->size);
    if (rc < 0) {
        set_err(err, errlen, "cannot reserve %" PRIu64 " bytes for %s: %s", seg->size, seg->path,
                strerror(-rc));
        goto unlink_file;
    }
    void *base = mmap(NULL, seg->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = -errno;
        set_err(err, errlen, "mmap %s: %s", seg->path, strerror(errno));
        goto unlink_file;
    }
    mv_seg_error serr;
    mv_seg_reason r = mv_seg_format(base, seg->size, 0, &serr);
    munmap(base, seg->size);
    if (r != MV_SEG_OK) {
        rc = -EIO;
        set_err(err, errlen, "formatting %s failed: %s", seg->path, serr.detail);
        goto unlink_file;
    }
    close(fd);
    free(segdir);
    return 0;
unlink_file:
    unlink(seg->path);
    close(fd);
remove_dir:
    if (segdir)
        rmdir(segdir);
    free(segdir);
    return rc;
}

/* Caller holds st->mu. Index of the segment backed by `device`, or -1. */
static long find_device_locked(mv_segstore *st, const char *device)
{
    for (size_t i = 0; i < st->nsegs; i++)
        for (size_t j = 0; j < st->segs[i].ndevices; j++)
            if (strcmp(st->segs[i].devices[j], device) == 0)
                return (long)i;
    return -1;
}

static int create_common(mv_segstore *st, uint64_t size, uint32_t owner_pid,
                         const char *const *devices, size_t ndevices,
                         const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                         char *err, size_t errlen)
{
    int rc;
    mv_segstore_seg seg;
    memset(&seg, 0, sizeof seg);
    if (out)
        memset(out, 0, sizeof *out);
    if (size == 0 || size > st->max_size) {
        set_err(err, errlen, "size_bytes %" PRIu64 " is outside [1, %" PRIu64 "]", size,
                st->max_size);
        return size ? -EFBIG : -EINVAL;
    }
    size = (size + MV_SEGSTORE_PAGE - 1) / MV_SEGSTORE_PAGE * MV_SEGSTORE_PAGE;
    if (owner_pid > INT32_MAX) {
        set_err(err, errlen, "owner_pid %" PRIu32 " is not a valid pid", owner_pid);
        return -EINVAL;
    }
    rc = check_labels(labels, nlabels, err, errlen);
    if (rc < 0)
        return rc;
    mv_segstore_seg tmpl = {.size = size,
                            .owner_pid = owner_pid,
                            .created_ns = now_ns(),
                            .nlabels = nlabels,
                            .labels = (mv_segstore_label *)labels,
                            .ndevices = ndevices,
                            .devices = (char **)devices,
                            .path = (char *)""};
    rc = mv_segstore_seg_copy(&seg, &tmpl);
    if (rc < 0) {
        set_err(err, errlen, "out of memory");
        return rc;
    }
    if (ndevices) {
        /* Checked before the file exists, and again under the lock below. */
        pthread_mutex_lock(&st->mu);
        rc = 0;
        for (size_t i = 0; i < ndevices && !rc; i++) {
            long at = find_device_locked(st, devices[i]);
            if (at >= 0) {
                set_err(err, errlen, "device %s already backs segment %s", devices[i],
                        st->segs[at].id);
                rc = -EBUSY;
            }
        }
        if (!rc && st->pages_used + ndevices > st->pool_pages) {
            set_err(err, errlen,
                    "page pool exhausted: %zu pages requested, %" PRIu64 " of %" PRIu64 " free",
                    ndevices, st->pool_pages - st->pages_used, st->pool_pages);
            rc = -ENOSPC;
        }
        pthread_mutex_unlock(&st->mu);
        if (rc < 0)
            goto clear_seg;
    }
    rc = make_file(st, &seg, ndevices > 0, err, errlen);
    if (rc < 0)
        goto clear_seg;

    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < ndevices; i++) {
        long at = find_device_locked(st, devices[i]);
        if (at >= 0) {
            set_err(err, errlen, "device %s already backs segment %s", devices[i], st->segs[at].id);
            rc = -EBUSY;
            goto unlock;
        }
    }
    if (ndevices && st->pages_used + ndevices > st->pool_pages) {
        set_err(err, errlen, "page pool exhausted");
        rc = -ENOSPC;
        goto unlock;
    }
    if (st->nsegs >= MV_SEGSTORE_SEGMENTS_MAX) {
        rc = -ENOSPC;
        set_err(err, errlen, "the agent already manages %d segments", MV_SEGSTORE_SEGMENTS_MAX);
        goto unlock;
    }
    if (st->nsegs == st->cap || !st->segs) {
        size_t ncap = st->cap ? st->cap * 2 : 16;
        mv_segstore_seg *nv = realloc(st->segs, ncap * sizeof *nv);
        if (!nv) {
            rc = -ENOMEM;
            set_err(err, errlen, "out of memory");
            goto unlock;
        }
        st->segs = nv;
        st->cap = ncap;
    }
    if (out && mv_segstore_seg_copy(out, &seg) < 0) {
        rc = -ENOMEM;
        set_err(err, errlen, "out of memory");
        goto unlock;
    }
    st->segs[st->nsegs++] = seg;
    st->pages_used += ndevices;
    st->revision++;
    catalog_save(st);
    notify(st, MV_SEGSTORE_ADDED, &st->segs[st->nsegs - 1]);
    MV_INFO("segment.created",
            "id=%s path=%s size=%" PRIu64 " owner_pid=%" PRIu32 " labels=%zu devices=%zu "
            "revision=%" PRIu64,
            seg.id, mv_log_q(seg.path), seg.size, seg.owner_pid, seg.nlabels, seg.ndevices,
            st->revision);
    pthread_mutex_unlock(&st->mu);
    return 0;
unlock:
    pthread_mutex_unlock(&st->mu);
    unlink(seg.path);
    if (ndevices) {
        char dbuf[4096];
        if (mv_segstore_seg_dir(st, seg.id, dbuf, sizeof dbuf) == 0)
            rmdir(dbuf);
    }
clear_seg:
    mv_segstore_seg_clear(&seg);
    return rc;
}

int mv_segstore_create(mv_segstore *st, uint64_t size, uint32_t owner_pid,
                       const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                       char *err, size_t errlen)
{
    return create_common(st, size, owner_pid, NULL, 0, labels, nlabels, out, err, errlen);
}

int mv_segstore_create_dev(mv_segstore *st, const char *const *devices, size_t ndevices,
                           const mv_segstore_label *labels, size_t nlabels, mv_segstore_seg *out,
                           char *err, size_t errlen)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!st->pool_pages) {
        set_err(err, errlen, "this store has no page pool");
        return -EINVAL;
    }
    if (!devices || ndevices == 0 || ndevices > MV_SEGSTORE_DEVICES_MAX) {
        set_err(err, errlen, "%zu devices: need 1..%d", ndevices, MV_SEGSTORE_DEVICES_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < ndevices; i++) {
        if (!devices[i] || !valid_device(devices[i], strlen(devices[i]))) {
            set_err(err, errlen, "device %zu is not a valid device ID", i);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(devices[i], devices[j]) == 0) {
                set_err(err, errlen, "device %s is listed twice", devices[i]);
                return -EINVAL;
            }
    }
    if (ndevices > st->max_size / st->page_size) {
        set_err(err, errlen,
                "%zu pages of %" PRIu64 " bytes exceed the largest segment (%" PRIu64 " bytes)",
                ndevices, st->page_size, st->max_size);
        return -EFBIG;
    }
    return create_common(st, (uint64_t)ndevices * st->page_size, 0, devices, ndevices, labels,
                         nlabels, out, err, errlen);
}

static int labels_equal(const mv_segstore_seg *s, const mv_segstore_label *labels, size_t n)
{
    if (s->nlabels != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->labels[i].name, labels[i].name) ||
            strcmp(s->labels[i].value, labels[i].value))
            return 0;
    return 1;
}

int mv_segstore_set_labels(mv_segstore *st, const char *id, const mv_segstore_label *labels,
                           size_t nlabels, char *err, size_t errlen)
{
    int rc = check_labels(labels, nlabels, err, errlen);
    if (rc < 0)
        return rc;
    mv_segstore_seg tmpl = {
        .path = (char *)"", .nlabels = nlabels, .labels = (mv_segstore_label *)labels};
    mv_segstore_seg nl;
    if (mv_segstore_seg_copy(&nl, &tmpl) < 0) {
        set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rc = -ENOENT;
    set_err(err, errlen, "no segment with id %.40s", id ? id : "");
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; id && i < st->nsegs; i++) {
        mv_segstore_seg *s = &st->segs[i];
        if (strcmp(s->id, id) != 0)
            continue;
        if (labels_equal(s, labels, nlabels)) {
            rc = 0;
            break;
        }
        mv_segstore_label *old = s->labels;
        size_t nold = s->nlabels;
        s->labels = nl.labels;
        s->nlabels = nl.nlabels;
        nl.labels = old;
        nl.nlabels = nold;
        st->revision++;
        catalog_save(st);
        notify(st, MV_SEGSTORE_CHANGED, s);
        MV_INFO("segment.labels_set", "id=%s labels=%zu revision=%" PRIu64, s->id, s->nlabels,
                st->revision);
        rc = 1;
        break;
    }
    pthread_mutex_unlock(&st->mu);
    mv_segstore_seg_clear(&nl);
    return rc;
}

int mv_segstore_find_device(mv_segstore *st, const char *device, mv_segstore_seg *out)
{
    int rc = -ENOENT;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&st->mu);
    long at = device ? find_device_locked(st, device) : -1;
    if (at >= 0)
        rc = mv_segstore_seg_copy(out, &st->segs[at]);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

void mv_segstore_pool(mv_segstore *st, uint64_t *total, uint64_t *used)
{
    pthread_mutex_lock(&st->mu);
    if (total)
        *total = st->pool_pages;
    if (used)
        *used = st->pages_used;
    pthread_mutex_unlock(&st->mu);
}

int mv_segstore_seg_dir(const mv_segstore *st, const char *id, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s", st->dir, id);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Removes entry i. Caller holds st->mu. */
static void remove_at(mv_segstore *st, size_t i, const char *event, pid_t dead_pid)
{
    mv_segstore_seg seg = st->segs[i];
    st->segs[i] = st->segs[--st->nsegs];
    st->revision++;
    st->pages_used -= seg.ndevices <= st->pages_used ? seg.ndevices : st->pages_used;
    if (unlink(seg.path) < 0 && errno != ENOENT)
        MV_WARN("segment.unlink_failed", "id=%s path=%s err=%s", seg.id, mv_log_q(seg.path),
                mv_log_q(strerror(errno)));
    if (seg.ndevices) {
        char dbuf[4096];
        if (mv_segstore_seg_dir(st, seg.id, dbuf, sizeof dbuf) == 0 && rmdir(dbuf) < 0 &&
            errno != ENOENT)
            MV_WARN("segment.rmdir_failed", "id=%s dir=%s err=%s", seg.id, mv_log_q(dbuf),
                    mv_log_q(strerror(errno)));
    }
    catalog_save(st);
    notify(st, MV_SEGSTORE_REMOVED, &seg);
    if (dead_pid)
        MV_INFO(event, "id=%s owner_pid=%d revision=%" PRIu64, seg.id, (int)dead_pid, st->revision);
    else
        MV_INFO(event, "id=%s revision=%" PRIu64, seg.id, st->revision);
    mv_segstore_seg_clear(&seg);
}

int mv_segstore_release(mv_segstore *st, const char *id)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; id && i < st->nsegs; i++)
        if (strcmp(st->segs[i].id, id) == 0) {
            remove_at(st, i, "segment.released", 0);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int mv_segstore_reap(mv_segstore *st)
{
    int n = 0;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < st->nsegs;) {
        pid_t pid = (pid_t)st->segs[i].owner_pid;
        if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH) {
            remove_at(st, i, "segment.reaped", pid);
            n++;
            continue; /* entry i now holds the former last one */
        }
        i++;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

int mv_segstore_list(mv_segstore *st, mv_segstore_seg **out, size_t *n, uint64_t *revision)
{
    int rc = 0;
    pthread_mutex_lock(&st->mu);
    mv_segstore_seg *v = calloc(st->nsegs ? st->nsegs : 1, sizeof *v);
    size_t i = 0;
    if (!v) {
        rc = -ENOMEM;
        goto unlock;
    }
    for (; i < st->nsegs; i++)
        if (mv_segstore_seg_copy(&v[i], &st->segs[i]) < 0) {
            mv_segstore_segs_free(v, i);
            v = NULL;
            i = 0;
            rc = -ENOMEM;
            break;
        }
    if (revision)
        *revision = st->revision;
unlock:
    pthread_mutex_unlock(&st->mu);
    *out = v;
    *n = i;
    return rc;
}

int mv_segstore_subscribe(mv_segstore *st, mv_segstore_watch_fn fn, void *arg,
                          mv_segstore_sub **out)
{
    mv_segstore_sub *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->fn = fn;
    s->arg = arg;
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < st->nsegs; i++)
        fn(arg, MV_SEGSTORE_ADDED, &st->segs[i], st->revision);
    fn(arg, MV_SEGSTORE_SYNCED, NULL, st->revision);
    s->next = st->subs;
    st->subs = s;
    pthread_mutex_unlock(&st->mu);
    *out = s;
    return 0;
}

size_t mv_segstore_announce_all(mv_segstore *st)
{
    pthread_mutex_lock(&st->mu);
    size_t n = st->nsegs;
    for (size_t i = 0; i < n; i++)
        notify(st, MV_SEGSTORE_CHANGED, &st->segs[i]);
    pthread_mutex_unlock(&st->mu);
    return n;
}

void mv_segstore_unsubscribe(mv_segstore *st, mv_segstore_sub *sub)
{
    if (!sub)
        return;
    pthread_mutex_lock(&st->mu);
    for (mv_segstore_sub **pp = &st->subs; *pp; pp = &(*pp)->next)
        if (*pp == sub) {
            *pp = sub->next;
            break;
        }
    pthread_mutex_unlock(&st->mu);
    free(sub);
}
