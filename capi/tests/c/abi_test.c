/*
 * The C ABI from C: abi_test MODEL MALFORMED MISSING [host|cuda|hip|auto]
 *
 * MODEL is a generated DS4-layout file (tiny scale), MALFORMED a file that is not a valid GGUF,
 * MISSING a path that does not exist. Reads ranges through the API and checks every byte
 * against a plain read of the file; follows the C engine's decode pattern through the expert
 * cache (per layer: 6 experts x 3 slices, some already cached, released after use); exercises
 * the error paths (missing and malformed files, bad arguments, NULL pointers, double close, use
 * after close) expecting codes and messages. With a GPU backend the expert slices are device
 * memory, which C cannot compare with memcmp: then only their lengths and addresses are checked
 * (the Rust tests of expert_store read them back). Exit 0 when everything held; prints what failed.
 * Driven by capi/tests/c_abi.rs (Linux, under ASan) and .ci/wine-tests.sh (mingw-w64 + Wine).
 */
/* mingw-w64: C99 printf formats (%zu, %llu) instead of msvcrt's. */
#define __USE_MINGW_ANSI_STDIO 1
#include "ds4stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks;
static int backend = DS4S_BACKEND_HOST;
static int host_backend = 1; /* the backend opened is the host one (set by layout()) */

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n  ds4s_last_error: %s\n", ds4s_last_error());              \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* Expects `call` to return `code` and, for errors, a message containing `needle`. */
#define EXPECT(call, code, needle)                                                        \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        CHECK(rc_ == (code), "%s returned %d (%s), expected %s", #call, rc_,              \
              ds4s_status_name(rc_), #code);                                              \
        if ((code) < 0)                                                                   \
            CHECK(strstr(ds4s_last_error(), (needle)) != NULL,                            \
                  "message of %s lacks \"%s\"", #call, (needle));                         \
    } while (0)

#define OK(call) EXPECT(call, DS4S_OK, "")

static unsigned char *file_bytes;
static size_t file_len;

static void load_file(const char *path) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    size_t cap = 1 << 20, n;
    file_bytes = malloc(cap);
    while ((n = fread(file_bytes + file_len, 1, cap - file_len, f)) > 0) {
        file_len += n;
        if (file_len == cap) {
            cap *= 2;
            file_bytes = realloc(file_bytes, cap);
            CHECK(file_bytes != NULL, "out of memory");
        }
    }
    fclose(f);
}

static void same_as_file(const void *got, uint64_t off, uint64_t len, const char *what) {
    CHECK(off + len <= file_len, "%s past the file", what);
    CHECK(memcmp(got, file_bytes + off, (size_t)len) == 0, "%s: bytes at %llu+%llu differ",
          what, (unsigned long long)off, (unsigned long long)len);
}

static void library_calls(void) {
    CHECK(ds4s_abi_version() == DS4S_ABI_VERSION, "abi version %u", ds4s_abi_version());
    CHECK(strcmp(ds4s_status_name(DS4S_ERR_IO), "DS4S_ERR_IO") == 0, "status name");
    CHECK(strcmp(ds4s_status_name(12345), "unknown status") == 0, "unknown status name");
    ds4s_options o;
    memset(&o, 0xff, sizeof o);
    ds4s_options_init(&o);
    CHECK(o.struct_size == sizeof o && o.workers == 0 && o.backend == DS4S_BACKEND_AUTO,
          "options_init");
    ds4s_options_init(NULL); /* must not crash */
}

static void open_errors(const char *malformed, const char *missing) {
    ds4s_handle h = 0;
    ds4s_options o;
    ds4s_options_init(&o);
    EXPECT(ds4s_open(missing, NULL, &h), DS4S_ERR_IO, missing);
    EXPECT(ds4s_open(malformed, NULL, &h), DS4S_ERR_FORMAT, malformed);
    EXPECT(ds4s_open(NULL, NULL, &h), DS4S_ERR_INVALID_ARGUMENT, "path is NULL");
    EXPECT(ds4s_open(missing, NULL, NULL), DS4S_ERR_INVALID_ARGUMENT, "out is NULL");
    /* struct_size bounds: it must at least hold itself; an uninitialised size is refused. */
    o.struct_size = 3;
    EXPECT(ds4s_open(missing, &o, &h), DS4S_ERR_INVALID_ARGUMENT, "struct_size is 3");
    o.struct_size = DS4S_STRUCT_SIZE_MAX + 1;
    EXPECT(ds4s_open(missing, &o, &h), DS4S_ERR_INVALID_ARGUMENT, "struct_size is 4097");
    /* An older header's options (only struct_size): accepted as defaults, so the open gets as
     * far as the missing file. */
    o.struct_size = 4;
    o.backend = 99; /* past struct_size: not read */
    EXPECT(ds4s_open(missing, &o, &h), DS4S_ERR_IO, missing);
    /* A newer header's options: bytes past ours must be 0. */
    struct {
        ds4s_options o;
        unsigned char newer[16];
    } big;
    memset(&big, 0, sizeof big);
    ds4s_options_init(&big.o);
    big.o.struct_size = sizeof big;
    EXPECT(ds4s_open(missing, &big.o, &h), DS4S_ERR_IO, missing);
    big.newer[3] = 7;
    char byte[32];
    snprintf(byte, sizeof byte, "byte %zu of %zu", sizeof big.o + 3, sizeof big);
    EXPECT(ds4s_open(missing, &big.o, &h), DS4S_ERR_INVALID_ARGUMENT, byte);
    ds4s_options_init(&o);
    o.backend = 99;
    EXPECT(ds4s_open(missing, &o, &h), DS4S_ERR_INVALID_ARGUMENT, "backend 99");
    ds4s_options_init(&o);
    o.flags = 0x80;
    EXPECT(ds4s_open(missing, &o, &h), DS4S_ERR_INVALID_ARGUMENT, "unknown bits");
    ds4s_options_init(&o);
    o.device_ordinal = -1;
    EXPECT(ds4s_open(missing, &o, &h), DS4S_ERR_INVALID_ARGUMENT, "negative");
    CHECK(h == 0, "a failed open wrote a handle");
    /* Calls with handles that were never issued. */
    ds4s_layout l;
    l.struct_size = sizeof l;
    EXPECT(ds4s_get_layout(0, &l), DS4S_ERR_BAD_HANDLE, "never valid");
    EXPECT(ds4s_get_layout(0x0100000000abcdefULL, &l), DS4S_ERR_BAD_HANDLE, "not open");
    EXPECT(ds4s_get_layout(42, &l), DS4S_ERR_BAD_HANDLE, "never issued");
    EXPECT(ds4s_close(42), DS4S_ERR_BAD_HANDLE, "never issued");
}

static ds4s_handle open_model(const char *path, uint32_t cache_slots, uint32_t flags) {
    ds4s_options o;
    ds4s_options_init(&o);
    o.workers = 4;
    o.staging_slots = 4;
    o.staging_slot_bytes = 64 << 10;
    o.backend = backend;
    o.expert_cache_slots = cache_slots;
    o.flags = flags;
    ds4s_handle h = 0;
    OK(ds4s_open(path, &o, &h));
    CHECK(h != 0, "handle 0");
    return h;
}

static void layout(ds4s_handle h, ds4s_layout *l) {
    memset(l, 0, sizeof *l);
    l->struct_size = sizeof *l;
    OK(ds4s_get_layout(h, l));
    CHECK(l->n_layer == 6 && l->n_expert == 16 && l->n_expert_used == 6 && l->n_hash_layer == 3,
          "tiny layout: %u layers, %u experts, K %u", l->n_layer, l->n_expert, l->n_expert_used);
    CHECK(l->file_size == file_len, "file size %llu", (unsigned long long)l->file_size);
    CHECK(l->expert_bytes == l->gate_bytes + l->up_bytes + l->down_bytes, "expert bytes");
    CHECK(backend == DS4S_BACKEND_AUTO || l->backend == backend, "backend %d", l->backend);
    host_backend = l->backend == DS4S_BACKEND_HOST;
    CHECK(l->expert_memory == (l->backend == DS4S_BACKEND_HOST ? DS4S_MEM_HOST : DS4S_MEM_DEVICE),
          "expert memory %d on backend %d", l->expert_memory, l->backend);
    /* An older header's (smaller) layout: only its first struct_size bytes are written. */
    ds4s_layout small;
    memset(&small, 0xab, sizeof small);
    small.struct_size = 8;
    OK(ds4s_get_layout(h, &small));
    CHECK(small.struct_size == 8 && small.n_layer == l->n_layer && small.n_expert == 0xabababab,
          "8-byte layout: size %u, n_layer %u, next field %#x", small.struct_size, small.n_layer,
          small.n_expert);
    /* A newer header's (larger) one: ours in front, struct_size kept, the rest zeroed. */
    struct {
        ds4s_layout l;
        unsigned char newer[24];
    } big;
    memset(&big, 0xab, sizeof big);
    big.l.struct_size = sizeof big;
    OK(ds4s_get_layout(h, &big.l));
    CHECK(big.l.struct_size == sizeof big && big.l.n_layer == l->n_layer &&
              big.l.expert_slot_bytes == l->expert_slot_bytes,
          "larger layout: size %u", big.l.struct_size);
    for (size_t i = 0; i < sizeof big.newer; i++)
        CHECK(big.newer[i] == 0, "byte %zu past our layout is %#x", sizeof big.l + i,
              big.newer[i]);
    small.struct_size = 0;
    EXPECT(ds4s_get_layout(h, &small), DS4S_ERR_INVALID_ARGUMENT, "struct_size is 0");
    EXPECT(ds4s_get_layout(h, NULL), DS4S_ERR_INVALID_ARGUMENT, "NULL");
    /* The handle keeps its last error for any thread. */
    char buf[16];
    size_t n = ds4s_error_message(h, buf, sizeof buf);
    CHECK(n > sizeof buf && strlen(buf) == sizeof buf - 1 &&
              strncmp(buf, "ds4s_get_layout", 15) == 0,
          "truncated handle message \"%s\" (%zu)", buf, n);
    CHECK(ds4s_error_message(h, NULL, 0) == n, "message length");

    ds4s_tensor t;
    t.struct_size = sizeof t;
    OK(ds4s_tensor_info(h, "blk.3.ffn_down_exps.weight", &t));
    CHECK(t.n_dims == 3 && t.dims[2] == 16 && t.offset + t.nbytes <= file_len, "down tensor");
    ds4s_tensor t12;
    memset(&t12, 0xab, sizeof t12);
    t12.struct_size = 12; /* struct_size, ggml_type, n_dims */
    OK(ds4s_tensor_info(h, "blk.3.ffn_down_exps.weight", &t12));
    CHECK(t12.struct_size == 12 && t12.ggml_type == t.ggml_type && t12.n_dims == 3 &&
              t12.reserved == 0xabababab,
          "12-byte tensor");
    uint64_t off = 0, len = 0;
    OK(ds4s_expert_slice(h, 3, 2, DS4S_DOWN, &off, &len));
    CHECK(off == t.offset + 2 * l->down_bytes && len == l->down_bytes, "expert slice");
    EXPECT(ds4s_tensor_info(h, "no.such.tensor", &t), DS4S_ERR_NOT_FOUND, "no.such.tensor");
    EXPECT(ds4s_expert_slice(h, 6, 0, DS4S_GATE, &off, &len), DS4S_ERR_OUT_OF_RANGE, "layer");
    EXPECT(ds4s_expert_slice(h, 0, 16, DS4S_GATE, &off, &len), DS4S_ERR_OUT_OF_RANGE, "16");
    EXPECT(ds4s_expert_slice(h, 0, 0, 7, &off, &len), DS4S_ERR_INVALID_ARGUMENT, "kind 7");
    EXPECT(ds4s_expert_slice(h, 0, 0, DS4S_UP, NULL, &len), DS4S_ERR_INVALID_ARGUMENT, "NULL");
}

static void reads(ds4s_handle h) {
    /* A batch: unaligned offsets, the whole file, a tiny range, an empty one. */
    size_t n_big = file_len;
    unsigned char *a = malloc(n_big), *b = malloc(70001), *c = malloc(3);
    ds4s_range r[4] = {
        {0, file_len, a},
        {12345, 70001, b},
        {file_len - 3, 3, c},
        {77, 0, NULL},
    };
    ds4s_completion done = 0, other = 0;
    OK(ds4s_read(h, r, 4, DS4S_MEM_HOST, &done));
    int st;
    while ((st = ds4s_poll(h, done)) == DS4S_PENDING) {
    }
    CHECK(st == DS4S_OK, "poll: %s", ds4s_status_name(st));
    OK(ds4s_wait(h, done, 0)); /* the outcome is sticky */
    same_as_file(a, 0, file_len, "whole file");
    same_as_file(b, 12345, 70001, "unaligned range");
    same_as_file(c, file_len - 3, 3, "last bytes");
    OK(ds4s_completion_free(h, done));
    EXPECT(ds4s_completion_free(h, done), DS4S_ERR_BAD_HANDLE, "not open");
    EXPECT(ds4s_wait(h, done, -1), DS4S_ERR_BAD_HANDLE, "not open");

    /* Many batches in flight, waited for in reverse. */
    enum { N = 16 };
    ds4s_completion cs[N];
    unsigned char *bufs[N];
    for (int i = 0; i < N; i++) {
        uint64_t off = (uint64_t)i * 99991 % (file_len - 50000);
        bufs[i] = malloc(50000);
        ds4s_range one = {off, 50000, bufs[i]};
        OK(ds4s_read(h, &one, 1, DS4S_MEM_HOST, &cs[i]));
    }
    for (int i = N - 1; i >= 0; i--) {
        OK(ds4s_wait(h, cs[i], 10000));
        same_as_file(bufs[i], (uint64_t)i * 99991 % (file_len - 50000), 50000, "batch");
        OK(ds4s_completion_free(h, cs[i]));
        free(bufs[i]);
    }

    /* Refused before anything is read. */
    ds4s_range past = {file_len - 10, 11, b};
    EXPECT(ds4s_read(h, &past, 1, DS4S_MEM_HOST, &other), DS4S_ERR_OUT_OF_RANGE, "past the end");
    ds4s_range null_dst = {0, 10, NULL};
    EXPECT(ds4s_read(h, &null_dst, 1, DS4S_MEM_HOST, &other), DS4S_ERR_INVALID_ARGUMENT,
           "ranges[0].dst is NULL");
    ds4s_range overlap[3] = {{0, 100, b}, {500, 10, b + 1000}, {100, 100, b + 50}};
    EXPECT(ds4s_read(h, overlap, 3, DS4S_MEM_HOST, &other), DS4S_ERR_BUSY, "overlapping");
    if (host_backend) /* on a GPU backend a host pointer as DS4S_MEM_DEVICE breaks the contract */
        EXPECT(ds4s_read(h, r, 1, DS4S_MEM_DEVICE, &other), DS4S_ERR_UNSUPPORTED, "device memory");
    EXPECT(ds4s_read(h, r, 1, 5, &other), DS4S_ERR_INVALID_ARGUMENT, "memory 5");
    EXPECT(ds4s_read(h, r, 0, DS4S_MEM_HOST, &other), DS4S_ERR_INVALID_ARGUMENT, "n is 0");
    EXPECT(ds4s_read(h, NULL, 2, DS4S_MEM_HOST, &other), DS4S_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(ds4s_read(h, r, 1, DS4S_MEM_HOST, NULL), DS4S_ERR_INVALID_ARGUMENT, "out is NULL");
    EXPECT(ds4s_poll(h, h), DS4S_ERR_BAD_HANDLE, "not a completion");
    free(a);
    free(b);
    free(c);
}

/* The C engine's decode pattern: per token, per layer, 6 experts x 3 slices; the next layer's
 * experts hinted early; experts released after the layer. Routing repeats some experts across
 * tokens so that some are already cached. */
static void decode_pattern(ds4s_handle h, const ds4s_layout *l) {
    int host = l->expert_memory == DS4S_MEM_HOST;
    ds4s_stats s0;
    s0.struct_size = sizeof s0;
    OK(ds4s_get_stats(h, &s0));
    uint64_t lookups = 0, acquired = 0;
    for (uint32_t tok = 0; tok < 12; tok++) {
        for (uint32_t layer = 0; layer < l->n_layer; layer++) {
            uint32_t ids[6];
            for (uint32_t k = 0; k < 6; k++)
                ids[k] = (tok / 3 * 5 + k * 3 + layer) % l->n_expert;
            if (layer + 1 < l->n_layer) {
                uint32_t next[6], started = 99;
                for (uint32_t k = 0; k < 6; k++)
                    next[k] = (tok / 3 * 5 + k * 3 + layer + 1) % l->n_expert;
                OK(ds4s_experts_prefetch(h, layer + 1, next, 6, &started));
                CHECK(started <= 6, "started %u", started);
                lookups += 6;
            }
            ds4s_expert_ptrs e[6];
            ds4s_lease lease = 0;
            OK(ds4s_experts_acquire(h, layer, ids, 6, -1, e, &lease));
            lookups += 6;
            acquired += 6;
            for (int k = 0; k < 6; k++) {
                uint64_t off, len;
                const int kinds[3] = {DS4S_GATE, DS4S_UP, DS4S_DOWN};
                void *ptrs[3] = {e[k].gate, e[k].up, e[k].down};
                uint64_t lens[3] = {e[k].gate_bytes, e[k].up_bytes, e[k].down_bytes};
                for (int s = 0; s < 3; s++) {
                    OK(ds4s_expert_slice(h, layer, ids[k], kinds[s], &off, &len));
                    CHECK(len == lens[s] && ptrs[s] != NULL, "slice length, address");
                    if (host)
                        same_as_file(ptrs[s], off, len, "expert slice");
                }
            }
            OK(ds4s_experts_release(h, lease));
            EXPECT(ds4s_experts_release(h, lease), DS4S_ERR_BAD_HANDLE, "not open");
        }
    }
    ds4s_stats st;
    st.struct_size = sizeof st;
    OK(ds4s_get_stats(h, &st));
    struct {
        ds4s_stats s;
        uint64_t newer;
    } big;
    memset(&big, 0xab, sizeof big);
    big.s.struct_size = sizeof big;
    OK(ds4s_get_stats(h, &big.s));
    CHECK(big.s.struct_size == sizeof big && big.s.expert_misses == st.expert_misses &&
              big.newer == 0,
          "larger stats");
    uint64_t hits = st.expert_hits + st.expert_dedup_hits - s0.expert_hits - s0.expert_dedup_hits;
    uint64_t misses = st.expert_misses - s0.expert_misses;
    /* Every acquire looks up; a prefetch stops early when every slot is pinned or loading. */
    CHECK(hits + misses >= acquired && hits + misses <= lookups, "lookups %llu + %llu of %llu",
          (unsigned long long)hits, (unsigned long long)misses, (unsigned long long)lookups);
    CHECK(hits > 0 && misses > 0, "hits %llu misses %llu", (unsigned long long)hits,
          (unsigned long long)misses);
    CHECK(st.expert_bytes_streamed - s0.expert_bytes_streamed == misses * l->expert_bytes,
          "bytes streamed");
    CHECK(st.expert_pinned_slots == 0 && st.expert_loads_in_flight == 0, "nothing held");
    printf("decode pattern: %llu expert lookups, %llu hits, %llu misses, %llu bytes streamed\n",
           (unsigned long long)lookups, (unsigned long long)hits, (unsigned long long)misses,
           (unsigned long long)(st.expert_bytes_streamed - s0.expert_bytes_streamed));
}

static void expert_errors(ds4s_handle h, ds4s_handle no_cache) {
    uint32_t ids[6] = {0, 1, 2, 3, 4, 5}, more[6] = {6, 7, 8, 9, 10, 11}, one = 12;
    ds4s_expert_ptrs e[6], f[6], g[1];
    ds4s_lease a = 0, b = 0, c = 0;
    /* 12 slots: two leases of 6 hold them all; a thirteenth expert cannot come in. */
    OK(ds4s_experts_acquire(h, 0, ids, 6, -1, e, &a));
    OK(ds4s_experts_acquire(h, 1, more, 6, -1, f, &b));
    EXPECT(ds4s_experts_acquire(h, 2, &one, 1, -1, g, &c), DS4S_ERR_CACHE_FULL, "pinned");
    OK(ds4s_experts_release(h, a));
    OK(ds4s_experts_acquire(h, 2, &one, 1, 1000, g, &c));
    OK(ds4s_experts_release(h, c));
    uint32_t bad = 16;
    EXPECT(ds4s_experts_acquire(h, 0, &bad, 1, -1, g, &c), DS4S_ERR_OUT_OF_RANGE, "expert 16");
    EXPECT(ds4s_experts_acquire(h, 9, ids, 1, -1, g, &c), DS4S_ERR_OUT_OF_RANGE, "layer 9");
    EXPECT(ds4s_experts_acquire(h, 0, NULL, 1, -1, g, &c), DS4S_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(ds4s_experts_acquire(h, 0, ids, 0, -1, g, &c), DS4S_ERR_INVALID_ARGUMENT, "k is 0");
    EXPECT(ds4s_experts_acquire(h, 0, ids, 1, -1, NULL, &c), DS4S_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(ds4s_experts_prefetch(h, 0, &bad, 1, NULL), DS4S_ERR_OUT_OF_RANGE, "expert 16");
    EXPECT(ds4s_experts_release(h, 0), DS4S_ERR_BAD_HANDLE, "never valid");
    EXPECT(ds4s_experts_acquire(no_cache, 0, ids, 1, -1, g, &c), DS4S_ERR_INVALID_ARGUMENT,
           "no expert cache");
    /* Lease b stays held: close must release it. */
    (void)b;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s MODEL MALFORMED MISSING [host|cuda|hip|auto]\n", argv[0]);
        return 2;
    }
    if (argc == 5) {
        const char *names[4] = {"auto", "host", "cuda", "hip"};
        backend = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(argv[4], names[i]) == 0)
                backend = i;
        CHECK(backend >= 0, "unknown backend %s", argv[4]);
    }
    load_file(argv[1]);
    library_calls();
    open_errors(argv[2], argv[3]);

    ds4s_handle h = open_model(argv[1], 12, 0);
    ds4s_handle plain = open_model(argv[1], 0, DS4S_OPEN_COLD | DS4S_OPEN_NO_DIRECT_IO);
    ds4s_layout l;
    layout(h, &l);
    reads(h);
    decode_pattern(h, &l);
    expert_errors(h, plain);
    {
        /* The cold, buffered handle reads the same bytes. */
        unsigned char *x = malloc(100000);
        ds4s_range one = {4097, 100000, x};
        ds4s_completion c = 0;
        OK(ds4s_read(plain, &one, 1, DS4S_MEM_HOST, &c));
        OK(ds4s_wait(plain, c, -1));
        same_as_file(x, 4097, 100000, "cold read");
        EXPECT(ds4s_wait(h, c, -1), DS4S_ERR_BAD_HANDLE, "not open"); /* another handle's */
        OK(ds4s_completion_free(plain, c));
        free(x);
    }

    /* Close with reads in flight and a lease held: everything completes, nothing leaks. */
    unsigned char *late = malloc(file_len);
    ds4s_range all = {0, file_len, late};
    ds4s_completion pending = 0;
    OK(ds4s_read(h, &all, 1, DS4S_MEM_HOST, &pending));
    OK(ds4s_close(h));
    free(late); /* never written after close returned (ASan would see a use after free) */
    ds4s_stats st;
    st.struct_size = sizeof st;
    EXPECT(ds4s_close(h), DS4S_ERR_BAD_HANDLE, "not open");
    EXPECT(ds4s_get_stats(h, &st), DS4S_ERR_BAD_HANDLE, "not open");
    EXPECT(ds4s_wait(h, pending, -1), DS4S_ERR_BAD_HANDLE, "not open");
    CHECK(ds4s_error_message(h, NULL, 0) == 0, "a closed handle keeps no message");
    OK(ds4s_close(plain));
    free(file_bytes);
    printf("abi_test: %d checks passed\n", checks);
    return 0;
}
