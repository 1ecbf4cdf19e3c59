/*
 * adapter_host_test.c: the DS4 adapter's generic part (ds4s_adapter.c) on the host backend, as
 * DS4's GPU backend drives it: attach a model fd with a (stand-in) mapping address, read a
 * layer's misses as one batch (gate and up of every expert, then every down) into memory, and
 * compare every byte with a plain stdio read of the same file. Built and run by
 * capi/tests/ds4_adapter.rs (Linux) and .ci/wine-tests.sh (mingw-w64, ds4stream.dll, Wine).
 *
 *   adapter_host_test MODEL.gguf          full check, exit 0 on success
 *   DS4_STREAM=stock adapter_host_test M  the stock switch: nothing attaches, exit 0
 */
#if !defined(_WIN32)
#define _GNU_SOURCE
#endif
#include "ds4s_adapter.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _WIN32
#include <io.h>
#define open_ro(p) _open((p), _O_RDONLY | _O_BINARY)
#define close_fd _close
#else
#include <unistd.h>
#define open_ro(p) open((p), O_RDONLY)
#define close_fd close
#endif

/* The reference read: stdio, independent of the engine, on both systems. */
static int read_at(FILE *f, void *buf, size_t len, uint64_t off) {
#ifdef _WIN32
    if (_fseeki64(f, (__int64)off, SEEK_SET) != 0) return 0;
#else
    if (fseeko(f, (off_t)off, SEEK_SET) != 0) return 0;
#endif
    return fread(buf, 1, len, f) == len;
}

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "adapter_host_test: %s:%d: %s\n", __FILE__, __LINE__, #c); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

static char g_map_stand_in[1];

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const int fd = open_ro(argv[1]);
    CHECK(fd >= 0);
    FILE *ref = fopen(argv[1], "rb");
    CHECK(ref != NULL);
    struct stat st;
    CHECK(stat(argv[1], &st) == 0);
    const void *map = g_map_stand_in;

    const char *mode = getenv("DS4_STREAM");
    if (mode && strcmp(mode, "stock") == 0) {
        CHECK(!ds4sa_enabled());
        CHECK(ds4sa_attach(fd, map, (uint64_t)st.st_size, DS4S_BACKEND_HOST) == 1);
        CHECK(!ds4sa_attached(map));
        ds4sa_detach_all();
        printf("stock: nothing attached\n");
        return 0;
    }
    CHECK(ds4sa_enabled());
    /* DS4 first registers the fd with no mapping, then with it. */
    CHECK(ds4sa_attach(fd, NULL, (uint64_t)st.st_size, DS4S_BACKEND_HOST) == 1);
    CHECK(!ds4sa_attached(map));
    CHECK(ds4sa_attach(fd, map, (uint64_t)st.st_size, DS4S_BACKEND_HOST) == 1);
    CHECK(ds4sa_attached(map));
    CHECK(!ds4sa_attached(NULL));
    CHECK(!ds4sa_attached(g_map_stand_in + 1));
    const ds4s_handle h = ds4sa_handle(map);
    CHECK(h != 0);

    ds4s_layout l;
    memset(&l, 0, sizeof(l));
    l.struct_size = sizeof(l);
    CHECK(ds4s_get_layout(h, &l) == DS4S_OK);
    CHECK(l.n_layer >= 2 && l.n_expert >= 6);

    /* One layer's "misses": 6 experts, gate/up first, then downs, as ds4s_cuda.inc orders them. */
    const uint32_t layer = l.n_layer - 1;
    const uint32_t experts[6] = {0, 5, 1, l.n_expert - 1, 3, 2};
    ds4s_range ranges[18];
    size_t n = 0;
    uint64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int j = 0; j < 6; j++) {
            for (int kind = 0; kind < 3; kind++) {
                if ((pass == 0) == (kind == DS4S_DOWN)) continue;
                uint64_t off = 0, len = 0;
                CHECK(ds4s_expert_slice(h, layer, experts[j], kind, &off, &len) == DS4S_OK);
                ranges[n].file_offset = off;
                ranges[n].len = len;
                ranges[n].dst = malloc(len);
                CHECK(ranges[n].dst != NULL);
                memset(ranges[n].dst, 0xAB, len);
                total += len;
                n++;
            }
        }
    }
    CHECK(n == 18);
    CHECK(ds4sa_read(map, ranges, n, DS4S_MEM_HOST, "layer test experts") == 1);
    for (size_t i = 0; i < n; i++) {
        char *want = malloc(ranges[i].len);
        CHECK(want != NULL);
        CHECK(read_at(ref, want, (size_t)ranges[i].len, ranges[i].file_offset));
        CHECK(memcmp(want, ranges[i].dst, ranges[i].len) == 0);
        free(want);
    }

    /* A single range (the static-tensor hook's shape), host memory. */
    char head[4096];
    ds4s_range one = {0, sizeof(head), head};
    CHECK(ds4sa_read(map, &one, 1, DS4S_MEM_HOST, "header") == 1);
    CHECK(memcmp(head, "GGUF", 4) == 0);

    ds4sa_counters c;
    ds4sa_get_counters(&c);
    CHECK(c.batches == 2 && c.ranges == 19 && c.bytes == total + sizeof(head));

    /* Failures are reported, never silent: past the end of the file; an unattached map;
     * device memory on the host backend. */
    ds4s_range bad = {(uint64_t)st.st_size - 8, 64, head};
    CHECK(ds4sa_read(map, &bad, 1, DS4S_MEM_HOST, "past the end") == 0);
    CHECK(ds4sa_read(g_map_stand_in + 1, &one, 1, DS4S_MEM_HOST, "unattached") == 0);
    CHECK(ds4sa_read_device(map, head, 0, 16, "device on host") == 0);
    ds4sa_get_counters(&c);
    CHECK(c.batches == 2);

    for (size_t i = 0; i < n; i++) free(ranges[i].dst);
    ds4sa_detach_all();
    CHECK(!ds4sa_attached(map));
    ds4sa_detach_all();
    fclose(ref);
    close_fd(fd);
    printf("adapter ok: %zu ranges, %llu bytes verified\n", n, (unsigned long long)total);
    return 0;
}
