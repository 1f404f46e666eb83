/* mv_kubec alone: the strict JSON parse (size cap, depth, UTF-8, trailing bytes), and requests
 * against a loopback stand-in: the bearer header from the token file, the re-read and retry
 * after a 401, POST bodies, capped answers, refused protocols and unreachable servers. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json-c/json.h>

#include "mv_kubec.h"
#include "mv_log.h"
#include "mv_test.h"

static int parse(const char *s, size_t max, int depth)
{
    json_object *r = NULL;
    int rc = mv_kubec_json_parse(s, strlen(s), max, depth, &r);
    CU_ASSERT((rc == 0) == (r != NULL));
    json_object_put(r);
    return rc;
}

static void test_json(void)
{
    CU_ASSERT_EQUAL(parse("{\"a\":[1,2]}", 100, 8), 0);
    CU_ASSERT_EQUAL(parse("{\"a\":1} \n\t\r", 100, 8), 0);
    CU_ASSERT_EQUAL(parse("{\"a\":1} x", 100, 8), -EINVAL);
    CU_ASSERT_EQUAL(parse("{\"a\":1}{}", 100, 8), -EINVAL);
    CU_ASSERT_EQUAL(parse("{\"a\":1}", 7, 8), 0);
    CU_ASSERT_EQUAL(parse("{\"a\":1}", 6, 8), -E2BIG);
    CU_ASSERT_EQUAL(parse("[[[[1]]]]", 100, 5), 0);
    CU_ASSERT_EQUAL(parse("[[[[[1]]]]]", 100, 5), -EINVAL);
    CU_ASSERT_EQUAL(parse("{\"a\":\"\xc3\x28\"}", 100, 8), -EINVAL); /* bad UTF-8 */
    CU_ASSERT_EQUAL(parse("[1,]", 100, 8), -EINVAL);                 /* not strict */
    CU_ASSERT_EQUAL(parse("", 100, 8), -EINVAL);
    CU_ASSERT_EQUAL(parse("{\"a\":", 100, 8), -EINVAL);
}

/* ---- A loopback stand-in: answers `n` connections with the given responses in turn --------- */

typedef struct stand_in {
    int fd, port, n;
    const char *answers[4];
    char requests[4][4096];
} stand_in;

static void *serve(void *arg)
{
    stand_in *s = arg;
    for (int i = 0; i < s->n; i++) {
        struct pollfd pf = {.fd = s->fd, .events = POLLIN};
        if (poll(&pf, 1, 5000) != 1) /* a client that never comes fails the test, not hangs it */
            return NULL;
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        size_t got = 0;
        char *req = s->requests[i];
        for (;;) { /* headers, then Content-Length bytes of body */
            ssize_t r = read(c, req + got, sizeof s->requests[i] - 1 - got);
            if (r <= 0)
                break;
            got += (size_t)r;
            req[got] = 0;
            char *end = strstr(req, "\r\n\r\n");
            const char *cl = strstr(req, "Content-Length: ");
            if (end && (!cl || got >= (size_t)(end + 4 - req) + strtoul(cl + 16, NULL, 10)))
                break;
        }
        const char *a = s->answers[i];
        if (write(c, a, strlen(a)) < 0) {
            /* the client gave up; nothing to do */
        }
        close(c);
    }
    return NULL;
}

static int stand_in_start(stand_in *s, pthread_t *th)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(s->fd, 8) < 0 ||
        getsockname(s->fd, (struct sockaddr *)&sa, &sl) < 0)
        return -1;
    s->port = ntohs(sa.sin_port);
    return pthread_create(th, NULL, serve, s);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "we");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

#define OK_JSON "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
#define DENIED  "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

static void test_token_and_retry(void)
{
    char *dir = mv_test_tmpdir("kubec");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char tf[512];
    snprintf(tf, sizeof tf, "%s/token", dir);
    write_file(tf, "old-token\n");
    mv_kubec_cred_opts o = {.token_file = tf, .log_area = "test", .reread_s = 3600};
    mv_kubec_cred *c = NULL;
    CU_ASSERT_EQUAL_FATAL(mv_kubec_cred_create(&o, &c), 0);

    stand_in s = {.n = 3, .answers = {OK_JSON, DENIED, OK_JSON}};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(stand_in_start(&s, &th), 0);
    char url[128], err[256] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/x", s.port);
    mv_util_buf b = {.cap = 1024};
    long status = 0;
    CU_ASSERT_EQUAL(mv_kubec_request(c, url, "/api/x", NULL, 5000, &b, &status, err, sizeof err),
                    0);
    CU_ASSERT_EQUAL(status, 200);
    CU_ASSERT(b.len == 2 && !memcmp(b.data, "{}", 2));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.requests[0], "GET /api/x "));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.requests[0], "Authorization: Bearer old-token\r\n"));
    /* The token rotates; not re-read before reread_s, except after a 401. */
    write_file(tf, "new-token\n");
    CU_ASSERT_EQUAL(
        mv_kubec_request(c, url, "/api/x", "{\"k\":1}", 5000, &b, &status, err, sizeof err), 0);
    CU_ASSERT_EQUAL(status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(s.requests[1], "POST /api/x "));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.requests[1], "Authorization: Bearer old-token\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.requests[1], "Content-Type: application/json\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.requests[2], "Authorization: Bearer new-token\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.requests[2], "\r\n\r\n{\"k\":1}"));
    pthread_join(th, NULL);
    close(s.fd);
    mv_util_buf_free(&b);
    mv_kubec_cred_destroy(c);
    mv_test_rmrf(dir);
    free(dir);
}

static void test_limits_and_errors(void)
{
    mv_kubec_cred_opts o = {.log_area = "test"}; /* no token file: no Authorization header */
    mv_kubec_cred *c = NULL;
    CU_ASSERT_EQUAL_FATAL(mv_kubec_cred_create(&o, &c), 0);
    stand_in s = {.n = 1,
                  .answers = {"HTTP/1.1 200 OK\r\nContent-Length: 40\r\nConnection: close\r\n\r\n"
                              "{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\":1}"}};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(stand_in_start(&s, &th), 0);
    char url[128], err[256] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d/p", s.port);
    mv_util_buf b = {.cap = 16};
    long status = 0;
    CU_ASSERT_EQUAL(mv_kubec_request(c, url, "/p", NULL, 5000, &b, &status, err, sizeof err), -EIO);
    CU_ASSERT_STRING_EQUAL(err, "GET /p: answer too large");
    CU_ASSERT_PTR_NULL(strstr(s.requests[0], "Authorization:"));
    pthread_join(th, NULL);
    close(s.fd);

    CU_ASSERT_EQUAL(
        mv_kubec_request(c, "file:///etc/hostname", "f", NULL, 1000, &b, &status, err, sizeof err),
        -EIO);
    CU_ASSERT_EQUAL(strncmp(err, "GET f: ", 7), 0);
    /* A port nothing listens on (bound, not listening). */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    CU_ASSERT_EQUAL(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/p", ntohs(sa.sin_port));
    CU_ASSERT_EQUAL(mv_kubec_request(c, url, "/p", "{}", 1000, &b, &status, err, sizeof err), -EIO);
    CU_ASSERT_EQUAL(strncmp(err, "POST /p: ", 9), 0);
    close(fd);
    mv_util_buf_free(&b);
    mv_kubec_cred_destroy(c);
}

int main(void)
{
    mv_log_init("test_kubec", MV_LOG_ERROR);
    static const mv_test tests[] = {
        {"strict JSON parse", test_json},
        {"bearer token, re-read after a 401", test_token_and_retry},
        {"capped answers, protocols, unreachable", test_limits_and_errors},
    };
    return MV_TEST_RUN("kubec", tests);
}
