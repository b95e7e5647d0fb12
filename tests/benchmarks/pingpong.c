// Context-switch and ioctl load for tests/benchmarks/ebpf_bench.py.
//
//   pingpong ROUNDS CPU     two processes pinned to CPU bounce a byte through two pipes, so
//                           every round trip is two context switches and four syscalls; prints
//                           the mean nanoseconds per round trip
//   ioctl COUNT CMD [PATH]  COUNT ioctl(2) calls with command CMD on /dev/null (ENOTTY) or on
//                           PATH (a device node without a driver is opened O_PATH: EBADF);
//                           prints the mean nanoseconds per call
//   syscall COUNT           COUNT getppid(2) calls; prints the mean nanoseconds per call
//
// With WATTPROBE_BENCH_RT=1 in the environment both run SCHED_FIFO (priority 1), so that other
// tenants' ordinary tasks on a shared machine do not take turns inside the measurement.
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

static int pingpong(long rounds, int cpu) {
    int ab[2], ba[2];
    char c = 0;
    if (pipe(ab) || pipe(ba)) {
        perror("pipe");
        return 1;
    }
    pin(cpu);
    pid_t child = fork();
    if (child == 0) {
        for (long i = 0; i < rounds; i++) {
            if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1)
                _exit(1);
        }
        _exit(0);
    }
    double start = now_ns();
    for (long i = 0; i < rounds; i++) {
        if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) {
            perror("pingpong");
            return 1;
        }
    }
    double elapsed = now_ns() - start;
    int status;
    waitpid(child, &status, 0);
    printf("%.1f\n", elapsed / (double)rounds);
    return 0;
}

static int ioctls(long count, unsigned long cmd, const char *path) {
    char arg[64];
    memset(arg, 0, sizeof(arg));
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        fd = open(path, O_PATH);  // a node with no driver behind it (ENXIO)
    if (fd < 0) {
        perror("open");
        return 1;
    }
    double start = now_ns();
    for (long i = 0; i < count; i++)
        ioctl(fd, cmd, arg);
    double elapsed = now_ns() - start;
    printf("%.1f\n", elapsed / (double)count);
    return 0;
}

static void maybe_realtime(void) {
    const char *rt = getenv("WATTPROBE_BENCH_RT");
    if (rt && strcmp(rt, "1") == 0) {
        struct sched_param p = {.sched_priority = 1};
        if (sched_setscheduler(0, SCHED_FIFO, &p) != 0) {
            perror("sched_setscheduler");
            exit(1);
        }
    }
}

static int syscalls(long count) {
    double start = now_ns();
    for (long i = 0; i < count; i++)
        syscall(SYS_getppid);  // not the libc wrapper: it must reach the kernel every time
    double elapsed = now_ns() - start;
    printf("%.1f\n", elapsed / (double)count);
    return 0;
}

int main(int argc, char **argv) {
    maybe_realtime();
    if (argc == 3 && strcmp(argv[1], "syscall") == 0)
        return syscalls(atol(argv[2]));
    if (argc == 4 && strcmp(argv[1], "pingpong") == 0)
        return pingpong(atol(argv[2]), atoi(argv[3]));
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "ioctl") == 0)
        return ioctls(atol(argv[2]), strtoul(argv[3], NULL, 0), argc == 5 ? argv[4] : "/dev/null");
    fprintf(stderr, "usage: %s pingpong ROUNDS CPU | ioctl COUNT CMD [PATH] | syscall COUNT\n",
            argv[0]);
    return 2;
}
