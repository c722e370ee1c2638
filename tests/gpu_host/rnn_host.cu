// tests/gpu_host/rnn_host.cu - src_gpu/rnn.cu's gate kernels (Elman RNN tanh
// and relu, LSTM, GRU), run on the HOST against the CPU ops (no GPU needed).
//
// Why: there is no GPU in CI, so tests/test_gpu.c skips there and nothing
// would ever execute these kernels. rnn.cu writes the work of one (batch
// row, hidden unit) of a step as __host__ __device__ functions (rnn_fwd_at,
// rnn_bwd_at). This file #includes rnn.cu and drives them through a whole
// recurrence the way ops/rnn.h's device path (dl__rnn_run_gpu,
// dl__rnn_bw_gpu) does, with plain host loops in place of
// its dlg_gemm / dlg_move / dlg_sum_axis calls and of the input projection
// (dl_t_linear), and compares every result with dl.h's CPU ops, which
// rnn_ref.c runs on the same inputs (forward, forward mode, dl_backward).
//
// What it checks, at f32 and at f64, for tanh, relu, LSTM and GRU, with and
// without h0 (and c0), with and without biases, with every row T steps long
// and with rows of different lengths (dl_rnn_args.lengths), on 4 shapes:
//   - y, h_n, c_n and their tangents ty, th_n, tc_n (every input carrying a
//     tangent), with the saved buffers one row per step (as under training);
//   - y, h_n, c_n again with the one-step buffers of a no-grad call (stride
//     0 over time: c and g overwritten in place);
//   - the gradients of x, h0, c0, w_ih, w_hh, b_ih, b_hh for the loss
//     sum(y gy) + sum(h_n ghn) + sum(c_n gcn).
// Outputs the bodies assign start at a value no op gives, so an element left
// unwritten fails. Each check: max |got - want| / (1 + |want|) <= 1e-5 (f32)
// or 1e-12 (f64); both sides round the same formulas, the GEMMs differ in
// their summation order.
//
// What it does NOT check: the launches (grid-stride loops, the kernels'
// argument struct copied to the device), the dlg_* entry points' argument
// checks, and ops/rnn.h's C code itself (dl__rnn_run_gpu and its backward),
// whose steps are mirrored here, not run; tests/test_gpu.c covers those
// where a GPU exists.
//
// Build and run from the repository root:
//   gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -Iinclude -c tests/gpu_host/rnn_ref.c -o B/rnn_ref.o
//   nvcc -std=c++17 -Werror all-warnings -O1 -Iinclude -Isrc_gpu tests/gpu_host/rnn_host.cu B/rnn_ref.o \
//        -o B/rnn_host -lm
//   B/rnn_host
// (B: any build directory; clang works for rnn_ref.c too.) The program only
// runs host code: it calls no CUDA runtime function. The last line is the
// harness's "HARNESS <passed> <failed> <skipped>"; a test is one cell at one
// dtype.
#include "rnn.cu" // src_gpu/rnn.cu (-Isrc_gpu), with its includes
#include "../harness.h"
#include "host_check.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>


// C [M, N] = op(A) op(B) + beta C, row-major, leading dimensions in elements
// (dlg_gemm's contract), summed in double.
template <class T>
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const T *A, int64_t lda, const T *B, int64_t ldb,
                 double beta, T *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++)
        acc += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = (T)(acc + (beta != 0 ? beta * (double)C[i * ldc + j] : 0.0));
    }
}
// dst (+)= src over [R, W], rows dld / sld apart (dlg_move's 2-d form).
template <class T>
static void move(T *dst, int64_t dld, const T *src, int64_t sld, int64_t R, int64_t W, int add) {
  for (int64_t r = 0; r < R; r++)
    for (int64_t j = 0; j < W; j++) dst[r * dld + j] = add ? dst[r * dld + j] + src[r * sld + j] : src[r * sld + j];
}
// y[j] += sum over the R rows of x [R, N] (dlg_sum_axis with accumulate).
template <class T> static void colsum_add(T *y, const T *x, int64_t R, int64_t N) {
  for (int64_t j = 0; j < N; j++) {
    double s = 0;
    for (int64_t r = 0; r < R; r++) s += (double)x[r * N + j];
    y[j] = (T)((double)y[j] + s);
  }
}

struct Shape {
  int64_t B, T, I, H;
};

// One case: cell `kind`, inputs h0 / c0 and the biases present or not.
template <class T>
static void rnn_case(int kind, const Shape &sh, bool has_h0, bool has_bias, bool var_len, bool rb = false) {
  const int dt = sizeof(T) == 8;
  const double tol = dt ? 1e-12 : 1e-5;
  const int64_t B = sh.B, Tn = sh.T, I = sh.I, H = sh.H, G = rnn_gates(kind), GH = G * H;
  const int64_t S = kind == DLG_RNN_LSTM || kind == DLG_RNN_GRU ? 4 : 0;
  const bool lstm = kind == DLG_RNN_LSTM, has_c0 = lstm && has_h0;
  // inputs, their tangents, the upstream gradients
  auto x = hc_rand<T>(B * Tn * I, -1, 1), h0 = hc_rand<T>(B * H, -1, 1), c0 = hc_rand<T>(B * H, -1, 1);
  auto wih = hc_rand<T>(GH * I, -0.6, 0.6), whh = hc_rand<T>(GH * H, -0.6, 0.6);
  auto bih = hc_rand<T>(GH, -0.5, 0.5), bhh = hc_rand<T>(GH, -0.5, 0.5);
  auto tx = hc_rand<T>(B * Tn * I, -1, 1), th0 = hc_rand<T>(B * H, -1, 1), tc0 = hc_rand<T>(B * H, -1, 1);
  auto twih = hc_rand<T>(GH * I, -1, 1), twhh = hc_rand<T>(GH * H, -1, 1);
  auto tbih = hc_rand<T>(GH, -1, 1), tbhh = hc_rand<T>(GH, -1, 1);
  auto gy = hc_rand<T>(B * Tn * H, -1, 1), ghn = hc_rand<T>(B * H, -1, 1), gcn = hc_rand<T>(B * H, -1, 1);
  // variable lengths: row b has 1 + (b * 5 + 2) % T steps (row 0 mid-way, some at 1 and at T)
  std::vector<int64_t> len(B);
  for (int64_t b = 0; b < B; b++) len[b] = 1 + (b * 5 + 2) % Tn;

  // the CPU's results
  std::vector<T> ry(B * Tn * H), rhn(B * H), rcn(B * H), rty(B * Tn * H), rthn(B * H), rtcn(B * H);
  std::vector<T> rgx(B * Tn * I), rgh0(B * H), rgc0(B * H), rgwih(GH * I), rgwhh(GH * H), rgbih(GH), rgbhh(GH);
  {
    rnn_ref_io io;
    memset(&io, 0, sizeof io);
    io.kind = kind;
    io.dt = dt;
    io.B = B; io.T = Tn; io.I = I; io.H = H;
    io.x = x.data(); io.wih = wih.data(); io.whh = whh.data();
    io.tx = tx.data(); io.twih = twih.data(); io.twhh = twhh.data();
    if (has_h0) { io.h0 = h0.data(); io.th0 = th0.data(); }
    if (has_c0) { io.c0 = c0.data(); io.tc0 = tc0.data(); }
    if (has_bias) { io.bih = bih.data(); io.bhh = bhh.data(); io.tbih = tbih.data(); io.tbhh = tbhh.data(); }
    io.gy = gy.data(); io.ghn = ghn.data(); io.gcn = lstm ? gcn.data() : nullptr;
    io.y = ry.data(); io.hn = rhn.data(); io.cn = lstm ? rcn.data() : nullptr;
    io.ty = rty.data(); io.thn = rthn.data(); io.tcn = lstm ? rtcn.data() : nullptr;
    io.gx = rgx.data(); io.gh0 = rgh0.data(); io.gc0 = rgc0.data(); io.gwih = rgwih.data();
    io.gwhh = rgwhh.data(); io.gbih = rgbih.data(); io.gbhh = rgbhh.data();
    io.lengths = var_len ? len.data() : nullptr;
    io.rb = rb;
    rnn_ref(&io);
  }

  // xp = x w_ih^T + b_ih and its tangent (dl_t_linear's part)
  const std::vector<T> zero(GH, (T)0);
  std::vector<T> xp(B * Tn * GH), txp(B * Tn * GH);
  for (int64_t r = 0; r < B * Tn; r++)
    for (int64_t o = 0; o < GH; o++) {
      xp[r * GH + o] = has_bias ? bih[o] : (T)0;
      txp[r * GH + o] = has_bias ? tbih[o] : (T)0;
    }
  gemm<T>(0, 1, B * Tn, GH, I, x.data(), I, wih.data(), I, 1.0, xp.data(), GH);
  gemm<T>(0, 1, B * Tn, GH, I, tx.data(), I, wih.data(), I, 1.0, txp.data(), GH);
  gemm<T>(0, 1, B * Tn, GH, I, x.data(), I, twih.data(), I, 1.0, txp.data(), GH);

  const std::string name = std::string(kind == DLG_RNN_TANH ? "rnn tanh" : kind == DLG_RNN_RELU ? "rnn relu"
                                       : lstm ? "lstm" : "gru") +
                           (dt ? " f64" : " f32") + " B " + std::to_string(B) + " T " + std::to_string(Tn) + " I " +
                           std::to_string(I) + " H " + std::to_string(H) + (has_h0 ? " h0" : "") +
                           (has_bias ? " bias" : "") + (var_len ? " lengths" : "") + (rb ? " reset-before" : "");

  for (int full = 1; full >= 0; full--) { // full: training (every step kept, tangents); 0: a no-grad call
    const bool jvp = full;
    std::vector<T> y(B * Tn * H, (T)kUnset), c(full ? B * Tn * H : B * H, (T)kUnset);
    std::vector<T> g(S ? (full ? B * Tn : B) * S * H : 1, (T)kUnset), s(B * GH), ts(B * GH);
    std::vector<T> ty(B * Tn * H, (T)0), tc(B * H, (T)0);
    std::vector<T> hn(B * H, (T)kUnset), cn(B * H, (T)kUnset), thn(B * H, (T)kUnset), tcn(B * H, (T)kUnset);
    dlg_rnn r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    r.B = B; r.T = Tn; r.H = H;
    r.xp = xp.data();
    r.s = s.data();
    r.bhh = has_bias ? bhh.data() : zero.data();
    r.h0 = has_h0 ? h0.data() : zero.data();
    r.h0_ld = has_h0 ? H : 0;
    r.c0 = has_c0 ? c0.data() : zero.data();
    r.c0_ld = has_c0 ? H : 0;
    r.y = y.data();
    if (lstm) {
      r.c = c.data();
      r.c_lb = full ? Tn * H : H;
      r.c_lt = full ? H : 0;
    } else {
      r.c = (void *)zero.data();
    }
    if (S) {
      r.g = g.data();
      r.g_lb = full ? Tn * S * H : S * H;
      r.g_lt = full ? S * H : 0;
    } else {
      r.g = (void *)zero.data();
    }
    if (jvp) {
      r.ty = ty.data();
      r.ts = ts.data();
      r.txp = txp.data();
      r.txp_lb = Tn * GH;
      r.txp_lt = GH;
      r.tbhh = has_bias ? tbhh.data() : zero.data();
      r.th0 = has_h0 ? th0.data() : zero.data();
      r.th0_ld = has_h0 ? H : 0;
      r.tc = tc.data();
      if (has_c0) tc = tc0;
      r.thn = thn.data();
      if (lstm) r.tcn = tcn.data();
    }
    r.len = var_len ? len.data() : nullptr;
    r.rb = rb;
    std::vector<T> tu(B * H, (T)kUnset);
    if (rb && jvp) r.tu = tu.data();
    r.hn = hn.data(); // the kernel writes h_n (c_n) at each row's last step
    if (lstm) r.cn = cn.data();
    for (int64_t t = 0; t < Tn; t++) {
      const T *hp = t ? y.data() + (t - 1) * H : has_h0 ? h0.data() : nullptr;
      const int64_t ld = t ? Tn * H : H;
      if (hp) gemm<T>(0, 1, B, GH, H, hp, ld, whh.data(), H, 0.0, s.data(), GH);
      else std::fill(s.begin(), s.end(), (T)0);
      if (jvp) { // ts = th_{t-1} w_hh^T + h_{t-1} tw_hh^T
        const T *thp = t ? ty.data() + (t - 1) * H : has_h0 ? th0.data() : nullptr;
        double beta = 0;
        if (thp) {
          gemm<T>(0, 1, B, GH, H, thp, ld, whh.data(), H, 0.0, ts.data(), GH);
          beta = 1;
        }
        if (hp) {
          gemm<T>(0, 1, B, GH, H, hp, ld, twhh.data(), H, beta, ts.data(), GH);
          beta = 1;
        }
        if (beta == 0) std::fill(ts.begin(), ts.end(), (T)0);
      }
      if (rb) { // phase 0, then s_n = u w_hn^T (and ts_n), then phase 1 (ops/rnn.h's device loop)
        const T *u = g.data() + t * r.g_lt + 3 * H;
        r.phase = 0;
        for (int64_t b = 0; b < B; b++)
          for (int64_t j = 0; j < H; j++) rnn_fwd_at<T>(r, t, b, j);
        gemm<T>(0, 1, B, H, H, u, r.g_lb, whh.data() + 2 * H * H, H, 0.0, s.data() + 2 * H, GH);
        if (jvp) {
          gemm<T>(0, 1, B, H, H, tu.data(), H, whh.data() + 2 * H * H, H, 0.0, ts.data() + 2 * H, GH);
          gemm<T>(0, 1, B, H, H, u, r.g_lb, twhh.data() + 2 * H * H, H, 1.0, ts.data() + 2 * H, GH);
        }
        r.phase = 1;
      }
      for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) rnn_fwd_at<T>(r, t, b, j);
    }
    const std::string nm = name + (full ? "" : " (no grad)");
    hc_close(nm + " y", y, ry, tol, false);
    hc_close(nm + " h_n", hn, rhn, tol, false);
    if (lstm) hc_close(nm + " c_n", cn, rcn, tol, false);
    if (!full) break;
    hc_close(nm + " ty", ty, rty, tol, false);
    hc_close(nm + " th_n", thn, rthn, tol, false);
    if (lstm) hc_close(nm + " tc_n", tcn, rtcn, tol, false);

    // backward: the recurrence's rule (dl__rnn_bw_gpu: dh and dc start as
    // h_n's and c_n's gradients), then linear's
    std::vector<T> dx(B * Tn * GH, (T)kUnset), dhs_g(kind == DLG_RNN_GRU ? B * Tn * GH : 1, (T)kUnset);
    std::vector<T> dh = ghn, dc(B * H, (T)0);
    if (lstm) dc = gcn;
    dlg_rnn_bw w;
    w.gy = gy.data();
    w.dx = dx.data();
    w.dhs = kind == DLG_RNN_GRU ? dhs_g.data() : dx.data();
    w.dh = dh.data();
    w.dc = dc.data();
    T *dhs = (T *)w.dhs;
    std::vector<T> du(B * H, (T)kUnset);
    w.du = rb ? du.data() : nullptr;
    for (int64_t t = Tn - 1; t >= 0; t--) {
      if (rb) {
        r.phase = 0;
        for (int64_t b = 0; b < B; b++)
          for (int64_t j = 0; j < H; j++) rnn_bwd_at<T>(r, w, t, b, j);
        gemm<T>(0, 0, B, H, H, dhs + t * GH + 2 * H, Tn * GH, whh.data() + 2 * H * H, H, 0.0, du.data(), H);
        r.phase = 1;
      }
      for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) rnn_bwd_at<T>(r, w, t, b, j);
      if (t > 0 || has_h0)
        gemm<T>(0, 0, B, H, rb ? 2 * H : GH, dhs + t * GH, Tn * GH, whh.data(), H, 1.0, dh.data(), H);
    }
    std::vector<T> gwhh(GH * H, (T)0), gbhh(GH, (T)0), hpm(B * Tn * H, (T)kUnset);
    if (has_h0) move<T>(hpm.data(), Tn * H, h0.data(), H, B, H, 0);
    else std::fill(hpm.begin(), hpm.end(), (T)0);
    if (Tn > 1) move<T>(hpm.data() + H, Tn * H, y.data(), Tn * H, B, (Tn - 1) * H, 0);
    gemm<T>(1, 0, rb ? 2 * H : GH, H, B * Tn, dhs, GH, hpm.data(), H, 1.0, gwhh.data(), H);
    if (rb) gemm<T>(1, 0, H, H, B * Tn, dhs + 2 * H, GH, g.data() + 3 * H, S * H, 1.0, gwhh.data() + 2 * H * H, H);
    colsum_add<T>(gbhh.data(), dhs, B * Tn, GH);
    // linear's backward: gx = dx w_ih, gw_ih = dx^T x, gb_ih = column sums of dx
    std::vector<T> gx(B * Tn * I, (T)0), gwih(GH * I, (T)0), gbih(GH, (T)0);
    gemm<T>(0, 0, B * Tn, I, GH, dx.data(), GH, wih.data(), I, 0.0, gx.data(), I);
    gemm<T>(1, 0, GH, I, B * Tn, dx.data(), GH, x.data(), I, 0.0, gwih.data(), I);
    colsum_add<T>(gbih.data(), dx.data(), B * Tn, GH);
    hc_close(nm + " grad x", gx, rgx, tol, false);
    hc_close(nm + " grad w_ih", gwih, rgwih, tol, false);
    hc_close(nm + " grad w_hh", gwhh, rgwhh, tol, false);
    if (has_bias) {
      hc_close(nm + " grad b_ih", gbih, rgbih, tol, false);
      hc_close(nm + " grad b_hh", gbhh, rgbhh, tol, false);
    }
    if (has_h0) hc_close(nm + " grad h0", dh, rgh0, tol, false);
    if (has_c0) hc_close(nm + " grad c0", dc, rgc0, tol, false);
  }
}

template <class T> static void rnn_cases(int kind) {
  static const Shape shapes[] = {{3, 5, 4, 6}, {1, 1, 2, 3}, {2, 7, 3, 17}, {4, 3, 5, 1}};
  for (const auto &sh : shapes)
    for (int v = 0; v < 8; v++) rnn_case<T>(kind, sh, v & 1, v >> 1 & 1, v >> 2 & 1);
}
static void rnn_tanh_f32(void) { rnn_cases<float>(DLG_RNN_TANH); }
static void rnn_tanh_f64(void) { rnn_cases<double>(DLG_RNN_TANH); }
static void rnn_relu_f32(void) { rnn_cases<float>(DLG_RNN_RELU); }
static void rnn_relu_f64(void) { rnn_cases<double>(DLG_RNN_RELU); }
static void lstm_f32(void) { rnn_cases<float>(DLG_RNN_LSTM); }
static void lstm_f64(void) { rnn_cases<double>(DLG_RNN_LSTM); }
static void gru_f32(void) { rnn_cases<float>(DLG_RNN_GRU); }
static void gru_f64(void) { rnn_cases<double>(DLG_RNN_GRU); }
// the GRU with the reset gate before the product, with and without lengths
template <class T> static void gru_rb_cases(void) {
  static const Shape shapes[] = {{3, 5, 4, 6}, {1, 1, 2, 3}, {2, 7, 3, 17}};
  for (const auto &sh : shapes)
    for (int v = 0; v < 8; v++) rnn_case<T>(DLG_RNN_GRU, sh, v & 1, v >> 1 & 1, v >> 2 & 1, true);
}
static void gru_rb_f32(void) { gru_rb_cases<float>(); }
static void gru_rb_f64(void) { gru_rb_cases<double>(); }

int main(void) {
  RUN(rnn_tanh_f32);
  RUN(rnn_tanh_f64);
  RUN(rnn_relu_f32);
  RUN(rnn_relu_f64);
  RUN(lstm_f32);
  RUN(lstm_f64);
  RUN(gru_f32);
  RUN(gru_f64);
  RUN(gru_rb_f32);
  RUN(gru_rb_f64);
  return harness_finish();
}
