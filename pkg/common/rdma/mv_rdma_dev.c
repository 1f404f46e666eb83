/* mv_rdma_dev: device facts and address helpers shared by the target and the initiator. */
#include "mv_rdma.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <errno.h>
#include <infiniband/verbs.h>

int mv_rdma_parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof *ss);
    if (!ip)
        return -EINVAL;
    if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        return 0;
    }
    if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        return 0;
    }
    return -EINVAL;
}

void mv_rdma_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs(s4->sin_port);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
    }
    snprintf(buf, len, "%s:%u", ip, port);
}

static const char *gid_type_str(uint32_t type)
{
    switch (type) {
    case IBV_GID_TYPE_IB:
        return "IB";
    case IBV_GID_TYPE_ROCE_V1:
        return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
        return "RoCE v2";
    default:
        return "unknown";
    }
}

void mv_rdma_fill_dev_info(struct ibv_context *ctx, uint8_t port, const struct sockaddr *sa,
                           mv_rdma_dev_info *o)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    union ibv_gid want;
    int best = -1;
    uint32_t best_type = 0;

    memset(o, 0, sizeof *o);
    o->gid_index = -1;
    o->port_num = port;
    snprintf(o->device, sizeof o->device, "%s", ibv_get_device_name(ctx->device));
    if (ibv_query_device(ctx, &da) == 0) {
        o->max_qp_rd_atom = (uint32_t)da.max_qp_rd_atom;
        o->max_qp_init_rd_atom = (uint32_t)da.max_qp_init_rd_atom;
    }
    if (ibv_query_port(ctx, port, &pa) != 0)
        return;
    snprintf(o->port_state, sizeof o->port_state, "%s", ibv_port_state_str(pa.state));
    snprintf(o->link_layer, sizeof o->link_layer, "%s",
             pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "Ethernet");

    memset(&want, 0, sizeof want);
    if (sa && sa->sa_family == AF_INET) {
        want.raw[10] = 0xff;
        want.raw[11] = 0xff;
        memcpy(&want.raw[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        memcpy(want.raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
    for (int i = 0; i < pa.gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0) != 0)
            continue;
        if (pa.link_layer == IBV_LINK_LAYER_INFINIBAND) {
            /* IPoIB: rdma_cm uses the port GID from the hardware address. */
            best = i;
            best_type = e.gid_type;
            break;
        }
        if (memcmp(e.gid.raw, want.raw, 16) != 0)
            continue;
        if (best < 0 || e.gid_type == IBV_GID_TYPE_ROCE_V2) {
            best = i;
            best_type = e.gid_type;
        }
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
            break;
    }
    if (best >= 0) {
        union ibv_gid g;
        o->gid_index = best;
        snprintf(o->gid_type, sizeof o->gid_type, "%s", gid_type_str(best_type));
        if (ibv_query_gid(ctx, port, best, &g) == 0)
            inet_ntop(AF_INET6, g.raw, o->gid, sizeof o->gid);
    }
}
