"""The C++ prelude every generated kernel file starts with: includes and scalar helpers.

Helpers follow eager PyTorch's semantics where C++ differs: NaN-propagating
maximum/minimum, Python-style floor division and remainder, bfloat16 rounding
to nearest even, first-index argmax/argmin with NaN as the largest value.
"""

from __future__ import annotations

__all__ = ["PRELUDE"]

PRELUDE = r"""
// Floating-point traps stay on. Ordered comparisons of floats are spelled with the
// quiet builtins (__builtin_isless, ...: the same results, no invalid-operation trap on
// NaN), so gcc if-converts, and vectorizes, loops comparing values computed by a select
// (a stored ReLU mask) without turning traps off. Turning them off instead helps gcc 12
// there but leaves gcc 13 unable to vectorize a chain of NaN-propagating maximums after
// ReLUs (a max pool over a batch norm), which then runs scalar and branchy, 10x slower.
// A caller's -fno-trapping-math also lets gcc fold (float)(int)x into trunc(x), which is
// -0.0 for x in (-1, 0) where the int is 0 (a later division by it gives -inf, not inf):
// an integer conversion's result passes through EMBER_INT_BARRIER, which keeps the fold out.
#if defined(__has_builtin)
#if __has_builtin(__builtin_assoc_barrier)
#define EMBER_INT_BARRIER(v) __builtin_assoc_barrier(v)
#endif
#endif
#ifndef EMBER_INT_BARRIER
#define EMBER_INT_BARRIER(v) (v)
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <omp.h>
#include <type_traits>

static inline float ember_bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t ember_float_to_bf16(float f) {
  if (f != f) return 0x7fc0;
  uint32_t u; std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
static inline float ember_round_bf16(float f) { return ember_bf16_to_float(ember_float_to_bf16(f)); }
// The sign bit as a bit test (std::signbit of a value widened from bf16 stops gcc 12 with
// an internal compiler error in vectorized loops).
static inline bool ember_signbit(float f) { uint32_t u; std::memcpy(&u, &f, 4); return (u >> 31) != 0; }
static inline bool ember_signbit(double f) { uint64_t u; std::memcpy(&u, &f, 8); return (u >> 63) != 0; }
template <typename T> static inline bool ember_signbit(T v) { return v < 0; }
static inline float ember_round_f16(float f) { return static_cast<float>(static_cast<_Float16>(f)); }

// A float to a 32- or 64-bit integer: NaN and values out of the type's range give what
// the x86 truncating conversion gives at run time (the type's lowest value), as eager's
// kernels do; a plain cast is undefined there, and the C++ compiler folds it to anything
// where it can see the value (0 for a NaN it computed itself).
template <typename I, typename F> static inline I ember_float_to_int(F x) {
#if defined(__x86_64__) || defined(__i386__)
  constexpr F lo = static_cast<F>(std::numeric_limits<I>::min());
  return EMBER_INT_BARRIER((x >= lo && x < -lo) ? static_cast<I>(x) : std::numeric_limits<I>::min());
#else
  return EMBER_INT_BARRIER(static_cast<I>(x));
#endif
}
// Branch-free (vectorizable: two selects, no `||`); a NaN in either argument wins.
template <typename T> static inline T ember_maximum(T a, T b) { T m = a > b ? a : b; return a != a ? a : m; }
template <typename T> static inline T ember_minimum(T a, T b) { T m = a < b ? a : b; return a != a ? a : m; }
// An integer select as a bit blend: b, with the bits where a differs taken from a when c
// holds. gcc 12 leaves a loop scalar where a chain of three or more int64 selects is
// driven by float comparisons (a max pool's indices); the blend it vectorizes.
// where() with both sides evaluated by the caller (a call, not `?:` over loads: see
// Scope._op in kernel.py): gcc 12 and 13 turn `c ? a[i] : b[i]` into masked loads and, in a fully
// unrolled loop, reuse the first vector's mask for the rest (silently wrong values).
template <typename T> static inline T ember_where(bool c, T a, T b) { return c ? a : b; }
template <typename T> static inline T ember_select_bits(bool c, T a, T b) {
  return static_cast<T>(b ^ ((a ^ b) & -static_cast<T>(c)));
}
// A square tile of a kernel reading its loop nest transposed (TRANSPOSE_TILE = 16 a side):
// dst[i][j] = src[i + j * stride] for i < rows, j < cols, so the tile's element loop reads
// dst contiguously. A whole tile of 4-byte values is transposed in vector registers: 16
// row loads, four rounds of two-source shuffles (each swaps the off-diagonal blocks of
// side d), 16 stores; gcc leaves the strided load of the element loop scalar.
typedef float ember_v16f __attribute__((vector_size(64)));
typedef int32_t ember_v16i __attribute__((vector_size(64)));
static inline void ember_swap_blocks(ember_v16f* r, int d, ember_v16i low, ember_v16i high) {
  for (int i = 0; i < 16; ++i) {
    if (i & d) continue;
    const ember_v16f a = r[i], b = r[i + d];
    r[i] = __builtin_shuffle(a, b, low);
    r[i + d] = __builtin_shuffle(a, b, high);
  }
}
template <typename T>
static inline void ember_transpose_tile(T (*dst)[16], const T* src, int64_t stride,
                                        int64_t rows, int64_t cols) {
  if constexpr (sizeof(T) == 4) {
    if (rows == 16 && cols == 16) {
      ember_v16f r[16];
      for (int j = 0; j < 16; ++j) std::memcpy(&r[j], src + j * stride, 64);
      ember_swap_blocks(r, 1, ember_v16i{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                        ember_v16i{1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31});
      ember_swap_blocks(r, 2, ember_v16i{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                        ember_v16i{2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31});
      ember_swap_blocks(r, 4, ember_v16i{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                        ember_v16i{4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31});
      ember_swap_blocks(r, 8, ember_v16i{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                        ember_v16i{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31});
      for (int i = 0; i < 16; ++i) std::memcpy(dst[i], &r[i], 64);
      return;
    }
  }
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) dst[i][j] = src[i + j * stride];
}
template <typename T> static inline T ember_floordiv(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q;
  } else {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
    T floordiv;
    if (div != 0) { floordiv = std::floor(div); if (div - floordiv > T(0.5)) floordiv += T(1); }
    else { floordiv = std::copysign(T(0), a / b); }
    return floordiv;
  }
}
template <typename T> static inline T ember_truncdiv(T a, T b) {
  if (b == 0) return 0;
  return a / b;
}
template <typename T> static inline T ember_remainder(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r;
  } else {
    T r = std::fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r;
  }
}
template <typename T> static inline T ember_fmod(T a, T b) {
  if constexpr (std::is_integral_v<T>) { if (b == 0) return 0; return a % b; }
  else { return std::fmod(a, b); }
}
template <typename T> static inline T ember_ipow(T base, T exp) {
  if (exp < 0) { if (base == 1) return 1; if (base == -1) return (exp & 1) ? -1 : 1; return 0; }
  T result = 1;
  while (exp) { if (exp & 1) result *= base; base *= base; exp >>= 1; }
  return result;
}
// Math library calls go through ember_vm_* (one routine at every position: vector_math.py).
template <typename T> static inline T ember_vm_exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return ember_vm_expf(x); else return ember_vm_exp(x);
}
template <typename T> static inline T ember_sigmoid(T x) { return T(1) / (T(1) + ember_vm_exp_of(-x)); }
// erf: ember_vm_erf for double (glibc's vector erf, at every position); for float an
// inline function gcc vectorizes, within 1.08 ulp of erf over every float (1.32 ulp
// without fused multiply-add), where glibc's AVX-512 vector erff is within 4 ulp and a
// call. Odd in x, so computed on a = |x| and given x's sign (keeps -0 and NaN):
//  - a < 1: a + a * P(a^2), P of degree 6;
//  - a >= 1: 1 - 2^Q(a - 1), Q of degree 5 fitting log2(erfc(a)) on [1, 4] (a clamped to
//    4, past which the nearest float to erf is 1); erfc(a) <= 0.16 there, so the errors of
//    Q and of 2^q reach the result scaled down at least six times.
// 2^q splits q (in [-26, -2.6]) into an integer k, read from the low bits of q + 1.5 * 2^23,
// and f in [-0.5, 0.5]; 2^f is a polynomial of degree 5 and k is added to its exponent.
// The coefficients are weighted minimax fits (Lawson's iteration in float64), rounded to float.
#if defined(__FMA__) || defined(__aarch64__)
#define EMBER_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#else
#define EMBER_FMAF(a, b, c) ((a) * (b) + (c))
#endif
template <typename T> static inline T ember_erf(T x) { return ember_vm_erf(x); }
template <> inline float ember_erf<float>(float x) {
  const float a = std::fabs(x);
  const float s = a * a;
  float p = 7.85382799e-05f;
  p = EMBER_FMAF(p, s, -8.01018439e-04f);
  p = EMBER_FMAF(p, s, 5.18832682e-03f);
  p = EMBER_FMAF(p, s, -2.68538110e-02f);
  p = EMBER_FMAF(p, s, 1.12835854e-01f);
  p = EMBER_FMAF(p, s, -3.76126260e-01f);
  p = EMBER_FMAF(p, s, 1.28379166e-01f);
  const float below_one = EMBER_FMAF(p, a, a);
  const float t = (4.0f < a ? 4.0f : a) - 1.0f;  // NaN stays NaN
  float q = -1.66953402e-03f;
  q = EMBER_FMAF(q, t, 1.30502982e-02f);
  q = EMBER_FMAF(q, t, -5.92148267e-02f);
  q = EMBER_FMAF(q, t, -1.21650982e+00f);
  q = EMBER_FMAF(q, t, -3.80721354e+00f);
  q = EMBER_FMAF(q, t, -2.66841674e+00f);
  const float shifted = q + 12582912.0f;
  const float f = q - (shifted - 12582912.0f);
  float e = 1.32647145e-03f;
  e = EMBER_FMAF(e, f, 9.67151299e-03f);
  e = EMBER_FMAF(e, f, 5.55073395e-02f);
  e = EMBER_FMAF(e, f, 2.40222424e-01f);
  e = EMBER_FMAF(e, f, 6.93147004e-01f);
  e = EMBER_FMAF(e, f, 1.0f);
  int32_t k, bits;
  std::memcpy(&k, &shifted, 4);
  std::memcpy(&bits, &e, 4);
  bits += static_cast<int32_t>(static_cast<uint32_t>(k) << 23);
  float erfc_a;
  std::memcpy(&erfc_a, &bits, 4);
  const float r = a < 1.0f ? below_one : 1.0f - erfc_a;
  return std::copysign(r, x);
}
template <typename T> static inline T ember_sign(T x) { return static_cast<T>((T(0) < x) - (x < T(0))); }
template <typename T> static inline T ember_relu(T x) { return x < T(0) ? T(0) : x; }

template <typename T> struct EmberArgAcc { T value; int64_t index; };
template <typename T> static inline void ember_argmax_update(EmberArgAcc<T>& acc, T v, int64_t i) {
  if (acc.index < 0) { acc.value = v; acc.index = i; return; }
  if (acc.value != acc.value) return;
  if (v != v || v > acc.value) { acc.value = v; acc.index = i; }
}
template <typename T> static inline void ember_argmin_update(EmberArgAcc<T>& acc, T v, int64_t i) {
  if (acc.index < 0) { acc.value = v; acc.index = i; return; }
  if (acc.value != acc.value) return;
  if (v != v || v < acc.value) { acc.value = v; acc.index = i; }
}
// A gathered index checked against its table's size (negative is out of range too):
// the first failure is recorded in status (check number, index, size) for the
// wrapper to raise; the load then reads row 0 so the kernel stays in bounds.
static inline int64_t ember_checked_index(int64_t i, int64_t n, int64_t* status, int64_t check) {
  if (__builtin_expect(static_cast<uint64_t>(i) >= static_cast<uint64_t>(n), 0)) {
    int64_t expected = 0;
    if (__atomic_compare_exchange_n(status, &expected, check, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      status[1] = i; status[2] = n;
    }
    return 0;
  }
  return i;
}
// An integer divisor checked against zero: a zero is recorded in status as check
// `check` for the wrapper to raise ZeroDivisionError, and the division goes on by 1.
template <typename T> static inline T ember_checked_divisor(T b, int64_t* status, int64_t check) {
  if (__builtin_expect(b == 0, 0)) {
    int64_t expected = 0;
    __atomic_compare_exchange_n(status, &expected, check, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return 1;
  }
  return b;
}
struct EmberWelford { double mean = 0; double m2 = 0; double n = 0; };
static inline void ember_welford_update(EmberWelford& acc, double v) {
  acc.n += 1; double delta = v - acc.mean; acc.mean += delta / acc.n; acc.m2 += delta * (v - acc.mean);
}
"""
