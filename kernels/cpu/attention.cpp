// CPU scaled dot-product attention (float and double), FlashAttention-2's blocked algorithm
// (core/ops/attention.cpp has the math). Per (b, h), with s_ij = q_i·k_j·scale:
//   forward   for each query block (kBlockQ rows) walk the key blocks (kBlockK keys) with an
//             online softmax: per row a running max m and sum l of exp(s − m); a new block
//             with max m' rescales l and the output accumulator by exp(m − m'). At the end
//             out_i = acc_i / l_i and lse_i = m_i + log l_i. The dropout mask multiplies the
//             probabilities that enter acc, never l (dropout acts after the softmax).
//   backward  one task per (b, h): D_i = dout_i·out_i, then for each key block j the tiles of
//             every query block i: P = exp(s − lse), Pd = P∘Z, dS = P∘((dout·vᵀ)∘Z − D);
//             dV_j += Pdᵀ·dout_i and dK_j += dSᵀ·q_i into the key block's accumulators, and
//             dQ_i += dS·k_j straight into dq (the task owns the head, so no other thread writes
//             there). Additions happen in a fixed order whatever the thread count: the same bits
//             every run.
// Nothing of size [L, S] is allocated: the scratch is a few tiles per thread.
// Speed: the tile products (q·kᵀ and p·v forward; q·kᵀ again, dout·vᵀ, Pdᵀ·dout, dSᵀ·q and dS·k
// backward) are register-tiled (kernels/cpu/tile_product.h), the scores from a transposed copy
// of the key block so that B's rows are contiguous; a product's k runs over a whole key block,
// with the probabilities of keys hidden by the causal mask set to 0. The softmax loops run
// along a row and vectorise. Causal blocks wholly in the future are skipped. (So a non-finite
// k or v at a hidden key of the same 64-key block reaches earlier rows as 0·inf = NaN, as it
// does in PyTorch's softmax-then-P·V; finite values never change a visible row's bits.)
// exp is the other cost (L·S of them forward and again backward): float uses a polynomial that
// vectorises (fast_exp, kernels/cpu/fast_math.h: within 2 ulp), double keeps std::exp.
// Strides: q, k, v rows may be strided on (b, h, row) (views of a fused qkv projection);
// along E/Ev they are contiguous (the op layer's guarantee).
// 16-bit q, k, v (Note [16-bit attention, one head at a time]): each task widens the head it
// works on into float32 buffers of its thread, runs the float32 code above on them and rounds
// its rows of the result; lse is float32 already. The same float32 math as staging whole
// tensors through float32 copies (half_staging.h), so the same bits, but the copies are one
// head's, not the whole batch's: during a GPT's backward, when every activation is still alive,
// that is the difference between a few hundred KiB and tens of MiB of temporaries.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/tile_product.h"

namespace minidl::cpu {

namespace {

constexpr int64_t kBlockQ = 32;  // query rows per tile
constexpr int64_t kBlockK = 64;  // keys per tile

// A per-thread scratch buffer of at least n elements (grown, never shrunk).
template <typename T>
T* scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// The dropout factor of element (row, j) of one head's [L, S] matrix: 0 or 1/(1 − p).
struct DropoutMask {
  uint64_t seed = 0, offset = 0;  // offset: this head's first counter
  int64_t cols = 0;               // S
  float keep = 1;                 // 1 − p
  double inv_keep = 1;
  bool on = false;
  template <typename T>
  T factor(int64_t row, int64_t j) const {
    const float u =
        philox::uniform_float(philox::block_for(seed, offset, static_cast<uint64_t>(row * cols + j)));
    return u < keep ? static_cast<T>(inv_keep) : T(0);
  }
};

// One (b, h) head's operands: element (i, e) of q at q + i·q_row + e, and so on.
template <typename T>
struct Head {
  const T *q, *k, *v;
  int64_t q_row, k_row, v_row;
};

template <typename T>
Head<T> head_of(const Tensor& q, const Tensor& k, const Tensor& v, int64_t bh) {
  const int64_t H = q.shape()[1], b = bh / H, h = bh % H;
  const Shape &sq = q.strides(), &sk = k.strides(), &sv = v.strides();
  return {q.data<T>() + b * sq[0] + h * sq[1], k.data<T>() + b * sk[0] + h * sk[1],
          v.data<T>() + b * sv[0] + h * sv[1], sq[2], sk[2], sv[2]};
}

// kt[e, jj] = k[j0 + jj, e] for jj < nk: the key block transposed, [E, kBlockK].
template <typename T>
void transpose_block(const T* k, int64_t k_row, int64_t j0, int64_t nk, int64_t E, T* kt) {
  for (int64_t jj = 0; jj < nk; ++jj) {
    const T* row = k + (j0 + jj) * k_row;
    for (int64_t e = 0; e < E; ++e) kt[e * kBlockK + jj] = row[e];
  }
}

// Keys of block [j0, j0 + nk) that query row i sees: all nk, or under the causal mask j <= i.
inline int64_t visible_keys(bool causal, int64_t i, int64_t j0, int64_t nk) {
  if (!causal) return nk;
  const int64_t n = i - j0 + 1;
  return n < 0 ? 0 : (n < nk ? n : nk);
}

template <typename T>
void forward_block(const Head<T>& hd, int64_t i0, int64_t nq, int64_t S, int64_t E, int64_t Ev, bool causal, T scale,
                   const DropoutMask& mask, T* out, T* lse) {
  T* kt = scratch<T>(static_cast<size_t>(E * kBlockK + kBlockQ * kBlockK + kBlockQ * Ev + 2 * kBlockQ));
  T* s = kt + E * kBlockK;      // [kBlockQ, kBlockK] scores, then probabilities
  T* acc = s + kBlockQ * kBlockK;  // [kBlockQ, Ev] unnormalised output
  T* m = acc + kBlockQ * Ev;    // [kBlockQ] running max
  T* l = m + kBlockQ;           // [kBlockQ] running sum of exp(s − m)
  for (int64_t ii = 0; ii < nq; ++ii) {
    m[ii] = -std::numeric_limits<T>::infinity();
    l[ii] = 0;
  }
  for (int64_t x = 0; x < nq * Ev; ++x) acc[x] = 0;
  const int64_t s_end = causal ? std::min(S, i0 + nq) : S;  // keys beyond the block's last row are all hidden
  for (int64_t j0 = 0; j0 < s_end; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, s_end - j0);
    transpose_block(hd.k, hd.k_row, j0, nk, E, kt);
    tile_product<T, false>(nq, nk, E, hd.q + i0 * hd.q_row, hd.q_row, 1, kt, kBlockK, s, kBlockK);  // q·kᵀ
    for (int64_t ii = 0; ii < nq; ++ii) {
      const int64_t i = i0 + ii, n = visible_keys(causal, i, j0, nk);
      T* srow = s + ii * kBlockK;
      for (int64_t jj = n; jj < nk; ++jj) srow[jj] = 0;  // hidden keys add 0·v to the row's sums
      if (n == 0) continue;
      T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t jj = 0; jj < n; ++jj) {
        const T x = srow[jj] * scale;
        srow[jj] = x;
        mx = std::max(mx, x);
      }
      const T m_new = std::max(m[ii], mx);
      const T alpha = fast_exp(m[ii] - m_new);  // 0 on the first visible block (m = −inf)
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t jj = 0; jj < n; ++jj) {
        const T p = fast_exp(srow[jj] - m_new);
        srow[jj] = p;
        sum += p;
      }
      l[ii] = l[ii] * alpha + sum;
      m[ii] = m_new;
      T* arow = acc + ii * Ev;
      if (alpha != T(1))
        for (int64_t e = 0; e < Ev; ++e) arow[e] *= alpha;
      if (mask.on)
        for (int64_t jj = 0; jj < n; ++jj) srow[jj] *= mask.factor<T>(i, j0 + jj);
    }
    tile_product<T, true>(nq, Ev, nk, s, kBlockK, 1, hd.v + j0 * hd.v_row, hd.v_row, acc, Ev);  // acc += p·v
  }
  for (int64_t ii = 0; ii < nq; ++ii) {
    const T inv = T(1) / l[ii];
    T* orow = out + (i0 + ii) * Ev;
    const T* arow = acc + ii * Ev;
    for (int64_t e = 0; e < Ev; ++e) orow[e] = arow[e] * inv;
    lse[i0 + ii] = m[ii] + std::log(l[ii]);
  }
}

template <typename T>
void backward_head(const Head<T>& hd, const T* dout, const T* out, const T* lse, int64_t L, int64_t S, int64_t E,
                   int64_t Ev, bool causal, T scale, const DropoutMask& mask, T* dq, T* dk, T* dv) {
  const size_t tile = static_cast<size_t>(kBlockQ * kBlockK);
  T* kt = scratch<T>(static_cast<size_t>((E + Ev) * kBlockK + kBlockK * (E + Ev) + L) + 2 * tile);
  T* vt = kt + E * kBlockK;        // [Ev, kBlockK] the value block transposed
  T* dk_acc = vt + Ev * kBlockK;   // [kBlockK, E]
  T* dv_acc = dk_acc + kBlockK * E;  // [kBlockK, Ev]
  T* D = dv_acc + kBlockK * Ev;    // [L] dout_i·out_i (Note [the row term D])
  T* pd = D + L;                   // [kBlockQ, kBlockK] P∘Z
  T* ds = pd + tile;               // [kBlockQ, kBlockK] dout·vᵀ, then dS
  for (int64_t i = 0; i < L; ++i) {
    T d = 0;
    const T* a = dout + i * Ev;
    const T* b = out + i * Ev;
#pragma omp simd reduction(+ : d)
    for (int64_t e = 0; e < Ev; ++e) d += a[e] * b[e];
    D[i] = d;
  }
  for (int64_t x = 0; x < L * E; ++x) dq[x] = 0;
  for (int64_t j0 = 0; j0 < S; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, S - j0);
    transpose_block(hd.k, hd.k_row, j0, nk, E, kt);
    transpose_block(hd.v, hd.v_row, j0, nk, Ev, vt);
    for (int64_t x = 0; x < nk * E; ++x) dk_acc[x] = 0;
    for (int64_t x = 0; x < nk * Ev; ++x) dv_acc[x] = 0;
    // Query rows before j0 see no key of this block under the causal mask.
    for (int64_t i0 = causal ? j0 : 0; i0 < L; i0 += kBlockQ) {
      const int64_t nq = std::min(kBlockQ, L - i0);
      tile_product<T, false>(nq, nk, E, hd.q + i0 * hd.q_row, hd.q_row, 1, kt, kBlockK, pd, kBlockK);  // q·kᵀ
      tile_product<T, false>(nq, nk, Ev, dout + i0 * Ev, Ev, 1, vt, kBlockK, ds, kBlockK);  // dout·vᵀ
      for (int64_t ii = 0; ii < nq; ++ii) {
        const int64_t i = i0 + ii, n = visible_keys(causal, i, j0, nk);
        T* prow = pd + ii * kBlockK;
        T* drow = ds + ii * kBlockK;
        const T row_lse = lse[i], row_d = D[i];
        if (mask.on) {
          // Pd = P∘Z and dS = P∘(dPd∘Z − D), with dPd = dout·vᵀ in drow.
          for (int64_t jj = 0; jj < n; ++jj) {
            const T z = mask.factor<T>(i, j0 + jj);
            const T p = fast_exp(prow[jj] * scale - row_lse);
            prow[jj] = p * z;
            drow[jj] = p * (drow[jj] * z - row_d);
          }
        } else {
#pragma omp simd
          for (int64_t jj = 0; jj < n; ++jj) {
            const T p = fast_exp(prow[jj] * scale - row_lse);
            prow[jj] = p;
            drow[jj] = p * (drow[jj] - row_d);
          }
        }
        for (int64_t jj = n; jj < nk; ++jj) prow[jj] = drow[jj] = 0;  // hidden keys: no gradient flows
      }
      // dv_j += Pdᵀ·dout_i, dk_j += dSᵀ·q_i (the tiles read transposed: a_row 1, a_col kBlockK),
      // dq_i += dS·k_j (dq is this task's: no other thread writes there).
      tile_product<T, true>(nk, Ev, nq, pd, 1, kBlockK, dout + i0 * Ev, Ev, dv_acc, Ev);
      tile_product<T, true>(nk, E, nq, ds, 1, kBlockK, hd.q + i0 * hd.q_row, hd.q_row, dk_acc, E);
      tile_product<T, true>(nq, E, nk, ds, kBlockK, 1, hd.k + j0 * hd.k_row, hd.k_row, dq + i0 * E, E);
    }
    for (int64_t jj = 0; jj < nk; ++jj) {
      T* dkrow = dk + (j0 + jj) * E;
      T* dvrow = dv + (j0 + jj) * Ev;
      for (int64_t e = 0; e < E; ++e) dkrow[e] = dk_acc[jj * E + e] * scale;
      for (int64_t e = 0; e < Ev; ++e) dvrow[e] = dv_acc[jj * Ev + e];
    }
  }
  for (int64_t x = 0; x < L * E; ++x) dq[x] *= scale;
}

DropoutMask make_mask(double p, uint64_t seed, uint64_t offset, int64_t L, int64_t S) {
  DropoutMask mask;
  mask.on = p > 0;
  mask.seed = seed;
  mask.offset = offset;
  mask.cols = S;
  mask.keep = static_cast<float>(1.0 - p);
  mask.inv_keep = 1.0 / (1.0 - p);
  (void)L;
  return mask;
}

// Note [16-bit attention, one head at a time]: float32 buffers for one head, on this thread.
// Distinct from scratch<float>, which the float32 head code uses while these are live.
float* head_buffer(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// dst[r, :] = src[r·row_stride, :] for rows [begin, end), cols contiguous: 16-bit rows widened.
template <typename H>
void widen_rows(const H* src, int64_t row_stride, int64_t begin, int64_t end, int64_t cols, float* dst) {
  for (int64_t r = begin; r < end; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(src[r * row_stride + c]);
}

// dst[i] = H(src[i]) for i in [begin, end): a result rounded once into 16 bits.
template <typename H>
void round_range(const float* src, int64_t begin, int64_t end, H* dst) {
  for (int64_t i = begin; i < end; ++i) dst[i] = H(src[i]);
}

template <typename H>
void forward_half(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, double dropout_p,
                  uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse) {
  const int64_t BH = q.shape()[0] * q.shape()[1], L = q.shape()[2], E = q.shape()[3];
  const int64_t S = k.shape()[2], Ev = v.shape()[3];
  const int64_t blocks = (L + kBlockQ - 1) / kBlockQ;
  H* po = out.data<H>();
  float* pl = lse.data<float>();  // float32 for 16-bit q (compute_dtype)
  parallel_rows(BH * blocks, BH * L * S * (E + Ev) / (causal ? 2 : 1), [&](int64_t task) {
    const int64_t bh = task / blocks, i0 = (task % blocks) * kBlockQ, nq = std::min(kBlockQ, L - i0);
    const Head<H> h = head_of<H>(q, k, v, bh);
    float* buf = head_buffer(static_cast<size_t>(L * E + S * E + S * Ev + L * Ev));
    float *qf = buf, *kf = qf + L * E, *vf = kf + S * E, *of = vf + S * Ev;
    widen_rows(h.q, h.q_row, i0, i0 + nq, E, qf);  // only the rows this block reads
    widen_rows(h.k, h.k_row, 0, S, E, kf);
    widen_rows(h.v, h.v_row, 0, S, Ev, vf);
    DropoutMask mask = make_mask(dropout_p, seed, offset + static_cast<uint64_t>(bh * L * S), L, S);
    forward_block(Head<float>{qf, kf, vf, E, E, Ev}, i0, nq, S, E, Ev, causal, static_cast<float>(scale), mask, of,
                  pl + bh * L);
    round_range(of, i0 * Ev, (i0 + nq) * Ev, po + bh * L * Ev);
  });
}

template <typename H>
void backward_half(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, bool causal, double scale, double dropout_p, uint64_t seed, uint64_t offset,
                   Tensor& dq, Tensor& dk, Tensor& dv) {
  const int64_t BH = q.shape()[0] * q.shape()[1], L = q.shape()[2], E = q.shape()[3];
  const int64_t S = k.shape()[2], Ev = v.shape()[3];
  const H* pg = dout.data<H>();
  const H* po = out.data<H>();
  const float* pl = lse.data<float>();
  H* pdq = dq.data<H>();
  H* pdk = dk.data<H>();
  H* pdv = dv.data<H>();
  parallel_rows(BH, 2 * BH * L * S * (E + Ev) / (causal ? 2 : 1), [&](int64_t bh) {
    const Head<H> h = head_of<H>(q, k, v, bh);
    float* buf = head_buffer(static_cast<size_t>(2 * L * E + 2 * L * Ev + 2 * S * E + 2 * S * Ev));
    float *qf = buf, *kf = qf + L * E, *vf = kf + S * E, *gf = vf + S * Ev, *of = gf + L * Ev;
    float *dqf = of + L * Ev, *dkf = dqf + L * E, *dvf = dkf + S * E;
    widen_rows(h.q, h.q_row, 0, L, E, qf);
    widen_rows(h.k, h.k_row, 0, S, E, kf);
    widen_rows(h.v, h.v_row, 0, S, Ev, vf);
    widen_rows(pg + bh * L * Ev, Ev, 0, L, Ev, gf);
    widen_rows(po + bh * L * Ev, Ev, 0, L, Ev, of);
    DropoutMask mask = make_mask(dropout_p, seed, offset + static_cast<uint64_t>(bh * L * S), L, S);
    backward_head(Head<float>{qf, kf, vf, E, E, Ev}, gf, of, pl + bh * L, L, S, E, Ev, causal,
                  static_cast<float>(scale), mask, dqf, dkf, dvf);
    round_range(dqf, 0, L * E, pdq + bh * L * E);
    round_range(dkf, 0, S * E, pdk + bh * S * E);
    round_range(dvf, 0, S * Ev, pdv + bh * S * Ev);
  });
}

}  // namespace

int64_t CpuBackend::attention_max_head_size() const { return std::numeric_limits<int64_t>::max(); }

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                                   double dropout_p, uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse) {
  if (is_half(q.dtype())) {  // Note [16-bit attention, one head at a time]
    MINIDL_INTERNAL_ASSERT(out.is_contiguous() && lse.dtype() == DType::Float32);
    if (q.dtype() == DType::BFloat16)
      return forward_half<bfloat16>(q, k, v, causal, scale, dropout_p, seed, offset, out, lse);
    return forward_half<float16>(q, k, v, causal, scale, dropout_p, seed, offset, out, lse);
  }
  dispatch_floating(q.dtype(), "attention_forward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t BH = q.shape()[0] * q.shape()[1], L = q.shape()[2], E = q.shape()[3];
    const int64_t S = k.shape()[2], Ev = v.shape()[3];
    MINIDL_INTERNAL_ASSERT(q.dim() == 4 && out.is_contiguous() && lse.is_contiguous() && S > 0 && E > 0 && Ev > 0);
    const int64_t blocks = (L + kBlockQ - 1) / kBlockQ;
    T* po = out.data<T>();
    T* pl = lse.data<T>();
    parallel_rows(BH * blocks, BH * L * S * (E + Ev) / (causal ? 2 : 1), [&](int64_t task) {
      const int64_t bh = task / blocks, i0 = (task % blocks) * kBlockQ;
      DropoutMask mask = make_mask(dropout_p, seed, offset + static_cast<uint64_t>(bh * L * S), L, S);
      forward_block(head_of<T>(q, k, v, bh), i0, std::min(kBlockQ, L - i0), S, E, Ev, causal, static_cast<T>(scale),
                    mask, po + bh * L * Ev, pl + bh * L);
    });
  });
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, bool causal, double scale, double dropout_p,
                                    uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (is_half(q.dtype())) {  // Note [16-bit attention, one head at a time]
    MINIDL_INTERNAL_ASSERT(dout.is_contiguous() && out.is_contiguous() && lse.dtype() == DType::Float32);
    if (q.dtype() == DType::BFloat16)
      return backward_half<bfloat16>(dout, q, k, v, out, lse, causal, scale, dropout_p, seed, offset, dq, dk, dv);
    return backward_half<float16>(dout, q, k, v, out, lse, causal, scale, dropout_p, seed, offset, dq, dk, dv);
  }
  dispatch_floating(q.dtype(), "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t BH = q.shape()[0] * q.shape()[1], L = q.shape()[2], E = q.shape()[3];
    const int64_t S = k.shape()[2], Ev = v.shape()[3];
    MINIDL_INTERNAL_ASSERT(dout.is_contiguous() && out.is_contiguous() && dq.is_contiguous() && dk.is_contiguous() &&
                           dv.is_contiguous());
    const T* pg = dout.data<T>();
    const T* po = out.data<T>();
    const T* pl = lse.data<T>();
    T* pdq = dq.data<T>();
    T* pdk = dk.data<T>();
    T* pdv = dv.data<T>();
    parallel_rows(BH, 2 * BH * L * S * (E + Ev) / (causal ? 2 : 1), [&](int64_t bh) {
      DropoutMask mask = make_mask(dropout_p, seed, offset + static_cast<uint64_t>(bh * L * S), L, S);
      backward_head(head_of<T>(q, k, v, bh), pg + bh * L * Ev, po + bh * L * Ev, pl + bh * L, L, S, E, Ev, causal,
                    static_cast<T>(scale), mask, pdq + bh * L * E, pdk + bh * S * E, pdv + bh * S * Ev);
    });
  });
}

}  // namespace minidl::cpu
