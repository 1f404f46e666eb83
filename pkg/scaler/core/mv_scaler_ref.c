/* mv_scaler_ref: KEDA's ScaledObjectRef (externalscaler.proto) to trigger metadata. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "keda/externalscaler/externalscaler.pb-c.h"
#include "mv_scaler.h"

int mv_scaler_meta_from_ref(const uint8_t *req, size_t len, mv_scaler_meta *out, char *err,
                            size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    if (len > MV_SCALER_REF_MAX) {
        snprintf(err, errlen, "ScaledObjectRef of %zu bytes: at most %u", len, MV_SCALER_REF_MAX);
        return -EINVAL;
    }
    Externalscaler__ScaledObjectRef *r = externalscaler__scaled_object_ref__unpack(NULL, len, req);
    if (!r) {
        snprintf(err, errlen, "malformed ScaledObjectRef");
        return -EINVAL;
    }
    int rc = 0;
    size_t n = r->n_scalermetadata;
    if (n > MV_SCALER_META_ENTRIES_MAX) {
        snprintf(err, errlen, "%zu metadata entries: at most %d", n, MV_SCALER_META_ENTRIES_MAX);
        rc = -EINVAL;
        goto out;
    }
    const char *keys[MV_SCALER_META_ENTRIES_MAX + 1], *vals[MV_SCALER_META_ENTRIES_MAX + 1];
    int has_ns = 0;
    for (size_t i = 0; i < n; i++) {
        keys[i] = r->scalermetadata[i]->key;
        vals[i] = r->scalermetadata[i]->value;
        has_ns |= keys[i] && strcmp(keys[i], "namespace") == 0;
        /* protobuf-c gives every string field; a missing one means a malformed entry. */
        if (!keys[i] || !vals[i]) {
            snprintf(err, errlen, "metadata entry %zu has no key or value", i);
            rc = -EINVAL;
            goto out;
        }
    }
    /* The workload's namespace defaults to the ScaledObject's. */
    if (!has_ns && r->namespace_ && r->namespace_[0]) {
        keys[n] = "namespace";
        vals[n++] = r->namespace_;
    }
    rc = mv_scaler_meta_parse(keys, vals, n, out, err, errlen);
out:
    externalscaler__scaled_object_ref__free_unpacked(r, NULL);
    return rc;
}
