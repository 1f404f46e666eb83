/* mv_pipeline_create: the top of the module: a segment's pipeline state created (carrying each
 * metric's state over from the pipeline of the segment's previous catalog, matched by name and
 * labels) and destroyed, and the allocation of the per-metric records the feeds stream
 * through. Below it: mv_pipeline.c (the feeds), then mv_pipeline_window.c (window summaries). */
#include "mv_pipeline_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Identity map for rebuilds ---------------------------------------------------------- */

static uint64_t metric_hash(const mv_seg_metric *m)
{
    uint64_t h = mv_seg_fnv1a64(m->name, m->name_len) ^ ((uint64_t)m->type << 56);
    for (uint16_t i = 0; i < m->label_count; i++) {
        h = h * 0x100000001b3ull ^ mv_seg_fnv1a64(m->labels[i].key, strlen(m->labels[i].key));
        h = h * 0x100000001b3ull ^ mv_seg_fnv1a64(m->labels[i].value, strlen(m->labels[i].value));
    }
    return h;
}

static int metric_same(const mv_seg_metric *a, const mv_seg_metric *b)
{
    if (a->type != b->type || a->label_count != b->label_count ||
        a->bucket_count != b->bucket_count || strcmp(a->name, b->name) != 0)
        return 0;
    for (uint16_t i = 0; i < a->label_count; i++)
        if (strcmp(a->labels[i].key, b->labels[i].key) != 0 ||
            strcmp(a->labels[i].value, b->labels[i].value) != 0)
            return 0;
    for (uint16_t i = 0; i < a->bucket_count; i++)
        if (a->bounds[i] != b->bounds[i])
            return 0;
    return 1;
}

/* Index in prev of the metric with m's identity, or SIZE_MAX. `table` is an
 * open-addressing map of prev's indexes + 1 (0 = empty), `mask` its size - 1. */
static size_t find_prev(const mv_pipe_seg *prev, const uint32_t *table, size_t mask,
                        const mv_seg_metric *m, size_t hint)
{
    if (hint < prev->n && metric_same(mv_pipe__cat_m(prev, hint), m))
        return hint;
    for (size_t h = metric_hash(m) & mask;; h = (h + 1) & mask) {
        uint32_t v = table[h];
        if (!v)
            return SIZE_MAX;
        if (metric_same(mv_pipe__cat_m(prev, v - 1), m))
            return v - 1;
    }
}

/* ---- Create / destroy -------------------------------------------------------------------- */

static void free_state(mv_pipe_seg *s)
{
    for (size_t j = 0; s->hg && j < s->ng; j++)
        mv_sketch_destroy(s->hg[j].sk);
    for (size_t j = 0; s->ch && j < s->nh; j++)
        free(s->ch[j].b);
    mv_pipe__cl_free(s);
    free(s->loc);
    free(s->dc);
    free(s->hc);
    free(s->hg);
    free(s->gstill);
    free(s->hh);
    free(s->pv);
    free(s->pn);
    free(s->pl);
    free(s->cc);
    free(s->cd);
    free(s->coff);
    free(s->cg);
    free(s->ch);
    free(s->slot_tot);
    free(s->scratch);
    mv_fd_destroy(s->fd);
    free(s->fd_loc);
    free(s->fd_x);
    free(s->fd_scale);
    free(s->fd_base);
    free(s->pub);
    free(s->nat[0]);
    free(s->nat[1]);
}

void mv_pipe_seg_destroy(mv_pipe_seg *s)
{
    if (!s)
        return;
    free_state(s);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int setup_fd(mv_pipe_seg *s, mv_pipe_seg *prev, const size_t *from)
{
    size_t d = s->n < s->cfg.fd_max_dims ? s->n : s->cfg.fd_max_dims;
    if (!s->cfg.fd || d == 0)
        return 0;
    s->fd_d = (uint32_t)d;
    s->fd_loc = calloc(d, sizeof *s->fd_loc);
    s->fd_x = calloc(d, sizeof *s->fd_x);
    s->fd_scale = calloc(d, sizeof *s->fd_scale);
    s->fd_base = calloc(d, sizeof *s->fd_base);
    if (!s->fd_loc || !s->fd_x || !s->fd_scale || !s->fd_base)
        return -ENOMEM;
    for (size_t k = 0; k < d; k++) {
        s->fd_loc[k] = s->loc[k];
        s->fd_base[k] = pipe_total_of(s, s->loc[k]);
        /* A metric scored before keeps its base: its next step counts from the last one. */
        if (prev && prev->fd && from[k] < prev->fd_d)
            s->fd_base[k] = prev->fd_base[from[k]];
    }
    /* Keep the learnt subspace when the scored metrics are the same ones. */
    if (prev && prev->fd && prev->fd_d == s->fd_d) {
        int same = 1;
        for (size_t k = 0; k < d && same; k++)
            same = from[k] == k;
        if (same) {
            s->fd = prev->fd;
            prev->fd = NULL;
            memcpy(s->fd_scale, prev->fd_scale, d * sizeof *s->fd_scale);
            s->fd_steps = prev->fd_steps;
            return 0;
        }
    }
    mv_fd_config fc;
    mv_fd_config_default(&fc, (uint32_t)d);
    fc.eta = 0.1; /* a lasting new behaviour is learnt, slowly */
    return mv_fd_create(&fc, &s->fd);
}

static uint64_t mem_fixed(const mv_pipe_seg *s)
{
    uint64_t b = sizeof *s + s->nc * mv_pipe__fixed_bytes(MV_SEG_COUNTER) +
                 s->ng * mv_pipe__fixed_bytes(MV_SEG_GAUGE) +
                 s->nh * mv_pipe__fixed_bytes(MV_SEG_HISTOGRAM) +
                 s->scratch_len * sizeof *s->scratch + (s->ng / 64 + 1) * sizeof *s->gstill;
    for (size_t j = 0; j < s->nh; j++)
        b += 16u * s->ch[j].nb;
    if (s->fd) {
        mv_fd_config fc;
        mv_fd_config_default(&fc, s->fd_d);
        b += mv_fd_memory_bytes(&fc) + s->fd_d * (4u + 8u + 8u + 8u);
    }
    return b;
}

/* Zeroed room for n items starting on a cache line (calloc aligns to 16: a 64-byte hot
 * record would straddle two lines, a struct's hot fields take one more). */
static void *calloc_lines(size_t n, size_t size)
{
    size_t bytes = (n * size + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

int mv_pipe_seg_create(const mv_pipe_config *cfg, const mv_seg_catalog *cat, mv_pipe_seg *prev,
                       mv_pipe_seg **out)
{
    uint32_t *table = NULL;
    size_t *from = NULL; /* per new catalog index: prev's index, or SIZE_MAX */
    size_t mask = 0;
    int rc = -ENOMEM;

    *out = NULL;
    /* Line-aligned, so the hot fields at its start take as few lines as they can. */
    mv_pipe_seg *s = calloc_lines(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    if (cfg)
        s->cfg = *cfg;
    else
        mv_pipe_config_default(&s->cfg);
    if (mv_pipe_config_check(&s->cfg)) {
        free(s);
        return -EINVAL;
    }
    s->dp = mv_pipe__init();
    pthread_mutex_init(&s->mu, NULL);
    s->cat = cat;
    s->n = mv_seg_catalog_count(cat);
    s->cur_w = UINT64_MAX;
    s->pub_score = NAN;
    s->fd_wmax = NAN;
    size_t n1 = s->n ? s->n : 1;
    uint32_t maxb = 0;
    for (size_t i = 0; i < s->n; i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        s->nc += mv_seg_is_counter(m->type);
        s->ng += m->type == MV_SEG_GAUGE;
        s->nh += m->type == MV_SEG_HISTOGRAM;
    }
    s->loc = calloc(n1, sizeof *s->loc);
    s->pub = calloc(n1, sizeof *s->pub);
    s->dc = calloc_lines(s->nc + 1, sizeof *s->dc);
    s->hc = calloc_lines(s->nc + 1, sizeof *s->hc);
    s->cc = calloc(s->nc + 1, sizeof *s->cc);
    s->cd = calloc_lines(s->nc + 1, sizeof *s->cd);
    s->coff = calloc(s->nc + 1, sizeof *s->coff);
    s->slot_tot = calloc((s->nc + 1) * SHORT_SLOTS, sizeof *s->slot_tot);
    s->hg = calloc_lines(s->ng + 1, sizeof *s->hg);
    s->cg = calloc(s->ng + 1, sizeof *s->cg);
    s->gstill = calloc(s->ng / 64 + 1, sizeof *s->gstill);
    s->pv = calloc_lines(GPEND * s->ng + 1, sizeof *s->pv);
    s->pn = calloc_lines(GPEND * s->ng + 1, sizeof *s->pn);
    s->pl = calloc_lines(s->ng + 1, sizeof *s->pl);
    s->hh = calloc_lines(s->nh + 1, sizeof *s->hh);
    s->ch = calloc(s->nh + 1, sizeof *s->ch);
    from = malloc(n1 * sizeof *from);
    if (!s->loc || !s->pub || !s->dc || !s->hc || !s->cc || !s->cd || !s->coff || !s->slot_tot ||
        !s->hg || !s->gstill || !s->cg || !s->pv || !s->pn || !s->pl || !s->hh || !s->ch || !from)
        goto fail_state;
    if (prev) {
        /* Updates prev's reads left waiting run, and the summaries prev still owes are
         * finished: they describe its window. */
        pthread_mutex_lock(&prev->mu);
        if (prev->same_g)
            mv_pipe__run_same(prev);
        mv_pipe__close_all(prev);
        pthread_mutex_unlock(&prev->mu);
    }
    if (prev && prev->n) {
        size_t cap = 1;
        while (cap < 2 * prev->n)
            cap <<= 1;
        mask = cap - 1;
        table = calloc(cap, sizeof *table);
        if (!table)
            goto fail_state;
        for (size_t i = 0; i < prev->n; i++) {
            size_t h = metric_hash(mv_pipe__cat_m(prev, i)) & mask;
            while (table[h])
                h = (h + 1) & mask;
            table[h] = (uint32_t)(i + 1);
        }
        s->e = prev->e;
        s->last_read_ns = prev->last_read_ns;
        s->cur_w = prev->cur_w;
        s->win_e = prev->win_e;
        s->win_reads = prev->win_reads;
        s->greads = prev->greads; /* the gauges' folded runs count from it */
        s->win_gap_max = prev->win_gap_max;
        memcpy(s->slot_id, prev->slot_id, sizeof s->slot_id);
        memcpy(s->slot_e, prev->slot_e, sizeof s->slot_e);
        s->last_slot = prev->last_slot;
        s->pub_start = prev->pub_start;
        s->pub_end = prev->pub_end;
        s->pub_score = prev->pub_score;
        s->pub_steps = prev->pub_steps;
        s->pub_collapses = prev->pub_collapses;
        s->pub_reads = prev->pub_reads;
        s->pub_gap_max = prev->pub_gap_max;
        /* The published native buckets, which the summaries carried over below index. */
        pthread_mutex_lock(&prev->mu);
        size_t nn = prev->nat_len[prev->nat_pub];
        if (nn) {
            s->nat[0] = malloc(nn * sizeof *s->nat[0]);
            if (s->nat[0]) {
                memcpy(s->nat[0], prev->nat[prev->nat_pub], nn * sizeof *s->nat[0]);
                s->nat_len[0] = s->nat_cap[0] = nn;
                s->nat_mem = nn * sizeof *s->nat[0];
            }
        }
        pthread_mutex_unlock(&prev->mu);
        s->fd_step = prev->fd_step;
        s->fd_last_ns = prev->fd_last_ns;
        s->fd_wmax = prev->fd_wmax;
        s->det_last_ns = prev->det_last_ns;
        s->det_e = prev->det_e;
        s->det_started = prev->det_started;
        s->det_force = prev->det_force;
    }
    size_t jc = 0, jg = 0, jh = 0;
    for (size_t i = 0; i < s->n; i++) {
        const mv_seg_metric *m = mv_seg_catalog_metric(cat, i);
        size_t j = table ? find_prev(prev, table, mask, m, i) : SIZE_MAX;
        uint32_t pl = j != SIZE_MAX ? prev->loc[j] : 0;
        uint32_t pj = LOC_J(pl);
        from[i] = SIZE_MAX;
        if (j != SIZE_MAX) {
            s->pub[i] = prev->pub[j];
            if (s->pub[i].native > s->nat_len[0])
                s->pub[i].native = 0; /* no memory for the copy: no native histogram */
            for (uint32_t k = 0; prev->fd && k < prev->fd_d; k++)
                if (prev->fd_loc[k] == pl)
                    from[i] = k;
        } else {
            s->pub[i].type = m->type;
            s->pub[i].has_window = 0;
            s->pub[i].rate = s->pub[i].rate_max = s->pub[i].rate_short = NAN;
        }
        if (m->bucket_count > maxb)
            maxb = m->bucket_count;
        if (mv_seg_is_counter(m->type)) {
            s->loc[i] = LOC(T_CTR, jc);
            if (j != SIZE_MAX) {
                /* prev may be viewed meanwhile (its short-rate ring): read under its lock. */
                pthread_mutex_lock(&prev->mu);
                s->dc[jc] = prev->dc[pj];
                s->hc[jc] = prev->hc[pj];
                s->cc[jc] = prev->cc[pj];
                s->cd[jc] = prev->cd[pj];
                s->coff[jc] = prev->coff[pj];
                for (int k = 0; k < SHORT_SLOTS; k++)
                    s->slot_tot[(size_t)k * s->nc + jc] = prev->slot_tot[(size_t)k * prev->nc + pj];
                pthread_mutex_unlock(&prev->mu);
            }
            s->hc[jc].off = m->fold_offset; /* a sharded one: summed */
            s->hc[jc].frac = m->type == MV_SEG_COUNTER_F;
            s->cc[jc].idx = (uint32_t)i;
            jc++;
        } else if (m->type == MV_SEG_GAUGE) {
            s->loc[i] = LOC(T_GAUGE, jg);
            if (j != SIZE_MAX) {
                s->hg[jg] = prev->hg[pj];
                s->cg[jg] = prev->cg[pj];
                /* The current window's runs still waiting. */
                s->pl[jg] = prev->pl[pj];
                for (size_t k = 0; k < prev->pl[pj]; k++) {
                    s->pv[k * s->ng + jg] = prev->pv[k * prev->ng + pj];
                    s->pn[k * s->ng + jg] = prev->pn[k * prev->ng + pj];
                }
                prev->hg[pj].sk = NULL;
            } else {
                s->hg[jg].last = NAN;
            }
            s->hg[jg].off = m->fold_offset; /* a sharded one: summed */
            s->cg[jg].idx = (uint32_t)i;
            jg++;
        } else {
            s->loc[i] = LOC(T_HIST, jh);
            uint32_t nb = (uint32_t)m->bucket_count + 1;
            if (j != SIZE_MAX) {
                s->hh[jh] = prev->hh[pj];
                s->ch[jh] = prev->ch[pj];
                prev->ch[pj].b = NULL;
            } else {
                s->ch[jh].b = calloc(2 * (size_t)nb, sizeof *s->ch[jh].b);
                if (!s->ch[jh].b)
                    goto fail_state;
            }
            s->hh[jh].off = m->fold_offset; /* a sharded one: summed */
            s->ch[jh].idx = (uint32_t)i;
            s->ch[jh].nb = nb;
            jh++;
        }
    }
    s->scratch_len = (size_t)maxb + 1; /* histogram deltas */
    s->scratch = calloc(s->scratch_len, sizeof *s->scratch);
    if (!s->scratch)
        goto fail_state;
    if ((rc = setup_fd(s, prev, from)) != 0)
        goto fail_state;
    s->mem_fixed = mem_fixed(s);
    for (size_t j = 0; j < s->ng; j++)
        if (s->hg[j].sk)
            s->sk_mem += mv_sketch_memory_used(s->hg[j].sk);
    free(table);
    free(from);
    *out = s;
    return 0;

fail_state:
    free(table);
    free(from);
    mv_pipe_seg_destroy(s);
    return rc;
}
