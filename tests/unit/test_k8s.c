/* Unit tests of the Kubernetes-mode modules: config, pod JSON and annotation parsing,
 * PodResources decoding, and the segment store's device-backed segments and pool. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "k8s/podresources/v1/api.pb-c.h"
#include "mv_config.h"
#include "mv_kube.h"
#include "mv_podres.h"
#include "mv_rpc.h"
#include "mv_segstore.h"
#include "mv_test.h"

/* ---- config ------------------------------------------------------------------------ */

static void test_config_defaults_and_yaml(void)
{
    mv_config c;
    char err[256];
    mv_config_defaults(&c);
    CU_ASSERT_STRING_EQUAL(c.resource_name, "microview.io/metrics");
    CU_ASSERT_EQUAL(c.page_size, 4096);
    CU_ASSERT_EQUAL(c.pool_size, 16u << 20);
    CU_ASSERT_STRING_EQUAL(c.container_path, "/var/run/microview");
    const char *y = "# comment\n"
                    "resource_name: example.com/pages\n"
                    "page_size: 8Ki\n"
                    "pool_size: \"1Mi\"\n"
                    "state_dir: /tmp/x\n"
                    "gc_interval_ms: 250\n";
    CU_ASSERT_EQUAL(mv_config_parse(&c, y, strlen(y), err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.resource_name, "example.com/pages");
    CU_ASSERT_EQUAL(c.page_size, 8192);
    CU_ASSERT_EQUAL(c.pool_size, 1u << 20);
    CU_ASSERT_EQUAL(c.gc_interval_ms, 250);
    /* flags (dash spelling) override the file */
    CU_ASSERT_EQUAL(mv_config_set(&c, "pool-size", "2Mi", err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.pool_size, 2u << 20);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.agent_socket, "/tmp/x/agent.sock");
    /* an empty document changes nothing */
    CU_ASSERT_EQUAL(mv_config_parse(&c, "", 0, err, sizeof err), 0);
    /* the disk reserve: 5% by default, 0..99 */
    CU_ASSERT_EQUAL(c.min_free_percent, 5);
    CU_ASSERT_EQUAL(mv_config_set(&c, "min-free-bytes", "64Mi", err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.min_free_bytes, 64u << 20);
    CU_ASSERT_EQUAL(mv_config_set(&c, "min_free_percent", "100", err, sizeof err), -EINVAL);
    CU_ASSERT_EQUAL(mv_config_set(&c, "min_free_percent", "0", err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.min_free_percent, 0);
}

static void test_config_errors(void)
{
    mv_config c;
    char err[256];
    const char *bad[] = {
        "nope: 1\n",                          /* unknown key */
        "page_size: -4096\n",                 /* negative */
        "page_size: 4Ti\n",                   /* bad suffix */
        "gc_interval_ms: [1, 2]\n",           /* list */
        "state_dir:\n  nested: 1\n",          /* nested mapping */
        "- a\n- b\n",                         /* not a mapping */
        "a: &x 1\nresource_name: *x\n",       /* alias */
        "page_size: 4096\n---\nb: 1\n",       /* two documents */
        "resource_name: [unterminated\n",     /* syntax */
        "page_size: 4096\npage_size: 8192\n", /* a key given twice */
        "pool_size: 1Mi\npool-size: 2Mi\n",   /* the same key in its other spelling */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mv_config_defaults(&c);
        err[0] = 0;
        CU_ASSERT_EQUAL(mv_config_parse(&c, bad[i], strlen(bad[i]), err, sizeof err), -EINVAL);
        CU_ASSERT(err[0] != 0);
        if (strstr(bad[i], "size: 8192") || strstr(bad[i], "pool-size"))
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "given twice (first on line 1)"));
    }
    mv_config_defaults(&c);
    mv_config_set(&c, "page_size", "1000", err, sizeof err);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), -EINVAL);
    CU_ASSERT(strstr(err, "multiple of 4096") != NULL);
    mv_config_defaults(&c);
    mv_config_set(&c, "resource_name", "metrics", err, sizeof err);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), -EINVAL);
    mv_config_defaults(&c);
    mv_config_set(&c, "endpoint", "kubelet.sock", err, sizeof err);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), -EINVAL);
}

/* ---- pod JSON and annotation --------------------------------------------------------- */

/* Remote-collector keys: booleans, IP[:PORT], and the combinations that make no sense. */
static void test_config_rdma(void)
{
    mv_config c;
    char err[256];
    mv_config_defaults(&c);
    CU_ASSERT_EQUAL(c.require_rdma, 0);
    CU_ASSERT_EQUAL(c.rdma_retry_ms, 5000u);
    const char *y = "rdma_listen: 10.0.0.5\n"
                    "collector_token_file: /etc/microview/token\n"
                    "require_rdma: true\n"
                    "listen: 0.0.0.0:7000\n"
                    "insecure_listen: true\n";
    CU_ASSERT_EQUAL(mv_config_parse(&c, y, strlen(y), err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.require_rdma, 1);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.rdma_ip, "10.0.0.5");
    CU_ASSERT_EQUAL(c.rdma_port, MV_CONFIG_RDMA_PORT);
    CU_ASSERT_EQUAL(mv_config_set(&c, "rdma-listen", "10.0.0.6:7600", err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_config_set(&c, "require-rdma", "no", err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.rdma_ip, "10.0.0.6");
    CU_ASSERT_EQUAL(c.rdma_port, 7600);
    CU_ASSERT_EQUAL(c.require_rdma, 0);
    CU_ASSERT_EQUAL(mv_config_set(&c, "require_rdma", "maybe", err, sizeof err), -EINVAL);
    CU_ASSERT(strstr(err, "true or false") != NULL);

    static const struct {
        const char *key, *value, *why;
    } bad[] = {
        {"rdma_listen", "10.0.0.5:0", "rdma_listen"},
        {"rdma_listen", "10.0.0.5:70000", "rdma_listen"},
        {"rdma_listen", ":7471", "rdma_listen"},
        {"rdma_listen", "10.0.0.5:x", "rdma_listen"},
        {"listen", "7000", "HOST:PORT"},
        {"rdma_retry_ms", "0", "positive"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mv_config_defaults(&c);
        mv_config_set(&c, "collector_token_file", "/t", err, sizeof err);
        mv_config_set(&c, "rdma_listen", "10.0.0.5", err, sizeof err);
        CU_ASSERT_EQUAL(mv_config_set(&c, bad[i].key, bad[i].value, err, sizeof err), 0);
        err[0] = 0;
        CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), -EINVAL);
        if (!strstr(err, bad[i].why))
            fprintf(stderr, "%s=%s: %s\n", bad[i].key, bad[i].value, err);
        CU_ASSERT(strstr(err, bad[i].why) != NULL);
    }
    mv_config_defaults(&c);
    mv_config_set(&c, "require_rdma", "true", err, sizeof err);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), -EINVAL);
    CU_ASSERT(strstr(err, "require_rdma needs rdma_listen") != NULL);
    mv_config_defaults(&c);
    mv_config_set(&c, "rdma_listen", "10.0.0.5", err, sizeof err);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), -EINVAL);
    CU_ASSERT(strstr(err, "collector_token_file") != NULL);

    /* The TCP control plane's TLS keys, plaintext by choice only, and segment_group. */
    static const struct {
        const char *k1, *v1, *k2, *v2, *why;
    } tcp[] = {
        {"listen", "127.0.0.1:7000", NULL, NULL, "insecure_listen"},
        {"tls_cert_file", "/c", "listen", "127.0.0.1:7000", "tls_key_file"},
        {"tls_require_client_cert", "true", "insecure_listen", "true", "tls_client_ca_file"},
        {"tls_cert_file", "/c", "tls_key_file", "/k", "needs listen"},
        {"admin_token_file", "/a", NULL, NULL, "admin_token_file needs listen"},
        {"segment_group", "4294967295", NULL, NULL, "segment_group"},
        {"segment_group", "no-such-group-mv", NULL, NULL, "no group named no-such-group-mv"},
    };
    for (size_t i = 0; i < sizeof tcp / sizeof tcp[0]; i++) {
        mv_config_defaults(&c);
        CU_ASSERT_EQUAL(mv_config_set(&c, tcp[i].k1, tcp[i].v1, err, sizeof err), 0);
        if (tcp[i].k2)
            CU_ASSERT_EQUAL(mv_config_set(&c, tcp[i].k2, tcp[i].v2, err, sizeof err), 0);
        err[0] = 0;
        CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), -EINVAL);
        if (!strstr(err, tcp[i].why))
            fprintf(stderr, "%s=%s: %s\n", tcp[i].k1, tcp[i].v1, err);
        CU_ASSERT(strstr(err, tcp[i].why) != NULL);
    }
    mv_config_defaults(&c);
    CU_ASSERT_EQUAL(c.segment_gid, -1);
    mv_config_set(&c, "listen", "127.0.0.1:7000", err, sizeof err);
    mv_config_set(&c, "tls-cert-file", "/c", err, sizeof err);
    mv_config_set(&c, "tls-key-file", "/k", err, sizeof err);
    mv_config_set(&c, "tls-client-ca-file", "/ca", err, sizeof err);
    mv_config_set(&c, "tls-require-client-cert", "true", err, sizeof err);
    mv_config_set(&c, "segment-group", "4321", err, sizeof err);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.segment_gid, 4321);
    CU_ASSERT_EQUAL(c.tls_require_client_cert, 1);
    mv_config_set(&c, "segment_group", "root", err, sizeof err);
    CU_ASSERT_EQUAL(mv_config_finish(&c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.segment_gid, 0);
}

static void test_pod_parse(void)
{
    const char *j = "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"web-0\","
                    "\"namespace\":\"team-a\",\"uid\":\"u1\",\"labels\":{\"app\":\"checkout\"},"
                    "\"annotations\":{\"microview.io/labels\":\"tier=web\"}},"
                    "\"spec\":{\"nodeName\":\"node-1\"},\"status\":{\"phase\":\"Running\"}}";
    mv_kube_pod p;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(mv_kube_parse_pod(j, strlen(j), &p, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(p.name, "web-0");
    CU_ASSERT_STRING_EQUAL(p.namespace_, "team-a");
    CU_ASSERT_STRING_EQUAL(p.node_name, "node-1");
    CU_ASSERT_EQUAL(p.nlabels, 1);
    CU_ASSERT_STRING_EQUAL(mv_kube_pod_annotation(&p, MV_KUBE_ANNOTATION), "tier=web");
    CU_ASSERT_PTR_NULL(mv_kube_pod_annotation(&p, "other"));
    mv_kube_pod_clear(&p);

    const char *bad[] = {
        "",
        "[]",
        "{\"kind\":\"Service\",\"metadata\":{\"name\":\"a\",\"namespace\":\"b\"}}",
        "{\"kind\":\"Pod\"}",
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":1,\"namespace\":\"b\"}}",
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\",\"namespace\":\"b\",\"labels\":{\"x\":1}}}",
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\",\"namespace\":\"b\",\"labels\":[]}}",
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\"}}",
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\",\"namespace\":\"b\"}} trailing",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(mv_kube_parse_pod(bad[i], strlen(bad[i]), &p, err, sizeof err), -EINVAL);
        CU_ASSERT_PTR_NULL(p.name);
    }
}

static int ninvalid;
static void count_invalid(void *arg, const char *entry, const char *why)
{
    (void)arg;
    (void)entry;
    (void)why;
    ninvalid++;
}

static void test_annotation_labels(void)
{
    mv_kube_kv *v;
    size_t n;
    ninvalid = 0;
    int rc = mv_kube_parse_labels(" app=checkout , tier=web,,bad-name=x,pod=evil,noeq,__x=1,"
                                  "app=again,empty=",
                                  &v, &n, count_invalid, NULL);
    CU_ASSERT_EQUAL(rc, 3);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT_STRING_EQUAL(v[0].key, "app");
    CU_ASSERT_STRING_EQUAL(v[0].value, "checkout");
    CU_ASSERT_STRING_EQUAL(v[1].key, "tier");
    CU_ASSERT_STRING_EQUAL(v[2].key, "empty");
    CU_ASSERT_STRING_EQUAL(v[2].value, "");
    CU_ASSERT_EQUAL(ninvalid, 5); /* bad-name, pod, noeq, __x, duplicate app */
    mv_kube_kvs_free(v, n);
    CU_ASSERT_EQUAL(mv_kube_parse_labels(NULL, &v, &n, NULL, NULL), 0);
    CU_ASSERT_EQUAL(n, 0);
    /* at most 13 */
    char many[1024] = "";
    size_t off = 0;
    for (int i = 0; i < 20; i++)
        off += (size_t)snprintf(many + off, sizeof many - off, "%sl%d=v", i ? "," : "", i);
    ninvalid = 0;
    CU_ASSERT_EQUAL(mv_kube_parse_labels(many, &v, &n, count_invalid, NULL),
                    MV_KUBE_POD_LABELS_MAX);
    CU_ASSERT_EQUAL(ninvalid, 20 - MV_KUBE_POD_LABELS_MAX);
    mv_kube_kvs_free(v, n);
}

/* ---- PodResources --------------------------------------------------------------------- */

static void test_podres_parse(void)
{
    char *ids_a[] = {"page-0", "page-1"}, *ids_b[] = {"gpu-0"};
    V1__ContainerDevices da = V1__CONTAINER_DEVICES__INIT, db = V1__CONTAINER_DEVICES__INIT;
    da.resource_name = "microview.io/metrics";
    da.n_device_ids = 2;
    da.device_ids = ids_a;
    db.resource_name = "example.com/gpu";
    db.n_device_ids = 1;
    db.device_ids = ids_b;
    V1__ContainerDevices *devs[] = {&da, &db}, *devs_b[] = {&db};
    V1__ContainerResources c1 = V1__CONTAINER_RESOURCES__INIT, c2 = V1__CONTAINER_RESOURCES__INIT;
    c1.name = "app";
    c1.n_devices = 2;
    c1.devices = devs;
    c2.name = "side";
    c2.n_devices = 1;
    c2.devices = devs_b;
    V1__ContainerResources *cs[] = {&c1, &c2};
    V1__PodResources p = V1__POD_RESOURCES__INIT;
    p.name = "web-0";
    p.namespace_ = "team-a";
    p.n_containers = 2;
    p.containers = cs;
    V1__PodResources *ps[] = {&p};
    V1__ListPodResourcesResponse r = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    r.n_pod_resources = 1;
    r.pod_resources = ps;
    mv_rpc_buf b;
    CU_ASSERT_EQUAL_FATAL(mv_rpc_pack(&r.base, &b), 0);
    mv_podres_entry *v;
    size_t n;
    char err[128];
    CU_ASSERT_EQUAL_FATAL(
        mv_podres_parse(b.data, b.len, "microview.io/metrics", &v, &n, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(n, 1); /* only the container with our resource */
    CU_ASSERT_STRING_EQUAL(v[0].container, "app");
    CU_ASSERT_EQUAL(v[0].ndevices, 2);
    CU_ASSERT_PTR_EQUAL(mv_podres_find(v, n, "page-1"), &v[0]);
    CU_ASSERT_PTR_NULL(mv_podres_find(v, n, "gpu-0"));
    mv_podres_free(v, n);
    CU_ASSERT_EQUAL(mv_podres_parse("\xff\xff", 2, "x/y", &v, &n, err, sizeof err), -EIO);
    mv_rpc_buf_free(&b);
}

/* ---- segstore: device-backed segments ---------------------------------------------------- */

static char *tmpdir(void)
{
    char tmpl[] = "/tmp/mv-k8s-unit-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static void rmrf(const char *d)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

static void test_segstore_devices(void)
{
    char *dir = tmpdir();
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    mv_segstore_opts o = {.dir = dir, .reap_interval_ms = -1, .pool_pages = 4, .page_size = 4096};
    mv_segstore *st;
    CU_ASSERT_EQUAL_FATAL(mv_segstore_open(&o, &st), 0);
    const char *d1[] = {"page-0", "page-1"}, *d2[] = {"page-1"}, *d3[] = {"page-2", "page-3"},
               *d4[] = {"page-4"};
    mv_segstore_seg s1, s;
    char err[256];
    mv_segstore_label lab = {"device", "page-0"};
    CU_ASSERT_EQUAL_FATAL(mv_segstore_create_dev(st, d1, 2, &lab, 1, &s1, err, sizeof err), 0);
    CU_ASSERT_EQUAL(s1.size, 8192);
    CU_ASSERT_EQUAL(s1.ndevices, 2);
    char segdir[512], want[600];
    CU_ASSERT_EQUAL(mv_segstore_seg_dir(st, s1.id, segdir, sizeof segdir), 0);
    snprintf(want, sizeof want, "%s/segment", segdir);
    CU_ASSERT_STRING_EQUAL(s1.path, want);
    struct stat sb;
    CU_ASSERT(stat(s1.path, &sb) == 0 && sb.st_size == 8192);
    /* a held device is refused with EBUSY, a full pool with ENOSPC */
    CU_ASSERT_EQUAL(mv_segstore_create_dev(st, d2, 1, NULL, 0, &s, err, sizeof err), -EBUSY);
    CU_ASSERT(strstr(err, "page-1") != NULL);
    CU_ASSERT_EQUAL(mv_segstore_create_dev(st, d3, 2, NULL, 0, &s, err, sizeof err), 0);
    mv_segstore_seg_clear(&s);
    CU_ASSERT_EQUAL(mv_segstore_create_dev(st, d4, 1, NULL, 0, &s, err, sizeof err), -ENOSPC);
    CU_ASSERT(strstr(err, "pool exhausted") != NULL);
    uint64_t total, used;
    mv_segstore_pool(st, &total, &used);
    CU_ASSERT(total == 4 && used == 4);
    /* lookups and label updates */
    CU_ASSERT_EQUAL(mv_segstore_find_device(st, "page-1", &s), 0);
    CU_ASSERT_STRING_EQUAL(s.id, s1.id);
    mv_segstore_seg_clear(&s);
    CU_ASSERT_EQUAL(mv_segstore_find_device(st, "page-9", &s), -ENOENT);
    mv_segstore_label ident[] = {{"namespace", "a"}, {"pod", "p"}, {"container", "c"}};
    uint64_t rev0, rev1, rev2;
    mv_segstore_seg *v;
    size_t n;
    mv_segstore_list(st, &v, &n, &rev0);
    mv_segstore_segs_free(v, n);
    CU_ASSERT_EQUAL(mv_segstore_set_labels(st, s1.id, ident, 3, err, sizeof err), 1);
    mv_segstore_list(st, &v, &n, &rev1);
    mv_segstore_segs_free(v, n);
    CU_ASSERT_EQUAL(mv_segstore_set_labels(st, s1.id, ident, 3, err, sizeof err), 0);
    mv_segstore_list(st, &v, &n, &rev2);
    mv_segstore_segs_free(v, n);
    CU_ASSERT(rev1 == rev0 + 1 && rev2 == rev1);
    mv_segstore_label badl = {"bad-name", "x"};
    CU_ASSERT_EQUAL(mv_segstore_set_labels(st, s1.id, &badl, 1, err, sizeof err), -EINVAL);
    CU_ASSERT_EQUAL(mv_segstore_set_labels(st, "seg-0000000000000000", ident, 3, err, sizeof err),
                    -ENOENT);
    /* persistence: devices and labels survive a reopen */
    mv_segstore_close(st);
    CU_ASSERT_EQUAL_FATAL(mv_segstore_open(&o, &st), 0);
    CU_ASSERT_EQUAL(mv_segstore_find_device(st, "page-0", &s), 0);
    CU_ASSERT_EQUAL(s.ndevices, 2);
    CU_ASSERT_EQUAL(s.nlabels, 3);
    CU_ASSERT_STRING_EQUAL(s.path, s1.path);
    mv_segstore_seg_clear(&s);
    mv_segstore_pool(st, &total, &used);
    CU_ASSERT_EQUAL(used, 4);
    /* release returns the pages and removes the directory */
    CU_ASSERT_EQUAL(mv_segstore_release(st, s1.id), 0);
    mv_segstore_pool(st, &total, &used);
    CU_ASSERT_EQUAL(used, 2);
    CU_ASSERT(stat(segdir, &sb) < 0 && errno == ENOENT);
    /* a new segment on the same devices is all zeros past its header */
    CU_ASSERT_EQUAL_FATAL(mv_segstore_create_dev(st, d1, 2, NULL, 0, &s, err, sizeof err), 0);
    FILE *f = fopen(s.path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned char buf[8192];
    CU_ASSERT_EQUAL(fread(buf, 1, sizeof buf, f), sizeof buf);
    fclose(f);
    int nonzero = 0;
    for (size_t i = 4096; i < sizeof buf; i++)
        nonzero |= buf[i];
    CU_ASSERT_EQUAL(nonzero, 0);
    mv_segstore_seg_clear(&s);
    /* bad requests */
    const char *dup[] = {"page-0", "page-0"}, *badid[] = {"a/b"};
    CU_ASSERT_EQUAL(mv_segstore_create_dev(st, dup, 2, NULL, 0, &s, err, sizeof err), -EINVAL);
    CU_ASSERT_EQUAL(mv_segstore_create_dev(st, badid, 1, NULL, 0, &s, err, sizeof err), -EINVAL);
    mv_segstore_seg_clear(&s1);
    mv_segstore_close(st);
    rmrf(dir);
    free(dir);
}

static void test_catalog_devices_parse(void)
{
    const char *good =
        "{\"version\":1,\"revision\":3,\"segments\":[{\"id\":\"seg-00000000000000aa\","
        "\"size_bytes\":8192,\"owner_pid\":0,\"created_unix_ns\":1,"
        "\"devices\":[\"page-0\",\"page-1\"],\"labels\":[]}]}";
    mv_segstore_seg *v;
    size_t n;
    uint64_t rev;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(
        mv_segstore_catalog_parse(good, strlen(good), "/d", &v, &n, &rev, err, sizeof err), 0);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(v[0].ndevices, 2);
    CU_ASSERT_STRING_EQUAL(v[0].path, "/d/seg-00000000000000aa/segment");
    mv_segstore_segs_free(v, n);
    const char *bad =
        "{\"version\":1,\"revision\":3,\"segments\":[{\"id\":\"seg-00000000000000aa\","
        "\"size_bytes\":8192,\"owner_pid\":0,\"created_unix_ns\":1,"
        "\"devices\":[\"../x\"]}]}";
    CU_ASSERT_EQUAL(
        mv_segstore_catalog_parse(bad, strlen(bad), "/d", &v, &n, &rev, err, sizeof err), -EINVAL);
}

int main(void)
{
    static const mv_test tests[] = {
        {"config defaults, YAML and overrides", test_config_defaults_and_yaml},
        {"config errors", test_config_errors},
        {"config: remote collectors (listen, rdma_listen, require_rdma)", test_config_rdma},
        {"pod JSON parsing", test_pod_parse},
        {"microview.io/labels annotation", test_annotation_labels},
        {"PodResources List decoding", test_podres_parse},
        {"segstore device-backed segments and pool", test_segstore_devices},
        {"catalog devices parsing", test_catalog_devices_parse},
    };
    int fails = MV_TEST_RUN("k8s", tests);
    return fails;
}
