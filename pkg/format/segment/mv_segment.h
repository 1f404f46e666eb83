/* mv_segment: segment format v1 — layout, writer primitives and the validating reader.
 *
 * This module is the contract between pods (writers) and collectors (readers).
 * It depends on libc only. docs/segment-format.md is the normative text; the
 * constants and structs below follow it byte for byte.
 *
 * Every reader entry point treats the bytes it is given as hostile: any offset,
 * length or count read from a segment is checked before use, and a rejection
 * carries a stable reason code (mv_seg_reason) plus a human-readable detail.
 */
#ifndef MV_SEGMENT_H
#define MV_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Layout constants (see docs/segment-format.md) ---------------------- */

#define MV_SEG_MAGIC       "MVIEWSEG" /* 8 bytes, no terminator in the segment */
#define MV_SEG_VERSION     1
#define MV_SEG_HEADER_SIZE 128
#define MV_SEG_ALIGN       8
#define MV_SEG_MIN_SIZE    1024u
#define MV_SEG_MAX_SIZE    (1u << 30) /* 1 GiB: offsets are 32-bit */
#define MV_SEG_RECORD_HEAD 24         /* fixed part of a catalog record */
#define MV_SEG_RECORD_MIN  40         /* head + shortest strings + checksum */
#define MV_SEG_LINE        64         /* cache line: libmicroview starts each value slot on one */
#define MV_SEG_SHARDS_MAX  64         /* shards of a sharded record, a power of two (5.2) */

/* Catalog record flags (record byte 5). Readers reject any other bit. */
#define MV_SEG_REC_SHARDED 0x01 /* the value slot holds shard_count shards, summed by readers */

/* Limits a writer must respect and a reader enforces. */
#define MV_SEG_NAME_MAX        255  /* metric name bytes */
#define MV_SEG_HELP_MAX        1024 /* help text bytes */
#define MV_SEG_UNIT_MAX        63   /* unit bytes */
#define MV_SEG_LABELS_MAX      16   /* labels per metric */
#define MV_SEG_LABEL_KEY_MAX   127  /* label name bytes */
#define MV_SEG_LABEL_VALUE_MAX 255  /* label value bytes */
#define MV_SEG_BUCKETS_MAX     160  /* finite histogram bounds */
#define MV_SEG_METRICS_MAX     65535

/* Metric types (record byte 4). */
enum {
    MV_SEG_COUNTER = 1,   /* one u64 word, monotonically increasing */
    MV_SEG_GAUGE = 2,     /* one IEEE-754 binary64 word */
    MV_SEG_HISTOGRAM = 3, /* count, sum, buckets, checksum: see mv_seg_hist_* */
    MV_SEG_COUNTER_F = 4, /* fractional counter: u64 integral word + binary64 fraction word */
    MV_SEG_TOMBSTONE = 5, /* no slot: deletes the earlier record at its value_offset (6.6) */
};

/* Whether a metric type is a counter on the wire (type 1 or 4). */
static inline int mv_seg_is_counter(uint8_t type)
{
    return type == MV_SEG_COUNTER || type == MV_SEG_COUNTER_F;
}

/* The header, at offset 0 of every segment. Little-endian, naturally aligned.
 * Fields marked (atomic) are updated by writers with 8- or 4-byte atomic
 * stores while readers copy the segment. */
typedef struct mv_seg_header {
    char magic[8];           /*   0 "MVIEWSEG" */
    uint16_t version;        /*   8 MV_SEG_VERSION */
    uint16_t header_size;    /*  10 MV_SEG_HEADER_SIZE */
    uint32_t flags;          /*  12 0; readers reject unknown bits */
    uint64_t segment_size;   /*  16 total bytes of the segment */
    uint32_t values_offset;  /*  24 start of the value area (== header_size) */
    uint32_t values_size;    /*  28 capacity of the value area, multiple of 8 */
    uint32_t catalog_offset; /*  32 start of the catalog area, multiple of 8 */
    uint32_t catalog_size;   /*  36 capacity of the catalog area, multiple of 8 */
    uint64_t instance;       /*  40 nonzero random id chosen when formatted */
    uint64_t generation;     /*  48 (atomic) catalog generation; odd = append in progress */
    uint32_t metric_count;   /*  56 (atomic) published catalog records */
    uint32_t values_used;    /*  60 (atomic) bytes of the value area allocated */
    uint32_t catalog_used;   /*  64 (atomic) bytes of the catalog area used */
    uint32_t lock;           /*  68 (atomic) registration lock: 0 or owner pid */
    uint64_t heartbeat_ns;   /*  72 (atomic) writer's CLOCK_REALTIME, ns; 0 = never */
    uint64_t created_ns;     /*  80 CLOCK_REALTIME when formatted, ns */
    uint32_t writer_pid;     /*  88 (atomic) pid of the last process that opened it */
    uint32_t reserved0;      /*  92 0 */
    uint8_t reserved[32];    /*  96 0 */
} mv_seg_header;

/* Fixed head of a catalog record; strings, bounds and checksum follow. */
typedef struct mv_seg_record_head {
    uint32_t record_size;  /*  0 whole record incl. checksum, multiple of 8 */
    uint8_t type;          /*  4 MV_SEG_COUNTER/GAUGE/HISTOGRAM/COUNTER_F/TOMBSTONE */
    uint8_t flags;         /*  5 0, or MV_SEG_REC_SHARDED */
    uint16_t label_count;  /*  6 <= MV_SEG_LABELS_MAX */
    uint32_t value_offset; /*  8 from the start of the value area, multiple of 8 */
    uint32_t value_size;   /* 12 bytes of value words */
    uint16_t bucket_count; /* 16 finite bounds (histograms), else 0 */
    uint16_t shard_count;  /* 18 sharded: a power of two, 2 .. MV_SEG_SHARDS_MAX; others 0 */
    uint32_t reserved2;    /* 20 0 */
} mv_seg_record_head;

_Static_assert(sizeof(mv_seg_header) == MV_SEG_HEADER_SIZE, "header is 128 bytes");
_Static_assert(sizeof(mv_seg_record_head) == MV_SEG_RECORD_HEAD, "record head is 24 bytes");

/* ---- Rejection reasons ---------------------------------------------------- */

/* Stable codes; never renumbered. mv_seg_reason_name() gives the label value
 * used in microview_segment_errors_total{reason=...}. */
typedef enum mv_seg_reason {
    MV_SEG_OK = 0,
    MV_SEG_E_TRUNCATED = 1,    /* fewer bytes than the header/areas claim */
    MV_SEG_E_MAGIC = 2,        /* not "MVIEWSEG" */
    MV_SEG_E_VERSION = 3,      /* unsupported format version */
    MV_SEG_E_HEADER = 4,       /* header_size, flags or reserved fields wrong */
    MV_SEG_E_SIZE = 5,         /* segment_size out of range or != mapped size */
    MV_SEG_E_LAYOUT = 6,       /* an area is misaligned or outside the segment */
    MV_SEG_E_OVERLAP = 7,      /* areas or value ranges overlap */
    MV_SEG_E_COUNT = 8,        /* absurd metric/label/bucket count or used bytes */
    MV_SEG_E_RECORD = 9,       /* a catalog record's size or fields are wrong */
    MV_SEG_E_STRING = 10,      /* string too long, unterminated or not UTF-8 */
    MV_SEG_E_NAME = 11,        /* invalid metric or label name */
    MV_SEG_E_TYPE = 12,        /* unknown metric type or type conflict */
    MV_SEG_E_VALUE_RANGE = 13, /* value slot outside the used value area */
    MV_SEG_E_CHECKSUM = 14,    /* catalog record checksum mismatch */
    MV_SEG_E_BUSY = 15,        /* catalog being appended (odd generation): retry */
    MV_SEG_E_TORN = 16,        /* a histogram copy was torn: retry */
    MV_SEG_E_DUPLICATE = 17,   /* same name and labels twice */
    MV_SEG_E_BUCKETS = 18,     /* bounds not finite and strictly increasing */
    MV_SEG_E_CHANGED = 19,     /* instance changed under a cached catalog */
    MV_SEG_E_NOMEM = 20,       /* reader could not allocate */
    MV_SEG_E_FULL = 21,        /* writer: no room left in an area */
    MV_SEG_E_INVAL = 22,       /* writer/caller: invalid argument */
    MV_SEG_REASON_COUNT_
} mv_seg_reason;

typedef struct mv_seg_error {
    mv_seg_reason reason;
    char detail[192]; /* e.g. "record 3: label key 2 is not terminated" */
} mv_seg_error;

/* Short stable name of a reason ("truncated", "bad_magic", ...). */
const char *mv_seg_reason_name(mv_seg_reason r);

/* True for reasons that a re-read may clear (BUSY, TORN, CHANGED). */
int mv_seg_reason_transient(mv_seg_reason r);

/* ---- Shared helpers --------------------------------------------------------- */

/* FNV-1a 64 over `len` bytes: the catalog record checksum. */
uint64_t mv_seg_fnv1a64(const void *p, size_t len);

/* Weight of histogram value word `i` in the histogram checksum:
 * mix64((i + 1) * 0x9E3779B97F4A7C15) | 1, where mix64 is SplitMix64's finaliser. */
static inline uint64_t mv_seg_hist_weight(uint32_t i)
{
    uint64_t z = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) | 1ull;
}

/* Histogram value words: [0] count, [1] sum (binary64 bits), [2 .. 2+n] bucket
 * counts (n finite bounds + the +Inf bucket), [n+3] checksum. */
#define MV_SEG_HIST_WORDS(nbounds) ((uint32_t)(nbounds) + 4u)

/* Whether `n` is a shard count a sharded record may have: a power of two, 2 .. 64. */
static inline int mv_seg_valid_shards(unsigned n)
{
    return n >= 2 && n <= MV_SEG_SHARDS_MAX && (n & (n - 1)) == 0;
}

/* Validates a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*, not starting "__"). */
int mv_seg_valid_metric_name(const char *s, size_t len);
/* Validates a label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting "__"). */
int mv_seg_valid_label_name(const char *s, size_t len);
/* Validates UTF-8 without NUL bytes. */
int mv_seg_valid_utf8(const char *s, size_t len);

/* Copies `len` bytes (a multiple of 8; both pointers 8-aligned) with one
 * relaxed atomic 8-byte load per word, so every word of the copy is a value a
 * writer actually stored. This is what a same-host reader uses instead of
 * memcpy; RDMA READ gives the same per-word guarantee for aligned words. */
void mv_seg_copy_words(void *dst, const void *src, size_t len);

/* ---- Formatting (agent or first writer) ------------------------------------ */

/* Computes the default split of a segment of `size` bytes: a value area of a
 * quarter of what follows the header (at least 512 bytes, 64-byte multiple)
 * and the rest for the catalog. Returns 0, or MV_SEG_E_SIZE. */
int mv_seg_default_layout(uint64_t size, uint32_t *values_size, uint32_t *catalog_size);

/* Writes a fresh v1 header into `base` (which must be `size` bytes, zeroed,
 * 8-aligned) with the given value-area size (0 = default layout). The magic
 * is stored last with release order so a concurrent reader never sees a
 * half-written header as valid. Returns MV_SEG_OK or a reason (+ detail). */
mv_seg_reason mv_seg_format(void *base, uint64_t size, uint32_t values_size, mv_seg_error *err);

/* As mv_seg_format, with the instance id (nonzero) and creation time given by the caller
 * instead of drawn from /dev/urandom and the clock: reproducible segments for test vectors.
 * The bytes written are the same format; only the choice of those two values differs. */
mv_seg_reason mv_seg_format_with(void *base, uint64_t size, uint32_t values_size, uint64_t instance,
                                 uint64_t created_ns, mv_seg_error *err);

/* ---- Catalog records (writer side) ----------------------------------------- */

typedef struct mv_seg_label {
    const char *key;
    const char *value;
} mv_seg_label;

typedef struct mv_seg_metric_desc {
    uint8_t type;
    const char *name;
    const char *help; /* may be NULL (= "") */
    const char *unit; /* may be NULL (= "") */
    const mv_seg_label *labels;
    uint16_t label_count;
    const double *bounds; /* histograms: strictly increasing finite bounds */
    uint16_t bucket_count;
    uint16_t shards; /* 0 or 1: one value; a power of two 2 .. 64: a sharded record */
} mv_seg_metric_desc;

/* Validates a description against the format's rules and limits. A tombstone (type
 * MV_SEG_TOMBSTONE) carries the name and labels of the record it deletes, no help, no unit;
 * mv_seg_record_encode then takes the deleted record's value_offset. */
mv_seg_reason mv_seg_desc_check(const mv_seg_metric_desc *d, mv_seg_error *err);

/* Size in bytes of the record and of the value slot `d` needs (all shards of a sharded one). */
uint32_t mv_seg_record_size(const mv_seg_metric_desc *d);
uint32_t mv_seg_value_size(const mv_seg_metric_desc *d);

/* Bytes of one value of `type` with `bucket_count` bounds (a shard of a sharded record), and
 * the distance from one shard to the next: that size rounded up to whole 64-byte lines. */
uint32_t mv_seg_shard_size(uint8_t type, uint16_t bucket_count);
uint32_t mv_seg_shard_stride(uint8_t type, uint16_t bucket_count);

/* Where a writer that follows libmicroview's placement (spec section 5.1) puts a new value
 * slot of `value_size` bytes, whose record takes `record_size` bytes, given the segment's
 * `values_used` / `values_size` and `catalog_used` / `catalog_size`: at the next 64-byte line
 * boundary of the value area, so that no two slots share a cache line, as long as that leaves
 * 8 value bytes for every further record of this size the catalog area could still take;
 * otherwise packed, at `values_used`. Returns the value offset; the caller checks that the
 * slot (offset + value_size <= values_size) and the record fit. */
uint32_t mv_seg_place_slot(uint32_t values_used, uint32_t values_size, uint32_t catalog_used,
                           uint32_t catalog_size, uint32_t record_size, uint32_t value_size);

/* Encodes the record for `d` (value slot at `value_offset`) into `out`, which
 * must have mv_seg_record_size(d) bytes; the checksum is filled in. */
void mv_seg_record_encode(void *out, const mv_seg_metric_desc *d, uint32_t value_offset);

/* Repair (spec section 8, step 2), for a writer holding the registration lock of a segment
 * whose generation is odd: recomputes what an appender that died half-way should have
 * published, from the records themselves. Walks the catalog area from its start while each
 * record's size is valid, its checksum matches and its value slot follows the previous one
 * inside the value area; returns their count, the catalog bytes they use and the value bytes
 * their slots end at. A complete record of the dead appender counts (its slot was zeroed
 * before the record was written); a partial one ends the walk. `base` is the live segment
 * of `size` bytes whose header passed a structural check. */
void mv_seg_recount(const void *base, size_t size, uint32_t *metric_count, uint32_t *catalog_used,
                    uint32_t *values_used);

/* ---- Reader: the catalog ---------------------------------------------------- */

typedef struct mv_seg_metric {
    const char *name; /* NUL-terminated, validated; points into the catalog */
    const char *help;
    const char *unit;
    uint16_t name_len, help_len, unit_len;
    uint8_t type;
    uint16_t label_count;
    const mv_seg_label *labels; /* label_count entries, validated */
    uint16_t bucket_count;
    const double *bounds;  /* bucket_count finite, increasing bounds */
    uint32_t value_offset; /* bytes from the start of the value area */
    uint32_t value_size;   /* the whole slot: every shard of a sharded record */
    uint16_t shards;       /* 1, or the shard count of a sharded record (spec section 5.2) */
    uint32_t shard_size;   /* bytes of one value (of each shard): 8, or a histogram's words */
    uint32_t shard_stride; /* bytes from one shard to the next (shard_size when unsharded) */
    uint32_t fold_offset;  /* where mv_seg_fold leaves the summed value, from the start of the
                            * value area: value_offset for a record that is not sharded */
} mv_seg_metric;

typedef struct mv_seg_catalog mv_seg_catalog;

/* Parses and validates a segment copy of `len` bytes (at least the whole
 * header and catalog areas; the value area may be absent from `buf` if
 * `len` ends before it, but then values_offset+values_used must still fit in
 * the declared segment_size). `expected_size`, if nonzero, is what the
 * transport knows the segment's size to be (mapped or registered length).
 * On success *out owns copies of everything it points to; free with
 * mv_seg_catalog_free. */
mv_seg_reason mv_seg_catalog_parse(const void *buf, size_t len, uint64_t expected_size,
                                   mv_seg_catalog **out, mv_seg_error *err);
void mv_seg_catalog_free(mv_seg_catalog *c);

/* The live series: records that no tombstone deleted, in record order (tombstones and the
 * records they deleted are not listed). Indices stay the same across appends of series;
 * an appended tombstone moves the live records after the one it deletes down by one. */
size_t mv_seg_catalog_count(const mv_seg_catalog *c);
const mv_seg_metric *mv_seg_catalog_metric(const mv_seg_catalog *c, size_t i);
/* Tombstones in the catalog (spec section 6.6): a change means the indices moved. */
size_t mv_seg_catalog_tombstones(const mv_seg_catalog *c);
/* The type of the records named `name`, live or deleted (all share one), or 0: what a
 * writer checks before it registers a name again. */
uint8_t mv_seg_catalog_name_type(const mv_seg_catalog *c, const char *name);
uint64_t mv_seg_catalog_generation(const mv_seg_catalog *c);
uint64_t mv_seg_catalog_instance(const mv_seg_catalog *c);
uint64_t mv_seg_catalog_segment_size(const mv_seg_catalog *c);
/* Bytes a tick must copy: header plus the used value area. */
uint32_t mv_seg_catalog_hot_size(const mv_seg_catalog *c);
/* Where the value area starts (the header's values_offset): a metric's first value word is
 * at mv_seg_catalog_values_offset(c) + m->value_offset of the segment. */
uint32_t mv_seg_catalog_values_offset(const mv_seg_catalog *c);
/* Records that are sharded. */
size_t mv_seg_catalog_sharded(const mv_seg_catalog *c);
/* Bytes of a buffer that mv_seg_fold can fill: the hot size plus one value for each sharded
 * record (equal to the hot size when none is sharded). */
uint32_t mv_seg_catalog_fold_size(const mv_seg_catalog *c);

/* ---- Reader: values ------------------------------------------------------- */

/* Checks a hot copy (header + value area, `len` bytes) against a catalog
 * parsed earlier. Returns MV_SEG_OK if the catalog still describes it;
 * MV_SEG_E_CHANGED if the instance or generation moved (re-read the catalog);
 * another reason if the header is invalid. *heartbeat_ns gets the writer's
 * heartbeat (may be NULL). */
mv_seg_reason mv_seg_hot_check(const mv_seg_catalog *c, const void *buf, size_t len,
                               uint64_t *heartbeat_ns, mv_seg_error *err);

/* Decoded histogram; `buckets` points into the caller's copy, or, for a sharded record, at
 * `summed` (the view must then outlive its use of `buckets`). */
typedef struct mv_seg_hist_view {
    uint64_t count;
    double sum;
    const uint64_t *buckets;                 /* bucket_count + 1 non-cumulative counts */
    uint64_t summed[MV_SEG_BUCKETS_MAX + 1]; /* a sharded record's bucket sums */
} mv_seg_hist_view;

/* Accessors on a hot copy that passed mv_seg_hot_check. `hot` is the copy's
 * start (the header); `m` a metric of the same catalog. A sharded record reads as the sum
 * of its shards (spec section 5.2); a histogram's as torn when any shard is. */
uint64_t mv_seg_read_counter(const void *hot, const mv_seg_metric *m);
/* A counter's value as binary64: a counter_f's f64(int) + frac (sharded: f64(sum of the
 * int words) + the frac words added in shard order), or a type 1 counter's word converted. */
double mv_seg_read_counter_f(const void *hot, const mv_seg_metric *m);
double mv_seg_read_gauge(const void *hot, const mv_seg_metric *m);
/* MV_SEG_OK, or MV_SEG_E_TORN when the copy caught an update half-way. */
mv_seg_reason mv_seg_read_histogram(const void *hot, const mv_seg_metric *m, mv_seg_hist_view *out);

/* Sums every sharded record of a hot copy that passed mv_seg_hot_check into one value of its
 * type at its fold_offset, past the copy's hot size: `buf` must hold
 * mv_seg_catalog_fold_size(c) bytes. The copy itself is left as it is. A histogram is folded
 * with its checksum, so the folded words validate like a histogram slot; when one of its
 * shards is torn, the folded checksum is made wrong on purpose and the folded words read as
 * torn. Returns how many folded histograms are torn. Does nothing when no record is sharded. */
size_t mv_seg_fold(const mv_seg_catalog *c, void *buf);

#ifdef __cplusplus
}
#endif
#endif
