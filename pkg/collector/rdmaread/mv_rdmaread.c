/* mv_rdmaread_conn: RC connection to an agent and the RDMA READ transport (collector side). */
#include "mv_rdmaread.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "mv_log.h"
#include "mv_util.h"

/* ---- Initiator (collector) side -------------------------------------------------- */

#define STAGING_ALIGN 64
#define SPIN_NS       50000 /* busy-poll this long before sleeping on the CQ channel */
#define REQ_PENDING   (-EINPROGRESS)
#define WRID_BATCH    0xffffu /* low 16 bits of a signalled wr_id: WRs in its batch */

/* A region of the target, as given to mv_coll_add. */
typedef struct rdma_src {
    uint64_t addr;
    uint32_t rkey;
    uint64_t len;
} rdma_src;

struct mv_rdmaread_conn {
    char agent[64];
    uint16_t port;
    struct sockaddr_storage dst, src;
    int have_src;
    uint8_t token[MV_RDMA_TOKEN_MAX];
    size_t token_len;
    mv_rdmaread_opts opts;

    struct rdma_event_channel *ch; /* lives as long as the connection */

    /* The session: everything below is rebuilt by a reconnect. */
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_mr *mr; /* the staging buffer's registration */
    uint32_t depth;    /* READs per signalled batch (negotiated initiator depth) */
    uint32_t sq;       /* send queue entries */
    int connected;
    int ever_connected;

    unsigned char *staging;
    size_t staging_len;
    struct ibv_send_wr *wr; /* opts.sq_depth of each */
    struct ibv_sge *sge;
    struct ibv_wc wc[64];

    uint64_t next_try_ns;
    uint32_t backoff_ms;

    mv_coll_transport tr;
    pthread_mutex_t lock; /* guards st and info against the getters */
    mv_rdmaread_stats st;
    mv_rdma_dev_info info;
};

void mv_rdmaread_opts_default(mv_rdmaread_opts *o)
{
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = 3000;
    o->read_timeout_ms = 1000;
    o->sq_depth = 256;
    o->staging_initial = 1u << 20;
    o->staging_max = 64u << 20;
    o->backoff_min_ms = 10;
    o->backoff_max_ms = 5000;
}

/* Waits for the next cm event of the connection until `deadline`. */
static int wait_cm(mv_rdmaread_conn *c, uint64_t deadline, struct rdma_cm_event **ev)
{
    for (;;) {
        struct pollfd pf = {.fd = c->ch->fd, .events = POLLIN};
        uint64_t now;
        if (rdma_get_cm_event(c->ch, ev) == 0)
            return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        now = mv_util_mono_ns();
        if (now >= deadline)
            return -ETIMEDOUT;
        poll(&pf, 1, (int)((deadline - now + 999999) / 1000000));
    }
}

/* Undoes whatever part of the session exists; safe to call repeatedly. */
static void session_teardown(mv_rdmaread_conn *c)
{
    if (c->id && c->connected)
        rdma_disconnect(c->id);
    c->connected = 0;
    if (c->id && c->id->qp)
        rdma_destroy_qp(c->id);
    if (c->mr)
        ibv_dereg_mr(c->mr);
    c->mr = NULL;
    if (c->cq)
        ibv_destroy_cq(c->cq);
    c->cq = NULL;
    if (c->cc)
        ibv_destroy_comp_channel(c->cc);
    c->cc = NULL;
    if (c->pd)
        ibv_dealloc_pd(c->pd);
    c->pd = NULL;
    if (c->id)
        rdma_destroy_id(c->id);
    c->id = NULL;
}

/* Resolves, builds the PD/CQ/QP/staging MR and connects. On failure the
 * partial session is torn down and `err` says why. */
static int session_connect(mv_rdmaread_conn *c, char *err, size_t errlen)
{
    uint64_t deadline = mv_util_mono_ns() + (uint64_t)c->opts.connect_timeout_ms * 1000000u;
    int tmo = (int)c->opts.connect_timeout_ms;
    struct rdma_cm_event *ev;
    struct ibv_qp_init_attr qa;
    struct ibv_device_attr da;
    struct rdma_conn_param cp;
    struct ibv_qp_attr qattr;
    struct ibv_qp_init_attr qinit;
    uint8_t req[MV_RDMA_WIRE_HDR + MV_RDMA_TOKEN_MAX];
    enum rdma_cm_event_type type;
    uint8_t remote_depth = 0;
    int status, rc;

    if (rdma_create_id(c->ch, &c->id, c, RDMA_PS_TCP)) {
        rc = -errno;
        snprintf(err, errlen, "rdma_create_id: %s", strerror(errno));
        goto teardown;
    }
    if (rdma_resolve_addr(c->id, c->have_src ? (struct sockaddr *)&c->src : NULL,
                          (struct sockaddr *)&c->dst, tmo)) {
        rc = -errno;
        snprintf(err, errlen, "rdma_resolve_addr %s: %s", c->agent, strerror(errno));
        goto teardown;
    }
    rc = wait_cm(c, deadline, &ev);
    if (rc) {
        snprintf(err, errlen, "resolving %s: %s", c->agent, strerror(-rc));
        goto teardown;
    }
    type = ev->event;
    status = ev->status;
    rdma_ack_cm_event(ev);
    if (type != RDMA_CM_EVENT_ADDR_RESOLVED) {
        rc = status < 0 ? status : -ENODEV;
        snprintf(err, errlen,
                 "no RDMA device reaches %s (%s: %s); is an RDMA device on the route "
                 "(`rdma link`)?",
                 c->agent, rdma_event_str(type), strerror(-rc));
        goto teardown;
    }
    if (rdma_resolve_route(c->id, tmo)) {
        rc = -errno;
        snprintf(err, errlen, "rdma_resolve_route %s: %s", c->agent, strerror(errno));
        goto teardown;
    }
    rc = wait_cm(c, deadline, &ev);
    if (rc) {
        snprintf(err, errlen, "route to %s: %s", c->agent, strerror(-rc));
        goto teardown;
    }
    type = ev->event;
    status = ev->status;
    rdma_ack_cm_event(ev);
    if (type != RDMA_CM_EVENT_ROUTE_RESOLVED) {
        rc = status < 0 ? status : -EHOSTUNREACH;
        snprintf(err, errlen, "no route to %s (%s: %s)", c->agent, rdma_event_str(type),
                 strerror(-rc));
        goto teardown;
    }

    pthread_mutex_lock(&c->lock);
    mv_rdma_fill_dev_info(c->id->verbs, c->id->port_num, rdma_get_local_addr(c->id), &c->info);
    pthread_mutex_unlock(&c->lock);
    if (ibv_query_device(c->id->verbs, &da)) {
        rc = -EIO;
        snprintf(err, errlen, "ibv_query_device: %s", strerror(errno));
        goto teardown;
    }
    c->sq = c->opts.sq_depth;
    if (da.max_qp_wr > 0 && c->sq > (uint32_t)da.max_qp_wr)
        c->sq = (uint32_t)da.max_qp_wr;
    if (da.max_cqe > 0 && c->sq > (uint32_t)da.max_cqe)
        c->sq = (uint32_t)da.max_cqe;

    c->pd = ibv_alloc_pd(c->id->verbs);
    if (!c->pd) {
        rc = errno ? -errno : -ENOMEM;
        snprintf(err, errlen, "ibv_alloc_pd: %s", strerror(-rc));
        goto teardown;
    }
    c->cc = ibv_create_comp_channel(c->id->verbs);
    if (!c->cc || mv_util_set_nonblock(c->cc->fd)) {
        rc = errno ? -errno : -ENOMEM;
        snprintf(err, errlen, "ibv_create_comp_channel: %s", strerror(-rc));
        goto teardown;
    }
    c->cq = ibv_create_cq(c->id->verbs, (int)c->sq, NULL, c->cc, 0);
    if (!c->cq) {
        rc = errno ? -errno : -ENOMEM;
        snprintf(err, errlen, "ibv_create_cq(%u): %s", c->sq, strerror(-rc));
        goto teardown;
    }
    memset(&qa, 0, sizeof qa);
    qa.send_cq = c->cq;
    qa.recv_cq = c->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 0;
    qa.cap.max_send_wr = c->sq;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(c->id, c->pd, &qa)) {
        rc = -errno;
        snprintf(err, errlen, "rdma_create_qp: %s", strerror(errno));
        goto teardown;
    }
    c->mr = ibv_reg_mr(c->pd, c->staging, c->staging_len, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr) {
        rc = errno ? -errno : -ENOMEM;
        snprintf(err, errlen, "registering the %zu-byte staging buffer: %s%s", c->staging_len,
                 strerror(-rc),
                 rc == -ENOMEM || rc == -EPERM
                     ? " (ibv_reg_mr needs locked memory: raise memlock (ulimit -l / "
                       "LimitMEMLOCK= / IPC_LOCK))"
                     : "");
        goto teardown;
    }

    memcpy(req, MV_RDMA_WIRE_MAGIC, 4);
    req[4] = (uint8_t)c->token_len;
    memcpy(req + MV_RDMA_WIRE_HDR, c->token, c->token_len);
    memset(&cp, 0, sizeof cp);
    cp.private_data = req;
    cp.private_data_len = (uint8_t)(MV_RDMA_WIRE_HDR + c->token_len);
    cp.initiator_depth = (uint8_t)(da.max_qp_init_rd_atom > 255 ? 255 : da.max_qp_init_rd_atom);
    if (!cp.initiator_depth)
        cp.initiator_depth = 1;
    cp.responder_resources = 0; /* nobody reads from us */
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    if (rdma_connect(c->id, &cp)) {
        rc = -errno;
        snprintf(err, errlen, "rdma_connect %s: %s", c->agent, strerror(errno));
        goto teardown;
    }
    rc = wait_cm(c, deadline, &ev);
    if (rc) {
        snprintf(err, errlen, "connecting to %s: %s", c->agent, strerror(-rc));
        goto teardown;
    }
    type = ev->event;
    status = ev->status;
    if (type == RDMA_CM_EVENT_ESTABLISHED) {
        const uint8_t *p = ev->param.conn.private_data;
        if (p && ev->param.conn.private_data_len >= MV_RDMA_WIRE_HDR &&
            memcmp(p, MV_RDMA_WIRE_MAGIC, 4) == 0)
            remote_depth = p[4];
    } else if (type == RDMA_CM_EVENT_REJECTED) {
        const char *p = ev->param.conn.private_data;
        size_t n = ev->param.conn.private_data_len;
        char reason[64] = "";
        if (p && n > 4 && memcmp(p, MV_RDMA_WIRE_MAGIC, 4) == 0) {
            n -= 4;
            if (n >= sizeof reason)
                n = sizeof reason - 1;
            for (size_t i = 0; i < n && p[4 + i]; i++)
                reason[i] = (p[4 + i] >= 0x20 && p[4 + i] < 0x7f) ? p[4 + i] : '?';
        }
        rdma_ack_cm_event(ev);
        rc = -ECONNREFUSED;
        if (reason[0])
            snprintf(err, errlen, "the agent at %s rejected the connection: %s", c->agent, reason);
        else
            snprintf(err, errlen,
                     "%s rejected the connection (cm status %d: no agent listening on that "
                     "port?)",
                     c->agent, status);
        goto teardown;
    }
    rdma_ack_cm_event(ev);
    if (type != RDMA_CM_EVENT_ESTABLISHED) {
        rc = type == RDMA_CM_EVENT_UNREACHABLE ? -EHOSTUNREACH : -ECONNREFUSED;
        snprintf(err, errlen, "connecting to %s: %s (status %d)", c->agent, rdma_event_str(type),
                 status);
        goto teardown;
    }

    c->depth = cp.initiator_depth;
    if (remote_depth && remote_depth < c->depth)
        c->depth = remote_depth;
    if (ibv_query_qp(c->id->qp, &qattr, IBV_QP_MAX_QP_RD_ATOMIC, &qinit) == 0 &&
        qattr.max_rd_atomic > 0 && qattr.max_rd_atomic < c->depth)
        c->depth = qattr.max_rd_atomic;
    if (c->depth > c->sq)
        c->depth = c->sq;
    c->connected = 1;
    pthread_mutex_lock(&c->lock);
    c->st.connected = 1;
    c->st.initiator_depth = c->depth;
    c->st.staging_bytes = c->staging_len;
    pthread_mutex_unlock(&c->lock);
    MV_INFO("rdma.connected",
            "agent=%s device=%s port_num=%u gid_index=%d gid=%s gid_type=%s initiator_depth=%u "
            "sq_depth=%u staging_bytes=%zu",
            mv_log_q(c->agent), mv_log_q(c->info.device), (unsigned)c->info.port_num,
            c->info.gid_index, c->info.gid, mv_log_q(c->info.gid_type), c->depth, c->sq,
            c->staging_len);
    return 0;

teardown:
    session_teardown(c);
    return rc;
}

static void mark_broken(mv_rdmaread_conn *c, const char *why)
{
    if (!c->connected)
        return;
    c->connected = 0;
    if (!c->backoff_ms)
        c->next_try_ns = mv_util_mono_ns(); /* the first reconnect is immediate */
    pthread_mutex_lock(&c->lock);
    c->st.connected = 0;
    pthread_mutex_unlock(&c->lock);
    MV_WARN("rdma.connection_broken", "agent=%s why=%s", mv_log_q(c->agent), mv_log_q(why));
}

/* Reconnects a broken connection when its backoff allows. Returns 0 if connected. */
static int ensure_connected(mv_rdmaread_conn *c)
{
    char err[MV_ERR_MAX];
    uint64_t now = mv_util_mono_ns();
    int rc;

    if (c->connected)
        return 0;
    if (now < c->next_try_ns)
        return -EAGAIN;
    session_teardown(c);
    rc = session_connect(c, err, sizeof err);
    if (rc) {
        uint32_t b = c->backoff_ms ? c->backoff_ms * 2 : c->opts.backoff_min_ms;
        c->backoff_ms = b > c->opts.backoff_max_ms ? c->opts.backoff_max_ms : b;
        c->next_try_ns = mv_util_mono_ns() + (uint64_t)c->backoff_ms * 1000000u;
        pthread_mutex_lock(&c->lock);
        c->st.connect_failures++;
        pthread_mutex_unlock(&c->lock);
        MV_WARN("rdma.reconnect_failed", "agent=%s retry_in_ms=%u err=%s", mv_log_q(c->agent),
                c->backoff_ms, mv_log_q(err));
        return rc;
    }
    c->backoff_ms = 0;
    pthread_mutex_lock(&c->lock);
    if (c->ever_connected)
        c->st.reconnects++;
    pthread_mutex_unlock(&c->lock);
    c->ever_connected = 1;
    return 0;
}

/* Reads pending cm events (a disconnect from the agent breaks the connection). */
static void drain_cm_events(mv_rdmaread_conn *c)
{
    struct rdma_cm_event *ev;

    while (rdma_get_cm_event(c->ch, &ev) == 0) {
        enum rdma_cm_event_type type = ev->event;
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
            type == RDMA_CM_EVENT_ADDR_CHANGE)
            mark_broken(c, rdma_event_str(type));
    }
}

/* Grows the staging buffer (re-registering it) towards `need`, within the cap.
 * Keeps the old buffer if the new one cannot be had. */
static void grow_staging(mv_rdmaread_conn *c, size_t need)
{
    size_t len = c->staging_len;
    unsigned char *buf;
    struct ibv_mr *mr;

    if (need > c->opts.staging_max)
        need = c->opts.staging_max;
    if (need <= c->staging_len || !c->pd)
        return;
    while (len < need)
        len = len > c->opts.staging_max / 2 ? c->opts.staging_max : len * 2;
    if (posix_memalign((void **)&buf, 4096, len)) {
        MV_WARN("rdma.staging_grow_failed", "bytes=%zu err=%s", len, mv_log_q("out of memory"));
        return;
    }
    mr = ibv_reg_mr(c->pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
        MV_WARN("rdma.staging_grow_failed", "bytes=%zu err=%s", len, mv_log_q(strerror(errno)));
        free(buf);
        return;
    }
    ibv_dereg_mr(c->mr);
    free(c->staging);
    c->mr = mr;
    c->staging = buf;
    c->staging_len = len;
    pthread_mutex_lock(&c->lock);
    c->st.staging_bytes = len;
    pthread_mutex_unlock(&c->lock);
    MV_DEBUG("rdma.staging_grown", "bytes=%zu", len);
}

/* Waits for completions until `deadline`: returns how many are in c->wc, 0 on
 * timeout, or -errno. Spins briefly, then sleeps on the completion channel. */
static int poll_cq(mv_rdmaread_conn *c, uint64_t deadline)
{
    const int max = (int)(sizeof c->wc / sizeof c->wc[0]);
    uint64_t spin_end = mv_util_mono_ns() + SPIN_NS;
    int n;

    do {
        n = ibv_poll_cq(c->cq, max, c->wc);
        if (n)
            return n < 0 ? -EIO : n;
    } while (mv_util_mono_ns() < spin_end);

    for (;;) {
        struct pollfd pf = {.fd = c->cc->fd, .events = POLLIN};
        struct ibv_cq *ecq;
        void *ectx;
        uint64_t now;

        if (ibv_req_notify_cq(c->cq, 0))
            return -EIO;
        n = ibv_poll_cq(c->cq, max, c->wc);
        if (n)
            return n < 0 ? -EIO : n;
        now = mv_util_mono_ns();
        if (now >= deadline)
            return 0;
        if (poll(&pf, 1, (int)((deadline - now + 999999) / 1000000)) > 0 &&
            ibv_get_cq_event(c->cc, &ecq, &ectx) == 0)
            ibv_ack_cq_events(ecq, 1);
        n = ibv_poll_cq(c->cq, max, c->wc);
        if (n)
            return n < 0 ? -EIO : n;
    }
}

static size_t align_up(size_t v)
{
    return (v + STAGING_ALIGN - 1) & ~(size_t)(STAGING_ALIGN - 1);
}

/* Runs the pending requests of reqs[from, to) (they fit in the staging
 * buffer): posts linked batches of `depth` READs with only the last one
 * signalled, keeps up to the send queue's worth in flight, then copies the
 * completed ones out. Returns 0, or -EIO after which the connection is broken. */
static int run_round(mv_rdmaread_conn *c, mv_coll_read *reqs, size_t from, size_t to,
                     uint64_t deadline)
{
    size_t next = from, err_first = SIZE_MAX, done_upto = from; /* [from, done_upto) complete */
    size_t off = 0, ok_limit;
    uint32_t inflight = 0;
    int broken = 0;
    const char *why = NULL;

    while (!broken) {
        /* Post as many batches as the send queue takes. */
        while (next < to && inflight < c->sq) {
            struct ibv_send_wr *bad = NULL;
            uint32_t k = 0;
            size_t last = next;
            while (next < to && k < c->depth && inflight + k < c->sq) {
                mv_coll_read *r = &reqs[next];
                if (r->status == REQ_PENDING) {
                    const rdma_src *s = r->src;
                    struct ibv_send_wr *w = &c->wr[k];
                    struct ibv_sge *g = &c->sge[k];
                    g->addr = (uintptr_t)(c->staging + off);
                    g->length = r->len;
                    g->lkey = c->mr->lkey;
                    memset(w, 0, sizeof *w);
                    w->wr_id = (uint64_t)next << 16;
                    w->sg_list = g;
                    w->num_sge = 1;
                    w->opcode = IBV_WR_RDMA_READ;
                    w->wr.rdma.remote_addr = s->addr + r->off;
                    w->wr.rdma.rkey = s->rkey;
                    if (k)
                        c->wr[k - 1].next = w;
                    off += align_up(r->len);
                    last = next;
                    k++;
                }
                next++;
            }
            if (!k)
                break;
            c->wr[k - 1].send_flags = IBV_SEND_SIGNALED;
            c->wr[k - 1].wr_id = ((uint64_t)last << 16) | k;
            if (ibv_post_send(c->id->qp, c->wr, &bad)) {
                /* Nothing from `bad` on was posted; what was is in flight. */
                broken = 1;
                why = "ibv_post_send failed";
                break;
            }
            inflight += k;
        }
        if (broken || !inflight)
            break;

        int n = poll_cq(c, deadline);
        if (n <= 0) {
            broken = 1;
            why = n == 0 ? "read timeout" : "ibv_poll_cq failed";
            break;
        }
        for (int i = 0; i < n; i++) {
            const struct ibv_wc *wc = &c->wc[i];
            size_t idx = (size_t)(wc->wr_id >> 16);
            if (wc->status == IBV_WC_SUCCESS) {
                inflight -= (uint32_t)(wc->wr_id & WRID_BATCH);
                done_upto = idx + 1;
                continue;
            }
            /* Errors complete even unsignalled WRs; RC completes in order,
             * so everything posted before the first error succeeded. */
            if (idx < to && reqs[idx].status == REQ_PENDING)
                reqs[idx].status = wc->status == IBV_WC_REM_ACCESS_ERR ? -EACCES : -EIO;
            if (idx < err_first) {
                err_first = idx;
                why = ibv_wc_status_str(wc->status);
            }
            broken = 1;
        }
    }

    ok_limit = err_first != SIZE_MAX ? err_first : done_upto;
    if (!broken)
        ok_limit = to;
    off = 0;
    for (size_t q = from; q < to; q++) {
        mv_coll_read *r = &reqs[q];
        if (r->status != REQ_PENDING)
            continue;
        if (q < ok_limit) {
            memcpy(r->dst, c->staging + off, r->len);
            r->status = 0;
        }
        off += align_up(r->len);
    }
    if (broken) {
        if (err_first != SIZE_MAX)
            MV_WARN("rdma.read_error", "agent=%s status=%s request=%zu rkey=0x%x",
                    mv_log_q(c->agent), mv_log_q(why), err_first,
                    ((const rdma_src *)reqs[err_first].src)->rkey);
        mark_broken(c, why);
        return -EIO;
    }
    return 0;
}

static void rdma_read_many(void *ctx, mv_coll_read *reqs, size_t n)
{
    mv_rdmaread_conn *c = ctx;
    uint64_t t0, deadline, reads = 0, bytes = 0, errors = 0, revoked = 0;
    size_t need = 0, i;
    int posted = 0;

    for (i = 0; i < n; i++) {
        mv_coll_read *r = &reqs[i];
        const rdma_src *s = r->src;
        if (!s || !r->dst || !r->len || r->off > s->len || r->len > s->len - r->off) {
            r->status = -EINVAL;
            continue;
        }
        r->status = REQ_PENDING;
        need += align_up(r->len);
    }

    drain_cm_events(c);
    if (ensure_connected(c) == 0) {
        grow_staging(c, need);
        t0 = mv_util_mono_ns();
        deadline = t0 + (uint64_t)c->opts.read_timeout_ms * 1000000u;
        i = 0;
        while (i < n && c->connected) {
            size_t j, used = 0;
            while (i < n && reqs[i].status != REQ_PENDING)
                i++;
            if (i == n)
                break;
            if (align_up(reqs[i].len) > c->staging_len) {
                MV_WARN("rdma.read_too_large", "len=%u staging_bytes=%zu staging_max=%zu",
                        reqs[i].len, c->staging_len, c->opts.staging_max);
                reqs[i++].status = -EINVAL;
                continue;
            }
            for (j = i; j < n; j++) {
                if (reqs[j].status != REQ_PENDING)
                    continue;
                if (used + align_up(reqs[j].len) > c->staging_len)
                    break;
                used += align_up(reqs[j].len);
            }
            posted = 1;
            run_round(c, reqs, i, j, deadline);
            i = j;
        }
        if (posted) {
            uint64_t us = (mv_util_mono_ns() - t0) / 1000;
            unsigned b = 0;
            while (b + 1 < MV_RDMA_LAT_BUCKETS && (us >> (b + 1)))
                b++;
            pthread_mutex_lock(&c->lock);
            c->st.ticks++;
            c->st.tick_latency_us[b]++;
            c->st.last_tick_us = us;
            c->st.tick_latency_sum_us += us;
            pthread_mutex_unlock(&c->lock);
        }
    }

    for (i = 0; i < n; i++) {
        mv_coll_read *r = &reqs[i];
        if (r->status == REQ_PENDING)
            r->status = -EIO;
        if (r->status == 0) {
            reads++;
            bytes += r->len;
        } else {
            errors++;
            if (r->status == -EACCES)
                revoked++;
        }
    }
    pthread_mutex_lock(&c->lock);
    c->st.reads += reads;
    c->st.bytes += bytes;
    c->st.errors += errors;
    c->st.revoked += revoked;
    pthread_mutex_unlock(&c->lock);
}

static void rdma_src_close(void *ctx, void *src)
{
    (void)ctx;
    free(src);
}

int mv_rdmaread_source_create(mv_rdmaread_conn *c, uint64_t remote_addr, uint32_t rkey,
                              uint64_t len, void **src)
{
    rdma_src *s;

    *src = NULL;
    if (!c || !len || remote_addr + len < remote_addr)
        return -EINVAL;
    s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->addr = remote_addr;
    s->rkey = rkey;
    s->len = len;
    *src = s;
    return 0;
}

const mv_coll_transport *mv_rdmaread_transport(mv_rdmaread_conn *c)
{
    return &c->tr;
}

int mv_rdmaread_open(const char *agent_ip, uint16_t port, const char *token,
                     const mv_rdmaread_opts *opts, mv_rdmaread_conn **out, char *err, size_t errlen)
{
    size_t tlen = token ? strlen(token) : 0;
    mv_rdmaread_opts def;
    mv_rdmaread_conn *c;
    int rc;

    *out = NULL;
    if (tlen < 1 || tlen > MV_RDMA_TOKEN_MAX) {
        snprintf(err, errlen, "the token must be 1 to %d bytes", MV_RDMA_TOKEN_MAX);
        return -EINVAL;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    mv_rdmaread_opts_default(&def);
    c->opts = def;
    if (opts) {
        c->opts.src_ip = opts->src_ip;
#define TAKE(f)                                                                                    \
    if (opts->f)                                                                                   \
    c->opts.f = opts->f
        TAKE(connect_timeout_ms);
        TAKE(read_timeout_ms);
        TAKE(sq_depth);
        TAKE(staging_initial);
        TAKE(staging_max);
        TAKE(backoff_min_ms);
        TAKE(backoff_max_ms);
#undef TAKE
    }
    if (c->opts.sq_depth > WRID_BATCH)
        c->opts.sq_depth = WRID_BATCH;
    if (c->opts.staging_initial > c->opts.staging_max)
        c->opts.staging_initial = c->opts.staging_max;
    c->opts.src_ip = NULL; /* not kept: parsed below */
    if (mv_rdma_parse_addr(agent_ip, port, &c->dst)) {
        rc = -EINVAL;
        snprintf(err, errlen, "agent address %s is not an IPv4 or IPv6 address",
                 agent_ip ? agent_ip : "(null)");
        goto free_conn;
    }
    if (opts && opts->src_ip) {
        if (mv_rdma_parse_addr(opts->src_ip, 0, &c->src)) {
            rc = -EINVAL;
            snprintf(err, errlen, "source address %s is not an IPv4 or IPv6 address", opts->src_ip);
            goto free_conn;
        }
        c->have_src = 1;
    }
    snprintf(c->agent, sizeof c->agent, "%s:%u", agent_ip, (unsigned)port);
    c->port = port;
    memcpy(c->token, token, tlen);
    c->token_len = tlen;
    pthread_mutex_init(&c->lock, NULL);

    c->staging_len = c->opts.staging_initial;
    if (posix_memalign((void **)&c->staging, 4096, c->staging_len)) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory (staging buffer of %zu bytes)", c->staging_len);
        goto destroy_lock;
    }
    c->wr = calloc(c->opts.sq_depth, sizeof *c->wr);
    c->sge = calloc(c->opts.sq_depth, sizeof *c->sge);
    if (!c->wr || !c->sge) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto free_arrays;
    }
    c->ch = rdma_create_event_channel();
    if (!c->ch) {
        rc = -errno;
        snprintf(err, errlen,
                 "rdma_create_event_channel: %s (is rdma_ucm loaded and /dev/infiniband/rdma_cm "
                 "accessible?)",
                 strerror(errno));
        goto free_arrays;
    }
    if (mv_util_set_nonblock(c->ch->fd)) {
        rc = -errno;
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        goto destroy_channel;
    }
    rc = session_connect(c, err, errlen);
    if (rc)
        goto destroy_channel;
    c->ever_connected = 1;
    c->tr.name = "rdma";
    c->tr.ctx = c;
    c->tr.read_many = rdma_read_many;
    c->tr.src_close = rdma_src_close;
    *out = c;
    return 0;

destroy_channel:
    rdma_destroy_event_channel(c->ch);
free_arrays:
    free(c->wr);
    free(c->sge);
    free(c->staging);
destroy_lock:
    pthread_mutex_destroy(&c->lock);
free_conn:
    MV_ERROR("rdma.connect_failed", "agent=%s:%u err=%s", mv_log_q(agent_ip), (unsigned)port,
             mv_log_q(err));
    free(c);
    return rc;
}

void mv_rdmaread_close(mv_rdmaread_conn *c)
{
    if (!c)
        return;
    session_teardown(c);
    rdma_destroy_event_channel(c->ch);
    free(c->wr);
    free(c->sge);
    free(c->staging);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void mv_rdmaread_stats_get(mv_rdmaread_conn *c, mv_rdmaread_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->st;
    pthread_mutex_unlock(&c->lock);
}

void mv_rdmaread_info(mv_rdmaread_conn *c, mv_rdma_dev_info *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->info;
    pthread_mutex_unlock(&c->lock);
}
