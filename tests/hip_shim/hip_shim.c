/*
 * hip_shim.c: a stand-in for libamdhip64 that runs ds4-stream's HIP backend on an NVIDIA GPU.
 *
 * Not part of the product. It exports every hip* function src/device/hip calls, each forwarding
 * to the CUDA runtime (libcudart), so the same HIP code (its ordering, events, lifetimes and
 * error paths) runs against a real GPU where no AMD GPU is at hand. See README.md for what that
 * proves and what it cannot.
 *
 * No CUDA or HIP headers: the prototypes and values below are declared here, copied from
 * /usr/include/hip/hip_runtime_api.h (HIP 5.2) and cudarc 0.19's runtime bindings (CUDA 13).
 * Nothing is assumed equal between the two APIs: every status, flag and attribute is translated
 * through an explicit table, and anything not in a table is refused loudly (stderr) rather than
 * passed through. HIP_SHIM_TRACE=1 prints every call.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- HIP side (hip_runtime_api.h) ------------------------------------------------------ */
typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef void *hipDeviceptr_t;

enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNotInitialized = 3,
    hipErrorDeinitialized = 4,
    hipErrorInvalidDevicePointer = 17,
    hipErrorInvalidMemcpyDirection = 21,
    hipErrorInsufficientDriver = 35,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidContext = 201,
    hipErrorMapFailed = 205,
    hipErrorNoBinaryForGpu = 209,
    hipErrorOperatingSystem = 304,
    hipErrorInvalidHandle = 400,
    hipErrorIllegalState = 401,
    hipErrorNotFound = 500,
    hipErrorNotReady = 600,
    hipErrorIllegalAddress = 700,
    hipErrorContextIsDestroyed = 709,
    hipErrorHostMemoryAlreadyRegistered = 712,
    hipErrorHostMemoryNotRegistered = 713,
    hipErrorLaunchFailure = 719,
    hipErrorNotSupported = 801,
    hipErrorUnknown = 999,
};

/* hipDeviceAttribute_t values we query. */
#define hipDeviceAttributeCanMapHostMemory 3
#define hipDeviceAttributeIntegrated 16

#define hipStreamNonBlocking 0x1u
#define hipEventBlockingSync 0x1u
#define hipEventDisableTiming 0x2u
#define hipHostMallocPortable 0x1u
#define hipHostMallocMapped 0x2u
#define hipHostRegisterPortable 0x1u
#define hipHostRegisterMapped 0x2u

/* ---- CUDA side (cudarc runtime sys, cuda-13000) ---------------------------------------- */
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;

enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorStubLibrary = 34,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorDeviceUninitialized = 201,
    cudaErrorMapBufferObjectFailed = 205,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorOperatingSystem = 304,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorSymbolNotFound = 500,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorContextIsDestroyed = 709,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorSystemDriverMismatch = 803,
    cudaErrorUnknown = 999,
};

#define cudaDevAttrIntegrated 18
#define cudaDevAttrCanMapHostMemory 19
#define cudaStreamNonBlocking 0x1u
#define cudaEventBlockingSync 0x1u
#define cudaEventDisableTiming 0x2u
#define cudaHostAllocPortable 0x1u
#define cudaHostAllocMapped 0x2u
#define cudaHostRegisterPortable 0x1u
#define cudaHostRegisterMapped 0x2u
#define cudaMemcpyHostToDevice 1
#define cudaMemcpyDeviceToHost 2

extern cudaError_t cudaGetDeviceCount(int *count);
extern cudaError_t cudaGetDevice(int *device);
extern cudaError_t cudaSetDevice(int device);
extern cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device);
extern cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
extern const char *cudaGetErrorName(cudaError_t error);
extern cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
extern cudaError_t cudaStreamSynchronize(cudaStream_t stream);
extern cudaError_t cudaStreamDestroy(cudaStream_t stream);
extern cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
extern cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
extern cudaError_t cudaEventSynchronize(cudaEvent_t event);
extern cudaError_t cudaEventDestroy(cudaEvent_t event);
extern cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags);
extern cudaError_t cudaFreeHost(void *ptr);
extern cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
extern cudaError_t cudaHostUnregister(void *ptr);
extern cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned int flags);
extern cudaError_t cudaMalloc(void **ptr, size_t size);
extern cudaError_t cudaFree(void *ptr);
extern cudaError_t cudaMemsetAsync(void *dst, int value, size_t len, cudaStream_t stream);
extern cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t len, int kind,
                                   cudaStream_t stream);
extern cudaError_t cudaMemcpy(void *dst, const void *src, size_t len, int kind);

/* ---- translation tables ------------------------------------------------------------------ */
static const struct {
    cudaError_t cuda;
    hipError_t hip;
} status_map[] = {
    {cudaSuccess, hipSuccess},
    {cudaErrorInvalidValue, hipErrorInvalidValue},
    {cudaErrorMemoryAllocation, hipErrorOutOfMemory},
    {cudaErrorInitializationError, hipErrorNotInitialized},
    {cudaErrorCudartUnloading, hipErrorDeinitialized},
    {cudaErrorInvalidDevicePointer, hipErrorInvalidDevicePointer},
    {cudaErrorInvalidMemcpyDirection, hipErrorInvalidMemcpyDirection},
    {cudaErrorStubLibrary, hipErrorInsufficientDriver},
    {cudaErrorInsufficientDriver, hipErrorInsufficientDriver},
    {cudaErrorSystemDriverMismatch, hipErrorInsufficientDriver},
    {cudaErrorNoDevice, hipErrorNoDevice},
    {cudaErrorInvalidDevice, hipErrorInvalidDevice},
    {cudaErrorDeviceUninitialized, hipErrorInvalidContext},
    {cudaErrorMapBufferObjectFailed, hipErrorMapFailed},
    {cudaErrorNoKernelImageForDevice, hipErrorNoBinaryForGpu},
    {cudaErrorOperatingSystem, hipErrorOperatingSystem},
    {cudaErrorInvalidResourceHandle, hipErrorInvalidHandle},
    {cudaErrorIllegalState, hipErrorIllegalState},
    {cudaErrorSymbolNotFound, hipErrorNotFound},
    {cudaErrorNotReady, hipErrorNotReady},
    {cudaErrorIllegalAddress, hipErrorIllegalAddress},
    {cudaErrorContextIsDestroyed, hipErrorContextIsDestroyed},
    {cudaErrorHostMemoryAlreadyRegistered, hipErrorHostMemoryAlreadyRegistered},
    {cudaErrorHostMemoryNotRegistered, hipErrorHostMemoryNotRegistered},
    {cudaErrorLaunchFailure, hipErrorLaunchFailure},
    {cudaErrorNotSupported, hipErrorNotSupported},
    {cudaErrorUnknown, hipErrorUnknown},
};

/* Names and texts of the HIP statuses the shim can return (texts as ROCm 6 words them). */
static const struct {
    hipError_t code;
    const char *name;
    const char *text;
} hip_errors[] = {
    {hipSuccess, "hipSuccess", "no error"},
    {hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
    {hipErrorDeinitialized, "hipErrorDeinitialized", "driver shutting down"},
    {hipErrorInvalidDevicePointer, "hipErrorInvalidDevicePointer", "invalid device pointer"},
    {hipErrorInvalidMemcpyDirection, "hipErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {hipErrorInsufficientDriver, "hipErrorInsufficientDriver",
     "driver version is insufficient for runtime version"},
    {hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
    {hipErrorInvalidContext, "hipErrorInvalidContext", "invalid device context"},
    {hipErrorMapFailed, "hipErrorMapFailed", "mapping of buffer object failed"},
    {hipErrorNoBinaryForGpu, "hipErrorNoBinaryForGpu", "no kernel image is available for execution on the device"},
    {hipErrorOperatingSystem, "hipErrorOperatingSystem", "OS call failed or operation not supported on this OS"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
    {hipErrorIllegalState, "hipErrorIllegalState", "the operation cannot be performed in the present state"},
    {hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
    {hipErrorNotReady, "hipErrorNotReady", "device not ready"},
    {hipErrorIllegalAddress, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
    {hipErrorContextIsDestroyed, "hipErrorContextIsDestroyed", "context is destroyed"},
    {hipErrorHostMemoryAlreadyRegistered, "hipErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {hipErrorHostMemoryNotRegistered, "hipErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {hipErrorLaunchFailure, "hipErrorLaunchFailure", "unspecified launch failure"},
    {hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
    {hipErrorUnknown, "hipErrorUnknown", "unknown error"},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int tracing(void) {
    static int t = -1;
    if (t < 0) {
        const char *e = getenv("HIP_SHIM_TRACE");
        t = e != NULL && e[0] == '1';
    }
    return t;
}

/* Translates a CUDA status; one that has no HIP twin in the table becomes hipErrorUnknown,
 * said on stderr with CUDA's own name so a GPU run shows what happened. */
static hipError_t tr(const char *call, cudaError_t e) {
    hipError_t h = hipErrorUnknown;
    int found = 0;
    for (size_t i = 0; i < COUNT(status_map); i++) {
        if (status_map[i].cuda == e) {
            h = status_map[i].hip;
            found = 1;
            break;
        }
    }
    if (!found) {
        const char *n = cudaGetErrorName(e);
        fprintf(stderr, "hip_shim: %s: CUDA status %d (%s) has no HIP twin: hipErrorUnknown\n",
                call, e, n ? n : "?");
    }
    if (tracing()) fprintf(stderr, "hip_shim: %s -> %d (cuda %d)\n", call, h, e);
    return h;
}

/* Rejects flag bits outside `known`: a flag we do not translate must not pass silently. */
static int bad_flags(const char *call, unsigned int flags, unsigned int known) {
    if ((flags & ~known) == 0) return 0;
    fprintf(stderr, "hip_shim: %s: flags 0x%x not translated: hipErrorInvalidValue\n", call,
            flags);
    return 1;
}

static unsigned int map_flags(unsigned int flags, const unsigned int (*pairs)[2], size_t n) {
    unsigned int out = 0;
    for (size_t i = 0; i < n; i++)
        if (flags & pairs[i][0]) out |= pairs[i][1];
    return out;
}

/* ---- the exported HIP API ---------------------------------------------------------------- */
const char *hipGetErrorName(hipError_t e) {
    for (size_t i = 0; i < COUNT(hip_errors); i++)
        if (hip_errors[i].code == e) return hip_errors[i].name;
    return "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t e) {
    for (size_t i = 0; i < COUNT(hip_errors); i++)
        if (hip_errors[i].code == e) return hip_errors[i].text;
    return "unknown error";
}

hipError_t hipGetDeviceCount(int *count) {
    return tr("hipGetDeviceCount", cudaGetDeviceCount(count));
}

hipError_t hipGetDevice(int *device) { return tr("hipGetDevice", cudaGetDevice(device)); }

hipError_t hipSetDevice(int device) { return tr("hipSetDevice", cudaSetDevice(device)); }

hipError_t hipDeviceGetAttribute(int *value, int attr, int device) {
    int cuda_attr;
    switch (attr) {
    case hipDeviceAttributeCanMapHostMemory: cuda_attr = cudaDevAttrCanMapHostMemory; break;
    case hipDeviceAttributeIntegrated: cuda_attr = cudaDevAttrIntegrated; break;
    default:
        fprintf(stderr, "hip_shim: hipDeviceGetAttribute: attribute %d not translated\n", attr);
        return hipErrorInvalidValue;
    }
    return tr("hipDeviceGetAttribute", cudaDeviceGetAttribute(value, cuda_attr, device));
}

/* The CUDA runtime has no name call outside cudaDeviceProp (a struct whose layout changes
 * between releases), so the name comes from the driver API, opened here. */
hipError_t hipDeviceGetName(char *name, int len, int device) {
    if (name == NULL || len <= 0) return hipErrorInvalidValue;
    int (*get)(int *, int) = NULL;
    int (*get_name)(char *, int, int) = NULL;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda != NULL) {
        *(void **)&get = dlsym(cuda, "cuDeviceGet");
        *(void **)&get_name = dlsym(cuda, "cuDeviceGetName");
    }
    int dev = 0;
    if (get == NULL || get_name == NULL || get(&dev, device) != 0 ||
        get_name(name, len, dev) != 0)
        snprintf(name, (size_t)len, "CUDA device %d", device);
    size_t n = strlen(name);
    snprintf(name + n, (size_t)len - n, " via hip_shim");
    if (cuda != NULL) dlclose(cuda);
    return hipSuccess;
}

hipError_t hipMemGetInfo(size_t *free, size_t *total) {
    return tr("hipMemGetInfo", cudaMemGetInfo(free, total));
}

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags) {
    static const unsigned int pairs[][2] = {{hipStreamNonBlocking, cudaStreamNonBlocking}};
    if (bad_flags("hipStreamCreateWithFlags", flags, hipStreamNonBlocking))
        return hipErrorInvalidValue;
    return tr("hipStreamCreateWithFlags",
              cudaStreamCreateWithFlags(stream, map_flags(flags, pairs, COUNT(pairs))));
}

hipError_t hipStreamSynchronize(hipStream_t s) {
    return tr("hipStreamSynchronize", cudaStreamSynchronize(s));
}

hipError_t hipStreamDestroy(hipStream_t s) { return tr("hipStreamDestroy", cudaStreamDestroy(s)); }

hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned int flags) {
    static const unsigned int pairs[][2] = {{hipEventBlockingSync, cudaEventBlockingSync},
                                            {hipEventDisableTiming, cudaEventDisableTiming}};
    if (bad_flags("hipEventCreateWithFlags", flags, hipEventBlockingSync | hipEventDisableTiming))
        return hipErrorInvalidValue;
    return tr("hipEventCreateWithFlags",
              cudaEventCreateWithFlags(event, map_flags(flags, pairs, COUNT(pairs))));
}

hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
    return tr("hipEventRecord", cudaEventRecord(e, s));
}

hipError_t hipEventSynchronize(hipEvent_t e) {
    return tr("hipEventSynchronize", cudaEventSynchronize(e));
}

hipError_t hipEventDestroy(hipEvent_t e) { return tr("hipEventDestroy", cudaEventDestroy(e)); }

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags) {
    static const unsigned int pairs[][2] = {{hipHostMallocPortable, cudaHostAllocPortable},
                                            {hipHostMallocMapped, cudaHostAllocMapped}};
    if (bad_flags("hipHostMalloc", flags, hipHostMallocPortable | hipHostMallocMapped))
        return hipErrorInvalidValue;
    return tr("hipHostMalloc", cudaHostAlloc(ptr, size, map_flags(flags, pairs, COUNT(pairs))));
}

hipError_t hipHostFree(void *ptr) { return tr("hipHostFree", cudaFreeHost(ptr)); }

hipError_t hipHostRegister(void *ptr, size_t size, unsigned int flags) {
    static const unsigned int pairs[][2] = {{hipHostRegisterPortable, cudaHostRegisterPortable},
                                            {hipHostRegisterMapped, cudaHostRegisterMapped}};
    if (bad_flags("hipHostRegister", flags, hipHostRegisterPortable | hipHostRegisterMapped))
        return hipErrorInvalidValue;
    return tr("hipHostRegister",
              cudaHostRegister(ptr, size, map_flags(flags, pairs, COUNT(pairs))));
}

hipError_t hipHostUnregister(void *ptr) {
    return tr("hipHostUnregister", cudaHostUnregister(ptr));
}

hipError_t hipHostGetDevicePointer(void **dev, void *host, unsigned int flags) {
    if (bad_flags("hipHostGetDevicePointer", flags, 0)) return hipErrorInvalidValue;
    return tr("hipHostGetDevicePointer", cudaHostGetDevicePointer(dev, host, 0));
}

hipError_t hipMalloc(void **ptr, size_t size) { return tr("hipMalloc", cudaMalloc(ptr, size)); }

hipError_t hipFree(void *ptr) { return tr("hipFree", cudaFree(ptr)); }

hipError_t hipMemsetAsync(void *dst, int value, size_t len, hipStream_t s) {
    return tr("hipMemsetAsync", cudaMemsetAsync(dst, value, len, s));
}

hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void *src, size_t len, hipStream_t s) {
    return tr("hipMemcpyHtoDAsync", cudaMemcpyAsync(dst, src, len, cudaMemcpyHostToDevice, s));
}

/* Synchronous, like HIP's: returns once the bytes are in host memory. */
hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t len) {
    return tr("hipMemcpyDtoH", cudaMemcpy(dst, src, len, cudaMemcpyDeviceToHost));
}
