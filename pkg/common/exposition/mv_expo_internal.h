/* mv_expo_internal: what the renderer and the number formatting of pkg/common/exposition share.
 * Not part of the module's interface: include mv_expo.h outside this directory. */
#ifndef MV_EXPO_INTERNAL_H
#define MV_EXPO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mv_expo.h"

/* ASCII decimal digit. */
static inline int expo_is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* The same for a signed value (at least 21 bytes). */
size_t mv_expo__fmt_i64(int64_t v, char *out);

/* Where a classic bucket's observations go in a native histogram (of one schema and zero
 * threshold): mv_expo__nh_classic_map works it out once per set of bounds, and
 * mv_expo__nh_add_mapped adds counts as mv_expo_nh_add_classic would (map: nb + 1 slots). */
enum { MV_EXPO__NH_SKIP = 0, MV_EXPO__NH_ZERO = 1, MV_EXPO__NH_BUCKET = 2 };
typedef struct mv_expo__nh_slot {
    int32_t idx;
    uint8_t kind;
    uint8_t neg;
} mv_expo__nh_slot;
int mv_expo__nh_classic_map(const mv_expo_nh *h, const double *bounds, size_t nb,
                            mv_expo__nh_slot *map);
int mv_expo__nh_add_mapped(mv_expo_nh *h, const mv_expo__nh_slot *map, size_t nb,
                           const uint64_t *cum);

/* The protobuf family builder (mv_expo_pb.c): begin a family, feed its samples (checked by
 * mv_expo.c), end it to get its delimited bytes (valid until the next begin). Errors are
 * -ENOSPC (the family passed `cap` bytes) and -ENOMEM, sticky until the next begin. */
typedef struct mv_expo__pb mv_expo__pb;
mv_expo__pb *mv_expo__pb_create(void);
void mv_expo__pb_destroy(mv_expo__pb *p);
void mv_expo__pb_native(mv_expo__pb *p, int32_t schema, uint32_t max_buckets);
void mv_expo__pb_begin(mv_expo__pb *p, const char *name, mv_expo_type t, const char *help,
                       const char *unit, size_t cap);
int mv_expo__pb_sample(mv_expo__pb *p, const char *suffix, const mv_expo_label *a, size_t na,
                       const mv_expo_label *b, size_t nb, const char *xname, double xval, double v,
                       uint64_t u, int is_u, int64_t ts);
int mv_expo__pb_end(mv_expo__pb *p, const char **data, size_t *len);
/* mv_expo_pb_histogram / mv_expo_pb_summary on the builder (no series open). */
int mv_expo__pb_hist_part(mv_expo__pb *p, const double *le, const uint64_t *cum, size_t n,
                          double sum, uint64_t count, const uint8_t **out, size_t *len);
/* A gauge histogram's series (mv_expo_native; labels checked), and its value message alone. */
int mv_expo__pb_native_series(mv_expo__pb *p, const mv_expo_label *a, size_t na,
                              const mv_expo_label *b, size_t nb, const mv_expo_native_in *in,
                              int64_t ts);
int mv_expo__pb_native_part(mv_expo__pb *p, const mv_expo_native_in *in, const uint8_t **out,
                            size_t *len);
int mv_expo__pb_summary_part(mv_expo__pb *p, const double *q, const double *v, size_t n, double sum,
                             uint64_t count, const uint8_t **out, size_t *len);

#endif
