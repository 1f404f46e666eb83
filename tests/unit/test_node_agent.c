/* Unit tests for pkg/node/agent (Kubernetes mode): Allocate, PreStartContainer identity, retries
 * and garbage collection against a stand-in PodResources server on a unix socket. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "k8s/podresources/v1/api.pb-c.h"
#include "mv_agent.h"
#include "mv_log.h"
#include "mv_rpc.h"
#include "mv_segstore.h"
#include "mv_test.h"

#define RESOURCE "microview.io/metrics"

/* ---- Stand-in PodResources: one container holding `held` devices (none = no pod) ------ */

static pthread_mutex_t pr_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *pr_held[4];
static size_t pr_nheld;

static void pr_set(const char *const *ids, size_t n)
{
    pthread_mutex_lock(&pr_mu);
    for (size_t i = 0; i < n && i < 4; i++)
        pr_held[i] = ids[i];
    pr_nheld = n;
    pthread_mutex_unlock(&pr_mu);
}

static void pr_list(void *arg, mv_rpc_call *call, const uint8_t *req, size_t len)
{
    (void)arg;
    (void)req;
    (void)len;
    pthread_mutex_lock(&pr_mu);
    char *ids[4];
    for (size_t i = 0; i < pr_nheld; i++)
        ids[i] = (char *)pr_held[i];
    V1__ContainerDevices d = V1__CONTAINER_DEVICES__INIT;
    d.resource_name = RESOURCE;
    d.n_device_ids = pr_nheld;
    d.device_ids = ids;
    V1__ContainerDevices *ds[] = {&d};
    V1__ContainerResources c = V1__CONTAINER_RESOURCES__INIT;
    c.name = "app";
    c.n_devices = 1;
    c.devices = ds;
    V1__ContainerResources *cs[] = {&c};
    V1__PodResources p = V1__POD_RESOURCES__INIT;
    p.name = "web-0";
    p.namespace_ = "team-a";
    p.n_containers = 1;
    p.containers = cs;
    V1__PodResources *ps[] = {&p};
    V1__ListPodResourcesResponse r = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    r.n_pod_resources = pr_nheld ? 1 : 0;
    r.pod_resources = ps;
    mv_rpc_reply_msg(call, &r.base);
    pthread_mutex_unlock(&pr_mu);
}

/* ---- Fixture ------------------------------------------------------------------------------ */

typedef struct fixture {
    char *dir;
    char sock[512];
    mv_rpc_server *pr; /* NULL while PodResources is "down" */
    mv_segstore *store;
    mv_agent_k8s *a;
} fixture;

static void pr_up(fixture *f)
{
    char addr[600];
    snprintf(addr, sizeof addr, "unix:%s", f->sock);
    CU_ASSERT_EQUAL_FATAL(mv_rpc_server_create(NULL, &f->pr), 0);
    CU_ASSERT_EQUAL_FATAL(
        mv_rpc_server_add_unary(f->pr, "/v1.PodResourcesLister/List", pr_list, NULL), 0);
    CU_ASSERT_FATAL(mv_rpc_server_listen(f->pr, addr) >= 0);
    CU_ASSERT_EQUAL_FATAL(mv_rpc_server_start(f->pr), 0);
}

static void pr_down(fixture *f)
{
    mv_rpc_server_destroy(f->pr);
    f->pr = NULL;
    unlink(f->sock);
}

static void fixture_open(fixture *f, int require_rdma)
{
    memset(f, 0, sizeof *f);
    f->dir = mv_test_tmpdir("node-agent");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->dir);
    snprintf(f->sock, sizeof f->sock, "%s/podres.sock", f->dir);
    mv_segstore_opts so = {
        .dir = f->dir, .reap_interval_ms = -1, .pool_pages = 8, .page_size = 4096};
    CU_ASSERT_EQUAL_FATAL(mv_segstore_open(&so, &f->store), 0);
    mv_config c;
    mv_config_defaults(&c);
    snprintf(c.state_dir, sizeof c.state_dir, "%s", f->dir);
    snprintf(c.pod_resources_socket, sizeof c.pod_resources_socket, "%s", f->sock);
    snprintf(c.container_path, sizeof c.container_path, "/var/run/microview");
    c.api_server[0] = 0;
    c.gc_grace_ms = 0;
    if (require_rdma) {
        snprintf(c.rdma_listen, sizeof c.rdma_listen, "192.0.2.1");
        c.require_rdma = 1;
    }
    CU_ASSERT_EQUAL_FATAL(mv_agent_k8s_create(&c, &f->a), 0);
    CU_ASSERT_EQUAL_FATAL(mv_agent_k8s_attach(f->a, f->store), 0);
}

static void fixture_close(fixture *f)
{
    mv_agent_k8s_detach(f->a);
    mv_agent_k8s_destroy(f->a);
    mv_segstore_close(f->store);
    pr_down(f);
    CU_ASSERT_EQUAL(mv_test_rmrf(f->dir), 0);
    free(f->dir);
}

static const char *label(const mv_segstore_seg *s, const char *name)
{
    for (size_t i = 0; i < s->nlabels; i++)
        if (strcmp(s->labels[i].name, name) == 0)
            return s->labels[i].value;
    return NULL;
}

static const char *env(const mv_dp_alloc *o, const char *key)
{
    for (size_t i = 0; i < o->nenvs; i++)
        if (strcmp(o->envs[i].key, key) == 0)
            return o->envs[i].value;
    return NULL;
}

/* ---- Tests ----------------------------------------------------------------------------------- */

static const char *const pages01[] = {"page-0", "page-1"};

static void test_allocate_mounts_and_env(void)
{
    fixture f;
    fixture_open(&f, 0);
    mv_dp_alloc out;
    memset(&out, 0, sizeof out);
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(mv_agent_k8s_allocate(f.a, pages01, 2, &out, err, sizeof err), 0);
    CU_ASSERT_EQUAL(out.nmounts, 1);
    CU_ASSERT_STRING_EQUAL(out.mounts[0].container_path, "/var/run/microview");
    CU_ASSERT_EQUAL(out.mounts[0].read_only, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(env(&out, "MICROVIEW_SEGMENT"));
    CU_ASSERT_STRING_EQUAL(env(&out, "MICROVIEW_SEGMENT"), "/var/run/microview/segment");
    CU_ASSERT_STRING_EQUAL(env(&out, "MICROVIEW_SEGMENT_SIZE"), "8192");
    mv_segstore_seg s;
    CU_ASSERT_EQUAL_FATAL(mv_segstore_find_device(f.store, "page-1", &s), 0);
    CU_ASSERT_STRING_EQUAL(env(&out, "MICROVIEW_SEGMENT_ID"), s.id);
    /* the host directory handed to the kubelet holds the segment file */
    char want[1100];
    snprintf(want, sizeof want, "%s/segment", out.mounts[0].host_path);
    CU_ASSERT_STRING_EQUAL(s.path, want);
    CU_ASSERT_STRING_EQUAL(label(&s, "device"), "page-0");
    mv_segstore_seg_clear(&s);
    fixture_close(&f);
}

static void test_allocate_busy_devices(void)
{
    fixture f;
    fixture_open(&f, 0);
    mv_dp_alloc out;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(mv_agent_k8s_allocate(f.a, pages01, 2, &out, err, sizeof err), 0);
    /* PodResources unreachable: the agent cannot tell whether the old pod is gone */
    CU_ASSERT_EQUAL(mv_agent_k8s_allocate(f.a, pages01, 1, &out, err, sizeof err), -EBUSY);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "PodResources cannot tell"));
    /* PodResources says a container still holds them */
    pr_up(&f);
    pr_set(pages01, 2);
    CU_ASSERT_EQUAL(mv_agent_k8s_allocate(f.a, pages01, 1, &out, err, sizeof err), -EBUSY);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "team-a/web-0/app"));
    /* the pod is gone: the old segment is collected and the devices handed out again */
    pr_set(NULL, 0);
    mv_segstore_seg before;
    CU_ASSERT_EQUAL_FATAL(mv_segstore_find_device(f.store, "page-0", &before), 0);
    CU_ASSERT_EQUAL(mv_agent_k8s_allocate(f.a, pages01, 1, &out, err, sizeof err), 0);
    mv_segstore_seg after;
    CU_ASSERT_EQUAL_FATAL(mv_segstore_find_device(f.store, "page-0", &after), 0);
    CU_ASSERT_STRING_NOT_EQUAL(before.id, after.id);
    CU_ASSERT_NOT_EQUAL(mv_segstore_find_device(f.store, "page-1", &before), 0);
    mv_segstore_seg_clear(&after);
    fixture_close(&f);
}

static void test_allocate_require_rdma(void)
{
    fixture f;
    fixture_open(&f, 1);
    mv_dp_alloc out;
    char err[256] = "";
    CU_ASSERT_EQUAL(mv_agent_k8s_allocate(f.a, pages01, 2, &out, err, sizeof err), -ENODEV);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "RDMA is required"));
    mv_segstore_seg s;
    CU_ASSERT_NOT_EQUAL(mv_segstore_find_device(f.store, "page-0", &s), 0);
    fixture_close(&f);
}

static void test_prestart_identity_and_retry(void)
{
    fixture f;
    fixture_open(&f, 0);
    mv_dp_alloc out;
    char err[256] = "";
    const char *const unknown[] = {"page-7"};
    CU_ASSERT_EQUAL(mv_agent_k8s_prestart(f.a, unknown, 1, err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_agent_k8s_pending(f.a), 0);
    CU_ASSERT_EQUAL_FATAL(mv_agent_k8s_allocate(f.a, pages01, 2, &out, err, sizeof err), 0);
    /* PodResources down: device-level labels, and a retry is due */
    CU_ASSERT_EQUAL(mv_agent_k8s_prestart(f.a, pages01, 2, err, sizeof err), 0);
    CU_ASSERT_EQUAL(mv_agent_k8s_pending(f.a), 1);
    mv_segstore_seg s;
    CU_ASSERT_EQUAL_FATAL(mv_segstore_find_device(f.store, "page-0", &s), 0);
    CU_ASSERT_PTR_NULL(label(&s, "pod"));
    mv_segstore_seg_clear(&s);
    /* PodResources up: the retry completes the identity (no API server configured) */
    pr_up(&f);
    pr_set(pages01, 2);
    mv_agent_k8s_retry_pass(f.a);
    CU_ASSERT_EQUAL(mv_agent_k8s_pending(f.a), 0);
    CU_ASSERT_EQUAL_FATAL(mv_segstore_find_device(f.store, "page-0", &s), 0);
    CU_ASSERT_STRING_EQUAL(label(&s, "namespace"), "team-a");
    CU_ASSERT_STRING_EQUAL(label(&s, "pod"), "web-0");
    CU_ASSERT_STRING_EQUAL(label(&s, "container"), "app");
    mv_segstore_seg_clear(&s);
    fixture_close(&f);
}

static void test_gc(void)
{
    fixture f;
    fixture_open(&f, 0);
    mv_dp_alloc out;
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(mv_agent_k8s_allocate(f.a, pages01, 2, &out, err, sizeof err), 0);
    mv_segstore_seg s;
    /* nothing is collected while PodResources is unreachable */
    mv_agent_k8s_gc_pass(f.a);
    CU_ASSERT_EQUAL(mv_segstore_find_device(f.store, "page-0", &s), 0);
    mv_segstore_seg_clear(&s);
    /* held: kept */
    pr_up(&f);
    pr_set(pages01, 2);
    mv_agent_k8s_gc_pass(f.a);
    CU_ASSERT_EQUAL(mv_segstore_find_device(f.store, "page-0", &s), 0);
    mv_segstore_seg_clear(&s);
    /* the pod is gone: collected */
    pr_set(NULL, 0);
    mv_agent_k8s_gc_pass(f.a);
    CU_ASSERT_NOT_EQUAL(mv_segstore_find_device(f.store, "page-0", &s), 0);
    fixture_close(&f);
}

int main(void)
{
    mv_log_init("test_node_agent", MV_LOG_ERROR);
    static const mv_test tests[] = {
        {"Allocate: mounts and environment", test_allocate_mounts_and_env},
        {"Allocate: devices still backing a segment", test_allocate_busy_devices},
        {"Allocate: require_rdma without a target", test_allocate_require_rdma},
        {"PreStartContainer: identity, fallback and retry", test_prestart_identity_and_retry},
        {"garbage collection follows PodResources", test_gc},
    };
    return MV_TEST_RUN("node_agent", tests);
}
