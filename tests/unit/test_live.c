/* Unit tests of mv_live: the stream query parser and JSON strings, and streams served by a real
 * mv_httpd over a collector table ticked by hand: a one-read spike kept by the min/max
 * downsampling, the caps (429 with a reason), bad queries (400/404), the stream's lifetime
 * (end event, then the HTTP layer ends the response), ring memory reported and freed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "microview.h"
#include "mv_collect.h"
#include "mv_httpd.h"
#include "mv_live.h"
#include "mv_log.h"
#include "mv_test.h"

static char *g_dir;
static mv_segment *g_seg;
static mv_gauge g_gauge;
static mv_coll *g_coll;
static mv_live *g_live;
static mv_httpd *g_httpd;
static uint16_t g_port;

#define RING 64

static int h_stream(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    return mv_live_handle_stream(arg, req, resp);
}

static int fixture_open(void)
{
    g_dir = mv_test_tmpdir("live");
    char path[512];
    if (!g_dir || mv_test_blank_file(g_dir, "seg", 65536, path, sizeof path) != 0)
        return -1;
    mv_counter c;
    if (mv_open(path, &g_seg) != MV_OK ||
        mv_gauge_register(g_seg, "inflight", "In flight.", NULL, NULL, 0, &g_gauge) != MV_OK ||
        mv_counter_register(g_seg, "requests_total", "Requests.", NULL, NULL, 0, &c) != MV_OK)
        return -1;
    mv_coll_opts co;
    mv_coll_opts_default(&co);
    if (mv_coll_create(&co, &g_coll) != 0)
        return -1;
    void *src;
    uint64_t size;
    char err[256];
    mv_seg_label ids[] = {{"pod", "web-0"}};
    if (mv_coll_shm_open(path, 0, &src, &size, err, sizeof err) != 0 ||
        mv_coll_add(g_coll, "seg-1", size, ids, 1, mv_coll_shm_transport(), src) != 0)
        return -1;
    mv_coll_tick(g_coll);
    mv_live_opts lo;
    mv_live_opts_default(&lo);
    lo.coll = g_coll;
    lo.tick_us = 10000;
    lo.ring_len = RING;
    lo.max_streams = 2;
    lo.max_streams_per_client = 2;
    lo.max_lifetime_s = 3;
    lo.pump_ms = 5;
    mv_httpd_config hc;
    mv_httpd_config_default(&hc);
    if (mv_live_create(&lo, &g_live) != 0 || mv_httpd_create(&hc, &g_httpd) != 0 ||
        mv_httpd_route(g_httpd, "/api/v1/stream", h_stream, g_live) != 0 ||
        mv_httpd_start(g_httpd) != 0)
        return -1;
    g_port = mv_httpd_port(g_httpd);
    return 0;
}

static int fixture_close(void)
{
    mv_httpd_destroy(g_httpd);
    mv_live_destroy(g_live);
    mv_coll_destroy(g_coll);
    mv_close(g_seg);
    if (g_dir)
        mv_test_rmrf(g_dir);
    free(g_dir);
    return 0;
}

/* ---- Parser ---------------------------------------------------------------------------- */

static int parse(const char *q, mv_live_query *out)
{
    char *s = strdup(q), *save = NULL, err[200];
    mv_live_query_init(out);
    int rc = 0;
    for (char *p = strtok_r(s, "&", &save); p && !rc; p = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(p, '=');
        if (eq)
            *eq++ = '\0';
        rc = mv_live_query_add(out, p, eq ? eq : "", 60000, err, sizeof err);
    }
    if (!rc)
        rc = mv_live_query_finish(out, err, sizeof err);
    free(s);
    return rc;
}

static void test_query(void)
{
    mv_live_query q;
    CU_ASSERT_EQUAL(parse("seg=a&m=0&m=7&width=100&window_ms=2000", &q), 0);
    CU_ASSERT_STRING_EQUAL(q.seg, "a");
    CU_ASSERT_EQUAL(q.n, 2);
    CU_ASSERT_EQUAL(q.idx[1], 7);
    CU_ASSERT_EQUAL(q.width, 100);
    CU_ASSERT_EQUAL(q.window_ms, 2000);
    CU_ASSERT_EQUAL(parse("seg=a&m=0", &q), 0);
    CU_ASSERT_EQUAL(q.width, 800);
    static const char *bad[] = {
        "m=0",                       /* no seg */
        "seg=a",                     /* no metric */
        "seg=a&m=0&m=0",             /* repeated index */
        "seg=a&seg=b&m=0",           /* repeated key */
        "seg=a&m=65536",             /* index range */
        "seg=a&m=-1",                /* sign */
        "seg=a&m=1x",                /* junk */
        "seg=a&m=0&width=15",        /* width range */
        "seg=a&m=0&width=4097",      /* width range */
        "seg=a&m=0&window_ms=999",   /* window range */
        "seg=a&m=0&window_ms=60001", /* past the history */
        "seg=a&m=0&bogus=1",         /* unknown key */
        "seg=a b&m=0",               /* space in id */
        "seg=&m=0",                  /* empty id */
        "seg=a&m=0&m=1&m=2&m=3&m=4&m=5&m=6&m=7&m=8&m=9&m=10&m=11&m=12&m=13&m=14&m=15&m=16",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i], &q);
        if (rc != -EINVAL)
            fprintf(stderr, "accepted: %s\n", bad[i]);
        CU_ASSERT_EQUAL(rc, -EINVAL);
    }
    char big[300];
    memset(big, 'x', sizeof big);
    memcpy(big, "seg=", 4);
    memcpy(big + 4 + 257, "&m=0", 5);
    CU_ASSERT_EQUAL(parse(big, &q), -EINVAL); /* a 257-byte id */
}

static void test_json_str(void)
{
    char b[64];
    CU_ASSERT_EQUAL(mv_live_json_str("a\"b\\c\n\x01", b, sizeof b), 21);
    CU_ASSERT_STRING_EQUAL(b, "\"a\\\"b\\\\c\\u000a\\u0001\"");
    CU_ASSERT_EQUAL(mv_live_json_str("abcdef", b, 4), 8); /* too small: the size it needs */
}

/* ---- Streams ------------------------------------------------------------------------------ */

static int open_stream(const char *query)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(g_port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        return -1;
    char req[512];
    int n = snprintf(req, sizeof req, "GET /api/v1/stream?%s HTTP/1.1\r\nHost: x\r\n\r\n", query);
    if (write(fd, req, (size_t)n) != n)
        return -1;
    return fd;
}

/* Reads into buf (NUL-terminated) until `want` appears, EOF or timeout_ms. 1 if found. */
static int read_until(int fd, char *buf, size_t cap, size_t *len, const char *want,
                      unsigned timeout_ms)
{
    uint64_t end = mv_test_mono_ms() + timeout_ms;
    while (!strstr(buf, want)) {
        uint64_t now = mv_test_mono_ms();
        if (now >= end || *len + 1 >= cap)
            return 0;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(end - now)) <= 0)
            return 0;
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n <= 0)
            return strstr(buf, want) != NULL;
        *len += (size_t)n;
        buf[*len] = '\0';
    }
    return 1;
}

static void test_spike_kept(void)
{
    int fd = open_stream("seg=seg-1&m=0&width=16&window_ms=1000");
    CU_ASSERT_FATAL(fd >= 0);
    static char buf[1 << 20];
    size_t len = 0;
    buf[0] = '\0';
    CU_ASSERT_FATAL(read_until(fd, buf, sizeof buf, &len, "event: hello", 3000));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"name\":\"inflight\""));
    mv_live_stats st;
    mv_live_get_stats(g_live, &st);
    CU_ASSERT_EQUAL(st.series, 1);
    CU_ASSERT_EQUAL(st.ring_bytes, RING * 48);
    /* 40 reads within one 62.5 ms bucket (ticked by hand, microseconds apart): 1 everywhere
     * but one read at 100. */
    for (int i = 0; i < 40; i++) {
        mv_gauge_set(g_gauge, i == 20 ? 100 : 1);
        mv_coll_tick(g_coll);
    }
    /* One bucket (or two, if the reads straddled a boundary) holds min 1 and max 100. */
    CU_ASSERT(read_until(fd, buf, sizeof buf, &len, ",1,100,", 3000));
    close(fd);
    /* The ring goes with its last stream. */
    uint64_t end = mv_test_mono_ms() + 3000;
    do {
        mv_test_sleep_ms(10);
        mv_live_get_stats(g_live, &st);
    } while ((st.streams || st.ring_bytes) && mv_test_mono_ms() < end);
    CU_ASSERT_EQUAL(st.streams, 0);
    CU_ASSERT_EQUAL(st.ring_bytes, 0);
}

static void test_caps_and_errors(void)
{
    int a = open_stream("seg=seg-1&m=0"), b = open_stream("seg=seg-1&m=1");
    static char buf[65536];
    size_t len = 0;
    buf[0] = '\0';
    CU_ASSERT(read_until(a, buf, sizeof buf, &len, "event: hello", 3000));
    len = 0;
    buf[0] = '\0';
    CU_ASSERT(read_until(b, buf, sizeof buf, &len, "event: hello", 3000));
    int c = open_stream("seg=seg-1&m=0");
    len = 0;
    buf[0] = '\0';
    CU_ASSERT(read_until(c, buf, sizeof buf, &len, "\"reason\":\"streams_total\"", 3000));
    CU_ASSERT(strncmp(buf, "HTTP/1.1 429", 12) == 0);
    close(a);
    close(b);
    close(c);
    mv_test_sleep_ms(200); /* the pump frees the two streams */
    static const struct {
        const char *q, *status, *reason;
    } cases[] = {
        {"seg=nope&m=0", "HTTP/1.1 404", "not_found"},
        {"seg=seg-1&m=9", "HTTP/1.1 404", "not_found"},
        {"seg=seg-1&m=0&x=1", "HTTP/1.1 400", "bad_request"},
        {"seg=seg-1", "HTTP/1.1 400", "bad_request"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = open_stream(cases[i].q);
        len = 0;
        buf[0] = '\0';
        CU_ASSERT(read_until(fd, buf, sizeof buf, &len, cases[i].reason, 3000));
        CU_ASSERT(strncmp(buf, cases[i].status, 12) == 0);
        close(fd);
    }
}

static void test_lifetime(void)
{
    /* max_lifetime_s 3: the end event a second before, then the last chunk. */
    uint64_t t0 = mv_test_mono_ms();
    int fd = open_stream("seg=seg-1&m=0");
    static char buf[1 << 20];
    size_t len = 0;
    buf[0] = '\0';
    CU_ASSERT(read_until(fd, buf, sizeof buf, &len,
                         "event: end\ndata: {\"reason\":\"max_lifetime\"}", 5000));
    uint64_t t = mv_test_mono_ms() - t0;
    CU_ASSERT(t >= 1500 && t < 4000);
    CU_ASSERT(read_until(fd, buf, sizeof buf, &len, "\r\n0\r\n\r\n", 3000));
    close(fd);
    mv_live_stats st;
    mv_live_get_stats(g_live, &st);
    CU_ASSERT_EQUAL(st.ended_lifetime, 1);
}

static void test_destroy_parked(void)
{
    /* A stream left open and parked (nothing to send between heartbeats): the fixture's
     * teardown destroys the server with it, which must resume and end it, not hang. */
    int fd = open_stream("seg=seg-1&m=0");
    static char buf[65536];
    size_t len = 0;
    buf[0] = '\0';
    CU_ASSERT(read_until(fd, buf, sizeof buf, &len, "event: hello", 3000));
    mv_test_sleep_ms(100);
    mv_httpd_stats hs;
    mv_httpd_get_stats(g_httpd, &hs);
    CU_ASSERT_EQUAL(hs.streams_open, 1);
}

int main(void)
{
    mv_log_init("test_live", MV_LOG_ERROR);
    static const mv_test tests[] = {
        {"query parser: accepted and refused queries", test_query},
        {"JSON strings: escapes and the size needed", test_json_str},
        {"stream: a one-read spike survives min/max downsampling; ring freed", test_spike_kept},
        {"stream: 429 over the cap, 400 and 404 with reasons", test_caps_and_errors},
        {"stream: ends at its lifetime with an end event", test_lifetime},
        {"server destroyed with a parked stream", test_destroy_parked},
    };
    return MV_TEST_RUN_FIXTURE("live", fixture_open, fixture_close, tests);
}
