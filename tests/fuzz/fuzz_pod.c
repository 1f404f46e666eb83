/* libFuzzer driver: pod JSON parsing and the microview.io/labels annotation parser. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mv_kube_pod p;
    char err[256];
    if (mv_kube_parse_pod((const char *)data, size, &p, err, sizeof err) == 0) {
        if (!p.name || !p.namespace_ || p.nlabels > MV_KUBE_KV_MAX)
            __builtin_trap();
        mv_kube_kv *v;
        size_t n;
        int rc = mv_kube_parse_labels(mv_kube_pod_annotation(&p, MV_KUBE_ANNOTATION), &v, &n, NULL,
                                      NULL);
        if (rc >= 0) {
            if (n > MV_KUBE_POD_LABELS_MAX || (size_t)rc != n)
                __builtin_trap();
            mv_kube_kvs_free(v, n);
        }
        mv_kube_pod_clear(&p);
    }
    /* The raw bytes as an annotation value, too. */
    char *s = malloc(size + 1);
    if (s) {
        memcpy(s, data, size);
        s[size] = 0;
        mv_kube_kv *v;
        size_t n;
        if (mv_kube_parse_labels(s, &v, &n, NULL, NULL) >= 0)
            mv_kube_kvs_free(v, n);
        free(s);
    }
    return 0;
}
