/* tests/test_layers.c - dl/layers.h: models of named layers.
 *
 * - PyTorch agreement (tests/fixtures/layers.txt, tools/fixtures_layers.py),
 *   f64 (element-wise relative error <= 1e-10) and f32 (norm-wise <= 1e-5,
 *   see compare()), for every layer type:
 *   the model's parameter names, shapes, kinds and order equal the torch
 *   module's state_dict (the naming contract), the fixture's weights are
 *   copied in by name, and the output, the input gradients, every
 *   parameter's gradient (a sparse embedding's densified) and the buffers
 *   after the forward calls (BatchNorm's running statistics) match.
 * - dl_gradcheck (f64, reverse and forward mode) through whole layers with
 *   their parameters as inputs.
 * - Default initialisation: per parameter, bounds, mean and std against
 *   PyTorch's (pooled over many torch constructions); every dl_init_tensor
 *   scheme against torch.nn.init's; orthogonal W W^T = gain^2 I; the default
 *   hyperparameters (wd_mult 0 for biases and norms).
 * - Hyperparameters by name: dl_name_match, dl_model_set, dl_model_configure
 *   (a good spec; each bad one returns DL_ERR_ARG naming the rule and changes
 *   nothing of that rule, even when the rule's first KEY=VALUE was good),
 *   frozen parameters get no gradient.
 * - Containers and misuse: nested names, lookups, duplicate names, layers
 *   after dl_model_pack, wrong inputs (the panic names the layer and the
 *   shape), train/eval for BatchNorm and Dropout.
 * - dl_model_summary: names, output shapes, parameter total; mode and
 *   running statistics unchanged.
 * - Out of memory while building, for every allocation: a status, no crash,
 *   no leak (the hook counts live blocks; the sanitizer pass checks too).
 * LAYERS_VERBOSE=1 in the environment prints every fixture comparison.
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx; /* panics land in the harness */
static fx2_set fx;
static int fx_loaded;
static int verbose;

/* >>fixture helpers -------------------------------------------------------- */

/* The parts of a case: the case and its continuations NAME+1, NAME+2 ... */
static int case_parts(const fx2_case *c, const fx2_case **parts, int max) {
  int n = 0;
  char nm[96];
  parts[n++] = c;
  while (n < max) {
    const fx2_case *p;
    snprintf(nm, sizeof nm, "%s+%d", c->name, n);
    if (!(p = fx2_find(&fx, nm, c->f64))) break;
    parts[n++] = p;
  }
  return n;
}
static const fx2_tensor *get(const fx2_case *c, const char *key) {
  const fx2_case *parts[8];
  int n = case_parts(c, parts, 8), i;
  for (i = 0; i < n; i++) {
    const fx2_tensor *t = fx2_get(parts[i], key);
    if (t) return t;
  }
  return NULL;
}
/* A heap tensor (ctx: panics reach the harness) holding t's values. */
static dl_tensor *mk(const fx2_tensor *t, dl_dtype dt) {
  dl_tensor *x;
  int64_t i;
  if (!t) return NULL;
  x = dl_tensor_make(&ctx, dt, t->ndim, t->shape);
  for (i = 0; i < t->numel; i++) dl__set_at(x, i, t->v[i]);
  return x;
}
static dl_tensor *mk_in(const fx2_case *c, const char *key) {
  const fx2_tensor *t = get(c, key);
  if (!t) return NULL;
  return mk(t, t->isint ? DL_I64 : c->f64 ? DL_F64 : DL_F32);
}
static double max_abs_diff(const dl_tensor *a, const dl_tensor *b) {
  double m = 0;
  int64_t i;
  for (i = 0; i < a->numel; i++) {
    double d = fabs(dl__get_at(a, dl__offset_of_linear(a, i)) - dl__get_at(b, dl__offset_of_linear(b, i)));
    if (!(d <= m)) m = d;
  }
  return m;
}
static double sum_abs(const dl_tensor *a) {
  double s = 0;
  int64_t i;
  for (i = 0; i < a->numel; i++) s += fabs(dl__get_at(a, dl__offset_of_linear(a, i)));
  return s;
}

static double worst[2]; /* [f64?] worst error against PyTorch (the measure below) */
static char worst_what[2][128];
static double worst_f32_elem; /* f32, element-wise against PyTorch's f32: for the record */

/* got vs fixture tensor `key` of case c; returns 1 when within tolerance.
 * f64: element-wise relative error (fx2_err) <= 1e-10. f32: norm-wise
 * relative error (fx2_err_norm: max |got - want| / max |want|) <= 1e-5
 * against PyTorch's f32 result or its f64 result for the same case, the
 * smaller: an f32 gradient that is a cancelling sum carries rounding of the
 * size of its terms in PyTorch's result as in ours (resblock's bn1.bias:
 * PyTorch's f32 value is 8e-6 off its own f64 one). */
static int compare(const fx2_case *c, const char *key, const dl_tensor *got, const char *what) {
  const fx2_tensor *want = get(c, key);
  const double tol = c->f64 ? 1e-10 : 1e-5;
  double e;
  if (!want) {
    CHECK_MSG(0, "%s %s: the fixture has no '%s'", c->name, c->f64 ? "f64" : "f32", key);
    return 0;
  }
  if (c->f64) {
    e = fx2_err(got, want);
  } else {
    const fx2_case *c64 = fx2_find(&fx, c->name, 1);
    const fx2_tensor *w64 = c64 ? get(c64, key) : NULL;
    e = fx2_err_norm(got, want);
    if (w64) e = fmin(e, fx2_err_norm(got, w64));
    worst_f32_elem = fmax(worst_f32_elem, fx2_err(got, want));
  }
  if (e > worst[c->f64] || !(e == e)) {
    worst[c->f64] = e;
    snprintf(worst_what[c->f64], sizeof worst_what[0], "%s %s", c->name, what ? what : key);
  }
  if (verbose) printf("    %-24s %s %-28s %.3g\n", c->name, c->f64 ? "f64" : "f32", what ? what : key, e);
  CHECK_MSG(e <= tol, "%s %s: %s error %.3g (tol %g)", c->name, c->f64 ? "f64" : "f32", what ? what : key, e, tol);
  return e <= tol;
}

/* >>building the fixture's layers in C ------------------------------------- */

typedef enum { CALL_MODEL, CALL_RNN, CALL_MHA } call_kind;

static dl_tensor *block_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl_tensor *h = dl_t_relu(tp, dl_layer_call(dl_layer_child(l, "bn1"), tp, dl_layer_call(dl_layer_child(l, "conv1"), tp, x)));
  h = dl_layer_call(dl_layer_child(l, "bn2"), tp, dl_layer_call(dl_layer_child(l, "conv2"), tp, h));
  return dl_t_relu(tp, dl_t_add(tp, h, x));
}

/* The Flux paper's ResNet block as a Module with a plain C forward. */
static dl_layer *make_resblock(dl_model *m, dl_layer *parent, const char *name, int64_t ch) {
  dl_layer *b = dl_module_make(m, parent, name, block_forward, NULL);
  dl_conv2d_make(m, b, "conv1", &(dl_conv2d_desc){.in = ch, .out = ch, .kernel = 3, .padding = 1, .no_bias = 1});
  dl_batchnorm2d_make(m, b, "bn1", &(dl_batchnorm_desc){.features = ch});
  dl_conv2d_make(m, b, "conv2", &(dl_conv2d_desc){.in = ch, .out = ch, .kernel = 3, .padding = 1, .no_bias = 1});
  dl_batchnorm2d_make(m, b, "bn2", &(dl_batchnorm_desc){.features = ch});
  return b;
}

#define PI(k) ((int)fx2_param(c, (k), 0))
#define PL(k) ((int64_t)fx2_param(c, (k), 0))

/* Builds case c's layer in m; returns the layer to call (NULL: the model). */
static dl_layer *build_case(dl_model *m, const fx2_case *c, call_kind *call) {
  const char *n = c->name;
  *call = CALL_MODEL;
  if (!strncmp(n, "linear", 6))
    return dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = PL("in"), .out = PL("out"), .no_bias = PI("no_bias")});
  if (!strcmp(n, "conv1d"))
    return dl_conv1d_make(m, NULL, NULL,
                          &(dl_conv1d_desc){.in = PL("in"), .out = PL("out"), .kernel = PI("kernel"), .stride = PI("stride"),
                                            .padding = PI("padding"), .dilation = PI("dilation"), .groups = PI("groups")});
  if (!strncmp(n, "conv3d", 6))
    return dl_conv3d_make(m, NULL, NULL,
                          &(dl_conv3d_desc){.in = PL("in"), .out = PL("out"), .kernel = PI("kernel"), .stride = PI("stride"),
                                            .padding = PI("padding"), .dilation = PI("dilation"), .groups = PI("groups"),
                                            .kernel_h = PI("kernel_h"), .kernel_w = PI("kernel_w"),
                                            .stride_h = PI("stride_h"), .stride_w = PI("stride_w"),
                                            .padding_h = PI("padding_h"), .padding_w = PI("padding_w"),
                                            .dilation_h = PI("dilation_h"), .dilation_w = PI("dilation_w"),
                                            .no_bias = PI("no_bias")});
  if (!strncmp(n, "maxpool3d", 9) || !strncmp(n, "avgpool3d", 9)) {
    dl_pool3d_desc d = {.kernel = PI("kernel"), .stride = PI("stride"), .padding = PI("padding"),
                        .kernel_h = PI("kernel_h"), .kernel_w = PI("kernel_w"), .stride_h = PI("stride_h"),
                        .stride_w = PI("stride_w"), .padding_h = PI("padding_h"), .padding_w = PI("padding_w"),
                        .exclude_pad = PI("exclude_pad"), .dilation = PI("dilation"),
                        .dilation_h = PI("dilation_h"), .dilation_w = PI("dilation_w"), .ceil_mode = PI("ceil_mode")};
    return n[0] == 'm' ? dl_maxpool3d_make(m, NULL, NULL, &d) : dl_avgpool3d_make(m, NULL, NULL, &d);
  }
  if (!strncmp(n, "conv2d", 6))
    return dl_conv2d_make(m, NULL, NULL,
                          &(dl_conv2d_desc){.in = PL("in"), .out = PL("out"), .kernel = PI("kernel"), .stride = PI("stride"),
                                            .padding = PI("padding"), .dilation = PI("dilation"), .groups = PI("groups"),
                                            .kernel_w = PI("kernel_w"), .stride_w = PI("stride_w"),
                                            .padding_w = PI("padding_w"), .dilation_w = PI("dilation_w"),
                                            .no_bias = PI("no_bias")});
  if (!strncmp(n, "maxpool", 7) || !strncmp(n, "avgpool", 7)) {
    dl_pool2d_desc d = {.kernel = PI("kernel"), .stride = PI("stride"), .padding = PI("padding"),
                        .kernel_w = PI("kernel_w"), .stride_w = PI("stride_w"), .padding_w = PI("padding_w"),
                        .exclude_pad = PI("exclude_pad"), .dilation = PI("dilation"),
                        .dilation_w = PI("dilation_w"), .ceil_mode = PI("ceil_mode")};
    return n[0] == 'm' ? dl_maxpool2d_make(m, NULL, NULL, &d) : dl_avgpool2d_make(m, NULL, NULL, &d);
  }
  if (!strcmp(n, "gap")) return dl_global_avgpool_make(m, NULL, NULL);
  if (!strncmp(n, "flatten", 7)) return dl_flatten_make(m, NULL, NULL, PI("start_dim"));
  if (!strncmp(n, "bn", 2)) {
    dl_batchnorm_desc d = {.features = PL("features"), .eps = fx2_param(c, "eps", 0), .momentum = fx2_param(c, "momentum", 0)};
    return PI("two_d") ? dl_batchnorm2d_make(m, NULL, NULL, &d) : dl_batchnorm1d_make(m, NULL, NULL, &d);
  }
  if (!strncmp(n, "layernorm", 9) || !strncmp(n, "rmsnorm", 7)) {
    dl_norm_desc d = {.ndims = PI("ndims"), .shape = {PL("d0"), PL("d1")}, .eps = fx2_param(c, "eps", 0)};
    return n[0] == 'l' ? dl_layernorm_make(m, NULL, NULL, &d) : dl_rmsnorm_make(m, NULL, NULL, &d);
  }
  if (!strncmp(n, "dropout", 7)) return dl_dropout_make(m, NULL, NULL, fx2_param(c, "p", -1));
  if (!strncmp(n, "embedding", 9))
    return dl_embedding_make(m, NULL, NULL, &(dl_embedding_desc){.num = PL("num"), .dim = PL("dim"), .sparse = PI("sparse")});
  if (!strncmp(n, "rnn", 3) || !strncmp(n, "lstm", 4) || !strncmp(n, "gru", 3)) {
    dl_rnn_desc d = {.input = PL("input"), .hidden = PL("hidden"), .num_layers = PI("num_layers"), .relu = PI("relu"),
                     .bidirectional = PI("bidirectional")};
    *call = CALL_RNN;
    return n[0] == 'r' ? dl_rnn_make(m, NULL, NULL, &d) : n[0] == 'l' ? dl_lstm_make(m, NULL, NULL, &d)
                                                       : dl_gru_make(m, NULL, NULL, &d);
  }
  if (!strncmp(n, "mha", 3)) {
    *call = get(c, "k") ? CALL_MHA : CALL_MODEL; /* self-attention: the one-input forward */
    return dl_mha_make(m, NULL, NULL,
                       &(dl_mha_desc){.embed = PL("embed"), .heads = PI("heads"), .no_bias = PI("no_bias"),
                                      .causal = PI("causal")});
  }
  if (!strcmp(n, "mlp")) { /* nn.Sequential(Linear(5, 7), ReLU(), Linear(7, 3)) */
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 5, .out = 7});
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 7, .out = 3});
    return NULL;
  }
  if (!strcmp(n, "residual")) { /* relu(conv-bn-relu-conv-bn (x) + conv1x1 (x)); no conv bias
                                   before a BatchNorm: its gradient is 0 up to rounding */
    dl_layer *r = dl_residual_make(m, NULL, NULL, DL_ACT_RELU);
    dl_conv2d_make(m, r, NULL, &(dl_conv2d_desc){.in = 2, .out = 3, .kernel = 3, .padding = 1, .no_bias = 1});
    dl_batchnorm2d_make(m, r, NULL, &(dl_batchnorm_desc){.features = 3});
    dl_act_make(m, r, NULL, DL_ACT_RELU, 0);
    dl_conv2d_make(m, r, NULL, &(dl_conv2d_desc){.in = 3, .out = 3, .kernel = 3, .padding = 1, .no_bias = 1});
    dl_batchnorm2d_make(m, r, NULL, &(dl_batchnorm_desc){.features = 3});
    dl_conv2d_make(m, r, "shortcut", &(dl_conv2d_desc){.in = 2, .out = 3, .kernel = 1});
    return NULL;
  }
  if (!strncmp(n, "resblock", 8)) {
    make_resblock(m, NULL, "res", 2);
    return NULL;
  }
  return NULL;
}

/* The naming contract: the model's parameters and buffers are the
 * state_dict's entries (KIND:NAME), in the same order, with the same shapes,
 * kinds and dtypes, and the default hyperparameters. Returns the number of
 * mismatches. */
static int check_names(dl_model *m, const fx2_case *c) {
  const fx2_case *parts[8];
  int np = case_parts(c, parts, 8), i, k, n = 0, bad = 0;
  for (i = 0; i < np; i++)
    for (k = 0; k < parts[i]->nt; k++) {
      const fx2_tensor *t = &parts[i]->t[k];
      const char *key = t->key;
      dl_param_kind want;
      dl_param *p;
      int d, ok, pos;
      if (key[0] != 'p' || key[2] != ':' || !strchr("wbnr", key[1])) continue;
      want = key[1] == 'w' ? DL_PARAM_WEIGHT : key[1] == 'b' ? DL_PARAM_BIAS : key[1] == 'n' ? DL_PARAM_NORM : DL_PARAM_BUFFER;
      p = dl_model_param(m, key + 3);
      n++;
      CHECK_MSG(p != NULL, "%s: the model has no '%s'", c->name, key + 3);
      if (!p) { bad++; continue; }
      for (pos = 0; pos < m->nparams && m->params[pos] != p; pos++) {}
      ok = p->t.ndim == t->ndim && p->kind == want && pos == n - 1 && p->t.dtype == (t->isint ? DL_I64 : m->dtype);
      for (d = 0; ok && d < t->ndim; d++) ok = p->t.shape[d] == t->shape[d];
      CHECK_MSG(ok, "%s: '%s' is %s, kind %d, at position %d; the state_dict's is %d-d, %s, at %d", c->name, key + 3,
                DL_SHAPESTR(&p->t), (int)p->kind, pos, t->ndim, key, n - 1);
      /* default hyperparameters: lr_mult 1, wd_mult 1 for weights and 0 for biases and norms */
      CHECK_MSG(p->lr_mult == 1 && p->wd_mult == (want == DL_PARAM_WEIGHT ? 1 : 0) && !p->frozen &&
                    p->clip_value == 0 && p->clip_norm == 0 && p->init.kind == DL_INIT_DEFAULT && p->layer != NULL,
                "%s: '%s' lr_mult %g wd_mult %g frozen %d", c->name, p->name, p->lr_mult, p->wd_mult, p->frozen);
      bad += !ok;
    }
  CHECK_MSG(n == m->nparams, "%s: the state_dict has %d entries, the model %d", c->name, n, m->nparams);
  return bad + (n != m->nparams);
}

/* Copy every state_dict entry into the model by name. */
static void load_state(dl_model *m, const fx2_case *c) {
  const fx2_case *parts[8];
  int np = case_parts(c, parts, 8), i, k;
  for (i = 0; i < np; i++)
    for (k = 0; k < parts[i]->nt; k++) {
      const fx2_tensor *t = &parts[i]->t[k];
      dl_tensor *p;
      int64_t j;
      if (t->key[0] != 'p' || t->key[2] != ':') continue;
      p = dl_model_tensor(m, t->key + 3);
      if (!p || p->numel != t->numel) continue; /* check_names said so */
      for (j = 0; j < t->numel; j++) dl__set_at(p, dl__offset_of_linear(p, j), t->v[j]);
    }
}

typedef struct lay_run {
  dl_model *m;
  dl_layer *l;
  call_kind call;
  dl_tensor *x, *h0, *c0, *k, *v, *mask;
  int64_t lengths[16]; /* the rows' sequence lengths (nlengths of them; 0: none) */
  int nlengths;
  int want_hn, want_cn;
  dl_tensor *hn, *cn; /* set by the forward */
} lay_run;

static dl_tensor *lay_forward(dl_tape *tp, lay_run *r) {
  r->hn = r->cn = NULL;
  switch (r->call) {
  case CALL_RNN:
    if (r->nlengths)
      return dl_rnn_forward_lengths(r->l, tp, r->x, r->lengths, r->h0, r->c0, r->want_hn ? &r->hn : NULL,
                                    r->want_cn ? &r->cn : NULL);
    return dl_rnn_forward(r->l, tp, r->x, r->h0, r->c0, r->want_hn ? &r->hn : NULL, r->want_cn ? &r->cn : NULL);
  case CALL_MHA: return dl_mha_forward(r->l, tp, r->x, r->k, r->v, r->mask);
  default: return dl_model_forward(r->m, tp, r->x);
  }
}

/* The case's "lengths" (a packed sequence's rows), if it has them. */
static void get_lengths(const fx2_case *c, lay_run *r) {
  const fx2_tensor *t = get(c, "lengths");
  int64_t i;
  r->nlengths = 0;
  if (!t) return;
  CHECK_MSG(t->isint && t->numel >= 1 && t->numel <= 16, "%s: bad lengths", c->name);
  for (i = 0; i < t->numel && i < 16; i++) r->lengths[i] = (int64_t)t->v[i];
  r->nlengths = (int)t->numel;
}

/* Builds, loads and runs fixture case c; returns the number of failures. */
static int run_layer_case(const fx2_case *c) {
  const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  const int before = harness_failed_checks;
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = dt, .seed = 11});
  lay_run r;
  dl_tape tp;
  dl_tensor *y, *gy, *x2, *x3;
  const fx2_case *parts[8];
  int np, i, k;
  memset(&r, 0, sizeof r);
  r.m = m;
  r.l = build_case(m, c, &r.call);
  CHECK_MSG(dl_model_status(m) == DL_OK && m->nlayers > 0, "%s: building failed", c->name);
  if (dl_model_status(m) != DL_OK || m->nlayers == 0) { dl_model_free(m); return 1; }
  check_names(m, c);
  load_state(m, c);
  dl_model_train(m, PI("train"));
  CHECK(dl_model_pack(m) == DL_OK);
  r.x = mk_in(c, "x");
  r.h0 = mk_in(c, "h0");
  r.c0 = mk_in(c, "c0");
  r.k = mk_in(c, "k");
  r.v = mk_in(c, "v");
  r.mask = r.call == CALL_MHA ? mk_in(c, "mask") : NULL; /* the causal case's mask is the layer's flag */
  get_lengths(c, &r);
  x2 = mk_in(c, "x2");
  x3 = mk_in(c, "x3");
  r.want_hn = get(c, "hn") != NULL;
  r.want_cn = get(c, "cn") != NULL;
  if (r.x->dtype != DL_I64) dl_requires_grad(r.x);
  if (r.h0) dl_requires_grad(r.h0);
  if (r.c0) dl_requires_grad(r.c0);
  if (r.k) dl_requires_grad(r.k);
  if (r.v) dl_requires_grad(r.v);
  dl_tape_init(&tp, &ctx, 0);
  y = lay_forward(&tp, &r);
  if (x2) { /* BatchNorm in train mode: two more calls, without gradients */
    dl_no_grad_begin(&tp);
    (void)dl_model_forward(m, &tp, x2);
    (void)dl_model_forward(m, &tp, x3);
    dl_no_grad_end(&tp);
  }
  compare(c, "y", y, NULL);
  if (r.want_hn) compare(c, "hn", r.hn, NULL);
  if (r.want_cn) compare(c, "cn", r.cn, NULL);
  gy = mk_in(c, "gy");
  dl_backward(&tp, y, gy);
  dl_tensor_free(gy);
  if (r.want_hn) { gy = mk_in(c, "ghn"); dl_backward(&tp, r.hn, gy); dl_tensor_free(gy); }
  if (r.want_cn) { gy = mk_in(c, "gcn"); dl_backward(&tp, r.cn, gy); dl_tensor_free(gy); }
  if (r.x->grad) compare(c, "g_x", r.x->grad, NULL);
  if (r.h0) compare(c, "g_h0", r.h0->grad, NULL);
  if (r.c0) compare(c, "g_c0", r.c0->grad, NULL);
  if (r.k) compare(c, "g_k", r.k->grad, NULL);
  if (r.v) compare(c, "g_v", r.v->grad, NULL);
  /* every parameter's gradient; every buffer after the forward calls */
  np = case_parts(c, parts, 8);
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    char key[128];
    if (p->kind == DL_PARAM_BUFFER) continue;
    snprintf(key, sizeof key, "g:%s", p->name);
    if (p->sparse) { /* the row-sparse gradient, densified; the dense one untouched */
      const fx2_tensor *ix = get(c, "x");
      dl_tensor *dense = dl_tensor_make(&ctx, dt, p->t.ndim, p->t.shape);
      const dl_sgrad *s = (const dl_sgrad *)p->t.sgrad;
      int64_t j, uniq = 0, q;
      CHECK_MSG(s != NULL, "%s: sparse embedding without a row-sparse gradient", c->name);
      if (s) dl_sgrad_add_to(s, dense);
      compare(c, key, dense, "g:weight (sparse, densified)");
      for (j = 0; j < ix->numel; j++) {
        for (q = 0; q < j && ix->v[q] != ix->v[j]; q++) {}
        uniq += q == j;
      }
      CHECK_MSG(s && s->nnz == uniq, "%s: %lld rows in the sparse gradient, %lld distinct indices", c->name,
                s ? (long long)s->nnz : -1LL, (long long)uniq);
      CHECK(sum_abs(&p->g) == 0);
      dl_tensor_free(dense);
    } else {
      compare(c, key, &p->g, NULL);
    }
  }
  for (i = 0; i < np; i++)
    for (k = 0; k < parts[i]->nt; k++)
      if (!strncmp(parts[i]->t[k].key, "s:", 2)) {
        dl_tensor *b = dl_model_tensor(m, parts[i]->t[k].key + 2);
        CHECK_MSG(b != NULL, "%s: no buffer %s", c->name, parts[i]->t[k].key + 2);
        if (b && b->dtype == DL_I64) /* num_batches_tracked: exact */
          CHECK_MSG(dl__get_at(b, 0) == parts[i]->t[k].v[0], "%s: %s = %g, torch %g", c->name, parts[i]->t[k].key,
                    dl__get_at(b, 0), parts[i]->t[k].v[0]);
        else if (b)
          compare(c, parts[i]->t[k].key, b, NULL);
      }
  /* a layer called through the model's one-input forward gives the same y */
  if (r.call == CALL_RNN && !r.h0 && !r.nlengths) {
    dl_tensor *y1;
    dl_no_grad_begin(&tp);
    y1 = dl_model_forward(m, &tp, r.x);
    dl_no_grad_end(&tp);
    CHECK(max_abs_diff(y1, y) == 0);
  }
  dl_tape_free(&tp);
  dl_tensor_free(r.x);
  dl_tensor_free(r.h0);
  dl_tensor_free(r.c0);
  dl_tensor_free(r.k);
  dl_tensor_free(r.v);
  dl_tensor_free(r.mask);
  dl_tensor_free(x2);
  dl_tensor_free(x3);
  dl_model_free(m);
  return harness_failed_checks - before;
}

static void test_layers_match_torch(void) {
  static const char *const must[] = {
      "linear", "linear_nobias_3d", "conv1d", "conv2d_rect", "conv2d_nobias", "maxpool_k3s2p1", "avgpool_k3s2p1",
      "avgpool_rect_excl", "gap", "flatten", "bn1d_2d_train", "bn1d_3d_train", "bn2d_train", "bn1d_2d_eval",
      "bn1d_3d_eval", "bn2d_eval", "layernorm_1", "layernorm_2", "rmsnorm_1", "rmsnorm_2_default_eps",
      "dropout_p0_train", "dropout_eval", "embedding", "embedding_sparse", "rnn_tanh_h0", "rnn_relu", "lstm",
      "lstm_h0c0", "gru_h0", "lstm_bi_h0c0", "gru_bi", "rnn_bi_h0", "lstm_bi_packed_h0c0", "gru_packed",
      "rnn_bi_packed", "maxpool_dil_ceil", "avgpool_ceil_excl", "mha_self", "mha_causal", "mha_cross_nobias", "mlp", "residual", "resblock",
      "resblock_eval", "conv3d_rect", "conv3d_nobias", "maxpool3d_k3s2p1", "maxpool3d_dil_ceil", "avgpool3d_rect_excl",
      "avgpool3d_ceil"};
  int i, n = 0, f32 = 0;
  if (!fx_loaded) SKIP("%s", fx.err);
  for (i = 0; i < (int)(sizeof must / sizeof *must); i++)
    CHECK_MSG(fx2_find(&fx, must[i], 1) && fx2_find(&fx, must[i], 0), "no fixture case %s", must[i]);
  for (i = 0; i < fx.n; i++) {
    const fx2_case *c = &fx.cases[i];
    int fails;
    if (!strncmp(c->name, "init_", 5) || strchr(c->name, '+')) continue;
    fails = run_layer_case(c);
    CHECK_MSG(fails == 0, "fixture %s %s: %d comparison(s) off PyTorch", c->name, c->f64 ? "f64" : "f32", fails);
    n++;
    f32 += !c->f64;
  }
  CHECK(n >= 2 * (int)(sizeof must / sizeof *must) && f32 * 2 == n);
  printf("  %d layer cases (%d f32); worst error vs PyTorch: f64 %.3g element-wise (%s), f32 %.3g norm-wise (%s; "
         "element-wise vs PyTorch's f32 %.3g)\n", n, f32, worst[1], worst_what[1], worst[0], worst_what[0], worst_f32_elem);
}

/* >>gradcheck through layers ----------------------------------------------- */

typedef struct gc_user {
  lay_run *r;
} gc_user;
static dl_tensor *gc_fn(dl_tape *tp, dl_tensor **in, void *user) {
  lay_run *r = ((gc_user *)user)->r;
  (void)in; /* the same tensors the run holds */
  return lay_forward(tp, r);
}

static double worst_gc;

static void gradcheck_case(const char *name) {
  const fx2_case *c = fx2_find(&fx, name, 1);
  dl_model *m;
  lay_run r;
  gc_user u;
  dl_tensor *in[16];
  dl_gradcheck_result res;
  int nin = 0, i, ok;
  int64_t want = 0;
  CHECK_MSG(c != NULL, "no fixture case %s", name);
  if (!c) return;
  m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 3});
  memset(&r, 0, sizeof r);
  r.m = m;
  r.l = build_case(m, c, &r.call);
  load_state(m, c);
  dl_model_train(m, PI("train"));
  CHECK(dl_model_pack(m) == DL_OK);
  r.x = mk_in(c, "x");
  r.h0 = mk_in(c, "h0");
  r.c0 = mk_in(c, "c0");
  r.k = mk_in(c, "k");
  r.v = mk_in(c, "v");
  r.mask = r.call == CALL_MHA ? mk_in(c, "mask") : NULL;
  get_lengths(c, &r);
  if (r.x->dtype != DL_I64) in[nin++] = r.x;
  if (r.h0) in[nin++] = r.h0;
  if (r.c0) in[nin++] = r.c0;
  if (r.k) in[nin++] = r.k;
  if (r.v) in[nin++] = r.v;
  for (i = 0; i < nin; i++) dl_requires_grad(in[i]);
  for (i = 0; i < m->nparams && nin < 16; i++)
    if (m->params[i]->kind != DL_PARAM_BUFFER) in[nin++] = &m->params[i]->t;
  for (i = 0; i < nin; i++) want += in[i]->numel;
  u.r = &r;
  ok = dl_gradcheck(&ctx, gc_fn, &u, nin, in, 1e-6, 1e-7, &res);
  worst_gc = fmax(worst_gc, res.max_err);
  CHECK_MSG(ok, "gradcheck %s: grad_err %.3g (input %d element %lld: analytic %.10g numeric %.10g) jvp_err %.3g", name,
            res.grad_err, res.input, (long long)res.index, res.analytic, res.numeric, res.jvp_err);
  CHECK_MSG(res.checked == want, "gradcheck %s checked %lld of %lld elements", name, (long long)res.checked,
            (long long)want);
  dl_tensor_free(r.x);
  dl_tensor_free(r.h0);
  dl_tensor_free(r.c0);
  dl_tensor_free(r.k);
  dl_tensor_free(r.v);
  dl_tensor_free(r.mask);
  dl_model_free(m);
}

static void test_layers_gradcheck(void) {
  static const char *const names[] = {"linear_3d", "conv1d", "conv2d_rect", "avgpool_rect_excl", "maxpool_k3s2p1",
                                      "gap", "bn1d_3d_train", "bn2d_eval", "layernorm_2", "rmsnorm_1", "embedding",
                                      "embedding_sparse", "rnn_tanh_h0", "lstm_h0c0", "gru_h0", "mha_causal",
                                      "mha_cross_nobias", "mlp", "residual", "resblock", "lstm_bi_packed_h0c0",
                                      "gru_packed", "conv3d_rect", "maxpool3d_dil_ceil", "avgpool3d_rect_excl"};
  int i;
  if (!fx_loaded) SKIP("%s", fx.err);
  for (i = 0; i < (int)(sizeof names / sizeof *names); i++) gradcheck_case(names[i]);
  printf("  gradcheck through %d layers: worst error %.3g\n", (int)(sizeof names / sizeof *names), worst_gc);
}

/* >>default initialisation ------------------------------------------------- */

typedef struct dist {
  double max_abs, mean, std;
  int64_t n;
} dist;
static dist tensor_dist(const dl_tensor *t) {
  dist d = {0, 0, 0, t->numel};
  double s = 0, ss = 0;
  int64_t i;
  for (i = 0; i < t->numel; i++) {
    double v = dl__get_at(t, dl__offset_of_linear(t, i));
    s += v;
    d.max_abs = fmax(d.max_abs, fabs(v));
  }
  d.mean = s / (double)t->numel;
  for (i = 0; i < t->numel; i++) {
    double v = dl__get_at(t, dl__offset_of_linear(t, i)) - d.mean;
    ss += v * v;
  }
  d.std = t->numel > 1 ? sqrt(ss / (double)(t->numel - 1)) : 0;
  return d;
}

static double worst_std_dev; /* worst |std / torch's std - 1| seen, for the summary line */

/* t's values against PyTorch's statistics st = [max |w|, mean, std, numel]
 * pooled over many draws: a constant (std 0) exactly; otherwise the std and
 * the mean within 5 standard errors of one draw of t->numel values, and for
 * a uniform distribution (max |w| / std < 2; sqrt(3) for uniform, ~4.5 for a
 * normal sample this size) max |w| at most torch's (the bound) and within
 * 12/n of it (probability e^-12 to fall short by chance). */
static void check_dist(const char *what, const dl_tensor *t, const double *st) {
  dist d = tensor_dist(t);
  const double n = (double)t->numel;
  int uniform;
  CHECK_MSG(t->numel == (int64_t)st[3], "%s: %lld elements, torch's %g", what, (long long)t->numel, st[3]);
  if (st[2] == 0) {
    CHECK_MSG(d.max_abs == fabs(st[1]) && d.std == 0 && d.mean == st[1], "%s: not the constant %g (mean %g std %g)",
              what, st[1], d.mean, d.std);
    return;
  }
  uniform = st[0] / st[2] < 2;
  worst_std_dev = fmax(worst_std_dev, fabs(d.std / st[2] - 1));
  if (verbose)
    printf("    %-40s %s max %.5g (torch %.5g) mean %+.3g (torch %+.3g) std %.5g (torch %.5g)\n", what,
           uniform ? "U" : "N", d.max_abs, st[0], d.mean, st[1], d.std, st[2]);
  CHECK_MSG(fabs(d.std / st[2] - 1) <= 5 * (uniform ? 0.447 : 0.707) / sqrt(n) + 1e-3,
            "%s: std %.6g, torch's %.6g (n %g)", what, d.std, st[2], n);
  CHECK_MSG(fabs(d.mean - st[1]) <= 5 * st[2] / sqrt(n) + 1e-4 * st[2], "%s: mean %.6g, torch's %.6g (std %.4g, n %g)",
            what, d.mean, st[1], st[2], n);
  if (uniform)
    CHECK_MSG(d.max_abs <= st[0] * (1 + 1e-3) && d.max_abs >= st[0] * (1 - 12 / n),
              "%s: max |w| %.8g, torch's bound %.8g (n %g)", what, d.max_abs, st[0], n);
  else
    CHECK_MSG(d.max_abs <= 8 * st[2] && d.max_abs >= 2 * st[2], "%s: max |w| %.6g for std %.6g", what, d.max_abs,
              st[2]);
}

static void build_init_case(dl_model *m, const char *name) {
  if (!strcmp(name, "init_linear")) dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 256, .out = 128});
  else if (!strcmp(name, "init_conv2d"))
    dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 16, .out = 32, .kernel = 3});
  else if (!strcmp(name, "init_conv2d_groups"))
    dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 16, .out = 32, .kernel = 3, .kernel_w = 5, .groups = 4});
  else if (!strcmp(name, "init_conv3d"))
    dl_conv3d_make(m, NULL, NULL,
                   &(dl_conv3d_desc){.in = 8, .out = 16, .kernel = 3, .kernel_w = 2, .groups = 2});
  else if (!strcmp(name, "init_conv1d")) dl_conv1d_make(m, NULL, NULL, &(dl_conv1d_desc){.in = 8, .out = 16, .kernel = 5});
  else if (!strcmp(name, "init_embedding"))
    dl_embedding_make(m, NULL, NULL, &(dl_embedding_desc){.num = 500, .dim = 32});
  else if (!strcmp(name, "init_rnn")) dl_rnn_make(m, NULL, NULL, &(dl_rnn_desc){.input = 32, .hidden = 64});
  else if (!strcmp(name, "init_lstm"))
    dl_lstm_make(m, NULL, NULL, &(dl_rnn_desc){.input = 32, .hidden = 64, .num_layers = 2});
  else if (!strcmp(name, "init_gru")) dl_gru_make(m, NULL, NULL, &(dl_rnn_desc){.input = 32, .hidden = 64});
  else if (!strcmp(name, "init_mha")) dl_mha_make(m, NULL, NULL, &(dl_mha_desc){.embed = 64, .heads = 4});
  else if (!strcmp(name, "init_batchnorm2d")) dl_batchnorm2d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 16});
  else if (!strcmp(name, "init_layernorm")) dl_layernorm_make(m, NULL, NULL, &(dl_norm_desc){.shape = {32}});
}

static void test_default_init_matches_torch(void) {
  static const char *const names[] = {"init_linear", "init_conv2d", "init_conv2d_groups", "init_conv3d", "init_conv1d",
                                      "init_embedding", "init_rnn", "init_lstm", "init_gru", "init_mha",
                                      "init_batchnorm2d", "init_layernorm"};
  int i, dti, k, checked = 0;
  if (!fx_loaded) SKIP("%s", fx.err);
  for (dti = 0; dti < 2; dti++)
    for (i = 0; i < (int)(sizeof names / sizeof *names); i++) {
      const fx2_case *c = fx2_find(&fx, names[i], 1);
      dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = dti ? DL_F64 : DL_F32, .seed = 500 + (uint64_t)i});
      int nfloat = 0;
      CHECK_MSG(c != NULL, "no fixture case %s", names[i]);
      if (!c) { dl_model_free(m); continue; }
      build_init_case(m, names[i]);
      CHECK(dl_model_status(m) == DL_OK);
      for (k = 0; k < c->nt; k++) {
        const char *pn = c->t[k].key + 3;
        dl_param *p = dl_model_param(m, pn);
        char what[160];
        CHECK_MSG(!strncmp(c->t[k].key, "st:", 3) && p != NULL, "%s: no parameter %s", names[i], c->t[k].key);
        if (!p) continue;
        snprintf(what, sizeof what, "%s %s %s", names[i], dti ? "f64" : "f32", pn);
        check_dist(what, &p->t, c->t[k].v);
        checked++;
      }
      for (k = 0; k < m->nparams; k++) nfloat += m->params[k]->t.dtype != DL_I64;
      CHECK_MSG(nfloat == c->nt, "%s: %d float parameters and buffers, torch %d", names[i], nfloat, c->nt);
      /* the kinds behind the default weight decay */
      for (k = 0; k < m->nparams; k++) {
        const dl_param *p = m->params[k];
        const char *last = strrchr(p->name, '.') + 1;
        int bias = strstr(last, "bias") != NULL, norm = !strncmp(names[i] + 5, "batchnorm", 9) ||
                                                        !strncmp(names[i] + 5, "layernorm", 9);
        dl_param_kind want = !strncmp(last, "running", 7) || !strcmp(last, "num_batches_tracked") ? DL_PARAM_BUFFER
                             : norm ? DL_PARAM_NORM : bias ? DL_PARAM_BIAS : DL_PARAM_WEIGHT;
        CHECK_MSG(p->kind == want && p->lr_mult == 1 && p->wd_mult == (want == DL_PARAM_WEIGHT),
                  "%s: kind %d (want %d), lr_mult %g, wd_mult %g", p->name, (int)p->kind, (int)want, p->lr_mult,
                  p->wd_mult);
      }
      dl_model_free(m);
    }
  CHECK(checked > 40);
  printf("  default init of %d parameters in f32 and f64 vs PyTorch: worst |std ratio - 1| %.3g\n", checked / 2,
         worst_std_dev);
}

static void test_init_schemes_match_torch_init(void) {
  static const struct {
    const char *name;
    dl_init in;
  } schemes[] = {{"xavier_uniform", {DL_INIT_XAVIER_UNIFORM, 0}},
                 {"xavier_uniform_g2", {DL_INIT_XAVIER_UNIFORM, 2}},
                 {"xavier_normal", {DL_INIT_XAVIER_NORMAL, 0}},
                 {"kaiming_uniform", {DL_INIT_KAIMING_UNIFORM, 0}},
                 {"kaiming_uniform_a5", {DL_INIT_KAIMING_UNIFORM, 2.23606797749978969641}},
                 {"kaiming_normal", {DL_INIT_KAIMING_NORMAL, 0}},
                 {"kaiming_normal_a01", {DL_INIT_KAIMING_NORMAL, 0.1}},
                 {"lecun_uniform", {DL_INIT_LECUN_UNIFORM, 0}},
                 {"lecun_normal", {DL_INIT_LECUN_NORMAL, 0}},
                 {"uniform_03", {DL_INIT_UNIFORM, 0.3}},
                 {"normal_05", {DL_INIT_NORMAL, 0.5}}};
  const fx2_case *c;
  dl_rng rng = dl_rng_make(77);
  int i, sh, dti;
  if (!fx_loaded) SKIP("%s", fx.err);
  c = fx2_find(&fx, "init_schemes", 1);
  CHECK(c != NULL);
  if (!c) return;
  for (i = 0; i < (int)(sizeof schemes / sizeof *schemes); i++)
    for (sh = 0; sh < 2; sh++)
      for (dti = 0; dti < 2; dti++) {
        char key[64], what[96];
        const fx2_tensor *st;
        dl_tensor *t = sh ? dl_tensor_make(&ctx, dti ? DL_F64 : DL_F32, DL_SHAPE(64, 32, 3, 3))
                          : dl_tensor_make(&ctx, dti ? DL_F64 : DL_F32, DL_SHAPE(256, 256));
        snprintf(key, sizeof key, "%s_%s", schemes[i].name, sh ? "4d" : "sq");
        snprintf(what, sizeof what, "dl_init_tensor %s %s", key, dti ? "f64" : "f32");
        st = fx2_get(c, key);
        CHECK_MSG(st != NULL, "no torch statistics %s", key);
        CHECK(dl_init_tensor(t, schemes[i].in, &rng) == DL_OK);
        if (st) check_dist(what, t, st->v);
        dl_tensor_free(t);
      }
}

/* max |G - gain^2 I| for G = W W^T (rows <= cols) or W^T W, W = t viewed as
 * [size(0), numel / size(0)]. */
static double ortho_err(const dl_tensor *t, double gain) {
  const int64_t rows = t->shape[0], cols = t->numel / rows, n = rows <= cols ? rows : cols, len = rows <= cols ? cols : rows;
  double e = 0;
  int64_t a, b, k;
  for (a = 0; a < n; a++)
    for (b = 0; b < n; b++) {
      double s = 0;
      for (k = 0; k < len; k++) {
        const int64_t ia = rows <= cols ? a * cols + k : k * cols + a, ib = rows <= cols ? b * cols + k : k * cols + b;
        s += dl__get_at(t, ia) * dl__get_at(t, ib);
      }
      e = fmax(e, fabs(s - (a == b ? gain * gain : 0)));
    }
  return e;
}

static void test_init_orthogonal_constant_and_misuse(void) {
  dl_rng rng = dl_rng_make(5);
  static const int64_t shapes[][4] = {{64, 128}, {128, 64}, {64, 64}, {8, 4, 3, 3}};
  static const int nd[] = {2, 2, 2, 4};
  int s, dti;
  double fi, fo;
  for (dti = 0; dti < 2; dti++)
    for (s = 0; s < 4; s++) {
      const dl_dtype dt = dti ? DL_F64 : DL_F32;
      const double tol = dti ? 1e-6 : 1e-5;
      dl_tensor *a = dl_tensor_make(&ctx, dt, nd[s], shapes[s]), *b = dl_tensor_make(&ctx, dt, nd[s], shapes[s]);
      dist d;
      double e1, e2;
      CHECK(dl_init_tensor(a, (dl_init){DL_INIT_ORTHOGONAL, 0}, &rng) == DL_OK);
      CHECK(dl_init_tensor(b, (dl_init){DL_INIT_ORTHOGONAL, 2.0}, &rng) == DL_OK);
      e1 = ortho_err(a, 1.0);
      e2 = ortho_err(b, 2.0);
      CHECK_MSG(e1 <= tol && e2 <= 4 * tol, "orthogonal %s %s: |W W^T - I| %.3g, gain 2: |W W^T - 4I| %.3g",
                DL_SHAPESTR(a), dti ? "f64" : "f32", e1, e2);
      CHECK(ortho_err(b, 1.0) > 1); /* the gain is there */
      /* random, not a fixed matrix: two draws differ, entries ~ 1/sqrt(larger side) */
      CHECK(max_abs_diff(a, b) > 0.1);
      d = tensor_dist(a);
      {
        const double side = (double)(shapes[s][0] < a->numel / shapes[s][0] ? a->numel / shapes[s][0] : shapes[s][0]);
        CHECK_MSG(fabs(d.std * sqrt(side) - 1) < 0.05, "orthogonal %s: std %.4g, want %.4g", DL_SHAPESTR(a), d.std,
                  1 / sqrt(side));
      }
      dl_tensor_free(a);
      dl_tensor_free(b);
    }
  { /* constant, zeros, ones */
    dl_tensor *t = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(7, 5));
    dist d;
    CHECK(dl_init_tensor(t, (dl_init){DL_INIT_CONSTANT, 0.25}, &rng) == DL_OK);
    d = tensor_dist(t);
    CHECK(d.mean == 0.25 && d.std == 0 && d.max_abs == 0.25);
    CHECK(dl_init_tensor(t, (dl_init){DL_INIT_ONES, 0}, &rng) == DL_OK);
    d = tensor_dist(t);
    CHECK(d.mean == 1 && d.std == 0);
    CHECK(dl_init_tensor(t, (dl_init){DL_INIT_ZEROS, 0}, &rng) == DL_OK);
    CHECK(sum_abs(t) == 0);
    dl_tensor_free(t);
  }
  { /* fans as torch.nn.init computes them; the fan-based schemes need 2 dims */
    dl_tensor *t = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(64, 32, 3, 3)), *b = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(10));
    dl_init_fans(t, &fi, &fo);
    CHECK(fi == 288 && fo == 576);
    dl_init_fans(b, &fi, &fo);
    CHECK(fi == 0 && fo == 0);
    EXPECT_PANIC(dl_init_tensor(b, (dl_init){DL_INIT_XAVIER_UNIFORM, 0}, &rng), "dl_init_tensor", "xavier_uniform",
                 "f32[10]");
    EXPECT_PANIC(dl_init_tensor(b, (dl_init){DL_INIT_KAIMING_NORMAL, 0}, &rng), "dl_init_tensor", "kaiming_normal",
                 "f32[10]");
    EXPECT_PANIC(dl_init_tensor(b, (dl_init){DL_INIT_ORTHOGONAL, 0}, &rng), "dl_init_tensor", "orthogonal", "f32[10]");
    EXPECT_PANIC(dl_init_tensor(t, (dl_init){DL_INIT_DEFAULT, 0}, &rng), "dl_init_tensor", "no initialisation scheme");
    CHECK(dl_init_tensor(b, (dl_init){DL_INIT_UNIFORM, 0.5}, &rng) == DL_OK && tensor_dist(b).max_abs <= 0.5 &&
          tensor_dist(b).std > 0);
    dl_tensor_free(t);
    dl_tensor_free(b);
  }
  { /* every scheme has a distinct name (dl_model_configure's init= reads them) */
    int a, b;
    for (a = 0; a < DL__INIT_COUNT; a++)
      for (b = 0; b < a; b++) CHECK(strcmp(dl_init_name((dl_init_kind)a), dl_init_name((dl_init_kind)b)) != 0);
    CHECK(!strcmp(dl_init_name(DL_INIT_XAVIER_UNIFORM), "xavier_uniform") && !strcmp(dl_init_name(DL__INIT_COUNT), "?"));
  }
}

static void test_model_set_init(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.seed = 9});
  dl_param *w, *b;
  dist d;
  const double xs = sqrt(2.0 / (256 + 128));
  dl_linear_make(m, NULL, "fc", &(dl_linear_desc){.in = 256, .out = 128});
  dl_batchnorm1d_make(m, NULL, "bn", &(dl_batchnorm_desc){.features = 128});
  w = dl_model_param(m, "fc.weight");
  b = dl_model_param(m, "fc.bias");
  CHECK(dl_model_set_init(m, "fc.weight", (dl_init){DL_INIT_XAVIER_NORMAL, 0}) == 1);
  CHECK(w->init.kind == DL_INIT_XAVIER_NORMAL && b->init.kind == DL_INIT_DEFAULT);
  d = tensor_dist(&w->t);
  CHECK_MSG(fabs(d.std / xs - 1) < 0.03, "xavier_normal std %.5g want %.5g", d.std, xs);
  CHECK(dl_model_set_init(m, "fc.weight", (dl_init){DL_INIT_DEFAULT, 0}) == 1); /* back to U(+-1/16) */
  d = tensor_dist(&w->t);
  CHECK(d.max_abs <= 1.0 / 16 && d.max_abs > 0.99 / 16 && w->init.kind == DL_INIT_DEFAULT);
  /* buffers are never re-initialised */
  CHECK(dl_model_set_init(m, "*", (dl_init){DL_INIT_ZEROS, 0}) == 4);
  CHECK(sum_abs(&w->t) == 0 && sum_abs(dl_model_tensor(m, "bn.weight")) == 0);
  CHECK(tensor_dist(dl_model_tensor(m, "bn.running_var")).mean == 1);
  CHECK(dl_model_set_init(m, "nothing", (dl_init){DL_INIT_ONES, 0}) == 0);
  dl_model_free(m);
}

/* >>hyperparameters by name ------------------------------------------------ */

static void test_name_match(void) {
  static const struct {
    const char *pat, *s;
    int want;
  } cases[] = {{"conv*.weight", "conv1.weight", 1},
               {"conv*.weight", "conv2.block.weight", 1},
               {"conv*.weight", "conv1.bias", 0},
               {"conv*.weight", "xconv1.weight", 0},
               {"conv*.weight", "conv1.weight.x", 0},
               {"conv?.weight", "conv1.weight", 1},
               {"conv?.weight", "conv12.weight", 0},
               {"?", "a", 1},
               {"?", "", 0},
               {"?", "ab", 0},
               {"*", "", 1},
               {"*", "features.3.running_mean", 1},
               {"**", "x", 1},
               {"", "", 1},
               {"", "a", 0},
               {"*.bias", "fc.bias", 1},
               {"*.bias", "fc.bias_ih_l0", 0},
               {"*bias*", "lstm.bias_ih_l0", 1},
               {"a*b*c", "aXbYc", 1},
               {"a*b*c", "abcbc", 1},
               {"a*b*c", "aXbY", 0},
               {"fc.weight", "fc.weight", 1},
               {"fc.weight", "fc.weights", 0},
               {"*.0.*", "features.0.weight", 1},
               {"*.0.*", "features.10.weight", 0}};
  int i;
  for (i = 0; i < (int)(sizeof cases / sizeof *cases); i++)
    CHECK_MSG(dl_name_match(cases[i].pat, cases[i].s) == cases[i].want, "dl_name_match(\"%s\", \"%s\") != %d",
              cases[i].pat, cases[i].s, cases[i].want);
}

/* conv1, conv2, bn, conv_block.0, gap, fc: 10 trainable parameters, 3 buffers */
static dl_model *hp_model(uint64_t seed) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = seed});
  dl_layer *blk;
  dl_conv2d_make(m, NULL, "conv1", &(dl_conv2d_desc){.in = 1, .out = 2, .kernel = 3, .padding = 1});
  dl_conv2d_make(m, NULL, "conv2", &(dl_conv2d_desc){.in = 2, .out = 2, .kernel = 3, .padding = 1});
  dl_batchnorm2d_make(m, NULL, "bn", &(dl_batchnorm_desc){.features = 2});
  blk = dl_sequential_make(m, NULL, "conv_block");
  dl_conv2d_make(m, blk, NULL, &(dl_conv2d_desc){.in = 2, .out = 2, .kernel = 1});
  dl_global_avgpool_make(m, NULL, "gap");
  dl_linear_make(m, NULL, "fc", &(dl_linear_desc){.in = 2, .out = 3});
  return m;
}

/* A copy of every parameter's hyperparameters and values. */
typedef struct snap {
  int n;
  dl_param p[16];
  double *v[16];
} snap;
static void snap_take(snap *s, const dl_model *m) {
  int i;
  int64_t j;
  s->n = m->nparams;
  for (i = 0; i < m->nparams && i < 16; i++) {
    const dl_tensor *t = &m->params[i]->t;
    s->p[i] = *m->params[i];
    s->v[i] = (double *)malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
    for (j = 0; j < t->numel; j++) s->v[i][j] = dl__get_at(t, dl__offset_of_linear(t, j));
  }
}
static void snap_free(snap *s) {
  int i;
  for (i = 0; i < s->n && i < 16; i++) free(s->v[i]);
}
/* Names of the parameters that differ from the snapshot (in hyperparameters
 * or values), comma-separated, "" when none. */
static const char *snap_diff(const snap *s, const dl_model *m) {
  static char out[512];
  int i;
  size_t k = 0;
  out[0] = 0;
  for (i = 0; i < s->n && i < 16; i++) {
    const dl_param *a = &s->p[i], *b = m->params[i];
    int64_t j;
    int same = a->lr_mult == b->lr_mult && a->wd_mult == b->wd_mult && a->clip_value == b->clip_value &&
               a->clip_norm == b->clip_norm && a->frozen == b->frozen && a->init.kind == b->init.kind &&
               a->init.arg == b->init.arg && (a->t.flags & DL_TENSOR_REQUIRES_GRAD) == (b->t.flags & DL_TENSOR_REQUIRES_GRAD);
    for (j = 0; same && j < b->t.numel; j++) same = s->v[i][j] == dl__get_at(&b->t, dl__offset_of_linear(&b->t, j));
    if (!same && k < sizeof out) k += (size_t)snprintf(out + k, sizeof out - k, "%s%s", k ? ", " : "", b->name);
  }
  return out;
}

static void test_model_set(void) {
  dl_model *m = hp_model(1);
  dl_param *c1 = dl_model_param(m, "conv1.weight"), *cb = dl_model_param(m, "conv_block.0.weight"),
           *fcb = dl_model_param(m, "fc.bias");
  int i;
  CHECK(m->nparams == 13 && dl_model_numel(m) == 20 + 38 + 4 + 6 + 9);
  CHECK(dl_model_set(m, "conv*.weight", DL_LR_MULT, 0.1) == 3); /* conv1, conv2, conv_block.0 */
  CHECK(c1->lr_mult == 0.1 && cb->lr_mult == 0.1 && dl_model_param(m, "conv1.bias")->lr_mult == 1);
  CHECK(dl_model_set(m, "*", DL_WD_MULT, 0.5) == 10); /* buffers are skipped */
  for (i = 0; i < m->nparams; i++)
    CHECK(m->params[i]->wd_mult == (m->params[i]->kind == DL_PARAM_BUFFER ? 0 : 0.5));
  CHECK(dl_model_set(m, "bn.running_*", DL_LR_MULT, 3) == 0);
  CHECK(dl_model_set(m, "nothing", DL_LR_MULT, 3) == 0);
  CHECK(dl_model_set(m, "fc.?ias", DL_CLIP_VALUE, 0.25) == 1 && fcb->clip_value == 0.25);
  CHECK(dl_model_set(m, "fc.*", DL_CLIP_NORM, 2) == 2 && fcb->clip_norm == 2);
  CHECK(dl_model_set(m, "bn.*", DL_FROZEN, 1) == 2 && dl_model_param(m, "bn.weight")->frozen &&
        dl_model_param(m, "bn.bias")->frozen && !dl_model_param(m, "bn.running_mean")->frozen);
  EXPECT_PANIC(dl_model_set(m, "fc.*", DL_CLIP_VALUE, -1), "dl_model_set", "fc.*", "clip");
  EXPECT_PANIC(dl_model_set(m, "fc.*", DL_CLIP_NORM, NAN), "dl_model_set", "clip");
  CHECK(fcb->clip_value == 0.25); /* the panicking calls changed nothing */
  dl_model_free(m);
}

static void test_model_configure(void) {
  dl_model *m = hp_model(2);
  dl_param *c1w = dl_model_param(m, "conv1.weight"), *c2w = dl_model_param(m, "conv2.weight"),
           *fcw = dl_model_param(m, "fc.weight"), *fcb = dl_model_param(m, "fc.bias");
  dist d;
  snap s;
  int i;
  /* a good spec: rules in order, later ones win */
  dl_status st = dl_model_configure(m, "conv*.weight:lr_mult=0.1,wd_mult=2;fc.bias:clip_value=0.5,clip_norm=1.5;"
                                       "bn.*:frozen=1;conv1.weight:init=constant(0.25);fc.weight:init=xavier_uniform;"
                                       "conv1.weight:lr_mult=3");
  CHECK_MSG(st == DL_OK, "%s", dl_ctx_message(&ctx));
  CHECK(c1w->lr_mult == 3 && c1w->wd_mult == 2 && c2w->lr_mult == 0.1 && c2w->wd_mult == 2);
  CHECK(dl_model_param(m, "conv_block.0.weight")->lr_mult == 0.1 && dl_model_param(m, "conv1.bias")->lr_mult == 1 &&
        dl_model_param(m, "conv1.bias")->wd_mult == 0);
  CHECK(fcb->clip_value == 0.5 && fcb->clip_norm == 1.5 && fcw->clip_value == 0);
  CHECK(dl_model_param(m, "bn.weight")->frozen && dl_model_param(m, "bn.bias")->frozen &&
        !dl_model_param(m, "conv1.weight")->frozen);
  d = tensor_dist(&c1w->t);
  CHECK(d.mean == 0.25 && d.std == 0 && c1w->init.kind == DL_INIT_CONSTANT && c1w->init.arg == 0.25);
  d = tensor_dist(&fcw->t); /* xavier_uniform [3, 2]: U(+-sqrt(6/5)) */
  CHECK(fcw->init.kind == DL_INIT_XAVIER_UNIFORM && d.max_abs <= sqrt(6.0 / 5) && d.std > 0);
  CHECK(dl_model_configure(m, "") == DL_OK && dl_model_configure(m, "fc.bias:init=kaiming_normal(0.1)") == DL_ERR_ARG);
  CHECK(dl_model_configure(m, "*.weight:init=default") == DL_OK && c1w->init.kind == DL_INIT_DEFAULT);
  d = tensor_dist(&c1w->t); /* back to conv1's default U(+-1/3) */
  CHECK(d.std > 0 && d.max_abs <= 1.0 / 3);
  dl_model_free(m);

  /* bad specs: DL_ERR_ARG, a message naming the rule, that rule not applied */
  {
    static const struct {
      const char *spec, *frag1, *frag2;
    } bad[] = {
        {"conv1.weight:colour=3", "unknown key 'colour'", "conv1.weight:colour=3"},
        {"fc.weight:wd_mult=1.5x", "bad value '1.5x'", "fc.weight:wd_mult=1.5x"},
        {"fc.weight:lr_mult=", "no value", "fc.weight:lr_mult="},
        {"fc.bias:clip_value=-1", "bad value '-1'", "fc.bias:clip_value=-1"},
        {"fc.weight=2", "is not PATTERN:KEY=VALUE", "fc.weight=2"},
        {":lr_mult=2", "is not PATTERN:KEY=VALUE", ":lr_mult=2"},
        {"fc.weight:lr_mult", "is not KEY=VALUE", "fc.weight:lr_mult"},
        {"nothing*:lr_mult=2", "matches no parameter", "nothing*"},
        {"bn.running_mean:lr_mult=2", "matches no parameter", "bn.running_mean"},
        {"fc.bias:init=xavier_uniform", "xavier_uniform cannot initialise fc.bias", "f64[3]"},
        {"conv1.*:init=kaiming_uniform", "cannot initialise conv1.bias", "kaiming_uniform"},
        {"fc.weight:init=bogus", "unknown init 'bogus'", "fc.weight:init=bogus"},
        {"fc.weight:init=constant(x)", "unknown init 'constant(x)'", "fc.weight"},
        {"conv2.weight:lr_mult=5;fc.weight:colour=1;fc.bias:lr_mult=6", "unknown key 'colour'", "fc.weight:colour=1"},
    };
    for (i = 0; i < (int)(sizeof bad / sizeof *bad); i++) {
      const char *diff;
      m = hp_model(3);
      snap_take(&s, m);
      dl_ctx_clear(&ctx);
      st = dl_model_configure(m, bad[i].spec);
      CHECK_MSG(st == DL_ERR_ARG, "configure \"%s\" gave %s", bad[i].spec, dl_status_str(st));
      CHECK_MSG(strstr(dl_ctx_message(&ctx), bad[i].frag1) && strstr(dl_ctx_message(&ctx), bad[i].frag2) &&
                    strstr(dl_ctx_message(&ctx), "dl_model_configure"),
                "configure \"%s\": message \"%s\" lacks \"%s\" or \"%s\"", bad[i].spec, dl_ctx_message(&ctx),
                bad[i].frag1, bad[i].frag2);
      diff = snap_diff(&s, m);
      /* the whole spec is checked first: not even the good rule before the bad one applies */
      CHECK_MSG(diff[0] == 0, "configure \"%s\" (DL_ERR_ARG) changed: %s", bad[i].spec, diff);
      snap_free(&s);
      dl_model_free(m);
    }
  }
}

/* A rule whose second or third KEY=VALUE is bad changes nothing either: the
 * rule is rejected as a whole (not only the rules after it). */
static void test_configure_bad_rule_changes_nothing(void) {
  static const char *const specs[] = {"fc.weight:lr_mult=4,wd_mult=7,bogus=1", "fc.weight:lr_mult=4,wd_mult=x",
                                      "conv*.weight:init=constant(0.5),clip_norm=-2"};
  int i;
  for (i = 0; i < (int)(sizeof specs / sizeof *specs); i++) {
    dl_model *m = hp_model(3);
    snap s;
    const char *diff;
    snap_take(&s, m);
    CHECK(dl_model_configure(m, specs[i]) == DL_ERR_ARG);
    diff = snap_diff(&s, m);
    CHECK_MSG(diff[0] == 0, "configure \"%s\" (DL_ERR_ARG) changed: %s", specs[i], diff);
    snap_free(&s);
    dl_model_free(m);
  }
}

/* A frozen parameter gets no gradient; frozen before or after the pack, and
 * unfrozen again. */
static void test_frozen(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 4});
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 3)), *y;
  dl_param *w1, *b1, *w2, *b2;
  dl_rng rng = dl_rng_make(8);
  dl_tape tp;
  int pass;
  dl_linear_make(m, NULL, "fc", &(dl_linear_desc){.in = 3, .out = 5});
  dl_act_make(m, NULL, NULL, DL_ACT_TANH, 0);
  dl_linear_make(m, NULL, "out", &(dl_linear_desc){.in = 5, .out = 2});
  w1 = dl_model_param(m, "fc.weight");
  b1 = dl_model_param(m, "fc.bias");
  w2 = dl_model_param(m, "out.weight");
  b2 = dl_model_param(m, "out.bias");
  CHECK(dl_model_configure(m, "fc.weight:frozen=1") == DL_OK);
  CHECK(dl_model_pack(m) == DL_OK);
  CHECK(!dl_requires_grad_p(&w1->t) && dl_requires_grad_p(&b1->t) && w1->t.grad == &w1->g);
  dl_tensor_rand_normal(x, &rng, 0, 1);
  dl_requires_grad(x);
  dl_tape_init(&tp, &ctx, 0);
  for (pass = 0; pass < 3; pass++) {
    /* pass 0: fc.weight frozen before the pack; 1: out.bias frozen after it,
     * fc.weight unfrozen; 2: everything frozen (x still gets its gradient) */
    dl_model_zero_grad(m);
    dl_zero_grad(x);
    y = dl_model_forward(m, &tp, x);
    dl_backward(&tp, dl_t_sum_all(&tp, dl_t_square(&tp, y)), NULL);
    CHECK_MSG((sum_abs(&w1->g) == 0) == (pass != 1), "pass %d: fc.weight gradient %g", pass, sum_abs(&w1->g));
    CHECK_MSG((sum_abs(&b2->g) == 0) == (pass >= 1), "pass %d: out.bias gradient %g", pass, sum_abs(&b2->g));
    CHECK((sum_abs(&b1->g) > 0) == (pass != 2) && (sum_abs(&w2->g) > 0) == (pass != 2) && sum_abs(x->grad) > 0);
    dl_tape_rewind(&tp);
    if (pass == 0) {
      CHECK(dl_model_set(m, "out.bias", DL_FROZEN, 1) == 1 && dl_model_set(m, "fc.weight", DL_FROZEN, 0) == 1);
      CHECK(dl_requires_grad_p(&w1->t) && !dl_requires_grad_p(&b2->t));
    } else if (pass == 1) {
      CHECK(dl_model_configure(m, "*:frozen=1") == DL_OK);
    }
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_model_free(m);
}

/* >>containers, lookups and misuse ----------------------------------------- */

static dl_tensor *head_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  return dl_layer_call(dl_layer_child(l, "fc"), tp, dl_layer_call(dl_layer_child(l, "mlp"), tp, x));
}

/* a parent from another model panics, and the model stays empty */
static void parent_of_another_model(dl_layer *parent) {
  dl_model *other = dl_model_make(&ctx, NULL);
  EXPECT_PANIC(dl_linear_make(other, parent, NULL, &(dl_linear_desc){.in = 1, .out = 1}), "belongs to another model");
  CHECK(other->nlayers == 0 && other->nparams == 0);
  dl_model_free(other);
}

static void test_nested_names_and_lookups(void) {
  static const char *const want[] = {"features.0.weight", "features.0.bias", "features.2.weight",
                                     "features.3.weight", "features.3.bias", "features.3.running_mean",
                                     "features.3.running_var", "features.3.num_batches_tracked", "head.mlp.0.weight",
                                     "head.mlp.0.bias", "head.fc.weight", "head.fc.bias"};
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 5});
  dl_layer *features = dl_sequential_make(m, NULL, "features"), *head, *mlp, *conv0, *bn, *fc, *gap;
  dl_tensor *x, *y;
  dl_tape tp;
  int i;
  conv0 = dl_conv2d_make(m, features, NULL, &(dl_conv2d_desc){.in = 2, .out = 4, .kernel = 3, .padding = 1});
  dl_act_make(m, features, NULL, DL_ACT_RELU, 0); /* "features.1": an index without parameters */
  dl_conv2d_make(m, features, NULL, &(dl_conv2d_desc){.in = 4, .out = 4, .kernel = 1, .no_bias = 1});
  bn = dl_batchnorm2d_make(m, features, NULL, &(dl_batchnorm_desc){.features = 4});
  gap = dl_global_avgpool_make(m, NULL, "pool");
  head = dl_module_make(m, NULL, "head", head_forward, NULL);
  mlp = dl_sequential_make(m, head, "mlp");
  dl_linear_make(m, mlp, NULL, &(dl_linear_desc){.in = 4, .out = 6});
  dl_act_make(m, mlp, NULL, DL_ACT_GELU, 0);
  fc = dl_linear_make(m, head, "fc", &(dl_linear_desc){.in = 6, .out = 3});
  CHECK(dl_model_status(m) == DL_OK);
  CHECK(m->nparams == (int)(sizeof want / sizeof *want));
  for (i = 0; i < m->nparams && i < (int)(sizeof want / sizeof *want); i++)
    CHECK_MSG(!strcmp(m->params[i]->name, want[i]), "parameter %d is '%s', want '%s'", i, m->params[i]->name, want[i]);
  /* layer names, local names, lookups */
  CHECK(!strcmp(features->name, "features") && !strcmp(conv0->name, "features.0") && !strcmp(conv0->local, "0"));
  CHECK(!strcmp(fc->name, "head.fc") && !strcmp(fc->local, "fc") && fc->parent == head && head->parent == &m->root);
  CHECK(dl_layer_child(features, "0") == conv0 && dl_layer_child(features, "3") == bn && dl_layer_child(features, "4") == NULL);
  CHECK(dl_layer_child(&m->root, "head") == head && dl_layer_child(head, "mlp") == mlp && dl_layer_child(head, "x") == NULL);
  CHECK(!strcmp(dl_layer_child(features, "1")->vt->type, "Activation") && features->nchild == 4 && m->root.nchild == 3);
  CHECK(dl_model_layer(m, "features.3") == bn && dl_model_layer(m, "head.mlp.0") == mlp->child[0] &&
        dl_model_layer(m, "") == &m->root && dl_model_layer(m, "head.mlp.7") == NULL && dl_model_layer(m, "pool") == gap);
  CHECK(dl_layer_param(conv0, "weight") == dl_model_tensor(m, "features.0.weight") && dl_layer_param(conv0, "bias") != NULL);
  CHECK(dl_layer_param(bn, "running_mean") == dl_model_tensor(m, "features.3.running_mean"));
  CHECK(dl_layer_param(bn, "num_batches_tracked")->dtype == DL_I64 && dl_layer_param(bn, "num_batches_tracked")->ndim == 0);
  CHECK(dl_layer_param(conv0, "running_mean") == NULL && dl_layer_param(head, "weight") == NULL &&
        dl_layer_param(fc, "weight") == dl_model_tensor(m, "head.fc.weight"));
  CHECK(dl_model_param(m, "head.fc.weight")->layer == fc && dl_model_tensor(m, "head.fc") == NULL &&
        dl_model_param(m, "nope") == NULL);
  CHECK(dl_model_numel(m) == 2 * 4 * 9 + 4 + 16 + 8 + 4 * 6 + 6 + 6 * 3 + 3);
  /* the whole model runs: features, pool, head (plain C forward) */
  x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 2, 5, 5));
  dl_tensor_fill(x, 0.5);
  dl_tape_init(&tp, &ctx, 0);
  y = dl_model_forward(m, &tp, x);
  CHECK(y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 3);
  /* misuse */
  EXPECT_PANIC(dl_linear_make(m, head, "fc", &(dl_linear_desc){.in = 1, .out = 1}), "Linear",
               "'head' already has a child named 'fc'");
  EXPECT_PANIC(dl_act_make(m, features, "3", DL_ACT_RELU, 0), "already has a child named '3'");
  EXPECT_PANIC(dl_sequential_make(m, NULL, "a.b"), "layer name 'a.b' must be non-empty and without dots");
  EXPECT_PANIC(dl_sequential_make(m, NULL, ""), "must be non-empty");
  EXPECT_PANIC(dl_linear_make(m, fc, NULL, &(dl_linear_desc){.in = 1, .out = 1}), "'head.fc' (Linear) is not a container");
  EXPECT_PANIC(dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 0, .out = 1}), "dl_linear_make", "in 0");
  EXPECT_PANIC(dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 3, .out = 4, .kernel = 3, .groups = 2}),
               "dl_conv2d_make", "groups 2");
  EXPECT_PANIC(dl_mha_make(m, NULL, NULL, &(dl_mha_desc){.embed = 6, .heads = 4}), "dl_mha_make", "divisible");
  EXPECT_PANIC(dl_lstm_make(m, NULL, NULL, &(dl_rnn_desc){.input = 2, .hidden = 3, .relu = 1}), "LSTM", "relu");
  EXPECT_PANIC(dl_dropout_make(m, NULL, NULL, 1.5), "dl_dropout_make", "1.5");
  parent_of_another_model(head);
  CHECK(m->nparams == (int)(sizeof want / sizeof *want) && m->nlayers == 11); /* the panics added nothing */
  /* wrong inputs: the panic names the layer type, its full name and the shape */
  {
    dl_tensor *bad = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 3, 5, 5)), *f32x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 2, 5, 5));
    dl_tensor *v6 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 5)), *i2 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 2));
    EXPECT_PANIC(dl_model_forward(m, &tp, bad), "Conv2d", "'features.0'", "size 2 at dim 1", "f64[2, 3, 5, 5]");
    EXPECT_PANIC(dl_model_forward(m, &tp, f32x), "Conv2d", "'features.0'", "expects f64 input", "f32[2, 2, 5, 5]");
    EXPECT_PANIC(dl_layer_call(fc, &tp, v6), "Linear", "'head.fc'", "size 6", "f64[3, 5]");
    EXPECT_PANIC(dl_layer_call(bn, &tp, i2), "BatchNorm2d", "'features.3'", "f64[2, 2]");
    EXPECT_PANIC(dl_layer_call(NULL, &tp, x), "dl_layer_call", "layer is NULL");
    EXPECT_PANIC(dl_rnn_forward(fc, &tp, x, NULL, NULL, NULL, NULL), "dl_rnn_forward", "'head.fc' is a Linear");
    EXPECT_PANIC(dl_mha_forward(fc, &tp, x, x, x, NULL), "dl_mha_forward", "not a MultiheadAttention");
    dl_tensor_free(bad);
    dl_tensor_free(f32x);
    dl_tensor_free(v6);
    dl_tensor_free(i2);
  }
  /* no layer after the pack */
  CHECK(dl_model_pack(m) == DL_OK && dl_model_pack(m) == DL_OK && m->packed);
  EXPECT_PANIC(dl_linear_make(m, NULL, "late", &(dl_linear_desc){.in = 1, .out = 1}), "Linear",
               "cannot add a layer to a packed model");
  EXPECT_PANIC(dl_sequential_make(m, head, NULL), "Sequential", "packed model");
  CHECK(m->nlayers == 11 && dl_model_layer(m, "late") == NULL);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_model_free(m);
}

/* The GRU layer with the reset gate before the product: a one-layer layer
 * gives exactly dl_t_gru_ex's output with gru_reset_before_linear (and not
 * the default form's); the 2-layer bidirectional layer on rows of
 * different lengths passes gradcheck; the summary says so; other kinds
 * refuse the flag. */
typedef struct gru_rb_gc {
  dl_layer *l;
  const int64_t *lengths;
} gru_rb_gc;
static dl_tensor *gru_rb_gc_fn(dl_tape *tp, dl_tensor **in, void *user) {
  const gru_rb_gc *u = (const gru_rb_gc *)user;
  dl_tensor *hn, *y = dl_rnn_forward_lengths(u->l, tp, in[0], u->lengths, in[1], NULL, &hn, NULL);
  dl_tensor *parts[2];
  parts[0] = dl_t_reshape(tp, y, 1, (const int64_t[]){-1});
  parts[1] = dl_t_reshape(tp, hn, 1, (const int64_t[]){-1});
  return dl_t_concat(tp, 2, parts, 0);
}
static void test_gru_reset_before_linear(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 21});
  dl_layer *one = dl_gru_make(m, NULL, "one", &(dl_rnn_desc){.input = 3, .hidden = 4, .gru_reset_before_linear = 1});
  dl_layer *bi = dl_gru_make(m, NULL, "bi",
                             &(dl_rnn_desc){.input = 3, .hidden = 4, .num_layers = 2, .bidirectional = 1,
                                            .gru_reset_before_linear = 1});
  static const int64_t lengths[3] = {5, 2, 4};
  dl_rng rng = dl_rng_make(77);
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 5, 3)), *h0 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 3, 4));
  dl_tensor *y, *yop, *ypt, *in[2];
  dl_rnn_args a;
  dl_gradcheck_result res;
  dl_tape tp;
  char line[200];
  int ok;
  CHECK(dl_model_status(m) == DL_OK && dl_model_pack(m) == DL_OK);
  dl_tensor_rand_normal(x, &rng, 0, 1);
  dl_tensor_rand_normal(h0, &rng, 0, 0.5);
  dl_tape_init(&tp, &ctx, 0);
  memset(&a, 0, sizeof a);
  a.gru_reset_before_linear = 1;
  y = dl_rnn_forward(one, &tp, x, NULL, NULL, NULL, NULL);
  yop = dl_t_gru_ex(&tp, x, NULL, dl_model_tensor(m, "one.weight_ih_l0"), dl_model_tensor(m, "one.weight_hh_l0"),
                    dl_model_tensor(m, "one.bias_ih_l0"), dl_model_tensor(m, "one.bias_hh_l0"), &a, NULL);
  ypt = dl_t_gru(&tp, x, NULL, dl_model_tensor(m, "one.weight_ih_l0"), dl_model_tensor(m, "one.weight_hh_l0"),
                 dl_model_tensor(m, "one.bias_ih_l0"), dl_model_tensor(m, "one.bias_hh_l0"), NULL);
  CHECK(max_abs_diff(y, yop) == 0);
  CHECK(max_abs_diff(y, ypt) > 1e-3);
  dl_tape_free(&tp);
  {
    gru_rb_gc u = {bi, lengths};
    in[0] = x;
    in[1] = h0;
    dl_requires_grad(x);
    dl_requires_grad(h0);
    ok = dl_gradcheck(&ctx, gru_rb_gc_fn, &u, 2, in, 1e-6, 1e-7, &res);
    CHECK_MSG(ok && res.checked == x->numel + h0->numel, "gradcheck: grad_err %.3g jvp_err %.3g", res.grad_err,
              res.jvp_err);
  }
  bi->vt->describe(bi, line, sizeof line);
  CHECK_MSG(strstr(line, "reset before linear") && strstr(line, "bidirectional"), "%s", line);
  EXPECT_PANIC(dl_lstm_make(m, NULL, "l", &(dl_rnn_desc){.input = 3, .hidden = 4, .gru_reset_before_linear = 1}),
               "LSTM", "GRU only");
  dl_tensor_free(x);
  dl_tensor_free(h0);
  dl_model_free(m);
}

static void test_wrong_inputs_of_each_layer(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 6});
  dl_layer *lstm = dl_lstm_make(m, NULL, "lstm", &(dl_rnn_desc){.input = 3, .hidden = 4, .num_layers = 2});
  dl_layer *mha = dl_mha_make(m, NULL, "attn", &(dl_mha_desc){.embed = 4, .heads = 2});
  dl_layer *emb = dl_embedding_make(m, NULL, "emb", &(dl_embedding_desc){.num = 5, .dim = 2});
  dl_layer *ln = dl_layernorm_make(m, NULL, "ln", &(dl_norm_desc){.ndims = 2, .shape = {3, 4}});
  dl_layer *grp = dl_module_make(m, NULL, "group", NULL, NULL);
  dl_layer *bn1 = dl_batchnorm1d_make(m, NULL, "bn1", &(dl_batchnorm_desc){.features = 3});
  dl_tensor *x5 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 6, 5)), *x3 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 6, 3));
  dl_tensor *h0 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(1, 2, 4)), *xf = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3));
  dl_tensor *x34 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 4, 3)), *x4d = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3, 2, 2));
  dl_tape tp;
  dl_tape_init(&tp, &ctx, 0);
  EXPECT_PANIC(dl_layer_call(lstm, &tp, x5), "LSTM", "'lstm'", "size 3 at dim 2", "f32[2, 6, 5]");
  EXPECT_PANIC(dl_rnn_forward(lstm, &tp, x3, h0, NULL, NULL, NULL), "LSTM", "'lstm'", "h0 f32[1, 2, 4]", "[2, 2, 4]");
  EXPECT_PANIC(dl_rnn_forward(lstm, &tp, x3, NULL, h0, NULL, NULL), "LSTM", "c0 f32[1, 2, 4]");
  EXPECT_PANIC(dl_layer_call(mha, &tp, x3), "MultiheadAttention", "'attn'", "size 4 at dim 2", "f32[2, 6, 3]");
  EXPECT_PANIC(dl_layer_call(emb, &tp, xf), "Embedding", "'emb'", "i64 or i32 indices", "f32[2, 3]");
  EXPECT_PANIC(dl_layer_call(ln, &tp, x34), "LayerNorm", "'ln'", "f32[2, 4, 3]");
  EXPECT_PANIC(dl_layer_call(grp, &tp, xf), "dl_layer_call", "Module 'group' has no one-input forward");
  EXPECT_PANIC(dl_layer_call(bn1, &tp, x4d), "BatchNorm1d", "'bn1'", "2..3 dims", "f32[2, 3, 2, 2]");
  dl_tape_free(&tp);
  dl_tensor_free(x5);
  dl_tensor_free(x3);
  dl_tensor_free(h0);
  dl_tensor_free(xf);
  dl_tensor_free(x34);
  dl_tensor_free(x4d);
  dl_model_free(m);
}

/* BatchNorm and Dropout read the model's train flag. */
static void test_train_eval(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 12});
  dl_layer *bn = dl_batchnorm1d_make(m, NULL, "bn", &(dl_batchnorm_desc){.features = 3});
  dl_layer *dr = dl_dropout_make(m, NULL, "drop", 0.5), *dr2 = dl_dropout_make(m, NULL, "drop2", 0.5);
  dl_layer *bnf = dl_batchnorm1d_make(m, NULL, "bnfree", &(dl_batchnorm_desc){.features = 3, .no_running_stats = 1});
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(8, 3)), *ones = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2000));
  dl_tensor *rm = dl_layer_param(bn, "running_mean"), *rv = dl_layer_param(bn, "running_var");
  dl_tensor *nbt = dl_layer_param(bn, "num_batches_tracked"), *y, *y2;
  dl_rng rng = dl_rng_make(3);
  dl_tape tp;
  int64_t i, j, zeros = 0, twos = 0;
  double bmean[3] = {0}, rm1[3];
  CHECK(m->training == 1); /* train by default, as in PyTorch */
  CHECK(bnf != NULL && dl_layer_param(bnf, "running_mean") == NULL && bnf->nparam == 2);
  dl_tensor_rand_normal(x, &rng, 2.0, 3.0);
  dl_tensor_fill(ones, 1.0);
  dl_tape_init(&tp, &ctx, 0);
  /* train: batch statistics, running statistics move, the counter counts */
  y = dl_layer_call(bn, &tp, x);
  for (j = 0; j < 3; j++) {
    double s = 0, ss = 0;
    for (i = 0; i < 8; i++) { s += dl_f64(y)[i * 3 + j]; bmean[j] += dl_f64(x)[i * 3 + j] / 8; }
    for (i = 0; i < 8; i++) ss += dl_f64(y)[i * 3 + j] * dl_f64(y)[i * 3 + j];
    CHECK_MSG(fabs(s / 8) < 1e-12 && fabs(ss / 8 - 1) < 1e-4, "train-mode BatchNorm channel %lld: mean %g var %g",
              (long long)j, s / 8, ss / 8);
    CHECK(fabs(dl_f64(rm)[j] - 0.1 * bmean[j]) < 1e-12 && dl_f64(rv)[j] != 1);
    rm1[j] = dl_f64(rm)[j];
  }
  CHECK(dl_i64(nbt)[0] == 1);
  /* eval: the running statistics, unchanged */
  dl_model_train(m, 0);
  CHECK(m->training == 0);
  y = dl_layer_call(bn, &tp, x);
  for (i = 0; i < 8; i++)
    for (j = 0; j < 3; j++) {
      const double want = (dl_f64(x)[i * 3 + j] - dl_f64(rm)[j]) / sqrt(dl_f64(rv)[j] + 1e-5);
      CHECK_MSG(fabs(dl_f64(y)[i * 3 + j] - want) < 1e-12, "eval BatchNorm [%lld, %lld]: %g want %g", (long long)i,
                (long long)j, dl_f64(y)[i * 3 + j], want);
    }
  for (j = 0; j < 3; j++) CHECK(dl_f64(rm)[j] == rm1[j]);
  CHECK(dl_i64(nbt)[0] == 1);
  /* without running statistics: batch statistics in eval mode too (as track_running_stats=False) */
  y = dl_layer_call(bnf, &tp, x);
  for (j = 0; j < 3; j++) {
    double s = 0;
    for (i = 0; i < 8; i++) s += dl_f64(y)[i * 3 + j];
    CHECK(fabs(s / 8) < 1e-12);
  }
  /* dropout: identity in eval mode */
  y = dl_layer_call(dr, &tp, ones);
  CHECK(max_abs_diff(y, ones) == 0);
  /* train: about half zeroed, the rest scaled by 1/(1 - p) = 2; two layers draw differently */
  dl_model_train(m, 1);
  y = dl_layer_call(dr, &tp, ones);
  y2 = dl_layer_call(dr2, &tp, ones);
  for (i = 0; i < 2000; i++) {
    zeros += dl_f64(y)[i] == 0;
    twos += dl_f64(y)[i] == 2;
  }
  CHECK_MSG(zeros + twos == 2000 && zeros > 850 && zeros < 1150, "dropout(0.5) train: %lld zeros, %lld twos",
            (long long)zeros, (long long)twos);
  CHECK(max_abs_diff(y, y2) > 0);
  { /* a model made with the same seed replays the same masks */
    dl_model *m2 = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 12});
    dl_layer *d2;
    dl_batchnorm1d_make(m2, NULL, "bn", &(dl_batchnorm_desc){.features = 3});
    d2 = dl_dropout_make(m2, NULL, "drop", 0.5);
    CHECK(max_abs_diff(dl_layer_call(d2, &tp, ones), y) == 0);
    CHECK(dl_dropout_rng(d2) != NULL && dl_dropout_rng(bn) == NULL);
    dl_model_free(m2);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(ones);
  dl_model_free(m);
}

/* >>summary ---------------------------------------------------------------- */

static char *read_all(FILE *f) {
  long n;
  char *s;
  fflush(f);
  n = ftell(f);
  rewind(f);
  s = (char *)malloc((size_t)n + 1);
  n = (long)fread(s, 1, (size_t)n, f);
  s[n] = 0;
  return s;
}
/* The line of the summary whose first word is `name` (copied), or "". */
static const char *summary_line(const char *text, const char *name) {
  static char line[512];
  const char *p = text;
  size_t nl = strlen(name);
  while (*p) {
    const char *e = strchr(p, '\n'), *w = p;
    size_t len = e ? (size_t)(e - p) : strlen(p);
    while (*w == ' ') w++;
    if (!strncmp(w, name, nl) && w[nl] == ' ') {
      snprintf(line, sizeof line, "%.*s", (int)len, p);
      return line;
    }
    p += len + (e ? 1 : 0);
  }
  return "";
}

/* Conv3d / MaxPool3d / AvgPool3d: the summary rows (type, output shape,
 * parameter count), the parameters' names and shapes, and the panics. */
static void test_layers_3d(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 5});
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3, 6, 7, 8));
  dl_layer *c;
  char *text;
  FILE *f;
  c = dl_conv3d_make(m, NULL, "c", &(dl_conv3d_desc){.in = 3, .out = 4, .kernel = 3, .kernel_w = 1, .padding = 1,
                                                      .padding_w = DL_PAD_NONE});
  dl_maxpool3d_make(m, NULL, "mp", &(dl_pool3d_desc){.kernel = 2, .ceil_mode = 1});
  dl_avgpool3d_make(m, NULL, "ap", &(dl_pool3d_desc){.kernel = 1, .kernel_h = 2, .stride = 1, .exclude_pad = 1});
  {
    const dl_tensor *w = dl_layer_param(c, "weight");
    CHECK(w && w->ndim == 5 && w->shape[0] == 4 && w->shape[1] == 3 && w->shape[2] == 3 && w->shape[3] == 3 &&
          w->shape[4] == 1);
  }
  CHECK(dl_layer_param(c, "bias") && dl_layer_param(c, "bias")->shape[0] == 4 && dl_model_numel(m) == 4 * 27 + 4);
  f = tmpfile();
  CHECK(f != NULL);
  if (f) {
    CHECK(dl_model_summary(m, f, x) == DL_OK);
    text = read_all(f);
    fclose(f);
    CHECK_MSG(strstr(summary_line(text, "c"), "Conv3d") && strstr(summary_line(text, "c"), "[2, 4, 6, 7, 8]") &&
                  strstr(summary_line(text, "c"), " 112 ") && strstr(summary_line(text, "c"), "kernel=3x3x1"),
              "%s", text);
    CHECK_MSG(strstr(summary_line(text, "mp"), "MaxPool3d") && strstr(summary_line(text, "mp"), "[2, 4, 3, 4, 4]"),
              "%s", text);
    CHECK_MSG(strstr(summary_line(text, "ap"), "AvgPool3d") && strstr(summary_line(text, "ap"), "[2, 4, 3, 3, 4]"),
              "%s", text);
    free(text);
  }
  EXPECT_PANIC(dl_conv3d_make(m, NULL, NULL, &(dl_conv3d_desc){.in = 3, .out = 4, .kernel = 3, .groups = 2}),
               "dl_conv3d_make", "groups 2", "in 3");
  EXPECT_PANIC(dl_avgpool3d_make(m, NULL, NULL, &(dl_pool3d_desc){.kernel = 2, .dilation = 2}), "AvgPool3d",
               "dilation 2x0x0");
  EXPECT_PANIC(dl_maxpool3d_make(m, NULL, NULL, &(dl_pool3d_desc){.stride = 2}), "MaxPool3d", "kernel 0");
  dl_tensor_free(x);
  dl_model_free(m);
}

static void test_summary(void) {
  static const struct {
    const char *name, *type, *shape;
  } rows[] = {{"0", "Conv2d", "[2, 4, 8, 8]"},   {"1", "BatchNorm2d", "[2, 4, 8, 8]"}, {"2", "ReLU", "[2, 4, 8, 8]"},
              {"3", "MaxPool2d", "[2, 4, 4, 4]"}, {"4", "Flatten", "[2, 64]"},         {"5", "Dropout", "[2, 64]"},
              {"6", "Linear", "[2, 10]"},         {"(model)", "Model", "[2, 10]"}};
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 21});
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 1, 8, 8)), *rm, *rv, *nbt;
  dl_rng rng = dl_rng_make(4);
  int64_t total = 0, nbt0;
  char want[128], *text;
  double rm0, rv0;
  FILE *f;
  int i, mode;
  dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 1, .out = 4, .kernel = 3, .padding = 1});
  dl_batchnorm2d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 4});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_maxpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 2});
  dl_flatten_make(m, NULL, NULL, 0);
  dl_dropout_make(m, NULL, NULL, 0.5);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 64, .out = 10});
  for (i = 0; i < m->nparams; i++)
    if (m->params[i]->kind != DL_PARAM_BUFFER) total += m->params[i]->t.numel;
  CHECK(total == 4 * 9 + 4 + 4 + 4 + 640 + 10 && total == dl_model_numel(m));
  dl_tensor_rand_normal(x, &rng, 1, 1);
  rm = dl_model_tensor(m, "1.running_mean");
  rv = dl_model_tensor(m, "1.running_var");
  nbt = dl_model_tensor(m, "1.num_batches_tracked");
  rm0 = dl_f32(rm)[0];
  rv0 = dl_f32(rv)[0];
  nbt0 = dl_i64(nbt)[0];
  for (mode = 1; mode >= 0; mode--) {
    dl_model_train(m, mode);
    f = tmpfile();
    CHECK(f != NULL);
    if (!f) break;
    CHECK(dl_model_summary(m, f, x) == DL_OK);
    text = read_all(f);
    fclose(f);
    if (verbose && mode) printf("%s", text);
    for (i = 0; i < (int)(sizeof rows / sizeof *rows); i++) {
      const char *line = summary_line(text, rows[i].name);
      CHECK_MSG(strstr(line, rows[i].type) && strstr(line, rows[i].shape), "summary row %s lacks %s %s: \"%s\"",
                rows[i].name, rows[i].type, rows[i].shape, line);
    }
    CHECK(strstr(summary_line(text, "0"), " 40 ") && strstr(summary_line(text, "6"), " 650 ") &&
          strstr(summary_line(text, "1"), " 8 "));
    snprintf(want, sizeof want, "total: %lld trainable parameters", (long long)total);
    CHECK_MSG(strstr(text, want) != NULL, "summary lacks \"%s\":\n%s", want, text);
    free(text);
    /* the model's mode and running statistics are as they were */
    CHECK(m->training == mode && dl_f32(rm)[0] == rm0 && dl_f32(rv)[0] == rv0 && dl_i64(nbt)[0] == nbt0);
  }
  /* without an example: no shapes */
  f = tmpfile();
  if (f) {
    CHECK(dl_model_summary(m, f, NULL) == DL_OK);
    text = read_all(f);
    fclose(f);
    CHECK(strstr(text, "[2, 10]") == NULL && strstr(summary_line(text, "6"), " - ") != NULL &&
          strstr(text, want) != NULL);
    free(text);
  }
  dl_tensor_free(x);
  dl_model_free(m);
}

/* >>out of memory while building ------------------------------------------- */

typedef struct oom {
  long budget;   /* allocations that succeed */
  int once;      /* 1: only allocation number budget + 1 fails; 0: every one after budget */
  long calls, live, failed;
} oom;
static void *oom_alloc(size_t n, void *u) {
  oom *o = (oom *)u;
  o->calls++;
  if (o->once ? o->calls == o->budget + 1 : o->calls > o->budget) {
    o->failed++;
    return NULL;
  }
  o->live++;
  return malloc(n);
}
static void oom_free(void *p, void *u) {
  oom *o = (oom *)u;
  if (!p) return;
  o->live--;
  free(p);
}

/* Every layer type, nested containers, an orthogonal re-initialisation and
 * the pack; returns the model (NULL when its own allocation failed) and the
 * outcome of each stage. */
static dl_model *oom_build(dl_ctx *c, dl_layer **last, int *init_n, dl_status *pack) {
  dl_model *m = dl_model_make(c, &(dl_model_desc){.dtype = DL_F32, .seed = 1});
  dl_layer *f, *r;
  *last = NULL;
  *init_n = 0;
  *pack = DL_OK;
  if (!m) return NULL;
  f = dl_sequential_make(m, NULL, "features");
  dl_conv2d_make(m, f, NULL, &(dl_conv2d_desc){.in = 1, .out = 4, .kernel = 3, .padding = 1});
  dl_batchnorm2d_make(m, f, NULL, &(dl_batchnorm_desc){.features = 4});
  dl_act_make(m, f, NULL, DL_ACT_RELU, 0);
  dl_maxpool2d_make(m, f, NULL, &(dl_pool2d_desc){.kernel = 2});
  make_resblock(m, f, NULL, 4);
  r = dl_residual_make(m, f, NULL, DL_ACT_RELU);
  dl_conv2d_make(m, r, NULL, &(dl_conv2d_desc){.in = 4, .out = 4, .kernel = 1});
  dl_conv2d_make(m, r, "shortcut", &(dl_conv2d_desc){.in = 4, .out = 4, .kernel = 1});
  dl_avgpool2d_make(m, f, NULL, &(dl_pool2d_desc){.kernel = 2});
  dl_global_avgpool_make(m, NULL, NULL);
  dl_flatten_make(m, NULL, NULL, 0);
  dl_dropout_make(m, NULL, NULL, 0.1);
  dl_conv1d_make(m, NULL, "c1", &(dl_conv1d_desc){.in = 2, .out = 2, .kernel = 3});
  dl_batchnorm1d_make(m, NULL, "bn1", &(dl_batchnorm_desc){.features = 4});
  dl_layernorm_make(m, NULL, "ln", &(dl_norm_desc){.shape = {4}});
  dl_rmsnorm_make(m, NULL, "rms", &(dl_norm_desc){.shape = {4}});
  dl_embedding_make(m, NULL, "emb", &(dl_embedding_desc){.num = 10, .dim = 4, .sparse = 1});
  dl_rnn_make(m, NULL, "rnn", &(dl_rnn_desc){.input = 4, .hidden = 4});
  dl_gru_make(m, NULL, "gru", &(dl_rnn_desc){.input = 4, .hidden = 4, .num_layers = 2});
  dl_lstm_make(m, NULL, "lstm", &(dl_rnn_desc){.input = 4, .hidden = 8, .num_layers = 3});
  dl_mha_make(m, NULL, "attn", &(dl_mha_desc){.embed = 8, .heads = 2});
  *last = dl_linear_make(m, NULL, "fc", &(dl_linear_desc){.in = 8, .out = 3});
  *init_n = dl_model_set_init(m, "lstm.weight_hh_l*", (dl_init){DL_INIT_ORTHOGONAL, 0});
  *pack = dl_model_pack(m);
  return m;
}

static void test_out_of_memory_while_building(void) {
  oom o;
  dl_ctx c;
  dl_model *m;
  dl_layer *last;
  dl_status pack;
  long total, n;
  int init_n, once, failures = 0;
  memset(&o, 0, sizeof o);
  o.budget = 1L << 30;
  dl_ctx_init(&c, &(dl_ctx_desc){.allocator = {oom_alloc, NULL, oom_free, &o}, .panic = harness_panic});
  m = oom_build(&c, &last, &init_n, &pack);
  CHECK(m && dl_model_status(m) == DL_OK && last && init_n == 3 && pack == DL_OK && o.failed == 0);
  total = o.calls;
  dl_model_free(m);
  CHECK_MSG(o.live == 0, "%ld blocks left after dl_model_free", o.live);
  for (once = 0; once < 2; once++)
    for (n = 0; n < total; n++) {
      int reported;
      memset(&o, 0, sizeof o);
      o.budget = n;
      o.once = once;
      dl_ctx_init(&c, &(dl_ctx_desc){.allocator = {oom_alloc, NULL, oom_free, &o}, .panic = harness_panic});
      m = oom_build(&c, &last, &init_n, &pack);
      reported = dl_model_status(m) == DL_ERR_NOMEM || init_n < 0 || pack == DL_ERR_NOMEM;
      CHECK_MSG(o.failed > 0 && reported, "%s %ld: %ld failed allocations, status %s, init %d, pack %s",
                once ? "only allocation" : "after", n, o.failed, dl_status_str(dl_model_status(m)), init_n,
                dl_status_str(pack));
      CHECK_MSG(c.status == DL_ERR_NOMEM && strstr(dl_ctx_message(&c), "out of memory"), "ctx message \"%s\"",
                dl_ctx_message(&c));
      if (m && dl_model_status(m) != DL_OK) /* once failed, every later make returns NULL */
        CHECK(last == NULL && pack == DL_ERR_NOMEM && !m->packed);
      if (m && once && dl_model_status(m) == DL_OK && pack == DL_ERR_NOMEM) { /* the pack failed: unchanged, retry works */
        CHECK(!m->packed && m->pbuf == NULL && m->params[0]->offset == -1);
        CHECK(dl_model_pack(m) == DL_OK && m->packed);
      }
      failures += dl_model_status(m) != DL_OK;
      dl_model_free(m);
      CHECK_MSG(o.live == 0, "%s %ld: %ld blocks left after dl_model_free", once ? "only allocation" : "after", n,
                o.live);
    }
  CHECK(failures > total); /* most runs failed while building, in both modes */
  printf("  out of memory at each of %ld allocations (then all, or only that one): no crash, no leak\n", total);
}

/* padding = (1, 0) in PyTorch's terms: DL_PAD_NONE on the width, for Conv2d
 * and the pools; the layer equals the op with those explicit arguments. */
static void test_pad_none_on_the_width(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 3});
  dl_layer *c = dl_conv2d_make(m, NULL, "c", &(dl_conv2d_desc){.in = 2, .out = 3, .kernel = 3, .padding = 1,
                                                                .padding_w = DL_PAD_NONE});
  dl_layer *p = dl_maxpool2d_make(m, NULL, "p", &(dl_pool2d_desc){.kernel = 2, .padding = 1, .padding_w = DL_PAD_NONE});
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 2, 5, 6)), *y, *want;
  dl_rng r = dl_rng_make(5);
  dl_tape tp;
  int64_t i;
  int same = 1;
  dl_tensor_rand_normal(x, &r, 0, 1);
  dl_tape_init(&tp, &ctx, 0);
  y = dl_layer_call(c, &tp, x);
  CHECK_MSG(y->shape[2] == 5 && y->shape[3] == 4, "conv padding (1, 0): %s", DL_SHAPESTR(y));
  want = dl_t_conv2d(&tp, x, dl_layer_param(c, "weight"), dl_layer_param(c, "bias"),
                     &(dl_conv2d_args){.pad_h = 1, .pad_w = 0});
  for (i = 0; i < y->numel; i++) same &= dl_f64(y)[i] == dl_f64(want)[i];
  CHECK(same);
  y = dl_layer_call(p, &tp, x);
  CHECK_MSG(y->shape[2] == 3 && y->shape[3] == 3, "max pool padding (1, 0): %s", DL_SHAPESTR(y));
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_model_free(m);
}

/* Evaluation on a host tape: under no-grad a Sequential of the library's layers alternates its children's outputs
 * between the tape's two banks (layers.h, dl__lay_seq_nograd_host), so a forward holds about two layers' outputs;
 * the result is the grad-mode forward's bit for bit, through a conv stack, views (Dropout in eval mode, Flatten), a
 * nested Sequential and a Residual, two forwards on one tape (the first output intact), and a Module that keeps
 * its output for a later one (no banks then: the same bits). Training after an evaluation gives the banks back. */
static dl_tensor *kept_out;
static dl_tensor *keep_fwd(dl_layer *l, dl_tape *tp, dl_tensor *x) { (void)l; return kept_out = dl_t_relu(tp, x); }
static dl_tensor *add_kept_fwd(dl_layer *l, dl_tape *tp, dl_tensor *x) { (void)l; return dl_t_add(tp, x, kept_out); }
static int same_f32(const dl_tensor *a, const dl_tensor *b) {
  return a->numel == b->numel && !memcmp(a->data, b->data, (size_t)a->numel * sizeof(float));
}
static void test_nograd_forward_memory(void) {
  const int64_t N = 256;
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 4});
  dl_model *mk2 = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 5});
  dl_layer *inner, *res;
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(N, 1, 16, 16)), *x2 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(64, 32));
  dl_tensor *yg, *yn, *yn2;
  dl_rng r = dl_rng_make(8);
  dl_tape tg, tn;
  size_t grad_high, nograd_high;
  int k;
  dl_tensor_rand_normal(x, &r, 0, 1);
  dl_tensor_rand_normal(x2, &r, 0, 1);
  dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 1, .out = 16, .kernel = 3, .padding = 1});
  dl_batchnorm2d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 16});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_dropout_make(m, NULL, NULL, 0.3);
  for (k = 0; k < 4; k++) {
    dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 16, .out = 16, .kernel = 3, .padding = 1});
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  }
  dl_maxpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 2});
  dl_flatten_make(m, NULL, NULL, 1);
  inner = dl_sequential_make(m, NULL, "inner");
  dl_linear_make(m, inner, NULL, &(dl_linear_desc){.in = 1024, .out = 64});
  dl_act_make(m, inner, NULL, DL_ACT_TANH, 0);
  dl_flatten_make(m, inner, NULL, 1);
  res = dl_residual_make(m, NULL, "res", DL_ACT_RELU);
  dl_linear_make(m, res, NULL, &(dl_linear_desc){.in = 64, .out = 64});
  dl_act_make(m, res, NULL, DL_ACT_GELU, 0);
  dl_linear_make(m, res, NULL, &(dl_linear_desc){.in = 64, .out = 64});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 64, .out = 10});
  CHECK(dl_model_status(m) == DL_OK);
  dl_model_train(m, 0);
  dl_tape_init(&tg, &ctx, 0);
  dl_tape_init(&tn, &ctx, 0);
  yg = dl_model_forward(m, &tg, x);
  grad_high = dl_arena_high_water(&tg.arena);
  dl_no_grad_begin(&tn);
  yn = dl_model_forward(m, &tn, x);
  nograd_high = dl_arena_high_water(&tn.arena) + dl_arena_high_water(&tn.bank[0]) + dl_arena_high_water(&tn.bank[1]);
  CHECK_MSG(same_f32(yg, yn), "a no-grad forward of the library's layers differs from the grad-mode forward");
  yn2 = dl_model_forward(m, &tn, x);
  CHECK_MSG(same_f32(yg, yn) && same_f32(yg, yn2), "a second no-grad forward changed the first one's output");
  printf("  evaluation of a conv net, batch %lld: tape %.2f MB with gradients on, %.2f MB under no-grad\n",
         (long long)N, grad_high / 1e6, nograd_high / 1e6);
  CHECK_MSG(nograd_high * 2 <= grad_high, "tape memory of the forward: %zu bytes under no-grad, %zu with gradients "
            "on (want at most half)", nograd_high, grad_high);
  dl_no_grad_end(&tn);
  dl_tape_rewind(&tn); /* an evaluation's rewind keeps the banks for the next batch */
  CHECK(tn.bank[0].owns && tn.bank_cur == 0);
  dl_tape_rewind(&tn); /* a step that did not use them: given back */
  CHECK(!tn.bank[0].owns && !tn.bank[1].owns);
  /* a Module that keeps its output for a later one: no banks, the same bits */
  dl_module_make(mk2, NULL, "keep", keep_fwd, NULL);
  for (k = 0; k < 3; k++) dl_linear_make(mk2, NULL, NULL, &(dl_linear_desc){.in = 32, .out = 32});
  dl_module_make(mk2, NULL, "add", add_kept_fwd, NULL);
  CHECK(dl_model_status(mk2) == DL_OK);
  dl_tape_rewind(&tg);
  yg = dl_model_forward(mk2, &tg, x2);
  dl_no_grad_begin(&tn);
  yn = dl_model_forward(mk2, &tn, x2); /* twice: the second forward reuses the tape's memory in place */
  dl_tape_rewind(&tn);
  yn = dl_model_forward(mk2, &tn, x2);
  dl_no_grad_end(&tn);
  CHECK_MSG(same_f32(yg, yn), "a Sequential whose Module keeps an output for a later one: no-grad output differs");
  dl_tape_free(&tg);
  dl_tape_free(&tn);
  dl_tensor_free(x);
  dl_tensor_free(x2);
  dl_model_free(m);
  dl_model_free(mk2);
}

/* dl_model_make returned NULL (out of memory): every make after it returns
 * NULL instead of crashing, the optimizers too, and dl_model_status says
 * DL_ERR_NOMEM, so one check after building the model suffices. */
static void test_null_model(void) {
  dl_model *m = NULL;
  dl_layer *seq = dl_sequential_make(m, NULL, NULL);
  CHECK(seq == NULL);
  CHECK(dl_module_make(m, seq, "f", NULL, NULL) == NULL);
  CHECK(dl_act_make(m, seq, NULL, DL_ACT_RELU, 0) == NULL);
  CHECK(dl_residual_make(m, NULL, NULL, DL_ACT_RELU) == NULL);
  CHECK(dl_linear_make(m, seq, NULL, &(dl_linear_desc){.in = 4, .out = 3}) == NULL);
  CHECK(dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 1, .out = 2, .kernel = 3}) == NULL);
  CHECK(dl_conv1d_make(m, NULL, NULL, &(dl_conv1d_desc){.in = 1, .out = 2, .kernel = 3}) == NULL);
  CHECK(dl_maxpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 2}) == NULL);
  CHECK(dl_avgpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 2}) == NULL);
  CHECK(dl_global_avgpool_make(m, NULL, NULL) == NULL);
  CHECK(dl_flatten_make(m, NULL, NULL, 1) == NULL);
  CHECK(dl_dropout_make(m, NULL, NULL, 0.5) == NULL);
  CHECK(dl_embedding_make(m, NULL, NULL, &(dl_embedding_desc){.num = 10, .dim = 4}) == NULL);
  CHECK(dl_batchnorm1d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 4}) == NULL);
  CHECK(dl_batchnorm2d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 4}) == NULL);
  CHECK(dl_layernorm_make(m, NULL, NULL, &(dl_norm_desc){.ndims = 1, .shape = {4}}) == NULL);
  CHECK(dl_rmsnorm_make(m, NULL, NULL, &(dl_norm_desc){.ndims = 1, .shape = {4}}) == NULL);
  CHECK(dl_rnn_make(m, NULL, NULL, &(dl_rnn_desc){.input = 4, .hidden = 4}) == NULL);
  CHECK(dl_lstm_make(m, NULL, NULL, &(dl_rnn_desc){.input = 4, .hidden = 4}) == NULL);
  CHECK(dl_gru_make(m, NULL, NULL, &(dl_rnn_desc){.input = 4, .hidden = 4}) == NULL);
  CHECK(dl_mha_make(m, NULL, NULL, &(dl_mha_desc){.embed = 8, .heads = 2}) == NULL);
  CHECK(dl_model_status(m) == DL_ERR_NOMEM);
  CHECK(dl_optim_sgd(m, &(dl_sgd_cfg){.lr = 0.1}) == NULL);
  {
    dl_adam_cfg a = dl_adam_defaults(1e-3);
    CHECK(dl_optim_adam(m, &a) == NULL);
  }
  CHECK(dl_optim_rmsprop(m, &(dl_rmsprop_cfg){.lr = 0.01, .alpha = 0.99, .eps = 1e-8}) == NULL);
  CHECK(dl_optim_adagrad(m, &(dl_adagrad_cfg){.lr = 0.01, .eps = 1e-10}) == NULL);
  CHECK(dl_optim_lion(m, &(dl_lion_cfg){.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99}) == NULL);
  dl_model_free(m);
}

int main(void) {
  dl_ctx_init(&ctx, &(dl_ctx_desc){.panic = harness_panic});
  RUN(test_null_model);
  verbose = getenv("LAYERS_VERBOSE") != NULL;
  fx_loaded = fx2_load(&fx, "tests/fixtures/layers.txt");
  RUN(test_layers_match_torch);
  RUN(test_layers_gradcheck);
  RUN(test_default_init_matches_torch);
  RUN(test_init_schemes_match_torch_init);
  RUN(test_init_orthogonal_constant_and_misuse);
  RUN(test_model_set_init);
  RUN(test_name_match);
  RUN(test_model_set);
  RUN(test_model_configure);
  RUN(test_configure_bad_rule_changes_nothing);
  RUN(test_frozen);
  RUN(test_nested_names_and_lookups);
  RUN(test_wrong_inputs_of_each_layer);
  RUN(test_gru_reset_before_linear);
  RUN(test_train_eval);
  RUN(test_nograd_forward_memory);
  RUN(test_summary);
  RUN(test_layers_3d);
  RUN(test_out_of_memory_while_building);
  RUN(test_pad_none_on_the_width);
  if (fx_loaded) fx2_free(&fx);
  return harness_finish();
}
