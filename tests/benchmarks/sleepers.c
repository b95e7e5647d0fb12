/* N processes that sleep until killed: a /proc as full as a busy node's, for the collection
 * benchmark on this machine's real procfs. Usage: sleepers N. Prints "ready" once all N are
 * forked; each child dies with the parent (PR_SET_PDEATHSIG), and the benchmark kills the
 * parent's process group when it is done. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    pid_t parent = getpid();
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(0);
            for (;;) pause();
        }
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
