// wattprobe activity probes: GPU ioctls and the process -> cgroup index by default; on-CPU time
// per process on every context switch only with --collector.process.
//
// Tracepoint arguments and BPF helpers only, never kernel struct fields through the headers, so
// any kernel headers compile this file. Kernel struct fields (the ioctl probe's walk from a file
// descriptor to its device number, a task's runtime) are read at offsets userspace takes from the
// running kernel's BTF (exporter/sources/activity/ebpf/btf.py), never from the headers. Counters
// are cumulative; userspace (exporter/sources/activity/ebpf/source.py) takes deltas.
//
// Two builds:
//   default        no program on sched_switch. Per-container CPU time is what the kernel already
//                  keeps per cgroup (cpu.stat usage_usec), read by userspace; these programs keep
//                  what no file says cheaply: GPU ioctls per process (an entry made at a process's
//                  first GPU ioctl, its cgroup kept current by exec and cgroup_attach_task, its
//                  ioctls folded into its cgroup's exited total when it ends) and the paths of
//                  new cgroups. Every hook fires on a rare event (exec, exit, a move, a mkdir) or
//                  on an ioctl, where non-GPU commands return after one compare.
//   WATTPROBE_PER_PROCESS (--collector.process) adds on-CPU time per process: a program on
//                  sched_switch (a raw tracepoint where the kernel allows it, 5.18+,
//                  WATTPROBE_RAW_SWITCH; else the classic one) adds each slice to its process,
//                  and a cpu-clock perf event names the slice in flight once a second.
//
// Maps (all bounded; sizes come from userspace as -D flags):
//   tasks    LRU hash, tgid -> task_val   cumulative work of a live process; after it exits the
//                                         entry stays as a tombstone (dead_ns != 0) until
//                                         userspace has read it and deletes it. Default build:
//                                         only processes that made a GPU ioctl have one.
//   exited   LRU hash, cgroup id -> exited_val   work of exited processes, per cgroup v2 id
//   running  per-CPU array[1]              (per-process build) start and thread id of the slice
//                                         now on each CPU, so userspace can count long-running
//                                         slices in flight, and the GPU ioctls of that slice
//   seen     array, direct-mapped by task pointer -> pid_tgid of the task the last time it was
//                                         switched out (raw sched_switch with the clock only)
//   stats    per-CPU array[N_STATS]        insert and loss counters (eviction accounting)
//   cgroup_paths  LRU hash, cgroup id -> path of cgroups made since userspace last read it (it
//                 deletes what it reads), so a cgroup removed before userspace walks the cgroup
//                 tree still has a name
//   dev_class  array, char device major -> DEV_NVIDIA or DEV_DRM (0: neither); userspace fills
//              it from /proc/devices (and keeps it current: nvidia-uvm's major is dynamic)
//
// The hot paths (every context switch, every ioctl) do not read the current cgroup: an entry
// takes it when it is made, and cgroup:cgroup_attach_task and sched:sched_process_exec keep it
// current when a process moves. Without cgroup_attach_task, every event reads it.
//
// Userspace passes: WATTPROBE_MAX_TASKS, WATTPROBE_MAX_CGROUPS, and optionally
// WATTPROBE_PER_PROCESS (the sched_switch program; then WATTPROBE_RAW_SWITCH to attach it as a
// raw tracepoint, WATTPROBE_SEEN_BITS, and WATTPROBE_TASK_RUNTIME with its BTF offsets),
// WATTPROBE_HAVE_GROUP_DEAD (sched_process_exit has a group_dead field: recent kernels, e.g. 6.18),
// WATTPROBE_IOCTLS (syscalls:sys_enter_ioctl exists; then the WATTPROBE_OFF_* offsets from BTF),
// WATTPROBE_EXEC (sched_process_exec exists),
// WATTPROBE_CGROUP_ATTACH (cgroup:cgroup_attach_task with a 64-bit dst_id exists),
// WATTPROBE_CGROUP_PATHS (cgroup:cgroup_mkdir exists).

// GPU ioctls: _IOC type 'F' (0x46) on an NVIDIA character device (/dev/nvidia*), and type 'd'
// (0x64) on a DRM one (/dev/dri/*). The type alone is not enough: framebuffer (FBIO*) ioctls
// are type 'F' too, and any file takes any command.
#define DRV_NVIDIA 0
#define DRV_DRM 1
#define N_DRIVERS 2

// sched_switch prev_state bits of a task that has finished do_exit (EXIT_DEAD, EXIT_ZOMBIE as
// the tracepoint reports them since 4.14); used only to tell a dead task's last slice.
#define STATE_EXITED 0x30

// Userspace's copy: STATS in exporter/sources/activity/ebpf/source.py (a test compares them).
enum stat_index {
    STAT_TASK_INSERTS,         // entries created in tasks (live or tombstone)
    STAT_TASK_INSERT_FAILS,    // no tasks entry could be made: the work went to exited instead
    STAT_EXITED_INSERTS,       // entries created in exited
    STAT_EXITED_INSERT_FAILS,  // no exited entry could be made: the work below was lost
    STAT_LOST_NS,
    STAT_LOST_IOCTLS,
    STAT_FOLDS,                // processes folded into exited at exit
    N_STATS,
};

struct task_val {
    u64 first_ns;   // boot-clock ns when the entry was made; (tgid, first_ns) names the entry
    u64 cgroup_id;  // cgroup v2 id at the last event
    u64 on_cpu_ns;  // per-process build only; 0 in the default build
    u64 ioctls[N_DRIVERS];
    u64 dead_ns;    // boot-clock ns of the exit that folded it; 0 while the process lives
    u64 folded_ns;  // what the fold moved into exited (on_cpu_ns may grow a little after it)
    u64 folded_ioctls[N_DRIVERS];
    u64 execs;      // bumped on exec, so userspace knows to read the new comm
};

struct exited_val {
    u64 on_cpu_ns;
    u64 ioctls[N_DRIVERS];
};

BPF_TABLE("lru_hash", u32, struct task_val, tasks, WATTPROBE_MAX_TASKS);
BPF_TABLE("lru_hash", u64, struct exited_val, exited, WATTPROBE_MAX_CGROUPS);
BPF_PERCPU_ARRAY(stats, u64, N_STATS);

static __always_inline void stat_add(int index, u64 n) {
    u32 key = index;
    u64 *v = stats.lookup(&key);
    if (v)
        *v += n;  // per-CPU slot: no other writer
}

static __always_inline struct exited_val *exited_entry(u64 cgroup_id) {
    struct exited_val *e = exited.lookup(&cgroup_id);
    if (e)
        return e;
    struct exited_val zero = {};
    if (exited.insert(&cgroup_id, &zero) == 0)
        stat_add(STAT_EXITED_INSERTS, 1);
    e = exited.lookup(&cgroup_id);
    if (!e)
        stat_add(STAT_EXITED_INSERT_FAILS, 1);
    return e;
}

static __always_inline void add_work(u64 *on_cpu_ns, u64 *ioctls, u64 ns, u64 nv, u64 drm) {
    if (ns)
        __sync_fetch_and_add(on_cpu_ns, ns);
    if (nv)
        __sync_fetch_and_add(&ioctls[DRV_NVIDIA], nv);
    if (drm)
        __sync_fetch_and_add(&ioctls[DRV_DRM], drm);
}

// Work of a process that has no live entry (it exited, or its entry could not be made).
static __always_inline void add_exited(u64 cgroup_id, u64 ns, u64 nv, u64 drm) {
    struct exited_val *e = exited_entry(cgroup_id);
    if (!e) {
        stat_add(STAT_LOST_NS, ns);
        stat_add(STAT_LOST_IOCTLS, nv + drm);
        return;
    }
    add_work(&e->on_cpu_ns, e->ioctls, ns, nv, drm);
}

// The live entry of process tgid, made if it has none (cgroup: the current one). NULL when the
// process is gone from the map (a tombstone: its late work goes to its cgroup's exited total,
// done here) or no entry could be made (the work goes there too).
static __always_inline struct task_val *live_entry(u32 tgid, bool exiting, u64 ns, u64 nv,
                                                   u64 drm) {
    struct task_val *v = tasks.lookup(&tgid);
    if (!v) {
        u64 cgroup_id = bpf_get_current_cgroup_id();
        if (exiting) {
            // the last slice of a thread whose process is already gone from the map: do not
            // make an entry that nothing would ever remove
            add_exited(cgroup_id, ns, nv, drm);
            return NULL;
        }
        struct task_val init = {};
        init.first_ns = bpf_ktime_get_boot_ns();
        init.cgroup_id = cgroup_id;
        if (tasks.insert(&tgid, &init) == 0)
            stat_add(STAT_TASK_INSERTS, 1);
        v = tasks.lookup(&tgid);
        if (!v) {
            stat_add(STAT_TASK_INSERT_FAILS, 1);
            add_exited(cgroup_id, ns, nv, drm);
            return NULL;
        }
    }
    if (v->dead_ns) {
        // late work of a folded process (its other threads finishing do_exit), or of a new
        // process that reused the tgid before userspace removed the tombstone: either way it
        // belongs to this cgroup's exited total
        add_exited(bpf_get_current_cgroup_id(), ns, nv, drm);
        return NULL;
    }
#ifndef WATTPROBE_CGROUP_ATTACH
    u64 cgroup_id = bpf_get_current_cgroup_id();
    if (v->cgroup_id != cgroup_id)
        v->cgroup_id = cgroup_id;  // write only on change: the line is shared by all threads
#endif
    return v;
}

#ifdef WATTPROBE_PER_PROCESS
struct slice {
    // where the running task's slice started: its se.sum_exec_runtime when it was switched in
    // (WATTPROBE_TASK_RUNTIME), else the monotonic clock then; 0 before the first switch
    u64 start_ns;
    u64 tid;       // thread id of that task (0: idle, or not known yet)
    u64 ioctls[N_DRIVERS];  // GPU ioctls of the running task not yet added to its process
    u64 task;  // WATTPROBE_TASK_RUNTIME: the task start_ns is the runtime of
};

BPF_PERCPU_ARRAY(running, struct slice, 1);

// the raw program's task cache (below): with the clock only, for next's thread
#if defined(WATTPROBE_RAW_SWITCH) && !defined(WATTPROBE_TASK_RUNTIME)
#define SEEN_CACHE 1
#endif

// Adds ns of CPU time and nv, drm GPU ioctls to the current process.
static __always_inline void account(u32 tgid, u64 ns, u64 nv, u64 drm, bool exiting) {
    struct task_val *v = live_entry(tgid, exiting, ns, nv, drm);
    if (v)
        add_work(&v->on_cpu_ns, v->ioctls, ns, nv, drm);
}

#ifdef WATTPROBE_TASK_RUNTIME
// On-CPU time is the kernel's own per-task runtime, se.sum_exec_runtime: what cgroup cpu.stat
// sums, brought up to date by the scheduler before sched_switch fires. The raw program reads the
// incoming task's runtime into this CPU's slot (start_ns, with its task pointer); when that task
// leaves the CPU, its runtime then less the slot's is the slice, exactly what the kernel charged
// its cgroup in between, whatever its scheduling class. No clock read, no per-task map.
//
// Time before userspace's first reading (its baseline) must never reach a key that appears
// later: each CPU's first slice is opened by name_slice() within a second of the load, switches
// name their incoming thread until that reading (baseline_read), and userspace sets aside what
// the running slices had run by then (issue 37: a process spinning since before a fresh agent
// started was billed +4 to +8 % over cpu.stat).
#include <uapi/linux/bpf_perf_event.h>

#define TASK_U64(task, off) (*(u64 *)((char *)(task) + (off)))

// Until userspace has taken its first reading (its baseline) it leaves [0] at 0, and each switch
// names the incoming thread at once (one more probe read of next->pid): every slice running at
// that reading is then named, and userspace can set aside what it had run before (issue 37's
// over-count: a slice that ran across the baseline unnamed was later counted whole). Afterwards
// a switch pays one load of [0] for it.
BPF_ARRAY(baseline_read, u64, 1);

// ns the current (outgoing) task `prev` ran in the slice that ends now. A slot that does not
// describe prev (the first slice on a CPU since the load, or a switch in that no program saw:
// seen on 6.18, a few a second) falls back to prev_sum_exec_runtime, the runtime the scheduler
// noted when it last picked the task, at most MISMATCH_CAP_NS: CFS keeps that field (its
// slices are a few ms), RT and deadline tasks do not (a stale one charged a SCHED_FIFO process
// its whole life again), so such a slice is under-counted, never over-counted.
#define MISMATCH_CAP_NS 20000000ULL
static __always_inline u64 runtime_delta(struct slice *s, u64 prev) {
    struct task_struct *task = bpf_get_current_task_btf();  // prev: direct loads, no helper
    u64 sum = TASK_U64(task, WATTPROBE_OFF_SUM_EXEC);
    // both loaded, then chosen: one load instruction may not serve two kinds of pointer
    u64 picked = *(volatile u64 *)((char *)task + WATTPROBE_OFF_PREV_SUM_EXEC);
    u64 start = *(volatile u64 *)&s->start_ns;
    if (s->task == prev)
        return sum > start ? sum - start : 0;
    u64 ns = sum > picked ? sum - picked : 0;
    return ns < MISMATCH_CAP_NS ? ns : MISMATCH_CAP_NS;
}

// Names the slice in flight on this CPU for userspace, once a second per CPU (a cpu-clock perf
// event): a long slice is credited before it ends, and sched_switch pays nothing for naming
// but clearing the name. A CPU whose slot describes no slice yet (none switched since the load)
// gets its running task's slice opened here, from its runtime now.
int name_slice(struct bpf_perf_event_data *ctx) {
    u32 zero = 0;
    struct slice *s = running.lookup(&zero);
    if (!s)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    if (!(u32)id)
        return 0;  // the idle task
    u64 task = bpf_get_current_task();
    if (s->task != task) {
        // opened: tid last, so a reader that sees the name sees it with this start
        u64 now = 0;
        if (bpf_probe_read_kernel(&now, sizeof(now), (void *)(task + WATTPROBE_OFF_SUM_EXEC)))
            return 0;
        *(volatile u64 *)&s->tid = 0;
        *(volatile u64 *)&s->start_ns = now;
        s->task = task;
    }
    *(volatile u64 *)&s->tid = (u32)id;  // start_ns is this slice's already
    return 0;
}
#endif

// The slice that ends now on this CPU goes to the current (outgoing) task's process, with the
// GPU ioctls it made; next_tid (0: unknown or idle) starts a new slice.
#define tgid_of(id) ((u32)((id) >> 32))

// prev, next, next_start: with WATTPROBE_TASK_RUNTIME, the outgoing and incoming tasks and the
// incoming one's runtime now; next_tid there: the incoming thread when named at once (0: not)
static __always_inline void switch_slice(u64 id, u64 next_tid, bool exiting, u64 prev, u64 next,
                                         u64 next_start) {
    u32 zero = 0;
    struct slice *s = running.lookup(&zero);
    if (!s)
        return;
#ifdef WATTPROBE_TASK_RUNTIME
    u64 ns = tgid_of(id) ? runtime_delta(s, prev) : 0;
    // the next slice: unnamed until name_slice() samples it; tid first, so a reader that sees
    // a name sees it with its own start
    if (s->tid)
        *(volatile u64 *)&s->tid = 0;
    *(volatile u64 *)&s->start_ns = next_start;
    s->task = next;
    if (next_tid)
        *(volatile u64 *)&s->tid = next_tid;
#else
    u64 now = bpf_ktime_get_ns();
    u64 start = s->start_ns;
    *(volatile u64 *)&s->start_ns = now;
    *(volatile u64 *)&s->tid = next_tid;
#endif
    u64 nv = 0, drm = 0;
#ifdef WATTPROBE_IOCTLS
    nv = s->ioctls[DRV_NVIDIA];
    drm = s->ioctls[DRV_DRM];
    if (nv | drm) {
        s->ioctls[DRV_NVIDIA] = 0;
        s->ioctls[DRV_DRM] = 0;
    }
#endif
    u32 tgid = id >> 32;
    if (tgid == 0)
        return;  // the idle task
#ifndef WATTPROBE_TASK_RUNTIME
    u64 ns = start ? now - start : 0;  // 0: first switch on this CPU since load
#endif
    if (!(ns | nv | drm))
        return;
    account(tgid, ns, nv, drm, exiting);
}

#ifdef WATTPROBE_RAW_SWITCH
#ifdef SEEN_CACHE
// Task pointer -> pid_tgid, direct-mapped: a slot holds the last task switched out whose pointer
// hashes to it. Reading it saves a helper call per switch (a call costs ~20 ns where returns
// are mitigated), and it names the task that a CPU switches to, for userspace's time in flight:
// a task is named if it was switched out before (since load) and its slot was not taken over
// since; otherwise its slice is unnamed until it ends, which only delays what userspace credits.
//
// A task's pid_tgid never changes, except in exec by a thread that is not the leader (it takes
// the leader's pid: the exec probe refreshes its slot). A task's slot is emptied at its last
// switch, so a new task that gets the same task_struct is not mistaken for it. Slots are written
// by any CPU (collisions) without a lock: check = task ^ pid_tgid, so a read that mixes fields
// of two writes, in whatever order they landed, does not match and falls back to the helper.
struct seen_task {
    u64 task;
    u64 pid_tgid;
    u64 check;
};

#define SEEN_SLOTS (1 << WATTPROBE_SEEN_BITS)
BPF_ARRAY(seen, struct seen_task, SEEN_SLOTS);

static __always_inline struct seen_task *seen_slot(u64 task) {
    // Fibonacci hashing: task_structs sit at a fixed stride in their slab, so the low bits alone
    // would crowd a few slots
    u32 index = (task * 0x9E3779B97F4A7C15ULL) >> (64 - WATTPROBE_SEEN_BITS);
    return seen.lookup(&index);
}

// pid_tgid of task as its slot has it, or 0
static __always_inline u64 seen_id(struct seen_task *e, u64 task) {
    u64 t = e->task;
    u64 id = e->pid_tgid;
    u64 check = e->check;
    return (t == task && check == (t ^ id)) ? id : 0;
}

static __always_inline void seen_store(struct seen_task *e, u64 task, u64 id) {
    e->task = task;
    e->pid_tgid = id;
    e->check = task ^ id;
}
#endif  // SEEN_CACHE

#define TASK_DEAD 0x80  // task->__state at a task's last switch (do_task_dead)

RAW_TRACEPOINT_PROBE(sched_switch) {
    // args: preempt, prev, next, prev_state; prev is current. prev_state is an argument since
    // 5.18: older kernels refuse a program that reads it, and userspace takes the classic one.
    bool dead = !ctx->args[0] && (ctx->args[3] & TASK_DEAD);
#ifdef WATTPROBE_TASK_RUNTIME
    u64 next = ctx->args[2];
    u64 next_start = 0;
    bpf_probe_read_kernel(&next_start, sizeof(next_start),
                          (void *)(next + WATTPROBE_OFF_SUM_EXEC));
    u32 zero = 0, next_tid = 0;
    u64 *baseline = baseline_read.lookup(&zero);
    if (baseline && !*baseline)
        bpf_probe_read_kernel(&next_tid, sizeof(next_tid), (void *)(next + WATTPROBE_OFF_TASK_PID));
    switch_slice(bpf_get_current_pid_tgid(), next_tid, dead, ctx->args[1], next, next_start);
    return 0;
#else
    u64 prev = ctx->args[1];
    u64 next = ctx->args[2];
    u64 next_tid = 0;
    struct seen_task *n = seen_slot(next);
    if (n)
        next_tid = (u32)seen_id(n, next);
    struct seen_task *p = seen_slot(prev);
    if (!p)
        return 0;
    u64 id = seen_id(p, prev);
    if (!id) {
        id = bpf_get_current_pid_tgid();  // 0: the idle task, never remembered
        if (id && !dead)
            seen_store(p, prev, id);
    } else if (dead) {
        p->check = 0;  // its task_struct may come back as another task
    }
    switch_slice(id, next_tid, dead, 0, 0, 0);
    return 0;
#endif  // WATTPROBE_TASK_RUNTIME
}
#else
TRACEPOINT_PROBE(sched, sched_switch) {
    // current is still the task switching out
    switch_slice(bpf_get_current_pid_tgid(), args->next_pid,
                 (args->prev_state & STATE_EXITED) != 0, 0, 0, 0);
    return 0;
}
#endif  // WATTPROBE_RAW_SWITCH
#endif  // WATTPROBE_PER_PROCESS

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
#ifdef WATTPROBE_HAVE_GROUP_DEAD
    if (!args->group_dead)
        return 0;  // other threads still run: the process lives on
#else
    if ((u32)id != tgid)
        return 0;  // without group_dead, fold when the thread group leader exits
#endif
    u64 cgroup_id = bpf_get_current_cgroup_id();
    u64 now = bpf_ktime_get_boot_ns();
    struct task_val *v = tasks.lookup(&tgid);
    if (!v) {
#ifndef WATTPROBE_PER_PROCESS
        return 0;  // never made a GPU ioctl: nothing of it is kept here
#endif
        // never switched out since load (a short-lived process): leave a tombstone so that its
        // last slice goes to exited instead of making a live entry
        struct task_val tomb = {};
        tomb.first_ns = now;
        tomb.cgroup_id = cgroup_id;
        tomb.dead_ns = now;
        if (tasks.insert(&tgid, &tomb) == 0)
            stat_add(STAT_TASK_INSERTS, 1);
        return 0;
    }
    if (v->dead_ns)
        return 0;
    // mark first, so that work arriving from now on goes to exited directly; what other CPUs
    // add between this store and the reads below is on_cpu_ns - folded_ns, settled in userspace
    v->dead_ns = now;
    v->cgroup_id = cgroup_id;
    u64 ns = v->on_cpu_ns;
    u64 nv = v->ioctls[DRV_NVIDIA];
    u64 drm = v->ioctls[DRV_DRM];
    v->folded_ns = ns;
    v->folded_ioctls[DRV_NVIDIA] = nv;
    v->folded_ioctls[DRV_DRM] = drm;
    stat_add(STAT_FOLDS, 1);
    struct exited_val *e = exited_entry(cgroup_id);
    if (!e) {
        stat_add(STAT_LOST_NS, ns);
        stat_add(STAT_LOST_IOCTLS, nv + drm);
        return 0;
    }
    __sync_fetch_and_add(&e->on_cpu_ns, ns);
    __sync_fetch_and_add(&e->ioctls[DRV_NVIDIA], nv);
    __sync_fetch_and_add(&e->ioctls[DRV_DRM], drm);
    return 0;
}

#ifdef WATTPROBE_EXEC
TRACEPOINT_PROBE(sched, sched_process_exec) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct task_val *v = tasks.lookup(&tgid);
    if (v && !v->dead_ns) {
        __sync_fetch_and_add(&v->execs, 1);
        // container runtimes move their init process into the container, then exec: taking
        // the cgroup here also covers a move that raced the entry being made
        v->cgroup_id = bpf_get_current_cgroup_id();
    }
#if defined(WATTPROBE_PER_PROCESS) && defined(SEEN_CACHE)
    // a thread other than the leader that execs takes the leader's pid
    u64 task = bpf_get_current_task();
    struct seen_task *e = seen_slot(task);
    if (e)
        seen_store(e, task, bpf_get_current_pid_tgid());
#endif
    return 0;
}
#endif

#ifdef WATTPROBE_CGROUP_ATTACH
TRACEPOINT_PROBE(cgroup, cgroup_attach_task) {
    if (args->dst_root != 0)
        return 0;  // hierarchy 0 is cgroup v2; v1 hierarchies do not matter here
    // fires once per moved thread, in the mover's context; the group leader's event carries
    // the tgid (other threads' ids name no entry)
    u32 tgid = args->pid;
    struct task_val *v = tasks.lookup(&tgid);
    if (v && !v->dead_ns && v->cgroup_id != args->dst_id)
        v->cgroup_id = args->dst_id;
    return 0;
}
#endif

#ifdef WATTPROBE_CGROUP_PATHS
#define CGROUP_PATH_LEN 256  // kubepods paths are about 180 characters

struct cgroup_path {
    char path[CGROUP_PATH_LEN];
};

BPF_TABLE("lru_hash", u64, struct cgroup_path, cgroup_paths, WATTPROBE_MAX_CGROUPS);
BPF_PERCPU_ARRAY(path_scratch, struct cgroup_path, 1);  // too big for the BPF stack

TRACEPOINT_PROBE(cgroup, cgroup_mkdir) {
    if (args->root != 0)
        return 0;
    u32 zero = 0;
    struct cgroup_path *p = path_scratch.lookup(&zero);
    if (!p)
        return 0;
    TP_DATA_LOC_READ_STR(p->path, path, sizeof(p->path));
    u64 id = args->id;
    cgroup_paths.update(&id, p);
    return 0;
}
#endif

#ifdef WATTPROBE_IOCTLS
#define DEV_MAJORS 4096  // a kernel dev_t has 12 bits of major (MINORBITS 20)
#define DEV_NVIDIA 1     // dev_class values: DRV_* + 1, 0 for any other device
#define DEV_DRM 2
#define S_IFMT_ 0170000
#define S_IFCHR_ 0020000
BPF_ARRAY(dev_class, u32, DEV_MAJORS);

// Reads size bytes at base + offset; 0 on a fault or a NULL base
static __always_inline int read_at(void *dst, u32 size, u64 base, u64 offset) {
    if (!base)
        return -1;
    return bpf_probe_read_kernel(dst, size, (void *)(base + offset));
}

// Fields read together where the layout allows, one probe read instead of two (~25 ns each):
// fdtable's max_fds and fd (adjacent since 2.6.14), and inode's i_mode ... i_rdev (76 bytes
// apart on 6.x kernels)
#define FDT_PAIR (WATTPROBE_OFF_FDT_FD == WATTPROBE_OFF_FDT_MAX_FDS + 8)
#define INODE_SPAN (WATTPROBE_OFF_INODE_RDEV + 4 - WATTPROBE_OFF_INODE_MODE)
#define INODE_ONE_READ (WATTPROBE_OFF_INODE_MODE < WATTPROBE_OFF_INODE_RDEV && INODE_SPAN <= 128)

// The device number of the character device fd refers to in the current task, or 0 (not a
// character device, no such fd, or a read failed). The same walk as the kernel's own fd lookup
// (current->files->fdt->fd[fd]->f_inode), at offsets from the running kernel's BTF. It runs at
// syscall entry, before the kernel's lookup: a concurrent close or dup2 races it just as it
// races the ioctl itself. The probe runs under RCU and every read tolerates a fault.
static __always_inline u32 fd_chr_rdev(u64 fd) {
    u64 files = 0, fdt = 0, fds = 0, file = 0, inode = 0;
    u32 max_fds = 0, rdev = 0;
    u16 mode = 0;
    if (read_at(&files, sizeof(files), bpf_get_current_task(), WATTPROBE_OFF_TASK_FILES) ||
        read_at(&fdt, sizeof(fdt), files, WATTPROBE_OFF_FILES_FDT))
        return 0;
#if FDT_PAIR
    struct {
        u32 max_fds;
        u32 pad;
        u64 fd;
    } pair = {};
    if (read_at(&pair, sizeof(pair), fdt, WATTPROBE_OFF_FDT_MAX_FDS))
        return 0;
    max_fds = pair.max_fds;
    fds = pair.fd;
#else
    if (read_at(&max_fds, sizeof(max_fds), fdt, WATTPROBE_OFF_FDT_MAX_FDS) ||
        read_at(&fds, sizeof(fds), fdt, WATTPROBE_OFF_FDT_FD))
        return 0;
#endif
    if (fd >= max_fds || read_at(&file, sizeof(file), fds, fd * sizeof(u64)) ||
        read_at(&inode, sizeof(inode), file, WATTPROBE_OFF_FILE_INODE))
        return 0;
#if INODE_ONE_READ
    u64 span[(INODE_SPAN + 7) / 8] = {};
    if (read_at(span, INODE_SPAN, inode, WATTPROBE_OFF_INODE_MODE))
        return 0;
    mode = *(u16 *)((u8 *)span);
    rdev = *(u32 *)((u8 *)span + WATTPROBE_OFF_INODE_RDEV - WATTPROBE_OFF_INODE_MODE);
    if ((mode & S_IFMT_) != S_IFCHR_)
        return 0;
#else
    if (read_at(&mode, sizeof(mode), inode, WATTPROBE_OFF_INODE_MODE) ||
        (mode & S_IFMT_) != S_IFCHR_ ||
        read_at(&rdev, sizeof(rdev), inode, WATTPROBE_OFF_INODE_RDEV))
        return 0;
#endif
    return rdev;
}

TRACEPOINT_PROBE(syscalls, sys_enter_ioctl) {
    u32 type = (args->cmd >> 8) & 0xff;  // _IOC_TYPE: bits 8..15 on every architecture
    u32 driver;
    if (type == 0x46)
        driver = DRV_NVIDIA;
    else if (type == 0x64)
        driver = DRV_DRM;
    else
        return 0;  // the common case: no memory read at all
    u32 major = fd_chr_rdev(args->fd) >> 20;  // MAJOR() of a kernel dev_t
    if (!major)
        return 0;
    u32 *class = dev_class.lookup(&major);
    if (!class || *class != driver + 1)
        return 0;
#ifdef WATTPROBE_PER_PROCESS
    // counted in this CPU's running slot; the next sched_switch adds it to the process with its
    // on-CPU time, in one map update
    u32 zero = 0;
    struct slice *s = running.lookup(&zero);
    if (s)
        s->ioctls[driver] += 1;
#else
    // no program on sched_switch: straight to the process's entry (made at its first GPU ioctl)
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct task_val *v = live_entry(tgid, false, 0, driver == DRV_NVIDIA, driver == DRV_DRM);
    if (v)
        __sync_fetch_and_add(&v->ioctls[driver], 1);
#endif
    return 0;
}
#endif
