/* mv_rw: Prometheus remote write from the collector (docs/exposition.md, "Remote write").
 *
 * Every interval (independent of any scrape) the sender takes a snapshot of the collector's
 * table and queues one sample per series: raw values stamped with the time their segment was
 * read, window summaries with the end of their window (mv_export_visit). A series whose time
 * did not move since it was last queued is not queued again. Series are hashed onto shards;
 * each shard has a bounded FIFO (its part of queue_samples) and one sender thread that posts
 * up to max_per_send samples at a time as a snappy block-compressed WriteRequest (remote
 * write 1.0: Content-Encoding: snappy, Content-Type: application/x-protobuf, User-Agent,
 * X-Prometheus-Remote-Write-Version: 0.1.0), or with version 2 an io.prometheus.write.v2.Request
 * (symbols table) that falls back to 1.0 for good after a 415, or after a 2xx without the
 * X-Prometheus-Remote-Write-*-Written headers (the spec has the sender assume nothing was
 * written then; the batch is sent again as 1.0). A 2xx is success; 5xx, 429 and
 * transport errors are retried with exponential backoff (min_backoff_ms doubling to
 * max_backoff_ms; a Retry-After of a 429 or 503, seconds or HTTP date, is honoured up to
 * 5 minutes) while the shard keeps its order and later samples wait in the queue; any other
 * 4xx drops the batch (counted, not retried). A full queue drops the newest samples (counted).
 * A pod histogram is one queued item: 2.0 sends it as a native histogram (native_schema),
 * 1.0 as its classic _bucket/_sum/_count series.
 * Labels: the series' labels, then the external labels (a series' own label of the same name
 * wins), sorted by name with __name__.
 *
 * Threads: one interval thread and `shards` senders, started by mv_rw_create and joined by
 * mv_rw_destroy; mv_rw_stats and mv_rw_render may be called from any thread.
 */
#ifndef MV_RW_H
#define MV_RW_H

#include <stddef.h>
#include <stdint.h>

#include "mv_collect.h"
#include "mv_expo.h"
#include "mv_export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mv_rw_label {
    const char *name;
    const char *value;
} mv_rw_label;

typedef struct mv_rw_config {
    const char *url;      /* http:// or https:// endpoint (NULL: no remote write) */
    uint32_t interval_ms; /* default 1000 */
    int version;          /* 1 (default) or 2 */
    /* Authentication: a bearer token read from a file (re-read every minute), or basic auth
     * with the password read from a file. */
    const char *bearer_token_file;
    const char *basic_user;
    const char *basic_password_file;
    /* TLS: CA bundle (NULL: the system's), client certificate and key, and skipping the
     * server's verification (tests only). */
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    int insecure_skip_verify;
    const mv_rw_label *external; /* external labels */
    size_t nexternal;
    uint32_t shards;          /* default 2, at most 64 */
    uint64_t queue_samples;   /* capacity of all queues together; default 500000 */
    uint32_t max_per_send;    /* default 2000 */
    uint32_t min_backoff_ms;  /* default 30 */
    uint32_t max_backoff_ms;  /* default 5000 */
    uint32_t timeout_ms;      /* per request; default 10000 */
    const mv_export_sel *sel; /* derived series sent (borrowed; NULL = the exposition default) */
    int native_set;           /* native_schema given (else 6) */
    int32_t native_schema;    /* 2.0: schema of the native histograms sent (-4..8) */
} mv_rw_config;

/* Fills the defaults (url NULL). */
void mv_rw_config_default(mv_rw_config *c);
/* NULL if valid, else a sentence saying what to fix. */
const char *mv_rw_config_check(const mv_rw_config *c);

typedef struct mv_rw mv_rw;

/* Starts the sender over `coll` (borrowed; must outlive it). 0, -EINVAL or -ENOMEM. */
int mv_rw_create(const mv_rw_config *c, mv_coll *coll, mv_rw **out);
/* Stops the threads (a request in flight ends within its timeout) and frees. NULL is a no-op. */
void mv_rw_destroy(mv_rw *rw);

/* Samples: as sent on the wire (a histogram is its classic series in 1.0, one sample in
 * 2.0); the queue's figures count items (a histogram is one). */
typedef struct mv_rw_stats {
    uint64_t samples_queued;     /* items accepted into a queue */
    uint64_t samples_sent;       /* acknowledged with 2xx */
    uint64_t dropped_queue_full; /* items refused by a full queue */
    uint64_t dropped_http_4xx;   /* in batches refused with a 4xx (not 429) */
    uint64_t dropped_native_v1;  /* gauge histograms not sent after a fallback to 1.0 */
    uint64_t samples_retried;    /* samples of retried requests, once per retry */
    uint64_t requests;           /* requests sent (each try) */
    uint64_t requests_failed;    /* tries that did not get a 2xx */
    uint64_t bytes_sent;         /* compressed bodies of successful requests */
    uint64_t bytes_uncompressed; /* their protobuf size */
    uint64_t queue_samples;      /* items waiting now, the batches being sent included */
    double oldest_age_s;         /* age of the oldest sample waiting (0: none) */
    uint64_t fallbacks_v1;       /* 2.0 refused with 415: remote write 1.0 from then on */
    uint64_t written_missing;    /* 2.0 answers without X-Prometheus-Remote-Write-*-Written */
    int version;                 /* the protocol in use */
} mv_rw_stats;

void mv_rw_get_stats(mv_rw *rw, mv_rw_stats *st);
/* Writes the microview_remote_write_* families into an exposition. */
int mv_rw_render(mv_rw *rw, mv_expo *e);

/* ---- Encoding (exposed for tests, benchmarks and the fuzz driver) ---------------------------- */

typedef struct mv_rw_series {
    const mv_rw_label *labels; /* sorted by name, __name__ included */
    size_t nlabels;
    double value;
    int64_t ts_ms;
    /* A histogram (is_hist): __name__ is the family's name; nbounds finite increasing bounds
     * and nbounds + 1 cumulative counts (the last: the +Inf bucket), sum and count. 1.0 sends
     * it as the classic series <name>_bucket{le}, _sum and _count; 2.0 as one native
     * histogram of `schema` (mv_expo_nh_add_classic, at most MV_EXPO_NH_MAX_BUCKETS). */
    int is_hist; /* 1: a histogram as above; 2: a gauge histogram (below) */
    const double *bounds;
    const uint64_t *cum;
    size_t nbounds;
    double sum;
    uint64_t count;
    /* Optional, 1.0 only (not a histogram): the labels already packed as a TimeSeries' label
     * fields (mv_rw_labels_pb_pack of `labels`), copied instead of packed again. */
    const uint8_t *pb_labels;
    size_t pb_len;
    /* is_hist 2, a gauge histogram (2.0 only; 1.0 leaves it out): a native histogram of
     * native_schema with the zero bucket's count and nnbkt buckets, sum and count, sent with
     * reset hint GAUGE. */
    int32_t native_schema;
    uint64_t zero_count;
    const mv_expo_nh_bkt *nbkt;
    size_t nnbkt;
} mv_rw_series;

/* The label fields (field 1 of io.prometheus.TimeSeries, protobuf-c's encoding) of n labels:
 * their size, and packing them into out (that many bytes). */
size_t mv_rw_labels_pb_size(const mv_rw_label *l, size_t n);
void mv_rw_labels_pb_pack(const mv_rw_label *l, size_t n, uint8_t *out);

/* Packs a remote write 1.0 WriteRequest (version 1) or a 2.0 Request (version 2) for the
 * series and snappy-compresses it into *out (malloc'd; free()). *raw_len gets the protobuf
 * size. `schema` is the native histograms' (2.0). 0 or -ENOMEM. */
int mv_rw_encode(int version, const mv_rw_series *s, size_t n, int32_t schema, uint8_t **out,
                 size_t *len, size_t *raw_len);
/* Decompresses a snappy block of at most max_out bytes decompressed into *out (malloc'd).
 * 0, -EINVAL (not a valid snappy block), -E2BIG (larger than max_out) or -ENOMEM. */
int mv_rw_unsnappy(const uint8_t *in, size_t n, size_t max_out, uint8_t **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
