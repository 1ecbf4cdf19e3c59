/*
 * hip_shim.c: a stand-in for libamdhip64 that runs ds4-stream's HIP backend on an NVIDIA GPU.
 *
 * Not part of the product. It exports every hip* function src/device/hip calls, each forwarding
 * to the CUDA runtime (libcudart), so the same HIP code (its ordering, events, lifetimes and
 * error paths) runs against a real GPU where no AMD GPU is at hand. See README.md for what that
 * proves and what it cannot. The module calls (hipModule*) forward to the CUDA driver API and
 * the hiprtc* calls to NVRTC, both opened with dlopen: hiprtc* compiles the kernel source to PTX
 * for the current device, which hipModuleLoadData hands to the driver.
 *
 * No CUDA or HIP headers: the prototypes and values below are declared here, copied from
 * /usr/include/hip/hip_runtime_api.h and hiprtc.h (HIP 5.2), cudarc 0.19's runtime bindings
 * (CUDA 13), and CUDA's cuda.h / nvrtc.h for the driver and NVRTC.
 * Nothing is assumed equal between the two APIs: every status, flag and attribute is translated
 * through an explicit table, and anything not in a table is refused loudly (stderr) rather than
 * passed through. HIP_SHIM_TRACE=1 prints every call.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- HIP side (hip_runtime_api.h) ------------------------------------------------------ */
typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef void *hipDeviceptr_t;
typedef void *hipModule_t;   /* struct ihipModule_t * */
typedef void *hipFunction_t; /* struct ihipModuleSymbol_t * */

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
    hipErrorInvalidImage = 200,
    hipErrorInvalidContext = 201,
    hipErrorMapFailed = 205,
    hipErrorNoBinaryForGpu = 209,
    hipErrorInvalidKernelFile = 218,
    hipErrorInvalidSource = 300,
    hipErrorFileNotFound = 301,
    hipErrorOperatingSystem = 304,
    hipErrorInvalidHandle = 400,
    hipErrorIllegalState = 401,
    hipErrorNotFound = 500,
    hipErrorNotReady = 600,
    hipErrorIllegalAddress = 700,
    hipErrorLaunchOutOfResources = 701,
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

/* hiprtcResult (hiprtc.h); hiprtcProgram is an opaque pointer (struct _hiprtcProgram *). */
typedef int hiprtcResult;
typedef void *hiprtcProgram;

enum {
    HIPRTC_SUCCESS = 0,
    HIPRTC_ERROR_OUT_OF_MEMORY = 1,
    HIPRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    HIPRTC_ERROR_INVALID_INPUT = 3,
    HIPRTC_ERROR_INVALID_PROGRAM = 4,
    HIPRTC_ERROR_INVALID_OPTION = 5,
    HIPRTC_ERROR_COMPILATION = 6,
    HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
    HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8,
    HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9,
    HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10,
    HIPRTC_ERROR_INTERNAL_ERROR = 11,
};

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
#define cudaDevAttrComputeCapabilityMajor 75
#define cudaDevAttrComputeCapabilityMinor 76
#define cudaStreamNonBlocking 0x1u
#define cudaEventBlockingSync 0x1u
#define cudaEventDisableTiming 0x2u
#define cudaHostAllocPortable 0x1u
#define cudaHostAllocMapped 0x2u
#define cudaHostRegisterPortable 0x1u
#define cudaHostRegisterMapped 0x2u
#define cudaMemcpyHostToDevice 1
#define cudaMemcpyDeviceToHost 2
#define cudaMemcpyDefault 4

extern cudaError_t cudaGetDeviceCount(int *count);
extern cudaError_t cudaGetDevice(int *device);
extern cudaError_t cudaSetDevice(int device);
extern cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device);
extern cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
extern const char *cudaGetErrorName(cudaError_t error);
extern cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
extern cudaError_t cudaStreamSynchronize(cudaStream_t stream);
extern cudaError_t cudaStreamDestroy(cudaStream_t stream);
extern cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
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

/* ---- CUDA driver API (cuda.h), opened with dlopen("libcuda.so.1") ------------------------ */
typedef int CUresult;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream; /* a cudaStream_t is a CUstream: streams pass straight through */

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_SOURCE = 300,
    CUDA_ERROR_FILE_NOT_FOUND = 301,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

static struct {
    CUresult (*ctx_get_current)(CUcontext *ctx);
    CUresult (*module_load_data)(CUmodule *module, const void *image);
    CUresult (*module_get_function)(CUfunction *f, CUmodule module, const char *name);
    CUresult (*launch_kernel)(CUfunction f, unsigned int gridX, unsigned int gridY,
                              unsigned int gridZ, unsigned int blockX, unsigned int blockY,
                              unsigned int blockZ, unsigned int sharedMemBytes, CUstream stream,
                              void **kernelParams, void **extra);
    CUresult (*module_unload)(CUmodule module);
    CUresult (*get_error_name)(CUresult error, const char **name); /* optional */
    int loaded;
} cu;

/* ---- NVRTC (nvrtc.h), opened with dlopen ------------------------------------------------- */
typedef int nvrtcResult;
typedef void *nvrtcProgram;

enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
    NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION = 8,
    NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION = 9,
    NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10,
    NVRTC_ERROR_INTERNAL_ERROR = 11,
};

static struct {
    nvrtcResult (*create_program)(nvrtcProgram *prog, const char *src, const char *name,
                                  int numHeaders, const char *const *headers,
                                  const char *const *includeNames);
    nvrtcResult (*compile_program)(nvrtcProgram prog, int numOptions,
                                   const char *const *options);
    nvrtcResult (*get_program_log_size)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*get_program_log)(nvrtcProgram prog, char *log);
    nvrtcResult (*get_ptx_size)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*get_ptx)(nvrtcProgram prog, char *ptx);
    nvrtcResult (*destroy_program)(nvrtcProgram *prog);
    nvrtcResult (*version)(int *major, int *minor);
    const char *(*get_error_string)(nvrtcResult result); /* optional */
    int loaded;
} nvrtc;

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

/* CUresult -> hipError_t, for the module calls (hipErrorInvalidKernelFile is HIP's twin of
 * CUDA_ERROR_INVALID_PTX, as hip_runtime_api.h says). */
static const struct {
    CUresult cu;
    hipError_t hip;
} cu_status_map[] = {
    {CUDA_SUCCESS, hipSuccess},
    {CUDA_ERROR_INVALID_VALUE, hipErrorInvalidValue},
    {CUDA_ERROR_OUT_OF_MEMORY, hipErrorOutOfMemory},
    {CUDA_ERROR_NOT_INITIALIZED, hipErrorNotInitialized},
    {CUDA_ERROR_DEINITIALIZED, hipErrorDeinitialized},
    {CUDA_ERROR_NO_DEVICE, hipErrorNoDevice},
    {CUDA_ERROR_INVALID_DEVICE, hipErrorInvalidDevice},
    {CUDA_ERROR_INVALID_IMAGE, hipErrorInvalidImage},
    {CUDA_ERROR_INVALID_CONTEXT, hipErrorInvalidContext},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, hipErrorNoBinaryForGpu},
    {CUDA_ERROR_INVALID_PTX, hipErrorInvalidKernelFile},
    {CUDA_ERROR_INVALID_SOURCE, hipErrorInvalidSource},
    {CUDA_ERROR_FILE_NOT_FOUND, hipErrorFileNotFound},
    {CUDA_ERROR_INVALID_HANDLE, hipErrorInvalidHandle},
    {CUDA_ERROR_NOT_FOUND, hipErrorNotFound},
    {CUDA_ERROR_NOT_READY, hipErrorNotReady},
    {CUDA_ERROR_ILLEGAL_ADDRESS, hipErrorIllegalAddress},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, hipErrorLaunchOutOfResources},
    {CUDA_ERROR_LAUNCH_FAILED, hipErrorLaunchFailure},
    {CUDA_ERROR_NOT_SUPPORTED, hipErrorNotSupported},
    {CUDA_ERROR_UNKNOWN, hipErrorUnknown},
};

/* nvrtcResult -> hiprtcResult. The numbering is the same for 0..11 today; the table still
 * says so one value at a time, and newer NVRTC codes (12 and up) are not in it. */
static const struct {
    nvrtcResult nv;
    hiprtcResult hip;
} nvrtc_status_map[] = {
    {NVRTC_SUCCESS, HIPRTC_SUCCESS},
    {NVRTC_ERROR_OUT_OF_MEMORY, HIPRTC_ERROR_OUT_OF_MEMORY},
    {NVRTC_ERROR_PROGRAM_CREATION_FAILURE, HIPRTC_ERROR_PROGRAM_CREATION_FAILURE},
    {NVRTC_ERROR_INVALID_INPUT, HIPRTC_ERROR_INVALID_INPUT},
    {NVRTC_ERROR_INVALID_PROGRAM, HIPRTC_ERROR_INVALID_PROGRAM},
    {NVRTC_ERROR_INVALID_OPTION, HIPRTC_ERROR_INVALID_OPTION},
    {NVRTC_ERROR_COMPILATION, HIPRTC_ERROR_COMPILATION},
    {NVRTC_ERROR_BUILTIN_OPERATION_FAILURE, HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE},
    {NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION,
     HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION},
    {NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION,
     HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION},
    {NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID, HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID},
    {NVRTC_ERROR_INTERNAL_ERROR, HIPRTC_ERROR_INTERNAL_ERROR},
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
    {hipErrorInvalidImage, "hipErrorInvalidImage", "device kernel image is invalid"},
    {hipErrorInvalidContext, "hipErrorInvalidContext", "invalid device context"},
    {hipErrorMapFailed, "hipErrorMapFailed", "mapping of buffer object failed"},
    {hipErrorNoBinaryForGpu, "hipErrorNoBinaryForGpu", "no kernel image is available for execution on the device"},
    {hipErrorInvalidKernelFile, "hipErrorInvalidKernelFile", "invalid kernel file"},
    {hipErrorInvalidSource, "hipErrorInvalidSource", "device kernel image is invalid"},
    {hipErrorFileNotFound, "hipErrorFileNotFound", "file not found"},
    {hipErrorOperatingSystem, "hipErrorOperatingSystem", "OS call failed or operation not supported on this OS"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
    {hipErrorIllegalState, "hipErrorIllegalState", "the operation cannot be performed in the present state"},
    {hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
    {hipErrorNotReady, "hipErrorNotReady", "device not ready"},
    {hipErrorIllegalAddress, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
    {hipErrorLaunchOutOfResources, "hipErrorLaunchOutOfResources",
     "too many resources requested for launch"},
    {hipErrorContextIsDestroyed, "hipErrorContextIsDestroyed", "context is destroyed"},
    {hipErrorHostMemoryAlreadyRegistered, "hipErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {hipErrorHostMemoryNotRegistered, "hipErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {hipErrorLaunchFailure, "hipErrorLaunchFailure", "unspecified launch failure"},
    {hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
    {hipErrorUnknown, "hipErrorUnknown", "unknown error"},
};

/* hiprtcGetErrorString's texts: like AMD's, the names of the codes. */
static const struct {
    hiprtcResult code;
    const char *name;
} hiprtc_errors[] = {
    {HIPRTC_SUCCESS, "HIPRTC_SUCCESS"},
    {HIPRTC_ERROR_OUT_OF_MEMORY, "HIPRTC_ERROR_OUT_OF_MEMORY"},
    {HIPRTC_ERROR_PROGRAM_CREATION_FAILURE, "HIPRTC_ERROR_PROGRAM_CREATION_FAILURE"},
    {HIPRTC_ERROR_INVALID_INPUT, "HIPRTC_ERROR_INVALID_INPUT"},
    {HIPRTC_ERROR_INVALID_PROGRAM, "HIPRTC_ERROR_INVALID_PROGRAM"},
    {HIPRTC_ERROR_INVALID_OPTION, "HIPRTC_ERROR_INVALID_OPTION"},
    {HIPRTC_ERROR_COMPILATION, "HIPRTC_ERROR_COMPILATION"},
    {HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE, "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE"},
    {HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION,
     "HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION"},
    {HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION,
     "HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION"},
    {HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID, "HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID"},
    {HIPRTC_ERROR_INTERNAL_ERROR, "HIPRTC_ERROR_INTERNAL_ERROR"},
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

/* Fills a function-pointer slot from dlsym; a missing required symbol is said on stderr. */
static int load_sym(void *lib, const char *lib_name, const char *name, void *slot, int required) {
    void *p = dlsym(lib, name);
    *(void **)slot = p;
    if (p != NULL || !required) return 1;
    fprintf(stderr, "hip_shim: %s has no %s\n", lib_name, name);
    return 0;
}

/* The driver API, opened once (never closed: module and function handles outlive any call). */
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void load_cu(void) {
    const char *lib_name = "libcuda.so.1";
    void *lib = dlopen(lib_name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *err = dlerror();
        fprintf(stderr, "hip_shim: cannot open %s: %s\n", lib_name, err ? err : "?");
        return;
    }
    int ok = load_sym(lib, lib_name, "cuCtxGetCurrent", &cu.ctx_get_current, 1);
    ok = load_sym(lib, lib_name, "cuModuleLoadData", &cu.module_load_data, 1) && ok;
    ok = load_sym(lib, lib_name, "cuModuleGetFunction", &cu.module_get_function, 1) && ok;
    ok = load_sym(lib, lib_name, "cuLaunchKernel", &cu.launch_kernel, 1) && ok;
    ok = load_sym(lib, lib_name, "cuModuleUnload", &cu.module_unload, 1) && ok;
    load_sym(lib, lib_name, "cuGetErrorName", &cu.get_error_name, 0);
    cu.loaded = ok;
}

/* A missing libcuda.so.1 or symbol makes every module call fail with hipErrorNotInitialized,
 * said on stderr each time (the first time also says what was missing). */
static int cu_ready(const char *call) {
    pthread_once(&cu_once, load_cu);
    if (cu.loaded) return 1;
    fprintf(stderr, "hip_shim: %s: no CUDA driver API (libcuda.so.1): hipErrorNotInitialized\n",
            call);
    return 0;
}

/* Translates a driver status, like tr() does a runtime one. */
static hipError_t tr_cu(const char *call, CUresult e) {
    hipError_t h = hipErrorUnknown;
    int found = 0;
    for (size_t i = 0; i < COUNT(cu_status_map); i++) {
        if (cu_status_map[i].cu == e) {
            h = cu_status_map[i].hip;
            found = 1;
            break;
        }
    }
    if (!found) {
        const char *n = NULL;
        if (cu.get_error_name == NULL || cu.get_error_name(e, &n) != CUDA_SUCCESS) n = NULL;
        fprintf(stderr,
                "hip_shim: %s: CUDA driver status %d (%s) has no HIP twin: hipErrorUnknown\n",
                call, e, n ? n : "?");
    }
    if (tracing()) fprintf(stderr, "hip_shim: %s -> %d (cu %d)\n", call, h, e);
    return h;
}

/* The driver's module calls act on the calling thread's current context, which the runtime
 * makes current only on its own calls. cudaSetDevice makes the device's primary context (the
 * one the runtime, so every other hip* call here, uses) current on this thread in CUDA 12+,
 * and cudaFree(NULL) forces its creation. */
static hipError_t bind_primary_context(const char *call) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaFree(NULL);
    return tr(call, e);
}

/* HIP has no contexts: a thread works on its current device (device 0 until hipSetDevice).
 * The same here for the driver calls: a thread with no current context gets the primary one
 * of the runtime's current device. */
static hipError_t need_context(const char *call) {
    CUcontext ctx = NULL;
    CUresult r = cu.ctx_get_current(&ctx);
    if (r != CUDA_SUCCESS) return tr_cu(call, r);
    if (ctx != NULL) return hipSuccess;
    if (tracing())
        fprintf(stderr, "hip_shim: %s: no current context: binding the primary one\n", call);
    return bind_primary_context(call);
}

/* NVRTC, opened once: build.sh's pick first (by path, matching the CUDA runtime's major
 * version), then the usual sonames. */
static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;

static void load_nvrtc(void) {
    static const char *const names[] = {
#ifdef HIP_SHIM_NVRTC
        HIP_SHIM_NVRTC,
#endif
        "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    void *lib = NULL;
    const char *lib_name = NULL;
    for (size_t i = 0; i < COUNT(names) && lib == NULL; i++) {
        lib_name = names[i];
        lib = dlopen(lib_name, RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == NULL) {
        const char *err = dlerror();
        fprintf(stderr, "hip_shim: cannot open NVRTC, tried:");
        for (size_t i = 0; i < COUNT(names); i++) fprintf(stderr, " %s", names[i]);
        fprintf(stderr, " (last: %s)\n", err ? err : "?");
        return;
    }
    if (tracing()) fprintf(stderr, "hip_shim: hiprtc* forward to %s\n", lib_name);
    int ok = load_sym(lib, lib_name, "nvrtcCreateProgram", &nvrtc.create_program, 1);
    ok = load_sym(lib, lib_name, "nvrtcCompileProgram", &nvrtc.compile_program, 1) && ok;
    ok = load_sym(lib, lib_name, "nvrtcGetProgramLogSize", &nvrtc.get_program_log_size, 1) && ok;
    ok = load_sym(lib, lib_name, "nvrtcGetProgramLog", &nvrtc.get_program_log, 1) && ok;
    ok = load_sym(lib, lib_name, "nvrtcGetPTXSize", &nvrtc.get_ptx_size, 1) && ok;
    ok = load_sym(lib, lib_name, "nvrtcGetPTX", &nvrtc.get_ptx, 1) && ok;
    ok = load_sym(lib, lib_name, "nvrtcDestroyProgram", &nvrtc.destroy_program, 1) && ok;
    ok = load_sym(lib, lib_name, "nvrtcVersion", &nvrtc.version, 1) && ok;
    load_sym(lib, lib_name, "nvrtcGetErrorString", &nvrtc.get_error_string, 0);
    nvrtc.loaded = ok;
}

/* A missing NVRTC or symbol makes every hiprtc* call (but hiprtcGetErrorString) fail with
 * HIPRTC_ERROR_INTERNAL_ERROR, said on stderr each time. */
static int rtc_ready(const char *call) {
    pthread_once(&nvrtc_once, load_nvrtc);
    if (nvrtc.loaded) return 1;
    fprintf(stderr, "hip_shim: %s: no NVRTC: HIPRTC_ERROR_INTERNAL_ERROR\n", call);
    return 0;
}

/* Translates an NVRTC status; one outside the table becomes HIPRTC_ERROR_INTERNAL_ERROR. */
static hiprtcResult tr_rtc(const char *call, nvrtcResult e) {
    hiprtcResult h = HIPRTC_ERROR_INTERNAL_ERROR;
    int found = 0;
    for (size_t i = 0; i < COUNT(nvrtc_status_map); i++) {
        if (nvrtc_status_map[i].nv == e) {
            h = nvrtc_status_map[i].hip;
            found = 1;
            break;
        }
    }
    if (!found) {
        const char *n = nvrtc.get_error_string ? nvrtc.get_error_string(e) : NULL;
        fprintf(stderr,
                "hip_shim: %s: NVRTC status %d (%s) has no hipRTC twin: "
                "HIPRTC_ERROR_INTERNAL_ERROR\n",
                call, e, n ? n : "?");
    }
    if (tracing()) fprintf(stderr, "hip_shim: %s -> %d (nvrtc %d)\n", call, h, e);
    return h;
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

hipError_t hipEventQuery(hipEvent_t e) { return tr("hipEventQuery", cudaEventQuery(e)); }

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

/* Synchronous, like HIP's: returns once the bytes are on the device (`src` may be pageable:
 * `copy_pageable_blocking`, a benchmark baseline). */
hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, void *src, size_t len) {
    return tr("hipMemcpyHtoD", cudaMemcpy(dst, src, len, cudaMemcpyHostToDevice));
}

/* Synchronous, like HIP's: returns once the bytes are in host memory. */
hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t len) {
    return tr("hipMemcpyDtoH", cudaMemcpy(dst, src, len, cudaMemcpyDeviceToHost));
}

hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags) {
    if (bad_flags("hipStreamWaitEvent", flags, 0)) return hipErrorInvalidValue;
    return tr("hipStreamWaitEvent", cudaStreamWaitEvent(stream, event, 0));
}

/* cudaMemcpyDefault, not cudaMemcpyDeviceToDevice: our code may pass as `src` the device
 * pointer of mapped pinned host memory (hipHostGetDevicePointer). Under UVA CUDA takes that as
 * DeviceToDevice too, but Default lets CUDA infer each side from the pointer itself, so the
 * copy does not rest on how CUDA classifies a mapped host pointer given a fixed direction. */
hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t len, hipStream_t s) {
    return tr("hipMemcpyDtoDAsync", cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, s));
}

/* ---- modules and launches: the CUDA driver API --------------------------------------------
 * `image` is the PTX text (NUL-terminated) the shim's hiprtcGetCode gave. Handles and streams
 * pass straight through: a hipModule_t is a CUmodule, a hipFunction_t a CUfunction, and a
 * hipStream_t from hipStreamCreateWithFlags a cudaStream_t, which is a CUstream. */
hipError_t hipModuleLoadData(hipModule_t *module, const void *image) {
    if (!cu_ready("hipModuleLoadData")) return hipErrorNotInitialized;
    hipError_t h = bind_primary_context("hipModuleLoadData (primary context)");
    if (h != hipSuccess) return h;
    return tr_cu("hipModuleLoadData", cu.module_load_data(module, image));
}

hipError_t hipModuleGetFunction(hipFunction_t *f, hipModule_t m, const char *name) {
    if (!cu_ready("hipModuleGetFunction")) return hipErrorNotInitialized;
    hipError_t h = need_context("hipModuleGetFunction");
    if (h != hipSuccess) return h;
    if (tracing()) fprintf(stderr, "hip_shim: hipModuleGetFunction %s\n", name ? name : "(null)");
    return tr_cu("hipModuleGetFunction", cu.module_get_function(f, m, name));
}

/* `extra` (arguments packed in one buffer, HIP_LAUNCH_PARAM_*) is refused: we pass our
 * arguments through kernelParams only, and its CUDA twin (CU_LAUNCH_PARAM_*) is not
 * translated here. */
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridX, unsigned int gridY,
                                 unsigned int gridZ, unsigned int blockX, unsigned int blockY,
                                 unsigned int blockZ, unsigned int sharedMemBytes,
                                 hipStream_t stream, void **kernelParams, void **extra) {
    if (extra != NULL) {
        fprintf(stderr,
                "hip_shim: hipModuleLaunchKernel: `extra` not translated: hipErrorInvalidValue\n");
        return hipErrorInvalidValue;
    }
    if (!cu_ready("hipModuleLaunchKernel")) return hipErrorNotInitialized;
    hipError_t h = need_context("hipModuleLaunchKernel");
    if (h != hipSuccess) return h;
    if (tracing())
        fprintf(stderr,
                "hip_shim: hipModuleLaunchKernel grid (%u, %u, %u) block (%u, %u, %u) "
                "shared %u stream %p\n",
                gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes, stream);
    return tr_cu("hipModuleLaunchKernel",
                 cu.launch_kernel(f, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes,
                                  stream, kernelParams, NULL));
}

hipError_t hipModuleUnload(hipModule_t m) {
    if (!cu_ready("hipModuleUnload")) return hipErrorNotInitialized;
    hipError_t h = need_context("hipModuleUnload");
    if (h != hipSuccess) return h;
    return tr_cu("hipModuleUnload", cu.module_unload(m));
}

/* ---- hipRTC: NVRTC --------------------------------------------------------------------------
 * Exported whatever build.sh's version script lists (a script without `local: *;` leaves the
 * other globals exported, unversioned): our binaries do not import these, they dlopen hipRTC
 * at run time (libhiprtc.so.7 first, which build.sh links to this library) and dlsym them.
 * A hiprtcProgram is an nvrtcProgram, passed straight through. The "code" is PTX text,
 * NUL-terminated (nvrtcGetPTXSize counts the NUL). */
const char *hiprtcGetErrorString(hiprtcResult result) {
    for (size_t i = 0; i < COUNT(hiprtc_errors); i++)
        if (hiprtc_errors[i].code == result) return hiprtc_errors[i].name;
    return "Invalid HIPRTC error code";
}

hiprtcResult hiprtcVersion(int *major, int *minor) {
    if (!rtc_ready("hiprtcVersion")) return HIPRTC_ERROR_INTERNAL_ERROR;
    return tr_rtc("hiprtcVersion", nvrtc.version(major, minor));
}

hiprtcResult hiprtcCreateProgram(hiprtcProgram *prog, const char *src, const char *name,
                                 int numHeaders, const char **headers,
                                 const char **includeNames) {
    if (!rtc_ready("hiprtcCreateProgram")) return HIPRTC_ERROR_INTERNAL_ERROR;
    return tr_rtc("hiprtcCreateProgram",
                  nvrtc.create_program(prog, src, name, numHeaders, headers, includeNames));
}

/* Options: --offload-arch=gfx... (AMD's target) is dropped, as NVRTC compiles for the current
 * device instead; anything else is refused. NVRTC always gets --gpu-architecture=compute_XY,
 * X.Y the compute capability of the runtime's current device, so the PTX is for the GPU that
 * hipModuleLoadData will load it on. */
hiprtcResult hiprtcCompileProgram(hiprtcProgram prog, int numOptions, const char **options) {
    if (!rtc_ready("hiprtcCompileProgram")) return HIPRTC_ERROR_INTERNAL_ERROR;
    if (numOptions < 0 || (numOptions > 0 && options == NULL)) {
        fprintf(stderr, "hip_shim: hiprtcCompileProgram: %d options at %p: "
                        "HIPRTC_ERROR_INVALID_INPUT\n",
                numOptions, (const void *)options);
        return HIPRTC_ERROR_INVALID_INPUT;
    }
    for (int i = 0; i < numOptions; i++) {
        const char *o = options[i];
        if (o != NULL && (strncmp(o, "--offload-arch=", strlen("--offload-arch=")) == 0 ||
                          strncmp(o, "-offload-arch=", strlen("-offload-arch=")) == 0)) {
            if (tracing())
                fprintf(stderr,
                        "hip_shim: hiprtcCompileProgram: dropped %s (NVRTC compiles for the "
                        "current device instead)\n",
                        o);
            continue;
        }
        fprintf(stderr,
                "hip_shim: hiprtcCompileProgram: option %s not translated: "
                "HIPRTC_ERROR_INVALID_OPTION\n",
                o ? o : "(null)");
        return HIPRTC_ERROR_INVALID_OPTION;
    }
    int dev = 0, major = 0, minor = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) {
        const char *n = cudaGetErrorName(e);
        fprintf(stderr,
                "hip_shim: hiprtcCompileProgram: no compute capability for the current device "
                "(CUDA status %d, %s): HIPRTC_ERROR_INTERNAL_ERROR\n",
                e, n ? n : "?");
        return HIPRTC_ERROR_INTERNAL_ERROR;
    }
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d%d", major, minor);
    const char *nv_options[] = {arch};
    if (tracing()) fprintf(stderr, "hip_shim: hiprtcCompileProgram: NVRTC gets %s\n", arch);
    return tr_rtc("hiprtcCompileProgram",
                  nvrtc.compile_program(prog, (int)COUNT(nv_options), nv_options));
}

hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram prog, size_t *logSizeRet) {
    if (!rtc_ready("hiprtcGetProgramLogSize")) return HIPRTC_ERROR_INTERNAL_ERROR;
    return tr_rtc("hiprtcGetProgramLogSize", nvrtc.get_program_log_size(prog, logSizeRet));
}

hiprtcResult hiprtcGetProgramLog(hiprtcProgram prog, char *log) {
    if (!rtc_ready("hiprtcGetProgramLog")) return HIPRTC_ERROR_INTERNAL_ERROR;
    return tr_rtc("hiprtcGetProgramLog", nvrtc.get_program_log(prog, log));
}

hiprtcResult hiprtcGetCodeSize(hiprtcProgram prog, size_t *codeSizeRet) {
    if (!rtc_ready("hiprtcGetCodeSize")) return HIPRTC_ERROR_INTERNAL_ERROR;
    return tr_rtc("hiprtcGetCodeSize", nvrtc.get_ptx_size(prog, codeSizeRet));
}

hiprtcResult hiprtcGetCode(hiprtcProgram prog, char *code) {
    if (!rtc_ready("hiprtcGetCode")) return HIPRTC_ERROR_INTERNAL_ERROR;
    return tr_rtc("hiprtcGetCode", nvrtc.get_ptx(prog, code));
}

hiprtcResult hiprtcDestroyProgram(hiprtcProgram *prog) {
    if (!rtc_ready("hiprtcDestroyProgram")) return HIPRTC_ERROR_INTERNAL_ERROR;
    return tr_rtc("hiprtcDestroyProgram", nvrtc.destroy_program(prog));
}
