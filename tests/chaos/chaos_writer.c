/* chaos_writer: a workload whose values a checker can verify from outside (tests/chaos/chaos.py).
 *
 * Step i (1, 2, ...) does, in this order: chaos_ops_total += 1; chaos_last_op = 0.5 + 3 i;
 * chaos_op_value observes VALUES[(i - 1) % 4]. So after n steps the counter is n, the gauge is
 * 0.5 + 3 n, and the histogram's count is n with every bucket and the sum a function of n alone
 * (the values are exact binary fractions, so the sum is exact). Every series carries the label
 * wid=ID, written into the segment by this process, which the checker compares with the
 * identity labels the agent attached to the segment.
 *
 * Before each batch of steps the writer replaces PROGRESS (write + rename, so a reader never
 * sees a partial line) with "t0 done reserved": t0 the wall-clock time its metrics were
 * registered, done the steps completed, reserved the last step of the batch it is starting. No
 * value read from the segment may be above reserved, and a fresh read is at least done.
 *
 * Links libmicroview only. Exits when its parent goes away or after --max-seconds. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <microview.h>

static const double VALUES[4] = {0.0625, 0.25, 0.75, 8.0};
static const double BOUNDS[4] = {0.125, 0.5, 1.0, 4.0};

static double now_s(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int write_progress(const char *path, double t0, unsigned long long done,
                          unsigned long long reserved)
{
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int bad = fprintf(f, "%.6f %llu %llu\n", t0, done, reserved) < 0;
    bad |= fclose(f) != 0;
    return bad ? -1 : rename(tmp, path);
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "chaos_writer: %s: %s (%s)\n", what, mv_strerror(rc), mv_errdetail());
    return 1;
}

int main(int argc, char **argv)
{
    const char *segpath = NULL, *id = NULL, *progress = NULL;
    double rate = 1000, max_s = 3600;
    static const struct option opts[] = {
        {"segment", required_argument, 0, 's'},     {"id", required_argument, 0, 'i'},
        {"progress", required_argument, 0, 'p'},    {"rate", required_argument, 0, 'r'},
        {"max-seconds", required_argument, 0, 'm'}, {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "s:i:p:r:m:", opts, NULL)) != -1) {
        switch (opt) {
        case 's':
            segpath = optarg;
            break;
        case 'i':
            id = optarg;
            break;
        case 'p':
            progress = optarg;
            break;
        case 'r':
            rate = strtod(optarg, NULL);
            break;
        case 'm':
            max_s = strtod(optarg, NULL);
            break;
        default:
            return 2;
        }
    }
    if (!segpath || !id || !progress || optind != argc || !(rate >= 10 && rate <= 1e6)) {
        fprintf(stderr, "usage: chaos_writer --segment PATH --id ID --progress FILE "
                        "[--rate STEPS_PER_S (10..1e6)] [--max-seconds S]\n");
        return 2;
    }
    pid_t parent = getppid();
    mv_segment *seg;
    mv_counter ops;
    mv_gauge last;
    mv_histogram *hist;
    mv_label l = {"wid", id};
    int rc = mv_open(segpath, &seg);
    if (rc != MV_OK)
        return fail(segpath, rc);
    if ((rc = mv_counter_register(seg, "chaos_ops_total", "Steps done.", NULL, &l, 1, &ops)) !=
        MV_OK)
        return fail("counter", rc);
    if ((rc = mv_gauge_register(seg, "chaos_last_op", "0.5 + 3 * steps done.", NULL, &l, 1,
                                &last)) != MV_OK)
        return fail("gauge", rc);
    if ((rc = mv_histogram_register(seg, "chaos_op_value", "One observation per step.", NULL, &l, 1,
                                    BOUNDS, 4, &hist)) != MV_OK)
        return fail("histogram", rc);

    /* Batches of about 20 ms. */
    unsigned long long batch = (unsigned long long)(rate / 50) + 1, i = 0;
    double t0 = now_s(CLOCK_REALTIME), start = now_s(CLOCK_MONOTONIC);
    struct timespec pause = {0, 20 * 1000 * 1000};
    while (getppid() == parent && now_s(CLOCK_MONOTONIC) - start < max_s) {
        if (write_progress(progress, t0, i, i + batch) != 0) {
            fprintf(stderr, "chaos_writer: %s: %s\n", progress, strerror(errno));
            return 1;
        }
        for (unsigned long long k = 0; k < batch; k++) {
            i++;
            mv_counter_add_local(ops, 1);
            mv_gauge_set(last, 0.5 + 3.0 * (double)i);
            mv_histogram_observe(hist, VALUES[(i - 1) % 4]);
        }
        mv_heartbeat(seg);
        nanosleep(&pause, NULL);
    }
    mv_close(seg);
    return 0;
}
