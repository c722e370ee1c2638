/* tests/test_dist.c - include/dl/dist.h built without DL_USE_MPI (the
 * single-process fallback), and the parts of it that are pure local work.
 *
 * - dl_dist_init: rank 0 of 1, defaults filled (bucket_bytes, timeout_s),
 *   a negative bucket_bytes is DL_ERR_ARG; dl_dist_is_root, dl_dist_sum,
 *   dl_dist_sum_i64, dl_dist_agree and dl_dist_finalize are identities.
 * - dl_dist_train_step with a world-1 dist (attached) and with dd NULL is
 *   bit for bit dl_train_step (Adam, clip_norm that clips), *norm included.
 * - dl_dist_merge_rows: three ranks' gathered rows with overlaps become the
 *   union in first-appearance order, each row the sum times scale; slot[]
 *   consistent; a non-empty sparse gradient is cleared first (f32 and f64).
 * - dl__dist_plan: on a model of Linear / BatchNorm layers with a sparse
 *   Embedding in the middle, small and large bucket_bytes: buckets disjoint,
 *   ascending, inside the packed buffer, covering every dense parameter's
 *   elements (plus only the alignment padding between dense parameters),
 *   never the sparse parameter's, none larger than the cap; pbucket /
 *   pbucket_end match the buckets each parameter touches; the sparse one is
 *   in dd.sparse. A huge bucket and no sparse parameter: one bucket.
 * - dl_shuffler shards (world 3, n 10, pad 0 / 1 / 2): per-rank counts,
 *   disjointness, round-robin positions of the world-1 permutation, bad pad
 *   values, the checkpoint flags of pad 2.
 */
#include "dl.h"
#include "harness.h"

static dl_ctx ctx;

/* >>init and the single-process collectives -------------------------------- */

static void test_init_fallback(void) {
  dl_dist dd, bad;
  double v[3] = {1.5, -2.25, 1e300};
  int64_t c[4] = {7, 0, -3, INT64_MAX};
  dl_dist_desc neg = {0};
  dl_dist_desc own = {0};

  CHECK(dl_dist_init(&dd, &ctx, NULL, NULL, NULL) == DL_OK);
  CHECK(dd.rank == 0 && dd.world == 1);
  CHECK(dd.desc.bucket_bytes == DL_DIST_BUCKET_BYTES);
  CHECK(dd.desc.timeout_s == 600);
  CHECK(dd.desc.check_every == DL_DIST_CHECK_EVERY);
  CHECK(dd.ctx == &ctx && dd.model == NULL && dd.steps == 0 && dd.nbucket == 0);
  CHECK(dl_dist_is_root(NULL) == 1);
  CHECK(dl_dist_is_root(&dd) == 1);

  CHECK(dl_dist_sum(&dd, v, 3) == DL_OK);
  CHECK(v[0] == 1.5 && v[1] == -2.25 && v[2] == 1e300);
  CHECK(dl_dist_sum(NULL, v, 3) == DL_OK && v[0] == 1.5);
  CHECK(dl_dist_sum_i64(&dd, c, 4) == DL_OK);
  CHECK(c[0] == 7 && c[1] == 0 && c[2] == -3 && c[3] == INT64_MAX);
  CHECK(dl_dist_agree(&dd, DL_OK) == DL_OK);
  CHECK(dl_dist_agree(&dd, DL_ERR_IO) == DL_ERR_IO);
  CHECK(dl_dist_agree(&dd, DL_ERR_SHAPE) == DL_ERR_SHAPE);
  CHECK(dl_dist_agree(NULL, DL_ERR_FORMAT) == DL_ERR_FORMAT);
  /* nothing attached, world 1: these are no-ops */
  CHECK(dl_dist_allreduce_grads(&dd) == DL_OK);
  CHECK(dl_dist_check(&dd) == DL_OK);
  CHECK(dl_dist_finalize(&dd, 3) == 3);
  CHECK(dl_dist_finalize(&dd, 0) == 0); /* twice is fine */
  CHECK(dl_dist_finalize(NULL, 5) == 5);

  /* explicit fields are kept, zero ones defaulted */
  own.bucket_bytes = 4096;
  own.timeout_s = -1;
  own.check_every = 7;
  CHECK(dl_dist_init(&dd, &ctx, NULL, NULL, &own) == DL_OK);
  CHECK(dd.desc.bucket_bytes == 4096 && dd.desc.timeout_s == -1 && dd.desc.check_every == 7 && dd.world == 1);
  CHECK(dl_dist_finalize(&dd, 0) == 0);

  neg.bucket_bytes = -1;
  CHECK(dl_dist_init(&bad, &ctx, NULL, NULL, &neg) == DL_ERR_ARG);
  CHECK(strstr(dl_ctx_message(&ctx), "bucket_bytes") != NULL);
  dl_dist_finalize(&bad, 0);
}

/* >>dl_dist_train_step == dl_train_step ------------------------------------ */

enum { TB = 6, TIN = 5 };

static dl_model *build_mlp(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 11});
  dl_linear_make(m, NULL, "fc1", &(dl_linear_desc){.in = TIN, .out = 8});
  dl_act_make(m, NULL, "act", DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, "fc2", &(dl_linear_desc){.in = 8, .out = 4});
  CHECK(dl_model_status(m) == DL_OK);
  return m;
}

static void test_train_step_world1(void) {
  enum { NM = 3, STEPS = 5 };
  const dl_step_desc sd = {.clip_norm = 0.05};
  dl_model *m[NM];
  dl_optim *o[NM];
  dl_tape tp[NM];
  dl_dist dd;
  dl_rng rng = dl_rng_make(3);
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(TB, TIN));
  dl_tensor *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(TB));
  void *w0;
  size_t bytes;
  int i, step, same = 1, state_same = 1, norms_same = 1, clipped = 0;
  int64_t j;

  dl_tensor_rand_uniform(x, &rng, -1, 1);
  for (j = 0; j < TB; j++) dl_i64(lab)[j] = (j * 3 + 1) % 4;
  CHECK(dl_dist_init(&dd, &ctx, NULL, NULL, NULL) == DL_OK);
  for (i = 0; i < NM; i++) {
    m[i] = build_mlp();
    if (i == 0) CHECK(dl_dist_attach(&dd, m[0]) == DL_OK);
    {
      dl_adam_cfg ac = dl_adam_defaults(0.02);
      o[i] = dl_optim_adam(m[i], &ac);
    }
    CHECK(o[i] != NULL);
    CHECK(dl_tape_init(&tp[i], &ctx, 0) == DL_OK);
  }
  CHECK(dd.model == m[0] && m[0]->packed && dd.nbucket >= 1);
  bytes = (size_t)m[0]->pnumel * dl_dtype_size(DL_F32);
  for (i = 1; i < NM; i++) CHECK(m[i]->pnumel == m[0]->pnumel && !memcmp(m[0]->pbuf, m[i]->pbuf, bytes));
  w0 = malloc(bytes);
  memcpy(w0, m[0]->pbuf, bytes);

  for (step = 0; step < STEPS; step++) {
    double n[NM] = {-1, -1, -1};
    for (i = 0; i < NM; i++) {
      dl_tensor *loss = dl_t_cross_entropy(&tp[i], dl_model_forward(m[i], &tp[i], x), lab, 0, DL_REDUCE_MEAN);
      if (i == 0) CHECK(dl_dist_train_step(&dd, o[0], &tp[0], loss, &sd, &n[0]) == DL_OK);
      else if (i == 1) n[1] = dl_train_step(o[1], &tp[1], loss, &sd);
      else CHECK(dl_dist_train_step(NULL, o[2], &tp[2], loss, &sd, &n[2]) == DL_OK);
      dl_tape_rewind(&tp[i]);
    }
    norms_same &= n[0] == n[1] && n[2] == n[1] && n[1] > 0;
    clipped += n[1] > sd.clip_norm;
    for (i = 0; i < NM; i += 2) {
      same &= !memcmp(m[i]->pbuf, m[1]->pbuf, bytes);
      state_same &= o[i]->nstate == o[1]->nstate &&
                    !memcmp(o[i]->sbuf, o[1]->sbuf, (size_t)(o[1]->nstate * m[1]->pnumel) * dl_dtype_size(DL_F32));
    }
  }
  CHECK_MSG(same, "dl_dist_train_step (world 1 / NULL) weights differ from dl_train_step's");
  CHECK_MSG(state_same, "optimizer states differ");
  CHECK_MSG(norms_same, "the norms differ");
  CHECK_MSG(clipped == STEPS, "clip_norm %g clipped %d of %d steps", sd.clip_norm, clipped, STEPS);
  CHECK(memcmp(w0, m[0]->pbuf, bytes) != 0); /* it trained */
  CHECK(dd.steps == STEPS);
  CHECK(*dl_optim_param_steps(o[0], "fc1.weight") == STEPS && o[0]->nsteps == STEPS);
  /* the gradients were zeroed */
  {
    int zero = 1;
    for (j = 0; j < m[0]->pnumel; j++) zero &= ((float *)m[0]->gbuf)[j] == 0;
    CHECK(zero);
  }
  /* norm may be NULL */
  {
    dl_tensor *loss = dl_t_cross_entropy(&tp[0], dl_model_forward(m[0], &tp[0], x), lab, 0, DL_REDUCE_MEAN);
    CHECK(dl_dist_train_step(&dd, o[0], &tp[0], loss, &sd, NULL) == DL_OK);
    dl_tape_rewind(&tp[0]);
    CHECK(dd.steps == STEPS + 1);
  }
  free(w0);
  CHECK(dl_dist_finalize(&dd, 0) == 0);
  CHECK(dd.model == NULL && dd.bucket == NULL && dd.nbucket == 0);
  for (i = 0; i < NM; i++) {
    dl_tape_free(&tp[i]);
    dl_optim_free(o[i]);
    dl_model_free(m[i]);
  }
  dl_tensor_free(x);
  dl_tensor_free(lab);
}

/* >>dl_dist_merge_rows ----------------------------------------------------- */

static double val_at(const dl_sgrad *s, int64_t k, int64_t c) {
  return s->dtype == DL_F32 ? (double)((const float *)s->values)[k * s->width + c]
                            : ((const double *)s->values)[k * s->width + c];
}

static void test_merge_rows(void) {
  int dtk;
  for (dtk = 0; dtk < 2; dtk++) {
    const dl_dtype dt = dtk ? DL_F64 : DL_F32;
    const double tol = dtk ? 1e-14 : 2e-6;
    dl_tensor *t = dl_tensor_make(&ctx, dt, DL_SHAPE(10, 3));
    dl_sgrad *s = dl_sgrad_attach(t);
    const int64_t nnz[3] = {2, 0, 3};
    const int64_t rows[5] = {4, 1, 1, 7, 4};   /* rank 0: {4, 1}; rank 1: none; rank 2: {1, 7, 4} */
    double v[5][3], want[3][3];
    float vf[5][3];
    const void *vals;
    const int64_t want_rows[3] = {4, 1, 7};
    int64_t k, c, r;
    int slots_ok = 1;
    CHECK(s != NULL && s == t->sgrad && s->nrows == 10 && s->width == 3 && s->dtype == dt);
    if (!s) { dl_tensor_free(t); continue; }
    for (k = 0; k < 5; k++)
      for (c = 0; c < 3; c++) {
        v[k][c] = (double)(k + 1) * 0.5 + (double)c * 0.125 - (k == 3 ? 4.0 : 0.0);
        vf[k][c] = (float)v[k][c];
      }
    for (c = 0; c < 3; c++) {
      want[0][c] = v[0][c] + v[4][c]; /* row 4 */
      want[1][c] = v[1][c] + v[2][c]; /* row 1 */
      want[2][c] = v[3][c];           /* row 7 */
    }
    vals = dtk ? (const void *)v : (const void *)vf;

    /* a sparse gradient with old rows {2, 9, 4}: must be forgotten */
    {
      int64_t old[3] = {2, 9, 4};
      for (k = 0; k < 3; k++) {
        void *p = dl_sgrad_row(s, old[k]);
        for (c = 0; c < 3; c++) {
          if (dt == DL_F32) ((float *)p)[c] = 100.0f + (float)k;
          else ((double *)p)[c] = 100.0 + (double)k;
        }
      }
    }
    CHECK(s->nnz == 3 && s->slot[2] == 0 && s->slot[9] == 1 && s->slot[4] == 2);

    dl_dist_merge_rows(s, 3, nnz, rows, vals, 1.0 / 3);
    CHECK(s->nnz == 3);
    for (k = 0; k < 3 && k < s->nnz; k++) {
      CHECK_MSG(s->rows[k] == want_rows[k], "merged row %lld is %lld, want %lld", (long long)k, (long long)s->rows[k],
                (long long)want_rows[k]);
      for (c = 0; c < 3; c++) CHECK_NEAR(val_at(s, k, c), want[k][c] / 3, tol);
    }
    for (r = 0; r < 10; r++) {
      int64_t want_slot = r == 4 ? 0 : r == 1 ? 1 : r == 7 ? 2 : -1;
      slots_ok &= s->slot[r] == want_slot;
    }
    CHECK_MSG(slots_ok, "slot[] does not match the merged rows");
    for (k = 0; k < s->nnz; k++) CHECK(s->slot[s->rows[k]] == k);

    /* merging again gives the same (the previous result is cleared), scale 1 */
    dl_dist_merge_rows(s, 3, nnz, rows, vals, 1.0);
    CHECK(s->nnz == 3 && s->rows[0] == 4 && s->rows[1] == 1 && s->rows[2] == 7);
    for (k = 0; k < 3 && k < s->nnz; k++)
      for (c = 0; c < 3; c++) CHECK_NEAR(val_at(s, k, c), want[k][c], tol);

    /* one rank only, a different order: rank 1 of 3 has {7, 4} */
    {
      const int64_t nnz2[3] = {0, 2, 0}, rows2[2] = {7, 4};
      dl_dist_merge_rows(s, 3, nnz2, rows2, vals, 0.5);
      CHECK(s->nnz == 2 && s->rows[0] == 7 && s->rows[1] == 4);
      CHECK(s->slot[7] == 0 && s->slot[4] == 1 && s->slot[1] == -1 && s->slot[2] == -1 && s->slot[9] == -1);
      for (c = 0; c < 3; c++) {
        CHECK_NEAR(val_at(s, 0, c), v[0][c] * 0.5, tol);
        CHECK_NEAR(val_at(s, 1, c), v[1][c] * 0.5, tol);
      }
    }
    /* nothing from any rank: empty */
    {
      const int64_t none[3] = {0, 0, 0};
      dl_dist_merge_rows(s, 3, none, rows, vals, 1.0 / 3);
      CHECK(s->nnz == 0);
      for (r = 0, slots_ok = 1; r < 10; r++) slots_ok &= s->slot[r] == -1;
      CHECK(slots_ok);
    }
    dl_tensor_free(t); /* frees its sgrad */
  }
}

/* >>the bucket plan --------------------------------------------------------- */

static dl_model *build_plan_model(int sparse) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 5});
  dl_linear_make(m, NULL, "a", &(dl_linear_desc){.in = 7, .out = 9});           /* 63 + 9 */
  dl_batchnorm1d_make(m, NULL, "bn", &(dl_batchnorm_desc){.features = 9});      /* 9 + 9, buffers */
  dl_linear_make(m, NULL, "b", &(dl_linear_desc){.in = 9, .out = 5});           /* 45 + 5 */
  if (sparse) dl_embedding_make(m, NULL, "emb", &(dl_embedding_desc){.num = 20, .dim = 6, .sparse = 1}); /* 120 */
  dl_linear_make(m, NULL, "c", &(dl_linear_desc){.in = 6, .out = 11});          /* 66 + 11 */
  dl_linear_make(m, NULL, "d", &(dl_linear_desc){.in = 11, .out = 3});          /* 33 + 3 */
  CHECK(dl_model_status(m) == DL_OK);
  return m;
}

/* Checks the plan of dd over m; returns the number of buckets. */
static int check_plan(const dl_dist *dd, const dl_model *m, int64_t bucket_bytes, int want_sparse) {
  const int64_t cap = bucket_bytes / (int64_t)dl_dtype_size(m->dtype);
  int64_t *owner = (int64_t *)calloc((size_t)m->pnumel + 1, sizeof(int64_t));
  int *role = (int *)calloc((size_t)m->pnumel + 1, sizeof(int)); /* 0 none, 1 dense, 2 dense padding, 3 sparse */
  int b, i, ok_cap = 1, ok_order = 1, ok_inside = 1, ok_cover = 1, ok_sparse = 1, ok_pad = 1, ok_pb = 1;
  int nsparse = 0, sparse_idx = -1;
  int64_t e, k, covered = 0, dense_elems = 0;

  /* what each element of the packed buffer is, from the parameters */
  for (i = 0; i < m->nparams; i++) {
    const dl_param *p = m->params[i];
    int nx;
    if (p->kind == DL_PARAM_BUFFER) {
      CHECK(p->offset < 0);
      continue;
    }
    CHECK(p->offset >= 0 && p->offset + p->t.numel <= m->pnumel);
    for (e = p->offset; e < p->offset + p->t.numel; e++) role[e] = p->sparse ? 3 : 1;
    if (p->sparse) {
      nsparse++;
      sparse_idx = i;
      continue;
    }
    dense_elems += p->t.numel;
    /* the padding after a dense parameter up to the next packed dense one */
    for (nx = i + 1; nx < m->nparams && m->params[nx]->kind == DL_PARAM_BUFFER; nx++) {}
    if (nx < m->nparams && !m->params[nx]->sparse)
      for (e = p->offset + p->t.numel; e < m->params[nx]->offset; e++) role[e] = 2;
  }
  CHECK(nsparse == want_sparse);

  /* the buckets */
  for (b = 0; b < dd->nbucket; b++) {
    const dl__dist_bucket *q = &dd->bucket[b];
    ok_order &= q->start < q->end && (b == 0 || q->start >= dd->bucket[b - 1].end);
    ok_inside &= q->start >= 0 && q->end <= m->pnumel;
    ok_cap &= q->end - q->start <= (cap < 1 ? 1 : cap);
    if (q->start < 0 || q->end > m->pnumel) continue;
    for (e = q->start; e < q->end; e++) {
      owner[e]++;
      if (role[e] == 1) covered++;
      ok_sparse &= role[e] != 3;
      ok_pad &= role[e] == 1 || role[e] == 2;
    }
  }
  for (e = 0; e < m->pnumel; e++) ok_cover &= role[e] == 1 ? owner[e] == 1 : role[e] == 2 || owner[e] == 0;
  CHECK_MSG(ok_order, "buckets overlap, are empty or are not ascending");
  CHECK_MSG(ok_inside, "a bucket lies outside [0, pnumel %lld)", (long long)m->pnumel);
  CHECK_MSG(ok_cap, "a bucket exceeds %lld elements", (long long)cap);
  CHECK_MSG(ok_sparse, "a bucket covers the sparse parameter");
  CHECK_MSG(ok_pad, "a bucket covers elements that are neither dense parameters nor the padding between them");
  CHECK_MSG(ok_cover && covered == dense_elems, "dense elements covered %lld of %lld", (long long)covered,
            (long long)dense_elems);

  /* pbucket / pbucket_end: exactly the buckets that touch the parameter's
   * elements (or its padding) */
  for (i = 0; i < m->nparams; i++) {
    const dl_param *p = m->params[i];
    int first = -1, last = -1;
    if (p->kind == DL_PARAM_BUFFER || p->sparse) {
      ok_pb &= dd->pbucket[i] < 0;
      continue;
    }
    for (b = 0; b < dd->nbucket; b++)
      if (dd->bucket[b].start < p->offset + p->t.numel && dd->bucket[b].end > p->offset) {
        if (first < 0) first = b;
        last = b;
      }
    if (first < 0) { ok_pb = 0; continue; }
    /* every bucket its elements touch is listed; one listed beyond them
     * holds some of the padding after it (conservative: it waits for this
     * parameter too) */
    ok_pb &= dd->pbucket[i] <= first && dd->pbucket_end[i] >= last + 1 && dd->pbucket_end[i] <= dd->nbucket;
    for (b = dd->pbucket[i] < 0 ? 0 : dd->pbucket[i]; b < dd->pbucket_end[i] && b < dd->nbucket; b++)
      if (b < first || b > last) {
        int pad_here = 0;
        for (e = dd->bucket[b].start; e < dd->bucket[b].end; e++) {
          int64_t f;
          int own_pad = e >= p->offset + p->t.numel && role[e] == 2;
          for (f = p->offset + p->t.numel; own_pad && f < e; f++) own_pad &= role[f] == 2;
          pad_here |= own_pad;
        }
        ok_pb &= pad_here;
      }
    if (!ok_pb) {
      fprintf(stderr, "  %s: [%lld, %lld) touches buckets %d..%d, pbucket %d..%d\n", p->name, (long long)p->offset,
              (long long)(p->offset + p->t.numel), first, last, dd->pbucket[i], dd->pbucket_end[i] - 1);
      break;
    }
  }
  CHECK_MSG(ok_pb, "pbucket / pbucket_end do not match the buckets the parameters touch");
  /* the sparse list */
  CHECK(dd->nsparse == nsparse);
  if (want_sparse) CHECK(dd->nsparse == 1 && dd->sparse[0] == sparse_idx && m->params[sparse_idx]->sparse);
  /* the overlap's address table: every dense parameter, sorted */
  {
    int nk = 0, ok_key = 1;
    for (i = 0; i < m->nparams; i++)
      if (m->params[i]->kind != DL_PARAM_BUFFER && !m->params[i]->sparse) nk++;
    CHECK(dd->nkey == nk);
    for (k = 0; k < dd->nkey; k++) {
      ok_key &= dd->key[k] == &m->params[dd->keyparam[k]]->t;
      if (k) ok_key &= (uintptr_t)dd->key[k - 1] < (uintptr_t)dd->key[k];
      ok_key &= dl__dist_cmp_key(dd->key, dd->nkey, &m->params[dd->keyparam[k]]->t) == (int)k;
    }
    CHECK(ok_key);
  }
  free(owner);
  free(role);
  return dd->nbucket;
}

static void test_plan(void) {
  const int64_t sizes[3] = {256, 1 << 20, 40};
  int sparse, si;
  for (sparse = 1; sparse >= 0; sparse--)
    for (si = 0; si < 3; si++) {
      dl_model *m = build_plan_model(sparse);
      dl_dist dd;
      dl_dist_desc d = {0};
      int nb;
      d.bucket_bytes = sizes[si];
      CHECK(dl_dist_init(&dd, &ctx, NULL, NULL, &d) == DL_OK);
      CHECK(dl_model_pack(m) == DL_OK);
      CHECK(dl__dist_plan(&dd, m) == DL_OK);
      CHECK(dd.model == m);
      nb = check_plan(&dd, m, sizes[si], sparse);
      if (si == 0) {
        /* 256 bytes: 64 elements; >= 372 dense elements need >= 6 */
        CHECK_MSG(nb >= 6, "%d buckets of 64 elements", nb);
      } else if (si == 1) {
        /* one bucket on each side of the sparse parameter, or one in all */
        CHECK_MSG(nb == (sparse ? 2 : 1), "%d buckets with a huge bucket_bytes (sparse %d)", nb, sparse);
      }
      /* dl_dist_attach makes the same plan */
      {
        dl_dist d2;
        int b, same;
        CHECK(dl_dist_init(&d2, &ctx, NULL, NULL, &d) == DL_OK);
        CHECK(dl_dist_attach(&d2, m) == DL_OK);
        same = d2.nbucket == dd.nbucket && d2.nsparse == dd.nsparse;
        for (b = 0; same && b < dd.nbucket; b++)
          same &= d2.bucket[b].start == dd.bucket[b].start && d2.bucket[b].end == dd.bucket[b].end;
        CHECK(same);
        dl_dist_finalize(&d2, 0);
      }
      /* planning again replaces the plan (no leak, same result) */
      CHECK(dl__dist_plan(&dd, m) == DL_OK && dd.nbucket == nb);
      dl_dist_finalize(&dd, 0);
      dl_model_free(m);
    }
}

/* >>shuffler shards ---------------------------------------------------------- */

static void test_shuffler_shards(void) {
  enum { N = 10, W = 3 };
  const int64_t want_count[3][W] = {{3, 3, 3}, {4, 4, 4}, {4, 3, 3}};
  int64_t world1[N], perm[N], epoch;
  int pad, r, identity = 1;
  dl_shuffler s1;
  dl_shuffle_perm(7, 0, N, perm);
  CHECK(dl_shuffler_make(&ctx, &s1, N, &(dl_shuffler_desc){.seed = 7}) == DL_OK);
  CHECK(dl_shuffler_next(&s1, world1, N + 5) == N);
  for (r = 0; r < N; r++) {
    CHECK(world1[r] == perm[r]);
    identity &= world1[r] == r;
  }
  CHECK(!identity);
  dl_shuffler_free(&s1);

  for (epoch = 0; epoch < 2; epoch++) {
    if (epoch) dl_shuffle_perm(7, 1, N, world1);
    for (pad = 0; pad < 3; pad++) {
      int seen[N] = {0};
      int64_t total = 0;
      for (r = 0; r < W; r++) {
        dl_shuffler s;
        dl_shuffler_state st;
        int64_t out[N + 4], got, k;
        CHECK(dl_shuffler_make(&ctx, &s, N, &(dl_shuffler_desc){.seed = 7, .world = W, .rank = r, .pad = pad}) == DL_OK);
        if (epoch) dl_shuffler_set_epoch(&s, 1);
        CHECK(s.per_rank == want_count[pad][r]);
        /* two calls: 2 then the rest */
        got = dl_shuffler_next(&s, out, 2);
        got += dl_shuffler_next(&s, out + got, N + 4 - got);
        CHECK_MSG(got == want_count[pad][r], "pad %d rank %d: %lld samples, want %lld", pad, r, (long long)got,
                  (long long)want_count[pad][r]);
        CHECK(dl_shuffler_next(&s, out, 4) == 0); /* the epoch is used up */
        for (k = 0; k < got && k < N + 4; k++) {
          CHECK(out[k] >= 0 && out[k] < N);
          CHECK_MSG(out[k] == world1[(k * W + r) % N], "pad %d rank %d sample %lld: %lld, want %lld", pad, r,
                    (long long)k, (long long)out[k], (long long)world1[(k * W + r) % N]);
          if (out[k] >= 0 && out[k] < N) seen[out[k]]++;
        }
        total += got;
        st = dl_shuffler_get_state(&s);
        CHECK(st.flags == (pad == 0 ? 1 : pad == 1 ? 3 : 5));
        CHECK(st.world == W && st.rank == r && st.n == N && st.epoch == epoch && st.pos == got);
        dl_shuffler_free(&s);
      }
      if (pad == 0) {
        int once = 1, missing = 0;
        for (r = 0; r < N; r++) {
          once &= seen[r] <= 1;
          missing += seen[r] == 0;
        }
        CHECK(total == 9 && once && missing == 1);
        CHECK(seen[world1[9]] == 0); /* the skipped one is the permutation's last position */
      } else if (pad == 1) {
        int all = 1, twice = 0;
        for (r = 0; r < N; r++) {
          all &= seen[r] >= 1 && seen[r] <= 2;
          twice += seen[r] == 2;
        }
        CHECK(total == 12 && all && twice == 2);
        CHECK(seen[world1[0]] == 2 && seen[world1[1]] == 2); /* wrapped to the start */
      } else {
        int exact = 1;
        for (r = 0; r < N; r++) exact &= seen[r] == 1;
        CHECK(total == N && exact);
      }
    }
  }

  /* pad 2 with more ranks than samples: the last ranks get none */
  {
    dl_shuffler s;
    int64_t out[4];
    CHECK(dl_shuffler_make(&ctx, &s, 2, &(dl_shuffler_desc){.seed = 7, .world = 4, .rank = 3, .pad = 2}) == DL_OK);
    CHECK(s.per_rank == 0 && dl_shuffler_next(&s, out, 4) == 0);
    dl_shuffler_free(&s);
    CHECK(dl_shuffler_make(&ctx, &s, 2, &(dl_shuffler_desc){.seed = 7, .world = 4, .rank = 1, .pad = 2}) == DL_OK);
    CHECK(s.per_rank == 1);
    dl_shuffler_free(&s);
  }
  /* no shuffling, pad 2: flags 4 alone, dataset order dealt round-robin */
  {
    dl_shuffler s;
    int64_t out[N], k, got;
    CHECK(dl_shuffler_make(&ctx, &s, N, &(dl_shuffler_desc){.no_shuffle = 1, .world = W, .rank = 1, .pad = 2}) == DL_OK);
    CHECK(dl_shuffler_get_state(&s).flags == 4);
    got = dl_shuffler_next(&s, out, N);
    CHECK(got == 3);
    for (k = 0; k < got; k++) CHECK(out[k] == k * W + 1);
    dl_shuffler_free(&s);
  }
  /* bad pad values */
  {
    dl_shuffler s;
    CHECK(dl_shuffler_make(&ctx, &s, N, &(dl_shuffler_desc){.seed = 7, .world = W, .rank = 0, .pad = 3}) == DL_ERR_ARG);
    CHECK(strstr(dl_ctx_message(&ctx), "pad") != NULL);
    dl_shuffler_free(&s);
    CHECK(dl_shuffler_make(&ctx, &s, N, &(dl_shuffler_desc){.seed = 7, .world = W, .rank = 0, .pad = -1}) == DL_ERR_ARG);
    dl_shuffler_free(&s);
  }
  /* a pad 2 state does not restore into a pad 0 / pad 1 shuffler, and does into pad 2 */
  {
    dl_shuffler a, b, c;
    dl_shuffler_state st;
    int64_t out[N], o2[N];
    CHECK(dl_shuffler_make(&ctx, &a, N, &(dl_shuffler_desc){.seed = 7, .world = W, .rank = 0, .pad = 2}) == DL_OK);
    CHECK(dl_shuffler_make(&ctx, &b, N, &(dl_shuffler_desc){.seed = 7, .world = W, .rank = 0, .pad = 1}) == DL_OK);
    CHECK(dl_shuffler_make(&ctx, &c, N, &(dl_shuffler_desc){.seed = 7, .world = W, .rank = 0, .pad = 2}) == DL_OK);
    CHECK(dl_shuffler_next(&a, out, 1) == 1);
    st = dl_shuffler_get_state(&a);
    CHECK(dl_shuffler_restore(&b, &st) == DL_ERR_ARG);
    CHECK(dl_shuffler_restore(&c, &st) == DL_OK);
    CHECK(dl_shuffler_next(&a, out, N) == 3 && dl_shuffler_next(&c, o2, N) == 3);
    CHECK(out[0] == o2[0] && out[1] == o2[1] && out[2] == o2[2]);
    dl_shuffler_free(&a);
    dl_shuffler_free(&b);
    dl_shuffler_free(&c);
  }
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  RUN(test_init_fallback);
  RUN(test_train_step_world1);
  RUN(test_merge_rows);
  RUN(test_plan);
  RUN(test_shuffler_shards);
  return harness_finish();
}
