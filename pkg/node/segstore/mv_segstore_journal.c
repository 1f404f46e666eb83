/* mv_segstore_journal: the catalog on disk as a snapshot (catalog.json) plus an append-only
 * journal (catalog.journal) of the changes made since, and the loader that rebuilds the
 * catalog from both, setting aside what cannot be loaded.
 *
 * A journal record: "MVJ1", the payload's length and its CRC-32 (both 32-bit little-endian),
 * then the payload: one JSON object, {"op":"put","revision":R,"segment":{entry}} (a segment
 * added or changed: the whole entry, as in catalog.json) or {"op":"del","revision":R,"id":ID}.
 * Records apply in order; one whose revision is not above the snapshot's is already in it
 * (a crash between writing a snapshot and emptying the journal). */
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

#include "mv_log.h"
#include "mv_segment.h"
#include "mv_util.h"

#define JR_MAGIC       "MVJ1"
#define JR_HDR         12
#define JSON_DEPTH_MAX 8

/* ---- CRC-32 (IEEE 802.3, as zlib's crc32) ----------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t mv_segstore__crc32(const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = buf;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- Writing ----------------------------------------------------------------------------- */

int mv_segstore__journal_open(mv_segstore *st)
{
    char *path = mv_segstore__path_join(st->dir, JOURNAL_NAME);
    if (!path)
        return -ENOMEM;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    int rc = fd < 0 ? -errno : 0;
    struct stat sb;
    if (rc == 0 && fstat(fd, &sb) < 0)
        rc = -errno;
    if (rc == 0 && !S_ISREG(sb.st_mode))
        rc = -EINVAL;
    if (rc == 0)
        rc = mv_segstore__fsync_dir(st->dir);
    if (rc < 0) {
        MV_ERROR("catalog.journal_open_failed", "path=%s err=%s", mv_log_q(path),
                 mv_log_q(strerror(-rc)));
        if (fd >= 0)
            close(fd);
        free(path);
        return rc;
    }
    free(path);
    st->jr_fd = fd;
    st->jr_len = (uint64_t)sb.st_size;
    st->jr_records = 0;
    return 0;
}

void mv_segstore__journal_close(mv_segstore *st)
{
    if (st->jr_fd >= 0)
        close(st->jr_fd);
    st->jr_fd = -1;
}

/* Appends one record and makes it durable (fdatasync). On failure the journal is cut back to
 * where it was, so that no partial record stays in front of later ones. */
static int journal_append(mv_segstore *st, json_object *rec, char *err, size_t errlen)
{
    size_t len;
    const char *text = json_object_to_json_string_length(
        rec, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    if (!text) {
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    if (st->jr_fd < 0) {
        mv_util_err_set(err, errlen, "the catalog journal %s/%s is not open", st->dir,
                        JOURNAL_NAME);
        return -EIO;
    }
    if (len > JR_RECORD_MAX) {
        mv_util_err_set(err, errlen, "catalog entry of %zu bytes exceeds %u", len, JR_RECORD_MAX);
        return -EINVAL;
    }
    uint8_t *buf = malloc(JR_HDR + len);
    if (!buf) {
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    memcpy(buf, JR_MAGIC, 4);
    put_le32(buf + 4, (uint32_t)len);
    put_le32(buf + 8, mv_segstore__crc32(text, len));
    memcpy(buf + JR_HDR, text, len);
    int rc = 0;
    if (lseek(st->jr_fd, (off_t)st->jr_len, SEEK_SET) < 0)
        rc = -errno;
    if (rc == 0)
        rc = mv_segstore__write_all(st->jr_fd, buf, JR_HDR + len);
    if (rc == 0 && fdatasync(st->jr_fd) < 0)
        rc = -errno;
    free(buf);
    if (rc < 0) {
        if (ftruncate(st->jr_fd, (off_t)st->jr_len) < 0)
            MV_WARN("catalog.journal_cut_failed", "dir=%s err=%s", mv_log_q(st->dir),
                    mv_log_q(strerror(errno)));
        mv_util_err_set(err, errlen, "cannot record the segment in the catalog journal %s/%s: %s",
                        st->dir, JOURNAL_NAME, strerror(-rc));
        MV_ERROR("catalog.journal_write_failed", "dir=%s err=%s", mv_log_q(st->dir),
                 mv_log_q(strerror(-rc)));
        return rc;
    }
    st->jr_len += JR_HDR + len;
    st->jr_records++;
    st->jr_bytes_written += JR_HDR + len;
    return 0;
}

static json_object *record_new(const char *op, uint64_t revision)
{
    json_object *r = json_object_new_object();
    if (!r)
        return NULL;
    json_object_object_add(r, "op", json_object_new_string(op));
    json_object_object_add(r, "revision", json_object_new_int64((int64_t)revision));
    return r;
}

int mv_segstore__journal_put(mv_segstore *st, const mv_segstore_seg *s, uint64_t revision,
                             char *err, size_t errlen)
{
    json_object *r = record_new("put", revision);
    json_object *e = mv_segstore__entry_json(s);
    if (!r || !e) {
        json_object_put(r);
        json_object_put(e);
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    json_object_object_add(r, "segment", e);
    int rc = journal_append(st, r, err, errlen);
    json_object_put(r);
    return rc;
}

int mv_segstore__journal_del(mv_segstore *st, const char *id, uint64_t revision, char *err,
                             size_t errlen)
{
    json_object *r = record_new("del", revision);
    if (!r) {
        mv_util_err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    json_object_object_add(r, "id", json_object_new_string(id));
    int rc = journal_append(st, r, err, errlen);
    json_object_put(r);
    return rc;
}

int mv_segstore__compact(mv_segstore *st)
{
    int rc = mv_segstore__catalog_save(st->dir, st->revision, st->segs, st->nsegs);
    if (rc < 0) {
        /* Still correct: the journal keeps every change. Try again after as many records. */
        st->compact_at = st->jr_records * 2 + JR_COMPACT_MIN;
        return rc;
    }
    struct stat sb;
    char *path = mv_segstore__path_join(st->dir, CATALOG_NAME);
    if (path && stat(path, &sb) == 0)
        st->snap_bytes_written += (uint64_t)sb.st_size;
    free(path);
    if (st->jr_fd >= 0) {
        if (ftruncate(st->jr_fd, 0) < 0 || fsync(st->jr_fd) < 0) {
            rc = -errno;
            MV_WARN("catalog.journal_truncate_failed", "dir=%s err=%s note=%s", mv_log_q(st->dir),
                    mv_log_q(strerror(-rc)),
                    mv_log_q("the records are in the snapshot too; loading skips them"));
            return rc;
        }
        st->jr_len = 0;
    }
    st->jr_records = 0;
    st->compact_at = 0;
    st->snap_segs = st->nsegs;
    MV_DEBUG("catalog.compacted", "count=%zu revision=%" PRIu64, st->nsegs, st->revision);
    return 0;
}

void mv_segstore__journal_maybe_compact(mv_segstore *st)
{
    size_t at = st->compact_at ? st->compact_at
                               : (st->snap_segs > JR_COMPACT_MIN ? st->snap_segs : JR_COMPACT_MIN);
    if (st->jr_records >= at)
        mv_segstore__compact(st);
}

/* ---- Loading ----------------------------------------------------------------------------- */

/* The loaded segments by id: open addressing on the id's 64-bit number. */
typedef struct seg_set {
    mv_segstore_seg *v;
    unsigned char *dead;
    size_t n, cap;
    size_t *slot; /* index + 1, 0 = empty */
    size_t nslot;
} seg_set;

static uint64_t id_hash(const char *id)
{
    uint64_t h = 0;
    for (int i = 4; i < MV_SEGSTORE_ID_LEN; i++)
        h = h << 4 | (uint64_t)(id[i] <= '9' ? id[i] - '0' : id[i] - 'a' + 10);
    return h * 0x9e3779b97f4a7c15ull;
}

static size_t *set_find(seg_set *s, const char *id)
{
    size_t mask = s->nslot - 1;
    for (size_t i = (size_t)(id_hash(id) >> 20) & mask;; i = (i + 1) & mask) {
        if (!s->slot[i] || strcmp(s->v[s->slot[i] - 1].id, id) == 0)
            return &s->slot[i];
    }
}

static int set_grow(seg_set *s)
{
    if (s->n + 1 <= s->cap && (s->n + 1) * 2 <= s->nslot)
        return 0;
    size_t ncap = s->cap ? s->cap * 2 : 64;
    mv_segstore_seg *nv = realloc(s->v, ncap * sizeof *nv);
    if (!nv)
        return -ENOMEM;
    s->v = nv;
    unsigned char *nd = realloc(s->dead, ncap);
    if (!nd)
        return -ENOMEM;
    s->dead = nd;
    s->cap = ncap;
    size_t nslot = ncap * 2;
    size_t *ns = calloc(nslot, sizeof *ns);
    if (!ns)
        return -ENOMEM;
    free(s->slot);
    s->slot = ns;
    s->nslot = nslot;
    for (size_t i = 0; i < s->n; i++)
        *set_find(s, s->v[i].id) = i + 1;
    return 0;
}

/* Takes `seg` (moved in): replaces an entry with its id, or adds it. */
static int set_put(seg_set *s, mv_segstore_seg *seg)
{
    if (set_grow(s) < 0)
        return -ENOMEM;
    size_t *sl = set_find(s, seg->id);
    if (*sl) {
        mv_segstore_seg_clear(&s->v[*sl - 1]);
        s->v[*sl - 1] = *seg;
        s->dead[*sl - 1] = 0;
    } else {
        s->v[s->n] = *seg;
        s->dead[s->n] = 0;
        *sl = ++s->n;
    }
    memset(seg, 0, sizeof *seg);
    return 0;
}

static void set_del(seg_set *s, const char *id)
{
    if (!s->nslot)
        return;
    size_t *sl = set_find(s, id);
    if (*sl && !s->dead[*sl - 1]) {
        /* The id stays for the slot chain; the rest goes. */
        mv_segstore_seg *e = &s->v[*sl - 1];
        char keep[sizeof e->id];
        memcpy(keep, e->id, sizeof keep);
        mv_segstore_seg_clear(e);
        memcpy(e->id, keep, sizeof keep);
        s->dead[*sl - 1] = 1;
    }
}

typedef struct load_ctx {
    segstore_loaded *out;
    int log;
    const char *what;
} load_ctx;

static void bad_entry(void *arg, size_t idx, const char *reason)
{
    load_ctx *c = arg;
    c->out->bad_entries++;
    if (c->log)
        MV_WARN("catalog.entry_quarantined", "file=%s index=%zu reason=%s", mv_log_q(c->what), idx,
                mv_log_q(reason));
}

static void bad_record(load_ctx *c, uint64_t off, const char *reason)
{
    c->out->bad_records++;
    if (c->log)
        MV_WARN("catalog.record_quarantined", "file=%s offset=%" PRIu64 " reason=%s",
                mv_log_q(JOURNAL_NAME), off, mv_log_q(reason));
}

/* Applies one journal payload. */
static void apply_record(load_ctx *c, seg_set *set, const char *dir, const char *p, size_t len,
                         uint64_t off)
{
    char err[MV_ERR_MAX];
    json_tokener *tok = json_tokener_new_ex(JSON_DEPTH_MAX);
    if (!tok) {
        bad_record(c, off, "out of memory");
        return;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *r = json_tokener_parse_ex(tok, p, (int)len);
    json_object *op, *rev, *v;
    const char *ops;
    int64_t revision;
    if (!r || json_tokener_get_error(tok) != json_tokener_success ||
        json_tokener_get_parse_end(tok) != len || !json_object_is_type(r, json_type_object) ||
        !json_object_object_get_ex(r, "op", &op) || !json_object_is_type(op, json_type_string) ||
        !json_object_object_get_ex(r, "revision", &rev) ||
        !json_object_is_type(rev, json_type_int) || (revision = json_object_get_int64(rev)) < 0 ||
        revision == INT64_MAX) {
        bad_record(c, off, "not a {op, revision, ...} JSON object");
        goto done;
    }
    ops = json_object_get_string(op);
    if ((uint64_t)revision <= c->out->revision && c->out->have_snapshot)
        goto done; /* in the snapshot already */
    if (strcmp(ops, "put") == 0 && json_object_object_get_ex(r, "segment", &v)) {
        mv_segstore_seg seg;
        if (mv_segstore__entry_from_json(v, dir, MV_SEG_MAX_SIZE, &seg, err, sizeof err) < 0) {
            bad_record(c, off, err);
            goto done;
        }
        if (set_put(set, &seg) < 0) {
            mv_segstore_seg_clear(&seg);
            bad_record(c, off, "out of memory");
            goto done;
        }
    } else if (strcmp(ops, "del") == 0 && json_object_object_get_ex(r, "id", &v) &&
               json_object_is_type(v, json_type_string) &&
               mv_segstore__valid_id(json_object_get_string(v),
                                     (size_t)json_object_get_string_len(v))) {
        set_del(set, json_object_get_string(v));
    } else {
        bad_record(c, off, "unknown op, or its fields are missing or invalid");
        goto done;
    }
    if ((uint64_t)revision > c->out->revision)
        c->out->revision = (uint64_t)revision;
done:
    json_object_put(r);
    json_tokener_free(tok);
}

int mv_segstore__catalog_build(const char *snap, size_t snaplen, const uint8_t *jr, size_t jlen,
                               const char *dir, int log, segstore_loaded *out)
{
    memset(out, 0, sizeof *out);
    seg_set set = {0};
    load_ctx c = {.out = out, .log = log, .what = CATALOG_NAME};
    int rc = 0;
    if (snap) {
        char err[MV_ERR_MAX];
        mv_segstore_seg *v = NULL;
        size_t n = 0;
        uint64_t rev = 0;
        rc = mv_segstore__catalog_parse_ex(snap, snaplen, dir, MV_SEG_MAX_SIZE, bad_entry, &c, &v,
                                           &n, &rev, err, sizeof err);
        if (rc == -ENOMEM)
            return rc;
        if (rc < 0) {
            out->snap_bad = 1;
            mv_util_fmt(out->snap_reason, sizeof out->snap_reason, "%s", err);
        } else {
            out->revision = rev;
            out->have_snapshot = 1;
            for (size_t i = 0; i < n; i++) {
                if (set.nslot && *set_find(&set, v[i].id)) {
                    char why[64];
                    mv_util_fmt(why, sizeof why, "segment %s appears twice", v[i].id);
                    bad_entry(&c, i, why);
                    mv_segstore_seg_clear(&v[i]);
                } else if (set_put(&set, &v[i]) < 0) {
                    mv_segstore_segs_free(v, n);
                    rc = -ENOMEM;
                    goto fail;
                }
            }
            free(v);
        }
    }
    size_t off = 0;
    while (off < jlen) {
        size_t left = jlen - off;
        if (left < JR_HDR || memcmp(jr + off, JR_MAGIC, 4) != 0) {
            /* A header cut short is a torn tail; anything else is damage. */
            if (left < JR_HDR && memcmp(jr + off, JR_MAGIC, left < 4 ? left : 4) == 0)
                out->jr_torn = 1;
            else
                out->jr_broken = 1;
            break;
        }
        uint32_t len = get_le32(jr + off + 4), crc = get_le32(jr + off + 8);
        if (len > JR_RECORD_MAX) {
            out->jr_broken = 1;
            break;
        }
        if (len > left - JR_HDR) {
            out->jr_torn = 1;
            break;
        }
        if (mv_segstore__crc32(jr + off + JR_HDR, len) != crc) {
            /* The last record, written in part before a crash, or damage in the middle. */
            if (off + JR_HDR + len == jlen)
                out->jr_torn = 1;
            else
                out->jr_broken = 1;
            break;
        }
        apply_record(&c, &set, dir, (const char *)jr + off + JR_HDR, len, off);
        out->jr_records++;
        off += JR_HDR + len;
    }
    out->jr_valid = off;
    /* Live entries, in order. */
    size_t kept = 0;
    for (size_t i = 0; i < set.n; i++) {
        if (set.dead[i]) {
            mv_segstore_seg_clear(&set.v[i]);
            continue;
        }
        set.v[kept++] = set.v[i];
    }
    out->segs = set.v;
    out->n = kept;
    set.v = NULL;
    rc = 0;
fail:
    mv_segstore_segs_free(set.v, set.n);
    free(set.dead);
    free(set.slot);
    return rc;
}

int mv_segstore_catalog_load_mem(const char *snap, size_t snaplen, const uint8_t *journal,
                                 size_t jlen, const char *dir, mv_segstore_seg **out, size_t *n,
                                 uint64_t *revision, size_t *quarantined)
{
    segstore_loaded l;
    int rc = mv_segstore__catalog_build(snap, snaplen, journal, jlen,
                                        dir ? dir : MV_SEGSTORE_DEFAULT_DIR, 0, &l);
    if (rc < 0)
        return rc;
    *out = l.segs;
    *n = l.n;
    *revision = l.revision;
    *quarantined = l.bad_entries + l.bad_records + (size_t)l.snap_bad + (size_t)l.jr_broken;
    return 0;
}
