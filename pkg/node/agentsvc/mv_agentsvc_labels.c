/* mv_agentsvc_labels: CreateSegmentRequest labels checked on the request's protobuf bytes, before
 * protobuf-c turns them into C strings (see mv_agentsvc_check_raw_labels in mv_agentsvc.h). It
 * needs no gRPC: the fuzz driver fuzz_agent_labels compiles it alone. */
#include "mv_agentsvc.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

/* ---- Labels as sent ----------------------------------------------------------- */

/* protobuf-c hands strings on as C strings, so a NUL inside a label would silently cut it:
 * the labels are checked on the wire bytes, with their lengths. */
static int wire_varint(const uint8_t *p, size_t len, size_t *off, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 64 && *off < len; shift += 7) {
        uint8_t b = p[(*off)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* Walks one message's fields: calls fn for each length-delimited one. 0, or -1 when the bytes
 * are not protobuf or fn refused. */
typedef int (*wire_field_fn)(void *arg, uint64_t field, const uint8_t *p, size_t len);

static int wire_walk(const uint8_t *p, size_t len, wire_field_fn fn, void *arg)
{
    size_t off = 0;
    while (off < len) {
        uint64_t key, v;
        if (wire_varint(p, len, &off, &key) < 0)
            return -1;
        switch (key & 7) {
        case 0:
            if (wire_varint(p, len, &off, &v) < 0)
                return -1;
            break;
        case 1:
            if (len - off < 8)
                return -1;
            off += 8;
            break;
        case 5:
            if (len - off < 4)
                return -1;
            off += 4;
            break;
        case 2:
            if (wire_varint(p, len, &off, &v) < 0 || v > len - off)
                return -1;
            if (fn(arg, key >> 3, p + off, (size_t)v) < 0)
                return -1;
            off += (size_t)v;
            break;
        default:
            return -1;
        }
    }
    return 0;
}

typedef struct label_check {
    size_t idx;
    const uint8_t *name, *value;
    size_t nlen, vlen;
    char *err;
    size_t errlen;
} label_check;

static int label_field(void *arg, uint64_t field, const uint8_t *p, size_t len)
{
    label_check *c = arg;
    if (field == 1) {
        c->name = p;
        c->nlen = len;
    } else if (field == 2) {
        c->value = p;
        c->vlen = len;
    }
    return 0;
}

static int request_field(void *arg, uint64_t field, const uint8_t *p, size_t len)
{
    label_check *c = arg;
    if (field != 3) /* CreateSegmentRequest.labels */
        return 0;
    c->name = c->value = NULL;
    c->nlen = c->vlen = 0;
    if (wire_walk(p, len, label_field, c) < 0)
        return -1;
    return mv_segstore_check_label_bytes(c->idx++, (const char *)c->name, c->nlen,
                                         (const char *)c->value, c->vlen, c->err, c->errlen);
}

int mv_agentsvc_check_raw_labels(const uint8_t *req, size_t len, char *err, size_t errlen)
{
    label_check c = {.err = err, .errlen = errlen};
    if (errlen)
        err[0] = '\0';
    if (wire_walk(req, len, request_field, &c) < 0) {
        if (errlen && !err[0])
            snprintf(err, errlen, "malformed CreateSegmentRequest");
        return -EINVAL;
    }
    return 0;
}
