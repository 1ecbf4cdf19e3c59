/*
 * ds4stream.h: the C ABI of ds4-stream, the out-of-core weight streaming engine for DeepSeek V4
 * Flash (DS4) GGUF files. Library: libds4stream.so / libds4stream.a (Linux), ds4stream.dll +
 * import library (Windows). Built from the `ds4stream-capi` crate (capi/ in the repository);
 * docs/C_API.md has the worked example and the build and link lines.
 *
 * Conventions
 * - Every function returns an int status (ds4s_status): 0 is success, 1 and 2 are non-error
 *   outcomes (DS4S_PENDING, DS4S_TIMEOUT), negative values are errors. A failing call stores a
 *   message naming what and where: ds4s_last_error() (this thread) and, when the call had a
 *   valid handle, ds4s_error_message(handle, ...) (that handle's last error, any thread).
 * - Handles (ds4s_handle, ds4s_completion, ds4s_lease) are 64-bit ids, never pointers, and never
 *   reused in a process: a closed, freed, released, made-up or wrong-kind id (and 0) is detected
 *   and answered with DS4S_ERR_BAD_HANDLE, never undefined behaviour.
 * - No Rust panic crosses this boundary: an internal failure is DS4S_ERR_INTERNAL.
 * - Every struct passed in or out starts with struct_size: set it to sizeof(the struct) (the
 *   *_init functions do), so a program built against an older or newer header keeps working.
 *   The library touches exactly struct_size bytes (4 <= struct_size <= DS4S_STRUCT_SIZE_MAX,
 *   else DS4S_ERR_INVALID_ARGUMENT):
 *   - A struct it fills (ds4s_layout, ds4s_tensor, ds4s_stats): the first min(struct_size, its
 *     own size) bytes get its values; struct_size keeps the caller's value; bytes past its own
 *     size (fields of a newer header) are set to 0.
 *   - A struct it reads (ds4s_options): fields past a smaller struct_size read as 0 (their
 *     default); bytes past its own size (fields of a newer header) must be 0, else
 *     DS4S_ERR_INVALID_ARGUMENT naming the first such byte's offset (the library cannot honour
 *     an option it does not know).
 *   ds4s_options_init writes the library's whole ds4s_options: a program that may run against
 *   a newer library than its header initialises by memset(0) and struct_size = sizeof instead
 *   (the same values).
 * - Thread safety: every function may be called from any thread, concurrently, on the same or
 *   different handles, except where a function says otherwise. ds4s_close must not race other
 *   calls on the same handle (they get DS4S_ERR_BAD_HANDLE if they start after it; calls already
 *   inside finish first or see the close as DS4S_ERR_SHUTDOWN).
 *
 * Ordering with the caller's GPU work (CUDA / HIP)
 * - A read (ds4s_read) or an expert acquire completes only after our copy into the destination
 *   has finished on the device (we wait for the copy's event on our own stream before we report
 *   completion). So once ds4s_wait / ds4s_poll returned DS4S_OK, or ds4s_experts_acquire
 *   returned, the bytes are in memory: kernels the caller launches afterwards on any stream see
 *   them, with no extra synchronisation. No event handle is needed.
 * - The other direction is the caller's duty: release a lease (ds4s_experts_release) only after
 *   every kernel that reads its experts has finished (e.g. after cudaStreamSynchronize /
 *   hipStreamSynchronize or an event wait). A released slot may be overwritten by the next miss.
 */
#ifndef DS4STREAM_H
#define DS4STREAM_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && !defined(DS4S_STATIC)
#  ifdef DS4S_BUILDING
#    define DS4S_API __declspec(dllexport)
#  else
#    define DS4S_API __declspec(dllimport)
#  endif
#else
#  define DS4S_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes; ds4s_abi_version() says what the library has. */
#define DS4S_ABI_VERSION 1u

/* The largest struct_size any call accepts (a guard against an uninitialised size). */
#define DS4S_STRUCT_SIZE_MAX 4096u

typedef uint64_t ds4s_handle;     /* an open model file (0 is never valid) */
typedef uint64_t ds4s_completion; /* a batch of reads in flight (0 is never valid) */
typedef uint64_t ds4s_lease;      /* experts pinned by ds4s_experts_acquire (0 is never valid) */

/* Status codes. */
enum {
    DS4S_OK = 0,
    DS4S_PENDING = 1,                /* ds4s_poll: the reads have not finished yet */
    DS4S_TIMEOUT = 2,                /* ds4s_wait / ds4s_experts_acquire: time limit reached */
    DS4S_ERR_INVALID_ARGUMENT = -1,  /* NULL pointer, bad size, bad option, bad flag */
    DS4S_ERR_BAD_HANDLE = -2,        /* unknown, closed, freed or wrong-kind handle */
    DS4S_ERR_IO = -3,                /* the file could not be opened or read */
    DS4S_ERR_FORMAT = -4,            /* not a GGUF file, malformed, or not a DS4 layout */
    DS4S_ERR_OUT_OF_RANGE = -5,      /* byte range past the file, layer or expert too large */
    DS4S_ERR_UNSUPPORTED = -6,       /* backend not compiled in; device memory on the host backend */
    DS4S_ERR_DEVICE = -7,            /* GPU backend error, no such device */
    DS4S_ERR_CACHE_FULL = -8,        /* every expert slot is held by leases: release some */
    DS4S_ERR_BUSY = -9,              /* destination ranges of one batch overlap */
    DS4S_ERR_NO_MEMORY = -10,        /* host or device allocation failed */
    DS4S_ERR_SHUTDOWN = -11,         /* the handle was closed while the operation ran */
    DS4S_ERR_NOT_FOUND = -12,        /* no tensor of that name */
    DS4S_ERR_INTERNAL = -13          /* a bug in ds4-stream (a caught panic) */
};

/* Backends (ds4s_options.backend, ds4s_layout.backend). */
enum {
    DS4S_BACKEND_AUTO = 0, /* the first GPU backend compiled in with a device present, else host */
    DS4S_BACKEND_HOST = 1,
    DS4S_BACKEND_CUDA = 2, /* library built with the `cuda` feature */
    DS4S_BACKEND_HIP = 3   /* library built with the `hip` feature */
};

/* Memory kinds (ds4s_read's memory argument, ds4s_layout.expert_memory). */
enum {
    DS4S_MEM_HOST = 0,  /* a CPU address */
    DS4S_MEM_DEVICE = 1 /* a CUDA / HIP device address */
};

/* Routed expert tensors (ds4s_expert_slice's kind). */
enum { DS4S_GATE = 0, DS4S_UP = 1, DS4S_DOWN = 2 };

/* ds4s_options.flags */
#define DS4S_OPEN_NO_DIRECT_IO 0x1u /* buffered reads only (default: O_DIRECT / NO_BUFFERING where aligned) */
#define DS4S_OPEN_COLD 0x2u         /* always read from the disk: no page-cache probe, chunks dropped
                                       from the page cache after reading (cold benchmarks) */

/* How to open a file. Zero means "default" in every field but struct_size. */
typedef struct ds4s_options {
    uint32_t struct_size;        /* sizeof(ds4s_options) */
    uint32_t flags;              /* DS4S_OPEN_* bits; unknown bits are an error */
    uint32_t workers;            /* reader threads, each with its own file handle; 0 = 18 */
    uint32_t staging_slots;      /* pinned staging slots; 0 = 32 */
    uint64_t staging_slot_bytes; /* bytes per slot, a multiple of 4096; 0 = 4 MiB */
    int32_t backend;             /* DS4S_BACKEND_*; 0 = auto */
    int32_t device_ordinal;      /* GPU ordinal, >= 0 */
    uint32_t expert_cache_slots; /* expert cache slots (>= experts used per token); 0 = no cache */
    uint32_t reserved;           /* must be 0 */
} ds4s_options;

/* The file's DS4 layout and what the handle was opened with. */
typedef struct ds4s_layout {
    uint32_t struct_size;
    uint32_t n_layer;
    uint32_t n_expert;           /* routed experts per layer */
    uint32_t n_expert_used;      /* experts used per token (K) */
    uint32_t n_hash_layer;       /* leading layers routed by token id */
    uint32_t gate_type;          /* ggml type ids of the routed tensors (layer 0) */
    uint32_t up_type;
    uint32_t down_type;
    int32_t backend;             /* the backend in use (DS4S_BACKEND_HOST/CUDA/HIP) */
    int32_t expert_memory;       /* DS4S_MEM_HOST or _DEVICE: what acquire's pointers are */
    uint32_t expert_cache_slots; /* 0 when opened without a cache */
    uint32_t reserved;
    uint64_t n_embd;
    uint64_t expert_ff;
    uint64_t vocab;
    uint64_t file_size;
    uint64_t gate_bytes;         /* bytes of one expert's slice (layer 0; all layers of a DS4 */
    uint64_t up_bytes;           /*   file agree, ds4s_expert_slice answers per layer) */
    uint64_t down_bytes;
    uint64_t expert_bytes;       /* gate + up + down */
    uint64_t expert_slot_bytes;  /* bytes per cache slot (0 without a cache) */
} ds4s_layout;

/* One tensor of the file. */
typedef struct ds4s_tensor {
    uint32_t struct_size;
    uint32_t ggml_type;
    uint32_t n_dims;
    uint32_t reserved;
    uint64_t dims[4];   /* dims[0] innermost; unused ones are 1 */
    uint64_t offset;    /* absolute file offset */
    uint64_t nbytes;
} ds4s_tensor;

/* One byte range of the file into caller memory. */
typedef struct ds4s_range {
    uint64_t file_offset;
    uint64_t len;
    void *dst;          /* len bytes of caller memory (not freed, not touched until complete) */
} ds4s_range;

/* One acquired expert: where its three slices are. */
typedef struct ds4s_expert_ptrs {
    void *gate;         /* host or device address, see ds4s_layout.expert_memory */
    void *up;
    void *down;
    uint64_t gate_bytes;
    uint64_t up_bytes;
    uint64_t down_bytes;
    uint32_t slot;      /* cache slot (repeated ids share one) */
    uint32_t reserved;
} ds4s_expert_ptrs;

/* Counters of a handle. */
typedef struct ds4s_stats {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t expert_hits;           /* acquire / prefetch lookups found resident */
    uint64_t expert_dedup_hits;     /* ... found already loading (read once) */
    uint64_t expert_misses;         /* ... read from the file */
    uint64_t expert_evictions;
    uint64_t expert_fills_failed;
    uint64_t expert_bytes_streamed; /* bytes read into cache slots */
    uint64_t expert_loads_in_flight;
    uint64_t expert_pinned_slots;   /* slots held by leases now */
    uint64_t bytes_read;            /* every byte the engine delivered (reads and experts) */
    uint64_t requests;              /* engine requests completed */
    uint64_t failed_requests;
} ds4s_stats;

/* ---- Library ---------------------------------------------------------------------------- */

/* DS4S_ABI_VERSION of the library. Thread-safe. */
DS4S_API uint32_t ds4s_abi_version(void);

/* Fills *opts with the defaults (struct_size set, everything else 0). Thread-safe. */
DS4S_API void ds4s_options_init(ds4s_options *opts);

/* Static name of a status ("DS4S_ERR_IO"); "unknown status" for others. Thread-safe. */
DS4S_API const char *ds4s_status_name(int status);

/* This thread's last error message ("" if none): valid until this thread's next failing call.
 * Thread-safe (per thread). Never NULL. */
DS4S_API const char *ds4s_last_error(void);

/* Copies handle h's last error message into buf (NUL-terminated, truncated to cap - 1 bytes;
 * buf may be NULL when cap is 0). Returns the message's full length (0: none, or h is not an
 * open handle). Thread-safe. */
DS4S_API size_t ds4s_error_message(ds4s_handle h, char *buf, size_t cap);

/* ---- Open, layout, close ---------------------------------------------------------------- */

/* Opens the DS4 GGUF file at path (UTF-8) with opts (NULL: defaults): parses and validates its
 * header (bad files: DS4S_ERR_FORMAT, naming what and at which byte), opens the device, starts
 * the reader threads, allocates the staging ring and the expert cache. On success *out is the
 * handle. Thread-safe. */
DS4S_API int ds4s_open(const char *path, const ds4s_options *opts, ds4s_handle *out);

/* Closes h: reads in flight finish or fail with DS4S_ERR_SHUTDOWN, then every thread, buffer,
 * completion and lease of h is freed. Pointers from ds4s_experts_acquire are invalid after it;
 * caller memory is never freed (and no longer written once this returns). A second close, or
 * any later call with h, returns DS4S_ERR_BAD_HANDLE. Blocks until done. */
DS4S_API int ds4s_close(ds4s_handle h);

/* Fills *out (out->struct_size set by the caller; see Conventions for other sizes). Thread-safe. */
DS4S_API int ds4s_get_layout(ds4s_handle h, ds4s_layout *out);

/* Absolute file offset and length of expert `expert`'s slice `kind` (DS4S_GATE/UP/DOWN) in
 * `layer`. Thread-safe. */
DS4S_API int ds4s_expert_slice(ds4s_handle h, uint32_t layer, uint32_t expert, int kind,
                               uint64_t *offset, uint64_t *len);

/* Looks a tensor up by name (e.g. "blk.3.ffn_down_exps.weight"): DS4S_ERR_NOT_FOUND if absent.
 * Thread-safe. */
DS4S_API int ds4s_tensor_info(ds4s_handle h, const char *name, ds4s_tensor *out);

/* ---- Reads into caller memory ----------------------------------------------------------- */

/* Starts reading n ranges (one batch, n >= 1) into caller memory and returns at once with
 * *out, a completion to wait on or poll. memory says what every dst of the batch is:
 * DS4S_MEM_HOST (any backend; read straight into it), or DS4S_MEM_DEVICE, a device address of
 * this handle's GPU in its primary context (cuMemAlloc / hipMalloc memory; filled through our
 * pinned staging ring and copy stream; the host backend answers DS4S_ERR_UNSUPPORTED). Ranges
 * are checked first (past the file: DS4S_ERR_OUT_OF_RANGE; overlapping destinations:
 * DS4S_ERR_BUSY), and then nothing is read. The destinations must stay allocated and untouched
 * until the completion reports an outcome, is freed, or h is closed. Thread-safe. */
DS4S_API int ds4s_read(ds4s_handle h, const ds4s_range *ranges, size_t n, int memory,
                       ds4s_completion *out);

/* DS4S_PENDING while the batch runs, then its outcome: DS4S_OK when every range arrived, else
 * the first error (message in ds4s_last_error / ds4s_error_message). The outcome is sticky:
 * later polls and waits return it again. Does not block. Thread-safe. */
DS4S_API int ds4s_poll(ds4s_handle h, ds4s_completion c);

/* Waits for the batch: its outcome as ds4s_poll, or DS4S_TIMEOUT after timeout_ms
 * (negative: no limit; 0: poll). Thread-safe; concurrent waiters on one completion take turns,
 * so one may wait longer than its timeout. */
DS4S_API int ds4s_wait(ds4s_handle h, ds4s_completion c, int64_t timeout_ms);

/* Frees c; if its reads are still running, waits for them first (caller memory is never
 * written after this returns). Freeing twice: DS4S_ERR_BAD_HANDLE. Thread-safe. */
DS4S_API int ds4s_completion_free(ds4s_handle h, ds4s_completion c);

/* ---- Expert cache (needs ds4s_options.expert_cache_slots > 0) -------------------------- */

/* Makes experts ids[0..k) of layer resident and pinned: blocks until all are in cache slots
 * (misses are read now, gate and up and down of each; experts already there or already loading
 * are not read again), or timeout_ms passed (negative: no limit; then DS4S_TIMEOUT, nothing
 * pinned, the reads continue like a prefetch). On DS4S_OK, out[i] (k entries, caller-owned)
 * says where expert ids[i]'s slices are and *lease holds them: they are neither evicted nor
 * overwritten until ds4s_experts_release(lease) or ds4s_close. DS4S_ERR_CACHE_FULL when every
 * slot is held by other leases (nothing is pinned then). Thread-safe. */
DS4S_API int ds4s_experts_acquire(ds4s_handle h, uint32_t layer, const uint32_t *ids, size_t k,
                                  int64_t timeout_ms, ds4s_expert_ptrs *out, ds4s_lease *lease);

/* Releases a lease (see the ordering note at the top for GPU callers). Releasing twice:
 * DS4S_ERR_BAD_HANDLE. Thread-safe. */
DS4S_API int ds4s_experts_release(ds4s_handle h, ds4s_lease lease);

/* A hint: starts reading the experts of ids[0..k) that are neither resident nor loading,
 * pinning nothing; stops quietly when no slot can be evicted. *started (may be NULL) gets how
 * many reads it started. Thread-safe. */
DS4S_API int ds4s_experts_prefetch(ds4s_handle h, uint32_t layer, const uint32_t *ids, size_t k,
                                   uint32_t *started);

/* Fills *out (out->struct_size set by the caller; see Conventions for other sizes). Thread-safe. */
DS4S_API int ds4s_get_stats(ds4s_handle h, ds4s_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* DS4STREAM_H */
