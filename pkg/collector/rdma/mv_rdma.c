/* mv_rdma: rdma_cm listener and remote-read-only registrations (agent), RDMA READ transport
 * (collector). */
#include "mv_rdma.h"

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

/* ---- Shared by both sides ------------------------------------------------------- */

#define MV_RDMA_WIRE_HDR 5 /* "MVR1" + one byte */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    return 0;
}

/* Fills `ss` from a numeric IPv4/IPv6 address and a port. Returns 0 or -EINVAL. */
static int parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof *ss);
    if (!ip)
        return -EINVAL;
    if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        return 0;
    }
    if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        return 0;
    }
    return -EINVAL;
}

static void addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs(s4->sin_port);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
    }
    snprintf(buf, len, "%s:%u", ip, port);
}

static const char *gid_type_str(uint32_t type)
{
    switch (type) {
    case IBV_GID_TYPE_IB:
        return "IB";
    case IBV_GID_TYPE_ROCE_V1:
        return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
        return "RoCE v2";
    default:
        return "unknown";
    }
}

/* Fills `o` with facts about (ctx, port) and finds the GID that rdma_cm uses
 * for the local address `sa` (an IPv4 address appears as ::ffff:a.b.c.d;
 * RoCE v2 is preferred when both types carry it). */
static void fill_dev_info(struct ibv_context *ctx, uint8_t port, const struct sockaddr *sa,
                          mv_rdma_dev_info *o)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    union ibv_gid want;
    int best = -1;
    uint32_t best_type = 0;

    memset(o, 0, sizeof *o);
    o->gid_index = -1;
    o->port_num = port;
    snprintf(o->device, sizeof o->device, "%s", ibv_get_device_name(ctx->device));
    if (ibv_query_device(ctx, &da) == 0) {
        o->max_qp_rd_atom = (uint32_t)da.max_qp_rd_atom;
        o->max_qp_init_rd_atom = (uint32_t)da.max_qp_init_rd_atom;
    }
    if (ibv_query_port(ctx, port, &pa) != 0)
        return;
    snprintf(o->port_state, sizeof o->port_state, "%s", ibv_port_state_str(pa.state));
    snprintf(o->link_layer, sizeof o->link_layer, "%s",
             pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "Ethernet");

    memset(&want, 0, sizeof want);
    if (sa && sa->sa_family == AF_INET) {
        want.raw[10] = 0xff;
        want.raw[11] = 0xff;
        memcpy(&want.raw[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        memcpy(want.raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
    for (int i = 0; i < pa.gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0) != 0)
            continue;
        if (pa.link_layer == IBV_LINK_LAYER_INFINIBAND) {
            /* IPoIB: rdma_cm uses the port GID from the hardware address. */
            best = i;
            best_type = e.gid_type;
            break;
        }
        if (memcmp(e.gid.raw, want.raw, 16) != 0)
            continue;
        if (best < 0 || e.gid_type == IBV_GID_TYPE_ROCE_V2) {
            best = i;
            best_type = e.gid_type;
        }
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
            break;
    }
    if (best >= 0) {
        union ibv_gid g;
        o->gid_index = best;
        snprintf(o->gid_type, sizeof o->gid_type, "%s", gid_type_str(best_type));
        if (ibv_query_gid(ctx, port, best, &g) == 0)
            inet_ntop(AF_INET6, g.raw, o->gid, sizeof o->gid);
    }
}

/* ---- Target (agent) side ------------------------------------------------------- */

/* One accepted (or being accepted) collector. Owned by the event thread. */
typedef struct peer {
    struct rdma_cm_id *id;
    int established;
    char addr[64];
    struct peer *next;
} peer;

struct mv_rdma_mr {
    mv_rdma_target *t;
    struct ibv_mr *mr;
    size_t pinned; /* page-rounded bytes counted against memlock */
    mv_rdma_mr *prev, *next;
};

struct mv_rdma_target {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen_id;
    struct ibv_pd *pd;
    struct ibv_cq *cq; /* shared by accepted QPs; they never post work */
    int wake_fd;
    pthread_t thread;
    int thread_started;

    uint8_t token[MV_RDMA_TOKEN_MAX];
    size_t token_len;
    mv_rdma_target_opts opts;
    mv_rdma_dev_info info;
    char bind_ip[64];
    uint16_t port;

    peer *peers;     /* event thread only */
    uint32_t npeers; /* event thread only: accepted or being accepted */
    _Atomic uint32_t nestablished;

    pthread_mutex_t lock; /* guards mrs and pinned */
    mv_rdma_mr *mrs;
    size_t pinned;
};

/* Compares a presented token with ours in time independent of where they differ. */
static int token_ok(const mv_rdma_target *t, const uint8_t *tok, size_t len)
{
    uint8_t a[MV_RDMA_TOKEN_MAX] = {0}, b[MV_RDMA_TOKEN_MAX] = {0};
    volatile uint8_t diff = 0;
    size_t n = len < MV_RDMA_TOKEN_MAX ? len : MV_RDMA_TOKEN_MAX;

    memcpy(a, t->token, t->token_len);
    memcpy(b, tok, n);
    for (size_t i = 0; i < MV_RDMA_TOKEN_MAX; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    diff |= (uint8_t)(len != t->token_len);
    return diff == 0;
}

/* Parses the connect private data; returns the token length or -1. */
static int parse_request(const void *pd, size_t len, const uint8_t **tok)
{
    const uint8_t *p = pd;
    size_t n;

    if (!p || len < MV_RDMA_WIRE_HDR + 1 || memcmp(p, MV_RDMA_WIRE_MAGIC, 4) != 0)
        return -1;
    n = p[4];
    if (n < 1 || n > MV_RDMA_TOKEN_MAX || MV_RDMA_WIRE_HDR + n > len)
        return -1;
    *tok = p + MV_RDMA_WIRE_HDR;
    return (int)n;
}

static void reject(struct rdma_cm_id *id, const char *peer_addr, const char *reason)
{
    char msg[MV_RDMA_WIRE_HDR + 40];
    size_t n = strlen(reason);

    if (n > sizeof msg - 4)
        n = sizeof msg - 4;
    memcpy(msg, MV_RDMA_WIRE_MAGIC, 4);
    memcpy(msg + 4, reason, n);
    MV_WARN("rdma_connect_rejected", "peer=%s reason=%s", mv_log_q(peer_addr), mv_log_q(reason));
    if (rdma_reject(id, msg, (uint8_t)(4 + n)))
        MV_WARN("rdma_reject_failed", "peer=%s err=%s", mv_log_q(peer_addr),
                mv_log_q(strerror(errno)));
    rdma_destroy_id(id);
}

/* Destroys a peer's QP and id and unlinks it. The peer's event must be acked. */
static void peer_drop(mv_rdma_target *t, peer *p, const char *why)
{
    for (peer **pp = &t->peers; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    t->npeers--;
    if (p->established)
        atomic_fetch_sub(&t->nestablished, 1);
    MV_INFO("rdma_collector_gone", "peer=%s why=%s", mv_log_q(p->addr), why);
    if (p->id->qp)
        rdma_destroy_qp(p->id);
    rdma_destroy_id(p->id);
    free(p);
}

/* Handles a connect request whose event was already acked. Takes `id`. */
static void on_connect_request(mv_rdma_target *t, struct rdma_cm_id *id, const uint8_t *pdata,
                               size_t pdata_len, uint8_t wanted_depth)
{
    struct ibv_qp_init_attr qa;
    struct rdma_conn_param cp;
    char paddr[64];
    const uint8_t *tok = NULL;
    uint8_t accept_pd[MV_RDMA_WIRE_HDR];
    int n;
    peer *p;

    addr_str(rdma_get_peer_addr(id), paddr, sizeof paddr);
    n = parse_request(pdata, pdata_len, &tok);
    if (n < 0) {
        reject(id, paddr, "malformed request");
        return;
    }
    if (!token_ok(t, tok, (size_t)n)) {
        reject(id, paddr, "bad token");
        return;
    }
    if (t->npeers >= t->opts.max_connections) {
        reject(id, paddr, "too many collectors");
        return;
    }
    if (id->verbs != t->pd->context) {
        reject(id, paddr, "request arrived on another device");
        return;
    }

    p = calloc(1, sizeof *p);
    if (!p) {
        reject(id, paddr, "out of memory");
        return;
    }
    p->id = id;
    snprintf(p->addr, sizeof p->addr, "%s", paddr);
    id->context = p;

    memset(&qa, 0, sizeof qa);
    qa.send_cq = t->cq;
    qa.recv_cq = t->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 1;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, t->pd, &qa)) {
        MV_ERROR("rdma_create_qp_failed", "peer=%s err=%s", mv_log_q(paddr),
                 mv_log_q(strerror(errno)));
        goto free_peer;
    }

    /* Offer the device's READ responder resources, but no more than the
     * collector will use: the kernel gives the collector's QP the depth we
     * answer with, and its own device may allow fewer. */
    memset(&cp, 0, sizeof cp);
    cp.responder_resources = (uint8_t)(t->info.max_qp_rd_atom > 255 ? 255 : t->info.max_qp_rd_atom);
    if (wanted_depth && wanted_depth < cp.responder_resources)
        cp.responder_resources = wanted_depth;
    if (!cp.responder_resources)
        cp.responder_resources = 1;
    cp.initiator_depth = 0;
    cp.rnr_retry_count = 7;
    memcpy(accept_pd, MV_RDMA_WIRE_MAGIC, 4);
    accept_pd[4] = cp.responder_resources;
    cp.private_data = accept_pd;
    cp.private_data_len = sizeof accept_pd;
    if (rdma_accept(id, &cp)) {
        MV_ERROR("rdma_accept_failed", "peer=%s err=%s", mv_log_q(paddr),
                 mv_log_q(strerror(errno)));
        goto destroy_qp;
    }
    p->next = t->peers;
    t->peers = p;
    t->npeers++;
    MV_DEBUG("rdma_connect_accepted", "peer=%s responder_resources=%u", mv_log_q(paddr),
             (unsigned)cp.responder_resources);
    return;

destroy_qp:
    rdma_destroy_qp(id);
free_peer:
    free(p);
    rdma_destroy_id(id);
}

static void handle_event(mv_rdma_target *t, struct rdma_cm_event *ev)
{
    enum rdma_cm_event_type type = ev->event;
    struct rdma_cm_id *id = ev->id;
    /* The listener's id (and requests, which inherit its context) carry
     * NULL; only accepted ids point at their peer. */
    peer *p = id && id != t->listen_id ? id->context : NULL;
    uint8_t pdata[256];
    size_t plen = 0;
    uint8_t wanted = 0;
    int status = ev->status;

    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        plen = ev->param.conn.private_data_len;
        if (plen > sizeof pdata)
            plen = sizeof pdata;
        if (plen && ev->param.conn.private_data)
            memcpy(pdata, ev->param.conn.private_data, plen);
        else
            plen = 0;
        /* On the passive side, responder_resources is what the requester
         * wants to have outstanding (its initiator depth). */
        wanted = ev->param.conn.responder_resources;
    }
    /* The event must be acked before its id can be destroyed. */
    rdma_ack_cm_event(ev);

    switch (type) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
        on_connect_request(t, id, pdata, plen, wanted);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (p && !p->established) {
            p->established = 1;
            atomic_fetch_add(&t->nestablished, 1);
            MV_INFO("rdma_collector_connected", "peer=%s", mv_log_q(p->addr));
        }
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (p) {
            rdma_disconnect(id);
            peer_drop(t, p, "disconnected");
        }
        break;
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
        if (p)
            peer_drop(t, p, rdma_event_str(type));
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if (p) {
            peer_drop(t, p, "device removed");
        } else {
            MV_ERROR("rdma_device_removed", "device=%s msg=%s", mv_log_q(t->info.device),
                     mv_log_q("the RDMA device of the listener went away; restart the agent"));
        }
        break;
    case RDMA_CM_EVENT_ADDR_CHANGE:
        MV_WARN("rdma_addr_change", "ip=%s msg=%s", mv_log_q(t->bind_ip),
                mv_log_q("the address moved to another device; restart the agent"));
        break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        break;
    default:
        MV_DEBUG("rdma_cm_event", "event=%s status=%d", rdma_event_str(type), status);
        break;
    }
}

static void *event_thread(void *arg)
{
    mv_rdma_target *t = arg;
    struct pollfd pf[2] = {{.fd = t->ch->fd, .events = POLLIN},
                           {.fd = t->wake_fd, .events = POLLIN}};

    for (;;) {
        struct rdma_cm_event *ev;
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            MV_ERROR("rdma_poll_failed", "err=%s", mv_log_q(strerror(errno)));
            break;
        }
        if (pf[1].revents)
            break;
        while (rdma_get_cm_event(t->ch, &ev) == 0)
            handle_event(t, ev);
    }
    return NULL;
}

/* Returns nonzero if the process has CAP_IPC_LOCK in its effective set. */
static int have_ipc_lock(void)
{
    char line[256];
    unsigned long long caps = 0;
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    }
    fclose(f);
    return (caps >> 14) & 1; /* CAP_IPC_LOCK */
}

static const char memlock_hint[] =
    "ibv_reg_mr needs locked memory: raise memlock (ulimit -l / LimitMEMLOCK= / IPC_LOCK)";

int mv_rdma_register(mv_rdma_target *t, void *addr, size_t len, mv_rdma_mr **out, uint32_t *rkey,
                     char *err, size_t errlen)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t lo, hi;
    struct rlimit rl;
    mv_rdma_mr *m;
    int rc;

    *out = NULL;
    if (!t || !addr || !len) {
        snprintf(err, errlen, "register: empty region");
        return -EINVAL;
    }
    lo = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
    hi = ((uintptr_t)addr + len + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);

    m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    m->t = t;
    m->pinned = hi - lo;

    pthread_mutex_lock(&t->lock);
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        t->pinned + m->pinned > rl.rlim_cur && !have_ipc_lock()) {
        snprintf(err, errlen, "%s: %zu bytes needed, limit is %llu", memlock_hint,
                 t->pinned + m->pinned, (unsigned long long)rl.rlim_cur);
        rc = -ENOMEM;
        goto unlock;
    }
    /* Remote read only: no local write, no remote write, no atomics. */
    m->mr = ibv_reg_mr(t->pd, addr, len, IBV_ACCESS_REMOTE_READ);
    if (!m->mr) {
        rc = errno ? -errno : -EIO;
        if (rc == -ENOMEM || rc == -EPERM)
            snprintf(err, errlen, "%s (ibv_reg_mr: %s)", memlock_hint, strerror(-rc));
        else if (rc == -EFAULT)
            snprintf(err, errlen,
                     "ibv_reg_mr of %zu bytes: %s (kernels before 6.2 cannot pin a read-only "
                     "mapping: map the segment PROT_READ|PROT_WRITE; the region stays "
                     "remote-read-only)",
                     len, strerror(-rc));
        else
            snprintf(err, errlen, "ibv_reg_mr of %zu bytes on %s: %s", len, t->info.device,
                     strerror(-rc));
        goto unlock;
    }
    t->pinned += m->pinned;
    m->next = t->mrs;
    if (t->mrs)
        t->mrs->prev = m;
    t->mrs = m;
    pthread_mutex_unlock(&t->lock);
    *out = m;
    *rkey = m->mr->rkey;
    return 0;

unlock:
    pthread_mutex_unlock(&t->lock);
    MV_ERROR("rdma_register_failed", "len=%zu err=%s", len, mv_log_q(err));
    free(m);
    return rc;
}

int mv_rdma_deregister(mv_rdma_mr *m)
{
    mv_rdma_target *t;
    int rc = 0;

    if (!m)
        return 0;
    t = m->t;
    pthread_mutex_lock(&t->lock);
    if (m->prev)
        m->prev->next = m->next;
    else
        t->mrs = m->next;
    if (m->next)
        m->next->prev = m->prev;
    t->pinned -= m->pinned;
    pthread_mutex_unlock(&t->lock);
    rc = ibv_dereg_mr(m->mr);
    if (rc) {
        rc = -rc;
        MV_ERROR("rdma_deregister_failed", "err=%s", mv_log_q(strerror(-rc)));
    }
    free(m);
    return rc;
}

int mv_rdma_target_create(const char *bind_ip, uint16_t port, const char *token,
                          const mv_rdma_target_opts *opts, mv_rdma_target **out, char *err,
                          size_t errlen)
{
    struct sockaddr_storage ss;
    mv_rdma_target *t;
    size_t tlen = token ? strlen(token) : 0;
    int rc;

    *out = NULL;
    if (tlen < 1 || tlen > MV_RDMA_TOKEN_MAX) {
        snprintf(err, errlen, "the token must be 1 to %d bytes", MV_RDMA_TOKEN_MAX);
        return -EINVAL;
    }
    rc = parse_addr(bind_ip, port, &ss);
    if (rc) {
        snprintf(err, errlen, "bind address %s is not an IPv4 or IPv6 address",
                 bind_ip ? bind_ip : "(null)");
        return rc;
    }
    t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    memcpy(t->token, token, tlen);
    t->token_len = tlen;
    t->opts.backlog = 64;
    t->opts.max_connections = 64;
    if (opts && opts->backlog > 0)
        t->opts.backlog = opts->backlog;
    if (opts && opts->max_connections)
        t->opts.max_connections = opts->max_connections;
    snprintf(t->bind_ip, sizeof t->bind_ip, "%s", bind_ip);
    pthread_mutex_init(&t->lock, NULL);
    atomic_init(&t->nestablished, 0);

    t->ch = rdma_create_event_channel();
    if (!t->ch) {
        rc = -errno;
        snprintf(err, errlen,
                 "rdma_create_event_channel: %s (is rdma_ucm loaded and /dev/infiniband/rdma_cm "
                 "accessible?)",
                 strerror(errno));
        goto free_target;
    }
    if (set_nonblock(t->ch->fd)) {
        rc = -errno;
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        goto destroy_channel;
    }
    if (rdma_create_id(t->ch, &t->listen_id, NULL, RDMA_PS_TCP)) {
        rc = -errno;
        snprintf(err, errlen, "rdma_create_id: %s", strerror(errno));
        goto destroy_channel;
    }
    if (rdma_bind_addr(t->listen_id, (struct sockaddr *)&ss)) {
        rc = -errno;
        snprintf(err, errlen, "rdma_bind_addr %s:%u: %s", bind_ip, (unsigned)port, strerror(errno));
        goto destroy_id;
    }
    if (!t->listen_id->verbs) {
        rc = -ENODEV;
        snprintf(err, errlen,
                 "%s is not the address of an RDMA device's netdev (see `rdma link`; for "
                 "Soft-RoCE: rdma link add rxe0 type rxe netdev <if>)",
                 bind_ip);
        goto destroy_id;
    }
    if (rdma_listen(t->listen_id, t->opts.backlog)) {
        rc = -errno;
        snprintf(err, errlen, "rdma_listen %s:%u: %s", bind_ip, (unsigned)port, strerror(errno));
        goto destroy_id;
    }
    t->port = ntohs(rdma_get_src_port(t->listen_id));
    fill_dev_info(t->listen_id->verbs, t->listen_id->port_num, (struct sockaddr *)&ss, &t->info);

    t->pd = ibv_alloc_pd(t->listen_id->verbs);
    if (!t->pd) {
        rc = errno ? -errno : -ENOMEM;
        snprintf(err, errlen, "ibv_alloc_pd on %s: %s", t->info.device, strerror(-rc));
        goto destroy_id;
    }
    t->cq = ibv_create_cq(t->listen_id->verbs, 16, NULL, NULL, 0);
    if (!t->cq) {
        rc = errno ? -errno : -ENOMEM;
        snprintf(err, errlen, "ibv_create_cq on %s: %s", t->info.device, strerror(-rc));
        goto dealloc_pd;
    }
    t->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (t->wake_fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        goto destroy_cq;
    }
    rc = pthread_create(&t->thread, NULL, event_thread, t);
    if (rc) {
        rc = -rc;
        snprintf(err, errlen, "pthread_create: %s", strerror(-rc));
        goto close_wake;
    }
    t->thread_started = 1;

    MV_INFO("rdma_target_listening",
            "ip=%s port=%u device=%s port_num=%u port_state=%s link_layer=%s gid_index=%d "
            "gid=%s gid_type=%s max_qp_rd_atom=%u",
            mv_log_q(bind_ip), (unsigned)t->port, mv_log_q(t->info.device),
            (unsigned)t->info.port_num, t->info.port_state, t->info.link_layer, t->info.gid_index,
            t->info.gid, mv_log_q(t->info.gid_type), t->info.max_qp_rd_atom);
    *out = t;
    return 0;

close_wake:
    close(t->wake_fd);
destroy_cq:
    ibv_destroy_cq(t->cq);
dealloc_pd:
    ibv_dealloc_pd(t->pd);
destroy_id:
    rdma_destroy_id(t->listen_id);
destroy_channel:
    rdma_destroy_event_channel(t->ch);
free_target:
    pthread_mutex_destroy(&t->lock);
    free(t);
    /* The caller owns the error (it is in `err`) and decides how loudly to log it. */
    MV_DEBUG("rdma.target_failed", "ip=%s port=%u err=%s", mv_log_q(bind_ip), (unsigned)port,
             mv_log_q(err));
    return rc;
}

void mv_rdma_target_destroy(mv_rdma_target *t)
{
    uint64_t one = 1;

    if (!t)
        return;
    if (t->thread_started) {
        if (write(t->wake_fd, &one, sizeof one) != sizeof one)
            MV_WARN("rdma_wake_failed", "err=%s", mv_log_q(strerror(errno)));
        pthread_join(t->thread, NULL);
    }
    while (t->peers) {
        peer *p = t->peers;
        rdma_disconnect(p->id);
        peer_drop(t, p, "agent stopping");
    }
    while (t->mrs) {
        MV_WARN("rdma_mr_leaked", "msg=%s", mv_log_q("deregistered at target destroy"));
        mv_rdma_deregister(t->mrs);
    }
    close(t->wake_fd);
    ibv_destroy_cq(t->cq);
    ibv_dealloc_pd(t->pd);
    rdma_destroy_id(t->listen_id);
    rdma_destroy_event_channel(t->ch);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

uint16_t mv_rdma_target_port(const mv_rdma_target *t)
{
    return t->port;
}

void mv_rdma_target_info(const mv_rdma_target *t, mv_rdma_dev_info *out)
{
    *out = t->info;
}

uint32_t mv_rdma_target_connections(const mv_rdma_target *t)
{
    return atomic_load(&((mv_rdma_target *)t)->nestablished);
}

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

struct mv_rdma_conn {
    char agent[64];
    uint16_t port;
    struct sockaddr_storage dst, src;
    int have_src;
    uint8_t token[MV_RDMA_TOKEN_MAX];
    size_t token_len;
    mv_rdma_conn_opts opts;

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
    mv_rdma_conn_stats st;
    mv_rdma_dev_info info;
};

void mv_rdma_conn_opts_default(mv_rdma_conn_opts *o)
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
static int wait_cm(mv_rdma_conn *c, uint64_t deadline, struct rdma_cm_event **ev)
{
    for (;;) {
        struct pollfd pf = {.fd = c->ch->fd, .events = POLLIN};
        uint64_t now;
        if (rdma_get_cm_event(c->ch, ev) == 0)
            return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        now = now_ns();
        if (now >= deadline)
            return -ETIMEDOUT;
        poll(&pf, 1, (int)((deadline - now + 999999) / 1000000));
    }
}

/* Undoes whatever part of the session exists; safe to call repeatedly. */
static void session_teardown(mv_rdma_conn *c)
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
static int session_connect(mv_rdma_conn *c, char *err, size_t errlen)
{
    uint64_t deadline = now_ns() + (uint64_t)c->opts.connect_timeout_ms * 1000000u;
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
    fill_dev_info(c->id->verbs, c->id->port_num, rdma_get_local_addr(c->id), &c->info);
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
    if (!c->cc || set_nonblock(c->cc->fd)) {
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
    MV_INFO("rdma_connected",
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

static void mark_broken(mv_rdma_conn *c, const char *why)
{
    if (!c->connected)
        return;
    c->connected = 0;
    if (!c->backoff_ms)
        c->next_try_ns = now_ns(); /* the first reconnect is immediate */
    pthread_mutex_lock(&c->lock);
    c->st.connected = 0;
    pthread_mutex_unlock(&c->lock);
    MV_WARN("rdma_connection_broken", "agent=%s why=%s", mv_log_q(c->agent), mv_log_q(why));
}

/* Reconnects a broken connection when its backoff allows. Returns 0 if connected. */
static int ensure_connected(mv_rdma_conn *c)
{
    char err[256];
    uint64_t now = now_ns();
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
        c->next_try_ns = now_ns() + (uint64_t)c->backoff_ms * 1000000u;
        pthread_mutex_lock(&c->lock);
        c->st.connect_failures++;
        pthread_mutex_unlock(&c->lock);
        MV_WARN("rdma_reconnect_failed", "agent=%s retry_in_ms=%u err=%s", mv_log_q(c->agent),
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
static void drain_cm_events(mv_rdma_conn *c)
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
static void grow_staging(mv_rdma_conn *c, size_t need)
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
        MV_WARN("rdma_staging_grow_failed", "bytes=%zu err=%s", len, mv_log_q("out of memory"));
        return;
    }
    mr = ibv_reg_mr(c->pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
        MV_WARN("rdma_staging_grow_failed", "bytes=%zu err=%s", len, mv_log_q(strerror(errno)));
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
    MV_DEBUG("rdma_staging_grown", "bytes=%zu", len);
}

/* Waits for completions until `deadline`: returns how many are in c->wc, 0 on
 * timeout, or -errno. Spins briefly, then sleeps on the completion channel. */
static int poll_cq(mv_rdma_conn *c, uint64_t deadline)
{
    const int max = (int)(sizeof c->wc / sizeof c->wc[0]);
    uint64_t spin_end = now_ns() + SPIN_NS;
    int n;

    do {
        n = ibv_poll_cq(c->cq, max, c->wc);
        if (n)
            return n < 0 ? -EIO : n;
    } while (now_ns() < spin_end);

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
        now = now_ns();
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
static int run_round(mv_rdma_conn *c, mv_coll_read *reqs, size_t from, size_t to, uint64_t deadline)
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
            MV_WARN("rdma_read_error", "agent=%s status=%s request=%zu rkey=0x%x",
                    mv_log_q(c->agent), mv_log_q(why), err_first,
                    ((const rdma_src *)reqs[err_first].src)->rkey);
        mark_broken(c, why);
        return -EIO;
    }
    return 0;
}

static void rdma_read_many(void *ctx, mv_coll_read *reqs, size_t n)
{
    mv_rdma_conn *c = ctx;
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
        t0 = now_ns();
        deadline = t0 + (uint64_t)c->opts.read_timeout_ms * 1000000u;
        i = 0;
        while (i < n && c->connected) {
            size_t j, used = 0;
            while (i < n && reqs[i].status != REQ_PENDING)
                i++;
            if (i == n)
                break;
            if (align_up(reqs[i].len) > c->staging_len) {
                MV_WARN("rdma_read_too_large", "len=%u staging_bytes=%zu staging_max=%zu",
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
            uint64_t us = (now_ns() - t0) / 1000;
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

int mv_rdma_source_create(mv_rdma_conn *c, uint64_t remote_addr, uint32_t rkey, uint64_t len,
                          void **src)
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

const mv_coll_transport *mv_rdma_transport(mv_rdma_conn *c)
{
    return &c->tr;
}

int mv_rdma_conn_open(const char *agent_ip, uint16_t port, const char *token,
                      const mv_rdma_conn_opts *opts, mv_rdma_conn **out, char *err, size_t errlen)
{
    size_t tlen = token ? strlen(token) : 0;
    mv_rdma_conn_opts def;
    mv_rdma_conn *c;
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
    mv_rdma_conn_opts_default(&def);
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
    if (parse_addr(agent_ip, port, &c->dst)) {
        rc = -EINVAL;
        snprintf(err, errlen, "agent address %s is not an IPv4 or IPv6 address",
                 agent_ip ? agent_ip : "(null)");
        goto free_conn;
    }
    if (opts && opts->src_ip) {
        if (parse_addr(opts->src_ip, 0, &c->src)) {
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
    if (set_nonblock(c->ch->fd)) {
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
    MV_ERROR("rdma_connect_failed", "agent=%s:%u err=%s", mv_log_q(agent_ip), (unsigned)port,
             mv_log_q(err));
    free(c);
    return rc;
}

void mv_rdma_conn_close(mv_rdma_conn *c)
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

void mv_rdma_conn_stats_get(mv_rdma_conn *c, mv_rdma_conn_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->st;
    pthread_mutex_unlock(&c->lock);
}

void mv_rdma_conn_info(mv_rdma_conn *c, mv_rdma_dev_info *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->info;
    pthread_mutex_unlock(&c->lock);
}

/* ---- Shared token ------------------------------------------------------------ */

int mv_rdma_token_load(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    char buf[256];
    size_t n = 0;
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "cannot open token file %s: %s", path, strerror(e));
        return -e;
    }
    n = fread(buf, 1, sizeof buf - 1, f);
    int toolong = !feof(f) && fgetc(f) != EOF;
    fclose(f);
    buf[n] = 0;
    char *b = buf, *e = buf + n;
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\n' || *b == '\r'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        e--;
    size_t len = (size_t)(e - b);
    if (toolong || len < 1 || len > MV_RDMA_TOKEN_MAX || len >= outlen) {
        snprintf(err, errlen, "token in %s must be 1 to %d characters", path, MV_RDMA_TOKEN_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < len; i++)
        if (b[i] < 0x21 || b[i] > 0x7e) {
            snprintf(err, errlen, "token in %s must be printable ASCII without spaces", path);
            return -EINVAL;
        }
    memcpy(out, b, len);
    out[len] = 0;
    return 0;
}
