// A CPU stand-in for the CUDA/HIP features ds4_kernels.cu uses, so g++ can compile and run the
// kernels (check.sh). One std::thread per GPU thread, a std::barrier for __syncthreads, blocks
// run one after another (so a function-static array is the block's shared memory). Not a
// GPU: it checks the kernels' logic and arithmetic, not timing, occupancy or memory model.
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

struct Ds4Dim {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local Ds4Dim threadIdx, blockIdx;
inline Ds4Dim blockDim, gridDim;
inline std::barrier<> *ds4_cpu_barrier = nullptr;

#define __global__
#define __device__
#define __constant__
#define __shared__ static
inline void __syncthreads() { ds4_cpu_barrier->arrive_and_wait(); }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
// check.sh compiles with -ffp-contract=off, so these round each operation once, like the _rn
// intrinsics; the plain `a * b + c` of the kernels then rounds twice (a GPU may fuse it).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
// expf, log1pf, fabsf, fmaxf, fminf: the C library's, from <math.h> through <cmath>.
#include <math.h>

// kernel<<<grid, block>>>(args...)
template <class F, class... A> void ds4_launch(unsigned grid, unsigned block, F kernel, A... args) {
    gridDim.x = grid;
    blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b) {
        std::barrier<> bar(block);
        ds4_cpu_barrier = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; ++t) {
            ts.emplace_back([=] {
                threadIdx.x = t;
                blockIdx.x = b;
                kernel(args...);
            });
        }
        for (auto &th : ts) th.join();
    }
}
