/* mv_collector_run: the exit status of the collector's lifecycle (1 when a start fails, 0 after
 * SIGTERM once everything started) and what a complete start serves. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mv_collector.h"
#include "mv_log.h"
#include "mv_test.h"

/* A socket listening on 127.0.0.1 on a port the kernel picked; its port in *port. */
static int listener(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

/* The options main() makes with no flag but --no-agent and --listen 127.0.0.1:port. */
static void defaults(mv_collector_opts *o, uint16_t port, mv_export_sel *derived)
{
    static char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%u", port);
    memset(o, 0, sizeof *o);
    mv_coll_opts_default(&o->coll);
    o->coll.analytics = 1;
    o->coll.max_interval_us = 1000000;
    o->listen = listen;
    o->listen_host = "127.0.0.1";
    o->listen_port = port;
    mv_httpd_config_default(&o->http);
    o->auth = MV_AUTHZ_NONE;
    o->body_cap = 64u << 20;
    o->derived = derived;
}

static void test_taken_port_fails(void)
{
    uint16_t port;
    int fd = listener(&port);
    CU_ASSERT_FATAL(fd >= 0);
    mv_export_sel *derived = mv_export_sel_create();
    CU_ASSERT_FATAL(derived != NULL);
    mv_collector_opts o;
    defaults(&o, port, derived);
    CU_ASSERT_EQUAL(mv_collector_run(&o), 1);
    mv_export_sel_destroy(derived);
    close(fd);
}

static void test_bad_segment_fails(void)
{
    mv_export_sel *derived = mv_export_sel_create();
    CU_ASSERT_FATAL(derived != NULL);
    char spec[] = "/nonexistent/segment,notakv";
    char *statics[] = {spec};
    mv_collector_opts o;
    defaults(&o, 0, derived);
    o.statics = statics;
    o.nstatic = 1;
    CU_ASSERT_EQUAL(mv_collector_run(&o), 1);
    mv_export_sel_destroy(derived);
}

typedef struct scrape {
    uint16_t port;
    char body[65536];
    size_t len;
} scrape;

/* Once the collector answers on its port: one GET /metrics, then SIGTERM to the process. */
static void *scrape_then_term(void *arg)
{
    scrape *s = arg;
    uint64_t t0 = mv_test_mono_ms();
    while (mv_test_mono_ms() - t0 < 20000) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(s->port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            static const char req[] = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
            if (write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
                ssize_t n;
                while (s->len < sizeof s->body - 1 &&
                       (n = read(fd, s->body + s->len, sizeof s->body - 1 - s->len)) > 0)
                    s->len += (size_t)n;
            }
            close(fd);
            break;
        }
        if (fd >= 0)
            close(fd);
        mv_test_sleep_ms(10);
    }
    kill(getpid(), SIGTERM);
    return NULL;
}

static void test_sigterm_after_start_exits_0(void)
{
    uint16_t port;
    int fd = listener(&port);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd); /* free again for the collector */
    /* Blocked before the helper starts, so the signal can only be taken by sigtimedwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    static scrape s;
    memset(&s, 0, sizeof s);
    s.port = port;
    pthread_t t;
    CU_ASSERT_FATAL(pthread_create(&t, NULL, scrape_then_term, &s) == 0);
    mv_export_sel *derived = mv_export_sel_create();
    CU_ASSERT_FATAL(derived != NULL);
    mv_collector_opts o;
    defaults(&o, port, derived);
    CU_ASSERT_EQUAL(mv_collector_run(&o), 0);
    pthread_join(t, NULL);
    mv_export_sel_destroy(derived);
    s.body[s.len] = '\0';
    CU_ASSERT(strncmp(s.body, "HTTP/1.", 7) == 0 && strstr(s.body, " 200 ") != NULL);
    /* The server's own figures are rendered before the collector's families. */
    CU_ASSERT(strstr(s.body, "microview_http_connections_total") != NULL);
}

int main(void)
{
    mv_log_init("collector", MV_LOG_WARN);
    static const mv_test tests[] = {
        {"a taken --listen port fails the start (1)", test_taken_port_fails},
        {"a bad --segment fails the start (1)", test_bad_segment_fails},
        {"SIGTERM after a complete start exits 0", test_sigterm_after_start_exits_0},
    };
    return MV_TEST_RUN("collector_run", tests);
}
