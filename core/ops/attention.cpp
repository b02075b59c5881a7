// scaled_dot_product_attention and its gradient, FlashAttention-2 style (Dao, 2023): forward
// keeps, per query row, only the output and lse_i = log Σ_j exp(s_ij); backward recomputes the
// probabilities from q, k and lse instead of reading a stored [L, S] matrix. Per (batch, head),
// with s = q·kᵀ·scale (−inf where the causal mask hides a key), P = softmax_rows(s), Z the
// dropout mask (0, or 1/(1 − p)) and Pd = P ∘ Z:
//   out = Pd·v
//   dv  = Pdᵀ·dout
//   dP  = (dout·vᵀ) ∘ Z
//   dS  = P ∘ (dP − D),  D_i = Σ_j P_ij·dP_ij = dout_i · out_i   (Note [the row term D])
//   dq  = dS·k·scale,  dk = dSᵀ·q·scale
// Note [the row term D]: softmax's gradient subtracts Σ_j P_ij·dP_ij per row. With dropout
// Σ_j P_ij·dP_ij = Σ_j Pd_ij·(dout_i·v_j) = dout_i·out_i, so one dot product of two [Ev] rows
// gives it, with or without a mask.
#include "core/ops/attention.h"

#include <cmath>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

struct AttentionBackward final : Node {
  Tensor q, k, v, out, lse;  // q, k, v [B, H, *, *] as the kernels took them; out [B, H, L, Ev]; lse [B, H, L]
  Shape q_shape, k_shape, v_shape;  // as the caller gave them
  bool causal = false;
  double scale = 1, dropout_p = 0;
  uint64_t seed = 0, offset = 0;
  bool empty_product = false;  // S = 0 or Ev = 0: out is zeros, and so is every gradient
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor dq = zeros(q.shape(), q.options()), dk = zeros(k.shape(), k.options()), dv = zeros(v.shape(), v.options());
    if (!empty_product && q.numel() > 0) {
      const Tensor dout = g.contiguous().reshape(out.shape());  // [B, H, L, Ev]
      backend_for(q.device()).attention_backward(dout, q, k, v, out, lse, causal, scale, dropout_p, seed, offset, dq,
                                                 dk, dv);
    }
    return {dq.reshape(q_shape), dk.reshape(k_shape), dv.reshape(v_shape)};
  }
  void release_saved() override { q = k = v = out = lse = Tensor(); }
  std::string name() const override { return "ScaledDotProductAttentionBackward"; }
};

// x [..., T, D] as the kernels' [B, H, T, D] (B the product of the dims before the last
// three, H the third from last; 1 where x has none), with stride 1 along D. reshape copies only
// when the leading dims cannot merge into one stride, contiguous() only when D is strided.
Tensor as_heads(const Tensor& x) {
  const int r = x.dim();
  int64_t B = 1;
  for (int d = 0; d + 3 < r; ++d) B *= x.shape()[d];
  const int64_t H = r >= 3 ? x.shape()[r - 3] : 1;
  Tensor x4 = x.reshape(Shape{B, H, x.shape()[r - 2], x.shape()[r - 1]});
  if (x4.shape()[3] > 1 && x4.strides()[3] != 1) x4 = x4.contiguous();
  return x4;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                                    Generator* gen, std::optional<double> scale) {
  if (auto cast = autocast::cast_inputs("scaled_dot_product_attention", {&q, &k, &v}))
    return scaled_dot_product_attention((*cast)[0], (*cast)[1], (*cast)[2], causal, dropout_p, gen, scale);
  profiler::RecordScope profile_scope("scaled_dot_product_attention", profiler::Kind::Op, {&q, &k, &v});
  constexpr const char* op = "scaled_dot_product_attention";
  check_defined(q, op, "q");
  check_defined(k, op, "k");
  check_defined(v, op, "v");
  check_same_device({&q, &k, &v}, op);
  MINIDL_CHECK(is_floating(q.dtype()), op, ": q must be a floating dtype (float32, float64, bfloat16, float16), got ", q.dtype(), " with shape ",
               q.shape());
  MINIDL_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op, ": q, k and v must share a dtype, got q ",
               q.dtype(), ", k ", k.dtype(), ", v ", v.dtype());
  MINIDL_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
               ": expected q [..., L, E], k [..., S, E] and v [..., S, Ev] of one rank >= 2, got q ", q.shape(),
               ", k ", k.shape(), ", v ", v.shape());
  const int r = q.dim();
  for (int d = 0; d + 2 < r; ++d)
    MINIDL_CHECK(k.shape()[d] == q.shape()[d] && v.shape()[d] == q.shape()[d], op,
                 ": q, k and v must have equal leading dims (no broadcasting), got q ", q.shape(), ", k ", k.shape(),
                 ", v ", v.shape());
  const int64_t L = q.shape()[r - 2], E = q.shape()[r - 1];
  const int64_t S = k.shape()[r - 2], Ev = v.shape()[r - 1];
  MINIDL_CHECK(k.shape()[r - 1] == E, op, ": k's last dim must equal q's (E = ", E, "), got q ", q.shape(), ", k ",
               k.shape());
  MINIDL_CHECK(v.shape()[r - 2] == S, op, ": v must have as many rows as k (S = ", S, "), got k ", k.shape(), ", v ",
               v.shape());
  MINIDL_CHECK(E >= 1, op, ": expected a head size E >= 1, got q ", q.shape());
  MINIDL_CHECK(dropout_p >= 0 && dropout_p < 1, op, ": dropout_p must be in [0, 1), got ", dropout_p, " (q ",
               q.shape(), ")");
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  MINIDL_CHECK(std::isfinite(sc), op, ": scale must be finite, got ", sc, " (q ", q.shape(), ")");
  check_backend_computes(q, op, "q");
  Backend& backend = backend_for(q.device());
  const int64_t max_head = backend.attention_max_head_size();
  MINIDL_CHECK(E <= max_head && Ev <= max_head, op, ": the ", q.device(), " kernels take head sizes up to ",
               max_head, ", got E = ", E, " (q ", q.shape(), ") and Ev = ", Ev, " (v ", v.shape(), ")");

  const Tensor q4 = as_heads(q.detach()), k4 = as_heads(k.detach()), v4 = as_heads(v.detach());
  const int64_t B = q4.shape()[0], H = q4.shape()[1];
  Shape out_shape = q.shape();
  out_shape[r - 1] = Ev;
  Tensor out = empty(Shape{B, H, L, Ev}, q.options());  // [B, H, L, Ev]
  Tensor lse = empty(Shape{B, H, L}, q.options().with_dtype(compute_dtype(q.dtype())));  // [B, H, L], float32 for 16-bit q
  // The mask's counters: one per (batch..., i, j), by rows of the first dim as dropout draws
  // (Note [random draws of a batch shard] in core/generator.h).
  uint64_t seed = 0, offset = 0;
  if (dropout_p > 0) {
    Generator& g = gen ? *gen : default_generator();
    seed = g.seed();
    const uint64_t per_matrix = static_cast<uint64_t>(L) * static_cast<uint64_t>(S);
    if (r > 2) {
      uint64_t per_row = per_matrix;
      for (int d = 1; d + 2 < r; ++d) per_row *= static_cast<uint64_t>(q.shape()[d]);
      offset = reserve_rows(g, q.shape()[0], per_row);
    } else {
      offset = g.reserve(per_matrix);
    }
  }
  const bool empty_product = S == 0 || Ev == 0;
  if (empty_product) {
    out = zeros(out.shape(), q.options());  // a softmax over no keys, times an empty v: PyTorch's zeros
  } else if (out.numel() > 0) {
    backend.attention_forward(q4, k4, v4, causal, sc, dropout_p, seed, offset, out, lse);
  }
  Tensor y = out.view(out_shape);
  if (autograd::any_requires_grad({&q, &k, &v})) {
    auto node = std::make_shared<AttentionBackward>();
    node->q = q4;
    node->k = k4;
    node->v = v4;
    node->out = out;
    node->lse = lse;
    node->q_shape = q.shape();
    node->k_shape = k.shape();
    node->v_shape = v.shape();
    node->causal = causal;
    node->scale = sc;
    node->dropout_p = dropout_p;
    node->seed = seed;
    node->offset = offset;
    node->empty_product = empty_product;
    autograd::attach(node, {&q, &k, &v}, y);
  }
  return y;
}

}  // namespace minidl::ops
