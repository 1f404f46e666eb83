/* mv_verbs: per-agent catalog watch + RDMA connection feeding the collector's table. */
#include "mv_verbs.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_discovery.h"
#include "mv_log.h"
#include "mv_rdmaread.h"
#include "mv_util.h"

#define AGENTS_MAX   64
#define SEGMENTS_MAX 65536 /* per agent */

/* A segment an agent announced as RDMA-readable. */
typedef struct vseg {
    char *id;
    uint64_t addr, len;
    uint32_t rkey;
    mv_seg_label *labels; /* copies */
    size_t nlabels;
    mv_seg_label *pod_labels; /* copies: the pod's Kubernetes labels, for selectors */
    size_t npod_labels;
    int in_table; /* added to the collector's table */
    void *src;    /* the table's source for it while in_table */
} vseg;

typedef struct vagent {
    struct mv_verbs *set;
    char target[300]; /* control plane IP:PORT */
    char ip[256];     /* rdma_cm address (the target's host part) */
    pthread_mutex_t mu;
    mv_rdmaread_conn *conn; /* opened on demand; kept (it reconnects itself) until destroy */
    int connecting;         /* a thread is opening conn with mu released */
    uint64_t connect_attempts;
    vseg *segs;
    size_t nsegs, capsegs;
    mv_disc *disc;
} vagent;

struct mv_verbs {
    mv_coll *coll;
    char token[MV_RDMA_TOKEN_MAX + 1];
    uint16_t rdma_port;
    char src_ip[64];
    vagent *agents;
    size_t n;
};

static void vseg_free(vseg *s)
{
    free(s->id);
    for (size_t i = 0; i < s->nlabels; i++) {
        free((char *)s->labels[i].key);
        free((char *)s->labels[i].value);
    }
    free(s->labels);
    for (size_t i = 0; i < s->npod_labels; i++) {
        free((char *)s->pod_labels[i].key);
        free((char *)s->pod_labels[i].value);
    }
    free(s->pod_labels);
    memset(s, 0, sizeof *s);
}

static vseg *vseg_find(vagent *a, const char *id)
{
    for (size_t i = 0; i < a->nsegs; i++)
        if (strcmp(a->segs[i].id, id) == 0)
            return &a->segs[i];
    return NULL;
}

/* Removes a segment from this agent's list and from the table (a->mu held). */
static void vseg_drop(vagent *a, vseg *s)
{
    if (s->in_table)
        mv_coll_remove(a->set->coll, s->id);
    vseg_free(s);
    *s = a->segs[--a->nsegs];
}

/* Opens the RDMA connection if there is none. Called with a->mu held; releases
 * it while rdma_cm resolves and connects (seconds when the agent is unreachable),
 * so scrapes and catalog events are not held up: callers must look their segment
 * up again afterwards. Returns 0, -EAGAIN (another thread is connecting) or the
 * error of the attempt. */
static int ensure_conn(vagent *a)
{
    if (a->conn)
        return 0;
    if (a->connecting)
        return -EAGAIN;
    a->connecting = 1;
    a->connect_attempts++;
    pthread_mutex_unlock(&a->mu);
    mv_rdmaread_opts o;
    mv_rdmaread_opts_default(&o);
    o.src_ip = a->set->src_ip[0] ? a->set->src_ip : NULL;
    char err[MV_ERR_MAX];
    mv_rdmaread_conn *conn = NULL;
    int rc = mv_rdmaread_open(a->ip, a->set->rdma_port, a->set->token, &o, &conn, err, sizeof err);
    if (rc == 0) {
        mv_rdma_dev_info di;
        mv_rdmaread_info(conn, &di);
        MV_INFO("rdma.connected", "agent=%s rdma=%s:%u device=%s gid_index=%d", mv_log_q(a->target),
                a->ip, (unsigned)a->set->rdma_port, mv_log_q(di.device), di.gid_index);
    }
    pthread_mutex_lock(&a->mu);
    a->connecting = 0;
    a->conn = conn;
    return rc;
}

/* Adds a known segment to the table through the connection (a->mu held; may be
 * released and taken again while connecting, see ensure_conn). */
static void vseg_add_to_table(vagent *a, vseg *s)
{
    if (s->in_table)
        return;
    if (!a->conn) {
        char *id = strdup(s->id);
        int rc = id ? ensure_conn(a) : -ENOMEM;
        s = rc == 0 ? vseg_find(a, id) : NULL; /* the list may have changed meanwhile */
        free(id);
        if (!s || s->in_table)
            return;
    }
    void *src;
    int rc = mv_rdmaread_source_create(a->conn, s->addr, s->rkey, s->len, &src);
    if (rc < 0) {
        MV_WARN("segment.add_failed", "id=%s error=%s", mv_log_q(s->id), mv_log_q(strerror(-rc)));
        return;
    }
    rc = mv_coll_add(a->set->coll, s->id, s->len, s->labels, s->nlabels,
                     mv_rdmaread_transport(a->conn), src);
    if (rc == 0 && mv_coll_set_pod_labels(a->set->coll, s->id, s->pod_labels, s->npod_labels) < 0)
        MV_WARN("segment.pod_labels_failed", "id=%s error=%s effect=%s", mv_log_q(s->id),
                mv_log_q("out of memory"),
                mv_log_q("label selectors do not see this segment's pod labels"));
    if (rc == 0 || rc == -EEXIST) {
        s->in_table = rc == 0;
        s->src = rc == 0 ? src : NULL;
        if (rc == 0)
            MV_DEBUG("segment.rdma_added", "id=%s agent=%s rkey=0x%x bytes=%llu", mv_log_q(s->id),
                     mv_log_q(a->target), s->rkey, (unsigned long long)s->len);
    } else {
        MV_WARN("segment.add_failed", "id=%s error=%s", mv_log_q(s->id), mv_log_q(strerror(-rc)));
    }
}

static void on_added(void *arg, const mv_disc_segment *ds)
{
    vagent *a = arg;
    pthread_mutex_lock(&a->mu);
    vseg *s = vseg_find(a, ds->id);
    if (!ds->rdma_readable || ds->rdma_length == 0 || ds->rdma_length != ds->size) {
        if (s)
            vseg_drop(a, s);
        MV_WARN("segment.skipped", "id=%s agent=%s reason=%s", mv_log_q(ds->id),
                mv_log_q(a->target),
                mv_log_q(ds->rdma_readable ? "RDMA length does not match the segment size"
                                           : "the agent did not register it for RDMA"));
        goto unlock;
    }
    if (s && s->addr == ds->rdma_addr && s->rkey == ds->rdma_rkey && s->len == ds->rdma_length) {
        vseg_add_to_table(a, s); /* the same registration (a resync): keep reading */
        goto unlock;
    }
    if (s) /* re-registered (agent restart): the old rkey is dead */
        vseg_drop(a, s);
    if (a->nsegs == a->capsegs) {
        size_t cap = a->capsegs ? a->capsegs * 2 : 64;
        vseg *v = cap <= SEGMENTS_MAX ? realloc(a->segs, cap * sizeof *v) : NULL;
        if (!v) {
            MV_WARN("segment.add_failed", "id=%s error=%s", mv_log_q(ds->id),
                    mv_log_q("too many segments for this agent or out of memory"));
            goto unlock;
        }
        a->segs = v;
        a->capsegs = cap;
    }
    s = &a->segs[a->nsegs];
    memset(s, 0, sizeof *s);
    s->id = strdup(ds->id);
    s->labels = ds->nlabels ? calloc(ds->nlabels, sizeof *s->labels) : NULL;
    if (!s->id || (ds->nlabels && !s->labels))
        goto nomem;
    for (size_t i = 0; i < ds->nlabels; i++) {
        s->labels[i].key = strdup(ds->labels[i].key);
        s->labels[i].value = strdup(ds->labels[i].value);
        s->nlabels++;
        if (!s->labels[i].key || !s->labels[i].value)
            goto nomem;
    }
    s->pod_labels = ds->npod_labels ? calloc(ds->npod_labels, sizeof *s->pod_labels) : NULL;
    if (ds->npod_labels && !s->pod_labels)
        goto nomem;
    for (size_t i = 0; i < ds->npod_labels; i++) {
        s->pod_labels[i].key = strdup(ds->pod_labels[i].key);
        s->pod_labels[i].value = strdup(ds->pod_labels[i].value);
        s->npod_labels++;
        if (!s->pod_labels[i].key || !s->pod_labels[i].value)
            goto nomem;
    }
    s->addr = ds->rdma_addr;
    s->rkey = ds->rdma_rkey;
    s->len = ds->rdma_length;
    a->nsegs++;
    vseg_add_to_table(a, s);
    goto unlock;
nomem:
    vseg_free(s);
    MV_WARN("segment.add_failed", "id=%s error=%s", mv_log_q(ds->id), mv_log_q("out of memory"));
unlock:
    pthread_mutex_unlock(&a->mu);
}

static void on_removed(void *arg, const char *id)
{
    vagent *a = arg;
    pthread_mutex_lock(&a->mu);
    vseg *s = vseg_find(a, id);
    if (s) {
        MV_INFO("segment.released", "id=%s agent=%s", mv_log_q(id), mv_log_q(a->target));
        vseg_drop(a, s);
    }
    pthread_mutex_unlock(&a->mu);
}

/* After a (re)connect of the watch: forget this agent's segments not listed. */
static void on_synced(void *arg, const char *const *ids, size_t n)
{
    vagent *a = arg;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->nsegs;) {
        int keep = 0;
        for (size_t j = 0; j < n && !keep; j++)
            keep = strcmp(a->segs[i].id, ids[j]) == 0;
        if (keep)
            i++;
        else
            vseg_drop(a, &a->segs[i]);
    }
    pthread_mutex_unlock(&a->mu);
}

/* The table dropped a source on its own (its read said "gone"): forget that
 * it is in the table, so the next poll adds it again if the agent still lists
 * it (with whatever rkey the agent announced last). */
static void on_table_drop(void *arg, const char *id, void *src)
{
    mv_verbs *v = arg;
    for (size_t i = 0; i < v->n; i++) {
        vagent *a = &v->agents[i];
        pthread_mutex_lock(&a->mu);
        vseg *s = vseg_find(a, id);
        if (s && s->in_table && s->src == src) {
            s->in_table = 0;
            s->src = NULL;
            MV_INFO("segment.readd_pending", "id=%s agent=%s", mv_log_q(id), mv_log_q(a->target));
        }
        pthread_mutex_unlock(&a->mu);
    }
}

int mv_verbs_create(const mv_verbs_opts *o, mv_coll *coll, mv_verbs **out)
{
    *out = NULL;
    if (o->ntargets == 0 || o->ntargets > AGENTS_MAX) {
        MV_ERROR("collector.failed", "error=%s",
                 mv_log_q("--transport verbs needs 1 to 64 --agent IP:PORT"));
        return -1;
    }
    mv_verbs *v = calloc(1, sizeof *v);
    if (!v || !(v->agents = calloc(o->ntargets, sizeof *v->agents))) {
        free(v);
        return -1;
    }
    v->coll = coll;
    v->rdma_port = o->rdma_port;
    snprintf(v->token, sizeof v->token, "%s", o->token);
    if (o->src_ip)
        snprintf(v->src_ip, sizeof v->src_ip, "%s", o->src_ip);
    for (size_t i = 0; i < o->ntargets; i++) {
        vagent *a = &v->agents[i];
        const char *t = o->targets[i], *colon = strrchr(t, ':');
        size_t hl = colon ? (size_t)(colon - t) : 0;
        if (!colon || hl == 0 || hl >= sizeof a->ip || strlen(t) >= sizeof a->target ||
            strncmp(t, "unix:", 5) == 0) {
            MV_ERROR("collector.failed", "agent=%s error=%s", mv_log_q(t),
                     mv_log_q("--transport verbs wants --agent IP:PORT (the agent's --listen)"));
            goto fail;
        }
        a->set = v;
        snprintf(a->target, sizeof a->target, "%s", t);
        memcpy(a->ip, t, hl);
        a->ip[hl] = 0;
        if (a->ip[0] == '[' && hl > 2 && a->ip[hl - 1] == ']') { /* [v6]:port */
            memmove(a->ip, a->ip + 1, hl - 2);
            a->ip[hl - 2] = 0;
        }
        pthread_mutex_init(&a->mu, NULL);
        v->n++;
    }
    mv_coll_set_drop_hook(coll, on_table_drop, v); /* cleared by mv_coll_destroy's stop */
    for (size_t i = 0; i < v->n; i++) {
        vagent *a = &v->agents[i];
        mv_disc_callbacks cb = {
            .arg = a, .added = on_added, .removed = on_removed, .synced = on_synced};
        if (mv_disc_start_token(a->target, v->token, &cb, &a->disc) != 0) {
            MV_ERROR("collector.failed", "agent=%s error=%s", mv_log_q(a->target),
                     mv_log_q("cannot start the catalog watch"));
            goto fail;
        }
    }
    *out = v;
    return 0;
fail:
    mv_verbs_stop(v);
    mv_verbs_destroy(v);
    return -1;
}

void mv_verbs_stop(mv_verbs *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        mv_disc_destroy(v->agents[i].disc);
        v->agents[i].disc = NULL;
    }
}

void mv_verbs_destroy(mv_verbs *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        vagent *a = &v->agents[i];
        for (size_t j = 0; j < a->nsegs; j++)
            vseg_free(&a->segs[j]);
        free(a->segs);
        mv_rdmaread_close(a->conn);
        pthread_mutex_destroy(&a->mu);
    }
    free(v->agents);
    free(v);
}

void mv_verbs_poll(mv_verbs *v)
{
    for (size_t i = 0; i < v->n; i++) {
        vagent *a = &v->agents[i];
        pthread_mutex_lock(&a->mu);
        for (size_t j = 0; j < a->nsegs; j++)
            if (!a->segs[j].in_table) {
                vseg_add_to_table(a, &a->segs[j]);
                if (!a->conn)
                    break; /* one connection attempt per poll */
            }
        pthread_mutex_unlock(&a->mu);
    }
}

/* ---- Metrics ------------------------------------------------------------------------ */

typedef struct agent_row {
    const char *target;
    mv_rdmaread_stats st;
    int have;
    uint64_t attempts;
} agent_row;

static int counter(mv_expo *e, const char *name, const char *help, const agent_row *rows, size_t n,
                   size_t off)
{
    int rc = mv_expo_family(e, name, MV_EXPO_COUNTER, help, NULL);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        mv_expo_label l = {"agent", rows[i].target};
        uint64_t val = rows[i].have ? *(const uint64_t *)((const char *)&rows[i].st + off) : 0;
        rc = mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0, val, MV_EXPO_NO_TS);
    }
    return rc;
}

int mv_verbs_render(mv_verbs *v, mv_expo *e, const mv_coll_snap *snap)
{
    agent_row *rows = calloc(v->n ? v->n : 1, sizeof *rows);
    if (!rows)
        return -ENOMEM;
    for (size_t i = 0; i < v->n; i++) {
        vagent *a = &v->agents[i];
        rows[i].target = a->target;
        pthread_mutex_lock(&a->mu);
        if (a->conn) {
            mv_rdmaread_stats_get(a->conn, &rows[i].st);
            rows[i].have = 1;
        }
        rows[i].attempts = a->connect_attempts;
        pthread_mutex_unlock(&a->mu);
    }
    int rc = mv_expo_family(e, "microview_rdma_agent_connected", MV_EXPO_GAUGE,
                            "1 while the RDMA queue pair to the agent is usable", NULL);
    for (size_t i = 0; rc == 0 && i < v->n; i++) {
        mv_expo_label l = {"agent", rows[i].target};
        rc = mv_expo_sample_u64(e, NULL, &l, 1, NULL, 0, NULL, 0,
                                rows[i].have && rows[i].st.connected, MV_EXPO_NO_TS);
    }
#define C(name, field, help)                                                                       \
    if (rc == 0)                                                                                   \
    rc = counter(e, name, help, rows, v->n, offsetof(mv_rdmaread_stats, field))
    C("microview_rdma_reads_total", reads, "RDMA READs completed successfully");
    C("microview_rdma_read_bytes_total", bytes, "bytes carried by successful RDMA READs");
    C("microview_rdma_read_errors_total", errors, "RDMA READs that completed with an error");
    C("microview_rdma_revoked_reads_total", revoked,
      "RDMA READs refused with a remote access error (segment deregistered)");
    C("microview_rdma_reconnects_total", reconnects, "RDMA reconnects after a broken connection");
    C("microview_rdma_connect_failures_total", connect_failures, "failed RDMA reconnect attempts");
#undef C
    if (rc == 0)
        rc = mv_expo_family(e, "microview_rdma_tick_read_seconds", MV_EXPO_HISTOGRAM,
                            "time from the first READ posted to the last completion of a tick's "
                            "batch for this agent (one per tick worker's share of the tick)",
                            NULL);
    for (size_t i = 0; rc == 0 && i < v->n; i++) {
        mv_expo_label l = {"agent", rows[i].target};
        uint64_t cum = 0;
        for (unsigned b = 0; rc == 0 && b < MV_RDMA_LAT_BUCKETS; b++) {
            cum += rows[i].st.tick_latency_us[b];
            double le = b + 1 == MV_RDMA_LAT_BUCKETS ? INFINITY : ldexp(1.0, (int)b + 1) / 1e6;
            rc = mv_expo_sample_u64(e, "_bucket", &l, 1, NULL, 0, "le", le, cum, MV_EXPO_NO_TS);
        }
        if (rc == 0)
            rc = mv_expo_sample(e, "_sum", &l, 1, NULL, 0, NULL, 0,
                                rows[i].st.tick_latency_sum_us / 1e6, MV_EXPO_NO_TS);
        if (rc == 0)
            rc = mv_expo_sample_u64(e, "_count", &l, 1, NULL, 0, NULL, 0, rows[i].st.ticks,
                                    MV_EXPO_NO_TS);
    }
    /* Per segment: what the table counted for segments read over RDMA. Read latency
     * is per agent only: with selective signalling only the last READ of a batch
     * completes with a CQE, so one segment's own latency is not observable. */
    static const struct {
        const char *name, *help;
    } fams[] = {
        {"microview_rdma_segment_reads_total",
         "reads of this segment over RDMA (hot area and catalog)"},
        {"microview_rdma_segment_read_errors_total", "failed reads of this segment over RDMA"},
        {"microview_rdma_segment_read_bytes_total", "bytes of this segment delivered by RDMA READ"},
    };
    size_t nseg = snap ? mv_coll_snap_count(snap) : 0;
    const char **agent_of = calloc(nseg ? nseg : 1, sizeof *agent_of); /* NULL: not RDMA */
    if (!agent_of)
        rc = rc ? rc : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < nseg; i++) {
        const mv_coll_seg_view *sv = mv_coll_snap_seg(snap, i);
        if (!sv->transport || strcmp(sv->transport, "rdma") != 0)
            continue;
        agent_of[i] = "";
        for (size_t k = 0; k < v->n && !agent_of[i][0]; k++) {
            pthread_mutex_lock(&v->agents[k].mu);
            if (vseg_find(&v->agents[k], sv->id))
                agent_of[i] = v->agents[k].target;
            pthread_mutex_unlock(&v->agents[k].mu);
        }
    }
    for (size_t f = 0; f < sizeof fams / sizeof fams[0] && rc == 0; f++) {
        rc = mv_expo_family(e, fams[f].name, MV_EXPO_COUNTER, fams[f].help, NULL);
        for (size_t i = 0; rc == 0 && i < nseg; i++) {
            if (!agent_of[i])
                continue;
            const mv_coll_seg_view *sv = mv_coll_snap_seg(snap, i);
            mv_expo_label l[2] = {{"agent", agent_of[i]}, {"segment", sv->id}};
            uint64_t val = f == 0 ? sv->reads : f == 1 ? sv->read_errors : sv->read_bytes;
            rc = mv_expo_sample_u64(e, NULL, l, 2, NULL, 0, NULL, 0, val, MV_EXPO_NO_TS);
        }
    }
    free(agent_of);
    free(rows);
    return rc;
}
