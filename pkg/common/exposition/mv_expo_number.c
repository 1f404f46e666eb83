/* mv_expo_number: integers and doubles in the exposition formats (shortest round trip). */
#include "mv_expo_internal.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Numbers ------------------------------------------------------------------------ */

/* Writes v in decimal to out (room for 20 digits); returns the length. */
size_t mv_expo_format_u64(uint64_t v, char *out)
{
    static const char pairs[201] = "00010203040506070809101112131415161718192021222324252627282930"
                                   "31323334353637383940414243444546474849505152535455565758596061"
                                   "62636465666768697071727374757677787980818283848586878889909192"
                                   "93949596979899";
    char tmp[20];
    size_t n = sizeof tmp;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        n -= 2;
        memcpy(tmp + n, pairs + 2 * r, 2);
    }
    if (v >= 10) {
        n -= 2;
        memcpy(tmp + n, pairs + 2 * v, 2);
    } else {
        tmp[--n] = (char)('0' + v);
    }
    memcpy(out, tmp + n, sizeof tmp - n);
    return sizeof tmp - n;
}

size_t mv_expo__fmt_i64(int64_t v, char *out)
{
    if (v >= 0)
        return mv_expo_format_u64((uint64_t)v, out);
    out[0] = '-';
    return 1 + mv_expo_format_u64((uint64_t)(-(v + 1)) + 1, out + 1);
}

/* Exact powers of ten representable as doubles. */
static const double pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Fast path for the common case: a = s / 10^k for an integer s < 10^15 whose quotient,
 * correctly rounded, is a. Such a decimal is the only one of at most 15 significant
 * digits within half an ulp of a, so it is exactly what rounding a to 15 digits gives
 * (and it round-trips): the same digits the general path finds. Fills digits (trailing
 * zeros stripped) and the decimal exponent; returns the digit count or 0. */
static int short_digits(double a, char *digits, int *exp10)
{
    if (!(a >= 1e-7 && a < 1e15))
        return 0;
    int k = 0;
    while (a * pow10_tab[k] < 1)
        k++;
    for (; k <= 22; k++) {
        double t = a * pow10_tab[k];
        if (t >= 1e15)
            return 0;
        uint64_t si = (uint64_t)(t + 0.5);
        if (si == 0 || (double)si / pow10_tab[k] != a)
            continue;
        char tmp[20];
        int nd = (int)mv_expo_format_u64(si, tmp);
        *exp10 = nd - 1 - k;
        while (nd > 1 && tmp[nd - 1] == '0')
            nd--;
        memcpy(digits, tmp, (size_t)nd);
        return nd;
    }
    return 0;
}

/* General path: the first of 15, 16 or 17 significant digits that round-trips. */
static int round_trip_digits(double v, char *digits, int *exp10)
{
    char tmp[40];
    /* 15 significant digits round-trip exactly when any representation of <= 15 digits
     * does (DBL_DIG); else try 16, else 17 always works. */
    int prec0 = fabs(v) < DBL_MIN ? 0 : 14; /* subnormals carry fewer digits: search all */
    for (int prec = prec0; prec <= 16; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, v);
        if (prec == 16 || strtod(tmp, NULL) == v)
            break;
    }
    /* tmp is [-]d.ddde[+-]xx */
    const char *p = tmp;
    int nd = 0;
    if (*p == '-')
        p++;
    for (; *p && *p != 'e'; p++)
        if (expo_is_digit((unsigned char)*p))
            digits[nd++] = *p;
    *exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    return nd;
}

/* ---- Exact 15/16/17-digit rounding without printf --------------------------------------------
 * What round_trip_digits() computes, with 128-bit integers: for a = m * 2^e (|v|, m the 53-bit
 * significand), X = a * 10^s is held exactly as A / B with s chosen so that 10^16 <= X < 10^17.
 * R_P, X rounded half-to-even to P significant digits (what "%.{P-1}e" prints), round-trips
 * exactly when it lies within half a gap of a: strictly inside, or on the edge when m is even
 * (strtod's ties go to the even significand); the gap below a power of two is half the one
 * above. The first of P = 15, 16, 17 that round-trips is taken, as round_trip_digits() does.
 * Covers 1e-6 <= a < 2^127; returns 0 (use the general path) elsewhere. */
typedef unsigned __int128 u128;
typedef __int128 i128;

static const uint64_t pow10_u64[20] = {1ull,
                                       10ull,
                                       100ull,
                                       1000ull,
                                       10000ull,
                                       100000ull,
                                       1000000ull,
                                       10000000ull,
                                       100000000ull,
                                       1000000000ull,
                                       10000000000ull,
                                       100000000000ull,
                                       1000000000000ull,
                                       10000000000000ull,
                                       100000000000000ull,
                                       1000000000000000ull,
                                       10000000000000000ull,
                                       100000000000000000ull,
                                       1000000000000000000ull,
                                       10000000000000000000ull};

/* 10^k as doubles for k = -7..38 (exact up to 1e22). */
static const double pow10_dbl[46] = {
    1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,
    1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24,
    1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32, 1e33, 1e34, 1e35, 1e36, 1e37, 1e38};

static u128 pow10_u128(int k) /* k <= 38 */
{
    return k < 20 ? (u128)pow10_u64[k] : (u128)pow10_u64[19] * pow10_u128(k - 19);
}

/* X = q + F / B rounded half-to-even to a multiple of d (10 or 100: P = 16 or 15 digits) in
 * *qp (as X / d); returns whether it round-trips (see above). */
static inline int candidate(uint64_t q, uint64_t d, u128 B, u128 F, u128 H, uint64_t m,
                            int lower_half, uint64_t *qp)
{
    uint64_t c = q / d;
    u128 r2 = 2 * ((u128)(q % d) * B + F), dB = (u128)d * B;
    if (r2 > dB || (r2 == dB && (c & 1)))
        c++;
    /* The candidate C = c * d (in X's units): C * B - A = (C - q) * B - F. */
    i128 diff = (i128)((int64_t)(c * d) - (int64_t)q) * (i128)B - (i128)F;
    u128 dist = (u128)(diff < 0 ? -diff : diff) * (diff < 0 && lower_half ? 4 : 2);
    *qp = c;
    return dist < H || (dist == H && !(m & 1));
}

static int exact_digits(double a, char *digits, int *exp10)
{
    if (!(a >= 1e-6 && a < 0x1p127))
        return 0;
    uint64_t bits;
    memcpy(&bits, &a, sizeof bits);
    int be = (int)(bits >> 52 & 0x7ff);
    uint64_t m = (bits & ((1ull << 52) - 1)) | 1ull << 52; /* a is normal here */
    int e = be - 1075;
    int lower_half = m == 1ull << 52; /* the gap below a power of two is half */
    /* E = floor(log10 a): floor(log10 2^x) for a's binary exponent x (Ryu's 78913 / 2^18),
     * one more when a reaches the next power of ten; the range of X below corrects the
     * estimate in the rare case a power of ten is not exact (> 1e22). */
    int x = be - 1023;
    int E =
        x >= 0 ? (int)(((uint32_t)x * 78913u) >> 18) : -(int)((((uint32_t)-x * 78913u) >> 18) + 1);
    if (E + 1 >= -7 && E + 1 <= 38 && a >= pow10_dbl[E + 1 + 7])
        E++;
    for (int tries = 0; tries < 4; tries++) {
        int s = 16 - E;
        /* X = A / B = Q + F / B; H = twice the upper half gap, in units of 1/B. */
        u128 A, B, H, Q, F;
        if (e >= 0 && s >= 0) { /* 2^52 <= a < 10^17: s is 0 or 1 */
            if (s > 1)
                return 0;
            A = ((u128)m << e) * pow10_u64[s];
            B = 1;
            H = ((u128)1 << e) * pow10_u64[s];
            Q = A;
            F = 0;
        } else if (e >= 0) {
            A = (u128)m << e;
            B = pow10_u128(-s);
            H = (u128)1 << e;
            Q = A / B;
            F = A % B;
        } else if (s >= 0) {
            if (s > 22 || -e > 80)
                return 0;
            A = (u128)m * pow10_u128(s);
            B = (u128)1 << -e;
            H = pow10_u128(s);
            Q = A >> -e;
            F = A & (B - 1);
        } else {
            return 0; /* a < 2^52 has E <= 15 */
        }
        if (Q < pow10_u64[16]) {
            E--;
            continue;
        }
        if (Q >= pow10_u64[17]) {
            E++;
            continue;
        }
        uint64_t q = (uint64_t)Q;
        uint64_t qp = 0;
        int P = 15;
        for (; P < 17; P++) /* 17 digits always round-trip */
            if (candidate(q, P == 15 ? 100 : 10, B, F, H, m, lower_half, &qp))
                break;
        if (P == 17)
            qp = q + (2 * F > B || (2 * F == B && (q & 1)));
        if (qp == pow10_u64[P]) { /* rounded up to the next power of ten */
            qp = pow10_u64[P - 1];
            E++;
        }
        while (qp % 10000 == 0)
            qp /= 10000;
        while (qp % 10 == 0)
            qp /= 10;
        *exp10 = E;
        return (int)mv_expo_format_u64(qp, digits);
    }
    return 0;
}

size_t mv_expo_format_double(double v, int canonical, char *out, size_t outsz)
{
    char digits[24];
    if (!out || outsz < 32)
        return 0;
    if (isnan(v)) {
        memcpy(out, "NaN", 4);
        return 3;
    }
    if (isinf(v)) {
        memcpy(out, v > 0 ? "+Inf" : "-Inf", 5);
        return 4;
    }
    if (v == 0) {
        size_t o = 0;
        if (signbit(v))
            out[o++] = '-';
        out[o++] = '0';
        if (canonical) {
            out[o++] = '.';
            out[o++] = '0';
        }
        out[o] = '\0';
        return o;
    }
    int neg = signbit(v) != 0, exp10 = 0;
    /* Where both apply, the exact path gives what short_digits() does: a decimal of at most
     * 15 digits that round-trips is the only one within the rounding interval, and R_15. */
    int nd = exact_digits(neg ? -v : v, digits, &exp10);
    if (nd == 0)
        nd = short_digits(neg ? -v : v, digits, &exp10);
    if (nd == 0)
        nd = round_trip_digits(v, digits, &exp10);

    /* Layout as Go's strconv.FormatFloat(v, 'g', -1, 64). */
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 < -4 || exp10 >= 6) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, (size_t)nd - 1);
            o += (size_t)nd - 1;
        }
        int ax = exp10 < 0 ? -exp10 : exp10;
        out[o++] = 'e';
        out[o++] = exp10 < 0 ? '-' : '+';
        if (ax >= 100)
            out[o++] = (char)('0' + ax / 100);
        out[o++] = (char)('0' + ax / 10 % 10);
        out[o++] = (char)('0' + ax % 10);
        out[o] = '\0';
        return o;
    }
    if (exp10 < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp10 - 1; i++)
            out[o++] = '0';
        memcpy(out + o, digits, (size_t)nd);
        o += (size_t)nd;
    } else {
        for (int i = 0; i <= exp10; i++)
            out[o++] = i < nd ? digits[i] : '0';
        if (nd > exp10 + 1) {
            out[o++] = '.';
            memcpy(out + o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += (size_t)(nd - exp10 - 1);
        } else if (canonical) {
            out[o++] = '.';
            out[o++] = '0';
        }
    }
    out[o] = '\0';
    return o;
}
