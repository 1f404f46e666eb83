/* test_util: the parsers of operator input (mv_parse_*), table-driven, and that the YAML
 * configuration reads sizes, numbers and listen addresses with the same parsers as the flags. */
#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mv_config.h"
#include "mv_test.h"
#include "mv_util.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* rc 0: `want` is the value; otherwise `why` is a part of the message. */
typedef struct num_case {
    const char *text;
    uint64_t min, max;
    int rc;
    uint64_t want;
    const char *why;
} num_case;

static void check_num(const char *what, const num_case *t, size_t n,
                      int (*parse)(const char *, uint64_t, uint64_t, uint64_t *, char *, size_t))
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 12345;
        char err[MV_ERR_MAX] = "";
        int rc = parse(t[i].text, t[i].min, t[i].max, &v, err, sizeof err);
        if (rc != t[i].rc || (rc == 0 && v != t[i].want) ||
            (rc != 0 && (v != 12345 || !strstr(err, t[i].why))))
            fprintf(stderr, "%s('%s'): rc=%d v=%llu err=%s\n", what, t[i].text, rc,
                    (unsigned long long)v, err);
        CU_ASSERT_EQUAL(rc, t[i].rc);
        if (rc == 0) {
            CU_ASSERT_EQUAL(v, t[i].want);
        } else {
            CU_ASSERT_EQUAL(v, 12345); /* untouched on failure */
            CU_ASSERT_PTR_NOT_NULL(strstr(err, t[i].why));
            CU_ASSERT_PTR_NOT_NULL(strstr(err, t[i].text)); /* quotes what was given */
        }
    }
}

static void test_u64(void)
{
    static const num_case t[] = {
        {"0", 0, 10, 0, 0, NULL},
        {"10", 0, 10, 0, 10, NULL},
        {"007", 0, 10, 0, 7, NULL},
        {"18446744073709551615", 0, UINT64_MAX, 0, UINT64_MAX, NULL},
        {"18446744073709551616", 0, UINT64_MAX, -ERANGE, 0, "out of range"},
        {"99999999999999999999999", 0, UINT64_MAX, -ERANGE, 0, "out of range"},
        {"11", 0, 10, -ERANGE, 0, "from 0 to 10"},
        {"0", 1, 60000, -ERANGE, 0, "from 1 to 60000"},
        {"3", 4, UINT64_MAX, -ERANGE, 0, "want a whole number of at least 4"},
        {"", 0, 10, -EINVAL, 0, "not a whole number"},
        {"-1", 0, 10, -EINVAL, 0, "not a whole number"},
        {"+1", 0, 10, -EINVAL, 0, "not a whole number"},
        {" 1", 0, 10, -EINVAL, 0, "not a whole number"},
        {"1 ", 0, 10, -EINVAL, 0, "not a whole number"},
        {"0x10", 0, 100, -EINVAL, 0, "not a whole number"},
        {"1.5", 0, 10, -EINVAL, 0, "not a whole number"},
        {"10ms", 0, 100, -EINVAL, 0, "want a whole number from 0 to 100"},
        {"4Ki", 0, 1 << 20, -EINVAL, 0, "not a whole number"},
    };
    check_num("mv_util_parse_u64", t, sizeof t / sizeof t[0], mv_util_parse_u64);
}

static void test_size(void)
{
    static const num_case t[] = {
        {"0", 0, GiB, 0, 0, NULL},
        {"4096", 0, GiB, 0, 4096, NULL},
        {"4Ki", 0, GiB, 0, 4 * KiB, NULL},
        {"16Mi", 0, GiB, 0, 16 * MiB, NULL},
        {"1Gi", 0, GiB, 0, GiB, NULL},
        {"0Ki", 0, GiB, 0, 0, NULL},
        {"1024Gi", 0, 1024 * GiB, 0, 1024 * GiB, NULL},
        {"17179869183Gi", 0, UINT64_MAX, 0, 17179869183ull * GiB, NULL},
        {"17179869184Gi", 0, UINT64_MAX, -ERANGE, 0, "out of range"},
        {"2Gi", 0, GiB, -ERANGE, 0, "from 0 to 1Gi"},
        {"1073741825", 0, GiB, -ERANGE, 0, "out of range"},
        {"4095", 4096, 64 * MiB, -ERANGE, 0, "from 4Ki to 64Mi"},
        {"4Ki", 4097, 5000, -ERANGE, 0, "from 4097 to 5000"},
        {"4k", 0, GiB, -EINVAL, 0, "decimal k, M, G are not taken"},
        {"4k", 4096, UINT64_MAX, -EINVAL, 0, "of at least 4Ki"},
        {"4K", 0, GiB, -EINVAL, 0, "not a size"},
        {"4KB", 0, GiB, -EINVAL, 0, "not a size"},
        {"4KiB", 0, GiB, -EINVAL, 0, "not a size"},
        {"4ki", 0, GiB, -EINVAL, 0, "not a size"},
        {"4Ti", 0, UINT64_MAX, -EINVAL, 0, "with Ki, Mi or Gi"},
        {"4 Ki", 0, GiB, -EINVAL, 0, "not a size"},
        {"Ki", 0, GiB, -EINVAL, 0, "not a size"},
        {"", 0, GiB, -EINVAL, 0, "not a size"},
        {"-4096", 0, GiB, -EINVAL, 0, "not a size"},
        {"+4096", 0, GiB, -EINVAL, 0, "not a size"},
        {"1.5Mi", 0, GiB, -EINVAL, 0, "not a size"},
    };
    check_num("mv_util_parse_size", t, sizeof t / sizeof t[0], mv_util_parse_size);
}

static void test_number(void)
{
    static const struct {
        const char *text;
        double min, max;
        int rc;
        double want;
        const char *why;
    } t[] = {
        {"0.01", 0.0001, 0.5, 0, 0.01, NULL},
        {"30", 0, 3600, 0, 30, NULL},
        {"2.5e-3", 0, 1, 0, 0.0025, NULL},
        {".5", 0, 1, 0, 0.5, NULL},
        {"5.", 0, 10, 0, 5, NULL},
        {"1E2", 0, 1000, 0, 100, NULL},
        {"0.6", 0.0001, 0.5, -ERANGE, 0, "want a decimal number from 0.0001 to 0.5"},
        {"1e999", 0, 1e9, -ERANGE, 0, "out of range"},
        {"", 0, 1, -EINVAL, 0, "not a decimal number"},
        {".", 0, 1, -EINVAL, 0, "not a decimal number"},
        {"-0.1", 0, 1, -EINVAL, 0, "not a decimal number"},
        {"+1", 0, 10, -EINVAL, 0, "not a decimal number"},
        {"0x1p3", 0, 100, -EINVAL, 0, "not a decimal number"},
        {"inf", 0, 1e9, -EINVAL, 0, "not a decimal number"},
        {"nan", 0, 1e9, -EINVAL, 0, "not a decimal number"},
        {"1e", 0, 10, -EINVAL, 0, "not a decimal number"},
        {"1.5s", 0, 10, -EINVAL, 0, "not a decimal number"},
        {" 1", 0, 10, -EINVAL, 0, "not a decimal number"},
        {"1,5", 0, 10, -EINVAL, 0, "not a decimal number"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char err[MV_ERR_MAX] = "";
        double v = 12345;
        int rc = mv_util_parse_number(t[i].text, t[i].min, t[i].max, &v, err, sizeof err);
        CU_ASSERT_EQUAL(rc, t[i].rc);
        if (rc != t[i].rc)
            fprintf(stderr, "mv_util_parse_number('%s'): rc %d, want %d (%s)\n", t[i].text, rc,
                    t[i].rc, err);
        if (t[i].rc == 0) {
            CU_ASSERT_DOUBLE_EQUAL(v, t[i].want, 1e-12);
        } else {
            CU_ASSERT_EQUAL(v, 12345); /* untouched on failure */
            CU_ASSERT_PTR_NOT_NULL(strstr(err, t[i].why));
            CU_ASSERT_PTR_NOT_NULL(strstr(err, t[i].text));
        }
    }
}

typedef struct listen_case {
    const char *text;
    unsigned flags;
    int ok;
    const char *host; /* ok: the host written; otherwise a part of the message */
    uint16_t port;
} listen_case;

#define ZERO MV_LISTEN_PORT_ZERO
#define ANY  MV_LISTEN_ANY_HOST
#define OPT  MV_LISTEN_PORT_OPTIONAL

static void test_listen(void)
{
    static const listen_case t[] = {
        {"127.0.0.1:7470", ZERO, 1, "127.0.0.1", 7470},
        {"0.0.0.0:0", ZERO, 1, "0.0.0.0", 0},
        {"node-1.example:65535", 0, 1, "node-1.example", 65535},
        {"[::1]:9469", ZERO, 1, "::1", 9469},
        {"[fe80::1%eth0]:1", 0, 1, "fe80::1%eth0", 1},
        {":8443", ANY | ZERO, 1, "", 8443},
        {"[::]:8443", ANY | ZERO, 1, "::", 8443},
        {"10.0.0.5", OPT, 1, "10.0.0.5", 7471}, /* the port keeps its default */
        {"10.0.0.5:7600", OPT, 1, "10.0.0.5", 7600},
        {"[fd00::5]", OPT, 1, "fd00::5", 7471},
        {"127.0.0.1:99999", ZERO, 0, "above 65535", 0},
        {"127.0.0.1:4294967296", ZERO, 0, "above 65535", 0},
        {"127.0.0.1:99999999999999999999999", ZERO, 0, "above 65535", 0},
        {"127.0.0.1:0", 0, 0, "port 0 is not taken", 0},
        {"10.0.0.5:0", OPT, 0, "PORT 1..65535", 0},
        {"nonsense", ZERO, 0, "want HOST:PORT", 0},
        {"nonsense", ZERO, 0, "no port", 0},
        {"8443", ANY | ZERO, 0, "a port alone is written with a colon, :PORT", 0},
        {"8443", ZERO, 0, "a port alone needs HOST: before it", 0},
        {"7000", 0, 0, "want HOST:PORT with PORT 1..65535", 0},
        {"127.0.0.1:", ZERO, 0, "not a number", 0},
        {"127.0.0.1:x", ZERO, 0, "not a number", 0},
        {"127.0.0.1:+80", ZERO, 0, "not a number", 0},
        {"127.0.0.1:-1", ZERO, 0, "not a number", 0},
        {"127.0.0.1: 80", ZERO, 0, "not a number", 0},
        {":7470", ZERO, 0, "no host", 0},
        {":7471", OPT, 0, "no host", 0},
        {"", ANY | ZERO, 0, "no port", 0},
        {"", OPT, 0, "no host", 0},
        {"::1:9469", ANY | ZERO, 0, "IPv6 address goes in brackets", 0},
        {"[::1:9469", ZERO, 0, "closing bracket", 0},
        {"[]:9469", ANY | ZERO, 0, "nothing between the brackets", 0},
        {"[::1]9469", ZERO, 0, "after a colon", 0},
        {"[::1]", ZERO, 0, "after a colon", 0},
        {"bad host:80", ZERO, 0, "a space", 0},
        {"a]b:80", ZERO, 0, "bracket", 0},
        {"tab\there:80", ZERO, 0, "control character", 0},
        {"[::1]:99999", ZERO, 0, "[::1]:7470", 0}, /* the message shows the accepted form */
        {"x:99999", ANY | ZERO, 0, "no HOST = every address", 0},
        {"x:99999", ZERO, 0, "(0 = any free port)", 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char host[64] = "unset", err[MV_ERR_MAX] = "";
        uint16_t port = 7471;
        int rc =
            mv_util_parse_listen(t[i].text, t[i].flags, host, sizeof host, &port, err, sizeof err);
        int good = t[i].ok ? rc == 0 && strcmp(host, t[i].host) == 0 && port == t[i].port
                           : rc == -EINVAL && strstr(err, t[i].host) && strstr(err, t[i].text) &&
                                 strcmp(host, "unset") == 0 && port == 7471;
        if (!good)
            fprintf(stderr, "mv_util_parse_listen('%s', %u): rc=%d host=%s port=%u err=%s\n",
                    t[i].text, t[i].flags, rc, host, port, err);
        CU_ASSERT(good);
    }
    /* A host that does not fit the caller's buffer is refused, never cut. */
    char small[8], err[MV_ERR_MAX];
    uint16_t port = 0;
    CU_ASSERT_EQUAL(
        mv_util_parse_listen("1234567:80", 0, small, sizeof small, &port, err, sizeof err), 0);
    CU_ASSERT_EQUAL(
        mv_util_parse_listen("12345678:80", 0, small, sizeof small, &port, err, sizeof err),
        -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "too long"));
    /* A long text is shown cut in the message, which still says what is accepted. */
    char big[3000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CU_ASSERT_EQUAL(mv_util_parse_listen(big, 0, small, sizeof small, &port, err, sizeof err),
                    -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "want HOST:PORT"));
}

/* The YAML configuration and its flag spelling take sizes, numbers and addresses with the same
 * parsers, so a value means the same in a file, in a flag of either mode and in the webhook. */
static void test_config_shares_parsers(void)
{
    static const char *sizes[] = {"4096", "8Ki", "1Mi", "1Gi", "2Gi", "4k", "4Ti", "-1", "", "x"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        mv_config c;
        char e1[MV_ERR_MAX] = "", e2[MV_ERR_MAX] = "";
        uint64_t v = 0;
        mv_config_defaults(&c);
        int rc_cfg = mv_config_set(&c, "page-size", sizes[i], e1, sizeof e1);
        int rc_flag = mv_util_parse_size(sizes[i], 0, GiB, &v, e2, sizeof e2);
        CU_ASSERT_EQUAL(rc_cfg == 0, rc_flag == 0);
        if (rc_cfg == 0 && rc_flag == 0)
            CU_ASSERT_EQUAL(c.page_size, v);
        if (rc_cfg != 0 && rc_flag != 0) /* the same reason, named by the key */
            CU_ASSERT_PTR_NOT_NULL(strstr(e1, e2));
    }
    mv_config c;
    char err[MV_ERR_MAX];
    mv_config_defaults(&c);
    CU_ASSERT_EQUAL(mv_config_set(&c, "gc_interval_ms", "+5", err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "gc_interval_ms: '+5' is not a whole number"));
    CU_ASSERT_EQUAL(mv_config_set(&c, "gc_interval_ms", "3600001", err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "from 0 to 3600000"));
    CU_ASSERT_EQUAL(mv_config_set(&c, "max_segment_size", "1Gi", err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.max_segment_size, GiB);
    /* listen: HOST:PORT, port 0 = any free port, [v6]; rdma_listen: IP[:PORT], port 1.. */
    static const struct {
        const char *key, *value;
        int ok;
        const char *why;
    } addrs[] = {
        {"listen", "127.0.0.1:0", 1, NULL},
        {"listen", "[::1]:7000", 1, NULL},
        {"listen", "127.0.0.1:99999", 0, "listen: '127.0.0.1:99999': the port is above 65535"},
        {"listen", ":7000", 0, "no host"},
        {"rdma_listen", "[fd00::5]:7600", 1, NULL},
        {"rdma_listen", "10.0.0.5:0", 0, "rdma_listen: '10.0.0.5:0': port 0 is not taken"},
        {"rdma_listen", "fd00::5", 0, "brackets"},
    };
    for (size_t i = 0; i < sizeof addrs / sizeof addrs[0]; i++) {
        mv_config_defaults(&c);
        mv_config_set(&c, "collector_token_file", "/t", err, sizeof err);
        /* A listener's address is what is checked here, not its TLS (test_k8s checks that). */
        mv_config_set(&c, "insecure_listen", "true", err, sizeof err);
        CU_ASSERT_EQUAL(mv_config_set(&c, addrs[i].key, addrs[i].value, err, sizeof err), 0);
        err[0] = 0;
        int rc = mv_config_finish(&c, err, sizeof err);
        if ((rc == 0) != addrs[i].ok || (!addrs[i].ok && !strstr(err, addrs[i].why)))
            fprintf(stderr, "%s=%s: rc=%d %s\n", addrs[i].key, addrs[i].value, rc, err);
        CU_ASSERT_EQUAL(rc == 0, addrs[i].ok);
        if (!addrs[i].ok)
            CU_ASSERT_PTR_NOT_NULL(strstr(err, addrs[i].why));
    }
    mv_config_defaults(&c);
    mv_config_set(&c, "collector_token_file", "/t", err, sizeof err);
    mv_config_set(&c, "rdma_listen", "[fd00::5]:7600", err, sizeof err);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.rdma_ip, "fd00::5");
    CU_ASSERT_EQUAL(c.rdma_port, 7600);
}

/* File modes: octal permission bits only, strictly. */
static void test_mode(void)
{
    static const struct {
        const char *text;
        int rc;
        uint32_t want;
        const char *why;
    } t[] = {
        {"0660", 0, 0660, NULL},
        {"660", 0, 0660, NULL},
        {"0666", 0, 0666, NULL},
        {"0", 0, 0, NULL},
        {"0777", 0, 0777, NULL},
        {"0000", 0, 0, NULL},
        {"999", -EINVAL, 0, "is not an octal mode: want permission bits as octal digits 0-7"},
        {"0680", -EINVAL, 0, "is not an octal mode"},
        {"rw", -EINVAL, 0, "symbolic modes are not taken"},
        {"u+rw", -EINVAL, 0, "is not an octal mode"},
        {"", -EINVAL, 0, "is not an octal mode"},
        {"00660", -EINVAL, 0, "0000 to 0777"},
        {"0o660", -EINVAL, 0, "is not an octal mode"},
        {"0x1b6", -EINVAL, 0, "is not an octal mode"},
        {" 660", -EINVAL, 0, "is not an octal mode"},
        {"-660", -EINVAL, 0, "is not an octal mode"},
        {"1777", -ERANGE, 0, "out of range"},
        {"4755", -ERANGE, 0, "no setuid, setgid or sticky bit"},
        {"7777", -ERANGE, 0, "out of range"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        uint32_t v = 12345;
        char err[MV_ERR_MAX] = "";
        int rc = mv_util_parse_mode(t[i].text, &v, err, sizeof err);
        if (rc != t[i].rc || (rc == 0 && v != t[i].want) || (rc && !strstr(err, t[i].why)))
            fprintf(stderr, "mv_util_parse_mode('%s'): rc=%d v=%o err=%s\n", t[i].text, rc, v, err);
        CU_ASSERT_EQUAL(rc, t[i].rc);
        if (rc == 0) {
            CU_ASSERT_EQUAL(v, t[i].want);
        } else {
            CU_ASSERT_EQUAL(v, 12345);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, t[i].why));
            char quoted[64];
            snprintf(quoted, sizeof quoted, "'%s'", t[i].text);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, quoted));
        }
    }
}

/* Groups: a numeric gid as given, a name looked up, nothing else. */
static void test_group(void)
{
    uint32_t g = 7;
    char err[MV_ERR_MAX] = "";
    CU_ASSERT_EQUAL(mv_util_parse_group("0", &g, err, sizeof err), 0);
    CU_ASSERT_EQUAL(g, 0);
    CU_ASSERT_EQUAL(mv_util_parse_group("4242", &g, err, sizeof err), 0); /* no entry needed */
    CU_ASSERT_EQUAL(g, 4242);
    CU_ASSERT_EQUAL(mv_util_parse_group("4294967294", &g, err, sizeof err), 0);
    CU_ASSERT_EQUAL(g, 4294967294u);
    g = 7;
    CU_ASSERT_EQUAL(mv_util_parse_group("4294967295", &g, err, sizeof err), -ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "'4294967295' is out of range"));
    CU_ASSERT_EQUAL(mv_util_parse_group("99999999999999999999999", &g, err, sizeof err), -ERANGE);
    CU_ASSERT_EQUAL(g, 7);
    static const char *const bad[] = {"no-such-group-mv", "", "-1", "+5", " 5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CU_ASSERT_EQUAL(mv_util_parse_group(bad[i], &g, err, sizeof err), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "is not a group on this host: want a group name"));
        CU_ASSERT_EQUAL(g, 7);
    }
    /* A name this host knows: the group of gid 0 (root on every Linux). */
    struct group *gr = getgrgid(0);
    if (gr) {
        CU_ASSERT_EQUAL(mv_util_parse_group(gr->gr_name, &g, err, sizeof err), 0);
        CU_ASSERT_EQUAL(g, 0);
    }
}

/* GLIBC_TUNABLES and the kernel's bracketed settings, as mv_util_malloc_huge_pages reads them. */
static void test_memory_settings(void)
{
    char v[8] = "x";
    CU_ASSERT_EQUAL(mv_util_parse_tunable(NULL, "glibc.malloc.hugetlb", v, sizeof v), 0);
    CU_ASSERT_STRING_EQUAL(v, "");
    CU_ASSERT_EQUAL(mv_util_parse_tunable("", "glibc.malloc.hugetlb", v, sizeof v), 0);
    CU_ASSERT_EQUAL(
        mv_util_parse_tunable("glibc.malloc.hugetlb=1", "glibc.malloc.hugetlb", v, sizeof v), 1);
    CU_ASSERT_STRING_EQUAL(v, "1");
    CU_ASSERT_EQUAL(mv_util_parse_tunable("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0:"
                                          "glibc.malloc.hugetlb=2",
                                          "glibc.malloc.hugetlb", v, sizeof v),
                    1);
    CU_ASSERT_STRING_EQUAL(v, "2"); /* the last setting wins */
    /* A longer name that starts with the one asked for, and a name without a value. */
    CU_ASSERT_EQUAL(mv_util_parse_tunable("glibc.malloc.hugetlbx=1:glibc.malloc.hugetlb",
                                          "glibc.malloc.hugetlb", v, sizeof v),
                    0);
    CU_ASSERT_EQUAL(
        mv_util_parse_tunable("glibc.malloc.hugetlb=", "glibc.malloc.hugetlb", v, sizeof v), 1);
    CU_ASSERT_STRING_EQUAL(v, "");
    CU_ASSERT_EQUAL(
        mv_util_parse_tunable("glibc.malloc.hugetlb=12345678", "glibc.malloc.hugetlb", v, sizeof v),
        -ERANGE);
    CU_ASSERT_STRING_EQUAL(v, "");

    char w[16] = "x";
    CU_ASSERT_EQUAL(mv_util_parse_bracketed("always [madvise] never\n", w, sizeof w), 0);
    CU_ASSERT_STRING_EQUAL(w, "madvise");
    CU_ASSERT_EQUAL(mv_util_parse_bracketed("[always] madvise never", w, sizeof w), 0);
    CU_ASSERT_STRING_EQUAL(w, "always");
    CU_ASSERT_EQUAL(
        mv_util_parse_bracketed("always defer defer+madvise [madvise] never", w, sizeof w), 0);
    CU_ASSERT_STRING_EQUAL(w, "madvise");
    static const char *const bad[] = {
        "", "always madvise never", "[]", "[mad vise]", "[madvise", "[a\nb]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(mv_util_parse_bracketed(bad[i], w, sizeof w), -EINVAL);
    CU_ASSERT_EQUAL(mv_util_parse_bracketed("[a_very_long_setting_name]", w, sizeof w), -ERANGE);

    /* This process: the mode is one the kernel names (or unknown), the tunable as set. */
    char thp[16];
    int h = mv_util_malloc_huge_pages(thp, sizeof thp);
    CU_ASSERT(h >= -1 && h <= 2);
    CU_ASSERT(strcmp(thp, "always") == 0 || strcmp(thp, "madvise") == 0 ||
              strcmp(thp, "never") == 0 || strcmp(thp, "unknown") == 0);
}

int main(void)
{
    static const mv_test tests[] = {
        {"u64", test_u64},
        {"size", test_size},
        {"number", test_number},
        {"listen", test_listen},
        {"mode", test_mode},
        {"group", test_group},
        {"memory_settings", test_memory_settings},
        {"config_shares_parsers", test_config_shares_parsers},
    };
    return MV_TEST_RUN("util", tests);
}
