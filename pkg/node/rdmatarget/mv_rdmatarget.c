/* mv_rdmatarget: rdma_cm listener and remote-read-only registrations (agent side). */
#include "mv_rdmatarget.h"

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

/* ---- Target (agent) side ------------------------------------------------------- */

/* One accepted (or being accepted) collector. Owned by the event thread. */
typedef struct peer {
    struct rdma_cm_id *id;
    int established;
    char addr[64];
    struct peer *next;
} peer;

struct mv_rdmatarget_mr {
    mv_rdmatarget *t;
    struct ibv_mr *mr;
    size_t pinned; /* page-rounded bytes counted against memlock */
    mv_rdmatarget_mr *prev, *next;
};

struct mv_rdmatarget {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen_id;
    struct ibv_pd *pd;
    struct ibv_cq *cq; /* shared by accepted QPs; they never post work */
    int wake_fd;
    pthread_t thread;
    int thread_started;

    uint8_t token[MV_RDMA_TOKEN_MAX];
    size_t token_len;
    mv_rdmatarget_opts opts;
    mv_rdma_dev_info info;
    char bind_ip[64];
    uint16_t port;

    peer *peers;     /* event thread only */
    uint32_t npeers; /* event thread only: accepted or being accepted */
    _Atomic uint32_t nestablished;

    pthread_mutex_t lock; /* guards mrs and pinned */
    mv_rdmatarget_mr *mrs;
    size_t pinned;
};

/* Compares a presented token with ours in time independent of where they differ. */
static int token_ok(const mv_rdmatarget *t, const uint8_t *tok, size_t len)
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
    MV_WARN("rdma.connect_rejected", "peer=%s reason=%s", mv_log_q(peer_addr), mv_log_q(reason));
    if (rdma_reject(id, msg, (uint8_t)(4 + n)))
        MV_WARN("rdma.reject_failed", "peer=%s err=%s", mv_log_q(peer_addr),
                mv_log_q(strerror(errno)));
    rdma_destroy_id(id);
}

/* Destroys a peer's QP and id and unlinks it. The peer's event must be acked. */
static void peer_drop(mv_rdmatarget *t, peer *p, const char *why)
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
    MV_INFO("rdma.collector_gone", "peer=%s why=%s", mv_log_q(p->addr), why);
    if (p->id->qp)
        rdma_destroy_qp(p->id);
    rdma_destroy_id(p->id);
    free(p);
}

/* Handles a connect request whose event was already acked. Takes `id`. */
static void on_connect_request(mv_rdmatarget *t, struct rdma_cm_id *id, const uint8_t *pdata,
                               size_t pdata_len, uint8_t wanted_depth)
{
    struct ibv_qp_init_attr qa;
    struct rdma_conn_param cp;
    char paddr[64];
    const uint8_t *tok = NULL;
    uint8_t accept_pd[MV_RDMA_WIRE_HDR];
    int n;
    peer *p;

    mv_rdma_addr_str(rdma_get_peer_addr(id), paddr, sizeof paddr);
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
        MV_ERROR("rdma.create_qp_failed", "peer=%s err=%s", mv_log_q(paddr),
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
        MV_ERROR("rdma.accept_failed", "peer=%s err=%s", mv_log_q(paddr),
                 mv_log_q(strerror(errno)));
        goto destroy_qp;
    }
    p->next = t->peers;
    t->peers = p;
    t->npeers++;
    MV_DEBUG("rdma.connect_accepted", "peer=%s responder_resources=%u", mv_log_q(paddr),
             (unsigned)cp.responder_resources);
    return;

destroy_qp:
    rdma_destroy_qp(id);
free_peer:
    free(p);
    rdma_destroy_id(id);
}

static void handle_event(mv_rdmatarget *t, struct rdma_cm_event *ev)
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
            MV_INFO("rdma.collector_connected", "peer=%s", mv_log_q(p->addr));
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
            MV_ERROR("rdma.device_removed", "device=%s msg=%s", mv_log_q(t->info.device),
                     mv_log_q("the RDMA device of the listener went away; restart the agent"));
        }
        break;
    case RDMA_CM_EVENT_ADDR_CHANGE:
        MV_WARN("rdma.addr_change", "ip=%s msg=%s", mv_log_q(t->bind_ip),
                mv_log_q("the address moved to another device; restart the agent"));
        break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        break;
    default:
        MV_DEBUG("rdma.cm_event", "event=%s status=%d", rdma_event_str(type), status);
        break;
    }
}

static void *event_thread(void *arg)
{
    mv_util_thread_name("mv-rdma-cm");
    mv_rdmatarget *t = arg;
    struct pollfd pf[2] = {{.fd = t->ch->fd, .events = POLLIN},
                           {.fd = t->wake_fd, .events = POLLIN}};

    for (;;) {
        struct rdma_cm_event *ev;
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            MV_ERROR("rdma.poll_failed", "err=%s", mv_log_q(strerror(errno)));
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

int mv_rdmatarget_register(mv_rdmatarget *t, void *addr, size_t len, mv_rdmatarget_mr **out,
                           uint32_t *rkey, char *err, size_t errlen)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t lo, hi;
    struct rlimit rl;
    mv_rdmatarget_mr *m;
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
    MV_ERROR("rdma.register_failed", "len=%zu err=%s", len, mv_log_q(err));
    free(m);
    return rc;
}

int mv_rdmatarget_deregister(mv_rdmatarget_mr *m)
{
    mv_rdmatarget *t;
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
        MV_ERROR("rdma.deregister_failed", "err=%s", mv_log_q(strerror(-rc)));
    }
    free(m);
    return rc;
}

int mv_rdmatarget_create(const char *bind_ip, uint16_t port, const char *token,
                         const mv_rdmatarget_opts *opts, mv_rdmatarget **out, char *err,
                         size_t errlen)
{
    struct sockaddr_storage ss;
    mv_rdmatarget *t;
    size_t tlen = token ? strlen(token) : 0;
    int rc;

    *out = NULL;
    if (tlen < 1 || tlen > MV_RDMA_TOKEN_MAX) {
        snprintf(err, errlen, "the token must be 1 to %d bytes", MV_RDMA_TOKEN_MAX);
        return -EINVAL;
    }
    rc = mv_rdma_parse_addr(bind_ip, port, &ss);
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
    if (mv_util_set_nonblock(t->ch->fd)) {
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
    mv_rdma_fill_dev_info(t->listen_id->verbs, t->listen_id->port_num, (struct sockaddr *)&ss,
                          &t->info);

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

    MV_INFO("rdma.target_listening",
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

void mv_rdmatarget_destroy(mv_rdmatarget *t)
{
    uint64_t one = 1;

    if (!t)
        return;
    if (t->thread_started) {
        if (write(t->wake_fd, &one, sizeof one) != sizeof one)
            MV_WARN("rdma.wake_failed", "err=%s", mv_log_q(strerror(errno)));
        pthread_join(t->thread, NULL);
    }
    while (t->peers) {
        peer *p = t->peers;
        rdma_disconnect(p->id);
        peer_drop(t, p, "agent stopping");
    }
    while (t->mrs) {
        MV_WARN("rdma.mr_leaked", "msg=%s", mv_log_q("deregistered at target destroy"));
        mv_rdmatarget_deregister(t->mrs);
    }
    close(t->wake_fd);
    ibv_destroy_cq(t->cq);
    ibv_dealloc_pd(t->pd);
    rdma_destroy_id(t->listen_id);
    rdma_destroy_event_channel(t->ch);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

uint16_t mv_rdmatarget_port(const mv_rdmatarget *t)
{
    return t->port;
}

void mv_rdmatarget_info(const mv_rdmatarget *t, mv_rdma_dev_info *out)
{
    *out = t->info;
}

uint32_t mv_rdmatarget_connections(const mv_rdmatarget *t)
{
    return atomic_load(&((mv_rdmatarget *)t)->nestablished);
}
