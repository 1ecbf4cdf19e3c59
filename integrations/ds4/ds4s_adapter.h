/*
 * ds4s_adapter.h: the DS4 C engine's side of ds4-stream (integrations/ds4/README.md).
 *
 * The DS4 engine (antirez/ds4 at 80ebbc3) is patched at build time to call these functions;
 * everything they do lives here and in ds4s_adapter.c / ds4s_cuda.inc, over the public C ABI
 * (include/ds4stream.h). One ds4-stream handle per model file descriptor DS4 registers with its
 * GPU backend; byte ranges of that file go to device (or host) memory through ds4s_read, so no
 * routed-expert byte is read by DS4's own pread, staging or mmap-backed copies.
 *
 * Configuration (read once, at the first attach):
 *   DS4_STREAM=stock          the stock DS4 path, untouched (for side-by-side runs); also "off"
 *   DS4_STREAM_WORKERS=N      reader threads (default: ds4-stream's 18)
 *   DS4_STREAM_NO_DIRECT=1    buffered reads only (default: O_DIRECT / NO_BUFFERING where aligned)
 *   DS4_STREAM_VERBOSE=1      one line per batch on stderr
 * At detach a one-line summary goes to stderr: bytes, batches, time waited, GB/s.
 */
#ifndef DS4S_ADAPTER_H
#define DS4S_ADAPTER_H

#include <stddef.h>
#include <stdint.h>

#include "ds4stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 unless DS4_STREAM says "stock" / "off". */
int ds4sa_enabled(void);

/* Opens (once per fd) a ds4-stream handle on the file behind fd, on `backend`
 * (DS4S_BACKEND_CUDA / _HIP / _HOST), and records that `map` (DS4's mapping of that file, may be
 * NULL) is served by it. Returns 1 on success or when the adapter is disabled, 0 on failure
 * (message printed: the adapter never falls back silently). */
int ds4sa_attach(int fd, const void *map, uint64_t map_size, int backend);

/* 1 when `map` (non-NULL) belongs to an attached file: its bytes must come through ds4sa_read. */
int ds4sa_attached(const void *map);

/* Reads n ranges of the file behind `map` (offsets are file offsets) into memory of kind
 * `memory` (DS4S_MEM_DEVICE / _HOST), as one batch, in the order given, and waits for them.
 * Returns 1 on success; 0 after printing "ds4: ds4-stream ... <what>: <why>". */
int ds4sa_read(const void *map, const ds4s_range *ranges, size_t n, int memory, const char *what);

/* The same, split in two so the caller can work while the reads run: ds4sa_begin starts the
 * batch (1, *out set; 0 after printing why), ds4sa_end waits for it, frees it and counts it
 * (1 ok; 0 after printing why). Every begun batch must be ended. */
int ds4sa_begin(const void *map, const ds4s_range *ranges, size_t n, int memory,
                ds4s_completion *out);
int ds4sa_end(const void *map, ds4s_completion c, const ds4s_range *ranges, size_t n,
              const char *what);

/* One range to device memory (what: a label for errors). */
int ds4sa_read_device(const void *map, void *dst, uint64_t offset, uint64_t len, const char *what);

/* The handle of an attached map (0 if none): for layout queries. */
ds4s_handle ds4sa_handle(const void *map);

/* Closes every handle and prints the summary. Idempotent. */
void ds4sa_detach_all(void);

/* Counters since the first attach. */
typedef struct ds4sa_counters {
    uint64_t batches;
    uint64_t ranges;
    uint64_t bytes;
    uint64_t wait_ns; /* summed time from each batch's start to the end of its wait */
} ds4sa_counters;
void ds4sa_get_counters(ds4sa_counters *out);

#ifdef __cplusplus
}
#endif

#endif /* DS4S_ADAPTER_H */
