// ds4_kernels.cu: the device kernels of DS4's MoE decode path, the same arithmetic as the host
// reference in src/compute/ (Rust: `ds4_stream::compute::DS4_KERNELS_CU` is this text).
//
// Written in the subset CUDA and HIP share, for NVRTC and hipRTC: no #include, no cuda_fp16.h
// (f16 <-> f32 by hand from bits), no warp shuffles (warp size differs: 32 vs 64), no CUDA-only
// intrinsics. Used: __global__/__device__/__shared__/__constant__, threadIdx/blockIdx/blockDim,
// __syncthreads, expf, log1pf, fabsf, fmaxf, fminf, __uint_as_float, __float_as_uint,
// __fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn (all documented for both).
//
// Numerics: dequantisation uses __fmul_rn / __fsub_rn, so no multiply-add contraction can
// change a weight: every dequantised weight has the host's (= gguf-py's) bits. Dot products and
// sums accumulate in f32 in another order than the host (and may contract to FMA), and expf /
// log1pf are not correctly rounded: results agree with the host within a tolerance, not bit
// for bit. Compile without flush-to-zero / fast math (NVRTC defaults; hipRTC defaults).
//
// Launch shapes (T = DS4_THREADS = 256, 1-D grids and blocks, no dynamic shared memory). The
// matvecs and rms_norm reduce over the block and need exactly T threads; the element-wise
// kernels take any block size B with grid ceil(n / B) (T shown):
//
// | kernel                   | grid              | block | arguments                                                  |
// |--------------------------|-------------------|-------|------------------------------------------------------------|
// | ds4_matvec_iq2_xxs       | rows              | T     | const u8 *w, const float *x, float *y, int rows, int cols  |
// | ds4_matvec_q2_k          | rows              | T     | same                                                       |
// | ds4_matvec_q4_k          | rows              | T     | same                                                       |
// | ds4_matvec_q8_0          | rows              | T     | same                                                       |
// | ds4_matvec_f16           | rows              | T     | const u16 *w, const float *x, float *y, int rows, int cols |
// | ds4_q8_0_to_f16          | ceil(n / T)       | T     | const u8 *q, u16 *out, u64 n (values = 32 x blocks)        |
// | ds4_rms_norm             | 1                 | T     | const float *x, const float *w, float *out, int n, float eps |
// | ds4_sqrt_softplus        | ceil(n / T)       | T     | const float *z, float *out, int n                          |
// | ds4_swiglu_clamp         | ceil(n / T)       | T     | const float *g, const float *u, float *out, int n, float clamp |
// | ds4_weighted_add         | ceil(n / T)       | T     | float *y, const float *v, float w, int n                   |
//
// matvec: y[r] = dot(row r of W, x); W is `rows` rows of `cols` values back to back (GGUF dims
// [cols, rows]); cols must be a multiple of the block size (256 for IQ2_XXS / Q2_K / Q4_K, 32
// for Q8_0). One thread block per output row; each thread takes 32-value pieces of the row
// (a Q8_0 block, or an eighth of a 256-value block) strided by T, then a shared-memory tree
// sums the T partial sums. Quantised weights are read byte by byte, so `w` needs no alignment
// (rows of 66 or 34 bytes are only 2-byte aligned); the F16 kernel needs w 2-byte aligned.
// A reducing kernel launched with blockDim.x != T writes NaN to its outputs, not wrong sums.
// Element-wise results equal the host's bits except sqrt_softplus and swiglu_clamp (expf,
// log1pf); q8_0_to_f16 and weighted_add are bit-identical (no contraction: __fmul_rn/__fadd_rn).
// Pointers are device pointers; int = 32-bit signed, u64 = unsigned long long, float = f32.

typedef unsigned char ds4_u8;
typedef unsigned short ds4_u16;
typedef unsigned int ds4_u32;
typedef unsigned long long ds4_u64;

#define DS4_THREADS 256

static __device__ inline float ds4_nan() { return __uint_as_float(0x7fc00000u); }

static __device__ inline ds4_u32 ds4_ld_u16(const ds4_u8 *p) {
    return (ds4_u32)p[0] | ((ds4_u32)p[1] << 8);
}

static __device__ inline ds4_u32 ds4_ld_u32(const ds4_u8 *p) {
    return (ds4_u32)p[0] | ((ds4_u32)p[1] << 8) | ((ds4_u32)p[2] << 16) | ((ds4_u32)p[3] << 24);
}

// f16 bits -> f32, exact (the host's compute::f16::f16_to_f32).
static __device__ inline float ds4_f16_to_f32(ds4_u32 h) {
    const ds4_u32 sign = (h & 0x8000u) << 16;
    const ds4_u32 exp = (h >> 10) & 0x1fu;
    const ds4_u32 man = h & 0x3ffu;
    if (exp == 0u) {
        // zero or subnormal: man * 2^-24, exact
        const float v = __fmul_rn((float)man, 5.9604644775390625e-8f);
        return sign ? -v : v;
    }
    if (exp == 31u) {
        return __uint_as_float(sign | 0x7f800000u | (man << 13));
    }
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// f32 -> f16 bits, round to nearest even (the host's compute::f16::f32_to_f16).
static __device__ inline ds4_u16 ds4_f32_to_f16(float f) {
    const ds4_u32 x = __float_as_uint(f);
    const ds4_u32 sign = (x >> 16) & 0x8000u;
    const int exp = (int)((x >> 23) & 0xffu);
    const ds4_u32 man = x & 0x7fffffu;
    if (exp == 0xff) {
        return (ds4_u16)(man ? (sign | 0x7e00u | (man >> 13)) : (sign | 0x7c00u));
    }
    const int e = exp - 127;
    if (e > 15) {
        return (ds4_u16)(sign | 0x7c00u);
    }
    if (e >= -14) {
        ds4_u32 h = ((ds4_u32)(e + 15) << 10) | (man >> 13);
        const ds4_u32 rest = man & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) {
            h += 1u; // a carry into the exponent is the right answer (up to inf)
        }
        return (ds4_u16)(sign | h);
    }
    if (e < -25) {
        return (ds4_u16)sign;
    }
    const ds4_u32 m = man | 0x800000u;
    const ds4_u32 s = (ds4_u32)(-(e + 1)); // 14..24
    ds4_u32 h = m >> s;
    const ds4_u32 rest = m & ((1u << s) - 1u);
    const ds4_u32 half = 1u << (s - 1u);
    if (rest > half || (rest == half && (h & 1u))) {
        h += 1u;
    }
    return (ds4_u16)(sign | h);
}

// Sum of one value per thread over the block (blockDim.x == DS4_THREADS). Every thread of the
// block must call it. Tree order: red[t] += red[t + s] for s = T/2, T/4, ..., 1.
static __device__ inline float ds4_block_sum(float v, float *red) {
    const unsigned t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (unsigned s = DS4_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) {
            red[t] += red[t + s];
        }
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads();
    return total;
}

// ggml's ksigns_iq2xs[i]: i with bit 7 = parity of i's 7 bits.
static __device__ inline ds4_u32 ds4_ksigns(ds4_u32 i) {
    ds4_u32 p = i ^ (i >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return i | ((p & 1u) << 7);
}

// ggml's iq2xxs_grid: 8 magnitudes per entry (byte j = value j), each 0x08, 0x19 or 0x2b.
// The host test `kernel_grid_matches_the_host_grid` compares this copy with the Rust one.
__constant__ ds4_u64 ds4_iq2xxs_grid[256] = {
// grid begin
    0x0808080808080808ull, 0x080808080808082bull, 0x0808080808081919ull, 0x0808080808082b08ull,
    0x0808080808082b2bull, 0x0808080808190819ull, 0x0808080808191908ull, 0x08080808082b0808ull,
    0x08080808082b082bull, 0x08080808082b2b08ull, 0x08080808082b2b2bull, 0x0808080819080819ull,
    0x0808080819081908ull, 0x0808080819190808ull, 0x0808080819192b08ull, 0x08080808192b0819ull,
    0x08080808192b1908ull, 0x080808082b080808ull, 0x080808082b08082bull, 0x080808082b082b2bull,
    0x080808082b2b082bull, 0x0808081908080819ull, 0x0808081908081908ull, 0x0808081908190808ull,
    0x0808081908191919ull, 0x0808081919080808ull, 0x080808192b081908ull, 0x080808192b192b08ull,
    0x0808082b08080808ull, 0x0808082b0808082bull, 0x0808082b082b082bull, 0x0808082b2b08082bull,
    0x0808190808080819ull, 0x0808190808081908ull, 0x0808190808190808ull, 0x08081908082b0819ull,
    0x08081908082b1908ull, 0x0808190819080808ull, 0x080819081908082bull, 0x0808190819082b08ull,
    0x08081908192b0808ull, 0x080819082b080819ull, 0x080819082b081908ull, 0x080819082b190808ull,
    0x080819082b2b1908ull, 0x0808191908080808ull, 0x080819190808082bull, 0x0808191908082b08ull,
    0x08081919082b0808ull, 0x080819191908192bull, 0x08081919192b2b19ull, 0x080819192b080808ull,
    0x080819192b190819ull, 0x0808192b08082b19ull, 0x0808192b08190808ull, 0x0808192b19080808ull,
    0x0808192b2b081908ull, 0x0808192b2b2b1908ull, 0x08082b0808080808ull, 0x08082b0808081919ull,
    0x08082b0808082b08ull, 0x08082b0808191908ull, 0x08082b08082b2b08ull, 0x08082b0819080819ull,
    0x08082b0819081908ull, 0x08082b0819190808ull, 0x08082b081919082bull, 0x08082b082b082b08ull,
    0x08082b1908081908ull, 0x08082b1919080808ull, 0x08082b2b0808082bull, 0x08082b2b08191908ull,
    0x0819080808080819ull, 0x0819080808081908ull, 0x0819080808190808ull, 0x08190808082b0819ull,
    0x0819080819080808ull, 0x08190808192b0808ull, 0x081908082b081908ull, 0x081908082b190808ull,
    0x081908082b191919ull, 0x0819081908080808ull, 0x0819081908082b08ull, 0x08190819082b0808ull,
    0x0819081919190808ull, 0x0819081919192b2bull, 0x081908192b080808ull, 0x0819082b082b1908ull,
    0x0819082b19081919ull, 0x0819190808080808ull, 0x0819190808082b08ull, 0x08191908082b0808ull,
    0x08191908082b1919ull, 0x0819190819082b19ull, 0x081919082b080808ull, 0x0819191908192b08ull,
    0x08191919192b082bull, 0x0819192b08080808ull, 0x0819192b0819192bull, 0x08192b0808080819ull,
    0x08192b0808081908ull, 0x08192b0808190808ull, 0x08192b0819080808ull, 0x08192b082b080819ull,
    0x08192b1908080808ull, 0x08192b1908081919ull, 0x08192b192b2b0808ull, 0x08192b2b19190819ull,
    0x082b080808080808ull, 0x082b08080808082bull, 0x082b080808082b2bull, 0x082b080819081908ull,
    0x082b0808192b0819ull, 0x082b08082b080808ull, 0x082b08082b08082bull, 0x082b0819082b2b19ull,
    0x082b081919082b08ull, 0x082b082b08080808ull, 0x082b082b0808082bull, 0x082b190808080819ull,
    0x082b190808081908ull, 0x082b190808190808ull, 0x082b190819080808ull, 0x082b19081919192bull,
    0x082b191908080808ull, 0x082b191919080819ull, 0x082b1919192b1908ull, 0x082b192b2b190808ull,
    0x082b2b0808082b08ull, 0x082b2b08082b0808ull, 0x082b2b082b191908ull, 0x082b2b2b19081908ull,
    0x1908080808080819ull, 0x1908080808081908ull, 0x1908080808190808ull, 0x1908080808192b08ull,
    0x19080808082b0819ull, 0x19080808082b1908ull, 0x1908080819080808ull, 0x1908080819082b08ull,
    0x190808081919192bull, 0x19080808192b0808ull, 0x190808082b080819ull, 0x190808082b081908ull,
    0x190808082b190808ull, 0x1908081908080808ull, 0x19080819082b0808ull, 0x19080819192b0819ull,
    0x190808192b080808ull, 0x190808192b081919ull, 0x1908082b08080819ull, 0x1908082b08190808ull,
    0x1908082b19082b08ull, 0x1908082b1919192bull, 0x1908082b192b2b08ull, 0x1908190808080808ull,
    0x1908190808082b08ull, 0x19081908082b0808ull, 0x190819082b080808ull, 0x190819082b192b19ull,
    0x190819190819082bull, 0x19081919082b1908ull, 0x1908192b08080808ull, 0x19082b0808080819ull,
    0x19082b0808081908ull, 0x19082b0808190808ull, 0x19082b0819080808ull, 0x19082b0819081919ull,
    0x19082b1908080808ull, 0x19082b1919192b08ull, 0x19082b19192b0819ull, 0x19082b192b08082bull,
    0x19082b2b19081919ull, 0x19082b2b2b190808ull, 0x1919080808080808ull, 0x1919080808082b08ull,
    0x1919080808190819ull, 0x1919080808192b19ull, 0x19190808082b0808ull, 0x191908082b080808ull,
    0x191908082b082b08ull, 0x1919081908081908ull, 0x191908191908082bull, 0x191908192b2b1908ull,
    0x1919082b2b190819ull, 0x191919082b190808ull, 0x191919082b19082bull, 0x1919191908082b2bull,
    0x1919192b08080819ull, 0x1919192b19191908ull, 0x19192b0808080808ull, 0x19192b0808190819ull,
    0x19192b0808192b19ull, 0x19192b08192b1908ull, 0x19192b1919080808ull, 0x19192b2b08082b08ull,
    0x192b080808081908ull, 0x192b080808190808ull, 0x192b080819080808ull, 0x192b0808192b2b08ull,
    0x192b081908080808ull, 0x192b081919191919ull, 0x192b082b08192b08ull, 0x192b082b192b0808ull,
    0x192b190808080808ull, 0x192b190808081919ull, 0x192b191908190808ull, 0x192b19190819082bull,
    0x192b19192b081908ull, 0x192b2b081908082bull, 0x2b08080808080808ull, 0x2b0808080808082bull,
    0x2b08080808082b2bull, 0x2b08080819080819ull, 0x2b0808082b08082bull, 0x2b08081908081908ull,
    0x2b08081908192b08ull, 0x2b08081919080808ull, 0x2b08082b08190819ull, 0x2b08190808080819ull,
    0x2b08190808081908ull, 0x2b08190808190808ull, 0x2b08190808191919ull, 0x2b08190819080808ull,
    0x2b081908192b0808ull, 0x2b08191908080808ull, 0x2b0819191908192bull, 0x2b0819192b191908ull,
    0x2b08192b08082b19ull, 0x2b08192b19080808ull, 0x2b08192b192b0808ull, 0x2b082b080808082bull,
    0x2b082b1908081908ull, 0x2b082b2b08190819ull, 0x2b19080808081908ull, 0x2b19080808190808ull,
    0x2b190808082b1908ull, 0x2b19080819080808ull, 0x2b1908082b2b0819ull, 0x2b1908190819192bull,
    0x2b1908192b080808ull, 0x2b19082b19081919ull, 0x2b19190808080808ull, 0x2b191908082b082bull,
    0x2b19190819081908ull, 0x2b19191919190819ull, 0x2b192b082b080819ull, 0x2b192b19082b0808ull,
    0x2b2b08080808082bull, 0x2b2b080819190808ull, 0x2b2b08082b081919ull, 0x2b2b081908082b19ull,
    0x2b2b082b08080808ull, 0x2b2b190808192b08ull, 0x2b2b2b0819190808ull, 0x2b2b2b1908081908ull,
// grid end
};

// Q4_K (scale, min) of sub-block s (0..8) from the 12 packed bytes (ggml's get_scale_min_k4).
static __device__ inline void ds4_q4k_scale_min(const ds4_u8 *sc, int s, ds4_u32 *scale, ds4_u32 *min) {
    if (s < 4) {
        *scale = sc[s] & 0x3fu;
        *min = sc[s + 4] & 0x3fu;
    } else {
        *scale = (sc[s + 4] & 0x0fu) | ((sc[s - 4] >> 2) & 0x30u);
        *min = (sc[s + 4] >> 4) | ((sc[s] >> 2) & 0x30u);
    }
}

// Dot of 32 values of one quantised piece with x32. `k` is the piece (0..8) within a 256-value
// block `blk`; values are dequantised exactly as the host does (no contraction).
static __device__ inline float ds4_piece_q2_k(const ds4_u8 *blk, int k, const float *x32) {
    const float d = ds4_f16_to_f32(ds4_ld_u16(blk + 80));
    const float dmin = ds4_f16_to_f32(ds4_ld_u16(blk + 82));
    const int g = k >> 2;
    const int j = k & 3;
    const ds4_u8 *q = blk + 16 + g * 32;
    float s = 0.0f;
    for (int h = 0; h < 2; ++h) {
        const ds4_u32 sc = blk[2 * k + h]; // scale byte of values k*32 + h*16 .. +16
        const float dl = __fmul_rn(d, (float)(sc & 0xfu));
        const float ml = __fmul_rn(dmin, (float)(sc >> 4));
        for (int l = h * 16; l < h * 16 + 16; ++l) {
            const float v = __fsub_rn(__fmul_rn(dl, (float)((q[l] >> (2 * j)) & 3u)), ml);
            s += v * x32[l];
        }
    }
    return s;
}

static __device__ inline float ds4_piece_q4_k(const ds4_u8 *blk, int k, const float *x32) {
    const float d = ds4_f16_to_f32(ds4_ld_u16(blk));
    const float dmin = ds4_f16_to_f32(ds4_ld_u16(blk + 2));
    ds4_u32 scale, min;
    ds4_q4k_scale_min(blk + 4, k, &scale, &min);
    const float dl = __fmul_rn(d, (float)scale);
    const float ml = __fmul_rn(dmin, (float)min);
    const ds4_u8 *q = blk + 16 + (k >> 1) * 32;
    const int shift = 4 * (k & 1);
    float s = 0.0f;
    for (int l = 0; l < 32; ++l) {
        const float v = __fsub_rn(__fmul_rn(dl, (float)((q[l] >> shift) & 0xfu)), ml);
        s += v * x32[l];
    }
    return s;
}

static __device__ inline float ds4_piece_iq2_xxs(const ds4_u8 *blk, int k, const float *x32) {
    const float d = ds4_f16_to_f32(ds4_ld_u16(blk));
    const ds4_u32 aux0 = ds4_ld_u32(blk + 2 + 8 * k);
    const ds4_u32 aux1 = ds4_ld_u32(blk + 2 + 8 * k + 4);
    const float db = __fmul_rn(__fmul_rn(d, 0.5f + (float)(aux1 >> 28)), 0.25f);
    float s = 0.0f;
    for (int l = 0; l < 4; ++l) {
        const ds4_u64 grid = ds4_iq2xxs_grid[(aux0 >> (8 * l)) & 0xffu];
        const ds4_u32 signs = ds4_ksigns((aux1 >> (7 * l)) & 0x7fu);
        for (int j = 0; j < 8; ++j) {
            float v = __fmul_rn(db, (float)((ds4_u32)(grid >> (8 * j)) & 0xffu));
            if ((signs >> j) & 1u) {
                v = -v;
            }
            s += v * x32[l * 8 + j];
        }
    }
    return s;
}

static __device__ inline float ds4_piece_q8_0(const ds4_u8 *blk, const float *x32) {
    const float d = ds4_f16_to_f32(ds4_ld_u16(blk));
    float s = 0.0f;
    for (int l = 0; l < 32; ++l) {
        s += __fmul_rn((float)(signed char)blk[2 + l], d) * x32[l];
    }
    return s;
}

// The common body of the quantised matvecs: one block per row, threads over 32-value pieces.
// PIECES = pieces per ggml block (8 for 256-value blocks, 1 for Q8_0), BYTES = block bytes.
#define DS4_MATVEC_BODY(PIECES, BYTES, PIECE_CALL)                                              \
    __shared__ float red[DS4_THREADS];                                                          \
    const int row = (int)blockIdx.x;                                                            \
    if (row >= rows) {                                                                          \
        return;                                                                                 \
    }                                                                                           \
    if (blockDim.x != DS4_THREADS) {                                                            \
        if (threadIdx.x == 0) {                                                                 \
            y[row] = ds4_nan();                                                                 \
        }                                                                                       \
        return;                                                                                 \
    }                                                                                           \
    const int nblocks = cols / (32 * (PIECES));                                                 \
    const ds4_u8 *wr = w + (ds4_u64)row * (ds4_u64)nblocks * (ds4_u64)(BYTES);                  \
    float acc = 0.0f;                                                                           \
    for (int it = (int)threadIdx.x; it < nblocks * (PIECES); it += DS4_THREADS) {               \
        const ds4_u8 *blk = wr + (ds4_u64)(it / (PIECES)) * (ds4_u64)(BYTES);                   \
        const int k = it % (PIECES);                                                            \
        const float *x32 = x + (ds4_u64)it * 32u;                                               \
        acc += PIECE_CALL;                                                                      \
    }                                                                                           \
    const float total = ds4_block_sum(acc, red);                                                \
    if (threadIdx.x == 0) {                                                                     \
        y[row] = total;                                                                         \
    }

extern "C" __global__ void ds4_matvec_iq2_xxs(const ds4_u8 *__restrict__ w, const float *__restrict__ x,
                                              float *__restrict__ y, int rows, int cols) {
    DS4_MATVEC_BODY(8, 66, ds4_piece_iq2_xxs(blk, k, x32))
}

extern "C" __global__ void ds4_matvec_q2_k(const ds4_u8 *__restrict__ w, const float *__restrict__ x,
                                           float *__restrict__ y, int rows, int cols) {
    DS4_MATVEC_BODY(8, 84, ds4_piece_q2_k(blk, k, x32))
}

extern "C" __global__ void ds4_matvec_q4_k(const ds4_u8 *__restrict__ w, const float *__restrict__ x,
                                           float *__restrict__ y, int rows, int cols) {
    DS4_MATVEC_BODY(8, 144, ds4_piece_q4_k(blk, k, x32))
}

extern "C" __global__ void ds4_matvec_q8_0(const ds4_u8 *__restrict__ w, const float *__restrict__ x,
                                           float *__restrict__ y, int rows, int cols) {
    DS4_MATVEC_BODY(1, 34, ((void)k, ds4_piece_q8_0(blk, x32)))
}

extern "C" __global__ void ds4_matvec_f16(const ds4_u16 *__restrict__ w, const float *__restrict__ x,
                                          float *__restrict__ y, int rows, int cols) {
    __shared__ float red[DS4_THREADS];
    const int row = (int)blockIdx.x;
    if (row >= rows) {
        return;
    }
    if (blockDim.x != DS4_THREADS) {
        if (threadIdx.x == 0) {
            y[row] = ds4_nan();
        }
        return;
    }
    const ds4_u16 *wr = w + (ds4_u64)row * (ds4_u64)cols;
    float acc = 0.0f;
    for (int c = (int)threadIdx.x; c < cols; c += DS4_THREADS) {
        acc += ds4_f16_to_f32(wr[c]) * x[c];
    }
    const float total = ds4_block_sum(acc, red);
    if (threadIdx.x == 0) {
        y[row] = total;
    }
}

// Q8_0 -> f16 bits: dequantise (exact), then round to nearest even. One thread per value.
extern "C" __global__ void ds4_q8_0_to_f16(const ds4_u8 *__restrict__ q, ds4_u16 *__restrict__ out, ds4_u64 n) {
    const ds4_u64 i = (ds4_u64)blockIdx.x * (ds4_u64)blockDim.x + (ds4_u64)threadIdx.x;
    if (i >= n) {
        return;
    }
    const ds4_u8 *blk = q + (i / 32u) * 34u;
    const float d = ds4_f16_to_f32(ds4_ld_u16(blk));
    const float v = __fmul_rn((float)(signed char)blk[2 + (i % 32u)], d);
    out[i] = ds4_f32_to_f16(v);
}

// out = x / sqrt(mean(x*x) + eps) * w; one block of DS4_THREADS threads for the whole vector.
extern "C" __global__ void ds4_rms_norm(const float *__restrict__ x, const float *__restrict__ w,
                                        float *__restrict__ out, int n, float eps) {
    __shared__ float red[DS4_THREADS];
    if (blockDim.x != DS4_THREADS) {
        for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) {
            out[i] = ds4_nan();
        }
        return;
    }
    float acc = 0.0f;
    for (int i = (int)threadIdx.x; i < n; i += DS4_THREADS) {
        acc += x[i] * x[i];
    }
    const float sum = ds4_block_sum(acc, red);
    const float denom = __fsqrt_rn(__fadd_rn(__fdiv_rn(sum, (float)n), eps));
    for (int i = (int)threadIdx.x; i < n; i += DS4_THREADS) {
        out[i] = __fmul_rn(__fdiv_rn(x[i], denom), w[i]);
    }
}

// out = sqrt(softplus(z)), softplus in the stable form max(z, 0) + log1p(exp(-|z|)).
extern "C" __global__ void ds4_sqrt_softplus(const float *__restrict__ z, float *__restrict__ out, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) {
        return;
    }
    const float v = z[i];
    const float sp = fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v)));
    out[i] = __fsqrt_rn(sp);
}

// out = silu(g') * u'; with clamp > 0: g' = min(g, clamp), u' = clamp(u, -clamp, clamp).
extern "C" __global__ void ds4_swiglu_clamp(const float *__restrict__ g, const float *__restrict__ u,
                                            float *__restrict__ out, int n, float clamp) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) {
        return;
    }
    float gv = g[i];
    float uv = u[i];
    if (clamp > 0.0f) {
        gv = fminf(gv, clamp);
        uv = fminf(fmaxf(uv, -clamp), clamp);
    }
    const float silu = __fdiv_rn(gv, 1.0f + expf(-gv));
    out[i] = __fmul_rn(silu, uv);
}

// y += w * v.
extern "C" __global__ void ds4_weighted_add(float *__restrict__ y, const float *__restrict__ v, float w, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) {
        return;
    }
    y[i] = __fadd_rn(y[i], __fmul_rn(w, v[i]));
}
