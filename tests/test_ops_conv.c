/* tests/test_ops_conv.c - dl/ops/conv.h: conv1d, conv2d, conv3d (stride,
 * padding, dilation, groups, bias, 1x1), max_pool2d, avg_pool2d,
 * max_pool3d, avg_pool3d.
 *
 * Gradcheck (f64: tape gradient vs central differences, tangent vs a
 * directional difference) for every op and option, on contiguous and
 * strided-view inputs, serially and with the batch split over a team;
 * agreement with PyTorch (tests/fixtures/conv.txt from
 * tools/fixtures_conv.py) in f32 and f64, forward values and gradients;
 * a naive loop on a larger problem; thread-count independence of the
 * forward values and determinism of the gradients; max-pool ties and
 * NaN; the panics, which name the op and the shapes. */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx pctx; /* panics land in the harness; defaults otherwise */
static dl_ctx parctx; /* the same, with the batch split over 2 threads from 1 element of work */
static dl_ctx serctx; /* one thread */

static dl_tensor *mk(dl_dtype dt, int ndim, const int64_t *shape, uint64_t seed) {
  dl_rng r = dl_rng_make(seed);
  dl_tensor *t = dl_tensor_make(&pctx, dt, ndim, shape);
  dl_tensor_rand_uniform(t, &r, -1.0, 1.0);
  return t;
}
static void report(const char *what, int ok, const dl_gradcheck_result *r) {
  CHECK_MSG(ok, "%s: grad_err %.3g (input %d element %lld: analytic %.10g numeric %.10g) jvp_err %.3g",
            what, r->grad_err, r->input, (long long)r->index, r->analytic, r->numeric, r->jvp_err);
}
static double worst_gradcheck;

/* im2col (dl__im2col_f32 / _f64) against its definition, row (c, a, i, j)
 * column (od, oh, ow) = x[c, od sd - pd + a dd, oh sh - ph + i dh, ow sw -
 * pw + j dw] or 0, bit for bit: widths 1 to 37, kernels 1 to 5, strides
 * and dilations 1 and 2, padding 0 to 7 (more than the kernel: rows and
 * columns all padding), 1 to 3 channels, 2-d and 3-d; among them stride-1
 * "same" convolutions (output as wide as the input), which copy the inside
 * rows as one stretch and zero the edge columns afterwards. */
static void test_im2col_kernel(void) {
  static const int64_t sizes[][2] = {{1, 1}, {5, 3}, {14, 14}, {7, 16}, {4, 17}, {9, 33}, {3, 37}};
  int si, k, dt, cases = 0, bad = 0, same = 0;
  for (si = 0; si < 7; si++)
    for (k = 0; k < 96; k++)
      for (dt = 0; dt < 2; dt++) {
        dl__conv_geom g;
        dl_rng r = dl_rng_make(500 + (uint64_t)(si * 96 + k));
        const int three = k % 8 == 7;
        int64_t e, c, a, i, j, od, oh, ow, n;
        double *xd, *cd;
        float *xf, *cf;
        memset(&g, 0, sizeof g);
        g.N = 1;
        g.G = 1;
        g.C = 1 + k % 3;
        g.H = sizes[si][0];
        g.W = sizes[si][1];
        g.kh = 1 + (k / 3) % 3 * 2 - (k % 5 == 0);  /* 1, 3, 5 and 0..4 */
        if (g.kh < 1) g.kh = 1;
        g.kw = 1 + (k / 2) % 5;
        g.sh = 1 + (k / 5) % 2;
        g.sw = 1 + (k / 11) % 4 / 3;                 /* mostly 1: stretch copies among them */
        g.dh = 1 + (k / 7) % 2;
        g.dw = 1 + (k / 13) % 5 / 4;
        g.ph = (k * 7) % 4 + (k % 17 == 3) * 4;      /* up to 7 */
        g.pw = (k * 5) % 3 + (k % 19 == 4) * 4;
        if (three) {
          g.D = 3;
          g.kd = 2;
          g.sd = 1;
          g.dd = 1;
          g.pd = 1;
        }
        g.O = 1;
        if ((g.H + 2 * g.ph - g.dh * (g.kh - 1) - 1) < 0 || (g.W + 2 * g.pw - g.dw * (g.kw - 1) - 1) < 0) continue;
        dl__conv_geom_fill(&g);
        same += g.sw == 1 && g.sh == 1 && g.Wo == g.W;
        n = g.C * g.D * g.H * g.W;
        xd = (double *)malloc(sizeof(double) * (size_t)n);
        xf = (float *)malloc(sizeof(float) * (size_t)n);
        cd = (double *)malloc(sizeof(double) * (size_t)(g.K * g.P));
        cf = (float *)malloc(sizeof(float) * (size_t)(g.K * g.P));
        for (e = 0; e < n; e++) xf[e] = (float)(xd[e] = 1 + (double)(dl_rng_u64(&r) % 1000));
        for (e = 0; e < g.K * g.P; e++) cd[e] = cf[e] = -7; /* every element must be written */
        if (dt) dl__im2col_f64(&g, xd, cd);
        else dl__im2col_f32(&g, xf, cf);
        for (c = 0; c < g.C; c++)
          for (a = 0; a < g.kd; a++)
            for (i = 0; i < g.kh; i++)
              for (j = 0; j < g.kw; j++)
                for (od = 0; od < g.Do; od++)
                  for (oh = 0; oh < g.Ho; oh++)
                    for (ow = 0; ow < g.Wo; ow++) {
                      const int64_t zd = od * g.sd - g.pd + a * g.dd, zh = oh * g.sh - g.ph + i * g.dh;
                      const int64_t zw = ow * g.sw - g.pw + j * g.dw;
                      const int64_t row = ((c * g.kd + a) * g.kh + i) * g.kw + j, colm = (od * g.Ho + oh) * g.Wo + ow;
                      const int in = zd >= 0 && zd < g.D && zh >= 0 && zh < g.H && zw >= 0 && zw < g.W;
                      const double want = in ? xd[(zd * g.H + zh) * g.W + zw + c * g.D * g.H * g.W] : 0;
                      const double got = dt ? cd[row * g.P + colm] : (double)cf[row * g.P + colm];
                      if (got != want && bad++ < 5)
                        CHECK_MSG(0, "%s C %lld D %lld H %lld W %lld k %lldx%lld s %lldx%lld d %lldx%lld p %lldx%lld: row %lld "
                                  "column %lld is %g, not %g", dt ? "f64" : "f32", (long long)g.C, (long long)g.D,
                                  (long long)g.H, (long long)g.W, (long long)g.kh, (long long)g.kw, (long long)g.sh,
                                  (long long)g.sw, (long long)g.dh, (long long)g.dw, (long long)g.ph, (long long)g.pw,
                                  (long long)row, (long long)colm, got, want);
                    }
        cases++;
        free(xd);
        free(xf);
        free(cd);
        free(cf);
      }
  CHECK(bad == 0);
  CHECK_MSG(cases > 1000 && same > 50, "only %d geometries, %d of them stride-1 'same'", cases, same);
}

/* ---- gradcheck ---------------------------------------------------------------- */

typedef struct conv_case {
  const char *name;
  int is1d;
  int64_t n, c, h, w, o, kh, kw;
  dl_conv2d_args a2;
  dl_conv1d_args a1;
  int bias;
} conv_case;

static dl_tensor *f_conv(dl_tape *tp, dl_tensor **in, void *u) {
  const conv_case *cc = (const conv_case *)u;
  if (cc->is1d) return dl_t_conv1d(tp, in[0], in[1], cc->bias ? in[2] : NULL, &cc->a1);
  return dl_t_conv2d(tp, in[0], in[1], cc->bias ? in[2] : NULL, &cc->a2);
}

static void check_conv_case(const conv_case *cc, uint64_t seed) {
  int groups = cc->is1d ? cc->a1.groups : cc->a2.groups, ctxi;
  dl_gradcheck_result r;
  char what[160];
  if (groups == 0) groups = 1;
  for (ctxi = 0; ctxi < 2; ctxi++) {
    dl_ctx *ctx = ctxi ? &parctx : &serctx;
    dl_tensor *in[3];
    int k, nin = cc->bias ? 3 : 2, ok;
    if (cc->is1d) {
      in[0] = mk(DL_F64, DL_SHAPE(cc->n, cc->c, cc->w), seed);
      in[1] = mk(DL_F64, DL_SHAPE(cc->o, cc->c / groups, cc->kw), seed + 1);
    } else {
      in[0] = mk(DL_F64, DL_SHAPE(cc->n, cc->c, cc->h, cc->w), seed);
      in[1] = mk(DL_F64, DL_SHAPE(cc->o, cc->c / groups, cc->kh, cc->kw), seed + 1);
    }
    in[2] = cc->bias ? mk(DL_F64, DL_SHAPE(cc->o), seed + 2) : NULL;
    for (k = 0; k < nin; k++) dl_requires_grad(in[k]);
    ok = dl_gradcheck(ctx, f_conv, (void *)cc, nin, in, 1e-6, 1e-7, &r);
    if (r.max_err > worst_gradcheck) worst_gradcheck = r.max_err;
    snprintf(what, sizeof what, "%s (%s)", cc->name, ctxi ? "2 threads" : "serial");
    report(what, ok, &r);
    CHECK(r.checked == in[0]->numel + in[1]->numel + (cc->bias ? in[2]->numel : 0));
    for (k = 0; k < nin; k++) dl_tensor_free(in[k]);
  }
}

static void test_conv_gradcheck(void) {
  static const conv_case cases[] = {
      {"conv2d basic", 0, 2, 3, 5, 4, 2, 3, 2, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d no bias", 0, 2, 2, 4, 4, 3, 2, 2, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 0},
      {"conv2d stride 2x1", 0, 2, 2, 5, 5, 2, 3, 3, {2, 1, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d padding 1x2", 0, 2, 2, 4, 3, 2, 3, 3, {0, 0, 1, 2, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d dilation 2x3", 0, 1, 2, 6, 7, 2, 2, 2, {0, 0, 0, 0, 2, 3, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d groups 2", 0, 2, 4, 4, 4, 4, 3, 3, {0, 0, 1, 1, 0, 0, 2, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d depthwise", 0, 2, 3, 4, 4, 3, 3, 3, {0, 0, 1, 1, 0, 0, 3, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 0},
      {"conv2d 1x1 (direct)", 0, 2, 3, 3, 4, 4, 1, 1, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d 1x1 groups", 0, 2, 4, 3, 3, 2, 1, 1, {0, 0, 0, 0, 0, 0, 2, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d 1x1 stride 2", 0, 2, 2, 5, 4, 3, 1, 1, {2, 2, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d everything", 0, 2, 4, 7, 6, 2, 3, 2, {2, 3, 2, 1, 2, 1, 2, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d padding > kernel", 0, 1, 1, 2, 2, 2, 2, 2, {0, 0, 3, 2, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv1d basic", 1, 2, 3, 1, 8, 2, 1, 3, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv1d no bias", 1, 2, 2, 1, 6, 3, 1, 2, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 0},
      {"conv1d stride pad dil groups", 1, 2, 4, 1, 11, 4, 1, 3, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 1, 2, 2, 0, 0}, 1},
      {"conv1d 1x1", 1, 2, 3, 1, 5, 2, 1, 1, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      /* pad_mode: uneven padding through a padded copy of x */
      {"conv2d explicit pads 0,2 / 1,0", 0, 2, 2, 5, 4, 2, 3, 2, {2, 1, 0, 1, 0, 0, 0, DL_PAD_EXPLICIT, 2, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d explicit pads 1,1 / 2,2 (even)", 0, 1, 2, 4, 4, 2, 3, 3, {0, 0, 1, 2, 0, 0, 0, DL_PAD_EXPLICIT, 1, 2}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d SAME stride 2 (odd sizes)", 0, 2, 2, 5, 7, 2, 3, 3, {2, 2, 0, 0, 0, 0, 0, DL_PAD_SAME, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv2d SAME dilated groups", 0, 1, 4, 6, 5, 2, 2, 3, {1, 2, 0, 0, 2, 1, 2, DL_PAD_SAME, 0, 0}, {0, 0, 0, 0, 0, 0}, 0},
      {"conv2d SAME_LOWER 4x4 stride 3", 0, 1, 2, 7, 8, 2, 4, 4, {3, 3, 0, 0, 0, 0, 0, DL_PAD_SAME_LOWER, 0, 0}, {0, 0, 0, 0, 0, 0}, 1},
      {"conv1d SAME stride 2", 1, 2, 3, 1, 9, 2, 1, 4, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 0, 0, 0, DL_PAD_SAME, 0}, 1},
      {"conv1d explicit pads 3,1", 1, 1, 2, 1, 6, 2, 1, 3, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 3, 1, 0, DL_PAD_EXPLICIT, 1}, 1},
  };
  size_t k;
  for (k = 0; k < sizeof cases / sizeof cases[0]; k++) check_conv_case(&cases[k], 100 + 10 * k);
}

/* Strided views for x, w and b: x a transposed view, w a permuted view,
 * b every other element of a longer vector; and with NULL args. */
static dl_tensor *f_conv_views(dl_tape *tp, dl_tensor **in, void *u) {
  dl_conv2d_args a = {2, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  (void)u;
  return dl_t_conv2d(tp, in[0], in[1], in[2], &a);
}
static dl_tensor *f_conv1d_views(dl_tape *tp, dl_tensor **in, void *u) {
  (void)u;
  return dl_t_conv1d(tp, in[0], in[1], in[2], NULL);
}
static void test_conv_gradcheck_views(void) {
  int ctxi;
  for (ctxi = 0; ctxi < 2; ctxi++) {
    dl_ctx *ctx = ctxi ? &parctx : &serctx;
    dl_gradcheck_result r;
    dl_tensor *xb = mk(DL_F64, DL_SHAPE(2, 3, 4, 5), 7);       /* viewed as [2, 3, 5, 4] */
    dl_tensor *wb = mk(DL_F64, DL_SHAPE(3, 3, 3, 2), 8);       /* [kw, C, kh, O] -> [O, C, kh, kw] */
    dl_tensor *bb = mk(DL_F64, DL_SHAPE(4), 9);                /* elements 0 and 2 */
    dl_tensor xv = dl_view_transpose(xb, 2, 3), wv, bv = dl_view_slice(bb, 0, 0, 4, 2);
    static const int perm[4] = {3, 1, 2, 0};
    dl_tensor *in[3];
    int ok;
    wv = dl_view_permute(wb, perm);
    CHECK(!dl_tensor_is_contiguous(&xv) && !dl_tensor_is_contiguous(&wv) && !dl_tensor_is_contiguous(&bv));
    in[0] = &xv;
    in[1] = &wv;
    in[2] = &bv;
    dl_requires_grad(in[0]);
    dl_requires_grad(in[1]);
    dl_requires_grad(in[2]);
    ok = dl_gradcheck(ctx, f_conv_views, NULL, 3, in, 1e-6, 1e-7, &r);
    if (r.max_err > worst_gradcheck) worst_gradcheck = r.max_err;
    report(ctxi ? "conv2d strided views (2 threads)" : "conv2d strided views", ok, &r);
    dl_tensor_free(xv.grad);
    dl_tensor_free(wv.grad);
    dl_tensor_free(bv.grad);
    dl_tensor_free(xb);
    dl_tensor_free(wb);
    dl_tensor_free(bb);
    { /* conv1d: x [N, L, C] transposed to [N, C, L] */
      dl_tensor *x1 = mk(DL_F64, DL_SHAPE(2, 7, 3), 11), *w1 = mk(DL_F64, DL_SHAPE(2, 3, 3), 12);
      dl_tensor *b1 = mk(DL_F64, DL_SHAPE(2), 13), x1v = dl_view_transpose(x1, 1, 2);
      in[0] = &x1v;
      in[1] = w1;
      in[2] = b1;
      dl_requires_grad(in[0]);
      dl_requires_grad(in[1]);
      dl_requires_grad(in[2]);
      ok = dl_gradcheck(ctx, f_conv1d_views, NULL, 3, in, 1e-6, 1e-7, &r);
      if (r.max_err > worst_gradcheck) worst_gradcheck = r.max_err;
      report("conv1d strided view, NULL args", ok, &r);
      dl_tensor_free(x1v.grad);
      dl_tensor_free(x1);
      dl_tensor_free(w1);
      dl_tensor_free(b1);
    }
  }
}

/* Only some inputs require a gradient (the others still carry tangents in
 * the forward-mode half of gradcheck only when they require one). */
static void test_conv_gradcheck_partial(void) {
  static const conv_case cc = {"conv2d", 0, 2, 3, 5, 5, 2, 3, 3, {1, 2, 1, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}, 1};
  int which;
  for (which = 0; which < 3; which++) {
    dl_gradcheck_result r;
    dl_tensor *in[3];
    char what[64];
    int ok;
    in[0] = mk(DL_F64, DL_SHAPE(2, 3, 5, 5), 21);
    in[1] = mk(DL_F64, DL_SHAPE(2, 3, 3, 3), 22);
    in[2] = mk(DL_F64, DL_SHAPE(2), 23);
    dl_requires_grad(in[which]);
    ok = dl_gradcheck(&parctx, f_conv, (void *)&cc, 3, in, 1e-6, 1e-7, &r);
    if (r.max_err > worst_gradcheck) worst_gradcheck = r.max_err;
    snprintf(what, sizeof what, "conv2d, only input %d requires grad", which);
    report(what, ok, &r);
    CHECK(r.checked == in[which]->numel);
    CHECK(in[(which + 1) % 3]->grad == NULL && in[(which + 2) % 3]->grad == NULL);
    dl_tensor_free(in[0]);
    dl_tensor_free(in[1]);
    dl_tensor_free(in[2]);
  }
}

typedef struct pool_case {
  const char *name;
  int is_max; /* 1 max, 0 avg, 2 max with indices then max_unpool2d (the same window) */
  int64_t n, c, h, w;
  dl_pool2d_args a;
  int out_h, out_w; /* unpooling's output size, 0: its default */
} pool_case;
static dl_tensor *f_pool(dl_tape *tp, dl_tensor **in, void *u) {
  const pool_case *pc = (const pool_case *)u;
  if (pc->is_max == 2) {
    dl_tensor *idx = NULL, *y = dl_t_max_pool2d_with_indices(tp, in[0], &pc->a, &idx);
    const dl_unpool2d_args ua = {pc->a.kernel_h, pc->a.kernel_w, pc->a.stride_h, pc->a.stride_w,
                                 pc->a.pad_h,    pc->a.pad_w,    pc->out_h,      pc->out_w};
    return dl_t_max_unpool2d(tp, y, idx, &ua);
  }
  return pc->is_max ? dl_t_max_pool2d(tp, in[0], &pc->a) : dl_t_avg_pool2d(tp, in[0], &pc->a);
}
/* distinct values, at least 0.01 apart: the argmax does not move under the
 * finite-difference step */
static void distinct(dl_tensor *t, uint64_t seed) {
  int64_t i, n = t->numel;
  dl_rng r = dl_rng_make(seed);
  for (i = 0; i < n; i++) dl__set_at(t, dl__offset_of_linear(t, i), 0.01 * (double)i - 0.005 * (double)n);
  for (i = n - 1; i > 0; i--) { /* shuffle */
    int64_t j = (int64_t)dl_rng_below(&r, (uint64_t)(i + 1));
    int64_t oi = dl__offset_of_linear(t, i), oj = dl__offset_of_linear(t, j);
    double a = dl__get_at(t, oi), b = dl__get_at(t, oj);
    dl__set_at(t, oi, b);
    dl__set_at(t, oj, a);
  }
}
static void test_pool_gradcheck(void) {
  /* the window: kernel, stride, padding, exclude_pad, dilation, ceil_mode, pad_mode, padding at the end */
#define PA(kh, kw, sh, sw, ph, pw, ex, dh, dw, ceil, mode, phe, pwe) {kh, kw, sh, sw, ph, pw, ex, dh, dw, ceil, mode, phe, pwe}
  static const pool_case cases[] = {
      {"max_pool2d k2", 1, 2, 3, 4, 5, PA(2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0, 0},
      {"max_pool2d k3 s2 p1", 1, 2, 2, 5, 6, PA(3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0), 0, 0},
      {"max_pool2d k3x2 s1x2 p1x1", 1, 1, 2, 5, 6, PA(3, 2, 1, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0), 0, 0},
      {"max_pool2d overlapping k3 s1", 1, 1, 2, 4, 4, PA(3, 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0, 0},
      {"max_pool2d dilation 2x3 p1", 1, 1, 2, 7, 8, PA(3, 2, 1, 2, 1, 1, 0, 2, 3, 0, 0, 0, 0), 0, 0},
      {"max_pool2d ceil_mode k3 s2", 1, 2, 2, 6, 7, PA(3, 3, 2, 2, 0, 1, 0, 0, 0, 1, 0, 0, 0), 0, 0},
      {"max_pool2d ceil_mode dilated", 1, 1, 2, 8, 7, PA(2, 3, 3, 2, 1, 1, 0, 2, 1, 1, 0, 0, 0), 0, 0},
      {"max_pool2d explicit pads 0,2 / 1,0", 1, 1, 2, 5, 6, PA(3, 2, 2, 2, 0, 1, 0, 0, 0, 0, DL_PAD_EXPLICIT, 2, 0), 0, 0},
      {"max_pool2d SAME k2 s2 (odd)", 1, 1, 2, 5, 7, PA(2, 2, 0, 0, 0, 0, 0, 0, 0, 0, DL_PAD_SAME, 0, 0), 0, 0},
      {"max_pool2d SAME k3 s1 dilated", 1, 1, 2, 5, 6, PA(3, 3, 1, 1, 0, 0, 0, 2, 1, 0, DL_PAD_SAME, 0, 0), 0, 0},
      {"max_pool2d SAME_LOWER k4 s3", 1, 1, 2, 7, 8, PA(4, 4, 3, 3, 0, 0, 0, 0, 0, 0, DL_PAD_SAME_LOWER, 0, 0), 0, 0},
      {"avg_pool2d k2", 0, 2, 3, 4, 5, PA(2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0, 0},
      {"avg_pool2d k3 s2 p1", 0, 2, 2, 5, 6, PA(3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0), 0, 0},
      {"avg_pool2d k3 s2 p1 exclude_pad", 0, 2, 2, 5, 6, PA(3, 3, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0), 0, 0},
      {"avg_pool2d k3x2 s1x2 p1x1 exclude_pad", 0, 1, 2, 5, 6, PA(3, 2, 1, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0), 0, 0},
      {"avg_pool2d ceil_mode k3 s2 p1", 0, 1, 2, 6, 7, PA(3, 3, 2, 2, 1, 1, 0, 0, 0, 1, 0, 0, 0), 0, 0},
      {"avg_pool2d ceil_mode exclude_pad", 0, 1, 2, 6, 7, PA(3, 2, 2, 2, 1, 0, 1, 0, 0, 1, 0, 0, 0), 0, 0},
      {"avg_pool2d explicit pads 2,0 / 0,1", 0, 1, 2, 5, 6, PA(3, 2, 2, 1, 2, 0, 0, 0, 0, 0, DL_PAD_EXPLICIT, 0, 1), 0, 0},
      {"avg_pool2d SAME k3 s2 exclude_pad", 0, 1, 2, 6, 5, PA(3, 3, 2, 2, 0, 0, 1, 0, 0, 0, DL_PAD_SAME, 0, 0), 0, 0},
      {"max_unpool2d k2", 2, 2, 2, 4, 6, PA(2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0, 0},
      {"max_unpool2d k3 s2 p1 out 5x6", 2, 1, 2, 5, 6, PA(3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0), 5, 6},
      {"max_unpool2d overlapping k3 s1 (repeated indices)", 2, 1, 2, 5, 5, PA(3, 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0, 0},
  };
#undef PA
  size_t k;
  int ctxi;
  for (k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (ctxi = 0; ctxi < 3; ctxi++) {
      const pool_case *pc = &cases[k];
      dl_gradcheck_result r;
      dl_tensor *base, *in[1], view;
      char what[128];
      int ok;
      if (ctxi == 2) { /* a transposed view: base [N, C, W, H] */
        base = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(pc->n, pc->c, pc->w, pc->h));
        view = dl_view_transpose(base, 2, 3);
        in[0] = &view;
      } else {
        base = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(pc->n, pc->c, pc->h, pc->w));
        in[0] = base;
      }
      distinct(in[0], 300 + k);
      dl_requires_grad(in[0]);
      ok = dl_gradcheck(ctxi == 1 ? &parctx : &serctx, f_pool, (void *)pc, 1, in, 1e-6, 1e-7, &r);
      if (r.max_err > worst_gradcheck) worst_gradcheck = r.max_err;
      snprintf(what, sizeof what, "%s (%s)", pc->name, ctxi == 0 ? "serial" : ctxi == 1 ? "2 threads" : "strided view");
      report(what, ok, &r);
      if (ctxi == 2) dl_tensor_free(view.grad);
      dl_tensor_free(base);
    }
}

/* ---- 3-d convolution and pooling --------------------------------------------- */

typedef struct conv3d_case {
  const char *name;
  int64_t n, c, d, h, w, o, kd, kh, kw;
  dl_conv3d_args a;
  int bias, view; /* view: x a strided view (depth and width swapped), w permuted, b every other */
} conv3d_case;
static dl_tensor *f_conv3d(dl_tape *tp, dl_tensor **in, void *u) {
  const conv3d_case *cc = (const conv3d_case *)u;
  return dl_t_conv3d(tp, in[0], in[1], cc->bias ? in[2] : NULL, &cc->a);
}
static void test_conv3d_gradcheck(void) {
  /* stride d h w, padding d h w, dilation d h w, groups, pad_mode, end padding d h w */
  static const conv3d_case cases[] = {
      {"conv3d basic", 2, 3, 4, 3, 4, 2, 2, 2, 3, {0}, 1, 0},
      {"conv3d no bias, odd sizes", 1, 2, 5, 3, 3, 3, 3, 1, 2, {0}, 0, 0},
      {"conv3d stride 2x1x2 padding 1x2x1", 2, 2, 5, 4, 5, 2, 3, 3, 2, {2, 1, 2, 1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 0},
      {"conv3d dilation 2x1x3", 1, 2, 6, 4, 7, 2, 2, 2, 2, {0, 0, 0, 1, 0, 1, 2, 1, 3, 0, 0, 0, 0, 0}, 1, 0},
      {"conv3d groups 2", 2, 4, 3, 4, 3, 4, 2, 3, 2, {0, 0, 0, 1, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0}, 1, 0},
      {"conv3d depthwise", 1, 3, 3, 3, 4, 3, 2, 2, 2, {0, 0, 0, 0, 1, 1, 0, 0, 0, 3, 0, 0, 0, 0}, 0, 0},
      {"conv3d 1x1x1 (direct)", 2, 3, 2, 3, 3, 2, 1, 1, 1, {0}, 1, 0},
      {"conv3d 1x1x1 stride 2", 1, 2, 5, 3, 4, 2, 1, 1, 1, {2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 0},
      {"conv3d everything", 1, 4, 7, 6, 5, 2, 3, 2, 3, {2, 3, 1, 2, 1, 1, 2, 1, 2, 2, 0, 0, 0, 0}, 1, 0},
      {"conv3d padding > kernel (depth)", 1, 1, 2, 2, 2, 2, 2, 2, 2, {0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 0},
      {"conv3d explicit pads d 1,0 h 0,2", 1, 2, 4, 4, 3, 2, 2, 3, 2, {1, 2, 1, 1, 0, 0, 0, 0, 0, 0, DL_PAD_EXPLICIT, 0, 2, 1}, 1, 0},
      {"conv3d SAME stride 2", 1, 2, 5, 4, 5, 2, 3, 2, 3, {2, 1, 2, 0, 0, 0, 0, 0, 0, 0, DL_PAD_SAME, 0, 0, 0}, 1, 0},
      {"conv3d strided views", 2, 2, 4, 3, 5, 3, 2, 2, 3, {1, 1, 2, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 1},
  };
  size_t k;
  int ctxi, j;
  for (k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (ctxi = 0; ctxi < 2; ctxi++) {
      const conv3d_case *cc = &cases[k];
      const int64_t groups = cc->a.groups ? cc->a.groups : 1;
      dl_ctx *ctx = ctxi ? &parctx : &serctx;
      dl_tensor *base[3] = {NULL, NULL, NULL}, views[3], *in[3];
      dl_gradcheck_result r;
      char what[160];
      int nin = cc->bias ? 3 : 2, ok;
      const uint64_t seed = 700 + 10 * k;
      if (cc->view) {
        base[0] = mk(DL_F64, DL_SHAPE(cc->n, cc->c, cc->w, cc->h, cc->d), seed);
        base[1] = mk(DL_F64, DL_SHAPE(cc->kw, cc->kh, cc->kd, cc->c / groups, cc->o), seed + 1);
        base[2] = mk(DL_F64, DL_SHAPE(2 * cc->o), seed + 2);
        views[0] = dl_view_transpose(base[0], 2, 4);
        views[1] = dl_view_permute(base[1], (const int[]){4, 3, 2, 1, 0});
        views[2] = dl_view_slice(base[2], 0, 0, 2 * cc->o, 2);
        for (j = 0; j < 3; j++) in[j] = &views[j];
        CHECK(!dl_tensor_is_contiguous(in[0]) && !dl_tensor_is_contiguous(in[1]) && !dl_tensor_is_contiguous(in[2]));
      } else {
        in[0] = base[0] = mk(DL_F64, DL_SHAPE(cc->n, cc->c, cc->d, cc->h, cc->w), seed);
        in[1] = base[1] = mk(DL_F64, DL_SHAPE(cc->o, cc->c / groups, cc->kd, cc->kh, cc->kw), seed + 1);
        in[2] = base[2] = cc->bias ? mk(DL_F64, DL_SHAPE(cc->o), seed + 2) : NULL;
      }
      for (j = 0; j < nin; j++) dl_requires_grad(in[j]);
      ok = dl_gradcheck(ctx, f_conv3d, (void *)cc, nin, in, 1e-6, 1e-7, &r);
      if (r.max_err > worst_gradcheck) worst_gradcheck = r.max_err;
      snprintf(what, sizeof what, "%s (%s)", cc->name, ctxi ? "2 threads" : "serial");
      report(what, ok, &r);
      CHECK(r.checked == in[0]->numel + in[1]->numel + (cc->bias ? in[2]->numel : 0));
      for (j = 0; j < 3; j++) {
        if (cc->view) dl_tensor_free(views[j].grad);
        dl_tensor_free(base[j]);
      }
    }
}

typedef struct pool3d_case {
  const char *name;
  int is_max;
  int64_t n, c, d, h, w;
  dl_pool3d_args a;
} pool3d_case;
static dl_tensor *f_pool3d(dl_tape *tp, dl_tensor **in, void *u) {
  const pool3d_case *pc = (const pool3d_case *)u;
  return pc->is_max ? dl_t_max_pool3d(tp, in[0], &pc->a) : dl_t_avg_pool3d(tp, in[0], &pc->a);
}
static void test_pool3d_gradcheck(void) {
  /* kernel d h w, stride d h w, padding d h w, exclude_pad, dilation d h w, ceil_mode */
  static const pool3d_case cases[] = {
      {"max_pool3d k2", 1, 2, 2, 4, 4, 5, {2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
      {"max_pool3d k3 s2 p1", 1, 1, 2, 5, 5, 6, {3, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0}},
      {"max_pool3d overlapping k2x3x2 s1", 1, 1, 2, 3, 4, 4, {2, 3, 2, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0}},
      {"max_pool3d dilation 2x2x3 p1", 1, 1, 1, 6, 7, 7, {2, 3, 2, 1, 2, 1, 1, 0, 1, 0, 2, 2, 3, 0}},
      {"max_pool3d ceil_mode", 1, 1, 2, 5, 6, 7, {2, 3, 3, 2, 2, 2, 0, 0, 1, 0, 0, 0, 0, 1}},
      {"avg_pool3d k2", 0, 2, 2, 4, 4, 5, {2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
      {"avg_pool3d k3 s2 p1", 0, 1, 2, 5, 5, 6, {3, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0}},
      {"avg_pool3d k3 s2 p1 exclude_pad", 0, 1, 2, 5, 5, 6, {3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0}},
      {"avg_pool3d ceil_mode p1", 0, 1, 2, 5, 6, 7, {3, 2, 3, 2, 2, 2, 1, 0, 1, 0, 0, 0, 0, 1}},
      {"avg_pool3d ceil_mode exclude_pad", 0, 1, 2, 6, 5, 7, {2, 3, 3, 2, 2, 2, 0, 1, 1, 1, 0, 0, 0, 1}},
  };
  size_t k;
  int ctxi;
  for (k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (ctxi = 0; ctxi < 3; ctxi++) {
      const pool3d_case *pc = &cases[k];
      dl_gradcheck_result r;
      dl_tensor *base, *in[1], view;
      char what[128];
      int ok;
      if (ctxi == 2) { /* a strided view: base [N, C, W, H, D] */
        base = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(pc->n, pc->c, pc->w, pc->h, pc->d));
        view = dl_view_transpose(base, 2, 4);
        in[0] = &view;
      } else {
        base = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(pc->n, pc->c, pc->d, pc->h, pc->w));
        in[0] = base;
      }
      distinct(in[0], 900 + k);
      dl_requires_grad(in[0]);
      ok = dl_gradcheck(ctxi == 1 ? &parctx : &serctx, f_pool3d, (void *)pc, 1, in, 1e-6, 1e-7, &r);
      if (r.max_err > worst_gradcheck) worst_gradcheck = r.max_err;
      snprintf(what, sizeof what, "%s (%s)", pc->name, ctxi == 0 ? "serial" : ctxi == 1 ? "2 threads" : "strided view");
      report(what, ok, &r);
      CHECK(r.checked == in[0]->numel);
      if (ctxi == 2) dl_tensor_free(view.grad);
      dl_tensor_free(base);
    }
}

/* conv3d and the 3-d pools: forward values bit for bit the same serially and
 * with the batch split over 2 threads; gradients of x and b too, and grad_w
 * the same run after run; a window with NaN and ties takes the NaN / the
 * first maximum (PyTorch's rule), in depth-row-column scan order. */
static void test_3d_threads_ties(void) {
  dl_tensor *x = mk(DL_F32, DL_SHAPE(4, 4, 5, 6, 5), 81), *w = mk(DL_F32, DL_SHAPE(6, 2, 3, 3, 2), 82);
  dl_tensor *b = mk(DL_F32, DL_SHAPE(6), 83), *ys[3], *gx[3], *gw[3];
  const dl_conv3d_args a = {.stride_d = 2, .pad_d = 1, .pad_h = 1, .pad_w = 1, .dil_w = 2, .groups = 2};
  dl_ctx *ctxs[3] = {&serctx, &parctx, &parctx};
  int k;
  dl_requires_grad(x);
  dl_requires_grad(w);
  dl_requires_grad(b);
  for (k = 0; k < 3; k++) {
    dl_tape tp;
    dl_tensor *y;
    dl_tape_init(&tp, ctxs[k], 0);
    y = dl_t_conv3d(&tp, x, w, b, &a);
    y = dl_t_max_pool3d(&tp, y, &(dl_pool3d_args){.kernel_d = 2, .kernel_h = 2, .kernel_w = 2, .stride_d = 1,
                                                  .ceil_mode = 1});
    y = dl_t_avg_pool3d(&tp, y, &(dl_pool3d_args){.kernel_d = 1, .kernel_h = 2, .kernel_w = 1, .pad_h = 1});
    ys[k] = dl_tensor_make(&pctx, DL_F32, y->ndim, y->shape);
    dl_tensor_copy(ys[k], y);
    dl_zero_grad(x);
    dl_zero_grad(w);
    dl_backward(&tp, dl_t_sum(&tp, dl_t_mul(&tp, y, y), 0, NULL, 0), NULL);
    gx[k] = dl_tensor_make(&pctx, DL_F32, x->ndim, x->shape);
    gw[k] = dl_tensor_make(&pctx, DL_F32, w->ndim, w->shape);
    dl_tensor_copy(gx[k], x->grad);
    dl_tensor_copy(gw[k], w->grad);
    dl_tape_free(&tp);
  }
  CHECK(ys[0]->numel > 0 && !memcmp(ys[0]->data, ys[1]->data, (size_t)ys[0]->numel * sizeof(float)));
  CHECK(!memcmp(gx[0]->data, gx[1]->data, (size_t)gx[0]->numel * sizeof(float)));
  CHECK(!memcmp(gw[1]->data, gw[2]->data, (size_t)gw[1]->numel * sizeof(float)));
  for (k = 0; k < 3; k++) {
    dl_tensor_free(ys[k]);
    dl_tensor_free(gx[k]);
    dl_tensor_free(gw[k]);
  }
  { /* one window of 2x2x2: ties at (0,0,1) and (1,0,0) -> the first in scan order; then a NaN wins */
    dl_tensor *v = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(1, 1, 2, 2, 2)), *y;
    dl_tape tp;
    int i;
    for (i = 0; i < 8; i++) dl_f64(v)[i] = -1;
    dl_f64(v)[1] = dl_f64(v)[4] = 3;
    dl_requires_grad(v);
    dl_tape_init(&tp, &pctx, 0);
    y = dl_t_max_pool3d(&tp, v, &(dl_pool3d_args){.kernel_d = 2, .kernel_h = 2, .kernel_w = 2});
    dl_backward(&tp, y, NULL);
    CHECK(dl_f64(y)[0] == 3 && dl_f64(v->grad)[1] == 1 && dl_f64(v->grad)[4] == 0);
    dl_tape_rewind(&tp);
    dl_zero_grad(v);
    dl_f64(v)[6] = NAN;
    y = dl_t_max_pool3d(&tp, v, &(dl_pool3d_args){.kernel_d = 2, .kernel_h = 2, .kernel_w = 2});
    dl_backward(&tp, y, NULL);
    CHECK(isnan(dl_f64(y)[0]) && dl_f64(v->grad)[6] == 1 && dl_f64(v->grad)[1] == 0);
    dl_tape_free(&tp);
    dl_tensor_free(v);
  }
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
}

static void test_3d_panics(void) {
  dl_tape tp;
  dl_tensor *x = mk(DL_F64, DL_SHAPE(2, 4, 5, 6, 6), 61), *w = mk(DL_F64, DL_SHAPE(3, 4, 3, 3, 3), 62);
  dl_tensor *w2 = mk(DL_F64, DL_SHAPE(3, 2, 3, 3, 3), 63), *b5 = mk(DL_F64, DL_SHAPE(5), 64);
  dl_tensor *wbig = mk(DL_F64, DL_SHAPE(3, 4, 6, 3, 3), 65), *x4 = mk(DL_F64, DL_SHAPE(2, 4, 6, 6), 66);
  dl_tensor *wf = mk(DL_F32, DL_SHAPE(3, 4, 3, 3, 3), 67);
  dl_tape_init(&tp, &pctx, 0);
  EXPECT_PANIC(dl_t_conv3d(&tp, x, w2, NULL, NULL), "dl_t_conv3d", "[2, 4, 5, 6, 6]", "[3, 2, 3, 3, 3]", "groups=1");
  EXPECT_PANIC(dl_t_conv3d(&tp, x4, w, NULL, NULL), "dl_t_conv3d", "[2, 4, 6, 6]", "[3, 4, 3, 3, 3]", "5-d",
               "D, H, W");
  EXPECT_PANIC(dl_t_conv3d(&tp, x, w, b5, NULL), "dl_t_conv3d", "bias", "[5]", "[3, 4, 3, 3, 3]");
  EXPECT_PANIC(dl_t_conv3d(&tp, x, wf, NULL, NULL), "dl_t_conv3d", "f64[2, 4, 5, 6, 6]", "f32[3, 4, 3, 3, 3]");
  EXPECT_PANIC(dl_t_conv3d(&tp, x, w, NULL, &(dl_conv3d_args){.stride_d = -1}), "dl_t_conv3d", "negative",
               "[2, 4, 5, 6, 6]");
  EXPECT_PANIC(dl_t_conv3d(&tp, x, wbig, NULL, NULL), "dl_t_conv3d", "larger", "depth", "[2, 4, 5, 6, 6]",
               "[3, 4, 6, 3, 3]");
  EXPECT_PANIC(dl_t_conv3d(&tp, x, w, NULL, &(dl_conv3d_args){.dil_d = 3}), "dl_t_conv3d", "larger", "dilation 3");
  EXPECT_PANIC(dl_t_conv3d(&tp, x, w, NULL, &(dl_conv3d_args){.pad_d_end = 1}), "dl_t_conv3d", "pad_d_end 1",
               "DL_PAD_EXPLICIT");
  EXPECT_PANIC(dl_t_conv3d(&tp, x, w, NULL, &(dl_conv3d_args){.pad_mode = DL_PAD_SAME, .pad_d = 1}), "dl_t_conv3d",
               "SAME", "pad_d 1 must be 0");
  EXPECT_PANIC(dl_t_max_pool3d(&tp, x, NULL), "dl_t_max_pool3d", "[2, 4, 5, 6, 6]", "kernel_d");
  EXPECT_PANIC(dl_t_max_pool3d(&tp, x4, &(dl_pool3d_args){.kernel_d = 2, .kernel_h = 2, .kernel_w = 2}),
               "dl_t_max_pool3d", "[2, 4, 6, 6]", "5-d");
  EXPECT_PANIC(dl_t_max_pool3d(&tp, x, &(dl_pool3d_args){.kernel_h = 2, .kernel_w = 2}), "dl_t_max_pool3d",
               "kernel 0x2x2", "[2, 4, 5, 6, 6]");
  EXPECT_PANIC(dl_t_max_pool3d(&tp, x, &(dl_pool3d_args){.kernel_d = 3, .kernel_h = 3, .kernel_w = 3, .pad_d = 2}),
               "dl_t_max_pool3d", "half", "2x0x0", "[2, 4, 5, 6, 6]");
  EXPECT_PANIC(dl_t_avg_pool3d(&tp, x, &(dl_pool3d_args){.kernel_d = 6, .kernel_h = 2, .kernel_w = 2}),
               "dl_t_avg_pool3d", "larger", "6x2x2", "[2, 4, 5, 6, 6]");
  EXPECT_PANIC(dl_t_avg_pool3d(&tp, x, &(dl_pool3d_args){.kernel_d = 2, .kernel_h = 2, .kernel_w = 2, .dil_d = 2}),
               "dl_t_avg_pool3d", "dilation 2x0x0", "has none");
  EXPECT_PANIC(dl_t_avg_pool3d(&tp, x, &(dl_pool3d_args){.kernel_d = 2, .kernel_h = 2, .kernel_w = 2, .stride_h = -1}),
               "dl_t_avg_pool3d", "stride 0x-1x0");
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(w2);
  dl_tensor_free(b5);
  dl_tensor_free(wbig);
  dl_tensor_free(x4);
  dl_tensor_free(wf);
}

/* ---- PyTorch fixtures ---------------------------------------------------------- */

static double worst_f32, worst_f64, worst_f32_cond;
static int fixture_cases;

/* Runs fixture case c's op on x (w, b: NULL when the case has none) with
 * seed gy; returns y; x->grad, w->grad, b->grad hold the gradients. */
static dl_tensor *run_op(dl_tape *tp, const fx2_case *c, dl_tensor *x, dl_tensor *w, dl_tensor *b,
                         dl_tensor *gy) {
  dl_tensor *y;
  dl_requires_grad(x);
  if (w) dl_requires_grad(w);
  if (b) dl_requires_grad(b);
  if (!strncmp(c->name, "conv2d", 6)) {
    dl_conv2d_args a;
    memset(&a, 0, sizeof a);
    a.pad_mode = (int)fx2_param(c, "pad_mode", 0);
    a.pad_h_end = (int)fx2_param(c, "pad_h_end", 0);
    a.pad_w_end = (int)fx2_param(c, "pad_w_end", 0);
    a.stride_h = (int)fx2_param(c, "stride_h", 0);
    a.stride_w = (int)fx2_param(c, "stride_w", 0);
    a.pad_h = (int)fx2_param(c, "pad_h", 0);
    a.pad_w = (int)fx2_param(c, "pad_w", 0);
    a.dil_h = (int)fx2_param(c, "dil_h", 0);
    a.dil_w = (int)fx2_param(c, "dil_w", 0);
    a.groups = (int)fx2_param(c, "groups", 0);
    CHECK((b != NULL) == (fx2_param(c, "has_b", -1) == 1));
    y = dl_t_conv2d(tp, x, w, b, &a);
  } else if (!strncmp(c->name, "conv3d", 6)) {
    dl_conv3d_args a;
    memset(&a, 0, sizeof a);
    a.pad_mode = (int)fx2_param(c, "pad_mode", 0);
    a.pad_d_end = (int)fx2_param(c, "pad_d_end", 0);
    a.pad_h_end = (int)fx2_param(c, "pad_h_end", 0);
    a.pad_w_end = (int)fx2_param(c, "pad_w_end", 0);
    a.stride_d = (int)fx2_param(c, "stride_d", 0);
    a.stride_h = (int)fx2_param(c, "stride_h", 0);
    a.stride_w = (int)fx2_param(c, "stride_w", 0);
    a.pad_d = (int)fx2_param(c, "pad_d", 0);
    a.pad_h = (int)fx2_param(c, "pad_h", 0);
    a.pad_w = (int)fx2_param(c, "pad_w", 0);
    a.dil_d = (int)fx2_param(c, "dil_d", 0);
    a.dil_h = (int)fx2_param(c, "dil_h", 0);
    a.dil_w = (int)fx2_param(c, "dil_w", 0);
    a.groups = (int)fx2_param(c, "groups", 0);
    CHECK((b != NULL) == (fx2_param(c, "has_b", -1) == 1));
    y = dl_t_conv3d(tp, x, w, b, &a);
  } else if (!strncmp(c->name, "maxpool3d", 9) || !strncmp(c->name, "avgpool3d", 9)) {
    dl_pool3d_args a;
    memset(&a, 0, sizeof a);
    a.kernel_d = (int)fx2_param(c, "kernel_d", 0);
    a.kernel_h = (int)fx2_param(c, "kernel_h", 0);
    a.kernel_w = (int)fx2_param(c, "kernel_w", 0);
    a.stride_d = (int)fx2_param(c, "stride_d", 0);
    a.stride_h = (int)fx2_param(c, "stride_h", 0);
    a.stride_w = (int)fx2_param(c, "stride_w", 0);
    a.pad_d = (int)fx2_param(c, "pad_d", 0);
    a.pad_h = (int)fx2_param(c, "pad_h", 0);
    a.pad_w = (int)fx2_param(c, "pad_w", 0);
    a.exclude_pad = (int)fx2_param(c, "exclude_pad", 0);
    a.dil_d = (int)fx2_param(c, "dil_d", 0);
    a.dil_h = (int)fx2_param(c, "dil_h", 0);
    a.dil_w = (int)fx2_param(c, "dil_w", 0);
    a.ceil_mode = (int)fx2_param(c, "ceil_mode", 0);
    y = c->name[0] == 'm' ? dl_t_max_pool3d(tp, x, &a) : dl_t_avg_pool3d(tp, x, &a);
  } else if (!strncmp(c->name, "conv1d", 6)) {
    dl_conv1d_args a;
    memset(&a, 0, sizeof a);
    a.pad_mode = (int)fx2_param(c, "pad_mode", 0);
    a.pad_end = (int)fx2_param(c, "pad_end", 0);
    a.stride = (int)fx2_param(c, "stride", 0);
    a.pad = (int)fx2_param(c, "pad", 0);
    a.dil = (int)fx2_param(c, "dil", 0);
    a.groups = (int)fx2_param(c, "groups", 0);
    CHECK((b != NULL) == (fx2_param(c, "has_b", -1) == 1));
    y = dl_t_conv1d(tp, x, w, b, &a);
  } else {
    dl_pool2d_args a;
    memset(&a, 0, sizeof a);
    a.kernel_h = (int)fx2_param(c, "kernel_h", 0);
    a.kernel_w = (int)fx2_param(c, "kernel_w", 0);
    a.stride_h = (int)fx2_param(c, "stride_h", 0);
    a.stride_w = (int)fx2_param(c, "stride_w", 0);
    a.pad_h = (int)fx2_param(c, "pad_h", 0);
    a.pad_w = (int)fx2_param(c, "pad_w", 0);
    a.exclude_pad = (int)fx2_param(c, "exclude_pad", 0);
    a.dil_h = (int)fx2_param(c, "dil_h", 0);
    a.dil_w = (int)fx2_param(c, "dil_w", 0);
    a.ceil_mode = (int)fx2_param(c, "ceil_mode", 0);
    a.pad_mode = (int)fx2_param(c, "pad_mode", 0);
    a.pad_h_end = (int)fx2_param(c, "pad_h_end", 0);
    a.pad_w_end = (int)fx2_param(c, "pad_w_end", 0);
    if (!strncmp(c->name, "maxunpool", 9)) { /* max_pool2d_with_indices, then max_unpool2d of the same window */
      dl_tensor *idx = NULL, *p = dl_t_max_pool2d_with_indices(tp, x, &a, &idx);
      const dl_unpool2d_args ua = {a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_h, a.pad_w,
                                   (int)fx2_param(c, "out_h", 0), (int)fx2_param(c, "out_w", 0)};
      y = dl_t_max_unpool2d(tp, p, idx, &ua);
    } else if (!strncmp(c->name, "maxpool", 7)) {
      y = dl_t_max_pool2d(tp, x, &a);
    } else {
      y = dl_t_avg_pool2d(tp, x, &a);
    }
  }
  dl_backward(tp, y, gy);
  return y;
}

/* fixture tensor `key` as f64, with absolute values when `absv` */
static dl_tensor *fx_abs(const fx2_case *c, const char *key, int absv) {
  dl_tensor *t = fx2_make(c, key, DL_F64);
  int64_t i;
  for (i = 0; t && absv && i < t->numel; i++) dl_f64(t)[i] = fabs(dl_f64(t)[i]);
  return t;
}
/* max_i |got_i - want_i| / cond_i: the error relative to the sum of the
 * absolute values of the terms that make element i (cond), the scale of the
 * rounding error any f32 evaluation order makes, cancellation or not. */
static double cond_err(const dl_tensor *got, const fx2_tensor *want, const dl_tensor *cond) {
  double worst = 0;
  int64_t i;
  if (!got || !want || !cond || got->numel != want->numel || cond->numel != want->numel) return INFINITY;
  for (i = 0; i < want->numel; i++) {
    double e = fabs(dl__get_at(got, i) - want->v[i]) / fmax(dl__get_at(cond, i), 1e-30);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

/* One fixture case: forward and gradients against PyTorch's. f64: fx2_err
 * <= 1e-10. f32: fx2_err (relative to max(|want|, 1e-3 max|want|)) cannot
 * be held to 1e-5 where an output is a sum that cancels: PyTorch's own f32
 * result is up to 2.4e-5 away from the exact value in that measure on these
 * cases. So f32 is checked with the error relative to the sum of absolute
 * terms (cond_err <= 1e-5; the conditions come from the same op run in f64
 * on |x|, |w|, |b| with seed |gy|; for max pooling on x itself, its
 * selection being exact), and fx2_err is held to 1e-4. */
static void run_fixture(dl_ctx *ctx, const fx2_case *c) {
  dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  double tol = c->f64 ? 1e-10 : 1e-4, e;
  dl_tensor *x = fx2_make(c, "x", dt), *w = fx2_make(c, "w", dt), *b = fx2_make(c, "b", dt);
  dl_tensor *gy = fx2_make(c, "gy", dt), *y;
  dl_tensor *ax = NULL, *aw = NULL, *ab = NULL, *agy = NULL, *ay = NULL;
  dl_tape tp, tp2;
  const char *dts = c->f64 ? "f64" : "f32";
  dl_tape_init(&tp, ctx, 0);
  dl_tape_init(&tp2, ctx, 0);
  y = run_op(&tp, c, x, w, b, gy);
  if (!c->f64) {
    int lin = strncmp(c->name, "max", 3) != 0; /* maxpool, maxunpool: a selection */
    ax = fx_abs(c, "x", lin);
    aw = fx_abs(c, "w", lin);
    ab = fx_abs(c, "b", lin);
    agy = fx_abs(c, "gy", 1);
    ay = run_op(&tp2, c, ax, aw, ab, agy);
    if (!lin) DL_ASSIGN(ay, dl_abs(ay));
  }
#define FX_CMP(t, key, cond)                                                                 \
  do {                                                                                       \
    e = fx2_err(t, fx2_get(c, key));                                                         \
    CHECK_MSG(e <= tol, "%s %s %s: rel err %.3g (line %d)", c->name, dts, key, e, c->line);  \
    if (c->f64 && e > worst_f64) worst_f64 = e;                                              \
    if (!c->f64 && e > worst_f32) worst_f32 = e;                                             \
    if (!c->f64) {                                                                           \
      e = cond_err(t, fx2_get(c, key), cond);                                                \
      CHECK_MSG(e <= 1e-5, "%s f32 %s: error / sum|terms| %.3g (line %d)", c->name, key, e,   \
                c->line);                                                                    \
      if (e > worst_f32_cond) worst_f32_cond = e;                                            \
    }                                                                                        \
  } while (0)
  FX_CMP(y, "y", ay);
  FX_CMP(x->grad, "g_x", ax ? ax->grad : NULL);
  if (w) FX_CMP(w->grad, "g_w", aw ? aw->grad : NULL);
  if (b) FX_CMP(b->grad, "g_b", ab ? ab->grad : NULL);
#undef FX_CMP
  dl_tape_free(&tp);
  dl_tape_free(&tp2);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
  dl_tensor_free(gy);
  dl_tensor_free(ax);
  dl_tensor_free(aw);
  dl_tensor_free(ab);
  dl_tensor_free(agy);
}

static void test_torch_fixtures(void) {
  fx2_set s;
  int i, conv2d = 0, conv1d = 0, maxp = 0, avgp = 0, unp = 0, conv3d = 0, maxp3 = 0, avgp3 = 0;
  if (!fx2_load(&s, "tests/fixtures/conv.txt")) { SKIP("%s", s.err); }
  for (i = 0; i < s.n; i++) {
    const fx2_case *c = &s.cases[i];
    run_fixture(&serctx, c);
    run_fixture(&parctx, c);
    fixture_cases++;
    conv2d += !strncmp(c->name, "conv2d", 6);
    conv1d += !strncmp(c->name, "conv1d", 6);
    maxp += !strncmp(c->name, "maxpool", 7);
    avgp += !strncmp(c->name, "avgpool", 7);
    unp += !strncmp(c->name, "maxunpool", 9);
    conv3d += !strncmp(c->name, "conv3d", 6);
    maxp3 += !strncmp(c->name, "maxpool3d", 9);
    avgp3 += !strncmp(c->name, "avgpool3d", 9);
  }
  CHECK_MSG(conv3d >= 18 && maxp3 >= 10 && avgp3 >= 10, "3-d cases: conv3d %d, maxpool3d %d, avgpool3d %d", conv3d,
            maxp3, avgp3);
  CHECK(fx2_find(&s, "conv3d_all", 1) != NULL && fx2_find(&s, "avgpool3d_ceil_excl", 0) != NULL);
  CHECK(conv2d >= 30 && conv1d >= 12 && maxp >= 20 && avgp >= 22 && unp >= 6);
  CHECK(fx2_find(&s, "conv2d_same_lower", 1) != NULL && fx2_find(&s, "conv1d_explicit", 0) != NULL);
  CHECK(fx2_find(&s, "maxpool_same_lower", 1) != NULL && fx2_find(&s, "avgpool_explicit_excl", 0) != NULL);
  CHECK(fx2_find(&s, "conv2d_all", 1) != NULL && fx2_find(&s, "conv2d_all", 0) != NULL);
  fx2_free(&s);
}

/* ---- a larger problem against a naive loop; threads -------------------------- */

static double naive_conv(const dl_tensor *x, const dl_tensor *w, const dl_tensor *b,
                         const dl_conv2d_args *a, int64_t n, int64_t o, int64_t oh, int64_t ow) {
  int64_t G = a->groups ? a->groups : 1, Cg = w->shape[1], Og = w->shape[0] / G, grp = o / Og;
  int64_t sh = a->stride_h ? a->stride_h : 1, sw = a->stride_w ? a->stride_w : 1;
  int64_t dh = a->dil_h ? a->dil_h : 1, dw = a->dil_w ? a->dil_w : 1, c, i, j;
  double s = b ? dl__get_at(b, o) : 0;
  for (c = 0; c < Cg; c++)
    for (i = 0; i < w->shape[2]; i++)
      for (j = 0; j < w->shape[3]; j++) {
        int64_t ih = oh * sh - a->pad_h + i * dh, iw = ow * sw - a->pad_w + j * dw;
        int64_t xi[4], wi[4];
        if (ih < 0 || ih >= x->shape[2] || iw < 0 || iw >= x->shape[3]) continue;
        xi[0] = n; xi[1] = grp * Cg + c; xi[2] = ih; xi[3] = iw;
        wi[0] = o; wi[1] = c; wi[2] = i; wi[3] = j;
        s += dl_tensor_get(x, xi) * dl_tensor_get(w, wi);
      }
  return s;
}

static void test_naive_and_threads(void) {
  dl_conv2d_args a = {1, 2, 2, 1, 1, 2, 2, 0, 0, 0};
  dl_tensor *x = mk(DL_F32, DL_SHAPE(9, 6, 11, 13), 31), *w = mk(DL_F32, DL_SHAPE(8, 3, 5, 3), 32);
  dl_tensor *b = mk(DL_F32, DL_SHAPE(8), 33), *gy;
  dl_tensor *y1, *y2;
  dl_tape t1, t2;
  int64_t n, o, i, j, bad = 0;
  double worst = 0;
  dl_tape_init(&t1, &serctx, 0);
  dl_tape_init(&t2, &parctx, 0);
  y1 = dl_t_conv2d(&t1, x, w, b, &a);
  y2 = dl_t_conv2d(&t2, x, w, b, &a);
  CHECK(y1->ndim == 4 && y1->shape[0] == 9 && y1->shape[1] == 8 && y1->shape[2] == 11 && y1->shape[3] == 6);
  /* forward values do not depend on the thread count */
  CHECK(memcmp(y1->data, y2->data, sizeof(float) * (size_t)y1->numel) == 0);
  for (n = 0; n < 9; n++)
    for (o = 0; o < 8; o++)
      for (i = 0; i < y1->shape[2]; i++)
        for (j = 0; j < y1->shape[3]; j++) {
          int64_t idx[4];
          double want = naive_conv(x, w, b, &a, n, o, i, j), got, e;
          idx[0] = n; idx[1] = o; idx[2] = i; idx[3] = j;
          got = dl_tensor_get(y1, idx);
          e = fabs(got - want);
          if (e > worst) worst = e;
          if (e > 1e-5) bad++;
        }
  CHECK_MSG(bad == 0, "%lld outputs differ from the naive loop (worst %.3g)", (long long)bad, worst);
  /* gradients: two runs with 2 threads agree bit for bit; serial agrees to rounding */
  gy = mk(DL_F32, 4, y1->shape, 34);
  dl_requires_grad(x);
  dl_requires_grad(w);
  dl_requires_grad(b);
  dl_tape_rewind(&t1);
  dl_tape_rewind(&t2);
  {
    dl_tensor *gw[3], *gx[3], *gb[3];
    int run;
    for (run = 0; run < 3; run++) {
      dl_tape *tp = run == 0 ? &t1 : &t2;
      dl_tensor *y;
      dl_zero_grad(x);
      dl_zero_grad(w);
      dl_zero_grad(b);
      y = dl_t_conv2d(tp, x, w, b, &a);
      dl_backward(tp, y, gy);
      gw[run] = dl_tensor_make(&pctx, DL_F32, 4, w->shape);
      gx[run] = dl_tensor_make(&pctx, DL_F32, 4, x->shape);
      gb[run] = dl_tensor_make(&pctx, DL_F32, 1, b->shape);
      dl_tensor_copy(gw[run], w->grad);
      dl_tensor_copy(gx[run], x->grad);
      dl_tensor_copy(gb[run], b->grad);
      dl_tape_rewind(tp);
    }
    CHECK(memcmp(gw[1]->data, gw[2]->data, sizeof(float) * (size_t)w->numel) == 0);
    CHECK(memcmp(gx[1]->data, gx[2]->data, sizeof(float) * (size_t)x->numel) == 0);
    CHECK(memcmp(gb[1]->data, gb[2]->data, sizeof(float) * (size_t)b->numel) == 0);
    /* grad_x and grad_b: each element summed by one thread in a fixed order */
    CHECK(memcmp(gx[0]->data, gx[1]->data, sizeof(float) * (size_t)x->numel) == 0);
    CHECK(memcmp(gb[0]->data, gb[1]->data, sizeof(float) * (size_t)b->numel) == 0);
    { /* grad_w: summed per thread, then the partial sums: rounding differs */
      fx2_tensor want;
      memset(&want, 0, sizeof want);
      want.ndim = 4;
      memcpy(want.shape, w->shape, sizeof want.shape);
      want.numel = w->numel;
      want.v = (double *)malloc(sizeof(double) * (size_t)w->numel);
      for (i = 0; i < w->numel; i++) want.v[i] = ((const float *)gw[0]->data)[i];
      double num = 0, den = 0;
      for (i = 0; i < w->numel; i++) {
        num = fmax(num, fabs(((const float *)gw[1]->data)[i] - want.v[i]));
        den = fmax(den, fabs(want.v[i]));
      }
      CHECK_MSG(num <= 1e-5 * den, "grad_w serial vs 2 threads: max diff %.3g of max %.3g", num, den);
      CHECK(fx2_err(gw[1], &want) < 1e-3);
      free(want.v);
    }
    for (run = 0; run < 3; run++) {
      dl_tensor_free(gw[run]);
      dl_tensor_free(gx[run]);
      dl_tensor_free(gb[run]);
    }
  }
  dl_tape_free(&t1);
  dl_tape_free(&t2);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
  dl_tensor_free(gy);
}

/* ---- Winograd F(2x2, 3x3) (f32 3x3 stride 1, AVX2 + FMA builds) -------------- */

static dl_tensor *f64_of(const dl_tensor *t) {
  dl_tensor *d = dl_tensor_make(&pctx, DL_F64, t->ndim, t->shape);
  int64_t i;
  for (i = 0; i < t->numel; i++) ((double *)d->data)[i] = ((const float *)t->data)[i];
  return d;
}
/* max |a - ref| / max |ref| of an f32 tensor against an f64 one */
static double rel_to(const dl_tensor *a, const dl_tensor *ref) {
  double num = 0, den = 0;
  int64_t i;
  for (i = 0; i < ref->numel; i++) {
    const double r = ((const double *)ref->data)[i];
    num = fmax(num, fabs(((const float *)a->data)[i] - r));
    den = fmax(den, fabs(r));
  }
  return den > 0 ? num / den : num;
}
static dl_tensor *keep(dl_tensor *t) { /* a copy that outlives the tape */
  dl_tensor *c = dl_tensor_make(&pctx, t->dtype, t->ndim, t->shape);
  dl_tensor_copy(c, t);
  return c;
}

/* Winograd against the f64 convolution (im2col: f64 never takes Winograd)
 * on shapes with odd and even sizes, padding 0 to 2, channel counts that
 * are not multiples of 8, one image and more than a block of them, bias or
 * none: the output, grad_x (written, then added to by a second
 * convolution of the same x), grad_w and grad_b within 2e-5 of the largest
 * value (an error in the transforms is of the values' size), the tangent
 * (forward mode: conv(tx, w) + conv(x, tw) + tb) likewise against im2col
 * in f32. y and grad_x do not depend on the thread count; grad_w is the
 * same run after run. And which layers take it under DL_CONV_AUTO. */
static void test_winograd(void) {
  static const int sh[][8] = { /* N C O H W ph pw bias */
      {3, 5, 7, 9, 11, 1, 1, 1}, {2, 16, 24, 13, 15, 2, 0, 0}, {5, 9, 13, 6, 7, 0, 2, 1}, {1, 3, 2, 3, 3, 0, 0, 1},
      {6, 8, 16, 14, 14, 1, 1, 1}, {9, 17, 6, 5, 20, 1, 2, 1}, {1, 1, 1, 4, 4, 2, 2, 0}};
  dl_ctx wctx1, wctx2, ictx;
  dl_ctx_desc d;
  size_t k;
  double worst = 0;
#ifndef DL__WINO
  SKIP("this build has no Winograd convolution (it needs AVX2 and FMA: -march=native or -mavx2 -mfma)");
#endif
  memset(&d, 0, sizeof d);
  d.panic = harness_panic;
  d.conv_algo = DL_CONV_IM2COL;
  d.threads = 2;
  d.parallel_threshold = 1;
  dl_ctx_init(&ictx, &d);
  d.conv_algo = DL_CONV_WINOGRAD;
  dl_ctx_init(&wctx2, &d);
  d.threads = 1;
  dl_ctx_init(&wctx1, &d);
  for (k = 0; k < sizeof sh / sizeof sh[0]; k++) {
    const int *s = sh[k];
    dl_conv2d_args a;
    dl_tensor *x = mk(DL_F32, DL_SHAPE(s[0], s[1], s[3], s[4]), 100 + k);
    dl_tensor *w = mk(DL_F32, DL_SHAPE(s[2], s[1], 3, 3), 200 + k), *w2 = mk(DL_F32, DL_SHAPE(s[2], s[1], 3, 3), 300 + k);
    dl_tensor *b = s[7] ? mk(DL_F32, DL_SHAPE(s[2]), 400 + k) : NULL;
    dl_tensor *x64 = f64_of(x), *w64 = f64_of(w), *w264 = f64_of(w2), *b64 = b ? f64_of(b) : NULL, *gy, *gy64;
    dl_tensor *ref[5], *got[3][5];
    dl_tape tp;
    int run, i;
    memset(&a, 0, sizeof a);
    a.pad_h = s[5];
    a.pad_w = s[6];
    { /* the geometry takes Winograd under the forcing ctx */
      int64_t gi[8] = {1, 1, s[5], s[6], 1, 1, 1, 0};
      const dl__conv_geom g = dl__conv_geom_of(x, w, gi);
      CHECK_MSG(dl__wino_ok(&wctx2, &g, DL_F32) && !dl__wino_ok(&wctx2, &g, DL_F64) && !dl__wino_ok(&ictx, &g, DL_F32),
                "case %d: dl__wino_ok", (int)k);
    }
    { /* reference: f64, y = conv(x, w) + b and z = y + conv(x, w2) (x's gradient from two convolutions) */
      dl_tensor *y, *z;
      dl_tape_init(&tp, &pctx, 0);
      dl_requires_grad(x64);
      dl_requires_grad(w64);
      if (b64) dl_requires_grad(b64);
      y = dl_t_conv2d(&tp, x64, w64, b64, &a);
      gy = mk(DL_F32, 4, y->shape, 500 + k);
      gy64 = f64_of(gy);
      z = dl_t_add(&tp, y, dl_t_conv2d(&tp, x64, w264, NULL, &a));
      ref[0] = keep(z);
      dl_backward(&tp, z, gy64);
      ref[1] = keep(x64->grad);
      ref[2] = keep(w64->grad);
      ref[3] = b64 ? keep(b64->grad) : NULL;
      dl_tape_free(&tp);
    }
    for (run = 0; run < 3; run++) { /* Winograd on 1 thread, on 2, on 2 again */
      dl_tensor *y, *z;
      dl_tape_init(&tp, run == 0 ? &wctx1 : &wctx2, 0);
      dl_requires_grad(x);
      dl_requires_grad(w);
      if (b) dl_requires_grad(b);
      dl_zero_grad(x);
      dl_zero_grad(w);
      if (b) dl_zero_grad(b);
      y = dl_t_conv2d(&tp, x, w, b, &a);
      z = dl_t_add(&tp, y, dl_t_conv2d(&tp, x, w2, NULL, &a));
      got[run][0] = keep(z);
      dl_backward(&tp, z, gy);
      got[run][1] = keep(x->grad);
      got[run][2] = keep(w->grad);
      got[run][3] = b ? keep(b->grad) : NULL;
      dl_tape_free(&tp);
    }
    for (i = 0; i < 4; i++) {
      double e;
      if (!ref[i]) continue;
      e = rel_to(got[1][i], ref[i]);
      if (e > worst) worst = e;
      CHECK_MSG(e <= 2e-5, "case %d (x [%d, %d, %d, %d], %d outputs, padding %d x %d): %s off the f64 result by %.3g "
                "of its largest value", (int)k, s[0], s[1], s[3], s[4], s[2], s[5], s[6],
                i == 0 ? "y" : i == 1 ? "grad_x" : i == 2 ? "grad_w" : "grad_b", e);
    }
    CHECK_MSG(memcmp(got[0][0]->data, got[1][0]->data, sizeof(float) * (size_t)got[0][0]->numel) == 0,
              "case %d: y differs between 1 and 2 threads", (int)k);
    CHECK_MSG(memcmp(got[0][1]->data, got[1][1]->data, sizeof(float) * (size_t)got[0][1]->numel) == 0,
              "case %d: grad_x differs between 1 and 2 threads", (int)k);
    CHECK_MSG(memcmp(got[1][2]->data, got[2][2]->data, sizeof(float) * (size_t)got[1][2]->numel) == 0,
              "case %d: grad_w differs between two runs", (int)k);
    { /* forward mode: the tangent against im2col's */
      dl_tensor *tx = mk(DL_F32, 4, x->shape, 600 + k), *tw = mk(DL_F32, 4, w->shape, 700 + k);
      dl_tensor *tb = b ? mk(DL_F32, 1, b->shape, 800 + k) : NULL, *t1, *t2;
      dl_tensor *xd = dl_tensor_make(&pctx, DL_F32, 4, x->shape), *wd = dl_tensor_make(&pctx, DL_F32, 4, w->shape);
      dl_tensor *bd = b ? dl_tensor_make(&pctx, DL_F32, 1, b->shape) : NULL;
      dl_tape tq;
      double num = 0, den = 0;
      int64_t e;
      dl_tensor_copy(xd, x);
      dl_tensor_copy(wd, w);
      if (bd) dl_tensor_copy(bd, b);
      dl_set_tangent(xd, tx);
      dl_set_tangent(wd, tw);
      if (bd) dl_set_tangent(bd, tb);
      dl_tape_init(&tp, &wctx2, 0);
      dl_tape_init(&tq, &ictx, 0);
      t1 = dl_t_conv2d(&tp, xd, wd, bd, &a)->tangent;
      t2 = dl_t_conv2d(&tq, xd, wd, bd, &a)->tangent;
      for (e = 0; e < t2->numel; e++) {
        num = fmax(num, fabs(((const float *)t1->data)[e] - ((const float *)t2->data)[e]));
        den = fmax(den, fabs(((const float *)t2->data)[e]));
      }
      CHECK_MSG(num <= 2e-5 * den, "case %d: tangent off im2col's by %.3g of %.3g", (int)k, num, den);
      dl_tape_free(&tp);
      dl_tape_free(&tq);
      dl_tensor_free(tx);
      dl_tensor_free(tw);
      dl_tensor_free(tb);
      dl_tensor_free(xd);
      dl_tensor_free(wd);
      dl_tensor_free(bd);
    }
    for (i = 0; i < 4; i++) {
      dl_tensor_free(ref[i]);
      for (run = 0; run < 3; run++) dl_tensor_free(got[run][i]);
    }
    dl_tensor_free(x);
    dl_tensor_free(w);
    dl_tensor_free(w2);
    dl_tensor_free(b);
    dl_tensor_free(x64);
    dl_tensor_free(w64);
    dl_tensor_free(w264);
    dl_tensor_free(b64);
    dl_tensor_free(gy);
    dl_tensor_free(gy64);
  }
  { /* DL_CONV_AUTO: fashion_cnn's second convolution, not its first, not f64, not a 5x5, strided or grouped one */
    dl_tensor *x = mk(DL_F32, DL_SHAPE(64, 32, 14, 14), 1), *w = mk(DL_F32, DL_SHAPE(64, 32, 3, 3), 2);
    dl_tensor *x1 = mk(DL_F32, DL_SHAPE(64, 1, 28, 28), 3), *w1 = mk(DL_F32, DL_SHAPE(32, 1, 3, 3), 4);
    dl_tensor *w5 = mk(DL_F32, DL_SHAPE(64, 32, 5, 5), 5), *wg = mk(DL_F32, DL_SHAPE(64, 16, 3, 3), 6);
    int64_t i1[8] = {1, 1, 1, 1, 1, 1, 1, 0}, i2[8] = {2, 2, 1, 1, 1, 1, 1, 0}, ig[8] = {1, 1, 1, 1, 1, 1, 2, 0};
    dl__conv_geom g = dl__conv_geom_of(x, w, i1);
    CHECK(dl__wino_ok(&pctx, &g, DL_F32));
    CHECK(!dl__wino_ok(&pctx, &g, DL_F64));
    CHECK(!dl__wino_ok(&ictx, &g, DL_F32));
    g = dl__conv_geom_of(x1, w1, i1);
    CHECK(!dl__wino_ok(&pctx, &g, DL_F32));
    g = dl__conv_geom_of(x, w5, i1);
    CHECK(!dl__wino_ok(&pctx, &g, DL_F32));
    g = dl__conv_geom_of(x, w, i2);
    CHECK(!dl__wino_ok(&pctx, &g, DL_F32));
    g = dl__conv_geom_of(x, wg, ig);
    CHECK(!dl__wino_ok(&pctx, &g, DL_F32));
    dl_tensor_free(x);
    dl_tensor_free(w);
    dl_tensor_free(x1);
    dl_tensor_free(w1);
    dl_tensor_free(w5);
    dl_tensor_free(wg);
  }
  printf("winograd: worst error against f64, of the largest value: %.3g\n", worst);
}

/* ---- pooling specifics ---------------------------------------------------------- */

static void test_pool_ties_nan(void) {
  dl_tape tp;
  dl_tensor *x = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(1, 1, 4, 4)), *y, *gy;
  dl_pool2d_args a = {.kernel_h = 2, .kernel_w = 2};
  double *px = dl_f64(x), *gx;
  int64_t i;
  dl_tape_init(&tp, &pctx, 0);
  for (i = 0; i < 16; i++) px[i] = 1.0; /* all ties: the first of each window wins */
  px[15] = NAN;                          /* the NaN wins its window */
  dl_requires_grad(x);
  y = dl_t_max_pool2d(&tp, x, &a);
  CHECK(y->shape[2] == 2 && y->shape[3] == 2);
  CHECK(dl_f64(y)[0] == 1.0 && dl_f64(y)[1] == 1.0 && dl_f64(y)[2] == 1.0 && isnan(dl_f64(y)[3]));
  gy = dl_tensor_make(&pctx, DL_F64, 4, y->shape);
  for (i = 0; i < 4; i++) dl_f64(gy)[i] = (double)(i + 1);
  dl_backward(&tp, y, gy);
  gx = dl_f64(x->grad);
  CHECK(gx[0] == 1 && gx[2] == 2 && gx[8] == 3 && gx[15] == 4);
  CHECK(gx[1] == 0 && gx[5] == 0 && gx[10] == 0 && gx[11] == 0 && gx[14] == 0);
  dl_tape_rewind(&tp);
  { /* -inf padding: a window of only negative values at the border keeps its max */
    dl_pool2d_args p = {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
    for (i = 0; i < 16; i++) px[i] = -10.0 - (double)i;
    y = dl_t_max_pool2d(&tp, x, &p);
    CHECK(y->shape[2] == 4 && y->shape[3] == 4);
    CHECK(dl_f64(y)[0] == -10.0 && dl_f64(y)[15] == -10.0 - 10);
    dl_tape_rewind(&tp);
    /* avg with padding: include vs exclude at the corner */
    y = dl_t_avg_pool2d(&tp, x, &p);
    CHECK_NEAR(dl_f64(y)[0], (-10 - 11 - 14 - 15) / 9.0, 1e-12);
    dl_tape_rewind(&tp);
    p.exclude_pad = 1;
    y = dl_t_avg_pool2d(&tp, x, &p);
    CHECK_NEAR(dl_f64(y)[0], (-10 - 11 - 14 - 15) / 4.0, 1e-12);
    dl_tape_rewind(&tp);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(gy);
}

/* The 2x2 stride-2 window has a kernel of its own (blocks of rows, one
 * loop over their outputs): against the scan rule written out here (the
 * first maximum in row-major order, a NaN winning, the last NaN of a
 * window), values and indices, f32 and f64, on values full of ties, NaNs
 * and infinities; odd sizes (the last row or column unused), planes of
 * several blocks, rows longer than a block (the general kernel), N*C > 1;
 * built with -march=native (tests/run.sh), rows of 16, 17, 33 and 31
 * outputs for the AVX-512 form's full and masked vectors. */
static void test_pool_2x2_kernel(void) {
  static const double vals[] = {-INFINITY, -1.0, 0.0, 1.0, 2.0, NAN, INFINITY, -0.0};
  static const int64_t sizes[][2] = {{4, 4}, {5, 7}, {28, 28}, {14, 14}, {7, 9}, {64, 40}, {3, 600}, {2, 2}, {2, 5}, {3, 2}, {4, 32}, {5, 34}, {2, 66}, {6, 63}};
  dl_tape tp;
  size_t si;
  int dt;
  dl_tape_init(&tp, &pctx, 0);
  for (dt = 0; dt < 2; dt++)
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
      const int64_t H = sizes[si][0], W = sizes[si][1], Ho = H / 2, Wo = W / 2, P = 3;
      dl_tensor *x = dl_tensor_make(&pctx, dt ? DL_F64 : DL_F32, DL_SHAPE(1, P, H, W)), *idx = NULL, *y;
      dl_rng r = dl_rng_make(77 + (uint64_t)si);
      int64_t i, p, oh, ow, bad = 0;
      for (i = 0; i < P * H * W; i++) {
        const double v = vals[dl_rng_below(&r, 8)];
        if (dt) dl_f64(x)[i] = v;
        else dl_f32(x)[i] = (float)v;
      }
      y = dl_t_max_pool2d_with_indices(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2}, &idx);
      CHECK(y->shape[2] == Ho && y->shape[3] == Wo);
      for (p = 0; p < P; p++)
        for (oh = 0; oh < Ho; oh++)
          for (ow = 0; ow < Wo; ow++) {
            int64_t at = -1, jh, jw, k = (p * Ho + oh) * Wo + ow;
            double m = -INFINITY, got;
            for (jh = 2 * oh; jh < 2 * oh + 2; jh++)
              for (jw = 2 * ow; jw < 2 * ow + 2; jw++) {
                const double v = dt ? dl_f64(x)[(p * H + jh) * W + jw] : (double)dl_f32(x)[(p * H + jh) * W + jw];
                if (at < 0 || v > m || v != v) m = v, at = jh * W + jw;
              }
            got = dt ? dl_f64(y)[k] : (double)dl_f32(y)[k];
            if (!(got == m || (got != got && m != m)) || signbit(got) != signbit(m) ||
                ((const int32_t *)idx->data)[k] != at) {
              if (!bad++)
                CHECK_MSG(0, "%s %lldx%lld plane %lld out (%lld,%lld): got %g at %d, want %g at %lld", dt ? "f64" : "f32",
                          (long long)H, (long long)W, (long long)p, (long long)oh, (long long)ow, got,
                          ((const int32_t *)idx->data)[k], m, (long long)at);
            }
          }
      CHECK_MSG(bad == 0, "%lld wrong", (long long)bad);
      { /* without indices (no tape, no tangent): the same bits */
        dl_tensor *y0 = dl_t_max_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2});
        CHECK(memcmp(y0->data, y->data, (size_t)(P * Ho * Wo) * (dt ? 8 : 4)) == 0);
      }
      dl_tape_rewind(&tp);
      dl_tensor_free(x);
    }
  dl_tape_free(&tp);
}

/* ---- pooling's indices and max_unpool2d -------------------------------------------- */

static void test_indices_unpool(void) {
  dl_tape tp;
  dl_tensor *x = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(1, 1, 3, 4)), *idx = NULL, *y, *z;
  dl_tensor *ind = dl_tensor_make(&pctx, DL_I64, DL_SHAPE(1, 1, 2, 2)), *v = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(1, 1, 2, 2));
  const dl_unpool2d_args ua = {.kernel_h = 2, .kernel_w = 2};
  int64_t i;
  dl_tape_init(&tp, &pctx, 0);
  for (i = 0; i < 12; i++) dl_f64(x)[i] = (double)((i * 7) % 12); /* 0 7 2 9 / 4 11 6 1 / 8 3 10 5 */
  /* indices are PyTorch's: ih * W + iw in the plane; ceil_mode keeps the partial last row */
  y = dl_t_max_pool2d_with_indices(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2, .ceil_mode = 1}, &idx);
  CHECK(y->shape[2] == 2 && y->shape[3] == 2 && idx && idx->dtype == DL_I32);
  CHECK(dl_i32(idx)[0] == 5 && dl_i32(idx)[1] == 3 && dl_i32(idx)[2] == 8 && dl_i32(idx)[3] == 10);
  CHECK(dl_f64(y)[0] == 11 && dl_f64(y)[1] == 9 && dl_f64(y)[2] == 8 && dl_f64(y)[3] == 10);
  dl_tape_rewind(&tp);
  /* a dilated window all of whose taps miss the input: -inf, index -1, no gradient, tangent 0 */
  {
    dl_tensor *x1 = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(1, 1, 1, 2)), *gy;
    dl_f64(x1)[0] = 3;
    dl_f64(x1)[1] = 4;
    dl_requires_grad(x1);
    y = dl_t_max_pool2d_with_indices(&tp, x1, &(dl_pool2d_args){.kernel_h = 1, .kernel_w = 2, .stride_w = 1,
                                                                .dil_w = 3, .pad_mode = DL_PAD_EXPLICIT,
                                                                .pad_w = 2, .pad_w_end = 2}, &idx);
    CHECK(y->shape[3] == 3);
    CHECK(dl_f64(y)[0] == 4 && dl_i32(idx)[0] == 1);          /* taps -2, 1 */
    CHECK(isinf(dl_f64(y)[1]) && dl_f64(y)[1] < 0 && dl_i32(idx)[1] == -1); /* taps -1, 2 */
    CHECK(dl_f64(y)[2] == 3 && dl_i32(idx)[2] == 0);          /* taps 0, 3 */
    gy = dl_tensor_make(&pctx, DL_F64, 4, y->shape);
    dl_f64(gy)[0] = 1;
    dl_f64(gy)[1] = 100;
    dl_f64(gy)[2] = 10;
    dl_backward(&tp, y, gy);
    CHECK(dl_f64(x1->grad)[0] == 10 && dl_f64(x1->grad)[1] == 1);
    dl_tape_rewind(&tp);
    dl_tensor_free(x1);
    dl_tensor_free(gy);
  }
  { /* an input of height 0 under padding: every window empty, -inf and -1, no gradient, no read or write */
    dl_tensor *x0 = dl_tensor_make(&pctx, DL_F32, DL_SHAPE(1, 1, 0, 4)), *gy;
    dl_requires_grad(x0);
    y = dl_t_max_pool2d_with_indices(&tp, x0, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2, .stride_w = 1,
                                                                .pad_h = 1, .pad_w = 1}, &idx);
    CHECK(y->shape[2] == 1 && y->shape[3] == 5);
    for (i = 0; i < 5; i++) CHECK(isinf(dl_f32(y)[i]) && dl_f32(y)[i] < 0 && dl_i32(idx)[i] == -1);
    gy = dl_tensor_make(&pctx, DL_F32, 4, y->shape);
    dl_tensor_fill(gy, 1);
    dl_backward(&tp, y, gy);
    dl_tape_rewind(&tp);
    dl_tensor_free(gy);
    dl_tensor_free(x0);
  }
  /* the user's own int64 indices; a repeated index: the last in scan order wins and alone gets a gradient */
  for (i = 0; i < 4; i++) dl_f64(v)[i] = (double)(i + 1);
  dl_i64(ind)[0] = 0;
  dl_i64(ind)[1] = 15;
  dl_i64(ind)[2] = 6;
  dl_i64(ind)[3] = 6;
  dl_requires_grad(v);
  z = dl_t_max_unpool2d(&tp, v, ind, &ua);
  CHECK(z->shape[2] == 4 && z->shape[3] == 4);
  CHECK(dl_f64(z)[0] == 1 && dl_f64(z)[15] == 2 && dl_f64(z)[6] == 4 && dl_f64(z)[1] == 0 && dl_f64(z)[5] == 0);
  {
    dl_tensor *gz = dl_tensor_make(&pctx, DL_F64, 4, z->shape);
    for (i = 0; i < 16; i++) dl_f64(gz)[i] = (double)(i + 1);
    dl_backward(&tp, z, gz);
    CHECK(dl_f64(v->grad)[0] == 1 && dl_f64(v->grad)[1] == 16 && dl_f64(v->grad)[2] == 0 && dl_f64(v->grad)[3] == 7);
    dl_tensor_free(gz);
  }
  dl_tape_rewind(&tp);
  /* out of the plane, a wrong output size, indices of another shape: clear panics */
  dl_i64(ind)[2] = 16;
  EXPECT_PANIC(dl_t_max_unpool2d(&tp, v, ind, &ua), "dl_t_max_unpool2d", "element 2 is 16", "[0, 16)");
  dl_i64(ind)[2] = -2;
  EXPECT_PANIC(dl_t_max_unpool2d(&tp, v, ind, &ua), "dl_t_max_unpool2d", "element 2 is -2", "not -1");
  { /* -1 (a max pool's window that missed the input) writes nothing and gets no gradient */
    dl_tensor *gz;
    dl_i64(ind)[2] = -1;
    z = dl_t_max_unpool2d(&tp, v, ind, &ua);
    CHECK(dl_f64(z)[0] == 1 && dl_f64(z)[15] == 2 && dl_f64(z)[6] == 4);
    gz = dl_tensor_make(&pctx, DL_F64, 4, z->shape);
    for (i = 0; i < 16; i++) dl_f64(gz)[i] = (double)(i + 1);
    dl_tensor_fill(v->grad, 0);
    dl_backward(&tp, z, gz);
    CHECK(dl_f64(v->grad)[2] == 0 && dl_f64(v->grad)[3] == 7 && dl_f64(v->grad)[0] == 1);
    dl_tape_rewind(&tp);
    dl_tensor_free(gz);
  }
  dl_i64(ind)[2] = 3;
  EXPECT_PANIC(dl_t_max_unpool2d(&tp, v, ind, &(dl_unpool2d_args){.kernel_h = 2, .kernel_w = 2, .out_h = 6}),
               "dl_t_max_unpool2d", "output height 6", "between 2 and 6");
  EXPECT_PANIC(dl_t_max_unpool2d(&tp, v, x, &ua), "dl_t_max_unpool2d", "int32 or int64");
  EXPECT_PANIC(dl_t_max_unpool2d(&tp, v, ind, NULL), "dl_t_max_unpool2d", "dl_unpool2d_args");
  dl_tape_free(&tp);
  dl_tensor_free(v);
  dl_tensor_free(ind);
  dl_tensor_free(x);
}

/* ---- no gradient recorded, steady state --------------------------------------- */

static void test_no_grad_and_steady_state(void) {
  dl_tape tp;
  dl_tensor *x = mk(DL_F32, DL_SHAPE(4, 3, 8, 8), 41), *w = mk(DL_F32, DL_SHAPE(5, 3, 3, 3), 42);
  dl_tensor *b = mk(DL_F32, DL_SHAPE(5), 43);
  dl_pool2d_args pa = {.kernel_h = 2, .kernel_w = 2};
  size_t hw = 0;
  int step;
  dl_tape_init(&tp, &parctx, 0);
  { /* nothing requires a gradient: no node */
    dl_tensor *y = dl_t_max_pool2d(&tp, dl_t_conv2d(&tp, x, w, b, NULL), &pa);
    CHECK(y->node == NULL && tp.nodes == 0 && !(y->flags & DL_TENSOR_REQUIRES_GRAD));
    dl_tape_rewind(&tp);
  }
  dl_requires_grad(w);
  dl_requires_grad(b);
  for (step = 0; step < 4; step++) {
    dl_tensor *h = dl_t_conv2d(&tp, x, w, b, &(dl_conv2d_args){.pad_h = 1, .pad_w = 1});
    dl_tensor *p = dl_t_avg_pool2d(&tp, dl_t_max_pool2d(&tp, h, &pa), &pa);
    dl_tensor *gy = dl_tape_out(&tp, "test", DL_F32, p->ndim, p->shape);
    dl_tensor_fill(gy, 1.0);
    CHECK(tp.nodes == 3);
    dl_zero_grad(w);
    dl_zero_grad(b);
    dl_backward(&tp, p, gy);
    if (step == 1) hw = dl_arena_bytes_needed(&tp.arena);
    if (step > 1) CHECK(dl_arena_bytes_needed(&tp.arena) == hw);
    dl_tape_rewind(&tp);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
}

/* ---- called from the caller's own parallel region --------------------------------- */

/* Each thread of a caller's team runs a convolution on its own tape: inside
 * that region the op runs alone, and its per-worker column buffer must be
 * the one it allocated (the caller's thread number is not a worker slot of
 * the ctx's team; the buffer, 450 KB here, is its own arena block, so
 * ASan sees a slot past it). Every thread's output matches the serial one. */
static void test_inside_caller_region(void) {
  dl_tensor *x = mk(DL_F32, DL_SHAPE(2, 8, 40, 40), 71), *w = mk(DL_F32, DL_SHAPE(4, 8, 3, 3), 72), *ref;
  dl_conv2d_args a;
  dl_tape tp;
  int bad = 0;
  memset(&a, 0, sizeof a);
  a.pad_h = a.pad_w = 1;
  dl_tape_init(&tp, &parctx, 0);
  ref = dl_t_conv2d(&tp, x, w, NULL, &a);
#ifdef _OPENMP
#pragma omp parallel num_threads(4) reduction(+ : bad)
  {
    dl_tape t2;
    dl_tensor *y;
    int64_t i;
    dl_tape_init(&t2, &parctx, 0);
    y = dl_t_conv2d(&t2, x, w, NULL, &a);
    for (i = 0; i < y->numel; i++) bad += dl_f32(y)[i] != dl_f32(ref)[i];
    dl_tape_free(&t2);
  }
#endif
  CHECK_MSG(bad == 0, "%d outputs differ from the serial convolution's", bad);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(w);
}

/* ---- empty inputs ----------------------------------------------------------------- */

/* The input's gradient when the input is an intermediate (x + x): dl_backward
 * hands the convolution a gradient buffer it has not zeroed (DL_TAPE_POISON:
 * NaN), which the rule must write, image by image (1x1: the GEMM with beta
 * 0; otherwise zeroed before col2im), not add to. It must be twice the
 * gradient a leaf input gets, on one thread and two, for a direct 1x1
 * convolution, a grouped one and a padded 3x3. */
static void test_intermediate_input_grad(void) {
  static const struct { int64_t O, kh; dl_conv2d_args a; } cs[] = {
      {6, 1, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}, {6, 1, {0, 0, 0, 0, 0, 0, 2, 0, 0, 0}}, {5, 3, {0, 0, 1, 1, 0, 0, 0, 0, 0, 0}}};
  int c, th;
  for (th = 0; th < 2; th++)
    for (c = 0; c < 3; c++) {
      dl_ctx *ctx = th ? &parctx : &serctx;
      dl_tensor *x = mk(DL_F64, DL_SHAPE(3, 4, 5, 5), 81), *xl = mk(DL_F64, DL_SHAPE(3, 4, 5, 5), 81);
      dl_tensor *w = mk(DL_F64, DL_SHAPE(cs[c].O, 4 / (cs[c].a.groups ? cs[c].a.groups : 1), cs[c].kh, cs[c].kh), 82);
      dl_tensor *y, *gy;
      dl_tape tp;
      int64_t i;
      int same = 1;
      x->ctx = xl->ctx = w->ctx = ctx;
      dl_tape_init(&tp, ctx, 0);
      dl_requires_grad(x);
      dl_requires_grad(xl);
      y = dl_t_conv2d(&tp, dl_t_add(&tp, x, x), w, NULL, &cs[c].a);
      gy = mk(DL_F64, y->ndim, y->shape, 83);
      dl_backward(&tp, y, gy);
      dl_tape_rewind(&tp);
      y = dl_t_conv2d(&tp, xl, w, NULL, &cs[c].a);
      dl_backward(&tp, y, gy);
      for (i = 0; i < x->numel; i++) same &= dl_f64(x->grad)[i] == 2 * dl_f64(xl->grad)[i];
      CHECK_MSG(same, "conv case %d, %d thread(s): the intermediate input's gradient is not twice the leaf's", c, th + 1);
      dl_tape_free(&tp);
      dl_tensor_free(x);
      dl_tensor_free(xl);
      dl_tensor_free(w);
      dl_tensor_free(gy);
    }
}

static void test_empty(void) {
  dl_tape tp;
  dl_tensor *x = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(2, 0, 4, 4)), *w = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(3, 0, 3, 3));
  dl_tensor *b = mk(DL_F64, DL_SHAPE(3), 71), *x0 = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(0, 2, 4, 4));
  dl_tensor *w2 = mk(DL_F64, DL_SHAPE(3, 2, 3, 3), 72), *y, *gy;
  int64_t i;
  dl_tape_init(&tp, &parctx, 0);
  dl_requires_grad(x);
  dl_requires_grad(w);
  dl_requires_grad(b);
  /* no input channels: y is the bias everywhere, grad_b the sum of gy */
  y = dl_t_conv2d(&tp, x, w, b, NULL);
  CHECK(y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 2 && y->shape[3] == 2);
  for (i = 0; i < y->numel; i++) CHECK(dl_f64(y)[i] == dl_f64(b)[(i / 4) % 3]);
  gy = dl_tensor_make(&pctx, DL_F64, 4, y->shape);
  dl_tensor_fill(gy, 0.5);
  dl_backward(&tp, y, gy);
  CHECK(dl_f64(b->grad)[0] == 4.0 && dl_f64(b->grad)[2] == 4.0);
  dl_tape_rewind(&tp);
  /* an empty batch */
  dl_requires_grad(x0);
  y = dl_t_conv2d(&tp, x0, w2, b, NULL);
  CHECK(y->numel == 0 && y->shape[0] == 0 && y->shape[1] == 3);
  y = dl_t_max_pool2d(&tp, x0, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2});
  CHECK(y->numel == 0 && y->shape[2] == 2);
  y = dl_t_avg_pool2d(&tp, x0, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2});
  CHECK(y->numel == 0);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
  dl_tensor_free(x0);
  dl_tensor_free(w2);
  dl_tensor_free(gy);
}

/* 3-d: the steady state (a training step's arena use the same from the
 * third step on, as conv2d's), no node without a gradient, no input
 * channels (y the bias) and an empty batch. */
static void test_3d_steady_state_empty(void) {
  dl_tape tp;
  dl_tensor *x = mk(DL_F32, DL_SHAPE(3, 2, 5, 6, 6), 91), *w = mk(DL_F32, DL_SHAPE(4, 2, 3, 3, 3), 92);
  dl_tensor *b = mk(DL_F32, DL_SHAPE(4), 93), *y, *gy;
  dl_tensor *xe = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(2, 0, 3, 4, 4));
  dl_tensor *we = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(3, 0, 2, 3, 3)), *be = mk(DL_F64, DL_SHAPE(3), 94);
  dl_tensor *x0 = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(0, 2, 4, 4, 4)), *w0 = mk(DL_F64, DL_SHAPE(3, 2, 3, 3, 3), 95);
  const dl_pool3d_args pa = {.kernel_d = 2, .kernel_h = 2, .kernel_w = 2};
  size_t hw = 0;
  int step;
  int64_t i;
  dl_tape_init(&tp, &parctx, 0);
  y = dl_t_avg_pool3d(&tp, dl_t_max_pool3d(&tp, dl_t_conv3d(&tp, x, w, b, NULL), &pa),
                      &(dl_pool3d_args){.kernel_d = 1, .kernel_h = 2, .kernel_w = 2});
  CHECK(y->node == NULL && tp.nodes == 0);
  dl_tape_rewind(&tp);
  dl_requires_grad(w);
  dl_requires_grad(b);
  for (step = 0; step < 4; step++) {
    dl_tensor *h = dl_t_conv3d(&tp, x, w, b, &(dl_conv3d_args){.pad_d = 1, .pad_h = 1, .pad_w = 1});
    dl_tensor *p = dl_t_avg_pool3d(&tp, dl_t_max_pool3d(&tp, h, &pa), &(dl_pool3d_args){.kernel_d = 1, .kernel_h = 2,
                                                                                          .kernel_w = 1});
    dl_tensor *g = dl_tape_out(&tp, "test", DL_F32, p->ndim, p->shape);
    dl_tensor_fill(g, 1.0);
    CHECK(tp.nodes == 3);
    dl_zero_grad(w);
    dl_zero_grad(b);
    dl_backward(&tp, p, g);
    if (step == 1) hw = dl_arena_bytes_needed(&tp.arena);
    if (step > 1) CHECK(dl_arena_bytes_needed(&tp.arena) == hw);
    dl_tape_rewind(&tp);
  }
  /* no input channels: y is the bias everywhere, grad_b the sum of gy */
  dl_requires_grad(xe);
  dl_requires_grad(we);
  dl_requires_grad(be);
  y = dl_t_conv3d(&tp, xe, we, be, NULL);
  CHECK(y->ndim == 5 && y->shape[1] == 3 && y->shape[2] == 2 && y->shape[3] == 2 && y->shape[4] == 2);
  for (i = 0; i < y->numel; i++) CHECK(dl_f64(y)[i] == dl_f64(be)[(i / 8) % 3]);
  gy = dl_tensor_make(&pctx, DL_F64, 5, y->shape);
  dl_tensor_fill(gy, 0.5);
  dl_backward(&tp, y, gy);
  CHECK(dl_f64(be->grad)[0] == 8.0 && dl_f64(be->grad)[2] == 8.0);
  dl_tape_rewind(&tp);
  /* an empty batch */
  y = dl_t_conv3d(&tp, x0, w0, NULL, NULL);
  CHECK(y->numel == 0 && y->ndim == 5 && y->shape[1] == 3 && y->shape[2] == 2);
  y = dl_t_max_pool3d(&tp, x0, &pa);
  CHECK(y->numel == 0 && y->shape[2] == 2 && y->shape[4] == 2);
  y = dl_t_avg_pool3d(&tp, x0, &pa);
  CHECK(y->numel == 0 && y->ndim == 5);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
  dl_tensor_free(xe);
  dl_tensor_free(we);
  dl_tensor_free(be);
  dl_tensor_free(x0);
  dl_tensor_free(w0);
  dl_tensor_free(gy);
}

/* ---- panics ---------------------------------------------------------------------- */

static void test_panics(void) {
  dl_tape tp;
  dl_tensor *x = mk(DL_F64, DL_SHAPE(2, 4, 6, 6), 51), *w = mk(DL_F64, DL_SHAPE(3, 4, 3, 3), 52);
  dl_tensor *b = mk(DL_F64, DL_SHAPE(3), 53), *b5 = mk(DL_F64, DL_SHAPE(5), 54);
  dl_tensor *w2 = mk(DL_F64, DL_SHAPE(3, 2, 3, 3), 55), *wf = mk(DL_F32, DL_SHAPE(3, 4, 3, 3), 56);
  dl_tensor *x3 = mk(DL_F64, DL_SHAPE(2, 4, 9), 57), *w3 = mk(DL_F64, DL_SHAPE(3, 2, 3), 58);
  dl_tensor *wbig = mk(DL_F64, DL_SHAPE(3, 4, 7, 3), 59), *w4 = mk(DL_F64, DL_SHAPE(4, 2, 3), 60);
  dl_tape_init(&tp, &pctx, 0);
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w2, NULL, NULL), "dl_t_conv2d", "[2, 4, 6, 6]", "[3, 2, 3, 3]");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w, b5, NULL), "dl_t_conv2d", "bias", "[5]", "[3, 4, 3, 3]");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, wf, NULL, NULL), "dl_t_conv2d", "f64[2, 4, 6, 6]", "f32[3, 4, 3, 3]");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w, NULL, &(dl_conv2d_args){.groups = 3}), "dl_t_conv2d", "groups=3",
               "[2, 4, 6, 6]", "[3, 4, 3, 3]");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w2, NULL, &(dl_conv2d_args){.groups = 2}), "dl_t_conv2d", "groups=2");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w, NULL, &(dl_conv2d_args){.stride_h = -1}), "dl_t_conv2d", "negative");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, wbig, NULL, NULL), "dl_t_conv2d", "larger", "[2, 4, 6, 6]", "[3, 4, 7, 3]");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w, NULL, &(dl_conv2d_args){.dil_h = 3}), "dl_t_conv2d", "dilation 3");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w, NULL, &(dl_conv2d_args){.pad_h_end = 1}), "dl_t_conv2d", "pad_h_end 1",
               "DL_PAD_EXPLICIT");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w, NULL, &(dl_conv2d_args){.pad_mode = DL_PAD_SAME, .pad_w = 1}), "dl_t_conv2d",
               "SAME", "pad_w 1 must be 0");
  EXPECT_PANIC(dl_t_conv1d(&tp, x3, w3, NULL, &(dl_conv1d_args){.pad_end = 2}), "dl_t_conv1d", "pad_end 2",
               "DL_PAD_EXPLICIT");
  EXPECT_PANIC(dl_t_conv2d(&tp, x, w, NULL, &(dl_conv2d_args){.pad_mode = 9}), "dl_t_conv2d", "pad_mode 9");
  EXPECT_PANIC(dl_t_conv2d(&tp, x3, w3, NULL, NULL), "dl_t_conv2d", "[2, 4, 9]", "[3, 2, 3]", "4-d");
  EXPECT_PANIC(dl_t_conv1d(&tp, x3, w, NULL, NULL), "dl_t_conv1d", "[2, 4, 9]", "[3, 4, 3, 3]");
  EXPECT_PANIC(dl_t_conv1d(&tp, x3, w3, NULL, NULL), "dl_t_conv1d", "[2, 4, 9]", "[3, 2, 3]", "groups=1");
  EXPECT_PANIC(dl_t_conv1d(&tp, x3, w4, b5, &(dl_conv1d_args){.groups = 2}), "dl_t_conv1d", "[5]", "[4, 2, 3]",
               "[2, 4, 9]");
  EXPECT_PANIC(dl_t_max_pool2d(&tp, x, NULL), "dl_t_max_pool2d", "[2, 4, 6, 6]");
  EXPECT_PANIC(dl_t_max_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 2}), "dl_t_max_pool2d", "kernel 2x0",
               "[2, 4, 6, 6]");
  EXPECT_PANIC(dl_t_max_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 3, .kernel_w = 3, .pad_h = 2}),
               "dl_t_max_pool2d", "half", "[2, 4, 6, 6]");
  EXPECT_PANIC(dl_t_max_pool2d(&tp, x3, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2}), "dl_t_max_pool2d",
               "[2, 4, 9]", "4-d");
  EXPECT_PANIC(dl_t_avg_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 7, .kernel_w = 2}), "dl_t_avg_pool2d",
               "[2, 4, 6, 6]", "7x2");
  EXPECT_PANIC(dl_t_avg_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2, .stride_w = -1}),
               "dl_t_avg_pool2d", "stride 0x-1");
  {
    dl_tensor *xi = dl_tensor_make(&pctx, DL_I64, DL_SHAPE(1, 1, 4, 4));
    EXPECT_PANIC(dl_t_avg_pool2d(&tp, xi, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2}), "dl_t_avg_pool2d",
                 "i64[1, 1, 4, 4]");
    EXPECT_PANIC(dl_t_avg_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2, .dil_h = 2}),
                 "dl_t_avg_pool2d", "dilation 2x0", "has none");
    EXPECT_PANIC(dl_t_max_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2, .pad_h_end = 1}),
                 "dl_t_max_pool2d", "pad_h_end 1", "DL_PAD_EXPLICIT");
    EXPECT_PANIC(dl_t_max_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2, .pad_mode = DL_PAD_SAME,
                                                           .ceil_mode = 1}),
                 "dl_t_max_pool2d", "SAME", "ceil_mode 1");
    EXPECT_PANIC(dl_t_max_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2, .pad_mode = 7}),
                 "dl_t_max_pool2d", "pad_mode 7");
    EXPECT_PANIC(dl_t_max_pool2d(&tp, x, &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2, .pad_mode = DL_PAD_EXPLICIT,
                                                           .pad_w_end = 2}),
                 "dl_t_max_pool2d", "right 2", "less than the window 2x2");
    dl_tensor_free(xi);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
  dl_tensor_free(b5);
  dl_tensor_free(w2);
  dl_tensor_free(wf);
  dl_tensor_free(x3);
  dl_tensor_free(w3);
  dl_tensor_free(wbig);
  dl_tensor_free(w4);
}

int main(void) {
  dl_ctx_desc d;
  memset(&d, 0, sizeof d);
  d.panic = harness_panic;
  dl_ctx_init(&pctx, &d);
  d.threads = 1;
  dl_ctx_init(&serctx, &d);
  d.threads = 2;
  d.parallel_threshold = 1;
  dl_ctx_init(&parctx, &d);
  RUN(test_conv_gradcheck);
  RUN(test_conv_gradcheck_views);
  RUN(test_conv_gradcheck_partial);
  RUN(test_pool_gradcheck);
  RUN(test_pool_2x2_kernel);
  RUN(test_im2col_kernel);
  RUN(test_conv3d_gradcheck);
  RUN(test_pool3d_gradcheck);
  RUN(test_3d_threads_ties);
  RUN(test_3d_panics);
  RUN(test_3d_steady_state_empty);
  RUN(test_torch_fixtures);
  RUN(test_naive_and_threads);
  RUN(test_winograd);
  RUN(test_pool_ties_nan);
  RUN(test_indices_unpool);
  RUN(test_no_grad_and_steady_state);
  RUN(test_empty);
  RUN(test_intermediate_input_grad);
  RUN(test_inside_caller_region);
  RUN(test_panics);
  printf("conv: worst gradcheck error %.3g; PyTorch fixtures (%d cases, serial and 2 threads): "
         "worst fx2_err f32 %.3g, f64 %.3g; f32 error / sum|terms| %.3g\n",
         worst_gradcheck, fixture_cases, worst_f32, worst_f64, worst_f32_cond);
  return harness_finish();
}
