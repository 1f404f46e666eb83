/* mv_scaler_meta: the trigger metadata of a ScaledObject, parsed strictly. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mv_scaler.h"

static int bad(char *err, size_t errlen, const char *field, const char *why)
{
    if (errlen)
        snprintf(err, errlen, "metadata field %s: %s", field, why);
    return -EINVAL;
}

static int metric_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MV_SCALER_METRIC_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

static int dns_label_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MV_SCALER_NAMESPACE_MAX || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

/* A finite decimal number, the whole string. */
static int number(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int mv_scaler_meta_parse(const char *const *keys, const char *const *values, size_t n,
                         mv_scaler_meta *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->timeout_ms = MV_SCALER_TIMEOUT_MS_DEF;
    if (errlen)
        err[0] = '\0';
    int have_metric = 0, have_ns = 0, have_target = 0;
    unsigned direct = 0, env = 0; /* bit per known key: given as KEY, as KEYFromEnv */
    for (size_t i = 0; i < n; i++) {
        const char *k = keys[i] ? keys[i] : "", *v = values[i] ? values[i] : "";
        /* KEDA passes the trigger's whole metadata: its own keys for reaching the scaler are
         * not ours to check. */
        if (strcmp(k, "scalerAddress") == 0 || strcmp(k, "enableTLS") == 0 ||
            strcmp(k, "unsafeSsl") == 0)
            continue;
        /* KEYFromEnv: KEDA has replaced the value by the named environment variable's. */
        char base[32];
        size_t kl = strlen(k);
        int from_env = 0;
        if (kl > 7 && kl - 7 < sizeof base && strcmp(k + kl - 7, "FromEnv") == 0) {
            memcpy(base, k, kl - 7);
            base[kl - 7] = '\0';
            k = base;
            from_env = 1;
        }
        static const char *const known[] = {"metric",      "namespace",        "selector",
                                            "targetValue", "activationValue",  "aggregation",
                                            "timeoutMs",   "missingCollectors"};
        for (unsigned q = 0; q < sizeof known / sizeof known[0]; q++)
            if (strcmp(k, known[q]) == 0) {
                if ((from_env ? direct : env) & 1u << q)
                    return bad(err, errlen, k, "given both directly and as FromEnv: choose one");
                *(from_env ? &env : &direct) |= 1u << q;
            }
        if (strcmp(k, "metric") == 0) {
            if (!metric_name_ok(v))
                return bad(err, errlen, k,
                           "a series name ([a-zA-Z_:][a-zA-Z0-9_:]*, at most 200 bytes)");
            snprintf(out->metric, sizeof out->metric, "%s", v);
            have_metric = 1;
        } else if (strcmp(k, "namespace") == 0) {
            if (!dns_label_ok(v))
                return bad(err, errlen, k, "a namespace name (lowercase DNS label)");
            snprintf(out->namespace_, sizeof out->namespace_, "%s", v);
            have_ns = 1;
        } else if (strcmp(k, "selector") == 0) {
            char why[256];
            if (mv_lsel_parse(v, strlen(v), &out->selector, why, sizeof why) < 0)
                return bad(err, errlen, k, why);
            out->has_selector = 1;
        } else if (strcmp(k, "targetValue") == 0) {
            if (number(v, &out->target) < 0 || out->target <= 0)
                return bad(err, errlen, k, "a number above 0");
            have_target = 1;
        } else if (strcmp(k, "activationValue") == 0) {
            if (number(v, &out->activation) < 0 || out->activation < 0)
                return bad(err, errlen, k, "a number of at least 0");
        } else if (strcmp(k, "aggregation") == 0) {
            if (strcmp(v, "sum") == 0)
                out->agg = MV_SCALER_SUM;
            else if (strcmp(v, "max") == 0)
                out->agg = MV_SCALER_MAX;
            else
                return bad(err, errlen, k, "sum or max");
        } else if (strcmp(k, "timeoutMs") == 0) {
            double t;
            if (number(v, &t) < 0 || t != floor(t) || t < MV_SCALER_TIMEOUT_MS_MIN ||
                t > MV_SCALER_TIMEOUT_MS_MAX)
                return bad(err, errlen, k, "whole milliseconds, 10..10000");
            out->timeout_ms = (int)t;
        } else if (strcmp(k, "missingCollectors") == 0) {
            if (strcmp(v, "fail") == 0)
                out->policy = MV_SCALER_FAIL;
            else if (strcmp(v, "partial") == 0)
                out->policy = MV_SCALER_PARTIAL;
            else
                return bad(err, errlen, k, "fail or partial");
        } else {
            char name[80];
            kl = strlen(k);
            snprintf(name, sizeof name, "%.*s", (int)(kl > 64 ? 64 : kl), k);
            for (char *p = name; *p; p++)
                if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
                    *p = '?';
            return bad(err, errlen, name,
                       "unknown (known: metric, namespace, selector, targetValue, "
                       "activationValue, aggregation, timeoutMs, missingCollectors)");
        }
    }
    if (!have_metric)
        return bad(err, errlen, "metric", "required");
    if (!have_ns)
        return bad(err, errlen, "namespace", "required");
    if (!have_target)
        return bad(err, errlen, "targetValue", "required");
    return 0;
}
