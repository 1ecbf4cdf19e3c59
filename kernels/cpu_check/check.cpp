// Runs ds4_kernels.cu on the CPU (shim.h) against the files of tests/py/compute_oracle.py gen:
// dequantisation bit-exact (each piece dotted with unit vectors), matvec within the host's
// rounding bound, q8_0_to_f16 and f32 -> f16 bit-exact, the element-wise kernels against the
// formulas in double, one expert FFN chained from the kernels. Prints one line per check and
// exits 1 on the first failure. Usage: check DIR (see check.sh).
#include "shim.h"
#include "../ds4_kernels.cu"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

static std::string dir;
static int failures = 0;

template <class T> static std::vector<T> load(const std::string &name) {
    std::ifstream f(dir + "/" + name, std::ios::binary);
    if (!f) { std::fprintf(stderr, "cannot read %s\n", name.c_str()); std::exit(2); }
    std::vector<char> b((std::istreambuf_iterator<char>(f)), {});
    std::vector<T> v(b.size() / sizeof(T));
    std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
    return v;
}

static void report(const char *what, const std::string &name, bool ok, double worst) {
    std::printf("%-4s %-14s %-12s worst %.3g\n", ok ? "ok" : "FAIL", what, name.c_str(), worst);
    if (!ok) failures++;
}

struct Case { std::string name; int kind; int rows, cols; };
// kind: 0 F16, 1 Q8_0, 2 Q4_K, 3 Q2_K, 4 IQ2_XXS (F32 has no matvec kernel)
static const Case cases[] = {
    {"f16_wide", 0, 4, 100}, {"f16_router", 0, 16, 4096}, {"q8_0_wide", 1, 8, 256},
    {"q8_0_shexp", 1, 16, 4096}, {"q4_k_wide", 2, 8, 512}, {"q4_k_real", 2, 16, 4096},
    {"q2_k_wide", 3, 8, 512}, {"q2_k_down", 3, 16, 2048}, {"iq2_xxs_wide", 4, 8, 512},
    {"iq2_xxs_gate", 4, 16, 4096},
};
static const int block_values[] = {1, 32, 256, 256, 256};
static const int block_bytes[] = {2, 34, 144, 84, 66};

static void matvec(int kind, const void *w, const float *x, float *y, int rows, int cols, unsigned threads = DS4_THREADS) {
    const ds4_u8 *wb = (const ds4_u8 *)w;
    switch (kind) {
    case 0: ds4_launch(rows, threads, ds4_matvec_f16, (const ds4_u16 *)w, x, y, rows, cols); break;
    case 1: ds4_launch(rows, threads, ds4_matvec_q8_0, wb, x, y, rows, cols); break;
    case 2: ds4_launch(rows, threads, ds4_matvec_q4_k, wb, x, y, rows, cols); break;
    case 3: ds4_launch(rows, threads, ds4_matvec_q2_k, wb, x, y, rows, cols); break;
    case 4: ds4_launch(rows, threads, ds4_matvec_iq2_xxs, wb, x, y, rows, cols); break;
    }
}

// The dequantised value of element (row, col) through the device code path: the piece dotted
// with the unit vector e_col (0 + ... + v·1 + 0 ... = v exactly, up to the sign of a zero).
static float piece_value(int kind, const ds4_u8 *row, int col) {
    float e[32] = {0};
    e[col % 32] = 1.0f;
    int piece = col / 32;
    switch (kind) {
    case 0: return ds4_f16_to_f32(ds4_ld_u16(row + 2 * col));
    case 1: return ds4_piece_q8_0(row + piece * 34, e);
    case 2: return ds4_piece_q4_k(row + (piece / 8) * 144, piece % 8, e);
    case 3: return ds4_piece_q2_k(row + (piece / 8) * 84, piece % 8, e);
    default: return ds4_piece_iq2_xxs(row + (piece / 8) * 66, piece % 8, e);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { std::fprintf(stderr, "usage: check DIR\n"); return 2; }
    dir = argv[1];
    for (const Case &c : cases) {
        auto w = load<ds4_u8>(c.name + ".w");
        auto deq = load<float>(c.name + ".deq");
        auto x = load<float>(c.name + ".x");
        auto y64 = load<double>(c.name + ".y64");
        auto abs64 = load<double>(c.name + ".abs64");
        const size_t rb = (size_t)c.cols / block_values[c.kind] * block_bytes[c.kind];
        bool ok = true;
        for (int r = 0; r < c.rows; ++r)
            for (int col = 0; col < c.cols; ++col) {
                float v = piece_value(c.kind, w.data() + r * rb, col), want = deq[(size_t)r * c.cols + col];
                ok &= (v == 0.0f && want == 0.0f) || __float_as_uint(v) == __float_as_uint(want);
            }
        report("dequant", c.name, ok, 0);
        std::vector<float> y(c.rows, NAN);
        matvec(c.kind, w.data(), x.data(), y.data(), c.rows, c.cols);
        const int g = c.kind == 0 ? 32 : block_values[c.kind];
        const double bound = (g + (c.cols + g - 1) / g + 2) * std::ldexp(1.0, -24);
        double worst = 0;
        ok = true;
        for (int r = 0; r < c.rows; ++r) {
            double err = std::fabs(y[r] - y64[r]);
            ok &= err <= bound * abs64[r];
            worst = std::fmax(worst, err / abs64[r]);
        }
        report("matvec", c.name, ok, worst);
    }
    {   // a reducing kernel with the wrong block size writes NaN
        auto w = load<ds4_u8>("q8_0_wide.w");
        auto x = load<float>("q8_0_wide.x");
        std::vector<float> y(8, 0.0f);
        matvec(1, w.data(), x.data(), y.data(), 8, 256, 128);
        bool ok = true;
        for (float v : y) ok &= std::isnan(v);
        report("wrong-block", "q8_0_wide", ok, 0);
    }
    for (const char *name : {"q8_0_wide", "q8_0_shexp"}) {
        auto w = load<ds4_u8>(std::string(name) + ".w");
        auto want = load<ds4_u16>(std::string(name) + ".f16");
        std::vector<ds4_u16> out(want.size());
        // element-wise: one block per 256 values, threads run here sequentially per block
        ds4_launch((unsigned)((want.size() + 255) / 256), 256, ds4_q8_0_to_f16, (const ds4_u8 *)w.data(), out.data(), (ds4_u64)want.size());
        report("q8_0_to_f16", name, out == want, 0);
    }
    {
        auto in = load<float>("f32_to_f16.in");
        auto want = load<ds4_u16>("f32_to_f16.out");
        bool ok = in.size() == want.size();
        for (size_t i = 0; ok && i < in.size(); ++i) ok = ds4_f32_to_f16(in[i]) == want[i];
        report("f32_to_f16", "random", ok, 0);
    }
    {   // element-wise kernels and rms_norm against the formulas in double
        const int n = 1000;
        std::vector<float> a(n), b(n), wv(n), out(n), y(n), y0(n);
        for (int i = 0; i < n; ++i) {
            a[i] = (float)((i * 37 % 200) - 100) * 0.37f;  // -37 .. 36.6
            b[i] = (float)((i * 53 % 180) - 90) * 0.11f;
            wv[i] = 0.5f + (float)(i % 7) * 0.25f;
            y[i] = y0[i] = (float)(i % 13) - 6.0f;
        }
        const unsigned grid = (n + 255) / 256;
        double worst = 0;
        ds4_launch(grid, 256, ds4_sqrt_softplus, (const float *)a.data(), out.data(), n);
        for (int i = 0; i < n; ++i) {
            double z = a[i], want = std::sqrt(std::fmax(z, 0.0) + std::log1p(std::exp(-std::fabs(z))));
            worst = std::fmax(worst, std::fabs(out[i] - want) / want);
        }
        report("sqrt_softplus", "n=1000", worst <= 1e-6, worst);
        const float clamp = 7.0f;
        ds4_launch(grid, 256, ds4_swiglu_clamp, (const float *)a.data(), (const float *)b.data(), out.data(), n, clamp);
        worst = 0;
        for (int i = 0; i < n; ++i) {
            double g = std::fmin(a[i], clamp), u = std::fmin(std::fmax((double)b[i], -clamp), clamp);
            double want = g / (1.0 + std::exp(-g)) * u;
            worst = std::fmax(worst, std::fabs(out[i] - want) / (std::fabs(want) + 1e-30));
        }
        report("swiglu_clamp", "c=7", worst <= 1e-6, worst);
        ds4_launch(grid, 256, ds4_weighted_add, y.data(), (const float *)b.data(), 0.75f, n);
        bool ok = true;
        for (int i = 0; i < n; ++i) ok &= y[i] == y0[i] + 0.75f * b[i];  // bit-identical (no FMA)
        report("weighted_add", "w=0.75", ok, 0);
        ds4_launch(1, 256, ds4_rms_norm, (const float *)a.data(), (const float *)wv.data(), out.data(), n, 1e-6f);
        double ss = 0;
        for (int i = 0; i < n; ++i) ss += (double)a[i] * a[i];
        const double denom = std::sqrt(ss / n + 1e-6);
        worst = 0;
        for (int i = 0; i < n; ++i) {
            double want = a[i] / denom * wv[i];
            worst = std::fmax(worst, std::fabs(out[i] - want) / (std::fabs(want) + 1e-30));
        }
        report("rms_norm", "n=1000", worst <= 1e-5, worst);
    }
    {   // one expert chained from the kernels, against the float64 FFN of the oracle
        auto gate = load<ds4_u8>("ffn.gate");
        auto up = load<ds4_u8>("ffn.up");
        auto down = load<ds4_u8>("ffn.down");
        auto x = load<float>("ffn.x");
        auto y64 = load<double>("ffn.y64");
        std::ifstream cf(dir + "/ffn.clamp");
        float clamp = 0;
        cf >> clamp;
        const int e = 512, ff = 256;
        std::vector<float> g(ff), u(ff), act(ff), y(e);
        matvec(4, gate.data(), x.data(), g.data(), ff, e);
        matvec(4, up.data(), x.data(), u.data(), ff, e);
        ds4_launch(1, 256, ds4_swiglu_clamp, (const float *)g.data(), (const float *)u.data(), act.data(), ff, clamp);
        matvec(3, down.data(), act.data(), y.data(), e, ff);
        double num = 0, den = 0;
        for (int i = 0; i < e; ++i) { num += (y[i] - y64[i]) * (y[i] - y64[i]); den += y64[i] * y64[i]; }
        const double rel = std::sqrt(num / den);
        report("expert_ffn", "512x256", clamp > 0 && rel <= 1e-5, rel);
    }
    std::printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
