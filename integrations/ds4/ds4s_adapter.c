/*
 * ds4s_adapter.c: file handles, batched reads and counters for the DS4 engine's ds4-stream
 * hooks (see ds4s_adapter.h). Plain C99 over include/ds4stream.h; the GPU-specific parts
 * (which ranges a layer needs, DS4's expert cache) are in ds4s_cuda.inc.
 *
 * Why per fd: DS4 opens the model once and hands its fd to the GPU backend; ds4-stream opens
 * its own handle per reader thread, so it needs the path: /proc/self/fd/N on Linux,
 * GetFinalPathNameByHandleW on Windows. Attaching is idempotent (DS4 registers the same fd
 * several times, first with no mapping).
 */
#if !defined(_WIN32) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* readlink, clock_gettime under -std=c99 */
#endif
#include "ds4s_adapter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <io.h>
#include <windows.h>
static SRWLOCK g_lock = SRWLOCK_INIT;
static void lock(void) { AcquireSRWLockExclusive(&g_lock); }
static void unlock(void) { ReleaseSRWLockExclusive(&g_lock); }
static uint64_t now_ns(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (uint64_t)((double)c.QuadPart * 1e9 / (double)f.QuadPart);
}
#else
#include <pthread.h>
#include <time.h>
#include <unistd.h>
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void lock(void) { pthread_mutex_lock(&g_lock); }
static void unlock(void) { pthread_mutex_unlock(&g_lock); }
static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

#define DS4SA_MAX_FILES 8

typedef struct {
    int fd;
    const void *map;
    uint64_t map_size;
    ds4s_handle h;
} ds4sa_file;

static ds4sa_file g_files[DS4SA_MAX_FILES];
static int g_n_files;
static int g_config_read;
static int g_enabled = 1;
static uint32_t g_workers;
static uint32_t g_flags;
static int g_verbose;
static ds4sa_counters g_counters;

static void read_config(void) {
    if (g_config_read) return;
    g_config_read = 1;
    const char *mode = getenv("DS4_STREAM");
    if (mode && (strcmp(mode, "stock") == 0 || strcmp(mode, "off") == 0 || strcmp(mode, "0") == 0)) {
        g_enabled = 0;
    } else if (mode && mode[0] && strcmp(mode, "on") != 0 && strcmp(mode, "1") != 0) {
        fprintf(stderr, "ds4: DS4_STREAM=%s is not one of on, stock, off: using ds4-stream\n", mode);
    }
    const char *w = getenv("DS4_STREAM_WORKERS");
    if (w && w[0]) {
        char *end = NULL;
        unsigned long v = strtoul(w, &end, 10);
        if (!end || *end != '\0' || v == 0 || v > 256) {
            fprintf(stderr, "ds4: DS4_STREAM_WORKERS=%s is not a count in 1..256: using the default\n", w);
        } else {
            g_workers = (uint32_t)v;
        }
    }
    const char *nd = getenv("DS4_STREAM_NO_DIRECT");
    if (nd && nd[0] && strcmp(nd, "0") != 0) g_flags |= DS4S_OPEN_NO_DIRECT_IO;
    const char *v = getenv("DS4_STREAM_VERBOSE");
    g_verbose = v && v[0] && strcmp(v, "0") != 0;
}

int ds4sa_enabled(void) {
    lock();
    read_config();
    const int on = g_enabled;
    unlock();
    return on;
}

/* The path of the file behind fd, for ds4s_open (UTF-8). 0 on failure. */
static int path_of_fd(int fd, char *buf, size_t cap) {
#ifdef _WIN32
    HANDLE h = (HANDLE)_get_osfhandle(fd);
    if (h == INVALID_HANDLE_VALUE) return 0;
    wchar_t wbuf[32768];
    DWORD n = GetFinalPathNameByHandleW(h, wbuf, (DWORD)(sizeof(wbuf) / sizeof(wbuf[0])),
                                        FILE_NAME_NORMALIZED);
    if (n == 0 || n >= sizeof(wbuf) / sizeof(wbuf[0])) return 0;
    int m = WideCharToMultiByte(CP_UTF8, 0, wbuf, (int)n, buf, (int)cap - 1, NULL, NULL);
    if (m <= 0) return 0;
    buf[m] = '\0';
    return 1;
#else
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, buf, cap - 1);
    if (n > 0 && (size_t)n < cap - 1 && buf[0] == '/') {
        buf[n] = '\0';
        if (access(buf, R_OK) == 0) return 1;
    }
    /* Deleted or unreachable by name: the /proc path still opens the same file. */
    if (strlen(proc) + 1 > cap) return 0;
    memcpy(buf, proc, strlen(proc) + 1);
    return 1;
#endif
}

int ds4sa_attach(int fd, const void *map, uint64_t map_size, int backend) {
    lock();
    read_config();
    if (!g_enabled || fd < 0) {
        unlock();
        return 1;
    }
    for (int i = 0; i < g_n_files; i++) {
        if (g_files[i].fd == fd) {
            if (map) {
                g_files[i].map = map;
                g_files[i].map_size = map_size;
            }
            unlock();
            return 1;
        }
    }
    if (g_n_files == DS4SA_MAX_FILES) {
        unlock();
        fprintf(stderr, "ds4: ds4-stream: more than %d model files attached\n", DS4SA_MAX_FILES);
        return 0;
    }
    char path[4096];
    if (!path_of_fd(fd, path, sizeof(path))) {
        unlock();
        fprintf(stderr, "ds4: ds4-stream: cannot find the path of model fd %d\n", fd);
        return 0;
    }
    ds4s_options o;
    ds4s_options_init(&o);
    o.backend = backend;
    o.workers = g_workers;
    o.flags = g_flags;
    ds4s_handle h = 0;
    const int rc = ds4s_open(path, &o, &h);
    if (rc != DS4S_OK) {
        unlock();
        fprintf(stderr, "ds4: ds4-stream cannot open %s: %s (%s)\n", path, ds4s_last_error(),
                ds4s_status_name(rc));
        return 0;
    }
    ds4s_layout l;
    memset(&l, 0, sizeof(l));
    l.struct_size = (uint32_t)sizeof(l);
    (void)ds4s_get_layout(h, &l);
    g_files[g_n_files].fd = fd;
    g_files[g_n_files].map = map;
    g_files[g_n_files].map_size = map_size;
    g_files[g_n_files].h = h;
    g_n_files++;
    unlock();
    fprintf(stderr,
            "ds4: ds4-stream engine on %s (%s backend, %u readers): routed experts stream through it\n",
            path,
            l.backend == DS4S_BACKEND_CUDA  ? "CUDA"
            : l.backend == DS4S_BACKEND_HIP ? "HIP"
                                            : "host",
            g_workers ? g_workers : 18u);
    return 1;
}

static ds4s_handle handle_of(const void *map) {
    if (!map) return 0;
    ds4s_handle h = 0;
    lock();
    for (int i = 0; i < g_n_files; i++) {
        if (g_files[i].map == map) {
            h = g_files[i].h;
            break;
        }
    }
    unlock();
    return h;
}

int ds4sa_attached(const void *map) { return handle_of(map) != 0; }

ds4s_handle ds4sa_handle(const void *map) { return handle_of(map); }

/* Per-thread start times of begun batches would need TLS; the wait is timed from begin's clock
 * kept in a small ring keyed by completion id instead. */
#define DS4SA_T0_RING 64
static struct {
    ds4s_completion c;
    uint64_t t0;
} g_t0[DS4SA_T0_RING];

int ds4sa_begin(const void *map, const ds4s_range *ranges, size_t n, int memory,
                ds4s_completion *out) {
    *out = 0;
    const ds4s_handle h = handle_of(map);
    if (!h) {
        fprintf(stderr, "ds4: ds4-stream read: the model mapping is not attached\n");
        return 0;
    }
    const uint64_t t0 = now_ns();
    const int rc = ds4s_read(h, ranges, n, memory, out);
    if (rc != DS4S_OK) {
        fprintf(stderr, "ds4: ds4-stream read of %zu ranges refused: %s (%s)\n", n,
                ds4s_last_error(), ds4s_status_name(rc));
        return 0;
    }
    lock();
    g_t0[*out % DS4SA_T0_RING].c = *out;
    g_t0[*out % DS4SA_T0_RING].t0 = t0;
    unlock();
    return 1;
}

int ds4sa_end(const void *map, ds4s_completion c, const ds4s_range *ranges, size_t n,
              const char *what) {
    const ds4s_handle h = handle_of(map);
    if (!h) {
        fprintf(stderr, "ds4: ds4-stream read of %s: the model mapping is not attached\n",
                what ? what : "weights");
        return 0;
    }
    const int rc = ds4s_wait(h, c, -1);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", rc == DS4S_OK ? "" : ds4s_last_error());
    (void)ds4s_completion_free(h, c);
    if (rc != DS4S_OK) {
        fprintf(stderr, "ds4: ds4-stream read of %s failed: %s (%s)\n", what ? what : "weights",
                msg, ds4s_status_name(rc));
        return 0;
    }
    const uint64_t t1 = now_ns();
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += ranges[i].len;
    lock();
    uint64_t t0 = t1;
    if (g_t0[c % DS4SA_T0_RING].c == c) t0 = g_t0[c % DS4SA_T0_RING].t0;
    const uint64_t dt = t1 - t0;
    g_counters.batches++;
    g_counters.ranges += n;
    g_counters.bytes += bytes;
    g_counters.wait_ns += dt;
    const int verbose = g_verbose;
    unlock();
    if (verbose) {
        fprintf(stderr, "ds4: ds4-stream %s: %zu ranges, %.2f MiB in %.3f ms (%.2f GB/s)\n",
                what ? what : "read", n, (double)bytes / 1048576.0, (double)dt / 1e6,
                dt ? (double)bytes / (double)dt : 0.0);
    }
    return 1;
}

int ds4sa_read(const void *map, const ds4s_range *ranges, size_t n, int memory, const char *what) {
    if (n == 0) return 1;
    ds4s_completion c = 0;
    if (!ds4sa_begin(map, ranges, n, memory, &c)) {
        fprintf(stderr, "ds4: ds4-stream read of %s: not started\n", what ? what : "weights");
        return 0;
    }
    return ds4sa_end(map, c, ranges, n, what);
}

int ds4sa_read_device(const void *map, void *dst, uint64_t offset, uint64_t len, const char *what) {
    ds4s_range r;
    r.file_offset = offset;
    r.len = len;
    r.dst = dst;
    return ds4sa_read(map, &r, 1, DS4S_MEM_DEVICE, what);
}

void ds4sa_get_counters(ds4sa_counters *out) {
    lock();
    *out = g_counters;
    unlock();
}

void ds4sa_detach_all(void) {
    lock();
    const int n = g_n_files;
    ds4sa_file files[DS4SA_MAX_FILES];
    memcpy(files, g_files, sizeof(files));
    g_n_files = 0;
    const ds4sa_counters c = g_counters;
    unlock();
    for (int i = 0; i < n; i++) {
        const int rc = ds4s_close(files[i].h);
        if (rc != DS4S_OK) {
            fprintf(stderr, "ds4: ds4-stream close failed: %s\n", ds4s_last_error());
        }
    }
    if (n > 0) {
        fprintf(stderr,
                "ds4: ds4-stream read %.1f MiB in %llu batches (%llu ranges), %.2f s waited, "
                "%.2f GB/s while waiting\n",
                (double)c.bytes / 1048576.0, (unsigned long long)c.batches,
                (unsigned long long)c.ranges, (double)c.wait_ns / 1e9,
                c.wait_ns ? (double)c.bytes / (double)c.wait_ns : 0.0);
    }
}
