/* The e2e cluster's pod sandbox process: holds the pod's namespaces, reaps orphans, exits on
 * SIGINT/SIGTERM. Built static so its image needs nothing but the binary. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
    stop_signal = sig;
}

static void on_child(int sig)
{
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && argv[1][0] == '-' && argv[1][1] == 'v') {
        printf("mv-pause 1\n");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "mv-pause: warning: not running as pid 1, orphans are not reaped here\n");
    }
    struct sigaction sa = {0};
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
        perror("mv-pause: sigaction");
        return 1;
    }
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &sa, NULL) != 0) {
        perror("mv-pause: sigaction SIGCHLD");
        return 1;
    }
    while (!stop_signal) {
        pause();
    }
    fprintf(stderr, "mv-pause: exiting on signal %d\n", (int)stop_signal);
    return 0;
}
