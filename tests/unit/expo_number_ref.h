/* expo_number_ref: mv_expo_format_double as it was before its exact 128-bit path (printf and
 * strtod for values of more than 15 significant digits), kept as the reference the unit tests
 * compare the exposition's numbers with: the bytes served must not change. */
#ifndef EXPO_NUMBER_REF_H
#define EXPO_NUMBER_REF_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ref_is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static size_t ref_fmt_u64(uint64_t v, char *out)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[sizeof tmp - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(out, tmp + sizeof tmp - n, n);
    return n;
}

/* Exact powers of ten representable as doubles. */
static const double ref_pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                         1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                         1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Fast path for the common case: a = s / 10^k for an integer s < 10^15 whose quotient,
 * correctly rounded, is a. Such a decimal is the only one of at most 15 significant
 * digits within half an ulp of a, so it is exactly what rounding a to 15 digits gives
 * (and it round-trips): the same digits the general path finds. Fills digits (trailing
 * zeros stripped) and the decimal exponent; returns the digit count or 0. */
static int ref_short_digits(double a, char *digits, int *exp10)
{
    if (!(a >= 1e-7 && a < 1e15))
        return 0;
    int k = 0;
    while (a * ref_pow10_tab[k] < 1)
        k++;
    for (; k <= 22; k++) {
        double t = a * ref_pow10_tab[k];
        if (t >= 1e15)
            return 0;
        uint64_t si = (uint64_t)(t + 0.5);
        if (si == 0 || (double)si / ref_pow10_tab[k] != a)
            continue;
        char tmp[20];
        int nd = (int)ref_fmt_u64(si, tmp);
        *exp10 = nd - 1 - k;
        while (nd > 1 && tmp[nd - 1] == '0')
            nd--;
        memcpy(digits, tmp, (size_t)nd);
        return nd;
    }
    return 0;
}

/* General path: the first of 15, 16 or 17 significant digits that round-trips. */
static int ref_round_trip_digits(double v, char *digits, int *exp10)
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
        if (ref_is_digit((unsigned char)*p))
            digits[nd++] = *p;
    *exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    return nd;
}

static size_t ref_format_double(double v, int canonical, char *out, size_t outsz)
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
    int nd = ref_short_digits(neg ? -v : v, digits, &exp10);
    if (nd == 0)
        nd = ref_round_trip_digits(v, digits, &exp10);

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

#endif
