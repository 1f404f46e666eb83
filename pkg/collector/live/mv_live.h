/* mv_live: live views of what the collector reads, at read resolution, streamed to browsers
 * (/ui) and microviewctl top as Server-Sent Events.
 *
 * Subscriptions: GET /api/v1/stream?seg=ID&m=INDEX[&m=INDEX...][&width=PX][&window_ms=MS]
 * subscribes to metrics (catalog indexes) of one segment. Each subscribed series, and only
 * those, gets a ring of its last ring_len reads, shared by every stream watching it, filled
 * by the collector's read hook (mv_coll_set_read_hook) on the tick worker: a counter as its
 * rate over the read interval, a gauge as its value, a histogram as its observation rate plus
 * p50/p90/p99 of the observations between two reads (linear within the pod's buckets). A
 * segment nobody watches costs the tick nothing more than one load (mv_coll_watch).
 *
 * Downsampling: a stream sends, per series, buckets of window_ms / width each (one per
 * pixel) holding the min and the max of the reads in it (and of each quantile), so a spike
 * one read long is never averaged away; the client merges buckets it has seen again.
 *
 * Events (text/event-stream): "hello" (the series: index, name, type, labels; the bucket
 * width), "data" ({"bw":ns,"s":[{"i":idx,"b":[[k,min,max,flags(,q50min,q50max,q90min,
 * q90max,q99min,q99max,h0..h7)],...]}]}: bucket k covers [k bw, (k+1) bw) ns of wall-clock time;
 * flags bit 0: the change detector fired in it; histograms then 8 heatmap bins: the
 * observations per group of the pod's buckets, whose upper bounds "hello" gives), "state" (the
 * segment's state ok / busy / stale / quarantined / gone and its anomaly score, once a second),
 * "drop" (reads lost to a slow reader: {"i":idx,"lost":N}), "end" ({"reason":...}: slow_reader,
 * segment_gone, max_lifetime, shutdown), and a comment line as heartbeat every heartbeat_ms.
 *
 * Limits (each refusal answers 429 or 400 with a JSON reason and is counted): series per
 * stream (MV_LIVE_SERIES_MAX), streams in all and per client address, distinct series in
 * all, and bytes of rings in all. A stream that lost a whole ring's worth of one series (it
 * did not read for ring_len reads) is ended with reason slow_reader; a client that reads
 * nothing is closed by the HTTP layer's idle timeout; every stream ends after
 * max_lifetime_s. Memory: ring_len * 48 bytes per distinct series, reported as
 * microview_ui_ring_bytes.
 *
 * Threads: the hook runs on tick workers (it copies one sample per watched series, under that
 * series' lock); the handlers run on HTTP threads and only copy out what was prepared; one
 * pump thread at nice 10 prepares each stream's next events (every pump_ms, at most once per
 * bucket width, only once the client took the previous ones; past 16 streams less often, never
 * beyond half a ring), wakes the streams, and takes the segments' state once a second while
 * any stream is open.
 */
#ifndef MV_LIVE_H
#define MV_LIVE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mv_coll mv_coll;
typedef struct mv_expo mv_expo;
typedef struct mv_httpd_request mv_httpd_request;
typedef struct mv_httpd_response mv_httpd_response;

#define MV_LIVE_SERIES_MAX 16  /* m= parameters per stream */
#define MV_LIVE_ID_MAX     256 /* bytes of a segment id */
#define MV_LIVE_WIDTH_MIN  16
#define MV_LIVE_WIDTH_MAX  4096
#define MV_LIVE_WINDOW_MIN 1000ull /* ms */

typedef struct mv_live_opts {
    mv_coll *coll;                   /* borrowed; must outlive the mv_live */
    uint32_t tick_us;                /* the collector's tick, for the history length */
    uint32_t ring_len;               /* reads kept per series; default 8192 */
    unsigned max_streams;            /* default 64 */
    unsigned max_streams_per_client; /* default 8 */
    unsigned max_series;             /* distinct series in all; default 256 */
    uint64_t max_ring_bytes;         /* default 64 MiB */
    unsigned heartbeat_ms;           /* default 2000 */
    unsigned pump_ms;                /* default 25 */
    unsigned max_lifetime_s;         /* default 3600 */
} mv_live_opts;

void mv_live_opts_default(mv_live_opts *o);

typedef struct mv_live mv_live;

/* Sets the collector's read hook and starts the pump thread. Returns 0, -EINVAL or -ENOMEM. */
int mv_live_create(const mv_live_opts *o, mv_live **out);
/* Clears the hook, stops the pump and frees every stream and ring. Call after the HTTP server
 * is destroyed (its streams are closed then) and before the table. NULL is a no-op. */
void mv_live_destroy(mv_live *l);

/* GET /api/v1/stream. */
int mv_live_handle_stream(mv_live *l, const mv_httpd_request *req, mv_httpd_response *resp);
/* GET /api/v1/live/segments: the catalog for the pickers (JSON). */
int mv_live_handle_segments(mv_live *l, const mv_httpd_request *req, mv_httpd_response *resp);

/* GET /ui (the page) and /ui/app.js (its code), built into the binary from
 * pkg/collector/live/ui/. 404 for another path. */
int mv_live_handle_asset(const char *path, mv_httpd_response *resp);

typedef struct mv_live_stats {
    uint64_t ring_bytes; /* held by rings now */
    uint64_t streams;    /* open now */
    uint64_t series;     /* distinct series with a ring now */
    uint64_t refused_streams, refused_client, refused_series, refused_memory, bad_request;
    uint64_t ended_slow, ended_gone, ended_lifetime;
    uint64_t lost_reads; /* reads overwritten before a stream sent them */
    uint64_t hook_ns;    /* time spent in the read hook, all added up */
    uint64_t hook_calls;
} mv_live_stats;

void mv_live_get_stats(mv_live *l, mv_live_stats *out);
/* The microview_ui_* families. */
int mv_live_render(mv_live *l, mv_expo *e);

/* ---- The stream query (fuzzed alone: tests/fuzz/fuzz_live_query.c) ---- */

typedef struct mv_live_query {
    char seg[MV_LIVE_ID_MAX + 1];
    uint32_t idx[MV_LIVE_SERIES_MAX];
    size_t n;
    unsigned width;     /* default 800 */
    uint64_t window_ms; /* default 10000 */
    unsigned seen;      /* parameters given (internal) */
} mv_live_query;

void mv_live_query_init(mv_live_query *q);
/* Takes one query parameter. Returns 0, or -EINVAL with a sentence in err: an unknown or
 * repeated key, a segment id that is empty, too long or not printable ASCII, an index that is
 * not a whole number 0..65535 or given twice, more than MV_LIVE_SERIES_MAX indexes, a width
 * outside 16..4096, a window outside 1000..max_window_ms. */
int mv_live_query_add(mv_live_query *q, const char *key, const char *value, uint64_t max_window_ms,
                      char *err, size_t errlen);
/* After the last parameter: seg and at least one m are required. Returns 0 or -EINVAL. */
int mv_live_query_finish(const mv_live_query *q, char *err, size_t errlen);

/* Writes `s` as a JSON string (quotes included) into buf; returns the length it needs
 * (written only when it fits, NUL-terminated). Bytes under 0x20, '"' and '\\' are escaped. */
size_t mv_live_json_str(const char *s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
