/* The e2e cluster's sample application: an HTTP service instrumented with libmicroview only.
 *
 *   GET /            one request: counted, its handling time observed, "ok\n" returned
 *   GET /healthz     200 without touching the metrics
 *
 * Metrics, in the segment named by $MICROVIEW_SEGMENT (the agent sets it at container start):
 *   app_requests_total            counter of requests served on /
 *   app_request_duration_seconds  histogram of their handling time
 *   app_inflight_requests         gauge of requests being handled
 * plus the writer heartbeat, refreshed every 100 ms.
 *
 * Usage: sample-app [PORT]   (default 8080). Logs logfmt lines to stderr; exits 0 on SIGTERM.
 * Exits 1 when the segment cannot be opened: a pod that asked for metrics memory and did not
 * get it should fail loudly, not run unobserved. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "microview.h"

static volatile sig_atomic_t stopping;
static mv_counter requests;
static mv_gauge inflight;
static mv_histogram *duration;

static void on_term(int sig)
{
    (void)sig;
    stopping = 1;
}

static double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state)
{
    (void)cls, (void)version, (void)upload, (void)upload_size, (void)state;
    if (strcmp(method, "GET") != 0)
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET only\n");
    if (strcmp(url, "/healthz") == 0)
        return reply(c, MHD_HTTP_OK, "ok\n");
    if (strcmp(url, "/") != 0)
        return reply(c, MHD_HTTP_NOT_FOUND, "not found\n");
    double t0 = mono_seconds();
    mv_gauge_add(inflight, 1);
    mv_counter_inc(requests);
    enum MHD_Result ret = reply(c, MHD_HTTP_OK, "ok\n");
    mv_gauge_add(inflight, -1);
    mv_histogram_observe(duration, mono_seconds() - t0);
    return ret;
}

static int fail(const char *what, int err)
{
    fprintf(stderr, "level=error comp=sample-app event=%s error=\"%s\" detail=\"%s\"\n", what,
            mv_strerror(err), mv_errdetail());
    return 1;
}

int main(int argc, char **argv)
{
    unsigned long port = 8080;
    if (argc > 1) {
        char *end;
        errno = 0;
        port = strtoul(argv[1], &end, 10);
        if (errno != 0 || *end != '\0' || port == 0 || port > 65535) {
            fprintf(stderr, "level=error comp=sample-app event=bad_port value=\"%s\"\n", argv[1]);
            return 2;
        }
    }
    mv_segment *seg;
    int rc = mv_open_from_env(&seg);
    if (rc != MV_OK)
        return fail("segment_open_failed", rc);
    double bounds[12];
    if ((rc = mv_exponential_buckets(50e-6, 2, 12, bounds)) != MV_OK ||
        (rc = mv_counter_register(seg, "app_requests_total", "Requests served on /.", NULL, NULL, 0,
                                  &requests)) != MV_OK ||
        (rc = mv_gauge_register(seg, "app_inflight_requests", "Requests being handled.", NULL, NULL,
                                0, &inflight)) != MV_OK ||
        (rc = mv_histogram_register(seg, "app_request_duration_seconds",
                                    "Handling time of requests on /.", "seconds", NULL, 0, bounds,
                                    12, &duration)) != MV_OK)
        return fail("register_failed", rc);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL,
                         NULL, handle, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "level=error comp=sample-app event=listen_failed port=%lu\n", port);
        return 1;
    }
    fprintf(stderr, "level=info comp=sample-app event=serving port=%lu segment=\"%s\"\n", port,
            mv_segment_path(seg));
    const struct timespec tick = {0, 100 * 1000 * 1000};
    while (!stopping) {
        mv_heartbeat(seg);
        nanosleep(&tick, NULL);
    }
    MHD_stop_daemon(d);
    fprintf(stderr, "level=info comp=sample-app event=stopped\n");
    mv_close(seg);
    return 0;
}
