/* mv_podres: PodResources List over gRPC, reduced to one resource's devices. */
#include "mv_podres.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/podresources/v1/api.pb-c.h"
#include "mv_rpc.h"
#include "mv_util.h"

#define P_LIST   "/v1.PodResourcesLister/List"
#define RESP_MAX (16u << 20) /* the kubelet's own limit */

void mv_podres_free(mv_podres_entry *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        free(v[i].namespace_);
        free(v[i].pod);
        free(v[i].container);
        for (size_t j = 0; j < v[i].ndevices; j++)
            free(v[i].devices[j]);
        free(v[i].devices);
    }
    free(v);
}

const mv_podres_entry *mv_podres_find(const mv_podres_entry *v, size_t n, const char *device)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < v[i].ndevices; j++)
            if (strcmp(v[i].devices[j], device) == 0)
                return &v[i];
    return NULL;
}

static int add_entry(mv_podres_entry **v, size_t *n, size_t *cap, const V1__PodResources *p,
                     const V1__ContainerResources *c, const char *resource)
{
    size_t nd = 0;
    for (size_t k = 0; k < c->n_devices; k++)
        if (c->devices[k]->resource_name && strcmp(c->devices[k]->resource_name, resource) == 0)
            nd += c->devices[k]->n_device_ids;
    if (!nd)
        return 0;
    if (*n >= MV_PODRES_MAX_ENTRIES)
        return -E2BIG;
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        mv_podres_entry *nv = realloc(*v, nc * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        *v = nv;
        *cap = nc;
    }
    mv_podres_entry *e = &(*v)[*n];
    memset(e, 0, sizeof *e);
    (*n)++;
    e->namespace_ = strdup(p->namespace_ ? p->namespace_ : "");
    e->pod = strdup(p->name ? p->name : "");
    e->container = strdup(c->name ? c->name : "");
    e->devices = calloc(nd, sizeof *e->devices);
    if (!e->namespace_ || !e->pod || !e->container || !e->devices)
        return -ENOMEM;
    for (size_t k = 0; k < c->n_devices; k++) {
        const V1__ContainerDevices *d = c->devices[k];
        if (!d->resource_name || strcmp(d->resource_name, resource) != 0)
            continue;
        for (size_t j = 0; j < d->n_device_ids; j++) {
            e->devices[e->ndevices] = strdup(d->device_ids[j] ? d->device_ids[j] : "");
            if (!e->devices[e->ndevices])
                return -ENOMEM;
            e->ndevices++;
        }
    }
    return 0;
}

int mv_podres_parse(const void *buf, size_t len, const char *resource, mv_podres_entry **out,
                    size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    V1__ListPodResourcesResponse *r = (V1__ListPodResourcesResponse *)mv_rpc_unpack(
        &v1__list_pod_resources_response__descriptor, buf, len, RESP_MAX);
    if (!r) {
        snprintf(err, errlen, "malformed ListPodResourcesResponse");
        return -EIO;
    }
    mv_podres_entry *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < r->n_pod_resources && !rc; i++)
        for (size_t j = 0; j < r->pod_resources[i]->n_containers && !rc; j++)
            rc = add_entry(&v, &cnt, &cap, r->pod_resources[i], r->pod_resources[i]->containers[j],
                           resource);
    v1__list_pod_resources_response__free_unpacked(r, NULL);
    if (rc < 0) {
        snprintf(err, errlen, "%s", rc == -E2BIG ? "too many containers" : "out of memory");
        mv_podres_free(v, cnt);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

int mv_podres_list(const char *socket_path, const char *resource, int timeout_ms,
                   mv_podres_entry **out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    char target[4200];
    if (mv_util_fmt(target, sizeof target, "unix:%s", socket_path) < 0) {
        snprintf(err, errlen, "PodResources socket path too long: %.200s", socket_path);
        return -ENAMETOOLONG;
    }
    mv_rpc_channel *ch;
    int rc = mv_rpc_channel_open(target, RESP_MAX, &ch);
    if (rc < 0) {
        snprintf(err, errlen, "cannot open a channel to %s", socket_path);
        return rc;
    }
    V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
    mv_rpc_buf rb = {0}, resp = {0};
    mv_rpc_status st;
    rc = mv_rpc_pack(&req.base, &rb);
    if (rc == 0)
        rc = mv_rpc_unary(ch, P_LIST, rb.data, rb.len, timeout_ms, &resp, &st);
    if (rc > 0) {
        snprintf(err, errlen, "List on %s: %s: %s", socket_path, mv_rpc_code_name(rc), st.message);
        rc = -EIO;
    } else if (rc < 0) {
        snprintf(err, errlen, "List on %s: %s", socket_path, strerror(-rc));
    } else {
        rc = mv_podres_parse(resp.data, resp.len, resource, out, n, err, errlen);
    }
    mv_rpc_buf_free(&rb);
    mv_rpc_buf_free(&resp);
    mv_rpc_channel_close(ch);
    return rc;
}
