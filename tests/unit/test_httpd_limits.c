/* mv_httpd connection limits: one client's idle connections cannot starve another client;
 * refusals are counted; idle connections are closed after the timeout. */
#include <CUnit/Basic.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mv_httpd.h"
#include "mv_test.h"

/* The server holds no connection (for mv_test_wait_until). */
static int no_active(void *arg)
{
    mv_httpd_stats st;
    mv_httpd_get_stats(arg, &st);
    return st.active == 0;
}

static int h_ok(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    (void)req;
    mv_httpd_set_status(resp, 200);
    mv_httpd_set_content_type(resp, "text/plain");
    return mv_httpd_set_body(resp, strdup("ok\n"), 3);
}

/* A TCP connection to 127.0.0.1:port from source address `src` (another loopback address). */
static int connect_from(const char *src, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CU_ASSERT_FATAL(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    CU_ASSERT_FATAL(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &d.sin_addr);
    if (connect(fd, (struct sockaddr *)&d, sizeof d) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 if the server closed `fd` within `ms` (read returns 0 or an error). */
static int closed_within(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0)
        return 0;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN);
}

/* GET / from `src`; returns the status code or -1, and how long it took. */
static int get(const char *src, uint16_t port, uint64_t *took_ms)
{
    uint64_t t0 = mv_test_mono_ms();
    int fd = connect_from(src, port);
    if (fd < 0)
        return -1;
    const char *rq = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (send(fd, rq, strlen(rq), 0) != (ssize_t)strlen(rq)) {
        close(fd);
        return -1;
    }
    char buf[512];
    size_t got = 0;
    struct pollfd p = {fd, POLLIN, 0};
    while (got < sizeof buf - 1 && poll(&p, 1, 5000) > 0) {
        ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *took_ms = mv_test_mono_ms() - t0;
    int status = -1;
    if (sscanf(buf, "HTTP/1.1 %d", &status) != 1)
        return -1;
    return status;
}

static void test_one_client_cannot_starve_another(void)
{
    mv_httpd_config cfg;
    mv_httpd_config_default(&cfg);
    cfg.max_conns = 64;
    cfg.max_conns_per_client = 8;
    cfg.timeout_s = 4;
    mv_httpd *h;
    CU_ASSERT_FATAL(mv_httpd_create(&cfg, &h) == 0);
    CU_ASSERT_FATAL(mv_httpd_route(h, "/", h_ok, NULL) == 0);
    CU_ASSERT_FATAL(mv_httpd_start(h) == 0);
    uint16_t port = mv_httpd_port(h);

    /* 20 idle connections from 127.0.0.2: 8 kept, 12 refused (closed at once). */
    int fds[20], kept = 0, refused = 0, gone[20] = {0};
    for (int i = 0; i < 20; i++)
        fds[i] = connect_from("127.0.0.2", port);
    /* Wait (bounded, inside the 4 s idle timeout even under emulation) until 12 were closed
     * by the server. */
    uint64_t w0 = mv_test_mono_ms();
    while (refused < 12 && mv_test_mono_ms() - w0 < 2500) {
        for (int i = 0; i < 20; i++)
            if (!gone[i] && (fds[i] < 0 || closed_within(fds[i], 0))) {
                gone[i] = 1;
                refused++;
            }
        struct pollfd p = {-1, 0, 0};
        poll(&p, 0, 10);
    }
    for (int i = 0; i < 20; i++)
        kept += !gone[i] && !closed_within(fds[i], 0);
    printf("\n  kept=%d refused=%d\n", kept, refused);
    CU_ASSERT_EQUAL(kept, 8);
    CU_ASSERT_EQUAL(refused, 12);

    /* Another client is served at once. */
    uint64_t took = 0;
    CU_ASSERT_EQUAL(get("127.0.0.1", port, &took), 200);
    CU_ASSERT(took < 2000);

    mv_httpd_stats st;
    mv_httpd_get_stats(h, &st);
    CU_ASSERT_EQUAL(st.refused_client, 12);
    CU_ASSERT(st.accepted >= 9);

    /* Idle connections are closed by the timeout, freeing the client's slots. */
    uint64_t t0 = mv_test_mono_ms();
    int closed = 0;
    for (int i = 0; i < 20; i++)
        if (fds[i] >= 0 && closed_within(fds[i], 10000))
            closed++;
    CU_ASSERT_EQUAL(closed, 20); /* 12 refused at once, 8 idle after the 4 s timeout */
    CU_ASSERT(mv_test_mono_ms() - t0 < 12000);
    for (int i = 0; i < 20; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    mv_test_wait_until(no_active, h, 3000);
    mv_httpd_get_stats(h, &st);
    CU_ASSERT_EQUAL(st.active, 0);
    CU_ASSERT_EQUAL(get("127.0.0.2", port, &took), 200); /* slots were given back */
    mv_httpd_destroy(h);
}

/* Reads what the server sends until it closes (at most `ms`); returns the bytes read. */
static size_t read_all(int fd, char *buf, size_t len, int ms)
{
    size_t got = 0;
    struct pollfd p = {fd, POLLIN, 0};
    while (got < len - 1 && poll(&p, 1, ms) > 0) {
        ssize_t n = recv(fd, buf + got, len - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    return got;
}

/* A client that trickles its headers one byte at a time is closed at the absolute deadline,
 * although each byte resets the idle timeout. */
static void test_request_deadline(void)
{
    mv_httpd_config cfg;
    mv_httpd_config_default(&cfg);
    cfg.timeout_s = 30;
    cfg.request_deadline_s = 2;
    mv_httpd *h;
    CU_ASSERT_FATAL(mv_httpd_create(&cfg, &h) == 0);
    CU_ASSERT_FATAL(mv_httpd_route(h, "/", h_ok, NULL) == 0);
    CU_ASSERT_FATAL(mv_httpd_start(h) == 0);
    uint16_t port = mv_httpd_port(h);

    int fd = connect_from("127.0.0.2", port);
    CU_ASSERT_FATAL(fd >= 0);
    const char *rq = "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    CU_ASSERT(send(fd, rq, strlen(rq), 0) == (ssize_t)strlen(rq));
    uint64_t t0 = mv_test_mono_ms();
    int closed = 0;
    while (!closed && mv_test_mono_ms() - t0 < 8000) {
        if (send(fd, "a", 1, MSG_NOSIGNAL) != 1)
            break;
        closed = closed_within(fd, 200);
    }
    uint64_t took = mv_test_mono_ms() - t0;
    printf("\n  trickling client closed after %llu ms (deadline 2 s)\n", (unsigned long long)took);
    CU_ASSERT(took >= 1500 && took < 4000);
    close(fd);

    /* A keep-alive connection gets the whole deadline again after each response. */
    fd = connect_from("127.0.0.3", port);
    CU_ASSERT_FATAL(fd >= 0);
    const char *ka = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    char buf[1024];
    for (int i = 0; i < 3; i++) {
        mv_test_sleep_ms(1200); /* 3.6 s in all: past one deadline, each request within one */
        CU_ASSERT(send(fd, ka, strlen(ka), MSG_NOSIGNAL) == (ssize_t)strlen(ka));
        struct pollfd p = {fd, POLLIN, 0};
        CU_ASSERT(poll(&p, 1, 2000) == 1);
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        CU_ASSERT(n > 12 && strncmp(buf, "HTTP/1.1 200", 12) == 0);
    }
    close(fd);
    mv_httpd_stats st;
    mv_httpd_get_stats(h, &st);
    CU_ASSERT_EQUAL(st.deadline_closed, 1);
    mv_httpd_destroy(h);
}

/* Many query parameters or a long header: a 4xx with a body, at once. */
static void test_oversized_requests(void)
{
    mv_httpd_config cfg;
    mv_httpd_config_default(&cfg);
    mv_httpd *h;
    CU_ASSERT_FATAL(mv_httpd_create(&cfg, &h) == 0);
    CU_ASSERT_FATAL(mv_httpd_route(h, "/", h_ok, NULL) == 0);
    CU_ASSERT_FATAL(mv_httpd_start(h) == 0);
    uint16_t port = mv_httpd_port(h);
    static char rq[80000], buf[4096];
    const unsigned counts[] = {64, 400, 5000};
    const int want[] = {200, 414, 414};
    for (int k = 0; k < 3; k++) {
        size_t n = (size_t)snprintf(rq, sizeof rq, "GET /?");
        for (unsigned i = 0; i < counts[k]; i++)
            n += (size_t)snprintf(rq + n, sizeof rq - n, "%sa%u=1", i ? "&" : "", i);
        n += (size_t)snprintf(rq + n, sizeof rq - n,
                              " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        int fd = connect_from("127.0.0.1", port);
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT(send(fd, rq, n, MSG_NOSIGNAL) == (ssize_t)n);
        uint64_t t0 = mv_test_mono_ms();
        read_all(fd, buf, sizeof buf, 3000);
        int status = 0;
        sscanf(buf, "HTTP/1.1 %d", &status);
        printf("\n  %u parameters: %d in %llu ms", counts[k], status,
               (unsigned long long)(mv_test_mono_ms() - t0));
        CU_ASSERT_EQUAL(status, want[k]);
        const char *body = strstr(buf, "\r\n\r\n");
        CU_ASSERT(body && body[4] != '\0');
        close(fd);
    }
    /* A 64 KiB header: 431 with a body. */
    size_t n = (size_t)snprintf(rq, sizeof rq, "GET / HTTP/1.1\r\nHost: x\r\nX-Long: ");
    memset(rq + n, 'a', 65536);
    n += 65536;
    n += (size_t)snprintf(rq + n, sizeof rq - n, "\r\n\r\n");
    int fd = connect_from("127.0.0.1", port);
    CU_ASSERT_FATAL(fd >= 0);
    send(fd, rq, n, MSG_NOSIGNAL);
    read_all(fd, buf, sizeof buf, 3000);
    int status = 0;
    sscanf(buf, "HTTP/1.1 %d", &status);
    printf("\n  64 KiB header: %d\n", status);
    CU_ASSERT_EQUAL(status, 431);
    const char *body = strstr(buf, "\r\n\r\n");
    CU_ASSERT(body && body[4] != '\0');
    close(fd);
    mv_httpd_destroy(h);
}

static int h_echo_body(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    size_t len;
    const char *b = mv_httpd_body(req, &len);
    char text[64];
    snprintf(text, sizeof text, "%zu:%.8s", len, b);
    return mv_httpd_copy_body(resp, text, strlen(text));
}

/* Refuses requests without "X-Token: yes" with 401 before the handler runs. */
static int authorize(void *arg, const mv_httpd_request *req, mv_httpd_response *resp)
{
    (void)arg;
    const char *t = mv_httpd_header(req, "X-Token");
    if (t && !strcmp(t, "yes"))
        return 0;
    mv_httpd_set_status(resp, 401);
    mv_httpd_copy_body(resp, "no\n", 3);
    return 1;
}

/* One request on a fresh connection; returns the status and copies the response. */
static int roundtrip(uint16_t port, const char *rq, size_t n, char *buf, size_t len)
{
    int fd = connect_from("127.0.0.1", port);
    if (fd < 0)
        return -1;
    send(fd, rq, n, MSG_NOSIGNAL);
    read_all(fd, buf, len, 3000);
    close(fd);
    int status = -1;
    sscanf(buf, "HTTP/1.1 %d", &status);
    return status;
}

static void test_post_and_authorize(void)
{
    mv_httpd_config cfg;
    mv_httpd_config_default(&cfg);
    cfg.max_body_bytes = 1024;
    cfg.authorize = authorize;
    mv_httpd *h;
    CU_ASSERT_FATAL(mv_httpd_create(&cfg, &h) == 0);
    CU_ASSERT_FATAL(mv_httpd_route_methods(h, "/post", MV_HTTPD_POST, h_echo_body, NULL) == 0);
    CU_ASSERT_FATAL(mv_httpd_route(h, "/get", h_ok, NULL) == 0);
    CU_ASSERT_EQUAL(mv_httpd_route_methods(h, "/bad", 8, h_ok, NULL), -EINVAL);
    CU_ASSERT_FATAL(mv_httpd_start(h) == 0);
    uint16_t port = mv_httpd_port(h);
    char buf[4096], rq[4096];
    const char *C = "Connection: close\r\nX-Token: yes\r\n";

    int n = snprintf(rq, sizeof rq,
                     "POST /post HTTP/1.1\r\nHost: x\r\n%sContent-Length: 5\r\n\r\nhello", C);
    CU_ASSERT_EQUAL(roundtrip(port, rq, (size_t)n, buf, sizeof buf), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\r\n\r\n5:hello"));

    n = snprintf(rq, sizeof rq, "POST /post HTTP/1.1\r\nHost: x\r\n%sContent-Length: 2000\r\n\r\n",
                 C);
    CU_ASSERT_EQUAL(roundtrip(port, rq, (size_t)n, buf, sizeof buf), 413);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "exceeds 1024 bytes"));

    /* A chunked body over the cap: read, dropped, then 413. */
    n = snprintf(rq, sizeof rq,
                 "POST /post HTTP/1.1\r\nHost: x\r\n%sTransfer-Encoding: chunked\r\n\r\n", C);
    for (int i = 0; i < 3; i++) {
        n += snprintf(rq + n, sizeof rq - (size_t)n, "200\r\n");
        memset(rq + n, 'x', 512);
        n += 512;
        n += snprintf(rq + n, sizeof rq - (size_t)n, "\r\n");
    }
    n += snprintf(rq + n, sizeof rq - (size_t)n, "0\r\n\r\n");
    CU_ASSERT_EQUAL(roundtrip(port, rq, (size_t)n, buf, sizeof buf), 413);

    n = snprintf(rq, sizeof rq, "GET /post HTTP/1.1\r\nHost: x\r\n%s\r\n", C);
    CU_ASSERT_EQUAL(roundtrip(port, rq, (size_t)n, buf, sizeof buf), 405);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "Allow: POST\r\n"));
    n = snprintf(rq, sizeof rq, "POST /get HTTP/1.1\r\nHost: x\r\n%sContent-Length: 1\r\n\r\nx", C);
    CU_ASSERT_EQUAL(roundtrip(port, rq, (size_t)n, buf, sizeof buf), 405);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "Allow: GET, HEAD\r\n"));

    /* The authorize hook answers first. */
    n = snprintf(rq, sizeof rq, "GET /get HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CU_ASSERT_EQUAL(roundtrip(port, rq, (size_t)n, buf, sizeof buf), 401);
    mv_httpd_stats st;
    mv_httpd_get_stats(h, &st);
    CU_ASSERT_EQUAL(st.rejected, 4); /* 413 twice, 405 twice */
    mv_httpd_destroy(h);
}

int main(void)
{
    static const mv_test tests[] = {
        {"one client cannot starve another", test_one_client_cannot_starve_another},
        {"absolute request deadline", test_request_deadline},
        {"many parameters and long headers get a 4xx with a body", test_oversized_requests},
        {"POST bodies, their cap, methods and the authorize hook", test_post_and_authorize},
    };
    return MV_TEST_RUN("httpd_limits", tests);
}
