/*
 * A fake libnvidia-ml.so.1 for wattprobe's tests.
 *
 * The real nvidia-ml-py binding (pynvml) loads this library exactly as it would load NVIDIA's,
 * so the exporter is tested through the real binding: symbol names, struct layouts, the
 * two-call "how many?" patterns and return codes all have to match what pynvml expects.
 *
 * What the fake GPUs report comes from a scenario file named by $WATTPROBE_FAKE_NVML_SCENARIO.
 * The file is re-read whenever its inode, size or mtime changes, so a test rewrites it (atomic
 * rename) between two samples to move counters, lose a GPU or raise an XID event.
 *
 * Scenario format: one "key=value" per line, '#' starts a comment line. Keys (N = GPU index,
 * M = MIG device index, P = process slot, E = event number); numbers are decimal or 0x hex:
 *   driver_version, nvml_version, cuda_version (int, e.g. 12040), init_error (nvmlReturn_t)
 *   gpu.N.name, .uuid, .pci_bus_id, .pci_device_id, .mig_mode (0/1), .lost (1: GPU_IS_LOST)
 *   gpu.N.util.gpu, .util.memory (percent)      gpu.N.memory.total, .reserved, .used (bytes)
 *   gpu.N.temperature (C)   gpu.N.power_mw   gpu.N.power_limit_mw   gpu.N.energy_mj
 *   gpu.N.clock.graphics, .clock.sm, .clock.mem (MHz)   gpu.N.clock_events (bitmask)
 *   gpu.N.pcie_replay   gpu.N.ecc.corrected, .ecc.uncorrected (volatile counts)
 *   gpu.N.proc.P.pid, .memory (bytes; missing = not available), .type (compute|graphics)
 *   gpu.N.putil.P.pid, .sm, .mem, .ts (usec; missing = now): process utilization samples
 *   gpu.N.max_mig   gpu.N.mig.M.uuid, .name, .gi, .ci, .memory.total, .memory.used,
 *   gpu.N.mig.M.proc.P.pid, .memory
 *   gpu.N.events_supported (bitmask, default XID critical errors)
 *   gpu.N.delay_ms: every call on GPU N (or its MIG devices) first sleeps this long, as a call
 *     stuck in the driver does (the library lock is not held while it sleeps)
 *   event_wait_error = nvmlReturn_t returned by every nvmlEventSetWait while it is set
 *   gpu.N.error.FIELD = nvmlReturn_t forced for one call, FIELD one of: name uuid pci index
 *     mig_mode util memory memory_v2 temperature temperature_v power power_limit energy clock
 *     clock_events clock_throttle pcie_replay ecc processes graphics_processes process_util
 *     max_mig mig_handle events register_events
 *   event.E.gpu, event.E.xid: XID events, delivered in order to event sets created before
 *     they appeared in the file (as the real driver only reports events after registration)
 * A waiting nvmlEventSetWait polls the file every 10 ms ($WATTPROBE_FAKE_NVML_EVENT_POLL_MS).
 * A value key that is missing makes its function return NVML_ERROR_NOT_SUPPORTED.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_MIG 8
#define MAX_ENTRIES 8192
#define EVENT_XID 0x8ULL
#define NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFULL
#define INVALID_ID 0xFFFFFFFFu
#define MEMORY_V2_VERSION 0x02000028u
#define TEMPERATURE_V1_VERSION 0x0100000Cu

/* ---- structs exactly as pynvml lays them out ------------------------------------------- */

typedef struct fake_device *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

struct fake_device {
    int gpu; /* index of the physical GPU */
    int mig; /* -1 for the GPU itself, else MIG device index */
};

struct fake_event_set {
    unsigned long long mask[MAX_GPUS];
    int next_event;
};
typedef struct fake_event_set *nvmlEventSet_t;

/* ---- scenario ----------------------------------------------------------------------------- */

struct entry {
    char *key;
    char *value;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry entries[MAX_ENTRIES];
static int n_entries;
static char *file_text;
static char loaded_path[4096];
static struct stat loaded_stat;
static int init_count;
static unsigned long long calls; /* API calls that consulted the scenario (for benchmarks) */
static struct fake_device devices[MAX_GPUS];
static struct fake_device mig_devices[MAX_GPUS][MAX_MIG];

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const struct entry *)a)->key, ((const struct entry *)b)->key);
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) *--end = '\0';
    return s;
}

static void parse(char *text) {
    n_entries = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        line = trim(line);
        char *eq = strchr(line, '=');
        if (*line == '#' || eq == NULL || n_entries >= MAX_ENTRIES) continue;
        *eq = '\0';
        entries[n_entries].key = trim(line);
        entries[n_entries].value = trim(eq + 1);
        n_entries++;
    }
    qsort(entries, n_entries, sizeof entries[0], cmp_entry);
}

/* Re-reads the scenario when the file changed. Called with the lock held. */
static void refresh(void) {
    calls++;
    const char *path = getenv("WATTPROBE_FAKE_NVML_SCENARIO");
    struct stat st;
    if (path == NULL || stat(path, &st) != 0) {
        free(file_text);
        file_text = NULL;
        n_entries = 0;
        loaded_path[0] = '\0';
        return;
    }
    if (strcmp(path, loaded_path) == 0 && st.st_ino == loaded_stat.st_ino &&
        st.st_size == loaded_stat.st_size && st.st_mtim.tv_sec == loaded_stat.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == loaded_stat.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (f == NULL) return; /* keep the last scenario rather than flicker */
    char *text = malloc((size_t)st.st_size + 1);
    size_t got = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (text == NULL) return;
    text[got] = '\0';
    free(file_text);
    file_text = text;
    parse(file_text);
    snprintf(loaded_path, sizeof loaded_path, "%s", path);
    loaded_stat = st;
}

static const char *lookup(const char *key) {
    struct entry probe = {(char *)key, NULL};
    struct entry *e = bsearch(&probe, entries, n_entries, sizeof entries[0], cmp_entry);
    return e ? e->value : NULL;
}

static const char *vget(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *vget(const char *fmt, ...) {
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    return lookup(key);
}

static int get_ull(const char *value, unsigned long long *out) {
    if (value == NULL || *value == '\0') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 0);
    if (errno != 0 || *end != '\0') return 0;
    *out = v;
    return 1;
}

#define GET_ULL(out, ...) get_ull(vget(__VA_ARGS__), (out))

static int gpu_count(void) {
    unsigned long long n;
    if (get_ull(lookup("device_count"), &n)) return n > MAX_GPUS ? MAX_GPUS : (int)n;
    int i = 0;
    while (i < MAX_GPUS && vget("gpu.%d.uuid", i) != NULL) i++;
    return i;
}

static int event_count(void) {
    int i = 0;
    while (vget("event.%d.xid", i) != NULL) i++;
    return i;
}

/* How often a waiting nvmlEventSetWait looks at the scenario for new events: 10 ms, or
 * $WATTPROBE_FAKE_NVML_EVENT_POLL_MS. The real driver sleeps in the kernel until an event or the
 * timeout; benchmarks set a poll longer than the exporter's wait so that the fake does too and
 * its polling is not counted as the exporter's CPU time. */
static unsigned long long event_poll_usec(void) {
    const char *text = getenv("WATTPROBE_FAKE_NVML_EVENT_POLL_MS");
    unsigned long long ms = text ? strtoull(text, NULL, 10) : 0;
    return (ms ? ms : 10ULL) * 1000ULL;
}

static unsigned long long now_usec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

/* ---- common checks -------------------------------------------------------------------------- */

static int valid_device(nvmlDevice_t d) {
    if (d >= devices && d < devices + MAX_GPUS) return 1;
    return d >= &mig_devices[0][0] && d < &mig_devices[0][0] + MAX_GPUS * MAX_MIG;
}

/* The return code a device call starts with: uninitialized, lost, a forced error, or success. */
static nvmlReturn_t device_status(nvmlDevice_t d, const char *field) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (d == NULL || !valid_device(d) || d->gpu >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long v;
    if (GET_ULL(&v, "gpu.%d.delay_ms", d->gpu) && v) {
        pthread_mutex_unlock(&lock);
        usleep((useconds_t)(v * 1000ULL));
        pthread_mutex_lock(&lock);
        refresh();
    }
    if (GET_ULL(&v, "gpu.%d.lost", d->gpu) && v) return NVML_ERROR_GPU_IS_LOST;
    if (field && GET_ULL(&v, "gpu.%d.error.%s", d->gpu, field)) return (nvmlReturn_t)v;
    return NVML_SUCCESS;
}

/* Prefix of the keys of a device: "gpu.N" or "gpu.N.mig.M". */
static void prefix(nvmlDevice_t d, char *out, size_t size) {
    if (d->mig < 0)
        snprintf(out, size, "gpu.%d", d->gpu);
    else
        snprintf(out, size, "gpu.%d.mig.%d", d->gpu, d->mig);
}

#define BEGIN(d, field)                      \
    pthread_mutex_lock(&lock);               \
    refresh();                               \
    nvmlReturn_t rc = device_status(d, field); \
    if (rc != NVML_SUCCESS) goto out;        \
    char pre[64];                            \
    prefix(d, pre, sizeof pre);

#define END           \
    out:              \
    pthread_mutex_unlock(&lock); \
    return rc;

static nvmlReturn_t copy_string(const char *value, char *buf, unsigned int size) {
    if (value == NULL) return NVML_ERROR_NOT_SUPPORTED;
    if (buf == NULL || strlen(value) + 1 > size) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t read_ull(const char *pre, const char *key, unsigned long long *out) {
    return GET_ULL(out, "%s.%s", pre, key) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* ---- library ---------------------------------------------------------------------------------- */

/* Not an NVML function: how many calls the fake has answered, for the benchmark. */
unsigned long long fakeNvmlCallCount(void) {
    pthread_mutex_lock(&lock);
    unsigned long long n = calls;
    pthread_mutex_unlock(&lock);
    return n;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    refresh();
    unsigned long long err = 0;
    nvmlReturn_t rc = NVML_SUCCESS;
    if (loaded_path[0] == '\0')
        rc = NVML_ERROR_DRIVER_NOT_LOADED;
    else if (get_ull(lookup("init_error"), &err) && err)
        rc = (nvmlReturn_t)err;
    if (rc == NVML_SUCCESS) {
        for (int i = 0; i < MAX_GPUS; i++) {
            devices[i].gpu = i;
            devices[i].mig = -1;
            for (int m = 0; m < MAX_MIG; m++) {
                mig_devices[i][m].gpu = i;
                mig_devices[i][m].mig = m;
            }
        }
        init_count++;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (init_count > 0) init_count--;
    pthread_mutex_unlock(&lock);
    return rc;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t system_string(const char *key, char *buf, unsigned int size) {
    pthread_mutex_lock(&lock);
    refresh();
    nvmlReturn_t rc = init_count ? copy_string(lookup(key), buf, size) : NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return system_string("driver_version", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return system_string("nvml_version", version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    pthread_mutex_lock(&lock);
    refresh();
    unsigned long long v;
    nvmlReturn_t rc = NVML_ERROR_UNINITIALIZED;
    if (init_count) rc = get_ull(lookup("cuda_version"), &v) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS) *cudaDriverVersion = (int)v;
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    pthread_mutex_lock(&lock);
    refresh();
    nvmlReturn_t rc = init_count ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (rc == NVML_SUCCESS) *deviceCount = (unsigned int)gpu_count();
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    pthread_mutex_lock(&lock);
    refresh();
    nvmlReturn_t rc = init_count ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (rc == NVML_SUCCESS && index >= (unsigned int)gpu_count()) rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) *device = &devices[index];
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- identity ------------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    BEGIN(d, "name")
    rc = copy_string(vget("%s.name", pre), name, length);
    END
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    BEGIN(d, "uuid")
    rc = copy_string(vget("%s.uuid", pre), uuid, length);
    END
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    BEGIN(d, "index")
    *index = (unsigned int)(d->mig < 0 ? d->gpu : d->mig);
    END
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    BEGIN(d, "pci")
    const char *bus_id = vget("%s.pci_bus_id", pre);
    if (bus_id == NULL) {
        rc = NVML_ERROR_NOT_SUPPORTED;
        goto out;
    }
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", bus_id);
    unsigned int domain = 0, bus = 0, dev = 0, fn = 0;
    sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    unsigned long long id = 0;
    if (GET_ULL(&id, "%s.pci_device_id", pre)) pci->pciDeviceId = (unsigned int)id;
    END
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *currentMode, unsigned int *pendingMode) {
    BEGIN(d, "mig_mode")
    unsigned long long mode;
    rc = read_ull(pre, "mig_mode", &mode);
    if (rc == NVML_SUCCESS) *currentMode = *pendingMode = (unsigned int)mode;
    END
}

/* ---- gauges and counters ---------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *util) {
    BEGIN(d, "util")
    unsigned long long gpu, mem;
    if (!GET_ULL(&gpu, "%s.util.gpu", pre) || !GET_ULL(&mem, "%s.util.memory", pre)) {
        rc = NVML_ERROR_NOT_SUPPORTED;
        goto out;
    }
    util->gpu = (unsigned int)gpu;
    util->memory = (unsigned int)mem;
    END
}

static nvmlReturn_t memory_values(nvmlDevice_t d, unsigned long long *total,
                                  unsigned long long *reserved, unsigned long long *used) {
    char pre[64];
    prefix(d, pre, sizeof pre);
    if (!GET_ULL(total, "%s.memory.total", pre) || !GET_ULL(used, "%s.memory.used", pre))
        return NVML_ERROR_NOT_SUPPORTED;
    if (!GET_ULL(reserved, "%s.memory.reserved", pre)) *reserved = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory) {
    BEGIN(d, "memory")
    unsigned long long total, reserved, used;
    rc = memory_values(d, &total, &reserved, &used);
    if (rc != NVML_SUCCESS) goto out;
    /* v1 counts the driver's reservation as used, as the real v1 call does */
    memory->total = total;
    memory->used = used + reserved;
    memory->free = total - used - reserved;
    END
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory) {
    BEGIN(d, "memory_v2")
    if (memory->version != MEMORY_V2_VERSION) {
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        goto out;
    }
    unsigned long long total, reserved, used;
    rc = memory_values(d, &total, &reserved, &used);
    if (rc != NVML_SUCCESS) goto out;
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - used - reserved;
    END
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, unsigned int sensor, unsigned int *temp) {
    BEGIN(d, "temperature")
    unsigned long long v;
    if (sensor != 0 || !GET_ULL(&v, "%s.temperature", pre)) {
        rc = NVML_ERROR_NOT_SUPPORTED;
        goto out;
    }
    *temp = (unsigned int)v;
    END
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_v1_t *temp) {
    BEGIN(d, "temperature_v")
    if (temp->version != TEMPERATURE_V1_VERSION) {
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        goto out;
    }
    unsigned long long v;
    if (temp->sensorType != 0 || !GET_ULL(&v, "%s.temperature", pre)) {
        rc = NVML_ERROR_NOT_SUPPORTED;
        goto out;
    }
    temp->temperature = (int)v;
    END
}

static nvmlReturn_t uint_field(nvmlDevice_t d, const char *field, const char *key, unsigned int *out) {
    BEGIN(d, field)
    unsigned long long v;
    rc = read_ull(pre, key, &v);
    if (rc == NVML_SUCCESS) *out = (unsigned int)v;
    END
}

static nvmlReturn_t ull_field(nvmlDevice_t d, const char *field, const char *key,
                              unsigned long long *out) {
    BEGIN(d, field)
    rc = read_ull(pre, key, out);
    END
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    return uint_field(d, "power", "power_mw", power);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit) {
    return uint_field(d, "power_limit", "power_limit_mw", limit);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *energy) {
    return ull_field(d, "energy", "energy_mj", energy);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, unsigned int type, unsigned int *clock) {
    static const char *const keys[] = {"clock.graphics", "clock.sm", "clock.mem"};
    if (type > 2) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_field(d, "clock", keys[type], clock);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
    return ull_field(d, "clock_events", "clock_events", reasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons) {
    return ull_field(d, "clock_throttle", "clock_events", reasons);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int *value) {
    return uint_field(d, "pcie_replay", "pcie_replay", value);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, unsigned int errorType,
                                         unsigned int counterType, unsigned long long *count) {
    if (errorType > 1 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    const char *key = errorType == 0 ? (counterType == 0 ? "ecc.corrected" : "ecc_aggregate.corrected")
                                     : (counterType == 0 ? "ecc.uncorrected" : "ecc_aggregate.uncorrected");
    return ull_field(d, "ecc", key, count);
}

/* ---- processes ---------------------------------------------------------------------------------- */

static int is_type(const char *pre, int p, const char *want) {
    const char *type = vget("%s.proc.%d.type", pre, p);
    return strcmp(type ? type : "compute", want) == 0;
}

/* Processes of one device prefix, appended to out (up to cap); returns how many there are. */
static unsigned int list_processes(const char *pre, const char *type, unsigned int gi, unsigned int ci,
                                   nvmlProcessInfo_t *out, unsigned int cap, unsigned int start) {
    unsigned int n = start;
    unsigned long long pid;
    for (int p = 0; GET_ULL(&pid, "%s.proc.%d.pid", pre, p); p++) {
        if (!is_type(pre, p, type)) continue;
        if (out && n < cap) {
            unsigned long long mem;
            out[n].pid = (unsigned int)pid;
            out[n].usedGpuMemory = GET_ULL(&mem, "%s.proc.%d.memory", pre, p) ? mem : NOT_AVAILABLE_ULL;
            out[n].gpuInstanceId = gi;
            out[n].computeInstanceId = ci;
        }
        n++;
    }
    return n;
}

static nvmlReturn_t running_processes(nvmlDevice_t d, const char *field, const char *type,
                                      unsigned int *count, nvmlProcessInfo_t *infos) {
    BEGIN(d, field)
    unsigned int cap = infos ? *count : 0;
    unsigned int n;
    unsigned long long gi = INVALID_ID, ci = INVALID_ID, mig_mode = 0;
    if (d->mig >= 0) {
        GET_ULL(&gi, "%s.gi", pre);
        GET_ULL(&ci, "%s.ci", pre);
        n = list_processes(pre, type, (unsigned)gi, (unsigned)ci, infos, cap, 0);
    } else if (GET_ULL(&mig_mode, "%s.mig_mode", pre) && mig_mode) {
        /* on the parent of MIG devices: every instance's processes, tagged with their ids */
        n = 0;
        for (int m = 0; m < MAX_MIG && vget("%s.mig.%d.uuid", pre, m); m++) {
            char mpre[96];
            snprintf(mpre, sizeof mpre, "%s.mig.%d", pre, m);
            gi = ci = INVALID_ID;
            GET_ULL(&gi, "%s.gi", mpre);
            GET_ULL(&ci, "%s.ci", mpre);
            n = list_processes(mpre, type, (unsigned)gi, (unsigned)ci, infos, cap, n);
        }
    } else {
        n = list_processes(pre, type, INVALID_ID, INVALID_ID, infos, cap, 0);
    }
    if (n > cap) rc = NVML_ERROR_INSUFFICIENT_SIZE;
    *count = n;
    END
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(d, "processes", "compute", count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    return running_processes(d, "graphics_processes", "graphics", count, infos);
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count, unsigned long long lastSeen) {
    BEGIN(d, "process_util")
    unsigned long long mig_mode = 0;
    if (d->mig >= 0 || (GET_ULL(&mig_mode, "%s.mig_mode", pre) && mig_mode)) {
        rc = NVML_ERROR_NOT_SUPPORTED; /* as documented for MIG-enabled GPUs */
        goto out;
    }
    unsigned long long now = now_usec(), pid;
    unsigned int n = 0, cap = samples ? *count : 0;
    for (int p = 0; GET_ULL(&pid, "%s.putil.%d.pid", pre, p); p++) {
        unsigned long long ts = now, sm = 0, mem = 0;
        GET_ULL(&ts, "%s.putil.%d.ts", pre, p);
        if (ts <= lastSeen) continue;
        GET_ULL(&sm, "%s.putil.%d.sm", pre, p);
        GET_ULL(&mem, "%s.putil.%d.mem", pre, p);
        if (samples && n < cap) {
            samples[n].pid = (unsigned int)pid;
            samples[n].timeStamp = ts;
            samples[n].smUtil = (unsigned int)sm;
            samples[n].memUtil = (unsigned int)mem;
            samples[n].encUtil = samples[n].decUtil = 0;
        }
        n++;
    }
    if (n == 0)
        rc = NVML_ERROR_NOT_FOUND;
    else if (n > cap)
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    *count = n;
    END
}

/* ---- MIG -------------------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    return uint_field(d, "max_mig", "max_mig", count);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    BEGIN(d, "mig_handle")
    if (d->mig >= 0 || index >= MAX_MIG) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
        goto out;
    }
    if (vget("%s.mig.%u.uuid", pre, index) == NULL) {
        rc = NVML_ERROR_NOT_FOUND;
        goto out;
    }
    *mig = &mig_devices[d->gpu][index];
    END
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig) {
    BEGIN(d, NULL)
    *isMig = d->mig >= 0;
    END
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent) {
    BEGIN(d, NULL)
    if (d->mig < 0) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
        goto out;
    }
    *parent = &devices[d->gpu];
    END
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    BEGIN(d, NULL)
    unsigned long long v;
    if (d->mig < 0 || !GET_ULL(&v, "%s.gi", pre)) {
        rc = NVML_ERROR_NOT_SUPPORTED;
        goto out;
    }
    *id = (unsigned int)v;
    END
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    BEGIN(d, NULL)
    unsigned long long v;
    if (d->mig < 0 || !GET_ULL(&v, "%s.ci", pre)) {
        rc = NVML_ERROR_NOT_SUPPORTED;
        goto out;
    }
    *id = (unsigned int)v;
    END
}

/* ---- events ----------------------------------------------------------------------------------- */

static unsigned long long supported_events(int gpu) {
    unsigned long long v;
    return GET_ULL(&v, "gpu.%d.events_supported", gpu) ? v : EVENT_XID;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    BEGIN(d, "events")
    *types = supported_events(d->gpu);
    END
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    pthread_mutex_lock(&lock);
    refresh();
    nvmlReturn_t rc = NVML_ERROR_UNINITIALIZED;
    if (init_count) {
        *set = calloc(1, sizeof **set);
        rc = *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
        if (*set) (*set)->next_event = event_count(); /* only events from now on */
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    BEGIN(d, "register_events")
    if (set == NULL || d->mig >= 0) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
        goto out;
    }
    if (types & ~supported_events(d->gpu)) {
        rc = NVML_ERROR_NOT_SUPPORTED;
        goto out;
    }
    set->mask[d->gpu] |= types;
    END
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    if (set == NULL || data == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long deadline = now_usec() + (unsigned long long)timeoutms * 1000ULL;
    pthread_mutex_lock(&lock);
    for (;;) {
        if (init_count == 0) {
            pthread_mutex_unlock(&lock);
            return NVML_ERROR_UNINITIALIZED;
        }
        refresh();
        unsigned long long wait_error;
        if (get_ull(lookup("event_wait_error"), &wait_error) && wait_error) {
            pthread_mutex_unlock(&lock);
            return (nvmlReturn_t)wait_error;
        }
        int total = event_count();
        while (set->next_event < total) {
            int e = set->next_event++;
            unsigned long long gpu, xid;
            if (!GET_ULL(&gpu, "event.%d.gpu", e) || !GET_ULL(&xid, "event.%d.xid", e)) continue;
            if (gpu >= MAX_GPUS || !(set->mask[gpu] & EVENT_XID)) continue;
            memset(data, 0, sizeof *data);
            data->device = &devices[gpu];
            data->eventType = EVENT_XID;
            data->eventData = xid;
            data->gpuInstanceId = data->computeInstanceId = INVALID_ID;
            pthread_mutex_unlock(&lock);
            return NVML_SUCCESS;
        }
        pthread_mutex_unlock(&lock);
        unsigned long long now = now_usec();
        if (now >= deadline) return NVML_ERROR_TIMEOUT;
        unsigned long long poll = event_poll_usec();
        unsigned long long nap = deadline - now < poll ? deadline - now : poll;
        usleep((useconds_t)nap);
        pthread_mutex_lock(&lock);
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    free(set);
    return NVML_SUCCESS;
}
