/* tests/test_optim_step.c - optimizer objects and the staged training step
 * (include/dl/optim.h: ">>optimizer objects", ">>clipping and
 * regularisation"), over models of include/dl/layers.h.
 *
 * - PyTorch agreement (tests/fixtures/optim_step.txt, made by
 *   tools/fixtures_optim_step.py): a Linear(5,4)-Linear(4,3) model (and an
 *   Embedding(10,3,sparse)-Linear(3,2) one) starts from the fixture's values,
 *   copied in by state_dict name; each of 20 steps writes fixed gradients
 *   into the parameters' gradients (the embedding's comes from a real
 *   dl_t_embedding backward over fixed indices) and runs dl_clip_grads,
 *   dl_regularize and dl_optim_step. Compared with torch (param group per
 *   parameter, clip_grad_value_/clip_grad_norm_, L1/L2 added to p.grad):
 *   the parameters after steps 1, 10 and 20, every optimizer state by name
 *   (dl_optim_state) after step 20, and the norm dl_clip_grads returns at
 *   every step (clip_grad_norm_'s return value). Cases: SGD (plain,
 *   momentum+dampening, Nesterov+weight decay), Adam (+wd, amsgrad), AdamW,
 *   RMSprop (plain, centered+momentum), Adagrad (lr_decay, initial
 *   accumulator), Lion (its published rule); lr_mult / wd_mult groups (also
 *   set through dl_model_configure glob specs after the optimizer is made:
 *   same hyperparameters, bit-identical trajectories); lr_mult 0 and frozen
 *   (values and state bit-identical to the start, step count 0, frozen
 *   gradients ignored by the clip norm); global, per-parameter and value
 *   clipping; L1/L2; cosine warm-up and StepLR through dl_optim_set_lr;
 *   row-sparse Adam (vs torch.optim.SparseAdam) and SGD, where every step
 *   leaves the rows it did not touch, and their state rows, bit-identical.
 * - dl_optim_state / dl_optim_param_steps: NULL for unknown parameters,
 *   unknown states, states the configuration lacks and buffers; the right
 *   views otherwise; a written step count is what the next update uses.
 * - dl_train_step == the five stages one by one, bit for bit, on a real
 *   forward/backward (sparse embedding, BatchNorm, a frozen layer, every
 *   clip and penalty on), for Adam and SGD.
 * - No allocation in steady state: a dense MLP trained with dl_train_step
 *   through a counting allocator.
 * OPTIM_VERBOSE=1 prints every case's measured errors.
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx;
static fx2_set fx;
static int fx_ok;
/* worst errors over the cases, [f32, f64]: parameters element-wise
 * (relative, floor 1e-3 max) and norm-wise, states element-wise, norms */
static double worst_p[2], worst_pn[2], worst_s[2], worst_norm[2], worst_sparse[2];
static const char *worst_case[2];

static const char *const dense_names[] = {"0.weight", "0.bias", "1.weight", "1.bias"};
static const char *const sparse_names[] = {"emb.weight", "lin.weight", "lin.bias"};
enum { STEPS = 20, NSNAP = 3 };
static const int snaps[NSNAP] = {0, 9, 19};

/* >>helpers ---------------------------------------------------------------- */

static dl_model *build(int sparse, dl_dtype dt) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = dt, .seed = 7});
  if (sparse) {
    dl_embedding_make(m, NULL, "emb", &(dl_embedding_desc){.num = 10, .dim = 3, .sparse = 1});
    dl_linear_make(m, NULL, "lin", &(dl_linear_desc){.in = 3, .out = 2});
  } else {
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 5, .out = 4});
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 4, .out = 3});
  }
  CHECK(dl_model_status(m) == DL_OK);
  return m;
}

/* t (contiguous) = fixture tensor w's values from element `off` on. */
static void fill(dl_tensor *t, const fx2_tensor *w, int64_t off) {
  int64_t i;
  for (i = 0; i < t->numel; i++) dl__set_at(t, i, w->v[off + i]);
}

/* A view of fixture tensor w's slice j along its first dim, shaped like t. */
static fx2_tensor slice(const fx2_tensor *w, int64_t j, const dl_tensor *t) {
  fx2_tensor s = *w;
  int d;
  s.ndim = t->ndim;
  for (d = 0; d < t->ndim; d++) s.shape[d] = t->shape[d];
  s.numel = t->numel;
  s.v = w->v + j * t->numel;
  return s;
}

static int same_bits(const dl_tensor *a, const void *b) {
  return memcmp(a->data, b, (size_t)a->numel * dl_dtype_size(a->dtype)) == 0;
}

static void *copy_bits(const dl_tensor *t) {
  size_t n = (size_t)t->numel * dl_dtype_size(t->dtype);
  void *c = malloc(n ? n : 1);
  memcpy(c, t->data, n);
  return c;
}

/* The optimizer of case c over m, from dl_X_defaults and the case's fields. */
static dl_optim *make_opt(dl_model *m, const fx2_case *c) {
  const int opt = (int)fx2_param(c, "opt", -1);
  const double lr = fx2_param(c, "lr", -1);
  if (opt == 0) {
    dl_sgd_cfg k = dl_sgd_defaults(lr);
    k.momentum = fx2_param(c, "momentum", k.momentum);
    k.dampening = fx2_param(c, "dampening", k.dampening);
    k.weight_decay = fx2_param(c, "weight_decay", k.weight_decay);
    k.nesterov = (int)fx2_param(c, "nesterov", k.nesterov);
    return dl_optim_sgd(m, &k);
  }
  if (opt == 1 || opt == 5) {
    dl_adam_cfg k = fx2_param(c, "decoupled", 0) ? dl_adamw_defaults(lr) : dl_adam_defaults(lr);
    k.beta1 = fx2_param(c, "beta1", k.beta1);
    k.beta2 = fx2_param(c, "beta2", k.beta2);
    k.eps = fx2_param(c, "eps", k.eps);
    k.weight_decay = fx2_param(c, "weight_decay", k.weight_decay);
    k.amsgrad = (int)fx2_param(c, "amsgrad", k.amsgrad);
    return dl_optim_adam(m, &k);
  }
  if (opt == 2) {
    dl_rmsprop_cfg k = dl_rmsprop_defaults(lr);
    k.alpha = fx2_param(c, "alpha", k.alpha);
    k.eps = fx2_param(c, "eps", k.eps);
    k.weight_decay = fx2_param(c, "weight_decay", k.weight_decay);
    k.momentum = fx2_param(c, "momentum", k.momentum);
    k.centered = (int)fx2_param(c, "centered", k.centered);
    return dl_optim_rmsprop(m, &k);
  }
  if (opt == 3) {
    dl_adagrad_cfg k = dl_adagrad_defaults(lr);
    k.lr_decay = fx2_param(c, "lr_decay", k.lr_decay);
    k.weight_decay = fx2_param(c, "weight_decay", k.weight_decay);
    k.initial_accumulator_value = fx2_param(c, "initial_accumulator_value", k.initial_accumulator_value);
    k.eps = fx2_param(c, "eps", k.eps);
    return dl_optim_adagrad(m, &k);
  }
  if (opt == 6) {
    dl_lamb_cfg k = dl_lamb_defaults(lr);
    k.beta1 = fx2_param(c, "beta1", k.beta1);
    k.beta2 = fx2_param(c, "beta2", k.beta2);
    k.eps = fx2_param(c, "eps", k.eps);
    k.weight_decay = fx2_param(c, "weight_decay", k.weight_decay);
    k.max_trust = fx2_param(c, "max_trust", k.max_trust);
    k.bias_correction = (int)fx2_param(c, "bias_correction", k.bias_correction);
    return dl_optim_lamb(m, &k);
  }
  {
    dl_lion_cfg k = dl_lion_defaults(lr);
    k.beta1 = fx2_param(c, "beta1", k.beta1);
    k.beta2 = fx2_param(c, "beta2", k.beta2);
    k.weight_decay = fx2_param(c, "weight_decay", k.weight_decay);
    return dl_optim_lion(m, &k);
  }
}

/* The fixture's per-parameter settings ("lr_mult:0.weight" ...) through
 * dl_model_set, with the exact name as the pattern. */
static void apply_hp(dl_model *m, const fx2_case *c) {
  static const char *const keys[] = {"lr_mult", "wd_mult", "clip_value", "clip_norm", "frozen"};
  static const dl_param_key ids[] = {DL_LR_MULT, DL_WD_MULT, DL_CLIP_VALUE, DL_CLIP_NORM, DL_FROZEN};
  int i, k;
  for (i = 0; i < c->np; i++) {
    const char *colon = strchr(c->pkey[i], ':');
    if (!colon) continue;
    for (k = 0; k < 5; k++)
      if (strlen(keys[k]) == (size_t)(colon - c->pkey[i]) &&
          !strncmp(keys[k], c->pkey[i], (size_t)(colon - c->pkey[i])))
        break;
    CHECK_MSG(k < 5, "%s: unknown setting %s", c->name, c->pkey[i]);
    if (k < 5) CHECK_MSG(dl_model_set(m, colon + 1, ids[k], c->pval[i]) == 1, "%s: %s", c->name, c->pkey[i]);
  }
}

/* Glob specs equivalent to the fixture's per-name settings (later rules
 * win), applied with dl_model_configure after the optimizer is made. */
static const char *spec_of(const char *name) {
  static const char *const t[][2] = {
      {"groups_sgd", "1.*:lr_mult=0.1;*.bias:wd_mult=1;0.bias:wd_mult=0;0.weight:wd_mult=0.5"},
      {"groups_adamw", "1.*:lr_mult=0.1;*.bias:wd_mult=1;0.bias:wd_mult=0;0.weight:wd_mult=0.5"},
      {"groups_lion", "0.*:wd_mult=2,lr_mult=1;0.weight:lr_mult=3,wd_mult=0.25"},
      {"freeze_adam", "0.b*:lr_mult=0;1.w*:frozen=1"},
      {"freeze_adagrad", "*:frozen=1;*:frozen=0;0.weight:lr_mult=0;1.bias:frozen=1"},
      {"clip_per_param", "0.weight:clip_norm=0.7;1.*:clip_value=0.9;1.weight:clip_value=0.2"},
      {"reg_l1_l2_sgd", "?.bias:wd_mult=1;0.bias:wd_mult=0"},
      {"reg_l2_clip_rmsprop", "0.weight:wd_mult=0.5"},
      {"sched_cosine_adam", "1.weight:lr_mult=0.5"},
      {"sched_steplr_sgd", "0.bias:lr_mult=2"},
      {"sparse_adam", "lin.w*:lr_mult=0.5"},
      {"sparse_sgd", "emb.*:lr_mult=1.5"},
  };
  size_t i;
  for (i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(t[i][0], name)) return t[i][1];
  return NULL;
}

/* prefix + name in one of four rotating static buffers. */
static const char *cat2(const char *prefix, const char *name) {
  static char buf[4][64];
  static int next;
  char *b = buf[next++ & 3];
  snprintf(b, sizeof buf[0], "%s%s", prefix, name);
  return b;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-300); }

/* >>PyTorch trajectories --------------------------------------------------- */

typedef struct run_out {
  void *pbuf;            /* the packed parameters after step 20 */
  void *sbuf;            /* the optimizer state after step 20 */
  size_t pbytes, sbytes;
  double norm[STEPS];
  double hp[8][5];       /* per parameter: lr_mult, wd_mult, clip_value, clip_norm, frozen */
} run_out;

/* Runs case c (variant 0: per-name dl_model_set before the optimizer;
 * variant 1: the glob spec through dl_model_configure after it) and, for
 * variant 0, checks it against the fixture. */
static void run_case(const fx2_case *c, const fx2_case *data, int variant, run_out *out) {
  const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  const int sparse = (int)fx2_param(c, "sparse", 0), sched = (int)fx2_param(c, "sched", 0);
  const char *const *names = sparse ? sparse_names : dense_names;
  const int np = sparse ? 3 : 4;
  const double base = fx2_param(c, "lr", -1);
  /* element-wise relative (floor 1e-3 max |want|), norm-wise, states, norms */
  const double tol_p = c->f64 ? 1e-12 : 1e-4, tol_pn = c->f64 ? 1e-13 : 2e-6, tol_s = c->f64 ? 1e-12 : 1e-4;
  const double tol_n = c->f64 ? 1e-13 : 1e-6;
  const fx2_tensor *idx = fx2_get(data, "idx"), *gy = fx2_get(data, "gy"), *norm = fx2_get(c, "norm");
  const fx2_tensor *emb_on = fx2_get(data, "emb_on");
  dl_step_desc sd;
  dl_model *m = build(sparse, dt);
  dl_optim *o;
  dl_tape tp;
  dl_tensor *it = NULL, *gt = NULL;
  void *init[4], *before[4] = {0};
  double ep = 0, epn = 0, es = 0, en = 0, eq = 0, eqn = 0, ex = 0, exn = 0;
  int i, k, s, nsnap = 0, on = 1, non = 0; /* on: the embedding is looked up at this step; non: steps so far */
  memset(&sd, 0, sizeof sd);
  sd.clip_value = fx2_param(c, "clip_value", 0);
  sd.clip_norm = fx2_param(c, "clip_norm", 0);
  sd.l1 = fx2_param(c, "l1", 0);
  sd.l2 = fx2_param(c, "l2", 0);
  for (i = 0; i < np; i++) {
    const fx2_tensor *w = fx2_get(data, cat2("i:", names[i]));
    dl_tensor *t = dl_model_tensor(m, names[i]);
    CHECK_MSG(w && t && w->numel == t->numel, "%s: no initial values for %s", c->name, names[i]);
    if (!w || !t || w->numel != t->numel) { dl_model_free(m); return; }
    fill(t, w, 0);
  }
  if (variant == 0) apply_hp(m, c);
  o = make_opt(m, c);
  CHECK(o != NULL);
  if (!o) { dl_model_free(m); return; }
  if (variant == 1)
    CHECK_MSG(dl_model_configure(m, spec_of(c->name)) == DL_OK, "%s: %s", c->name, dl_ctx_message(&ctx));
  for (i = 0; i < np; i++) {
    const dl_param *p = dl_model_param(m, names[i]);
    init[i] = copy_bits(&p->t);
    out->hp[i][0] = p->lr_mult; out->hp[i][1] = p->wd_mult; out->hp[i][2] = p->clip_value;
    out->hp[i][3] = p->clip_norm; out->hp[i][4] = p->frozen;
  }
  CHECK(dl_tape_init(&tp, &ctx, 0) == DL_OK);
  if (sparse) {
    it = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(idx->shape[1]));
    gt = dl_tensor_make(&ctx, dt, DL_SHAPE(gy->shape[1], gy->shape[2]));
  }
  for (k = 0; k < STEPS; k++) {
    dl_model_zero_grad(m);
    for (i = 0; i < np; i++) {
      const fx2_tensor *g = fx2_get(data, cat2("g:", names[i]));
      dl_param *p = dl_model_param(m, names[i]);
      if (g) fill(&p->g, g, k * p->g.numel); /* frozen parameters get one too: it must be ignored */
    }
    if (sparse) {
      dl_param *e = dl_model_param(m, "emb.weight");
      int64_t j;
      on = emb_on && emb_on->numel == STEPS ? emb_on->v[k] != 0 : 1;
      non += on;
      for (j = 0; j < it->numel; j++) dl_i64(it)[j] = on ? (int64_t)idx->v[k * it->numel + j] : -1;
      fill(gt, gy, k * gt->numel);
      if (on) dl_backward(&tp, dl_layer_call(dl_model_layer(m, "emb"), &tp, it), gt);
      dl_tape_rewind(&tp);
      before[0] = copy_bits(&e->t);
      for (s = 0; s < o->nstate; s++) before[1 + s] = copy_bits(dl_optim_state(o, "emb.weight", o->state_name[s]));
    }
    if (sched == 1)
      dl_optim_set_lr(o, dl_lr_cosine_warmup(base, k, (int64_t)fx2_param(c, "warmup", -1),
                                             (int64_t)fx2_param(c, "total", -1), fx2_param(c, "min_lr", -1)));
    else if (sched == 2)
      dl_optim_set_lr(o, dl_lr_step(base, k, (int64_t)fx2_param(c, "step_size", -1), fx2_param(c, "gamma", -1)));
    out->norm[k] = dl_clip_grads(m, &sd);
    dl_regularize(m, &sd);
    dl_optim_step(o);
    if (norm && norm->numel == STEPS) en = fmax(en, rel(out->norm[k], norm->v[k]));
    if (sparse) { /* lazy: untouched rows and their state rows keep their bits; touched ones move */
      const dl_tensor *ew = dl_model_tensor(m, "emb.weight");
      const size_t rb = 3 * dl_dtype_size(dt);
      int64_t r, j;
      int lazy_ok = 1, moved = 1, nuntouched = 0;
      for (r = 0; r < 10; r++) {
        int touched = 0;
        for (j = 0; j < it->numel; j++) touched |= dl_i64(it)[j] == r;
        nuntouched += !touched;
        if (touched) {
          moved &= memcmp((char *)ew->data + r * rb, (char *)before[0] + r * rb, rb) != 0;
          continue;
        }
        lazy_ok &= memcmp((char *)ew->data + r * rb, (char *)before[0] + r * rb, rb) == 0;
        for (s = 0; s < o->nstate; s++)
          lazy_ok &= memcmp((char *)dl_optim_state(o, "emb.weight", o->state_name[s])->data + r * rb,
                            (char *)before[1 + s] + r * rb, rb) == 0;
      }
      CHECK_MSG(lazy_ok && moved && nuntouched >= (on ? 2 : 10), "%s %s step %d: lazy rows (untouched %d, moved %d)",
                c->name, c->f64 ? "f64" : "f32", k + 1, lazy_ok, moved);
      for (s = 0; s < 4; s++) { free(before[s]); before[s] = NULL; }
    }
    if (variant == 0 && nsnap < NSNAP && k == snaps[nsnap]) {
      for (i = 0; i < np; i++) {
        const fx2_tensor *w = fx2_get(c, cat2("p:", names[i]));
        const dl_tensor *t = dl_model_tensor(m, names[i]);
        fx2_tensor sl;
        CHECK_MSG(w && w->numel == NSNAP * t->numel, "%s: no p:%s", c->name, names[i]);
        if (!w || w->numel != NSNAP * t->numel) continue;
        sl = slice(w, nsnap, t);
        if (fx2_get(c, cat2("q:", names[i]))) {
          /* optim.h's lazy Adam is torch.optim.SparseAdam (eps added before
           * the bias correction): a tight match with torch's class, a looser
           * one with torch.optim.Adam's formula on the touched rows (q:) */
          fx2_tensor ql = slice(fx2_get(c, cat2("q:", names[i])), nsnap, t);
          eq = fmax(eq, fx2_err(t, &ql));
          eqn = fmax(eqn, fx2_err_norm(t, &ql));
          ex = fmax(ex, fx2_err(t, &sl));
          exn = fmax(exn, fx2_err_norm(t, &sl));
          continue;
        }
        ep = fmax(ep, fx2_err(t, &sl));
        epn = fmax(epn, fx2_err_norm(t, &sl));
      }
      nsnap++;
    }
  }
  if (variant == 0) {
    /* states by name; untrained parameters: values, state and step count as at the start */
    for (i = 0; i < np; i++) {
      const dl_param *p = dl_model_param(m, names[i]);
      const int trained = !p->frozen && p->lr_mult != 0;
      int64_t *steps = dl_optim_param_steps(o, names[i]);
      const int64_t want = !trained ? 0 : p->sparse ? non : STEPS; /* a row-sparse one counts steps with rows */
      CHECK_MSG(steps && *steps == want, "%s: %s step count %lld, not %lld", c->name, names[i],
                steps ? (long long)*steps : -1LL, (long long)want);
      if (!trained) {
        double s0 = (int)fx2_param(c, "opt", -1) == 3 ? fx2_param(c, "initial_accumulator_value", 0) : 0;
        int64_t j;
        int ok = 1;
        CHECK_MSG(same_bits(&p->t, init[i]), "%s %s: untrained %s moved", c->name, c->f64 ? "f64" : "f32", names[i]);
        for (s = 0; s < o->nstate; s++) {
          const dl_tensor *st = dl_optim_state(o, names[i], o->state_name[s]);
          if (dt == DL_F32) s0 = (float)s0;
          for (j = 0; st && j < st->numel; j++) ok &= dl__get_at(st, j) == s0;
          ok &= st != NULL;
        }
        CHECK_MSG(ok, "%s: state of untrained %s changed", c->name, names[i]);
        CHECK_MSG(fx2_get(c, cat2("p:", names[i])) != NULL, "%s", c->name);
        continue;
      }
      CHECK_MSG(!same_bits(&p->t, init[i]), "%s: %s did not move", c->name, names[i]);
      for (s = 0; s < o->nstate; s++) {
        char key[64];
        const fx2_tensor *w;
        const dl_tensor *st = dl_optim_state(o, names[i], o->state_name[s]);
        snprintf(key, sizeof key, "s:%s:%s", names[i], o->state_name[s]);
        w = fx2_get(c, key);
        CHECK_MSG(w && st, "%s: torch has no %s", c->name, key);
        if (w && st) es = fmax(es, fx2_err(st, w));
      }
    }
    for (s = 0; s < c->nt; s++) /* every state torch keeps is found by name */
      if (!strncmp(c->t[s].key, "s:", 2)) {
        char pn[64];
        const char *st = strchr(c->t[s].key + 2, ':');
        snprintf(pn, sizeof pn, "%.*s", (int)(st - c->t[s].key - 2), c->t[s].key + 2);
        CHECK_MSG(dl_optim_state(o, pn, st + 1) != NULL, "%s: dl_optim_state(%s, %s) is NULL", c->name, pn, st + 1);
      }
    CHECK_MSG(nsnap == NSNAP && norm, "%s", c->name);
    if (getenv("OPTIM_VERBOSE"))
      printf("  %-28s %s  params %.2e (norm-wise %.2e)  state %.2e  clip norm %.2e\n", c->name,
             c->f64 ? "f64" : "f32", ep, epn, es, en);
    CHECK_MSG(ep <= tol_p && epn <= tol_pn, "%s %s: parameters rel err %.3g, norm-wise %.3g", c->name,
              c->f64 ? "f64" : "f32", ep, epn);
    if (fx2_get(c, "q:emb.weight")) {
      if (getenv("OPTIM_VERBOSE"))
        printf("  %-28s %s  emb.weight vs lazy Adam formula %.2e (norm-wise %.2e), vs SparseAdam %.2e (%.2e)\n",
               c->name, c->f64 ? "f64" : "f32", eq, eqn, ex, exn);
      CHECK_MSG(ex <= tol_p && exn <= tol_pn, "%s %s: emb.weight vs SparseAdam: rel err %.3g, norm-wise %.3g",
                c->name, c->f64 ? "f64" : "f32", ex, exn);
      CHECK_MSG(eq <= 1e-5 && eqn <= 2e-6, "%s %s: emb.weight vs Adam's formula: rel err %.3g, norm-wise %.3g", c->name,
                c->f64 ? "f64" : "f32", eq, eqn);
      CHECK_MSG(ex < eq || !c->f64, "%s: closer to Adam's formula than to SparseAdam?", c->name);
      worst_sparse[c->f64] = fmax(worst_sparse[c->f64], eq);
      worst_p[c->f64] = fmax(worst_p[c->f64], ex);
    }
    CHECK_MSG(es <= tol_s, "%s %s: state rel err %.3g", c->name, c->f64 ? "f64" : "f32", es);
    CHECK_MSG(en <= tol_n, "%s %s: gradient norm rel err %.3g", c->name, c->f64 ? "f64" : "f32", en);
    if (ep > worst_p[c->f64]) { worst_p[c->f64] = ep; worst_case[c->f64] = c->name; }
    worst_pn[c->f64] = fmax(worst_pn[c->f64], epn);
    worst_s[c->f64] = fmax(worst_s[c->f64], es);
    worst_norm[c->f64] = fmax(worst_norm[c->f64], en);
  }
  out->pbytes = (size_t)m->pnumel * dl_dtype_size(dt);
  out->sbytes = (size_t)o->nstate * out->pbytes;
  out->pbuf = malloc(out->pbytes);
  out->sbuf = malloc(out->sbytes ? out->sbytes : 1);
  memcpy(out->pbuf, m->pbuf, out->pbytes);
  memcpy(out->sbuf, o->sbuf, out->sbytes);
  for (i = 0; i < np; i++) free(init[i]);
  dl_tensor_free(it);
  dl_tensor_free(gt);
  dl_tape_free(&tp);
  dl_optim_free(o);
  dl_model_free(m);
}

static void test_vs_torch(void) {
  int i, ncase = 0, nspec = 0;
  if (!fx_ok) SKIP("%s", fx.err);
  for (i = 0; i < fx.n; i++) {
    const fx2_case *c = &fx.cases[i], *data = fx2_find(&fx, "data", c->f64);
    run_out a, b;
    if (!strcmp(c->name, "data")) continue;
    CHECK_MSG(data != NULL, "no data case");
    if (!data) return;
    ncase++;
    memset(&a, 0, sizeof a);
    run_case(c, data, 0, &a);
    if (spec_of(c->name) && a.pbuf) { /* the same settings from a glob spec, set after the optimizer is made */
      memset(&b, 0, sizeof b);
      run_case(c, data, 1, &b);
      nspec++;
      CHECK_MSG(b.pbuf && !memcmp(a.hp, b.hp, sizeof a.hp), "%s: dl_model_configure gives other settings", c->name);
      CHECK_MSG(b.pbuf && b.pbytes == a.pbytes && !memcmp(a.pbuf, b.pbuf, a.pbytes) && b.sbytes == a.sbytes &&
                    !memcmp(a.sbuf, b.sbuf, a.sbytes) && !memcmp(a.norm, b.norm, sizeof a.norm),
                "%s %s: the dl_model_configure run differs from the dl_model_set one", c->name, c->f64 ? "f64" : "f32");
      free(b.pbuf);
      free(b.sbuf);
    }
    free(a.pbuf);
    free(a.sbuf);
  }
  CHECK_MSG(ncase == 56 && nspec == 24, "%d cases (56 expected), %d with specs (24)", ncase, nspec);
}

/* >>state lookup ----------------------------------------------------------- */

static dl_model *build_bn(dl_dtype dt) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = dt, .seed = 11});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 5, .out = 4});
  dl_batchnorm1d_make(m, NULL, "bn", &(dl_batchnorm_desc){.features = 4});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 4, .out = 3});
  CHECK(dl_model_status(m) == DL_OK);
  return m;
}

static void test_state_lookup(void) {
  dl_model *m = build_bn(DL_F64);
  dl_optim *o = dl_optim_sgd(m, &(dl_sgd_cfg){.lr = 0.1});
  dl_tensor *ea, *eq, *t;
  dl_adam_cfg ac = dl_adam_defaults(0.01);
  dl_rmsprop_cfg rc = dl_rmsprop_defaults(0.01);
  int64_t *st;
  int i;
  /* SGD without momentum keeps no state; step counts exist for trainable parameters only */
  CHECK(o && o->nstate == 0);
  CHECK(dl_optim_state(o, "0.weight", "momentum_buffer") == NULL);
  st = dl_optim_param_steps(o, "0.weight");
  CHECK(st && *st == 0);
  CHECK(dl_optim_param_steps(o, "bn.weight") != NULL);
  CHECK(dl_optim_param_steps(o, "bn.running_mean") == NULL);
  CHECK(dl_optim_param_steps(o, "bn.num_batches_tracked") == NULL);
  CHECK(dl_optim_param_steps(o, "0.weigh") == NULL && dl_optim_param_steps(o, "") == NULL);
  dl_optim_free(o);
  dl_model_free(m);

  /* Adam: exp_avg and exp_avg_sq, no max_exp_avg_sq without amsgrad */
  m = build_bn(DL_F64);
  o = dl_optim_adam(m, &ac);
  ea = dl_optim_state(o, "0.weight", "exp_avg");
  eq = dl_optim_state(o, "0.weight", "exp_avg_sq");
  CHECK(ea && eq && ea->dtype == DL_F64 && ea->ndim == 2 && ea->shape[0] == 4 && ea->shape[1] == 5 &&
        dl_tensor_is_contiguous(ea) && eq->ndim == 2 && eq->shape[0] == 4 && eq->shape[1] == 5);
  CHECK(ea && eq && ea->data != eq->data);
  t = dl_optim_state(o, "bn.bias", "exp_avg");
  CHECK(t && t->ndim == 1 && t->shape[0] == 4 && ea && t->data != ea->data);
  CHECK(dl_optim_state(o, "0.weight", "max_exp_avg_sq") == NULL);
  CHECK(dl_optim_state(o, "0.weight", "sum") == NULL && dl_optim_state(o, "0.weight", "") == NULL);
  CHECK(dl_optim_state(o, "bn.running_mean", "exp_avg") == NULL);
  CHECK(dl_optim_state(o, "nope", "exp_avg") == NULL && dl_optim_state(o, "2.weight", "exp_avg") != NULL);
  /* the states are the ones the update uses, and a written step count is the
   * next update's: 0.weight at step 100 (set to 99) matches dl_adam_update
   * at step 100 on copies, bit for bit; the other parameters are at step 1 */
  {
    dl_param *p = dl_model_param(m, "0.weight");
    dl_tensor *pc = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 5)), *g = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 5));
    dl_tensor *m1 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 5)), *v1 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 5));
    for (i = 0; i < m->nparams; i++) {
      dl_param *q = m->params[i];
      int64_t j;
      if (q->kind == DL_PARAM_BUFFER) continue;
      for (j = 0; j < q->g.numel; j++) dl_f64(&q->g)[j] = 0.1 * (double)(j + 1) * (i % 2 ? -1 : 1);
    }
    memcpy(pc->data, p->t.data, 20 * sizeof(double));
    memcpy(g->data, p->g.data, 20 * sizeof(double));
    dl_tensor_fill(m1, 0);
    dl_tensor_fill(v1, 0);
    *dl_optim_param_steps(o, "0.weight") = 99;
    dl_optim_step(o);
    dl_adam_update(pc, g, m1, v1, NULL, 100, &ac);
    CHECK(*dl_optim_param_steps(o, "0.weight") == 100 && *dl_optim_param_steps(o, "2.bias") == 1);
    CHECK(o->nsteps == 1);
    CHECK(same_bits(&p->t, pc->data) && same_bits(ea, m1->data) && same_bits(eq, v1->data));
    CHECK(dl_f64(ea)[3] != 0 && dl_f64(eq)[3] != 0);
    dl_tensor_free(pc); dl_tensor_free(g); dl_tensor_free(m1); dl_tensor_free(v1);
  }
  dl_optim_free(o);
  dl_model_free(m);

  /* RMSprop centered with momentum: three distinct states; amsgrad Adam: three too */
  m = build_bn(DL_F32);
  rc.momentum = 0.5;
  rc.centered = 1;
  o = dl_optim_rmsprop(m, &rc);
  {
    dl_tensor *a = dl_optim_state(o, "2.weight", "square_avg"), *b = dl_optim_state(o, "2.weight", "momentum_buffer"),
              *c = dl_optim_state(o, "2.weight", "grad_avg");
    CHECK(o->nstate == 3 && a && b && c && a->data != b->data && b->data != c->data && a->data != c->data);
    CHECK(a && a->dtype == DL_F32 && a->shape[0] == 3 && a->shape[1] == 4);
  }
  dl_optim_free(o);
  rc.centered = 0;
  o = dl_optim_rmsprop(m, &rc);
  CHECK(o->nstate == 2 && dl_optim_state(o, "2.weight", "grad_avg") == NULL &&
        dl_optim_state(o, "2.weight", "momentum_buffer") != NULL);
  dl_optim_free(o);
  ac.amsgrad = 1;
  o = dl_optim_adam(m, &ac);
  CHECK(o->nstate == 3 && dl_optim_state(o, "0.bias", "max_exp_avg_sq") != NULL);
  dl_optim_free(o);
  o = dl_optim_lion(m, &(dl_lion_cfg){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99});
  CHECK(o->nstate == 1 && dl_optim_state(o, "0.bias", "exp_avg") != NULL);
  dl_optim_free(o);
  o = dl_optim_adagrad(m, &(dl_adagrad_cfg){.lr = 0.1, .initial_accumulator_value = 0.25, .eps = 1e-10});
  t = dl_optim_state(o, "bn.weight", "sum");
  CHECK(o->nstate == 1 && t && dl_f32(t)[0] == 0.25f && dl_f32(t)[3] == 0.25f);
  dl_optim_free(o);
  dl_model_free(m);
}

/* >>dl_train_step == the stages -------------------------------------------- */

enum { SB = 5, SK = 3 };

static dl_model *build_stage(dl_ctx *cx, dl_dtype dt, int sparse) {
  dl_model *m = dl_model_make(cx, &(dl_model_desc){.dtype = dt, .seed = 21});
  if (sparse) {
    dl_embedding_make(m, NULL, "emb", &(dl_embedding_desc){.num = 12, .dim = 4, .sparse = 1});
    dl_flatten_make(m, NULL, "flat", 1);
    dl_linear_make(m, NULL, "fc1", &(dl_linear_desc){.in = 4 * SK, .out = 8});
    dl_batchnorm1d_make(m, NULL, "bn", &(dl_batchnorm_desc){.features = 8});
  } else {
    dl_linear_make(m, NULL, "fc1", &(dl_linear_desc){.in = 6, .out = 8});
  }
  dl_act_make(m, NULL, "act", DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, "fc2", &(dl_linear_desc){.in = 8, .out = 3});
  CHECK(dl_model_status(m) == DL_OK);
  return m;
}

static double grad_absmax(const dl_model *m) {
  double mx = 0;
  int64_t i;
  for (i = 0; i < m->pnumel; i++)
    mx = fmax(mx, fabs(m->dtype == DL_F32 ? (double)((float *)m->gbuf)[i] : ((double *)m->gbuf)[i]));
  return mx;
}

static void test_train_step_is_the_stages(void) {
  int kind, dtk;
  for (dtk = 0; dtk < 2; dtk++)
    for (kind = 0; kind < 2; kind++) {
      const dl_dtype dt = dtk ? DL_F64 : DL_F32;
      const dl_step_desc d = {.clip_value = 0.2, .clip_norm = 0.3, .l1 = 1e-3, .l2 = 1e-2};
      dl_model *m[2];
      dl_optim *o[2];
      dl_tape tp[2];
      dl_tensor *idx = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(SB, SK));
      dl_tensor *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(SB));
      void *w0, *e0;
      double n[2], bnbefore;
      int64_t j;
      int i, step, same = 1, normed = 1, zeroed = 1, frozen_clean = 1, clipped = 0;
      for (j = 0; j < idx->numel; j++) dl_i64(idx)[j] = (j * 7 + 3) % 10; /* rows 10, 11 unused */
      for (j = 0; j < lab->numel; j++) dl_i64(lab)[j] = j % 3;
      for (i = 0; i < 2; i++) {
        dl_sgd_cfg sc = dl_sgd_defaults(0.1);
        dl_adam_cfg ac = dl_adamw_defaults(0.05);
        m[i] = build_stage(&ctx, dt, 1);
        sc.momentum = 0.9; sc.nesterov = 1; sc.weight_decay = 1e-2;
        ac.amsgrad = 1;
        o[i] = kind ? dl_optim_sgd(m[i], &sc) : dl_optim_adam(m[i], &ac);
        CHECK(dl_model_configure(m[i], "fc2.bias:frozen=1;fc1.bias:lr_mult=0.5,wd_mult=1;fc1.weight:clip_value=0.05;"
                                       "emb.weight:clip_norm=0.1") == DL_OK);
        CHECK(dl_tape_init(&tp[i], &ctx, 0) == DL_OK);
      }
      CHECK(m[0]->pnumel == m[1]->pnumel &&
            !memcmp(m[0]->pbuf, m[1]->pbuf, (size_t)m[0]->pnumel * dl_dtype_size(dt)));
      w0 = copy_bits(dl_model_tensor(m[0], "fc2.bias"));
      e0 = copy_bits(dl_model_tensor(m[0], "emb.weight"));
      bnbefore = dl__get_at(dl_model_tensor(m[0], "bn.running_mean"), 0);
      for (step = 0; step < 5; step++) {
        dl_tensor *loss;
        /* model 0: dl_train_step */
        loss = dl_t_cross_entropy(&tp[0], dl_model_forward(m[0], &tp[0], idx), lab, 0, DL_REDUCE_MEAN);
        n[0] = dl_train_step(o[0], &tp[0], loss, &d);
        dl_tape_rewind(&tp[0]);
        /* model 1: the stages one by one */
        loss = dl_t_cross_entropy(&tp[1], dl_model_forward(m[1], &tp[1], idx), lab, 0, DL_REDUCE_MEAN);
        dl_backward(&tp[1], loss, NULL);
        {
          const dl_tensor *fg = &dl_model_param(m[1], "fc2.bias")->g;
          for (j = 0; j < fg->numel; j++) frozen_clean &= dl__get_at(fg, j) == 0;
          frozen_clean &= dl_model_param(m[1], "fc1.weight")->g.data != NULL && grad_absmax(m[1]) > 0;
        }
        n[1] = dl_clip_grads(m[1], &d);
        clipped += n[1] > d.clip_norm;
        dl_regularize(m[1], &d);
        dl_optim_step(o[1]);
        dl_model_zero_grad(m[1]);
        dl_tape_rewind(&tp[1]);
        normed &= n[0] == n[1] && n[0] > 0;
        for (i = 0; i < 2; i++)
          zeroed &= grad_absmax(m[i]) == 0 && ((dl_sgrad *)dl_model_tensor(m[i], "emb.weight")->sgrad)->nnz == 0;
        same &= !memcmp(m[0]->pbuf, m[1]->pbuf, (size_t)m[0]->pnumel * dl_dtype_size(dt)) &&
                !memcmp(o[0]->sbuf, o[1]->sbuf, (size_t)(o[0]->nstate * m[0]->pnumel) * dl_dtype_size(dt));
      }
      CHECK_MSG(same, "%s %s: dl_train_step differs from the stages", kind ? "sgd" : "adamw", dl_dtype_name(dt));
      CHECK_MSG(normed, "%s: the returned norms differ", kind ? "sgd" : "adamw");
      CHECK(zeroed && frozen_clean && clipped >= 1);
      CHECK(dl__get_at(dl_model_tensor(m[0], "bn.running_mean"), 0) != bnbefore &&
            dl__get_at(dl_model_tensor(m[0], "bn.running_mean"), 0) ==
                dl__get_at(dl_model_tensor(m[1], "bn.running_mean"), 0));
      CHECK(same_bits(dl_model_tensor(m[0], "fc2.bias"), w0));       /* frozen */
      CHECK(*dl_optim_param_steps(o[0], "fc2.bias") == 0 && *dl_optim_param_steps(o[0], "fc1.weight") == 5 &&
            *dl_optim_param_steps(o[0], "emb.weight") == 5 && o[0]->nsteps == 5);
      {
        const dl_tensor *e = dl_model_tensor(m[0], "emb.weight");
        const size_t rb = 4 * dl_dtype_size(dt);
        CHECK(memcmp(e->data, e0, 10 * rb) != 0 && !memcmp((char *)e->data + 10 * rb, (char *)e0 + 10 * rb, 2 * rb));
      }
      free(w0);
      free(e0);
      for (i = 0; i < 2; i++) {
        dl_tape_free(&tp[i]);
        dl_optim_free(o[i]);
        dl_model_free(m[i]);
      }
      dl_tensor_free(idx);
      dl_tensor_free(lab);
    }
}

/* dl_train_step_nowait and dl_dist_train_step without a norm wanted skip the sums of squares when no clipping
 * by norm needs them (a readback per step on the GPU): the same update as dl_train_step, bit for bit, with a
 * value clip (which still applies) and with a parameter's clip_norm (which needs the sums again). */
static void test_train_step_nowait(void) {
  int cfg;
  for (cfg = 0; cfg < 2; cfg++) {
    const dl_step_desc d = {.clip_value = 0.2, .l2 = 1e-2};
    dl_model *m[3];
    dl_optim *o[3];
    dl_tape tp[3];
    dl_tensor *idx = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(SB, SK)), *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(SB));
    int64_t j;
    int i, step, same = 1;
    for (j = 0; j < idx->numel; j++) dl_i64(idx)[j] = (j * 5 + 1) % 10;
    for (j = 0; j < lab->numel; j++) dl_i64(lab)[j] = j % 3;
    for (i = 0; i < 3; i++) {
      dl_adam_cfg ac = dl_adamw_defaults(0.05);
      m[i] = build_stage(&ctx, DL_F32, 1);
      o[i] = dl_optim_adam(m[i], &ac);
      CHECK(dl_model_configure(m[i], cfg ? "fc1.weight:clip_norm=0.05" : "fc1.weight:clip_value=0.01") == DL_OK);
      CHECK(dl_tape_init(&tp[i], &ctx, 0) == DL_OK);
    }
    for (step = 0; step < 4; step++) {
      for (i = 0; i < 3; i++) {
        dl_tensor *loss = dl_t_cross_entropy(&tp[i], dl_model_forward(m[i], &tp[i], idx), lab, 0, DL_REDUCE_MEAN);
        if (i == 0) CHECK(dl_train_step(o[0], &tp[0], loss, &d) > 0);
        else if (i == 1) dl_train_step_nowait(o[1], &tp[1], loss, &d);
        else CHECK(dl_dist_train_step(NULL, o[2], &tp[2], loss, &d, NULL) == DL_OK);
        dl_tape_rewind(&tp[i]);
      }
      for (i = 1; i < 3; i++)
        same &= !memcmp(m[0]->pbuf, m[i]->pbuf, (size_t)m[0]->pnumel * sizeof(float)) &&
                !memcmp(o[0]->sbuf, o[i]->sbuf, (size_t)(o[0]->nstate * m[0]->pnumel) * sizeof(float));
    }
    CHECK_MSG(same, "%s: dl_train_step_nowait or dl_dist_train_step (norm NULL) differs from dl_train_step",
              cfg ? "clip_norm on a parameter" : "value clipping only");
    for (i = 0; i < 3; i++) {
      dl_tape_free(&tp[i]);
      dl_optim_free(o[i]);
      dl_model_free(m[i]);
    }
    dl_tensor_free(idx);
    dl_tensor_free(lab);
  }
}

/* >>no allocation in steady state ------------------------------------------- */

static long count_allocs, count_frees;
static void *count_alloc(size_t n, void *user) { (void)user; count_allocs++; return malloc(n); }
static void count_free(void *p, void *user) { (void)user; if (p) count_frees++; free(p); }

static void test_steady_state_no_alloc(void) {
  int sparse;
  for (sparse = 0; sparse < 2; sparse++) {
    dl_ctx cc;
    dl_ctx_desc d = {0};
    dl_tape tp;
    dl_model *m;
    dl_optim *o;
    dl_tensor *x, *lab;
    dl_rng rng = dl_rng_make(5);
    const dl_step_desc sd = {.clip_norm = 0.5, .clip_value = 1, .l2 = 1e-3, .l1 = 1e-4};
    dl_adam_cfg ac = dl_adam_defaults(1e-2);
    long before = 0;
    int step;
    int64_t j;
    count_allocs = count_frees = 0;
    d.panic = harness_panic;
    d.allocator.alloc = count_alloc;
    d.allocator.free = count_free;
    dl_ctx_init(&cc, &d);
    m = build_stage(&cc, DL_F32, sparse);
    ac.amsgrad = 1;
    o = dl_optim_adam(m, &ac);
    if (sparse) {
      x = dl_tensor_make(&cc, DL_I64, DL_SHAPE(SB, SK));
      for (j = 0; j < x->numel; j++) dl_i64(x)[j] = (j * 5) % 11;
    } else {
      x = dl_tensor_make(&cc, DL_F32, DL_SHAPE(SB, 6));
      dl_tensor_rand_uniform(x, &rng, -1, 1);
    }
    lab = dl_tensor_make(&cc, DL_I64, DL_SHAPE(SB));
    for (j = 0; j < lab->numel; j++) dl_i64(lab)[j] = (j * 2) % 3;
    CHECK(o && dl_tape_init(&tp, &cc, 0) == DL_OK);
    CHECK(count_allocs > 0);
    for (step = 0; step < 8; step++) {
      dl_tensor *loss;
      if (step == 2) before = count_allocs;
      loss = dl_t_cross_entropy(&tp, dl_model_forward(m, &tp, x), lab, 0, DL_REDUCE_MEAN);
      (void)dl_train_step(o, &tp, loss, &sd);
      dl_tape_rewind(&tp);
    }
    CHECK_MSG(count_allocs == before, "%s: %ld allocations in 6 steady-state training steps",
              sparse ? "embedding model" : "dense MLP", count_allocs - before);
    CHECK(*dl_optim_param_steps(o, "fc2.weight") == 8);
    dl_tape_free(&tp);
    dl_tensor_free(x);
    dl_tensor_free(lab);
    dl_optim_free(o);
    dl_model_free(m);
    dl_gemm_release_cache(); /* the GEMM's per-thread scratch, made with cc's allocator */
    CHECK_MSG(count_allocs == count_frees, "%s: %ld allocations, %ld frees", sparse ? "embedding model" : "dense MLP",
              count_allocs, count_frees);
  }
}

/* An Embedding(sparse=1) whose weight is also used densely (tied to the
 * output projection): in that step its gradient is the sum of both, every
 * row (the looked-up ones and the others) is updated densely, the clip norm
 * counts both parts; the next step that only looks up rows is lazy again. */
/* (its own function: the panic's longjmp stays out of the caller's locals) */
static void lamb_step_refused(dl_optim *ol) {
  EXPECT_PANIC(dl_optim_step(ol), "dl_optim_step", "LAMB", "net.emb.weight", "sparse = 0");
}
static dl_tensor *tied_fwd(dl_layer *l, dl_tape *tp, dl_tensor *idx) {
  dl_layer *e = dl_layer_child(l, "emb");
  return dl_t_linear(tp, dl_layer_call(e, tp, idx), dl_layer_param(e, "weight"), NULL);
}
static void test_tied_sparse_and_dense(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 1});
  dl_layer *b = dl_module_make(m, NULL, "net", tied_fwd, NULL);
  dl_sgd_cfg sc = dl_sgd_defaults(0.1);
  dl_optim *o;
  dl_param *p;
  dl_tape tp;
  dl_tensor *idx, *loss, *ref, *g;
  int64_t i;
  double norm, want = 0;
  dl_embedding_make(m, b, "emb", &(dl_embedding_desc){.num = 10, .dim = 3, .sparse = 1});
  o = dl_optim_sgd(m, &sc);
  p = dl_model_param(m, "net.emb.weight");
  dl_tape_init(&tp, &ctx, 0);
  idx = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(2));
  dl_i64(idx)[0] = 1;
  dl_i64(idx)[1] = 2;
  ref = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(10, 3));
  g = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(10, 3));
  dl_tensor_copy(ref, &p->t);
  loss = dl_model_forward(m, &tp, idx);
  loss = dl_t_sum_all(&tp, dl_t_mul(&tp, loss, loss));
  dl_backward(&tp, loss, NULL);
  /* the full gradient: dense part + the looked-up rows */
  dl_tensor_copy(g, &p->g);
  dl_sgrad_add_to((dl_sgrad *)p->t.sgrad, g);
  for (i = 0; i < g->numel; i++) want += dl_f64(g)[i] * dl_f64(g)[i];
  CHECK(dl_f64(&p->g)[7 * 3] != 0); /* row 7 is not looked up: its gradient is the dense part only */
  norm = dl_clip_grads(m, NULL);
  CHECK_MSG(fabs(norm - sqrt(want)) <= 1e-12 * sqrt(want), "tied clip norm %.17g, want %.17g", norm, sqrt(want));
  dl_optim_step(o);
  for (i = 0; i < g->numel; i++) {
    double w = dl_f64(ref)[i] - 0.1 * dl_f64(g)[i];
    CHECK_MSG(fabs(dl_f64(&p->t)[i] - w) <= 1e-14 * fmax(1, fabs(w)), "tied element %lld: %.17g, want %.17g",
              (long long)i, dl_f64(&p->t)[i], w);
  }
  dl_model_zero_grad(m);
  dl_tape_rewind(&tp);
  /* a lookup only: lazy again, rows other than 1 and 2 untouched */
  dl_tensor_copy(ref, &p->t);
  loss = dl_t_sum_all(&tp, dl_layer_call(dl_layer_child(b, "emb"), &tp, idx));
  dl_backward(&tp, loss, NULL);
  dl_optim_step(o);
  for (i = 0; i < 10; i++) {
    int changed = memcmp(dl_f64(&p->t) + 3 * i, dl_f64(ref) + 3 * i, 3 * sizeof(double)) != 0;
    CHECK_MSG(changed == (i == 1 || i == 2), "lazy step after a tied one: row %lld changed %d", (long long)i, changed);
  }
  dl_model_zero_grad(m);
  dl_tape_rewind(&tp);
  { /* LAMB takes the whole tensor's norm: a lazy row-sparse step is refused, naming the parameter */
    dl_optim *ol = dl_optim_lamb(m, &(dl_lamb_cfg){.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6});
    CHECK(ol && ol->nstate == 2 && dl_optim_state(ol, "net.emb.weight", "exp_avg_sq") != NULL);
    loss = dl_t_sum_all(&tp, dl_layer_call(dl_layer_child(b, "emb"), &tp, idx));
    dl_backward(&tp, loss, NULL);
    lamb_step_refused(ol);
    dl_optim_free(ol);
  }
  dl_tape_free(&tp);
  dl_tensor_free(idx);
  dl_tensor_free(ref);
  dl_tensor_free(g);
  dl_optim_free(o);
  dl_model_free(m);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  fx_ok = fx2_load(&fx, "tests/fixtures/optim_step.txt");
  RUN(test_vs_torch);
  RUN(test_state_lookup);
  RUN(test_train_step_is_the_stages);
  RUN(test_train_step_nowait);
  RUN(test_steady_state_no_alloc);
  RUN(test_tied_sparse_and_dense);
  if (fx_ok) {
    int k;
    for (k = 1; k >= 0; k--)
      printf("  worst vs torch, %s: parameters %.2e (%s; norm-wise %.2e), states %.2e, gradient norms %.2e; "
             "embedding vs torch.optim.Adam's formula %.2e\n",
             k ? "f64" : "f32", worst_p[k], worst_case[k] ? worst_case[k] : "-", worst_pn[k], worst_s[k],
             worst_norm[k], worst_sparse[k]);
  }
  fx2_free(&fx);
  return harness_finish();
}
