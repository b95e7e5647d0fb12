/* N processes on this machine for the benchmarks that need a real /proc as full as a busy node's.
 *
 *   sleepers N [PERIOD_MS SPIN_US [CGROUP_PROCS...]]
 *
 * Child i first writes its PID into the i-th CGROUP_PROCS file (round robin; none: it stays in
 * the parent's cgroup), then either sleeps until killed (PERIOD_MS 0) or wakes every PERIOD_MS
 * (+-50 %, so the wake-ups spread) and burns SPIN_US of CPU, as a node's mostly idle processes
 * do: the scheduler switches it in and out, and every third child also takes a page fault, so
 * its /proc/<pid>/stat changes (a short spin alone never adds a clock tick to utime).
 * Prints "ready" and the children's PIDs (one line, space-separated) once all are placed; each
 * child dies with the parent (PR_SET_PDEATHSIG), and the benchmark kills the parent's process
 * group when it is done. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int join(const char *procs) {
    int fd = open(procs, O_WRONLY);
    if (fd < 0) return -1;
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    int ok = write(fd, pid, (size_t)n) == n;
    close(fd);
    return ok ? 0 : -1;
}

static void live(long period_ms, long spin_us, int index) {
    if (period_ms <= 0) {
        for (;;) pause();
    }
    srand((unsigned)getpid());
    long pagesize = sysconf(_SC_PAGESIZE);
    volatile char *page = mmap(NULL, (size_t)pagesize, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (;;) {
        long jitter = period_ms / 2 > 0 ? rand() % period_ms : 0;
        usleep((useconds_t)((period_ms / 2 + jitter) * 1000));
        double end = now_us() + (double)spin_us;
        while (now_us() < end) {
        }
        if (index % 3 == 0 && page != MAP_FAILED) {
            madvise((void *)page, (size_t)pagesize, MADV_DONTNEED);
            page[0] = 1; /* a minor fault: minflt moves */
        }
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    long period_ms = argc > 2 ? atol(argv[2]) : 0;
    long spin_us = argc > 3 ? atol(argv[3]) : 0;
    int ncgroups = argc > 4 ? argc - 4 : 0;
    pid_t parent = getpid();
    int ready[2];
    if (pipe(ready) != 0) {
        perror("pipe");
        return 1;
    }
    pid_t *pids = calloc((size_t)(n > 0 ? n : 1), sizeof *pids);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(0);
            char ok = ncgroups == 0 || join(argv[4 + i % ncgroups]) == 0 ? 'y' : 'n';
            if (write(ready[1], &ok, 1) != 1) _exit(1);
            close(ready[0]);
            close(ready[1]);
            live(period_ms, spin_us, i);
        }
        pids[i] = pid;
    }
    for (int i = 0; i < n; i++) {
        char ok;
        if (read(ready[0], &ok, 1) != 1 || ok != 'y') {
            fprintf(stderr, "a child could not join its cgroup\n");
            return 1;
        }
    }
    printf("ready");
    for (int i = 0; i < n; i++) printf(" %d", (int)pids[i]);
    printf("\n");
    fflush(stdout);
    for (;;) pause();
}
