/* mv_httpd internals shared by its files: the TLS key pair layer (mv_httpd_tls.c) below the
 * server (mv_httpd.c). */
#ifndef MV_HTTPD_INT_H
#define MV_HTTPD_INT_H

#include <stdint.h>

typedef struct mv_httpd__tls mv_httpd__tls;

/* Loads the key pair and registers the process's TLS server. Returns 0, -EINVAL (logged as
 * tls.load_failed), -EBUSY (another TLS server exists) or -ENOMEM. */
int mv_httpd__tls_create(const char *cert_file, const char *key_file, unsigned reload_ms,
                         mv_httpd__tls **out);
/* The certificate callback to hand to libmicrohttpd (MHD_OPTION_HTTPS_CERT_CALLBACK). */
void *mv_httpd__tls_cert_callback(void);
/* Starts the thread that re-reads the key pair when its files change. */
void mv_httpd__tls_watch(mv_httpd__tls *t);
int mv_httpd__tls_check_reload(mv_httpd__tls *t);
void mv_httpd__tls_stats(mv_httpd__tls *t, uint64_t *ok, uint64_t *failed, int64_t *not_after);
/* Stops the watcher, unregisters and frees (after the daemon stopped). NULL is ignored. */
void mv_httpd__tls_destroy(mv_httpd__tls *t);

#endif
