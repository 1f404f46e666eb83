/* A program built only against the installed microview.h and libmicroview (pkg-config). */
#include <microview.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    mv_segment *s;
    mv_counter c;
    mv_label l = {"lang", "c"};
    int rc;
    if (argc != 2) {
        fprintf(stderr, "usage: hello SEGMENT\n");
        return 2;
    }
    if ((rc = mv_open(argv[1], &s)) != MV_OK ||
        (rc = mv_counter_register(s, "hello_total", "Greetings.", NULL, &l, 1, &c)) != MV_OK) {
        fprintf(stderr, "hello: %s: %s\n", mv_strerror(rc), mv_errdetail());
        return 1;
    }
    mv_counter_add(c, 42);
    mv_close(s);
    return 0;
}
