/* mv_expo: streaming renderer for Prometheus text 0.0.4 and OpenMetrics 1.0 expositions, and
 * for the protobuf exposition (delimited io.prometheus.client.MetricFamily, with native
 * histograms; docs/exposition.md).
 *
 * The renderer writes families and samples, in the order the caller gives them, into a
 * growable buffer with a hard size cap. It knows no transport and no segment format.
 *
 * Ownership: mv_expo_create() returns a renderer the caller frees with mv_expo_destroy().
 * mv_expo_data() returns a pointer into the renderer's buffer; it stays valid until the next
 * call that writes, resets or destroys the renderer. All strings passed in are only read
 * during the call. A renderer is not thread-safe; use one per thread (or per scrape).
 *
 * Usage per scrape:
 *     mv_expo_reset(e, mv_expo_negotiate(accept_header));
 *     mv_expo_family(e, "http_requests_total", MV_EXPO_COUNTER, "Requests served.", NULL);
 *     mv_expo_sample_u64(e, NULL, id, nid, lbl, nlbl, NULL, 0, 1027, MV_EXPO_NO_TS);
 *     ...
 *     mv_expo_finish(e);
 *     body = mv_expo_data(e, &len);   content type: mv_expo_content_type(format)
 *
 * Errors: functions returning int give 0 on success or a negative errno value:
 *   -EINVAL  invalid input (bad metric or label name, sample without family, suffix not
 *            allowed for the family type, duplicate label name). Nothing was written; the
 *            exposition is still well formed. mv_expo_errmsg() says what was wrong.
 *   -ENOSPC  the cap was reached. The renderer drops the family being written (it rolls the
 *            buffer back to where that family started) and refuses further output; the
 *            buffer then holds only complete families. In OpenMetrics, room for "# EOF\n"
 *            is always reserved, so mv_expo_finish() still terminates the exposition.
 *            mv_expo_truncated() stays set until the next reset; the caller decides whether
 *            to serve the partial body (and should log or count it).
 *   -ENOMEM  allocation failed; handled like -ENOSPC.
 *
 * Names must match [a-zA-Z_:][a-zA-Z0-9_:]* (metrics) and [a-zA-Z_][a-zA-Z0-9_]* (labels);
 * mv_expo_sanitize_name() maps any string to a valid name. Label values and HELP text may be
 * any bytes: they are escaped for the format, and invalid UTF-8 is replaced by U+FFFD.
 */
#ifndef MV_EXPO_H
#define MV_EXPO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MV_EXPO_TEXT = 0,        /* text/plain; version=0.0.4 */
    MV_EXPO_OPENMETRICS = 1, /* application/openmetrics-text; version=1.0.0 */
    /* application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily;
     * encoding=delimited: each family a varint length and a MetricFamily message. The same
     * calls as the text formats; a family's metrics are kept until the family ends (next
     * family or finish), so the cap drops whole families as in text. Histograms carry their
     * classic buckets and a native histogram built from them (mv_expo_set_native). Chosen by
     * mv_expo_negotiate only for an exact media range (never for a wildcard). */
    MV_EXPO_PROTOBUF = 2,
} mv_expo_format;

typedef enum {
    MV_EXPO_COUNTER = 0,
    MV_EXPO_GAUGE,
    MV_EXPO_HISTOGRAM,
    MV_EXPO_SUMMARY,
    MV_EXPO_UNKNOWN, /* "untyped" in text 0.0.4, "unknown" in OpenMetrics */
    /* Protobuf only (GAUGE_HISTOGRAM): native histograms of a distribution that is not
     * cumulative, written with mv_expo_native (the text formats refuse the family). */
    MV_EXPO_GAUGE_HISTOGRAM,
} mv_expo_type;

typedef struct {
    const char *name;
    const char *value;
} mv_expo_label;

/* Pass as ts_ms for a sample without a timestamp. */
#define MV_EXPO_NO_TS INT64_MIN

/* Default and smallest accepted caps. */
#define MV_EXPO_CAP_DEFAULT (16u << 20)
#define MV_EXPO_CAP_MIN     64u

typedef struct mv_expo mv_expo;

/* Picks the format for an HTTP Accept header (may be NULL). Follows the media ranges, their
 * parameters (version) and q-values, with wildcards; the more specific range wins for a
 * format, the higher q wins between formats, text 0.0.4 wins ties and is the fallback.
 * Any byte string is accepted. Prometheus 3's default Accept header selects OpenMetrics. */
mv_expo_format mv_expo_negotiate(const char *accept);

/* The Content-Type header value for a format, e.g. "text/plain; version=0.0.4; charset=utf-8". */
const char *mv_expo_content_type(mv_expo_format f);

/* Creates a renderer for `f` whose output never exceeds `cap` bytes (0 = default; caps below
 * MV_EXPO_CAP_MIN are raised to it). Returns NULL on allocation failure. */
mv_expo *mv_expo_create(mv_expo_format f, size_t cap);
void mv_expo_destroy(mv_expo *e);

/* Empties the buffer (keeping its memory), clears errors and truncation, sets the format. */
void mv_expo_reset(mv_expo *e, mv_expo_format f);

mv_expo_format mv_expo_get_format(const mv_expo *e);

/* Starts a family: writes TYPE, then UNIT (OpenMetrics only, and only when `name` ends with
 * "_<unit>"; otherwise UNIT is silently omitted), then HELP (omitted when help is NULL).
 * `help` and `unit` may be NULL or empty. Counters: give the name with or without "_total";
 * text 0.0.4 uses it as given for TYPE/HELP and samples, OpenMetrics names the family without
 * "_total" and the samples with it. The caller must not start the same family twice. */
int mv_expo_family(mv_expo *e, const char *name, mv_expo_type type, const char *help,
                   const char *unit);

/* Writes one sample of the current family: name + suffix, labels `a` then `b` then the
 * extra label (e.g. "le" or "quantile", rendered canonically; NULL for none), the value and
 * an optional timestamp (milliseconds since the epoch; MV_EXPO_NO_TS for none).
 * Allowed suffixes: counter NULL or "_created"; gauge/unknown NULL; histogram "_bucket",
 * "_sum", "_count", "_created"; summary NULL (a quantile), "_sum", "_count", "_created".
 * "_created" samples are skipped (return 0) in text 0.0.4, which has no such sample.
 * Samples are written in call order; a histogram needs its +Inf bucket, _sum and _count.
 * OpenMetrics also requires the samples of one label set to be adjacent (all buckets, _sum,
 * _count and _created of one series before the next series; a counter's _created right
 * after its _total). */
int mv_expo_sample(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                   const mv_expo_label *b, size_t nb, const char *extra_name, double extra_value,
                   double value, int64_t ts_ms);
/* Same, with an exact integer value (counters, bucket counts, integer gauges). */
int mv_expo_sample_u64(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *extra_name,
                       double extra_value, uint64_t value, int64_t ts_ms);
int mv_expo_sample_i64(mv_expo *e, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *extra_name,
                       double extra_value, int64_t value, int64_t ts_ms);

/* Ends the exposition: OpenMetrics writes "# EOF\n"; text writes nothing. Idempotent. */
int mv_expo_finish(mv_expo *e);

/* The rendered bytes (not NUL-terminated) and their length. */
const char *mv_expo_data(const mv_expo *e, size_t *len);
int mv_expo_truncated(const mv_expo *e);
/* A malloc'd copy of the rendered bytes (free()), *len its length; NULL when the exposition was
 * truncated or out of memory. For servers that render under a lock and send after it. */
char *mv_expo_copy(const mv_expo *e, size_t *len);
/* The last error as text ("" if none). Valid until the next call on `e`. */
const char *mv_expo_errmsg(const mv_expo *e);

/* ---- Pre-rendered output (the exposition cache of pkg/collector/export) -------------------
 * Bytes the caller rendered earlier with this module (the same format) are written back
 * as they are, with the cap and truncation rules above: a family that does not fit is
 * dropped whole and later output refused. The normal sample calls cannot follow
 * mv_expo_raw_family (no family is open for them). */

/* Starts a family whose header (TYPE/UNIT/HELP lines) is `hdr`. 0, or -ENOSPC/-ENOMEM. In
 * the protobuf format `hdr` is the family's varint length and the start of its MetricFamily
 * message (the caller frames it), and a family left open by mv_expo_family ends first. */
int mv_expo_raw_family(mv_expo *e, const char *hdr, size_t n);
/* The writable room after the body: *p and the bytes that may be written there without any
 * check (never past the cap). Write, then mv_expo_raw_commit the count written. */
void mv_expo_raw_room(mv_expo *e, char **p, size_t *avail);
void mv_expo_raw_commit(mv_expo *e, size_t n);
/* Appends n bytes of the current family, growing the buffer or truncating as a sample would.
 * 0, or -ENOSPC/-ENOMEM. */
int mv_expo_raw_put(mv_expo *e, const char *s, size_t n);
/* Cuts the body back to `len` bytes (no shorter than where the current family started):
 * lets a renderer of scratch lines reuse its buffer. */
void mv_expo_raw_truncate(mv_expo *e, size_t len);

/* Writes `v` as a protobuf varint at `o` (room for 10 bytes); returns the bytes written. */
size_t mv_expo_pb_put_varint(uint8_t *o, uint64_t v);
/* The bytes mv_expo_pb_put_varint writes for `v`. */
size_t mv_expo_pb_varint_len(uint64_t v);

/* ---- Protobuf parts (the exposition cache's protobuf plan) ----------------------------------
 * The value message of one histogram series (Metric field 7) or summary series (field 4),
 * packed with protobuf-c from the same code a protobuf render of the samples goes through, so
 * the bytes are the same: histogram: le[0..n) the bucket bounds as the "_bucket" samples give
 * them (+Inf among them), cum[0..n) their cumulative counts, and the native histogram built
 * from them as mv_expo_set_native(e) says; summary: q[0..n) the quantiles, v their values.
 * *out points into e and stays valid until the next call on e. Call between families (or
 * around mv_expo_raw_* output), never while mv_expo_sample is filling a histogram or summary
 * family. 0, -EINVAL (a family's series is being assembled) or -ENOMEM. */
int mv_expo_pb_histogram(mv_expo *e, const double *le, const uint64_t *cum, size_t n, double sum,
                         uint64_t count, const uint8_t **out, size_t *len);
int mv_expo_pb_summary(mv_expo *e, const double *q, const double *v, size_t n, double sum,
                       uint64_t count, const uint8_t **out, size_t *len);

/* ---- Native histograms (protobuf exposition, remote write 2.0) -------------------------------
 * Exponential buckets of schema s (-4..8): bucket i holds (2^((i-1) 2^-s), 2^(i 2^-s)]; each
 * bucket is 2^(2^-s) times wider than the previous. A value of magnitude at most the zero
 * threshold goes to the zero bucket. Counts are added at a value (the bucket holding it);
 * finishing merges them, halves the resolution (schema - 1, buckets i -> ((i - 1) >> 1) + 1,
 * as Prometheus does) while more than max_buckets buckets are populated and the schema is
 * above -4, and encodes spans and deltas as the protobuf and remote write 2.0 messages want.
 */
#define MV_EXPO_NH_SCHEMA_MIN     (-4)
#define MV_EXPO_NH_SCHEMA_MAX     8
#define MV_EXPO_NH_ZERO_THRESHOLD 0x1p-128 /* Prometheus' default */
#define MV_EXPO_NH_MAX_BUCKETS    160      /* default bucket limit (both signs together) */

typedef struct mv_expo_nh_span {
    int32_t offset; /* first span: index of its first bucket; then the gap since the last */
    uint32_t length;
} mv_expo_nh_span;

typedef struct mv_expo_nh_bkt {
    int32_t idx;
    uint32_t neg; /* 1: the bucket of -value */
    uint64_t n;
} mv_expo_nh_bkt;

typedef struct mv_expo_nh {
    int32_t schema;        /* after finish: the schema used (may be below the one asked for) */
    double zero_threshold; /* MV_EXPO_NH_ZERO_THRESHOLD unless changed before adding */
    uint64_t zero_count;
    /* After mv_expo_nh_finish: [0] positive, [1] negative buckets. */
    mv_expo_nh_span *span[2];
    size_t nspan[2];
    int64_t *delta[2]; /* count of each bucket minus the previous one's (the first: itself) */
    size_t ndelta[2];
    /* Internal: the added (index, sign, count) entries and the allocations. */
    mv_expo_nh_bkt *b;
    size_t nb, bcap, scap[2], dcap[2];
} mv_expo_nh;

/* Starts an empty histogram of `schema` (clamped to -4..8), keeping memory. A zeroed
 * mv_expo_nh is a valid empty one to start from. */
void mv_expo_nh_begin(mv_expo_nh *h, int32_t schema);
void mv_expo_nh_free(mv_expo_nh *h);
/* Adds n observations at value v (NaN is ignored). 0 or -ENOMEM. */
int mv_expo_nh_add(mv_expo_nh *h, double v, uint64_t n);
/* Adds a classic histogram: bounds[0..nb) strictly increasing upper bounds, cum[0..nb]
 * cumulative counts (cum[nb]: the +Inf bucket, i.e. the total). Each bucket's count goes to
 * the native bucket of one representative: 2 lo hi / (lo + hi) for (lo, hi] of one sign, hi
 * for a bucket from -Inf or straddling zero, the last bound for the +Inf bucket. Bounds on
 * the schema's boundaries therefore map exactly. -EINVAL for bad bounds, else as add. */
int mv_expo_nh_add_classic(mv_expo_nh *h, const double *bounds, size_t nb, const uint64_t *cum);
/* Merges, reduces to at most max_buckets populated buckets (0: MV_EXPO_NH_MAX_BUCKETS) and
 * encodes spans and deltas. 0 or -ENOMEM. */
int mv_expo_nh_finish(mv_expo_nh *h, uint32_t max_buckets);
/* Index of the bucket of schema s holding magnitude x > 0. */
int32_t mv_expo_nh_index(double x, int32_t schema);
/* Upper bound of bucket idx of schema s. */
double mv_expo_nh_upper(int32_t idx, int32_t schema);
/* The coarsest schema whose growth factor 2^(2^-s) is at most gamma (so that its buckets are
 * no wider than a sketch's of that gamma), clamped to -4..8. */
int32_t mv_expo_nh_schema_for_gamma(double gamma);

/* Adds n observations to bucket idx (neg: of -value) of h's schema. 0 or -ENOMEM. */
int mv_expo_nh_add_bucket(mv_expo_nh *h, int32_t idx, int neg, uint64_t n);

/* A native histogram given by its buckets (a gauge histogram's series): b[0..nb) of `schema`
 * (-4..8), in any order, zero_count observations of magnitude at most
 * MV_EXPO_NH_ZERO_THRESHOLD, count and sum. Reduced to mv_expo_set_native's bucket limit as
 * any native histogram (its schema is its own, whatever mv_expo_set_native's). */
typedef struct mv_expo_native_in {
    int32_t schema;
    uint64_t zero_count;
    const mv_expo_nh_bkt *b;
    size_t nb;
    uint64_t count;
    double sum;
} mv_expo_native_in;

/* Writes one series of the current MV_EXPO_GAUGE_HISTOGRAM family (protobuf): labels a then
 * b, the native histogram `in` and an optional timestamp. -EINVAL as mv_expo_sample (no such
 * family, bad labels, a schema out of range), -ENOSPC, -ENOMEM. */
int mv_expo_native(mv_expo *e, const mv_expo_label *a, size_t na, const mv_expo_label *b, size_t nb,
                   const mv_expo_native_in *in, int64_t ts_ms);
/* Its value message (Metric field 7) alone, as mv_expo_pb_histogram gives a histogram's. */
int mv_expo_pb_native(mv_expo *e, const mv_expo_native_in *in, const uint8_t **out, size_t *len);

/* Native histograms in the protobuf exposition: schema (-4..8), or MV_EXPO_NH_OFF for classic
 * buckets only, and the bucket limit (0: default). Defaults: schema 6, 160 buckets. */
#define MV_EXPO_NH_OFF INT32_MIN
void mv_expo_set_native(mv_expo *e, int32_t schema, uint32_t max_buckets);

/* Writes into out (size outsz >= 2) a valid metric name (label_name=0) or label name
 * (label_name=1) derived from `s`: invalid characters become '_', a leading digit gets a
 * '_' prefix, an empty input becomes "_". Truncates to outsz-1 bytes. Returns the length. */
size_t mv_expo_sanitize_name(const char *s, int label_name, char *out, size_t outsz);

/* Formats a double the way the exposition does (shortest round-trip, Go %g style, NaN,
 * +Inf, -Inf). canonical=1 adds ".0" to integral values (OpenMetrics le/quantile).
 * Returns the length written (out needs 32 bytes). Exposed for tests and callers. */
size_t mv_expo_format_double(double v, int canonical, char *out, size_t outsz);
/* Decimal digits of v into out (at least 20 bytes, not NUL-terminated); returns the length. */
size_t mv_expo_format_u64(uint64_t v, char *out);

#ifdef __cplusplus
}
#endif

#endif
