/* dl/dist.h - data-parallel training over MPI: the same program runs as
 * several processes (ranks), each on its own shard of every epoch's data,
 * and the gradients are averaged across ranks before each optimizer step,
 * so that every rank keeps the same weights.
 *
 *   dl_dist dd;
 *   if (dl_dist_init(&dd, &ctx, &argc, &argv, NULL) != DL_OK) ...  // MPI_Init when built with DL_USE_MPI
 *   ... model m, optimizer o ...
 *   if (dl_dist_attach(&dd, m) != DL_OK) ...        // rank 0's weights to every rank
 *   batcher: .batch_size = B / dd.world, .shuffle = {.seed = s, .world = dd.world, .rank = dd.rank}
 *   while (dl_batcher_next(&b, &batch)) {
 *     loss = forward ...;
 *     if (dl_dist_train_step(&dd, o, &tp, loss, &sd, NULL) != DL_OK) break;  // backward, all-reduce,
 *     dl_tape_rewind(&tp);                                                 // clip, step, zero
 *   }
 *   return dl_dist_finalize(&dd, rc);                 // MPI_Finalize, or MPI_Abort when rc != 0
 *
 * Build:  mpicc -std=c11 -O2 -DDL_USE_MPI -Iinclude prog.c -o prog -lm
 * Run:    mpirun -np 2 ./prog           (as root: --allow-run-as-root; more
 *                                         ranks than cores: --oversubscribe)
 * Without DL_USE_MPI nothing here needs MPI: dl_dist_init gives rank 0 of
 * 1 and every call is what a single process does (dl_dist_train_step is
 * dl_train_step), so one program serves both builds.
 *
 * >>what is exchanged
 * - attach: the model is packed (dl_model_pack), every rank's layout is
 *   compared (a different model on one rank is DL_ERR_SHAPE, not a hang or
 *   silent garbage), and rank 0's parameters and buffers are broadcast.
 * - each step: the packed dense gradient is all-reduced (sum, then * 1 /
 *   world) in buckets of desc.bucket_bytes, always in the same order on
 *   every rank (from the buffer's end, where the last layers' gradients
 *   are, to its start). With overlap (the default) a bucket's non-blocking
 *   all-reduce starts during the backward pass, as soon as the tape walk has
 *   passed every node that uses one of its parameters; the buckets go on
 *   while the earlier layers' gradients are computed. Then buffers (batch-
 *   norm running statistics) are broadcast from rank 0 after the update
 *   (PyTorch DDP's broadcast_buffers).
 * - row-sparse gradients (Embedding(sparse=1)) are gathered, not densified:
 *   every rank receives every rank's touched rows and values, and the
 *   gradient becomes the union of the rows, each the sum over ranks (in rank
 *   order: bit-identical on every rank) / world. The lazy optimizers then
 *   update exactly the rows the whole global batch touched, as one process
 *   would; densifying would make every row "touched" (Adam would move rows
 *   no sample used) and send the whole table every step, while the gather
 *   sends only the touched rows. A sparse parameter that also got a dense
 *   gradient on any rank (tied weights) is folded to dense on every rank and
 *   all-reduced whole.
 * - clipping, regularisation and the update run after the exchange, on the
 *   averaged gradient: the global norm of dl_clip_grads is the norm of the
 *   average, as in one process with the whole batch.
 * >>failures
 * - every collective is non-blocking and waited for with a deadline
 *   (desc.timeout_s): a rank that died or hangs makes the others return
 *   DL_ERR_COMM with a message naming the wait, instead of waiting forever;
 *   MPI's own errors are returned too (the communicator has
 *   MPI_ERRORS_RETURN). dl_dist_finalize(dd, rc) with rc != 0 then calls
 *   MPI_Abort, which ends every rank (mpirun also ends the job when a rank
 *   exits with a non-zero status or without MPI_Finalize).
 * - dl_dist_agree: every rank learns the worst of the ranks' statuses (and
 *   the failing rank's message), so a file one rank cannot read fails the
 *   run everywhere at the same point.
 * - dl_dist_check: a checksum of every parameter compared across ranks; a
 *   difference names the parameters. dl_dist_train_step runs it every
 *   desc.check_every steps (default DL_DIST_CHECK_EVERY: 100 in builds
 *   without NDEBUG, never with it).
 * >>what stays per rank
 * - dropout and augmentation draws come from the same seeds on every rank,
 *   so rank 0's checkpoint resumes every rank; a rank's samples differ, so
 *   the masks are still independent of the other ranks' samples.
 * - batch normalisation uses the rank's own mini-batch statistics (no
 *   SyncBatchNorm); its running statistics are rank 0's (broadcast).
 */
#ifndef DL_DIST_H
#define DL_DIST_H

#include "optim.h"
#include "data.h"
#include "report.h" /* dl_confusion and accuracy, for >>evaluate */
DL__HEADER_BEGIN

#if !defined(DL__SCALAR_ONLY)

#ifdef DL_USE_MPI
/* C++: the MPI C API only (Open MPI's and MPICH's old C++ bindings are
 * deprecated and do not compile warning-free) */
#if defined(__cplusplus) && !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#endif
#if defined(__cplusplus) && !defined(MPICH_SKIP_MPICXX)
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <sched.h>
#ifndef __STDC_NO_THREADS__
#include <threads.h>
#endif
#endif

/* Steps between divergence checks in dl_dist_train_step when the desc
 * says 0. */
#ifndef DL_DIST_CHECK_EVERY
#ifdef NDEBUG
#define DL_DIST_CHECK_EVERY 0
#else
#define DL_DIST_CHECK_EVERY 100
#endif
#endif
/* Gradient bytes per all-reduce when the desc says 0. */
#ifndef DL_DIST_BUCKET_BYTES
#define DL_DIST_BUCKET_BYTES (1 << 20)
#endif

/* dl_dist_desc: zero fields are defaults.
 *   bucket_bytes    gradient bytes per all-reduce (0: DL_DIST_BUCKET_BYTES)
 *   no_overlap      1: start the all-reduce after the backward pass instead
 *                   of during it
 *   timeout_s       a collective unfinished after this many seconds fails
 *                   with DL_ERR_COMM (0: 600; < 0: wait for ever)
 *   no_buffer_sync  1: keep each rank's own buffers (no broadcast of rank
 *                   0's after each step)
 *   check_every     dl_dist_check every N steps of dl_dist_train_step (0:
 *                   DL_DIST_CHECK_EVERY; < 0: never) */
typedef struct dl_dist_desc {
  int64_t bucket_bytes; /* gradient bytes per all-reduce (0: DL_DIST_BUCKET_BYTES) */
  int no_overlap; /* 1: all-reduce after the backward pass instead of during it */
  double timeout_s; /* seconds before an unfinished collective fails (0: 600; < 0: never) */
  int no_buffer_sync; /* 1: keep each rank's own buffers (no broadcast from rank 0) */
  int64_t check_every; /* dl_dist_check every N steps (0: DL_DIST_CHECK_EVERY; < 0: never) */
} dl_dist_desc;

/* One all-reduce of the packed gradient: elements [start, end). */
typedef struct dl__dist_bucket {
  int64_t start, end;
  int64_t last;  /* overlap: the walk position after which it is final */
} dl__dist_bucket;

/* A data-parallel job as seen from one rank (dl_dist_init): the rank and
 * the number of ranks, the attached model, the gradient buckets and the
 * step count. dl_dist_finalize ends it. */
typedef struct dl_dist {
  dl_ctx *ctx; /* allocator and error reports */
  int rank, world;         /* this process, and how many there are */
  dl_dist_desc desc;       /* defaults filled in */
  dl_model *model;         /* attached (borrowed) */
  int64_t steps;           /* dl_dist_train_step calls */
  int owns_mpi;            /* dl_dist_init called MPI_Init: finalize calls MPI_Finalize */
  int has_comm;            /* comm is ours to free */
  int agreed;              /* the last failure was agreed by every rank (dl_dist_agree) */
  dl_status status;        /* the first communication failure inside a backward walk */
  /* the plan (dl_dist_attach) */
  dl__dist_bucket *bucket;
  int nbucket; /* number of buckets */
  int *pbucket;            /* [nparams] a dense parameter's first bucket (-1: none) */
  int *pbucket_end;        /* [nparams] one past its last bucket */
  int64_t *plast;          /* [nparams] walk position of the last node using it (-1: none yet) */
  const dl_tensor **key;   /* [nkey] sorted tensor addresses of dense trainable parameters */
  int *keyparam;           /* [nkey] their parameter numbers */
  int nkey; /* number of keys */
  int *sparse;             /* [nsparse] parameter numbers of the row-sparse ones */
  int *sdense;             /* [nsparse] whether any rank has a dense gradient for it this step */
  int nsparse; /* number of row-sparse parameters */
  int next;                /* overlap: the next bucket to start (counting down) */
  int64_t visit;           /* overlap: nodes walked so far */
  /* sparse exchange: [world] row counts, MPI counts and displacements;
   * scratch for rows and values (grows to the largest step's needs) */
  int64_t *nnz;
  int *cnt, *disp; /* MPI counts and displacements */
  void *sbuf; /* scratch for the rows and values */
  size_t sbuf_bytes; /* its size */
#ifdef DL_USE_MPI
  MPI_Comm comm;
  MPI_Request *req;        /* [nbucket] */
#endif
} dl_dist;

/* 1 on rank 0 (and for a NULL dd): the rank that prints and writes files. */
DL_API int dl_dist_is_root(const dl_dist *dd) { return !dd || dd->rank == 0; }

#ifdef DL_USE_MPI

DL_API MPI_Datatype dl__dist_mpi_type(dl_dtype dt) { return dt == DL_F64 ? MPI_DOUBLE : MPI_FLOAT; }

/* An MPI call that failed: DL_ERR_COMM with MPI's message. */
DL_API dl_status dl__dist_mpi_fail(dl_dist *dd, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
  msg[len] = 0;
  return dl_fail(dd->ctx, DL_ERR_COMM, "%s (rank %d of %d): MPI error %d: %s", what, dd->rank, dd->world, rc,
                 len ? msg : "(no message)");
}

/* Wait for n requests with the deadline: spin briefly (an all-reduce on one
 * machine is microseconds), then yield the core, then sleep 1 ms between
 * tests, so that ranks sharing cores are not starved by a waiting one. */
DL_API dl_status dl__dist_wait(dl_dist *dd, int n, MPI_Request *r, const char *what) {
  double t0 = MPI_Wtime(), waited = 0;
  long k;
  int flag = 0, rc;
  for (k = 0;; k++) {
    rc = MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return dl__dist_mpi_fail(dd, rc, what);
    if (flag) return DL_OK;
    if (k < 2000) continue;
    if ((k & 63) == 0) {
      waited = MPI_Wtime() - t0;
      if (dd->desc.timeout_s > 0 && waited > dd->desc.timeout_s)
        return dl_fail(dd->ctx, DL_ERR_COMM,
                       "%s (rank %d of %d): no answer after %.1f s: another rank has died, hangs or "
                       "stopped taking part (timeout_s %g)",
                       what, dd->rank, dd->world, waited, dd->desc.timeout_s);
    }
    if (waited < 0.1) sched_yield();
    else {
#ifndef __STDC_NO_THREADS__
      struct timespec ts = {0, 1000000};
      thrd_sleep(&ts, NULL);
#else
      sched_yield();
#endif
    }
  }
}

/* Broadcast `bytes` bytes from rank 0, in pieces MPI's int count can hold. */
DL_API dl_status dl__dist_bcast_bytes(dl_dist *dd, void *p, size_t bytes, const char *what) {
  const size_t piece = (size_t)1 << 30;
  size_t at;
  for (at = 0; at < bytes; at += piece) {
    size_t n = bytes - at < piece ? bytes - at : piece;
    MPI_Request r;
    int rc = MPI_Ibcast((char *)p + at, (int)n, MPI_BYTE, 0, dd->comm, &r);
    dl_status s;
    if (rc != MPI_SUCCESS) return dl__dist_mpi_fail(dd, rc, what);
    if ((s = dl__dist_wait(dd, 1, &r, what)) != DL_OK) return s;
  }
  return DL_OK;
}

/* In-place all-reduce of n values with op, waited for. */
DL_API dl_status dl__dist_allreduce(dl_dist *dd, void *v, int n, MPI_Datatype t, MPI_Op op, const char *what) {
  MPI_Request r;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, t, op, dd->comm, &r);
  if (rc != MPI_SUCCESS) return dl__dist_mpi_fail(dd, rc, what);
  return dl__dist_wait(dd, 1, &r, what);
}

#endif /* DL_USE_MPI */

/* >>init ------------------------------------------------------------------- */

/* Join the job: with DL_USE_MPI, MPI_Init_thread (FUNNELED: only the main
 * thread calls MPI; OpenMP teams are fine) unless MPI is already
 * initialised, a private communicator (a duplicate of MPI_COMM_WORLD) with
 * errors returned rather than fatal; without it, rank 0 of 1. argc and argv
 * may be NULL. DL_OK or DL_ERR_COMM / DL_ERR_ARG with a message. */
DL_API dl_status dl_dist_init(dl_dist *dd, dl_ctx *ctx, int *argc, char ***argv, const dl_dist_desc *desc) {
  memset(dd, 0, sizeof *dd);
  dd->ctx = ctx;
  dd->world = 1;
  if (desc) dd->desc = *desc;
  if (dd->desc.bucket_bytes < 0) return dl_fail(ctx, DL_ERR_ARG, "dl_dist_init: bucket_bytes %lld", (long long)dd->desc.bucket_bytes);
  if (dd->desc.bucket_bytes == 0) dd->desc.bucket_bytes = DL_DIST_BUCKET_BYTES;
  if (dd->desc.timeout_s == 0) dd->desc.timeout_s = 600;
  if (dd->desc.check_every == 0) dd->desc.check_every = DL_DIST_CHECK_EVERY;
#ifdef DL_USE_MPI
  {
    int inited = 0, provided = 0, rc;
    MPI_Initialized(&inited);
    if (!inited) {
      rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
      if (rc != MPI_SUCCESS) return dl_fail(ctx, DL_ERR_COMM, "dl_dist_init: MPI_Init_thread failed (%d)", rc);
      dd->owns_mpi = 1;
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &dd->comm)) != MPI_SUCCESS) return dl__dist_mpi_fail(dd, rc, "dl_dist_init");
    dd->has_comm = 1;
    MPI_Comm_set_errhandler(dd->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(dd->comm, &dd->rank);
    MPI_Comm_size(dd->comm, &dd->world);
  }
#else
  (void)argc;
  (void)argv;
#endif
  return DL_OK;
}

DL_API void dl__dist_free_plan(dl_dist *dd) {
  dl_free(dd->ctx, dd->bucket);
  dl_free(dd->ctx, dd->pbucket);
  dl_free(dd->ctx, dd->pbucket_end);
  dl_free(dd->ctx, dd->plast);
  dl_free(dd->ctx, (void *)dd->key);
  dl_free(dd->ctx, dd->keyparam);
  dl_free(dd->ctx, dd->sparse);
  dl_free(dd->ctx, dd->sdense);
  dl_free(dd->ctx, dd->nnz);
  dl_free(dd->ctx, dd->cnt);
  dl_free(dd->ctx, dd->disp);
  dd->nnz = NULL;
  dd->cnt = dd->disp = NULL;
#ifdef DL_USE_MPI
  dl_free(dd->ctx, dd->req);
  dd->req = NULL;
#endif
  dd->bucket = NULL;
  dd->pbucket = dd->pbucket_end = dd->keyparam = dd->sparse = dd->sdense = NULL;
  dd->plast = NULL;
  dd->key = NULL;
  dd->nbucket = dd->nkey = dd->nsparse = 0;
  dd->model = NULL;
}

/* Leave the job and release everything; returns rc, for
 * `return dl_dist_finalize(&dd, rc);` at the end of main. With rc != 0 in
 * a job of several ranks (and no dl_dist_agree that told every rank of the
 * failure), MPI_Abort(rc) ends every rank: the others may be waiting for
 * this one. NULL or an uninitialised-by-init (zeroed) dd is fine. */
DL_API int dl_dist_finalize(dl_dist *dd, int rc) {
  if (!dd) return rc;
  dl__dist_free_plan(dd);
  dl_free(dd->ctx, dd->sbuf);
  dd->sbuf = NULL;
  dd->sbuf_bytes = 0;
#ifdef DL_USE_MPI
  if (rc != 0 && dd->world > 1 && !dd->agreed) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(dd->has_comm ? dd->comm : MPI_COMM_WORLD, rc);
  }
  if (dd->has_comm) {
    MPI_Comm_free(&dd->comm);
    dd->has_comm = 0;
  }
  if (dd->owns_mpi) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    dd->owns_mpi = 0;
  }
#endif
  return rc;
}

/* >>collectives for programs ---------------------------------------------- */

/* v[0..n) = their sum over the ranks (metrics: loss sums, counts). The
 * same order of addition on every rank: every rank gets the same bits. */
DL_API dl_status dl_dist_sum(dl_dist *dd, double *v, int n) {
  if (!dd || dd->world <= 1 || n <= 0) return DL_OK;
#ifdef DL_USE_MPI
  return dl__dist_allreduce(dd, v, n, MPI_DOUBLE, MPI_SUM, "dl_dist_sum");
#else
  (void)v;
  return DL_OK;
#endif
}
/* The same for int64 counts (a confusion matrix). */
DL_API dl_status dl_dist_sum_i64(dl_dist *dd, int64_t *v, int64_t n) {
  if (!dd || dd->world <= 1 || n <= 0) return DL_OK;
#ifdef DL_USE_MPI
  {
    int64_t at;
    dl_status s;
    for (at = 0; at < n; at += (int64_t)1 << 28) {
      int64_t k = n - at < ((int64_t)1 << 28) ? n - at : ((int64_t)1 << 28);
      if ((s = dl__dist_allreduce(dd, v + at, (int)k, MPI_INT64_T, MPI_SUM, "dl_dist_sum_i64")) != DL_OK) return s;
    }
    return DL_OK;
  }
#else
  (void)v;
  return DL_OK;
#endif
}

/* Every rank passes its own status; every rank gets the worst one (the
 * highest code, the lowest rank among equals) and, when it is a failure,
 * that rank's message in ctx ("rank 1 of 2: <its message>"). Call it
 * after steps that can fail on one rank only (reading a file), so that all
 * ranks stop together: then dl_dist_finalize ends normally. Returns the
 * local status unchanged when the exchange itself fails. */
DL_API dl_status dl_dist_agree(dl_dist *dd, dl_status s) {
  if (!dd || dd->world <= 1) return s;
#ifdef DL_USE_MPI
  {
    int in[2], out[2];
    dl_status c;
    char msg[sizeof dd->ctx->message];
    in[0] = (int)s;
    in[1] = -dd->rank; /* MAXLOC keeps the higher "location": the lowest rank */
    out[0] = out[1] = 0;
    {
      MPI_Request r;
      int rc = MPI_Iallreduce(in, out, 1, MPI_2INT, MPI_MAXLOC, dd->comm, &r);
      if (rc != MPI_SUCCESS) return dl__dist_mpi_fail(dd, rc, "dl_dist_agree");
      if ((c = dl__dist_wait(dd, 1, &r, "dl_dist_agree")) != DL_OK) return c;
    }
    if (out[0] == DL_OK) return DL_OK;
    /* the failing rank's message to all */
    memset(msg, 0, sizeof msg);
    if (dd->rank == -out[1]) snprintf(msg, sizeof msg, "%s", dd->ctx ? dd->ctx->message : "");
    {
      MPI_Request r;
      int rc = MPI_Ibcast(msg, (int)sizeof msg, MPI_CHAR, -out[1], dd->comm, &r);
      if (rc != MPI_SUCCESS) return dl__dist_mpi_fail(dd, rc, "dl_dist_agree");
      if ((c = dl__dist_wait(dd, 1, &r, "dl_dist_agree")) != DL_OK) return c;
    }
    msg[sizeof msg - 1] = 0;
    dd->agreed = 1;
    if (dd->rank == -out[1]) return (dl_status)out[0];
    return dl_fail(dd->ctx, (dl_status)out[0], "rank %d of %d: %.400s", -out[1], dd->world, msg);
  }
#else
  return s;
#endif
}

/* >>attach ----------------------------------------------------------------- */

DL_API int dl__dist_cmp_key(const dl_tensor *const *key, int n, const dl_tensor *t) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (key[mid] == t) return mid;
    if ((uintptr_t)key[mid] < (uintptr_t)t) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* The bucket plan over m's packed gradient: dense trainable parameters in
 * buffer order, cut every cap elements and around row-sparse parameters
 * (exchanged by gathering rows). Pure bookkeeping: no communication. */
DL_API dl_status dl__dist_plan(dl_dist *dd, dl_model *m) {
  int64_t cap = dd->desc.bucket_bytes / (int64_t)dl_dtype_size(m->dtype), open_start = -1, open_end = -1;
  int i, j, nb = 0, capb = 8;
  if (cap < 1) cap = 1;
  dl__dist_free_plan(dd);
  dd->model = m;
  dd->pbucket = (int *)dl_alloc(dd->ctx, sizeof(int) * (size_t)(m->nparams + 1));
  dd->pbucket_end = (int *)dl_alloc(dd->ctx, sizeof(int) * (size_t)(m->nparams + 1));
  dd->plast = (int64_t *)dl_alloc(dd->ctx, sizeof(int64_t) * (size_t)(m->nparams + 1));
  dd->key = (const dl_tensor **)dl_alloc(dd->ctx, sizeof(dl_tensor *) * (size_t)(m->nparams + 1));
  dd->keyparam = (int *)dl_alloc(dd->ctx, sizeof(int) * (size_t)(m->nparams + 1));
  dd->sparse = (int *)dl_alloc(dd->ctx, sizeof(int) * (size_t)(m->nparams + 1));
  dd->sdense = (int *)dl_alloc(dd->ctx, sizeof(int) * (size_t)(m->nparams + 1));
  dd->bucket = (dl__dist_bucket *)dl_alloc(dd->ctx, sizeof(dl__dist_bucket) * (size_t)capb);
  dd->nnz = (int64_t *)dl_alloc(dd->ctx, sizeof(int64_t) * (size_t)dd->world);
  dd->cnt = (int *)dl_alloc(dd->ctx, sizeof(int) * (size_t)dd->world);
  dd->disp = (int *)dl_alloc(dd->ctx, sizeof(int) * (size_t)dd->world);
  if (!dd->nnz || !dd->cnt || !dd->disp || !dd->sdense || !dd->pbucket || !dd->pbucket_end || !dd->plast || !dd->key || !dd->keyparam || !dd->sparse || !dd->bucket)
    goto nomem;
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    int64_t s, e;
    dd->pbucket[i] = dd->pbucket_end[i] = -1;
    if (p->kind == DL_PARAM_BUFFER || p->offset < 0) continue;
    if (p->sparse) {
      dd->sparse[dd->nsparse++] = i;
      continue;
    }
    s = p->offset;
    e = p->offset + p->t.numel;
    if (open_start >= 0 && s != open_end) { /* a gap: a sparse parameter lies between */
      if (!dl__grow(dd->ctx, (void **)&dd->bucket, &capb, nb + 1, sizeof *dd->bucket)) goto nomem;
      dd->bucket[nb].start = open_start;
      dd->bucket[nb++].end = open_end;
      open_start = -1;
    }
    if (open_start < 0) open_start = s;
    dd->pbucket[i] = nb;
    /* the parameter's elements, with the padding to the next one */
    j = i + 1;
    while (j < m->nparams && (m->params[j]->kind == DL_PARAM_BUFFER || m->params[j]->offset < 0)) j++;
    if (j < m->nparams && !m->params[j]->sparse) e = m->params[j]->offset;
    open_end = e;
    while (open_end - open_start >= cap) {
      if (!dl__grow(dd->ctx, (void **)&dd->bucket, &capb, nb + 1, sizeof *dd->bucket)) goto nomem;
      dd->bucket[nb].start = open_start;
      dd->bucket[nb++].end = open_start + cap;
      open_start += cap;
    }
    if (open_start == open_end) open_start = -1;
    dd->pbucket_end[i] = open_start >= 0 ? nb + 1 : nb;
    if (dd->pbucket_end[i] <= dd->pbucket[i]) dd->pbucket_end[i] = dd->pbucket[i] + 1;
  }
  if (open_start >= 0) {
    if (!dl__grow(dd->ctx, (void **)&dd->bucket, &capb, nb + 1, sizeof *dd->bucket)) goto nomem;
    dd->bucket[nb].start = open_start;
    dd->bucket[nb++].end = open_end;
  }
  dd->nbucket = nb;
  for (i = 0; i < m->nparams; i++)
    if (dd->pbucket[i] >= 0 && dd->pbucket_end[i] > nb) dd->pbucket_end[i] = nb;
  /* the address -> parameter table for the overlap's walk */
  for (i = 0; i < m->nparams; i++) {
    const dl_tensor *t = &m->params[i]->t;
    if (dd->pbucket[i] < 0) continue;
    for (j = dd->nkey; j > 0 && (uintptr_t)dd->key[j - 1] > (uintptr_t)t; j--) {
      dd->key[j] = dd->key[j - 1];
      dd->keyparam[j] = dd->keyparam[j - 1];
    }
    dd->key[j] = t;
    dd->keyparam[j] = i;
    dd->nkey++;
  }
#ifdef DL_USE_MPI
  dd->req = (MPI_Request *)dl_alloc(dd->ctx, sizeof(MPI_Request) * (size_t)(nb + 1));
  if (!dd->req) goto nomem;
#endif
  return DL_OK;
nomem:
  dl__dist_free_plan(dd);
  return dl_fail(dd->ctx, DL_ERR_NOMEM, "dl_dist_attach: out of memory for the bucket plan of %d parameters (%zu bytes)",
                 m->nparams, (size_t)(m->nparams + 1) * (5 * sizeof(int) + sizeof(int64_t) + sizeof(void *)));
}

/* Broadcast rank 0's buffers (parameters of kind DL_PARAM_BUFFER) only. */
DL_API dl_status dl__dist_bcast_buffers(dl_dist *dd, dl_model *m) {
#ifdef DL_USE_MPI
  int i;
  dl_status s;
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    if (p->kind != DL_PARAM_BUFFER || !p->t.data || !p->t.numel) continue;
    if ((s = dl__dist_bcast_bytes(dd, p->t.data, (size_t)p->t.numel * dl_dtype_size(p->t.dtype),
                                  "dl_dist_train_step (buffers)")) != DL_OK)
      return s;
  }
#else
  (void)dd;
  (void)m;
#endif
  return DL_OK;
}

/* Broadcast rank 0's parameters and buffers to every rank. */
DL_API dl_status dl_dist_bcast_model(dl_dist *dd, dl_model *m) {
  if (!dd || dd->world <= 1) return DL_OK;
#ifdef DL_USE_MPI
  {
    size_t es = dl_dtype_size(m->dtype);
    dl_status s;
    if (m->pbuf && (s = dl__dist_bcast_bytes(dd, m->pbuf, (size_t)m->pnumel * es, "dl_dist_bcast_model")) != DL_OK)
      return s;
  }
#endif
  return dl__dist_bcast_buffers(dd, m);
}

/* Use m on every rank: packs it, checks that every rank built the same
 * layout (DL_ERR_SHAPE naming both otherwise), plans the gradient buckets
 * and broadcasts rank 0's parameters and buffers. Call once, after the
 * model is built (the optimizer may exist already) and before training;
 * --load / --resume on every rank afterwards is fine (the same file gives
 * the same values). */
DL_API dl_status dl_dist_attach(dl_dist *dd, dl_model *m) {
  dl_status s;
  if ((s = dl_model_pack(m)) != DL_OK) {
    char why[400];
    const char *msg = dl_ctx_message(m->ctx); /* may be dd's own message: copied first */
    size_t n = strlen(msg) < sizeof why ? strlen(msg) : sizeof why - 1;
    memcpy(why, msg, n);
    why[n] = 0;
    return dl_fail(dd->ctx, s, "dl_dist_attach: cannot pack the model: %s", why);
  }
  if (dd->world > 1 && m->nparams && m->params[0]->t.device != DL_CPU) /* the exchange reads host buffers */
    return dl_fail(dd->ctx, DL_ERR_UNSUPPORTED, "dl_dist_attach: a model on the GPU over several ranks "
                   "needs the NCCL path, which is not implemented yet");
  if ((s = dl__dist_plan(dd, m)) != DL_OK) return s;
  if (dd->world <= 1) return DL_OK;
#ifdef DL_USE_MPI
  {
    /* layout: element count, tensors, dtype, sparse count, and a hash of the
     * names and shapes; min and max over the ranks must agree */
    int64_t v[10], h = 1469598103934665603LL;
    int i, k;
    for (i = 0; i < m->nparams; i++) {
      const dl_param *p = m->params[i];
      const char *c;
      for (c = p->name; *c; c++) h = (int64_t)(((uint64_t)h ^ (unsigned char)*c) * 1099511628211ULL);
      for (k = 0; k < p->t.ndim; k++) h = (int64_t)(((uint64_t)h ^ (uint64_t)p->t.shape[k]) * 1099511628211ULL);
      h = (int64_t)(((uint64_t)h ^ (uint64_t)p->kind) * 1099511628211ULL);
    }
    h &= 0x7fffffffffffffffLL;
    v[0] = m->pnumel;
    v[1] = m->nparams;
    v[2] = m->dtype;
    v[3] = dd->nsparse;
    v[4] = h;
    for (k = 0; k < 5; k++) v[5 + k] = -v[k];
    if ((s = dl__dist_allreduce(dd, v, 10, MPI_INT64_T, MPI_MIN, "dl_dist_attach")) != DL_OK) return s;
    if (v[0] != -v[5] || v[1] != -v[6] || v[2] != -v[7] || v[3] != -v[8] || v[4] != -v[9])
      return dl_fail(dd->ctx, DL_ERR_SHAPE,
                     "dl_dist_attach: the ranks built different models (rank %d: %lld packed elements, %d tensors, "
                     "%s; over the ranks: %lld..%lld elements, %lld..%lld tensors%s): every rank must build the same one",
                     dd->rank, (long long)m->pnumel, m->nparams, dl_dtype_name(m->dtype), (long long)v[0],
                     (long long)-v[5], (long long)v[1], (long long)-v[6],
                     v[4] != -v[9] ? ", names or shapes differ" : "");
  }
  return dl_dist_bcast_model(dd, m);
#else
  return DL_OK;
#endif
}

/* >>gradient exchange ----------------------------------------------------- */

#ifdef DL_USE_MPI
DL_API void dl__dist_start(dl_dist *dd, int b) {
  dl__dist_bucket *k = &dd->bucket[b];
  dl_model *m = dd->model;
  size_t es = dl_dtype_size(m->dtype);
  int rc;
  if (dd->status != DL_OK) return;
  rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)m->gbuf + (size_t)k->start * es, (int)(k->end - k->start),
                      dl__dist_mpi_type(m->dtype), MPI_SUM, dd->comm, &dd->req[b]);
  if (rc != MPI_SUCCESS) {
    dd->status = dl__dist_mpi_fail(dd, rc, "dl_dist: gradient all-reduce");
    return;
  }
}

/* The tape's per-node hook during an overlapped backward walk: start, in
 * the fixed order, every bucket whose parameters are all final, and let MPI
 * progress the ones in flight. */
DL_API void dl__dist_on_node(dl_tape *tp, dl_node *n, void *user) {
  dl_dist *dd = (dl_dist *)user;
  int flag;
  (void)tp;
  (void)n;
  while (dd->next >= 0 && dd->bucket[dd->next].last <= dd->visit) dl__dist_start(dd, dd->next--);
  dd->visit++;
  if (dd->next < dd->nbucket - 1 && dd->status == DL_OK)
    MPI_Testall(dd->nbucket - 1 - dd->next, dd->req + dd->next + 1, &flag, MPI_STATUSES_IGNORE);
}
#endif

/* Make the sparse gradient s the merged one: for each rank in order, its
 * nnz[r] rows (rows[], concatenated) and their values (vals[], rows of
 * s->width); the sum over ranks of each row, times `scale`. Rows appear
 * in the order of their first appearance over the ranks in order. Pure
 * local work (the exchange gathered the inputs); exposed for tests. */
DL_API void dl_dist_merge_rows(dl_sgrad *s, int world, const int64_t *nnz, const int64_t *rows, const void *vals,
                               double scale) {
  size_t es = dl_dtype_size(s->dtype), rowb = es * (size_t)s->width;
  int64_t at = 0, j, k;
  int r;
  dl_sgrad_clear(s);
  for (r = 0; r < world; r++)
    for (j = 0; j < nnz[r]; j++, at++) {
      void *dst = dl_sgrad_row(s, rows[at]);
      const void *src = (const char *)vals + rowb * (size_t)at;
      if (s->dtype == DL_F32)
        for (k = 0; k < s->width; k++) ((float *)dst)[k] += ((const float *)src)[k];
      else
        for (k = 0; k < s->width; k++) ((double *)dst)[k] += ((const double *)src)[k];
    }
  if (scale != 1) dl__scale(s->ctx, s->values, s->nnz * s->width, s->dtype, scale);
}

#ifdef DL_USE_MPI
DL_API void *dl__dist_scratch(dl_dist *dd, size_t bytes) {
  if (bytes <= dd->sbuf_bytes) return dd->sbuf;
  dl_free(dd->ctx, dd->sbuf);
  dd->sbuf = dl_alloc(dd->ctx, bytes);
  dd->sbuf_bytes = dd->sbuf ? bytes : 0;
  return dd->sbuf;
}

/* The row-sparse parameters: gathered rows, or dense when any rank has a
 * dense gradient for one. */
DL_API dl_status dl__dist_sparse(dl_dist *dd) {
  dl_model *m = dd->model;
  size_t es = dl_dtype_size(m->dtype);
  dl_status s;
  int i, r, rc;
  for (i = 0; i < dd->nsparse; i++) dd->sdense[i] = (m->params[dd->sparse[i]]->t.flags & DL_TENSOR_DENSE_GRAD) != 0;
  if ((s = dl__dist_allreduce(dd, dd->sdense, dd->nsparse, MPI_INT, MPI_MAX, "dl_dist: sparse gradients")) != DL_OK)
    return s;
  for (i = 0; i < dd->nsparse; i++) {
    dl_param *p = m->params[dd->sparse[i]];
    dl_sgrad *sg = (dl_sgrad *)p->t.sgrad;
    if (dd->sdense[i]) { /* tied: the whole dense gradient on every rank */
      int64_t at, cnt;
      p->t.flags |= DL_TENSOR_DENSE_GRAD;
      dl__param_sparse_now(p); /* folds this rank's rows into the dense gradient */
      for (at = 0; at < p->g.numel; at += cnt) {
        cnt = p->g.numel - at < ((int64_t)1 << 30) ? p->g.numel - at : ((int64_t)1 << 30);
        if ((s = dl__dist_allreduce(dd, (char *)p->g.data + (size_t)at * es, (int)cnt, dl__dist_mpi_type(m->dtype),
                                    MPI_SUM, "dl_dist: gradient all-reduce")) != DL_OK)
          return s;
      }
      dl__scale(m->ctx, p->g.data, p->g.numel, m->dtype, 1.0 / dd->world);
    } else { /* gather the touched rows */
      int64_t width = p->t.shape[1], total = 0, mine = sg ? sg->nnz : 0;
      int64_t *nnz, *rows;
      int *cnt, *disp;
      char *vals;
      size_t need;
      MPI_Request rq[2];
      MPI_Datatype rowt;
      nnz = dd->nnz;
      cnt = dd->cnt;
      disp = dd->disp;
      nnz[dd->rank] = mine;
      if ((rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, nnz, 1, MPI_INT64_T, dd->comm, &rq[0])) != MPI_SUCCESS)
        return dl__dist_mpi_fail(dd, rc, "dl_dist: sparse gradients");
      if ((s = dl__dist_wait(dd, 1, rq, "dl_dist: sparse gradients")) != DL_OK) return s;
      for (r = 0; r < dd->world; r++) total += nnz[r];
      if (total > INT32_MAX)
        return dl_fail(dd->ctx, DL_ERR_OVERFLOW, "dl_dist: %lld sparse rows of %s in one step", (long long)total, p->name);
      if (total == 0) continue;
      /* scratch: the rows, then their values */
      need = sizeof(int64_t) * (size_t)total + es * (size_t)width * (size_t)total + 64;
      if (!dl__dist_scratch(dd, need)) return dl_fail(dd->ctx, DL_ERR_NOMEM, "dl_dist: sparse gradients: out of memory (%zu bytes)", need);
      rows = (int64_t *)dd->sbuf;
      vals = (char *)(((uintptr_t)(rows + total) + 63) & ~(uintptr_t)63);
      for (r = 0, total = 0; r < dd->world; r++) {
        cnt[r] = (int)nnz[r];
        disp[r] = (int)total;
        total += nnz[r];
      }
      if (mine) {
        memcpy(rows + disp[dd->rank], sg->rows, sizeof(int64_t) * (size_t)mine);
        memcpy(vals + es * (size_t)width * (size_t)disp[dd->rank], sg->values, es * (size_t)width * (size_t)mine);
      }
      if ((rc = MPI_Type_contiguous((int)width, dl__dist_mpi_type(m->dtype), &rowt)) != MPI_SUCCESS ||
          (rc = MPI_Type_commit(&rowt)) != MPI_SUCCESS)
        return dl__dist_mpi_fail(dd, rc, "dl_dist: sparse gradients");
      rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rows, cnt, disp, MPI_INT64_T, dd->comm, &rq[0]);
      if (rc == MPI_SUCCESS)
        rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, vals, cnt, disp, rowt, dd->comm, &rq[1]);
      if (rc != MPI_SUCCESS) {
        MPI_Type_free(&rowt);
        return dl__dist_mpi_fail(dd, rc, "dl_dist: sparse gradients");
      }
      s = dl__dist_wait(dd, 2, rq, "dl_dist: sparse gradients");
      MPI_Type_free(&rowt);
      if (s != DL_OK) return s;
      if (!sg && !(sg = dl_sgrad_attach(&p->t)))
        return dl_fail(dd->ctx, DL_ERR_NOMEM, "dl_dist: sparse gradient of %s: out of memory (%zu bytes)", p->name,
                       (size_t)p->t.shape[0] * sizeof(int64_t));
      dl_dist_merge_rows(sg, dd->world, nnz, rows, vals, 1.0 / dd->world);
    }
  }
  return DL_OK;
}

/* Start every bucket not started yet (in order), exchange the sparse
 * gradients, wait for the buckets and average them. */
DL_API dl_status dl__dist_finish(dl_dist *dd) {
  dl_model *m = dd->model;
  dl_status s;
  int b;
  while (dd->next >= 0) dl__dist_start(dd, dd->next--);
  if (dd->status != DL_OK) return dd->status;
  if (dd->nsparse && (s = dl__dist_sparse(dd)) != DL_OK) return s;
  if (dd->nbucket && (s = dl__dist_wait(dd, dd->nbucket, dd->req, "dl_dist: gradient all-reduce")) != DL_OK) return s;
  for (b = 0; b < dd->nbucket; b++)
    dl__scale(m->ctx, (char *)m->gbuf + (size_t)dd->bucket[b].start * dl_dtype_size(m->dtype),
              dd->bucket[b].end - dd->bucket[b].start, m->dtype, 1.0 / dd->world);
  return DL_OK;
}

DL_API void dl__dist_reset(dl_dist *dd) {
  int b;
  dd->status = DL_OK;
  dd->next = dd->nbucket - 1;
  dd->visit = 0;
  for (b = 0; b < dd->nbucket; b++) {
    dd->bucket[b].last = INT64_MAX;
    dd->req[b] = MPI_REQUEST_NULL;
  }
}
#endif /* DL_USE_MPI */

DL_API dl_status dl__dist_need(dl_dist *dd, const char *op) {
  if (!dd->model) return dl_fail(dd->ctx, DL_ERR_ARG, "%s: no model attached (dl_dist_attach)", op);
  return DL_OK;
}

/* Average the gradients of the attached model across the ranks: after your
 * own backward pass(es), before clipping. Every rank must call it, the
 * same number of times. DL_OK or DL_ERR_COMM (a rank died or hung: end the
 * program with dl_dist_finalize(dd, 1)). */
DL_API dl_status dl_dist_allreduce_grads(dl_dist *dd) {
  if (!dd || dd->world <= 1) return DL_OK;
  if (dl__dist_need(dd, "dl_dist_allreduce_grads") != DL_OK) return DL_ERR_ARG;
#ifdef DL_USE_MPI
  dl__dist_reset(dd);
  return dl__dist_finish(dd);
#else
  return DL_OK;
#endif
}

/* dl_backward(tp, loss, NULL) and the gradient exchange, overlapped unless
 * desc.no_overlap: buckets start as the walk leaves their parameters
 * behind. */
DL_API dl_status dl_dist_backward(dl_dist *dd, dl_tape *tp, dl_tensor *loss) {
  if (!dd || dd->world <= 1) {
    dl_backward(tp, loss, NULL);
    return DL_OK;
  }
  if (dl__dist_need(dd, "dl_dist_backward") != DL_OK) return DL_ERR_ARG;
#ifdef DL_USE_MPI
  dl__dist_reset(dd);
  if (!dd->desc.no_overlap && dd->nbucket > 0) {
    dl_node *n, *from = dl_tape_node_of(tp, loss);
    int64_t v = 0;
    int i, k, b;
    if (from) {
      /* the position after which each parameter is final: its last use in
       * the walk (a parameter the walk never meets is final at the end) */
      for (i = 0; i < dd->model->nparams; i++) dd->plast[i] = -1;
      for (n = from; n; n = n->prev, v++)
        for (k = 0; k < n->nin; k++) {
          int j = n->in[k] ? dl__dist_cmp_key(dd->key, dd->nkey, n->in[k]) : -1;
          if (j >= 0) dd->plast[dd->keyparam[j]] = v;
        }
      for (b = 0; b < dd->nbucket; b++) dd->bucket[b].last = -1;
      for (i = 0; i < dd->model->nparams; i++) {
        int64_t at = dd->plast[i] < 0 ? INT64_MAX : dd->plast[i];
        if (dd->pbucket[i] < 0) continue;
        for (b = dd->pbucket[i]; b < dd->pbucket_end[i]; b++)
          if (at > dd->bucket[b].last) dd->bucket[b].last = at;
      }
      tp->on_node = dl__dist_on_node;
      tp->on_node_user = dd;
    }
  }
  dl_backward(tp, loss, NULL);
  tp->on_node = NULL;
  tp->on_node_user = NULL;
  return dl__dist_finish(dd);
#else
  dl_backward(tp, loss, NULL);
  return DL_OK;
#endif
}

/* A checksum of each parameter (and buffer, unless desc.no_buffer_sync)
 * compared across the ranks: DL_OK when every rank holds the same bits,
 * DL_ERR_COMM naming up to 8 that differ otherwise. */
DL_API dl_status dl_dist_check(dl_dist *dd) {
  if (!dd || dd->world <= 1) return DL_OK;
  if (dl__dist_need(dd, "dl_dist_check") != DL_OK) return DL_ERR_ARG;
#ifdef DL_USE_MPI
  {
    dl_model *m = dd->model;
    int i, n = m->nparams, bad = 0;
    int64_t *h = (int64_t *)dl__dist_scratch(dd, sizeof(int64_t) * 2 * (size_t)(n + 1));
    char names[256];
    size_t at = 0;
    dl_status s;
    if (!h) return dl_fail(dd->ctx, DL_ERR_NOMEM, "dl_dist_check: out of memory (%zu bytes)", sizeof(int64_t) * 2 * (size_t)(n + 1));
    for (i = 0; i < n; i++) {
      const dl_param *p = m->params[i];
      uint64_t x = 1469598103934665603ULL;
      size_t bytes = (size_t)p->t.numel * dl_dtype_size(p->t.dtype), j;
      const unsigned char *d = (const unsigned char *)p->t.data;
      if (p->kind == DL_PARAM_BUFFER && dd->desc.no_buffer_sync) bytes = 0;
      for (j = 0; j + 8 <= bytes; j += 8) {
        uint64_t w;
        memcpy(&w, d + j, 8);
        x = (x ^ w) * 0x100000001b3ULL;
        x ^= x >> 29;
      }
      for (; j < bytes; j++) x = (x ^ d[j]) * 0x100000001b3ULL;
      h[i] = (int64_t)(x >> 1);
      h[n + i] = -h[i];
    }
    if ((s = dl__dist_allreduce(dd, h, 2 * n, MPI_INT64_T, MPI_MIN, "dl_dist_check")) != DL_OK) return s;
    names[0] = 0;
    for (i = 0; i < n; i++)
      if (h[i] != -h[n + i]) {
        if (bad < 8 && at < sizeof names)
          at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", bad ? ", " : "", m->params[i]->name);
        bad++;
      }
    if (bad)
      return dl_fail(dd->ctx, DL_ERR_COMM,
                     "dl_dist_check (rank %d of %d, after %lld steps): %d tensors differ across the ranks: %s%s "
                     "(a step without dl_dist_train_step / dl_dist_allreduce_grads, or rank-dependent updates)",
                     dd->rank, dd->world, (long long)dd->steps, bad, names, bad > 8 ? ", ..." : "");
  }
#endif
  return DL_OK;
}

/* dl_train_step across the ranks: backward with the gradient exchange
 * (dl_dist_backward), then clipping and regularisation on the averaged
 * gradients, the optimizer update, zeroed gradients, rank 0's buffers to
 * every rank and, every desc.check_every steps, dl_dist_check. *norm (may
 * be NULL) gets the global gradient norm dl_clip_grads returns; with norm
 * NULL it is computed only where clipping by norm needs it. dd NULL or a
 * single process: dl_train_step. */
DL_API dl_status dl__dist_train_step(dl_dist *dd, dl_optim *o, dl_tape *tp, dl_tensor *loss, const dl_step_desc *d,
                                     double *norm) {
  dl_model *m = o->model;
  dl_status s;
  double nm;
  if (!dd || dd->world <= 1) { /* dl_train_step; no norm computed when none is wanted (on the GPU: no wait) */
    dl_backward(tp, loss, NULL);
    nm = dl__apply_grads(o, d, norm != NULL);
    if (norm) *norm = nm;
    if (dd) dd->steps++;
    return DL_OK;
  }
  if (dd->model != m)
    return dl_fail(dd->ctx, DL_ERR_ARG, "dl_dist_train_step: the optimizer's model is not the attached one (dl_dist_attach)");
  if ((s = dl_dist_backward(dd, tp, loss)) != DL_OK) return s;
  nm = dl__apply_grads(o, d, norm != NULL);
  if (norm) *norm = nm;
  dd->steps++;
  if (!dd->desc.no_buffer_sync && (s = dl__dist_bcast_buffers(dd, m)) != DL_OK) return s;
  if (dd->desc.check_every > 0 && dd->steps % dd->desc.check_every == 0) return dl_dist_check(dd);
  return DL_OK;
}
/* Out of memory in the backward pass or the clipping (an op's, see core.h's
 * dl_ctx_on_nomem) returns DL_ERR_NOMEM, the message in the tape's ctx (the
 * model's for the clipping when they differ); in one process the gradients
 * are zeroed and the parameters and the optimizer untouched. Over several
 * ranks the gradient exchange was left half done (all-reduces in flight,
 * the other ranks waiting in theirs): the job cannot go on, end it
 * (dl_dist_finalize with a non-zero status aborts it). */
typedef struct dl__dist_step_args {
  dl_dist *dd;
  dl_optim *o;
  dl_tape *tp;
  dl_tensor *loss;
  const dl_step_desc *d;
  double *norm;
  dl_status s;
} dl__dist_step_args;
DL_API void dl__dist_step_call(void *arg) {
  dl__dist_step_args *a = (dl__dist_step_args *)arg;
  a->s = dl__dist_train_step(a->dd, a->o, a->tp, a->loss, a->d, a->norm);
}
DL_API void dl__dist_step_model_guard(void *arg) { /* the model's ctx too, when it is not the tape's */
  dl__dist_step_args *a = (dl__dist_step_args *)arg;
  if (dl_nomem_guard(a->o->model->ctx, dl__dist_step_call, a) != DL_OK) a->s = DL_ERR_NOMEM;
}
/* dl_train_step over the ranks: the backward pass with the gradient
 * all-reduce, then clipping, regularisation, the update and zeroing on the
 * averaged gradient; *norm (NULL: not wanted) gets the global gradient
 * norm. DL_OK, or DL_ERR_COMM / DL_ERR_NOMEM (see above). Without
 * DL_USE_MPI it is dl_train_step. */
DL_API dl_status dl_dist_train_step(dl_dist *dd, dl_optim *o, dl_tape *tp, dl_tensor *loss, const dl_step_desc *d,
                                    double *norm) {
  dl__dist_step_args a = {dd, o, tp, loss, d, norm, DL_OK};
  dl_ctx *const mc = o->model->ctx != tp->ctx ? o->model->ctx : NULL;
  jmp_buf *const mprev = mc ? mc->nomem : NULL; /* a jump to the tape's point skips the inner guard's restore */
  if (dl_nomem_guard(tp->ctx, mc ? dl__dist_step_model_guard : dl__dist_step_call, &a) != DL_OK) a.s = DL_ERR_NOMEM;
  if (mc) mc->nomem = mprev;
  if (a.s == DL_ERR_NOMEM) {
    tp->on_node = NULL; /* the exchange's hook, when backward stopped inside dl_dist_backward */
    tp->on_node_user = NULL;
    if (!dd || dd->world <= 1) dl_model_zero_grad(o->model); /* over ranks in-flight all-reduces own them */
  }
  return a.s;
}

/* >>evaluate (one process: dl_evaluate; over the ranks: dl_dist_evaluate) --------- */

/* Run the classifier m over one whole epoch of b (which should not shuffle)
 * in evaluation mode, recording nothing on tp (rewound after each batch;
 * give an empty tape): mean cross-entropy into *loss, accuracy into *acc,
 * and the predictions into cm (NULL: none; not reset here). The model's
 * training mode is restored afterwards. */
DL_API void dl__evaluate_sums(dl_model *m, dl_tape *tp, dl_batcher *b, double *v, dl_confusion *cm) {
  int was = m->training;
  dl_batch bt;
  v[0] = v[1] = v[2] = 0; /* loss sum, samples, correct */
  dl_model_train(m, 0);
  dl_no_grad_begin(tp);
  dl_batcher_set_epoch(b, 0);
  while (dl_batcher_next(b, &bt)) {
    dl_tensor *logits = dl_model_forward(m, tp, dl_tape_input(tp, bt.x)), *hl;
    dl_tensor *l = dl_t_cross_entropy(tp, logits, bt.y, 0, DL_REDUCE_SUM); /* host labels, any tape */
    v[0] += dl_item(l);
    hl = dl_tape_host(tp, logits); /* on a device tape: the logits, copied back */
    v[2] += (double)dl_accuracy_count(hl, bt.y);
    if (cm) dl_confusion_add(cm, hl, bt.y);
    v[1] += (double)bt.size;
    dl_tape_rewind(tp);
  }
  dl_no_grad_end(tp);
  dl_model_train(m, was);
}
/* dl_dist_evaluate for one process (see above): no status, it cannot fail
 * short of a panic. */
DL_API void dl_evaluate(dl_model *m, dl_tape *tp, dl_batcher *b, double *loss, double *acc, dl_confusion *cm) {
  double v[3];
  dl__evaluate_sums(m, tp, b, v, cm);
  if (loss) *loss = v[1] > 0 ? v[0] / v[1] : (double)NAN;
  if (acc) *acc = v[1] > 0 ? v[2] / v[1] : (double)NAN;
}

typedef struct dl__eval_args {
  dl_model *m;
  dl_tape *tp;
  dl_batcher *b;
  double *v;
  dl_confusion *cm;
} dl__eval_args;
DL_API void dl__eval_call(void *arg) {
  dl__eval_args *a = (dl__eval_args *)arg;
  dl__evaluate_sums(a->m, a->tp, a->b, a->v, a->cm);
}
/* dl_evaluate over the ranks: each evaluates its own shard (give b a
 * shuffler with .world, .rank and .pad = 2: every sample once over the
 * ranks), then the sums are exchanged; every rank gets the same loss,
 * accuracy and confusion matrix (cm: the whole set's counts are added to
 * it). dd NULL: dl_evaluate. DL_OK, the exchange's failure, or DL_ERR_NOMEM
 * when an op runs out of memory (core.h's dl_ctx_on_nomem): the model's mode,
 * the tape (rewound) and cm as they were before the call, *loss and *acc
 * not written (over several ranks the others then wait in the exchange:
 * end the job). */
DL_API dl_status dl_dist_evaluate(dl_dist *dd, dl_model *m, dl_tape *tp, dl_batcher *b, double *loss, double *acc,
                                  dl_confusion *cm) {
  double v[3];
  dl_status s;
  int64_t *before = NULL, k, n = 0;
  const int was = m->training, no_grad = tp->no_grad;
  dl__eval_args ea = {m, tp, b, v, cm};
  if (cm) { /* only this evaluation's counts travel; kept to undo a failed one */
    n = cm->matrix->numel;
    before = (int64_t *)dl_alloc(tp->ctx, sizeof(int64_t) * (size_t)n);
    if (!before) return dl_fail(tp->ctx, DL_ERR_NOMEM, "dl_dist_evaluate: out of memory (%zu bytes)", sizeof(int64_t) * (size_t)n);
    for (k = 0; k < n; k++) before[k] = dl_i64(cm->matrix)[k];
    dl_tensor_fill(cm->matrix, 0);
  }
  if (dl_nomem_guard(tp->ctx, dl__eval_call, &ea) != DL_OK) { /* an op ran out: the model, tape, matrix as they were */
    dl_tape_rewind(tp);
    tp->no_grad = no_grad;
    dl_model_train(m, was);
    if (cm) {
      for (k = 0; k < n; k++) dl_i64(cm->matrix)[k] = before[k];
      dl_free(tp->ctx, before);
    }
    return DL_ERR_NOMEM;
  }
  s = dd && dd->world > 1 ? dl_dist_sum(dd, v, 3) : DL_OK;
  if (s == DL_OK && cm && dd && dd->world > 1) s = dl_dist_sum_i64(dd, dl_i64(cm->matrix), n);
  if (cm) {
    for (k = 0; k < n; k++) dl_i64(cm->matrix)[k] += before[k];
    dl_free(tp->ctx, before);
  }
  if (s != DL_OK) return s;
  if (loss) *loss = v[1] > 0 ? v[0] / v[1] : (double)NAN;
  if (acc) *acc = v[1] > 0 ? v[2] / v[1] : (double)NAN;
  return DL_OK;
}


#endif /* !DL__SCALAR_ONLY */

DL__HEADER_END
#endif /* DL_DIST_H */
