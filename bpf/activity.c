// wattprobe activity probes: on-CPU time, exited tasks and GPU ioctls per process and cgroup.
//
// Tracepoint arguments and BPF helpers only, never kernel struct fields, so any kernel headers
// compile this file. Counters are cumulative; userspace (exporter/sources/ebpf.py) takes deltas.
//
// Maps (all bounded; sizes come from userspace as -D flags):
//   tasks    LRU hash, tgid -> task_val   cumulative work of a live process; after it exits the
//                                         entry stays as a tombstone (dead_ns != 0) until
//                                         userspace has read it and deletes it
//   exited   LRU hash, cgroup id -> exited_val   work of exited processes, per cgroup v2 id
//   running  per-CPU array[1]              start and thread id of the slice now on each CPU,
//                                         so userspace can count long-running slices in flight
//   stats    per-CPU array[N_STATS]        insert and loss counters (eviction accounting)
//   cgroup_paths  LRU hash, cgroup id -> path of cgroups made since userspace last read it (it
//                 deletes what it reads), so a cgroup removed before userspace walks the cgroup
//                 tree still has a name
//
// The hot paths (every context switch, every ioctl) do not read the current cgroup: an entry
// takes it when it is made, and cgroup:cgroup_attach_task and sched:sched_process_exec keep it
// current when a process moves. Without cgroup_attach_task, every event reads it.
//
// Userspace passes: WATTPROBE_MAX_TASKS, WATTPROBE_MAX_CGROUPS, and optionally
// WATTPROBE_HAVE_GROUP_DEAD (sched_process_exit has a group_dead field: recent kernels, e.g. 6.18),
// WATTPROBE_IOCTLS (syscalls:sys_enter_ioctl exists), WATTPROBE_EXEC (sched_process_exec exists),
// WATTPROBE_CGROUP_ATTACH (cgroup:cgroup_attach_task with a 64-bit dst_id exists),
// WATTPROBE_CGROUP_PATHS (cgroup:cgroup_mkdir exists).

#define DRV_NVIDIA 0  // _IOC type 'F' (0x46): NVIDIA's /dev/nvidia* control and device nodes
#define DRV_DRM 1     // _IOC type 'd' (0x64): DRM (/dev/dri/*)
#define N_DRIVERS 2

// sched_switch prev_state bits of a task that has finished do_exit (EXIT_DEAD, EXIT_ZOMBIE as
// the tracepoint reports them since 4.14); used only to tell a dead task's last slice.
#define STATE_EXITED 0x30

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
    u64 on_cpu_ns;
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

struct slice {
    u64 start_ns;  // monotonic ns when the running task was switched in; 0 before the first switch
    u64 tid;       // thread id of that task (0: idle)
};

BPF_TABLE("lru_hash", u32, struct task_val, tasks, WATTPROBE_MAX_TASKS);
BPF_TABLE("lru_hash", u64, struct exited_val, exited, WATTPROBE_MAX_CGROUPS);
BPF_PERCPU_ARRAY(running, struct slice, 1);
BPF_PERCPU_ARRAY(stats, u64, N_STATS);

static __always_inline void stat_add(int index, u64 n) {
    u32 key = index;
    u64 *v = stats.lookup(&key);
    if (v)
        *v += n;  // per-CPU slot: no other writer
}

static __always_inline void add_ioctl(u64 *counts, int drv) {
    if (drv == DRV_NVIDIA)
        __sync_fetch_and_add(&counts[DRV_NVIDIA], 1);
    else if (drv == DRV_DRM)
        __sync_fetch_and_add(&counts[DRV_DRM], 1);
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

// Work of a process that has no live entry (it exited, or its entry could not be made).
static __always_inline void add_exited(u64 cgroup_id, u64 ns, int drv) {
    struct exited_val *e = exited_entry(cgroup_id);
    if (!e) {
        stat_add(STAT_LOST_NS, ns);
        if (drv >= 0)
            stat_add(STAT_LOST_IOCTLS, 1);
        return;
    }
    if (ns)
        __sync_fetch_and_add(&e->on_cpu_ns, ns);
    if (drv >= 0)
        add_ioctl(e->ioctls, drv);
}

// Adds ns of CPU time and/or one ioctl of driver drv (-1: none) to the current process.
static __always_inline void account(u32 tgid, u64 ns, int drv, bool exiting) {
    struct task_val *v = tasks.lookup(&tgid);
    if (!v) {
        u64 cgroup_id = bpf_get_current_cgroup_id();
        if (exiting) {
            // the last slice of a thread whose process is already gone from the map: do not
            // make an entry that nothing would ever remove
            add_exited(cgroup_id, ns, drv);
            return;
        }
        struct task_val init = {};
        init.first_ns = bpf_ktime_get_boot_ns();
        init.cgroup_id = cgroup_id;
        if (tasks.insert(&tgid, &init) == 0)
            stat_add(STAT_TASK_INSERTS, 1);
        v = tasks.lookup(&tgid);
        if (!v) {
            stat_add(STAT_TASK_INSERT_FAILS, 1);
            add_exited(cgroup_id, ns, drv);
            return;
        }
    }
    if (v->dead_ns) {
        // late work of a folded process (its other threads finishing do_exit), or of a new
        // process that reused the tgid before userspace removed the tombstone: either way it
        // belongs to this cgroup's exited total
        add_exited(bpf_get_current_cgroup_id(), ns, drv);
        return;
    }
#ifndef WATTPROBE_CGROUP_ATTACH
    u64 cgroup_id = bpf_get_current_cgroup_id();
    if (v->cgroup_id != cgroup_id)
        v->cgroup_id = cgroup_id;  // write only on change: the line is shared by all threads
#endif
    if (ns)
        __sync_fetch_and_add(&v->on_cpu_ns, ns);
    if (drv >= 0)
        add_ioctl(v->ioctls, drv);
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u32 zero = 0;
    struct slice *s = running.lookup(&zero);
    if (!s)
        return 0;
    u64 now = bpf_ktime_get_ns();
    u64 start = s->start_ns;
    // start first, then tid: userspace reads the slot twice and keeps it only if both agree
    *(volatile u64 *)&s->start_ns = now;
    *(volatile u64 *)&s->tid = args->next_pid;

    u32 tgid = bpf_get_current_pid_tgid() >> 32;  // current is still the task switching out
    if (start == 0 || tgid == 0)
        return 0;  // first switch on this CPU since load, or the idle task
    account(tgid, now - start, -1, (args->prev_state & STATE_EXITED) != 0);
    return 0;
}

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
TRACEPOINT_PROBE(syscalls, sys_enter_ioctl) {
    u32 type = (args->cmd >> 8) & 0xff;  // _IOC_TYPE: bits 8..15 on every architecture
    int drv;
    if (type == 0x46)
        drv = DRV_NVIDIA;
    else if (type == 0x64)
        drv = DRV_DRM;
    else
        return 0;
    account(bpf_get_current_pid_tgid() >> 32, 0, drv, false);
    return 0;
}
#endif
