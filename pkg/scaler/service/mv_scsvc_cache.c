/* mv_scsvc_cache: a bounded map of string keys to byte strings with their age (the scale
 * target and discovery caches, the "logged once" sets). Full, it evicts the oldest entry.
 * Linear: the caps are small (hundreds). Calls nothing else of the module. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mv_scsvc_int.h"
#include "mv_util.h"

int mv_scsvc__kv_init(mv_scsvc__kv *kv, size_t cap)
{
    memset(kv, 0, sizeof *kv);
    kv->cap = cap ? cap : 1;
    kv->e = calloc(kv->cap, sizeof *kv->e);
    if (!kv->e)
        return -ENOMEM;
    pthread_mutex_init(&kv->mu, NULL);
    return 0;
}

static void entry_free(mv_scsvc__kv_entry *e)
{
    free(e->key);
    free(e->val);
    memset(e, 0, sizeof *e);
}

void mv_scsvc__kv_destroy(mv_scsvc__kv *kv)
{
    if (!kv->e)
        return;
    for (size_t i = 0; i < kv->n; i++)
        entry_free(&kv->e[i]);
    free(kv->e);
    kv->e = NULL;
    pthread_mutex_destroy(&kv->mu);
}

static mv_scsvc__kv_entry *find(mv_scsvc__kv *kv, const char *key)
{
    for (size_t i = 0; i < kv->n; i++)
        if (strcmp(kv->e[i].key, key) == 0)
            return &kv->e[i];
    return NULL;
}

char *mv_scsvc__kv_get(mv_scsvc__kv *kv, const char *key, uint64_t ttl_ms, size_t *len)
{
    char *out = NULL;
    uint64_t now = mv_util_mono_ms();
    pthread_mutex_lock(&kv->mu);
    mv_scsvc__kv_entry *e = find(kv, key);
    if (e && now - e->stamp_ms <= ttl_ms && (out = malloc(e->len + 1))) {
        memcpy(out, e->val, e->len);
        out[e->len] = '\0';
        if (len)
            *len = e->len;
    }
    pthread_mutex_unlock(&kv->mu);
    return out;
}

static void remove_at(mv_scsvc__kv *kv, size_t i)
{
    entry_free(&kv->e[i]);
    kv->e[i] = kv->e[--kv->n];
    memset(&kv->e[kv->n], 0, sizeof kv->e[kv->n]);
}

/* A free slot, evicting the oldest entry when full. Locked. */
static mv_scsvc__kv_entry *slot(mv_scsvc__kv *kv)
{
    if (kv->n == kv->cap) {
        size_t old = 0;
        for (size_t i = 1; i < kv->n; i++)
            if (kv->e[i].stamp_ms < kv->e[old].stamp_ms)
                old = i;
        remove_at(kv, old);
    }
    return &kv->e[kv->n];
}

int mv_scsvc__kv_put(mv_scsvc__kv *kv, const char *key, const char *val, size_t len)
{
    char *v = malloc(len + 1);
    if (!v)
        return -ENOMEM;
    memcpy(v, val, len);
    v[len] = '\0';
    pthread_mutex_lock(&kv->mu);
    mv_scsvc__kv_entry *e = find(kv, key);
    if (e) {
        free(e->val);
    } else {
        e = slot(kv);
        if (!(e->key = strdup(key))) {
            pthread_mutex_unlock(&kv->mu);
            free(v);
            return -ENOMEM;
        }
        kv->n++;
    }
    e->val = v;
    e->len = len;
    e->stamp_ms = mv_util_mono_ms();
    pthread_mutex_unlock(&kv->mu);
    return 0;
}

void mv_scsvc__kv_del(mv_scsvc__kv *kv, const char *key)
{
    pthread_mutex_lock(&kv->mu);
    mv_scsvc__kv_entry *e = find(kv, key);
    if (e)
        remove_at(kv, (size_t)(e - kv->e));
    pthread_mutex_unlock(&kv->mu);
}

int mv_scsvc__kv_add(mv_scsvc__kv *kv, const char *key)
{
    pthread_mutex_lock(&kv->mu);
    int rc = 0;
    if (!find(kv, key)) {
        mv_scsvc__kv_entry *e = slot(kv);
        if ((e->key = strdup(key)) && (e->val = strdup(""))) {
            e->stamp_ms = mv_util_mono_ms();
            kv->n++;
            rc = 1;
        } else {
            free(e->key);
            e->key = NULL;
            rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&kv->mu);
    return rc;
}
