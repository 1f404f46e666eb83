/* mv_ctl_agent: the microviewctl commands that talk to the agent: list, create, release, and
 * gen's segment lease. The bottom layer of the module (calls no other file of it). */
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mv_ctl.h"
#include "mv_ctl_int.h"
#include "mv_agentc.h"
#include "mv_inspect.h"
#include "mv_log.h"
#include "mv_opts.h"
#include "mv_util.h"
#include "mv_rdmatoken.h"

/* TLS to an agent's TCP listener: --agent-ca, --agent-cert, --agent-key, --agent-server-name
 * (the collector's flags), rows of list's, create's and release's option tables. */
static mv_agentc_tls g_tls;
#define TLS_ROWS                                                                                   \
    {.name = "agent-ca",                                                                           \
     .kind = MV_OPTS_STRING,                                                                       \
     .meta = "PATH",                                                                               \
     .dest = &g_tls.ca_file,                                                                       \
     .help = "TLS to an agent on TCP (its --tls-cert): the CA that signed its certificate "        \
             "(PEM); without it, plaintext"},                                                      \
        {.name = "agent-cert",                                                                     \
         .kind = MV_OPTS_STRING,                                                                   \
         .meta = "PATH",                                                                           \
         .dest = &g_tls.cert_file,                                                                 \
         .help = "client certificate for an agent with --tls-client-ca"},                          \
        {.name = "agent-key",                                                                      \
         .kind = MV_OPTS_STRING,                                                                   \
         .meta = "PATH",                                                                           \
         .dest = &g_tls.key_file,                                                                  \
         .help = "its private key"},                                                               \
    {                                                                                              \
        .name = "agent-server-name", .kind = MV_OPTS_STRING, .meta = "NAME",                       \
        .dest = &g_tls.server_name, .def = "the host of --agent",                                  \
        .help = "name the agent's certificate carries"                                             \
    }
#define AGENT_HELP                                                                                 \
    "the agent: a gRPC target (unix:PATH, or HOST:PORT of its TCP control plane, which also "      \
    "needs --token-file)"
#define TOKEN_HELP                                                                                 \
    "a token file the agent's TCP control plane asks for (the read token lists, the admin token "  \
    "also creates and releases)"

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

/* The flags of list (json != NULL) and release: the agent, its token, TLS. Returns 0 with the
 * index of the first argument in `*first`, or the exit status (MV_OPTS_*, printed). */
static int parse_agent_opts(const char *synopsis, int argc, char **argv, const char **target,
                            int *json, const char **token_file, int *first)
{
    *target = MV_CTL_DEFAULT_AGENT;
    *token_file = NULL;
    mv_opts_opt opts[] = {
        {.name = "agent",
         .short_name = 'a',
         .kind = MV_OPTS_STRING,
         .meta = "TARGET",
         .dest = target,
         .help = AGENT_HELP},
        {.name = "token-file",
         .short_name = 't',
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = token_file,
         .help = TOKEN_HELP},
        TLS_ROWS,
        {.name = "json",
         .short_name = 'j',
         .kind = MV_OPTS_FLAG,
         .dest = json,
         .help = "one JSON object: the catalog revision and every segment"},
        {0},
    };
    if (!json)
        opts[sizeof opts / sizeof opts[0] - 2] = (mv_opts_opt){0}; /* release: no --json */
    const mv_opts_spec spec = {.prog = "microviewctl", .synopsis = synopsis, .opts = opts};
    return mv_opts_parse(&spec, argc, argv, first);
}

int mv_ctl_list(int argc, char **argv)
{
    int json = 0, first;
    const char *token_file, *target;
    int rc = parse_agent_opts("list [options]", argc, argv, &target, &json, &token_file, &first);
    if (rc)
        return mv_opts_status(rc);
    if (first != argc) {
        fprintf(stderr, "microviewctl list: unexpected argument %s (see --help)\n", argv[first]);
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

int mv_ctl__label_flag(void *arg, const char *value, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    mv_ctl__labels *l = arg;
    char *eq = strchr(value, '=');
    if (!eq || eq == value || l->n == MV_CTL_MAX_LABELS) {
        fprintf(stderr, "microviewctl: --label takes KEY=VALUE (at most 16)\n");
        return -EINVAL;
    }
    *eq = '\0'; /* argv's own string: writable */
    l->kv[2 * l->n] = value;
    l->kv[2 * l->n + 1] = eq + 1;
    l->n++;
    return 0;
}

int mv_ctl_create(int argc, char **argv)
{
    const char *target = MV_CTL_DEFAULT_AGENT, *token_file = NULL;
    uint64_t size = 65536, owner = 0, uid = UINT64_MAX, gid = UINT64_MAX;
    mv_ctl__labels lf = {.n = 0};
    mv_opts_opt opts[] = {
        {.name = "agent",
         .short_name = 'a',
         .kind = MV_OPTS_STRING,
         .meta = "TARGET",
         .dest = &target,
         .help = AGENT_HELP},
        {.name = "token-file",
         .short_name = 't',
         .kind = MV_OPTS_STRING,
         .meta = "PATH",
         .dest = &token_file,
         .help = TOKEN_HELP},
        TLS_ROWS,
        {.name = "size",
         .short_name = 's',
         .kind = MV_OPTS_SIZE,
         .meta = "SIZE",
         .lo = 0,
         .hi = UINT64_MAX,
         .dest = &size,
         .help = "segment size: bytes, or with Ki, Mi, Gi"},
        {.name = "label",
         .short_name = 'l',
         .kind = MV_OPTS_STRING,
         .meta = "KEY=VALUE",
         .fn = mv_ctl__label_flag,
         .arg = &lf,
         .help = "an identity label asked of the agent (repeatable, at most 16)"},
        {.name = "owner-pid",
         .short_name = 'o',
         .kind = MV_OPTS_U64,
         .meta = "PID",
         .lo = 1,
         .hi = INT32_MAX,
         .dest = &owner,
         .def = "none: kept until released",
         .help = "the agent also reaps the segment when process PID is gone (eval \"$(microviewctl "
                 "create --owner-pid $$)\"; exec APP gives APP a segment that goes away with it)"},
        /* (uid_t)-1 means "unchanged" to chown: not an id */
        {.name = "owner-uid",
         .short_name = 'U',
         .kind = MV_OPTS_U64,
         .meta = "UID",
         .lo = 0,
         .hi = UINT32_MAX - 1,
         .dest = &uid,
         .def = "the caller's",
         .help = "who the segment file (mode 0660) belongs to; by default the user microviewctl "
                 "runs as (root keeps root). Only a root caller may name another user: else the "
                 "agent refuses (PERMISSION_DENIED, naming owner_uid)"},
        {.name = "owner-gid",
         .short_name = 'G',
         .kind = MV_OPTS_U64,
         .meta = "GID",
         .lo = 0,
         .hi = UINT32_MAX - 1,
         .dest = &gid,
         .def = "the caller's",
         .help = "the segment file's group, likewise (PERMISSION_DENIED, naming owner_gid)"},
        {0},
    };
    const mv_opts_spec spec = {.prog = "microviewctl",
                               .synopsis = "create [options]",
                               .intro = "Creates a segment kept until released (or until "
                                        "--owner-pid's process is gone); prints id=, path= and "
                                        "size= lines.",
                               .opts = opts};
    int first, rc = mv_opts_parse(&spec, argc, argv, &first);
    if (rc)
        return mv_opts_status(rc);
    size_t nlabels = lf.n;
    const char *const *labels = lf.kv;
    mv_agentc_owner own = {uid == UINT64_MAX ? -1 : (int64_t)uid,
                           gid == UINT64_MAX ? -1 : (int64_t)gid};
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
    int first;
    const char *token_file, *target;
    int rc = parse_agent_opts("release [options] SEGMENT-ID", argc, argv, &target, NULL,
                              &token_file, &first);
    if (rc)
        return mv_opts_status(rc);
    if (first != argc - 1) {
        fprintf(stderr, "microviewctl release: give exactly one segment id (see --help)\n");
        return 2;
    }
    mv_agentc *c = connect_agent(target, token_file);
    if (!c)
        return 1;
    rc = mv_agentc_release(c, argv[first]);
    if (rc != 0)
        fprintf(stderr, "microviewctl: release %s: %s\n", argv[first], mv_agentc_error(c));
    mv_agentc_close(c);
    return rc ? 1 : 0;
}
