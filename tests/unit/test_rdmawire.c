/* Tests for the RDMA wiring that needs no RDMA device: the shared token file, the
 * control-plane token over TCP, and the Agent service's rdma fields and --require-rdma. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mv_agentc.h"
#include "mv_agentsvc.h"
#include "mv_discovery.h"
#include "mv_log.h"
#include "mv_rdma.h"
#include "mv_rpc.h"
#include "mv_segstore.h"
#include "mv_test.h"

#define TOKEN "tok-5d1c"

static char tmpdir[] = "/tmp/mv-rdmawire-XXXXXX";
static int seq;

/* ---- Token file ---------------------------------------------------------------- */

static int load(const char *content, char *out, size_t outlen)
{
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/token%d", tmpdir, seq++);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(content, f);
    fclose(f);
    return mv_rdmatoken_load(path, out, outlen, err, sizeof err);
}

static void test_token_file(void)
{
    char tok[MV_RDMA_TOKEN_MAX + 1], err[256];
    CU_ASSERT_EQUAL(load("  abc-123\n", tok, sizeof tok), 0);
    CU_ASSERT_STRING_EQUAL(tok, "abc-123");
    CU_ASSERT_EQUAL(load("\n\n", tok, sizeof tok), -EINVAL);
    CU_ASSERT_EQUAL(load("two words", tok, sizeof tok), -EINVAL);
    CU_ASSERT_EQUAL(load("tab\tinside", tok, sizeof tok), -EINVAL);
    char longtok[MV_RDMA_TOKEN_MAX + 2];
    memset(longtok, 'x', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = 0;
    CU_ASSERT_EQUAL(load(longtok, tok, sizeof tok), -EINVAL);
    longtok[MV_RDMA_TOKEN_MAX] = 0; /* exactly the maximum */
    CU_ASSERT_EQUAL(load(longtok, tok, sizeof tok), 0);
    CU_ASSERT_EQUAL(strlen(tok), MV_RDMA_TOKEN_MAX);
    CU_ASSERT_EQUAL(mv_rdmatoken_load("/nonexistent/token", tok, sizeof tok, err, sizeof err),
                    -ENOENT);
    CU_ASSERT(strstr(err, "/nonexistent/token") != NULL);
    CU_ASSERT(strstr(err, "cannot read token file") != NULL);
    CU_ASSERT(strstr(err, strerror(ENOENT)) != NULL);
    /* A path that opens but cannot be read (a directory, e.g. a Secret volume instead of its
     * key file) says why, not that the token has a bad length. */
    err[0] = 0;
    CU_ASSERT_EQUAL(mv_rdmatoken_load(tmpdir, tok, sizeof tok, err, sizeof err), -EISDIR);
    CU_ASSERT(strstr(err, "cannot read token file") != NULL);
    CU_ASSERT(strstr(err, strerror(EISDIR)) != NULL);
    CU_ASSERT(strstr(err, "characters") == NULL);
    /* An empty file says it is empty. */
    err[0] = 0;
    char path[300];
    snprintf(path, sizeof path, "%s/token-empty", tmpdir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fclose(f);
    CU_ASSERT_EQUAL(mv_rdmatoken_load(path, tok, sizeof tok, err, sizeof err), -EINVAL);
    CU_ASSERT(strstr(err, "is empty") != NULL);
}

/* ---- An agent in-process: store + service on a unix socket and on TCP ------------ */

typedef struct fake_rdma {
    int readable; /* what the hook answers */
    int calls, register_calls;
} fake_rdma;

static int fake_lookup(void *arg, const mv_segstore_seg *seg, int may_register,
                       mv_agentsvc_rdma_info *out)
{
    fake_rdma *f = arg;
    __atomic_add_fetch(&f->calls, 1, __ATOMIC_SEQ_CST);
    if (may_register)
        __atomic_add_fetch(&f->register_calls, 1, __ATOMIC_SEQ_CST);
    memset(out, 0, sizeof *out);
    if (!f->readable) {
        snprintf(out->reason, sizeof out->reason, "fake device says no");
        return 0;
    }
    out->addr = 0x7f0000001000ull;
    out->rkey = 0x1234;
    out->length = seg->size;
    out->layout_version = 1;
    out->readable = 1;
    return 0;
}

typedef struct agent {
    char dir[300], unix_target[400], tcp_target[64];
    mv_segstore *store;
    mv_rpc_server *srv;
    mv_agentsvc *svc;
    fake_rdma fake;
} agent;

static void agent_start(agent *a, int with_rdma, int require)
{
    memset(a, 0, sizeof *a);
    snprintf(a->dir, sizeof a->dir, "%s/agent%d", tmpdir, seq++);
    snprintf(a->unix_target, sizeof a->unix_target, "unix:%s/agent.sock", a->dir);
    mv_segstore_opts o = {.dir = a->dir, .max_size = 1u << 20, .reap_interval_ms = -1};
    CU_ASSERT_FATAL(mv_segstore_open(&o, &a->store) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &a->srv) == 0);
    CU_ASSERT_FATAL(mv_agentsvc_register(a->srv, a->store, &a->svc) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_set_token(a->srv, TOKEN) == 0);
    a->fake.readable = 1;
    if (with_rdma)
        mv_agentsvc_set_rdma(a->svc, fake_lookup, &a->fake, require);
    CU_ASSERT_FATAL(mv_rpc_server_listen(a->srv, a->unix_target) == 0);
    int port = mv_rpc_server_listen(a->srv, "127.0.0.1:0");
    CU_ASSERT_FATAL(port > 0);
    snprintf(a->tcp_target, sizeof a->tcp_target, "127.0.0.1:%d", port);
    CU_ASSERT_FATAL(mv_rpc_server_start(a->srv) == 0);
}

static void agent_stop(agent *a)
{
    mv_rpc_server_destroy(a->srv);
    mv_agentsvc_destroy(a->svc);
    mv_segstore_close(a->store);
}

/* Lists over `target` presenting `token` (NULL = none); returns the call's result. */
static int list_with(const char *target, const char *token, size_t *n)
{
    mv_agentc *c;
    mv_agentc_segment *v;
    uint64_t rev;
    CU_ASSERT_FATAL(mv_agentc_open(target, &c) == 0);
    if (token)
        CU_ASSERT_FATAL(mv_agentc_set_token(c, token) == 0);
    int rc = mv_agentc_list(c, &v, n, &rev);
    if (rc == 0)
        mv_agentc_segments_free(v, *n);
    else
        CU_ASSERT(strlen(mv_agentc_error(c)) > 0);
    mv_agentc_close(c);
    return rc;
}

static void test_tcp_needs_token(void)
{
    agent a;
    size_t n;
    agent_start(&a, 0, 0);
    CU_ASSERT_EQUAL(list_with(a.tcp_target, NULL, &n), -EACCES);
    CU_ASSERT_EQUAL(list_with(a.tcp_target, "tok-5d1d", &n), -EACCES);
    CU_ASSERT_EQUAL(list_with(a.tcp_target, "tok-5d1", &n), -EACCES);
    CU_ASSERT_EQUAL(list_with(a.tcp_target, TOKEN, &n), 0);
    CU_ASSERT_EQUAL(list_with(a.unix_target, NULL, &n), 0); /* unix socket: trusted */
    agent_stop(&a);
}

static void test_rdma_fields(void)
{
    agent a;
    mv_agentc *c;
    mv_agentc_segment s, *v;
    size_t n;
    uint64_t rev;
    agent_start(&a, 1, 0);
    CU_ASSERT_FATAL(mv_agentc_open(a.tcp_target, &c) == 0);
    CU_ASSERT_FATAL(mv_agentc_set_token(c, TOKEN) == 0);
    CU_ASSERT_FATAL(mv_agentc_create(c, 8192, 0, NULL, 0, &s) == 0);
    CU_ASSERT(s.rdma_readable);
    CU_ASSERT_EQUAL(s.rdma_addr, 0x7f0000001000ull);
    CU_ASSERT_EQUAL(s.rdma_rkey, 0x1234u);
    CU_ASSERT_EQUAL(s.rdma_length, 8192u);
    CU_ASSERT_EQUAL(s.layout_version, 1u);
    mv_agentc_segment_clear(&s);

    a.fake.readable = 0; /* not required: still created, reported not readable */
    CU_ASSERT_FATAL(mv_agentc_create(c, 4096, 0, NULL, 0, &s) == 0);
    CU_ASSERT_FALSE(s.rdma_readable);
    CU_ASSERT_EQUAL(s.rdma_rkey, 0u);
    mv_agentc_segment_clear(&s);
    CU_ASSERT_FATAL(mv_agentc_list(c, &v, &n, &rev) == 0);
    CU_ASSERT_EQUAL(n, 2u);
    mv_agentc_segments_free(v, n);
    mv_agentc_close(c);
    agent_stop(&a);
}

static void test_require_rdma(void)
{
    agent a;
    mv_agentc *c;
    mv_agentc_segment s, *v;
    size_t n;
    uint64_t rev;
    agent_start(&a, 1, 1);
    CU_ASSERT_FATAL(mv_agentc_open(a.unix_target, &c) == 0);
    a.fake.readable = 0;
    CU_ASSERT_EQUAL(mv_agentc_create(c, 4096, 0, NULL, 0, &s), -EIO);
    CU_ASSERT(strstr(mv_agentc_error(c), "fake device says no") != NULL);
    CU_ASSERT(strstr(mv_agentc_error(c), "FAILED_PRECONDITION") != NULL);
    CU_ASSERT_FATAL(mv_agentc_list(c, &v, &n, &rev) == 0);
    CU_ASSERT_EQUAL(n, 0u); /* the refused segment was released */
    mv_agentc_segments_free(v, n);
    a.fake.readable = 1;
    CU_ASSERT_EQUAL(mv_agentc_create(c, 4096, 0, NULL, 0, &s), 0);
    CU_ASSERT(s.rdma_readable);
    mv_agentc_segment_clear(&s);
    mv_agentc_close(c);
    agent_stop(&a);
}

/* ---- Discovery over TCP with the token carries the rdma fields ------------------- */

typedef struct seen {
    pthread_mutex_t mu;
    int added, removed, synced, readable, updated;
    uint32_t rkey;
    char upd_labels[256]; /* the last update's labels, "k=v," each */
} seen;

static void on_updated(void *arg, const mv_disc_segment *s)
{
    seen *x = arg;
    pthread_mutex_lock(&x->mu);
    x->updated++;
    x->upd_labels[0] = '\0';
    for (size_t i = 0; i < s->nlabels; i++) {
        size_t at = strlen(x->upd_labels);
        snprintf(x->upd_labels + at, sizeof x->upd_labels - at, "%s=%s,", s->labels[i].key,
                 s->labels[i].value);
    }
    pthread_mutex_unlock(&x->mu);
}

static void on_removed(void *arg, const char *id)
{
    seen *x = arg;
    (void)id;
    pthread_mutex_lock(&x->mu);
    x->removed++;
    pthread_mutex_unlock(&x->mu);
}

static void on_added(void *arg, const mv_disc_segment *s)
{
    seen *x = arg;
    pthread_mutex_lock(&x->mu);
    x->added++;
    x->readable = s->rdma_readable;
    x->rkey = s->rdma_rkey;
    pthread_mutex_unlock(&x->mu);
}

static void on_synced(void *arg, const char *const *ids, size_t n)
{
    seen *x = arg;
    (void)ids;
    (void)n;
    pthread_mutex_lock(&x->mu);
    x->synced++;
    pthread_mutex_unlock(&x->mu);
}

/* Waits until *counter (a field of x, read under x->mu) reaches at_least. */
static int wait_count(seen *x, const int *counter, int at_least, int ms)
{
    for (int i = 0; i < ms / 10; i++) {
        pthread_mutex_lock(&x->mu);
        int done = *counter >= at_least;
        pthread_mutex_unlock(&x->mu);
        if (done)
            return 1;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void test_discovery_token(void)
{
    agent a;
    mv_agentc *c;
    mv_agentc_segment s;
    agent_start(&a, 1, 0);
    CU_ASSERT_FATAL(mv_agentc_open(a.unix_target, &c) == 0);
    CU_ASSERT_FATAL(mv_agentc_create(c, 4096, 0, NULL, 0, &s) == 0);
    mv_agentc_segment_clear(&s);
    mv_agentc_close(c);

    seen x = {.mu = PTHREAD_MUTEX_INITIALIZER};
    mv_disc_callbacks cb = {.arg = &x, .added = on_added, .synced = on_synced};
    mv_disc *d;
    CU_ASSERT_FATAL(mv_disc_start_token(a.tcp_target, TOKEN, &cb, &d) == 0);
    CU_ASSERT(wait_count(&x, &x.synced, 1, 5000));
    mv_disc_destroy(d);
    CU_ASSERT_EQUAL(x.added, 1);
    CU_ASSERT(x.readable);
    CU_ASSERT_EQUAL(x.rkey, 0x1234u);
    CU_ASSERT(a.fake.register_calls >= 1); /* the watch may register on ADDED */
    agent_stop(&a);
}

/* An exporter that comes up while collectors already watch (the agent's RDMA target
 * retried in the background): after mv_agentsvc_set_rdma + mv_segstore_announce_all
 * every open watch gets the segment again (REMOVED, ADDED) with the rdma fields. */
static void test_rdma_attached_while_serving(void)
{
    agent a;
    mv_agentc *c;
    mv_agentc_segment s;
    agent_start(&a, 0, 0);
    CU_ASSERT_FATAL(mv_agentc_open(a.unix_target, &c) == 0);
    CU_ASSERT_FATAL(mv_agentc_create(c, 4096, 0, NULL, 0, &s) == 0);
    CU_ASSERT_FALSE(s.rdma_readable);
    mv_agentc_segment_clear(&s);

    seen x = {.mu = PTHREAD_MUTEX_INITIALIZER};
    mv_disc_callbacks cb = {
        .arg = &x, .added = on_added, .removed = on_removed, .synced = on_synced};
    mv_disc *d;
    CU_ASSERT_FATAL(mv_disc_start_token(a.tcp_target, TOKEN, &cb, &d) == 0);
    CU_ASSERT(wait_count(&x, &x.synced, 1, 5000));
    pthread_mutex_lock(&x.mu);
    CU_ASSERT_EQUAL(x.added, 1);
    CU_ASSERT_FALSE(x.readable);
    pthread_mutex_unlock(&x.mu);

    mv_agentsvc_set_rdma(a.svc, fake_lookup, &a.fake, 0);
    CU_ASSERT_EQUAL(mv_segstore_announce_all(a.store), 1u);
    CU_ASSERT(wait_count(&x, &x.added, 2, 5000));
    pthread_mutex_lock(&x.mu);
    CU_ASSERT_EQUAL(x.removed, 1);
    CU_ASSERT(x.readable);
    CU_ASSERT_EQUAL(x.rkey, 0x1234u);
    pthread_mutex_unlock(&x.mu);

    /* A later create is announced readable straight away. */
    CU_ASSERT_FATAL(mv_agentc_create(c, 4096, 0, NULL, 0, &s) == 0);
    CU_ASSERT(s.rdma_readable);
    mv_agentc_segment_clear(&s);
    mv_disc_destroy(d);
    mv_agentc_close(c);
    agent_stop(&a);
}

/* Store watchers see a label change as CHANGED (the RDMA exporter keeps its region
 * and rkey), while clients of the Agent service see REMOVED then ADDED. */
typedef struct evlog {
    int ev[16];
    int n;
} evlog;

static void log_event(void *arg, int event, const mv_segstore_seg *seg, uint64_t revision)
{
    evlog *l = arg;
    (void)seg;
    (void)revision;
    if (l->n < 16)
        l->ev[l->n++] = event;
}

static void test_label_change_is_changed(void)
{
    agent a;
    agent_start(&a, 1, 0);
    mv_segstore_seg seg;
    char err[256];
    mv_segstore_label l1 = {"pod", "web-0"};
    CU_ASSERT_FATAL(mv_segstore_create(a.store, 4096, 0, &l1, 1, &seg, err, sizeof err) == 0);
    evlog log = {0};
    mv_segstore_sub *sub;
    CU_ASSERT_FATAL(mv_segstore_subscribe(a.store, log_event, &log, &sub) == 0);
    CU_ASSERT_EQUAL(log.n, 2); /* ADDED (replay), SYNCED */

    seen x = {.mu = PTHREAD_MUTEX_INITIALIZER};
    mv_disc_callbacks cb = {
        .arg = &x, .added = on_added, .removed = on_removed, .synced = on_synced};
    mv_disc *d;
    CU_ASSERT_FATAL(mv_disc_start(a.unix_target, &cb, &d) == 0);
    CU_ASSERT(wait_count(&x, &x.synced, 1, 5000));

    mv_segstore_label l2[2] = {{"pod", "web-0"}, {"namespace", "team-a"}};
    CU_ASSERT_EQUAL(mv_segstore_set_labels(a.store, seg.id, l2, 2, err, sizeof err), 1);
    CU_ASSERT_EQUAL(mv_segstore_set_labels(a.store, seg.id, l2, 2, err, sizeof err), 0);
    CU_ASSERT_EQUAL(log.n, 3);
    CU_ASSERT_EQUAL(log.ev[2], MV_SEGSTORE_CHANGED);
    CU_ASSERT(wait_count(&x, &x.added, 2, 5000));
    pthread_mutex_lock(&x.mu);
    CU_ASSERT_EQUAL(x.removed, 1);
    CU_ASSERT(x.readable);
    pthread_mutex_unlock(&x.mu);

    CU_ASSERT_EQUAL(mv_segstore_release(a.store, seg.id), 0);
    CU_ASSERT_EQUAL(log.n, 4);
    CU_ASSERT_EQUAL(log.ev[3], MV_SEGSTORE_REMOVED);
    mv_segstore_unsubscribe(a.store, sub);
    mv_disc_destroy(d);
    mv_segstore_seg_clear(&seg);
    agent_stop(&a);
}

/* A consumer that takes updates gets a label change as one update (the wire's REMOVED+ADDED
 * of one revision put together), with the new labels, and still gets a real removal. */
static void test_label_change_is_update(void)
{
    agent a;
    agent_start(&a, 0, 0);
    mv_segstore_seg seg;
    char err[256];
    mv_segstore_label l1 = {"pod", "web-0"};
    CU_ASSERT_FATAL(mv_segstore_create(a.store, 4096, 0, &l1, 1, &seg, err, sizeof err) == 0);

    seen x = {.mu = PTHREAD_MUTEX_INITIALIZER};
    mv_disc_callbacks cb = {.arg = &x,
                            .added = on_added,
                            .removed = on_removed,
                            .updated = on_updated,
                            .synced = on_synced};
    mv_disc *d;
    CU_ASSERT_FATAL(mv_disc_start(a.unix_target, &cb, &d) == 0);
    CU_ASSERT(wait_count(&x, &x.synced, 1, 5000));

    mv_segstore_label l2[2] = {{"pod", "web-0"}, {"namespace", "team-a"}};
    CU_ASSERT_EQUAL(mv_segstore_set_labels(a.store, seg.id, l2, 2, err, sizeof err), 1);
    CU_ASSERT(wait_count(&x, &x.updated, 1, 5000));
    /* Past the idle flush (200 ms): nothing held back turns into a removal. */
    mv_test_sleep_ms(500);
    pthread_mutex_lock(&x.mu);
    CU_ASSERT_EQUAL(x.updated, 1);
    CU_ASSERT_EQUAL(x.added, 1);
    CU_ASSERT_EQUAL(x.removed, 0);
    CU_ASSERT_STRING_EQUAL(x.upd_labels, "pod=web-0,namespace=team-a,");
    pthread_mutex_unlock(&x.mu);

    /* Two changes in a row: two updates. */
    mv_segstore_label l3[1] = {{"pod", "web-1"}};
    mv_segstore_label l4[1] = {{"pod", "web-2"}};
    CU_ASSERT_EQUAL(mv_segstore_set_labels(a.store, seg.id, l3, 1, err, sizeof err), 1);
    CU_ASSERT_EQUAL(mv_segstore_set_labels(a.store, seg.id, l4, 1, err, sizeof err), 1);
    CU_ASSERT(wait_count(&x, &x.updated, 3, 5000));
    pthread_mutex_lock(&x.mu);
    CU_ASSERT_EQUAL(x.removed, 0);
    CU_ASSERT_STRING_EQUAL(x.upd_labels, "pod=web-2,");
    pthread_mutex_unlock(&x.mu);

    /* A release is a removal, delivered without a following event. */
    uint64_t t0 = mv_test_mono_ms();
    CU_ASSERT_EQUAL(mv_segstore_release(a.store, seg.id), 0);
    CU_ASSERT(wait_count(&x, &x.removed, 1, 5000));
    uint64_t took = mv_test_mono_ms() - t0;
    printf("  removal delivered after %llu ms\n", (unsigned long long)took);
    CU_ASSERT(took < 1000);
    pthread_mutex_lock(&x.mu);
    CU_ASSERT_EQUAL(x.added, 1);
    CU_ASSERT_EQUAL(x.updated, 3);
    pthread_mutex_unlock(&x.mu);
    mv_disc_destroy(d);
    mv_segstore_seg_clear(&seg);
    agent_stop(&a);
}

int main(void)
{
    mv_log_init("test", MV_LOG_ERROR);
    if (!mkdtemp(tmpdir))
        return 1;
    static const mv_test tests[] = {
        {"token file: trimmed, bounded, printable", test_token_file},
        {"TCP control plane needs the token; unix socket does not", test_tcp_needs_token},
        {"Segment carries the rdma fields from the hook", test_rdma_fields},
        {"--require-rdma refuses and releases", test_require_rdma},
        {"discovery over TCP with the token", test_discovery_token},
        {"RDMA hook attached while serving: watches get the rdma fields",
         test_rdma_attached_while_serving},
        {"label change: CHANGED for the store, REMOVED+ADDED on the wire",
         test_label_change_is_changed},
        {"label change: one update for a consumer that takes updates", test_label_change_is_update},
    };
    int fails = MV_TEST_RUN("rdmawire", tests);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!fails && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return fails;
}
