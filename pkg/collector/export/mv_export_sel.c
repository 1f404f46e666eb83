/* mv_export_sel: the choice of derived series (--derived KEY=ITEMS), see mv_export.h. */
#include "mv_export.h"
#include "mv_export_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fam_sel {
    char *name;
    uint32_t mask;
} fam_sel;

struct mv_export_sel {
    uint64_t serial;       /* mv_export__sel_serial: new at creation and at every change */
    uint32_t type_mask[4]; /* by MV_SEG_* type */
    fam_sel *fam;          /* sorted by name */
    size_t nfam, cap;
};

static const struct {
    const char *name;
    uint32_t bits;
} sel_items[] = {
    {"rate", MV_DERIVED_RATE},
    {"rate_max", MV_DERIVED_RATE_MAX},
    {"rate_short", MV_DERIVED_RATE_SHORT},
    {"resets", MV_DERIVED_RESETS},
    {"p50", MV_DERIVED_P50},
    {"p90", MV_DERIVED_P90},
    {"p99", MV_DERIVED_P99},
    {"p999", MV_DERIVED_P999},
    {"quantiles", MV_DERIVED_P50 | MV_DERIVED_P90 | MV_DERIVED_P99 | MV_DERIVED_P999},
    {"min", MV_DERIVED_MIN},
    {"max", MV_DERIVED_MAX},
    {"mean", MV_DERIVED_MEAN},
    {"last", MV_DERIVED_LAST},
    {"changes", MV_DERIVED_CHANGES},
    {"all", MV_DERIVED_ALL},
    {"none", 0},
};

/* Serials of selection states, process-wide, so that none is ever reused (a selection freed
 * and another made at the same address still differ for the exposition cache). */
static uint64_t sel_serials;

static void sel_changed(mv_export_sel *sel)
{
    sel->serial = __atomic_add_fetch(&sel_serials, 1, __ATOMIC_RELAXED);
}

uint64_t mv_export__sel_serial(const mv_export_sel *sel)
{
    return sel ? sel->serial : 0;
}

mv_export_sel *mv_export_sel_create(void)
{
    mv_export_sel *sel = calloc(1, sizeof *sel);
    if (!sel)
        return NULL;
    sel->type_mask[MV_SEG_COUNTER] = MV_EXPORT_DEFAULT_COUNTER;
    sel->type_mask[MV_SEG_GAUGE] = MV_EXPORT_DEFAULT_GAUGE;
    sel->type_mask[MV_SEG_HISTOGRAM] = MV_EXPORT_DEFAULT_HISTOGRAM;
    sel_changed(sel);
    return sel;
}

void mv_export_sel_destroy(mv_export_sel *sel)
{
    if (!sel)
        return;
    for (size_t i = 0; i < sel->nfam; i++)
        free(sel->fam[i].name);
    free(sel->fam);
    free(sel);
}

static int fam_cmp(const void *k, const void *e)
{
    return strcmp((const char *)k, ((const fam_sel *)e)->name);
}

int mv_export_sel_add(mv_export_sel *sel, const char *spec, char *err, size_t errlen)
{
    const char *eq = strchr(spec, '=');
    size_t klen = eq ? (size_t)(eq - spec) : 0;
    if (!eq || klen == 0 || klen > MV_SEG_NAME_MAX) {
        snprintf(err, errlen,
                 "want KEY=ITEMS (KEY: counter, gauge, histogram or a metric name), "
                 "got \"%s\"",
                 spec);
        return -EINVAL;
    }
    for (size_t i = 0; i < klen; i++) {
        char c = spec[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9'))) {
            snprintf(err, errlen, "\"%.*s\" is not a metric name", (int)klen, spec);
            return -EINVAL;
        }
    }
    uint32_t mask = 0;
    const char *p = eq + 1;
    while (1) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        size_t k = 0, nitems = sizeof sel_items / sizeof sel_items[0];
        while (k < nitems &&
               !(strlen(sel_items[k].name) == n && strncmp(sel_items[k].name, p, n) == 0))
            k++;
        if (k == nitems) {
            snprintf(err, errlen,
                     "unknown derived series \"%.*s\" (rate, rate_max, rate_short, resets, p50, "
                     "p90, p99, p999, quantiles, min, max, mean, last, changes, all, none)",
                     (int)n, p);
            return -EINVAL;
        }
        mask |= sel_items[k].bits;
        if (!end)
            break;
        p = end + 1;
    }
    static const char *const types[4] = {NULL, "counter", "gauge", "histogram"};
    for (int t = 1; t < 4; t++) {
        if (strlen(types[t]) == klen && strncmp(types[t], spec, klen) == 0) {
            sel->type_mask[t] = mask;
            sel_changed(sel);
            return 0;
        }
    }
    char name[MV_SEG_NAME_MAX + 1];
    memcpy(name, spec, klen);
    name[klen] = '\0';
    fam_sel *f = sel->nfam ? bsearch(name, sel->fam, sel->nfam, sizeof *sel->fam, fam_cmp) : NULL;
    if (f) {
        f->mask = mask;
        sel_changed(sel);
        return 0;
    }
    if (sel->nfam == sel->cap) {
        size_t cap = sel->cap ? 2 * sel->cap : 8;
        fam_sel *nf = realloc(sel->fam, cap * sizeof *nf);
        if (!nf)
            return -ENOMEM;
        sel->fam = nf;
        sel->cap = cap;
    }
    size_t at = 0;
    while (at < sel->nfam && strcmp(sel->fam[at].name, name) < 0)
        at++;
    char *dup = strdup(name);
    if (!dup)
        return -ENOMEM;
    memmove(sel->fam + at + 1, sel->fam + at, (sel->nfam - at) * sizeof *sel->fam);
    sel->fam[at] = (fam_sel){dup, mask};
    sel->nfam++;
    sel_changed(sel);
    return 0;
}

uint32_t mv_export_sel_mask(const mv_export_sel *sel, uint8_t type, const char *name)
{
    if (!sel)
        return MV_DERIVED_ALL;
    if (sel->nfam) {
        const fam_sel *f = bsearch(name, sel->fam, sel->nfam, sizeof *sel->fam, fam_cmp);
        if (f)
            return f->mask;
    }
    if (type == MV_SEG_COUNTER_F) /* a counter on the wire, and here */
        type = MV_SEG_COUNTER;
    return type < 4 ? sel->type_mask[type] : 0;
}
