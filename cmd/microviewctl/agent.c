/* microviewctl commands that talk to the agent: list, create, release, gen's lease. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "mv_agentc.h"
#include "mv_inspect.h"
#include "mv_log.h"
#include "mv_util.h"
#include "mv_rdmatoken.h"

/* TLS to an agent's TCP listener: --agent-ca, --agent-cert, --agent-key, --agent-server-name
 * (the collector's flags), taken by list, create and release. */
#define TLS_OPTS                                                                                   \
    {"agent-ca", required_argument, 0, 1001}, {"agent-cert", required_argument, 0, 1002},          \
        {"agent-key", required_argument, 0, 1003},                                                 \
    {                                                                                              \
        "agent-server-name", required_argument, 0, 1004                                            \
    }
#define TLS_USAGE "[--agent-ca F [--agent-cert F --agent-key F] [--agent-server-name N]]"

static mv_agentc_tls g_tls;

/* Takes one of TLS_OPTS: 1 when `opt` was one. */
static int tls_opt(int opt)
{
    switch (opt) {
    case 1001:
        g_tls.ca_file = optarg;
        return 1;
    case 1002:
        g_tls.cert_file = optarg;
        return 1;
    case 1003:
        g_tls.key_file = optarg;
        return 1;
    case 1004:
        g_tls.server_name = optarg;
        return 1;
    default:
        return 0;
    }
}

/* Opens a client for `target`; with `token_file`, every call presents its token
 * (what an agent's TCP control plane asks for). Returns NULL with the reason in `err`. */
static mv_agentc *open_agent(const char *target, const char *token_file, char *err, size_t errlen)
{
    mv_agentc *c = NULL;
    char tok[MV_RDMA_TOKEN_MAX + 1], why[MV_ERR_MAX];
    if (token_file && mv_rdmatoken_load(token_file, tok, sizeof tok, why, sizeof why) < 0) {
        mv_util_err_set(err, errlen, "--token-file: %s", why);
        return NULL;
    }
    if ((g_tls.ca_file || g_tls.cert_file || g_tls.key_file || g_tls.server_name) &&
        mv_agentc_set_tls(&g_tls, why, sizeof why) < 0) {
        mv_util_err_set(err, errlen, "--agent-ca/--agent-cert/--agent-key: %s", why);
        return NULL;
    }
    if (mv_agentc_open(target, &c) != 0 || (token_file && mv_agentc_set_token(c, tok) != 0)) {
        mv_util_err_set(err, errlen, "%s",
                        c ? mv_agentc_error(c) : "cannot create an agent client");
        mv_agentc_close(c);
        return NULL;
    }
    return c;
}

/* open_agent for the interactive commands: the reason is printed as one plain line. */
static mv_agentc *connect_agent(const char *target, const char *token_file)
{
    char err[MV_ERR_MAX];
    mv_agentc *c = open_agent(target, token_file, err, sizeof err);
    if (!c)
        fprintf(stderr, "microviewctl: %s\n", err);
    return c;
}

/* gen runs as a workload: what goes wrong is logged as logfmt events (mv_log). */
int mv_ctl_lease_segment(const char *target, uint64_t size, const char *const *label_kv,
                         size_t nlabels, mv_ctl_lease *out)
{
    mv_agentc_segment seg = {0};
    char err[MV_ERR_MAX];
    mv_agentc *c = open_agent(target, NULL, err, sizeof err);
    if (!c) {
        MV_ERROR("gen.lease_failed", "agent=%s error=%s", mv_log_q(target), mv_log_q(err));
        return -1;
    }
    if (mv_agentc_create(c, size, (uint32_t)getpid(), label_kv, nlabels, &seg) != 0) {
        MV_ERROR("gen.lease_failed", "agent=%s error=%s", mv_log_q(target),
                 mv_log_q(mv_agentc_error(c)));
        mv_agentc_close(c);
        return -1;
    }
    out->id = strdup(seg.id);
    out->path = strdup(seg.path);
    out->client = c;
    mv_agentc_segment_clear(&seg);
    if (!out->id || !out->path) {
        MV_ERROR("gen.lease_failed", "agent=%s error=%s", mv_log_q(target),
                 mv_log_q("out of memory"));
        mv_ctl_lease_release(out);
        return -1;
    }
    return 0;
}

void mv_ctl_lease_release(mv_ctl_lease *l)
{
    if (!l || !l->client)
        return;
    if (l->id && mv_agentc_release(l->client, l->id) != 0)
        MV_WARN("gen.release_failed", "id=%s error=%s", mv_log_q(l->id),
                mv_log_q(mv_agentc_error(l->client)));
    mv_agentc_close(l->client);
    free(l->id);
    free(l->path);
    memset(l, 0, sizeof *l);
}

static json_object *segment_json(const mv_agentc_segment *s)
{
    json_object *o = json_object_new_object(), *labels = json_object_new_object();
    json_object *rdma = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_string(s->id));
    json_object_object_add(o, "path", json_object_new_string(s->path));
    json_object_object_add(o, "size", json_object_new_uint64(s->size));
    json_object_object_add(o, "owner_pid", json_object_new_uint64(s->owner_pid));
    for (size_t i = 0; i < s->nlabels; i++)
        json_object_object_add(labels, s->labels[i].name,
                               json_object_new_string(s->labels[i].value));
    json_object_object_add(o, "labels", labels);
    if (s->npod_labels) {
        json_object *pl = json_object_new_object();
        for (size_t i = 0; i < s->npod_labels; i++)
            json_object_object_add(pl, s->pod_labels[i].name,
                                   json_object_new_string(s->pod_labels[i].value));
        json_object_object_add(o, "pod_labels", pl);
    }
    json_object_object_add(rdma, "readable", json_object_new_boolean(s->rdma_readable));
    json_object_object_add(rdma, "addr", json_object_new_uint64(s->rdma_addr));
    json_object_object_add(rdma, "rkey", json_object_new_uint64(s->rdma_rkey));
    json_object_object_add(rdma, "length", json_object_new_uint64(s->rdma_length));
    json_object_object_add(rdma, "layout_version", json_object_new_uint64(s->layout_version));
    json_object_object_add(o, "rdma", rdma);
    return o;
}

static void print_segment(const mv_agentc_segment *s)
{
    printf("%-22s %8" PRIu64 "  %-7u ", s->id, s->size, s->owner_pid);
    for (size_t i = 0; i < s->nlabels; i++) {
        printf("%s", i ? "," : "");
        mv_inspect_put_escaped(stdout, s->labels[i].name);
        putchar('=');
        mv_inspect_put_escaped(stdout, s->labels[i].value);
    }
    printf("  ");
    mv_inspect_put_escaped(stdout, s->path);
    putchar('\n');
}

static const char *parse_agent_opt(int argc, char **argv, int *json, const char **token_file,
                                   int *ok)
{
    const char *target = MV_CTL_DEFAULT_AGENT;
    int opt;
    static const struct option opts[] = {{"agent", required_argument, 0, 'a'},
                                         {"json", no_argument, 0, 'j'},
                                         {"token-file", required_argument, 0, 't'},
                                         TLS_OPTS,
                                         {0, 0, 0, 0}};
    *ok = 1;
    *token_file = NULL;
    if (mv_util_opts_exact("microviewctl", argc, argv, opts) < 0) {
        *ok = 0;
        return target;
    }
    while ((opt = getopt_long(argc, argv, "a:jt:", opts, NULL)) != -1) {
        if (opt == 'a')
            target = optarg;
        else if (opt == 't')
            *token_file = optarg;
        else if (opt == 'j' && json)
            *json = 1;
        else if (!tls_opt(opt))
            *ok = 0;
    }
    return target;
}

int mv_ctl_list(int argc, char **argv)
{
    int json = 0, ok;
    const char *token_file;
    const char *target = parse_agent_opt(argc, argv, &json, &token_file, &ok);
    if (!ok || optind != argc) {
        fprintf(stderr,
                "usage: microviewctl list [--agent TARGET] [--token-file F] [--json] " TLS_USAGE
                "\n");
        return 2;
    }
    mv_agentc *c = connect_agent(target, token_file);
    if (!c)
        return 1;
    mv_agentc_segment *v = NULL;
    size_t n = 0;
    uint64_t rev = 0;
    if (mv_agentc_list(c, &v, &n, &rev) != 0) {
        fprintf(stderr, "microviewctl: list: %s\n", mv_agentc_error(c));
        mv_agentc_close(c);
        return 1;
    }
    if (json) {
        json_object *root = json_object_new_object(), *segs = json_object_new_array();
        json_object_object_add(root, "revision", json_object_new_uint64(rev));
        for (size_t i = 0; i < n; i++)
            json_object_array_add(segs, segment_json(&v[i]));
        json_object_object_add(root, "segments", segs);
        puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
    } else {
        printf("%-22s %8s  %-7s %s  %s\n", "ID", "BYTES", "OWNER", "LABELS", "PATH");
        for (size_t i = 0; i < n; i++)
            print_segment(&v[i]);
        printf("(%zu segments, catalog revision %" PRIu64 ")\n", n, rev);
    }
    mv_agentc_segments_free(v, n);
    mv_agentc_close(c);
    return 0;
}

int mv_ctl_create(int argc, char **argv)
{
    const char *target = MV_CTL_DEFAULT_AGENT, *labels[32], *token_file = NULL;
    uint64_t size = 65536, owner = 0, id;
    mv_agentc_owner own = {-1, -1};
    size_t nlabels = 0;
    int opt;
    static const struct option opts[] = {{"agent", required_argument, 0, 'a'},
                                         {"size", required_argument, 0, 's'},
                                         {"label", required_argument, 0, 'l'},
                                         {"token-file", required_argument, 0, 't'},
                                         {"owner-pid", required_argument, 0, 'o'},
                                         {"owner-uid", required_argument, 0, 'U'},
                                         {"owner-gid", required_argument, 0, 'G'},
                                         TLS_OPTS,
                                         {0, 0, 0, 0}};
    if (mv_util_opts_exact("microviewctl", argc, argv, opts) < 0)
        return 2;
    while ((opt = getopt_long(argc, argv, "a:s:l:t:o:U:G:", opts, NULL)) != -1) {
        char *eq;
        switch (opt) {
        case 'a':
            target = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 's':
            if (mv_util_flag_size("microviewctl", "--size", optarg, 0, UINT64_MAX, &size) < 0)
                return 2;
            break;
        case 'o':
            if (mv_util_flag_u64("microviewctl", "--owner-pid", optarg, 1, INT32_MAX, &owner) < 0)
                return 2;
            break;
        case 'U': /* (uid_t)-1 means "unchanged" to chown: not an id */
            if (mv_util_flag_u64("microviewctl", "--owner-uid", optarg, 0, UINT32_MAX - 1, &id) < 0)
                return 2;
            own.uid = (int64_t)id;
            break;
        case 'G':
            if (mv_util_flag_u64("microviewctl", "--owner-gid", optarg, 0, UINT32_MAX - 1, &id) < 0)
                return 2;
            own.gid = (int64_t)id;
            break;
        case 'l':
            eq = strchr(optarg, '=');
            if (!eq || eq == optarg || nlabels == 16) {
                fprintf(stderr, "microviewctl: --label takes KEY=VALUE (at most 16)\n");
                return 2;
            }
            *eq = '\0';
            labels[2 * nlabels] = optarg;
            labels[2 * nlabels + 1] = eq + 1;
            nlabels++;
            break;
        default:
            if (tls_opt(opt))
                break;
            fprintf(stderr, "usage: microviewctl create [--agent T] [--token-file F] [--size SIZE] "
                            "[--label K=V] [--owner-pid PID] [--owner-uid UID] "
                            "[--owner-gid GID] " TLS_USAGE "\n");
            return 2;
        }
    }
    mv_agentc *c = connect_agent(target, token_file);
    if (!c)
        return 1;
    mv_agentc_segment seg = {0};
    /* owner 0: the segment stays until `microviewctl release`; otherwise the agent also reaps
     * it when that process is gone (e.g. `eval "$(microviewctl create --owner-pid $$)"; exec
     * APP` gives APP a segment that goes away with it). The file is handed to this process's
     * uid and gid (the agent reads them from the socket) unless --owner-uid/--owner-gid name
     * others. */
    if (mv_agentc_create_owned(c, size, (uint32_t)owner, labels, nlabels, &own, &seg) != 0) {
        fprintf(stderr, "microviewctl: create: %s\n", mv_agentc_error(c));
        mv_agentc_close(c);
        return 1;
    }
    printf("id=%s\npath=%s\nsize=%" PRIu64 "\n", seg.id, seg.path, seg.size);
    mv_agentc_segment_clear(&seg);
    mv_agentc_close(c);
    return 0;
}

int mv_ctl_release(int argc, char **argv)
{
    int ok;
    const char *token_file;
    const char *target = parse_agent_opt(argc, argv, NULL, &token_file, &ok);
    if (!ok || optind != argc - 1) {
        fprintf(stderr, "usage: microviewctl release [--agent TARGET] [--token-file F] " TLS_USAGE
                        " <segment-id>\n");
        return 2;
    }
    mv_agentc *c = connect_agent(target, token_file);
    if (!c)
        return 1;
    int rc = mv_agentc_release(c, argv[optind]);
    if (rc != 0)
        fprintf(stderr, "microviewctl: release %s: %s\n", argv[optind], mv_agentc_error(c));
    mv_agentc_close(c);
    return rc ? 1 : 0;
}
