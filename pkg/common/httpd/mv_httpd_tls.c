/* mv_httpd_tls: the HTTPS key pair: loaded from PEM files, handed to GnuTLS per handshake, and
 * re-read when the files change (a Kubernetes Secret volume swaps a symlink). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "mv_httpd_int.h"
#include "mv_log.h"

#define MAX_CHAIN    16
#define MAX_RETIRED  64 /* replaced key pairs kept alive for sessions that may still use them */
#define PEM_FILE_MAX (1u << 20)

/* One loaded certificate chain and key. Never changed after load; freed at destroy (a TLS
 * session may keep pointers to it after the handshake). */
typedef struct keypair {
    gnutls_pcert_st certs[MAX_CHAIN];
    unsigned ncerts;
    gnutls_privkey_t key;
    time_t not_after;
    struct keypair *older;
} keypair;

/* What identifies the contents of a file without reading it: a Secret volume swaps a symlink,
 * which changes the inode; an in-place rewrite changes mtime or size. */
typedef struct {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int ok;
} file_id;

struct mv_httpd__tls {
    char *cert_file, *key_file;
    unsigned reload_ms;
    pthread_mutex_t lock; /* guards current, retired, ids */
    keypair *current;
    unsigned retired;
    file_id cert_id, key_id; /* of the last attempt, good or bad */
    pthread_t watcher;
    int watching;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    int stopping;
    atomic_ullong reload_ok, reload_failed;
};

/* GnuTLS's certificate callback has no user pointer: the one TLS server of the process. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mv_httpd__tls *g_tls;

static int read_file(const char *path, gnutls_datum_t *out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char *buf = malloc(PEM_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, PEM_FILE_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad || n == 0 || n > PEM_FILE_MAX) {
        snprintf(err, errlen, "%s: %s", path,
                 !buf  ? "out of memory"
                 : bad ? "read error"
                 : n   ? "larger than 1 MiB"
                       : "empty");
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    out->data = buf;
    out->size = (unsigned)n;
    return 0;
}

static void keypair_free(keypair *kp)
{
    while (kp) {
        keypair *older = kp->older;
        for (unsigned i = 0; i < kp->ncerts; i++)
            gnutls_pcert_deinit(&kp->certs[i]);
        if (kp->key)
            gnutls_privkey_deinit(kp->key);
        free(kp);
        kp = older;
    }
}

static void file_stat(const char *path, file_id *id)
{
    struct stat st;
    memset(id, 0, sizeof *id);
    if (stat(path, &st) != 0)
        return;
    id->ok = 1;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    id->size = st.st_size;
    id->mtime = st.st_mtim;
}

static int file_id_eq(const file_id *a, const file_id *b)
{
    return a->ok == b->ok && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Loads and checks a pair: the PEM parses, the key matches the first certificate. */
static keypair *keypair_load(const char *cert_path, const char *key_path, char *err, size_t errlen)
{
    gnutls_datum_t cert = {0}, key = {0};
    gnutls_certificate_credentials_t check = NULL;
    keypair *kp = NULL;
    int rc;
    if (read_file(cert_path, &cert, err, errlen) != 0 || read_file(key_path, &key, err, errlen))
        goto out;
    /* gnutls compares the key with the certificate here. */
    if (gnutls_certificate_allocate_credentials(&check) < 0) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = gnutls_certificate_set_x509_key_mem2(check, &cert, &key, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (rc < 0) {
        snprintf(err, errlen, "%s + %s: %s", cert_path, key_path, gnutls_strerror(rc));
        goto out;
    }
    kp = calloc(1, sizeof *kp);
    if (!kp) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    kp->ncerts = MAX_CHAIN;
    rc = gnutls_pcert_list_import_x509_raw(kp->certs, &kp->ncerts, &cert, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0) {
        kp->ncerts = 0;
        snprintf(err, errlen, "%s: %s", cert_path, gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_privkey_init(&kp->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(kp->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        snprintf(err, errlen, "%s: %s", key_path, gnutls_strerror(rc));
        goto fail;
    }
    gnutls_x509_crt_t crt;
    if (gnutls_x509_crt_init(&crt) == 0) {
        if (gnutls_x509_crt_import(crt, &kp->certs[0].cert, GNUTLS_X509_FMT_DER) == 0)
            kp->not_after = gnutls_x509_crt_get_expiration_time(crt);
        gnutls_x509_crt_deinit(crt);
    }
    goto out;
fail:
    keypair_free(kp);
    kp = NULL;
out:
    if (check)
        gnutls_certificate_free_credentials(check);
    if (key.data) {
        memset(key.data, 0, key.size);
        free(key.data);
    }
    free(cert.data);
    return kp;
}

static int cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                         gnutls_pcert_st **pcert, unsigned int *pcert_length,
                         gnutls_privkey_t *pkey)
{
    (void)session;
    (void)req_ca_dn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    int rc = -1;
    pthread_mutex_lock(&g_lock);
    mv_httpd__tls *t = g_tls;
    if (t) {
        pthread_mutex_lock(&t->lock);
        keypair *kp = t->current;
        if (kp) {
            *pcert = kp->certs;
            *pcert_length = kp->ncerts;
            *pkey = kp->key;
            rc = 0;
        }
        pthread_mutex_unlock(&t->lock);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

void *mv_httpd__tls_cert_callback(void)
{
    return (void *)cert_callback;
}

int mv_httpd__tls_check_reload(mv_httpd__tls *t)
{
    file_id c, k;
    file_stat(t->cert_file, &c);
    file_stat(t->key_file, &k);
    pthread_mutex_lock(&t->lock);
    int same = file_id_eq(&c, &t->cert_id) && file_id_eq(&k, &t->key_id);
    t->cert_id = c;
    t->key_id = k;
    pthread_mutex_unlock(&t->lock);
    if (same)
        return 0;

    char err[512];
    keypair *kp = keypair_load(t->cert_file, t->key_file, err, sizeof err);
    if (!kp) {
        atomic_fetch_add(&t->reload_failed, 1);
        MV_ERROR("tls.reload_failed", "cert=%s key=%s err=%s msg=%s", mv_log_q(t->cert_file),
                 mv_log_q(t->key_file), mv_log_q(err),
                 mv_log_q("still serving the previous key pair; write a matching PEM "
                          "certificate and key"));
        return -EINVAL;
    }
    keypair *drop = NULL;
    pthread_mutex_lock(&t->lock);
    kp->older = t->current;
    t->current = kp;
    if (++t->retired > MAX_RETIRED) {
        /* Cut the oldest pair, replaced MAX_RETIRED rotations ago. */
        keypair *p = kp;
        for (unsigned i = 0; i < MAX_RETIRED && p->older; i++)
            p = p->older;
        drop = p->older;
        p->older = NULL;
        t->retired = MAX_RETIRED;
    }
    pthread_mutex_unlock(&t->lock);
    keypair_free(drop);
    atomic_fetch_add(&t->reload_ok, 1);
    MV_INFO("tls.reloaded", "cert=%s key=%s chain=%u not_after=%lld", mv_log_q(t->cert_file),
            mv_log_q(t->key_file), kp->ncerts, (long long)kp->not_after);
    return 1;
}

static void *watch_main(void *arg)
{
    mv_httpd__tls *t = arg;
    unsigned ms = t->reload_ms;
    pthread_mutex_lock(&t->stop_lock);
    while (!t->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!t->stopping &&
               pthread_cond_timedwait(&t->stop_cond, &t->stop_lock, &until) != ETIMEDOUT)
            ;
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->stop_lock);
        mv_httpd__tls_check_reload(t);
        pthread_mutex_lock(&t->stop_lock);
    }
    pthread_mutex_unlock(&t->stop_lock);
    return NULL;
}

void mv_httpd__tls_watch(mv_httpd__tls *t)
{
    if (t->watching)
        return;
    if (pthread_create(&t->watcher, NULL, watch_main, t) == 0)
        t->watching = 1;
    else
        MV_WARN("tls.watch_failed", "msg=%s", mv_log_q("key pair rotation will not be noticed"));
}

void mv_httpd__tls_stats(mv_httpd__tls *t, uint64_t *ok, uint64_t *failed, int64_t *not_after)
{
    *ok = atomic_load(&t->reload_ok);
    *failed = atomic_load(&t->reload_failed);
    pthread_mutex_lock(&t->lock);
    *not_after = t->current ? (int64_t)t->current->not_after : 0;
    pthread_mutex_unlock(&t->lock);
}

int mv_httpd__tls_create(const char *cert_file, const char *key_file, unsigned reload_ms,
                         mv_httpd__tls **out)
{
    char err[512];
    *out = NULL;
    mv_httpd__tls *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->reload_ms = reload_ms ? reload_ms : 1000;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->stop_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    t->cert_file = strdup(cert_file);
    t->key_file = strdup(key_file);
    if (!t->cert_file || !t->key_file) {
        mv_httpd__tls_destroy(t);
        return -ENOMEM;
    }
    file_stat(t->cert_file, &t->cert_id);
    file_stat(t->key_file, &t->key_id);
    t->current = keypair_load(t->cert_file, t->key_file, err, sizeof err);
    if (!t->current) {
        MV_ERROR("tls.load_failed", "cert=%s key=%s err=%s", mv_log_q(t->cert_file),
                 mv_log_q(t->key_file), mv_log_q(err));
        mv_httpd__tls_destroy(t);
        return -EINVAL;
    }
    pthread_mutex_lock(&g_lock);
    if (g_tls) {
        pthread_mutex_unlock(&g_lock);
        MV_ERROR("tls.config", "msg=%s", mv_log_q("a TLS server already exists in this process"));
        mv_httpd__tls_destroy(t);
        return -EBUSY;
    }
    g_tls = t;
    pthread_mutex_unlock(&g_lock);
    *out = t;
    return 0;
}

void mv_httpd__tls_destroy(mv_httpd__tls *t)
{
    if (!t)
        return;
    if (t->watching) {
        pthread_mutex_lock(&t->stop_lock);
        t->stopping = 1;
        pthread_cond_signal(&t->stop_cond);
        pthread_mutex_unlock(&t->stop_lock);
        pthread_join(t->watcher, NULL);
    }
    pthread_mutex_lock(&g_lock);
    if (g_tls == t)
        g_tls = NULL;
    pthread_mutex_unlock(&g_lock);
    keypair_free(t->current);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->stop_lock);
    pthread_cond_destroy(&t->stop_cond);
    free(t->cert_file);
    free(t->key_file);
    free(t);
}
