/* libFuzzer driver: the remote write snappy path. Arbitrary bytes are given to the decoder as a
 * snappy block (and what decodes, to the WriteRequest and 2.0 Request parsers); and series made
 * from the bytes are encoded (1.0 and 2.0), decoded again and compared. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mv_rw.h"
#include "prometheus/prompb/remote.pb-c.h"
#include "prometheus/write/v2/types.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *raw;
    size_t rlen;
    if (mv_rw_unsnappy(data, size, 1u << 20, &raw, &rlen) == 0) {
        Prometheus__WriteRequest *w = prometheus__write_request__unpack(NULL, rlen, raw);
        if (w)
            prometheus__write_request__free_unpacked(w, NULL);
        Io__Prometheus__Write__V2__Request *r =
            io__prometheus__write__v2__request__unpack(NULL, rlen, raw);
        if (r)
            io__prometheus__write__v2__request__free_unpacked(r, NULL);
        free(raw);
    }
    /* Round trip: up to 8 series of up to 4 labels, strings cut from the input. */
    char buf[1024];
    size_t bl = size < sizeof buf - 1 ? size : sizeof buf - 1;
    for (size_t i = 0; i < bl; i++)
        buf[i] = data[i] ? (char)data[i] : '_';
    buf[bl] = '\0';
    mv_rw_label lab[8][4];
    mv_rw_series ser[8];
    char strs[8][4][2][24];
    size_t ns = size ? data[0] % 9 : 0, o = 1;
    for (size_t s = 0; s < ns; s++) {
        size_t nl = 1 + (o < size ? data[o] % 4 : 0);
        for (size_t l = 0; l < nl; l++) {
            for (int k = 0; k < 2; k++) {
                size_t len = o < size ? data[o] % 23 : 0;
                for (size_t c = 0; c < len; c++)
                    strs[s][l][k][c] = (o + c) < bl ? buf[o + c] : 'x';
                strs[s][l][k][len] = '\0';
                o += len + 1;
            }
            lab[s][l] = (mv_rw_label){strs[s][l][0], strs[s][l][1]};
        }
        double v = 0;
        if (o + 8 <= size)
            memcpy(&v, data + o, 8);
        ser[s] = (mv_rw_series){
            .labels = lab[s], .nlabels = nl, .value = v, .ts_ms = (int64_t)o * 1000 - 5};
        o += 8;
    }
    for (int version = 1; version <= 2; version++) {
        uint8_t *enc;
        size_t len;
        if (mv_rw_encode(version, ser, ns, 6, &enc, &len, NULL) != 0)
            continue;
        if (mv_rw_unsnappy(enc, len, 1u << 24, &raw, &rlen) != 0)
            abort();
        if (version == 1) {
            Prometheus__WriteRequest *w = prometheus__write_request__unpack(NULL, rlen, raw);
            if (!w || w->n_timeseries != ns)
                abort();
            for (size_t s = 0; s < ns; s++) {
                if (w->timeseries[s]->n_labels != ser[s].nlabels ||
                    w->timeseries[s]->n_samples != 1 ||
                    w->timeseries[s]->samples[0]->timestamp != ser[s].ts_ms)
                    abort();
                for (size_t l = 0; l < ser[s].nlabels; l++)
                    if (strcmp(w->timeseries[s]->labels[l]->name, ser[s].labels[l].name) ||
                        strcmp(w->timeseries[s]->labels[l]->value, ser[s].labels[l].value))
                        abort();
            }
            prometheus__write_request__free_unpacked(w, NULL);
        } else {
            Io__Prometheus__Write__V2__Request *r =
                io__prometheus__write__v2__request__unpack(NULL, rlen, raw);
            if (!r || r->n_timeseries != ns || r->n_symbols < 1 || r->symbols[0][0])
                abort();
            for (size_t s = 0; s < ns; s++) {
                const Io__Prometheus__Write__V2__TimeSeries *t = r->timeseries[s];
                if (t->n_labels_refs != 2 * ser[s].nlabels)
                    abort();
                for (size_t l = 0; l < t->n_labels_refs; l++) {
                    const mv_rw_label *want = &ser[s].labels[l / 2];
                    if (t->labels_refs[l] >= r->n_symbols ||
                        strcmp(r->symbols[t->labels_refs[l]], l % 2 ? want->value : want->name))
                        abort();
                }
            }
            io__prometheus__write__v2__request__free_unpacked(r, NULL);
        }
        free(raw);
        free(enc);
    }
    return 0;
}
