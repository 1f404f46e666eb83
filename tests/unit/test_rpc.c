/* Unit tests for mv_rpc: real gRPC over unix sockets in a temporary directory. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_test.h"

static char tmpdir[256];
static int sock_seq;

typedef struct fixture {
    mv_rpc_server *srv;
    mv_rpc_channel *ch;
    char addr[400];
} fixture;

/* ---- Test server state ---------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int closes_seen, last_cancelled, overflow_rc;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void echo(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)arg;
    mv_rpc_reply(call, req, len);
}

static void fail(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)arg;
    (void)req;
    (void)len;
    mv_rpc_reply_error(call, MV_RPC_INVALID_ARGUMENT, "size must be positive");
}

/* Request "N": sends N messages "msg-i", then OK. */
static void count(void *arg, mv_rpc_stream *st, const uint8_t *req, size_t len)
{
    (void)arg;
    char buf[32];
    int n = 0;
    if (len < sizeof buf) {
        memcpy(buf, req, len);
        buf[len] = 0;
        n = atoi(buf);
    }
    for (int i = 0; i < n; i++) {
        char m[32];
        int l = snprintf(m, sizeof m, "msg-%d", i);
        mv_rpc_stream_write(st, m, (size_t)l);
    }
    mv_rpc_stream_end(st, MV_RPC_OK, "");
    mv_rpc_stream_unref(st);
}

/* Sends one message and keeps the stream open until the client or server ends it. */
static void forever(void *arg, mv_rpc_stream *st, const uint8_t *req, size_t len)
{
    (void)arg;
    (void)req;
    (void)len;
    mv_rpc_stream_write(st, "hello", 5);
}

/* Writes far more than the queue holds, synchronously. */
static void flood(void *arg, mv_rpc_stream *st, const uint8_t *req, size_t len)
{
    (void)arg;
    (void)req;
    (void)len;
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++)
        rc = mv_rpc_stream_write(st, "x", 1);
    pthread_mutex_lock(&mu);
    overflow_rc = rc;
    pthread_mutex_unlock(&mu);
    mv_rpc_stream_unref(st);
}

static void on_close(void *arg, mv_rpc_stream *st, int cancelled)
{
    (void)arg;
    (void)st;
    pthread_mutex_lock(&mu);
    closes_seen++;
    last_cancelled = cancelled;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void on_close_unref(void *arg, mv_rpc_stream *st, int cancelled)
{
    on_close(arg, st, cancelled);
    mv_rpc_stream_unref(st);
}

static void setup(fixture *f, const mv_rpc_server_opts *o)
{
    memset(f, 0, sizeof *f);
    snprintf(f->addr, sizeof f->addr, "unix:%s/s%d.sock", tmpdir, sock_seq++);
    CU_ASSERT_FATAL(mv_rpc_server_create(o, &f->srv) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_add_unary(f->srv, "/t.T/Echo", echo, NULL) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_add_unary(f->srv, "/t.T/Fail", fail, NULL) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_add_stream(f->srv, "/t.T/Count", count, on_close, NULL) == 0);
    CU_ASSERT_FATAL(
        mv_rpc_server_add_stream(f->srv, "/t.T/Forever", forever, on_close_unref, NULL) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_add_stream(f->srv, "/t.T/Flood", flood, on_close, NULL) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_listen(f->srv, f->addr) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_start(f->srv) == 0);
    CU_ASSERT_FATAL(mv_rpc_channel_open(f->addr, 0, &f->ch) == 0);
    pthread_mutex_lock(&mu);
    closes_seen = 0;
    last_cancelled = -1;
    overflow_rc = 1;
    pthread_mutex_unlock(&mu);
}

static void teardown(fixture *f)
{
    mv_rpc_channel_close(f->ch);
    mv_rpc_server_destroy(f->srv);
}

/* Waits (bounded) until closes_seen >= n. Returns closes_seen. */
static int wait_closes(int n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&mu);
    while (closes_seen < n && pthread_cond_timedwait(&cv, &mu, &ts) == 0)
        ;
    int c = closes_seen;
    pthread_mutex_unlock(&mu);
    return c;
}

/* ---- Tests ------------------------------------------------------------------------- */

static void test_unary_echo(void)
{
    fixture f;
    setup(&f, NULL);
    mv_rpc_buf resp;
    mv_rpc_status st;
    int rc = mv_rpc_unary(f.ch, "/t.T/Echo", "ping\0pong", 9, 5000, &resp, &st);
    CU_ASSERT_EQUAL(rc, MV_RPC_OK);
    CU_ASSERT_EQUAL(resp.len, 9);
    CU_ASSERT(resp.data && memcmp(resp.data, "ping\0pong", 9) == 0);
    mv_rpc_buf_free(&resp);
    /* An empty message is a valid message. */
    rc = mv_rpc_unary(f.ch, "/t.T/Echo", NULL, 0, 5000, &resp, &st);
    CU_ASSERT_EQUAL(rc, MV_RPC_OK);
    CU_ASSERT_EQUAL(resp.len, 0);
    mv_rpc_buf_free(&resp);
    teardown(&f);
}

static void test_error_status(void)
{
    fixture f;
    setup(&f, NULL);
    mv_rpc_buf resp;
    mv_rpc_status st;
    double t0 = now_s();
    int rc = mv_rpc_unary(f.ch, "/t.T/Fail", "x", 1, 5000, &resp, &st);
    CU_ASSERT_EQUAL(rc, MV_RPC_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(st.code, MV_RPC_INVALID_ARGUMENT);
    CU_ASSERT_STRING_EQUAL(st.message, "size must be positive");
    CU_ASSERT(now_s() - t0 < 2.0); /* not a deadline expiry */
    CU_ASSERT_PTR_NULL(resp.data);
    teardown(&f);
}

static void test_unknown_method(void)
{
    fixture f;
    setup(&f, NULL);
    mv_rpc_buf resp;
    mv_rpc_status st;
    int rc = mv_rpc_unary(f.ch, "/t.T/Nope", "x", 1, 5000, &resp, &st);
    CU_ASSERT_EQUAL(rc, MV_RPC_UNIMPLEMENTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.message, "/t.T/Nope"));
    teardown(&f);
}

static void test_oversize_rejected(void)
{
    fixture f;
    mv_rpc_server_opts o = {.max_recv_bytes = 1024};
    setup(&f, &o);
    static uint8_t big[8192];
    mv_rpc_buf resp;
    mv_rpc_status st;
    int rc = mv_rpc_unary(f.ch, "/t.T/Echo", big, sizeof big, 5000, &resp, &st);
    CU_ASSERT_EQUAL(rc, MV_RPC_RESOURCE_EXHAUSTED);
    rc = mv_rpc_unary(f.ch, "/t.T/Echo", big, 512, 5000, &resp, &st);
    CU_ASSERT_EQUAL(rc, MV_RPC_OK);
    mv_rpc_buf_free(&resp);
    teardown(&f);
}

static void test_stream_messages(void)
{
    fixture f;
    setup(&f, NULL);
    mv_rpc_cstream *cs;
    CU_ASSERT_FATAL(mv_rpc_cstream_open(f.ch, "/t.T/Count", "50", 2, 5000, &cs) == 0);
    mv_rpc_buf m;
    mv_rpc_status st;
    int got = 0, in_order = 1, rc;
    while ((rc = mv_rpc_cstream_next(cs, 5000, &m, &st)) == 1) {
        char want[32];
        int l = snprintf(want, sizeof want, "msg-%d", got);
        if (m.len != (size_t)l || memcmp(m.data, want, m.len) != 0)
            in_order = 0;
        got++;
        mv_rpc_buf_free(&m);
    }
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(got, 50);
    CU_ASSERT(in_order);
    CU_ASSERT_EQUAL(st.code, MV_RPC_OK);
    mv_rpc_cstream_close(cs);
    CU_ASSERT_EQUAL(wait_closes(1), 1);
    CU_ASSERT_EQUAL(last_cancelled, 0);
    teardown(&f);
}

static void test_client_cancel_seen(void)
{
    fixture f;
    setup(&f, NULL);
    mv_rpc_cstream *cs;
    CU_ASSERT_FATAL(mv_rpc_cstream_open(f.ch, "/t.T/Forever", "", 0, 0, &cs) == 0);
    mv_rpc_buf m;
    mv_rpc_status st;
    CU_ASSERT_EQUAL(mv_rpc_cstream_next(cs, 5000, &m, &st), 1);
    mv_rpc_buf_free(&m);
    /* Nothing more comes: the wait times out and the call stays usable. */
    CU_ASSERT_EQUAL(mv_rpc_cstream_next(cs, 50, &m, &st), -ETIMEDOUT);
    mv_rpc_cstream_cancel(cs);
    CU_ASSERT_EQUAL(mv_rpc_cstream_next(cs, 5000, &m, &st), 0);
    CU_ASSERT_EQUAL(st.code, MV_RPC_CANCELLED);
    mv_rpc_cstream_close(cs);
    CU_ASSERT_EQUAL(wait_closes(1), 1);
    CU_ASSERT_EQUAL(last_cancelled, 1);
    teardown(&f);
}

static void test_shutdown_with_open_stream(void)
{
    fixture f;
    setup(&f, NULL);
    mv_rpc_cstream *cs;
    CU_ASSERT_FATAL(mv_rpc_cstream_open(f.ch, "/t.T/Forever", "", 0, 0, &cs) == 0);
    mv_rpc_buf m;
    mv_rpc_status st;
    CU_ASSERT_EQUAL(mv_rpc_cstream_next(cs, 5000, &m, &st), 1);
    mv_rpc_buf_free(&m);
    double t0 = now_s();
    mv_rpc_server_destroy(f.srv);
    f.srv = NULL;
    CU_ASSERT(now_s() - t0 < 1.0);
    CU_ASSERT_EQUAL(closes_seen, 1);
    CU_ASSERT_EQUAL(last_cancelled, 1);
    CU_ASSERT_EQUAL(mv_rpc_cstream_next(cs, 5000, &m, &st), 0);
    CU_ASSERT(st.code == MV_RPC_UNAVAILABLE || st.code == MV_RPC_CANCELLED);
    mv_rpc_cstream_close(cs);
    teardown(&f);
}

static void test_stream_overflow(void)
{
    fixture f;
    mv_rpc_server_opts o = {.stream_queue_cap = 4};
    setup(&f, &o);
    mv_rpc_cstream *cs;
    CU_ASSERT_FATAL(mv_rpc_cstream_open(f.ch, "/t.T/Flood", "", 0, 5000, &cs) == 0);
    mv_rpc_buf m;
    mv_rpc_status st;
    int got = 0, rc;
    while ((rc = mv_rpc_cstream_next(cs, 5000, &m, &st)) == 1) {
        got++;
        mv_rpc_buf_free(&m);
    }
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(got < 100);
    CU_ASSERT_EQUAL(st.code, MV_RPC_RESOURCE_EXHAUSTED);
    CU_ASSERT_EQUAL(overflow_rc, -ENOBUFS);
    mv_rpc_cstream_close(cs);
    teardown(&f);
}

static void test_tcp_listen(void)
{
    mv_rpc_server *srv;
    CU_ASSERT_FATAL(mv_rpc_server_create(NULL, &srv) == 0);
    CU_ASSERT_FATAL(mv_rpc_server_add_unary(srv, "/t.T/Echo", echo, NULL) == 0);
    int port = mv_rpc_server_listen(srv, "127.0.0.1:0");
    CU_ASSERT_FATAL(port > 0);
    CU_ASSERT_FATAL(mv_rpc_server_start(srv) == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    mv_rpc_channel *ch;
    CU_ASSERT_FATAL(mv_rpc_channel_open(addr, 0, &ch) == 0);
    mv_rpc_buf resp;
    mv_rpc_status st;
    CU_ASSERT_EQUAL(mv_rpc_unary(ch, "/t.T/Echo", "tcp", 3, 5000, &resp, &st), MV_RPC_OK);
    CU_ASSERT(resp.len == 3 && memcmp(resp.data, "tcp", 3) == 0);
    mv_rpc_buf_free(&resp);
    mv_rpc_channel_close(ch);
    mv_rpc_server_destroy(srv);
}

static void test_unreachable(void)
{
    mv_rpc_channel *ch;
    char addr[400];
    snprintf(addr, sizeof addr, "unix:%s/absent.sock", tmpdir);
    CU_ASSERT_FATAL(mv_rpc_channel_open(addr, 0, &ch) == 0);
    mv_rpc_buf resp;
    mv_rpc_status st;
    CU_ASSERT_EQUAL(mv_rpc_unary(ch, "/t.T/Echo", "x", 1, 5000, &resp, &st), MV_RPC_UNAVAILABLE);
    /* Waiting for readiness turns the same call into a bounded wait. */
    double t0 = now_s();
    CU_ASSERT_EQUAL(
        mv_rpc_unary_ex(ch, "/t.T/Echo", "x", 1, 300, MV_RPC_WAIT_FOR_READY, &resp, &st),
        MV_RPC_DEADLINE_EXCEEDED);
    CU_ASSERT(now_s() - t0 >= 0.25);
    mv_rpc_channel_close(ch);
}

int main(void)
{
    mv_log_init("test", MV_LOG_WARN);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mv-rpc-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    static const mv_test tests[] = {
        {"unary echo", test_unary_echo},
        {"error status reaches client", test_error_status},
        {"unknown method is UNIMPLEMENTED", test_unknown_method},
        {"oversize request rejected", test_oversize_rejected},
        {"stream of several messages", test_stream_messages},
        {"client cancel seen by server", test_client_cancel_seen},
        {"shutdown with an open stream", test_shutdown_with_open_stream},
        {"stream queue overflow", test_stream_overflow},
        {"TCP listen on loopback", test_tcp_listen},
        {"unreachable server", test_unreachable},
    };
    int fails = MV_TEST_RUN("rpc", tests);
    rmdir(tmpdir);
    return fails;
}
