/* Runs a libFuzzer driver's LLVMFuzzerTestOneInput once on every file of the directories (or
 * files) given, so that each committed corpus is replayed as a plain test in every build. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf)
            break;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    size_t inputs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            if (run_file(argv[i]) != 0)
                return 1;
            inputs++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, NULL);
        if (n < 0) {
            fprintf(stderr, "replay: cannot list %s\n", argv[i]);
            return 1;
        }
        char **paths = calloc((size_t)n + 1, sizeof *paths);
        size_t np = 0;
        for (int j = 0; j < n; j++) {
            if (paths && names[j]->d_name[0] != '.') {
                size_t len = strlen(argv[i]) + strlen(names[j]->d_name) + 2;
                paths[np] = malloc(len);
                if (paths[np]) {
                    snprintf(paths[np], len, "%s/%s", argv[i], names[j]->d_name);
                    np++;
                }
            }
            free(names[j]);
        }
        free(names);
        if (!paths)
            return 1;
        qsort(paths, np, sizeof *paths, cmp);
        int rc = 0;
        for (size_t j = 0; j < np; j++) {
            if (rc == 0 && run_file(paths[j]) != 0)
                rc = 1;
            free(paths[j]);
        }
        free(paths);
        if (rc)
            return 1;
        inputs += np;
    }
    if (inputs == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    printf("replay: %zu inputs, no crash\n", inputs);
    return 0;
}
