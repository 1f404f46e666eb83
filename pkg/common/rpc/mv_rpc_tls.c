/* mv_rpc_tls: TLS credentials of gRPC core (grpc_ssl_*) from PEM files, for the TCP listener
 * and for channels. */
#include "mv_rpc_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "mv_log.h"

#define PEM_MAX (1u << 20) /* bytes of one PEM file accepted */

/* Reads a whole PEM file into a NUL-terminated buffer. Returns it, or NULL with the reason
 * (naming `what` and the path) in `err`. */
static char *pem_read(const char *what, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 ||
        (uint64_t)sb.st_size > PEM_MAX) {
        snprintf(err, errlen, "%s %s: not a regular file of 1 to %u bytes", what, path, PEM_MAX);
        fclose(f);
        return NULL;
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        snprintf(err, errlen, "%s %s: %s", what, path, buf ? "short read" : "out of memory");
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (memchr(buf, 0, n) || !strstr(buf, "-----BEGIN ")) {
        snprintf(err, errlen, "%s %s: not PEM (no -----BEGIN line)", what, path);
        free(buf);
        return NULL;
    }
    return buf;
}

static void pem_free(char *p)
{
    if (p) {
        memset(p, 0, strlen(p)); /* key material */
        free(p);
    }
}

grpc_server_credentials *mv_rpc__tls_server_creds(const mv_rpc_tls_server_opts *o, char *err,
                                                  size_t errlen)
{
    if (!o || !o->cert_file || !o->key_file) {
        snprintf(err, errlen, "TLS needs a certificate and a key");
        return NULL;
    }
    if (o->require_client_cert && !o->client_ca_file) {
        snprintf(err, errlen, "requiring client certificates needs a client CA");
        return NULL;
    }
    char *cert = pem_read("certificate", o->cert_file, err, errlen);
    char *key = cert ? pem_read("key", o->key_file, err, errlen) : NULL;
    char *ca = NULL;
    if (key && o->client_ca_file)
        ca = pem_read("client CA", o->client_ca_file, err, errlen);
    grpc_server_credentials *creds = NULL;
    if (key && (!o->client_ca_file || ca)) {
        grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
        grpc_ssl_client_certificate_request_type req =
            !ca                      ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : o->require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                     : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
        creds = grpc_ssl_server_credentials_create_ex(ca, &pair, 1, req, NULL);
        if (!creds)
            snprintf(err, errlen, "gRPC refused the certificate/key pair");
    }
    pem_free(cert);
    pem_free(key);
    pem_free(ca);
    return creds;
}

int mv_rpc_server_listen_tls(mv_rpc_server *s, const char *addr, const mv_rpc_tls_server_opts *tls,
                             char *err, size_t errlen)
{
    if (s->started || !addr || strncmp(addr, "unix:", 5) == 0) {
        snprintf(err, errlen, "TLS is for TCP addresses, before the server starts");
        return -EINVAL;
    }
    grpc_server_credentials *creds = mv_rpc__tls_server_creds(tls, err, errlen);
    if (!creds) {
        MV_ERROR("rpc.listen_failed", "addr=%s err=%s", mv_log_q(addr), mv_log_q(err));
        return -EINVAL;
    }
    int port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0) {
        snprintf(err, errlen, "cannot listen on %s", addr);
        MV_ERROR("rpc.listen_failed", "addr=%s tls=1", mv_log_q(addr));
        return -EADDRNOTAVAIL;
    }
    return port;
}

grpc_channel_credentials *mv_rpc__tls_channel_creds(const mv_rpc_tls_client_opts *o, char *err,
                                                    size_t errlen)
{
    if (!o || !o->ca_file) {
        snprintf(err, errlen, "TLS needs the CA that signed the server's certificate");
        return NULL;
    }
    if (!o->cert_file != !o->key_file) {
        snprintf(err, errlen, "a client certificate needs its key, and a key its certificate");
        return NULL;
    }
    char *ca = pem_read("CA", o->ca_file, err, errlen);
    char *cert = NULL, *key = NULL;
    if (ca && o->cert_file) {
        cert = pem_read("certificate", o->cert_file, err, errlen);
        key = cert ? pem_read("key", o->key_file, err, errlen) : NULL;
    }
    grpc_channel_credentials *creds = NULL;
    if (ca && (!o->cert_file || key)) {
        grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
        creds = grpc_ssl_credentials_create(ca, key ? &pair : NULL, NULL, NULL);
        if (!creds)
            snprintf(err, errlen, "gRPC refused the TLS client settings");
    }
    pem_free(ca);
    pem_free(cert);
    pem_free(key);
    return creds;
}
