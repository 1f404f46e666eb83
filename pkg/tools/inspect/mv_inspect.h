/* mv_inspect: decode a segment (file or bytes) for people and tools. */
#ifndef MV_INSPECT_H
#define MV_INSPECT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mv_segment.h"

/* Copies the segment file at `path` (read-only mapping, 8-byte atomic word
 * copies) into a new buffer. Returns 0 and *buf (free with free()) and *len,
 * or -errno with a message in errbuf. */
/* Writes `s` for a one-line human listing: backslash, double quote and newline escaped as in
 * the Prometheus text format, other control bytes as \xNN, so a label value cannot break or
 * forge a line. */
void mv_inspect_put_escaped(FILE *out, const char *s);

int mv_inspect_load(const char *path, void **buf, size_t *len, char *errbuf, size_t errlen);

/* Decodes `buf` and prints it to `out`, as text (json = 0) or one JSON
 * document (json = 1). On a rejected segment prints nothing and returns the
 * reason with `err` filled in; otherwise MV_SEG_OK. */
mv_seg_reason mv_inspect_print(FILE *out, const char *path, const void *buf, size_t len, int json,
                               mv_seg_error *err);

#endif
