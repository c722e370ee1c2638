/* dl/run.h - what every training program repeats: its command-line flags,
 * loading weights or resuming a checkpoint, a checkpoint after every epoch,
 * the per-epoch history (CSV log and PNG chart), the evaluation of a
 * classifier and one machine-readable result line at the end.
 *
 *   dl_train_opts o = {.epochs = 10, .batch = 64, .lr = 1e-3, .seed = 1};
 *   dl_flag fl[DL_TRAIN_NFLAGS + 1];
 *   int nf = dl_train_flags(&o, fl);              // --epochs --batch --lr ...
 *   fl[nf++] = (dl_flag){"hidden", DL_FLAG_I64, &hidden, 1, 4096, "hidden units", "N"};
 *   if (dl_flags_main(&ctx, argc, argv, fl, nf, NULL, 0, NULL, "train an MLP") != DL_OK)
 *     return 2;                                   // message printed; --help exits 0 there
 *   dl_train_paths paths;                       // --save/--csv/--chart not given: runs/mlp/mlp.*
 *   if (dl_train_default_outputs(&ctx, &o, "mlp", &paths, stdout, 1) != DL_OK) ...
 *   ... model m, optimizer o, training batcher b ...
 *   dl_run r;
 *   if (dl_run_begin(&r, &ctx, &(dl_run_desc){.opts = &o, .model = m, .optim = opt,
 *                                             .batcher = &b, .steps_per_epoch = nb}) != DL_OK)
 *     return fprintf(stderr, "%s\n", dl_ctx_message(&ctx)), 1;   // --load / --resume failed
 *   while (dl_run_next_epoch(&r)) {             // from the resumed epoch to --epochs
 *     while (dl_batcher_next(&b, &batch)) {
 *       ... logits, loss = forward;
 *       dl_run_step_async(&r, batch.size, loss, logits, batch.y);  // or dl_run_step with numbers
 *       dl_train_step_nowait(opt, &tp, loss, &sd); dl_tape_rewind(&tp);
 *     }
 *     dl_run_flush(&r);                         // on the GPU: the last step counted
 *     dl_evaluate(m, &tp, &test_batcher, &vl, &va, NULL);
 *     if (dl_run_end_epoch(&r, vl, va) != DL_OK) return ..., 1;   // checkpoint, CSV, chart
 *   }
 *   dl_run_finish(&r);                          // --save: the weights
 *   dl_run_result(&r, stdout, va, "test_loss=%.4f", vl);
 *   dl_run_free(&r);
 *
 * >>flags   dl_flag describes one flag: --name VALUE or --name=VALUE;
 *   integers (int64) and numbers (double) must parse whole and lie in
 *   [min, max] (min == max == 0: any; numbers must be finite), strings are
 *   taken as given, switches take no value. An unknown flag, a missing or
 *   malformed value, or a positional argument where none is expected is
 *   DL_ERR_ARG with a message that names the flag and the value.
 *   dl_flags_usage prints every flag with its help and current (default)
 *   value.
 * >>train   dl_train_opts holds the standard flags of a training program:
 *     --epochs N --batch N --lr X --seed N --threads N   (threads 0: OpenMP's default)
 *     --save FILE (weights, safetensors) --load FILE (weights to start from)
 *     --eval (evaluate the loaded model, no training) --checkpoint FILE
 *     (the whole training state, written atomically after every epoch)
 *     --resume FILE (continue from such a checkpoint up to --epochs)
 *     --stop-after N (end the process after N epochs as if interrupted:
 *     schedules still plan for --epochs) --csv FILE (per-epoch log) --chart FILE (PNG of the curves; needs
 *     DL_USE_STB_IMAGE_WRITE) --data DIR --subset N (the first N training
 *     samples only) --deterministic (on the GPU: the same bits on every run)
 *     --quiet (no progress line) --help
 *   dl_train_flags fills DL_TRAIN_NFLAGS descriptors pointing into the
 *   opts (the caller sets defaults first); dl_train_opts_check rejects
 *   contradictions (--eval without --load/--resume, --load with --resume).
 * >>run     dl_run drives the epochs. begin: --load reads weights (by
 *   PyTorch name; a report of what did not match in the message), --resume
 *   restores the model, optimizer, RNGs, the batcher's shuffle position,
 *   the epoch and step counters, the history and the caller's own values
 *   (desc.values); from there training continues bit for bit as if never
 *   interrupted. Before it loads anything, a resume checks the run's values
 *   in the checkpoint (ranges, step = epoch x steps per epoch) and compares
 *   the settings: another batch size, data size or seed is refused with
 *   the flag named; another --lr, --epochs or optimizer weight decay (an
 *   example's --wd) is applied with a "note:" line saying what changed
 *   from what. end_epoch appends to the history (an f64 tensor saved in
 *   the checkpoint, so a resumed run's log and chart are whole), rewrites
 *   the CSV log from it, redraws the chart and writes the checkpoint
 *   (atomic: a crash leaves the previous one). Throughput is training
 *   samples over the seconds spent between next_epoch and the last step of
 *   each epoch in this process (evaluation excluded); wall_s is this
 *   process's time since dl_run_begin.
 * Evaluation (dl_evaluate runs a classifier over a batcher's whole epoch in
 *   evaluation mode with no tape recorded: mean cross-entropy, accuracy,
 *   and optionally a confusion matrix; dl_dist_evaluate over the ranks) is
 *   dist.h's, >>evaluate.
 *
 * Not available with DL_NO_STDIO (it prints and writes files).
 */
#ifndef DL_RUN_H
#define DL_RUN_H

#include "report.h"
#include "data.h"
#include "io.h"
#include "dist.h"
#include "gpu.h" /* --device: dl_train_device, models and batches on the GPU */
DL__HEADER_BEGIN

#if !defined(DL__SCALAR_ONLY) && !defined(DL_NO_STDIO)

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* >>flags ----------------------------------------------------------------------- */

/* The value type of a command-line flag (dl_flag). */
typedef enum dl_flag_kind {
  DL_FLAG_I64 = 1,  /* value: int64_t * */
  DL_FLAG_F64,      /* value: double * */
  DL_FLAG_STR,      /* value: const char ** (points into argv) */
  DL_FLAG_SWITCH    /* value: int *, set to 1 by the flag's presence */
} dl_flag_kind;

/* One command-line flag: its name, type, where its value goes and its help
 * text. */
typedef struct dl_flag {
  const char *name;   /* without the dashes: "epochs" */
  dl_flag_kind kind; /* the value's type */
  void *value; /* where the value goes (int64_t *, double *, const char ** or int *, by kind) */
  double min, max;    /* numeric range, inclusive; both 0: any (finite) value */
  const char *help; /* one line for --help */
  const char *meta;   /* the value's name in the usage ("N", "FILE"); NULL: from the kind */
} dl_flag;

DL_API const dl_flag *dl__flag_find(const dl_flag *flags, int n, const char *name, size_t len) {
  int i;
  for (i = 0; i < n; i++)
    if (strlen(flags[i].name) == len && memcmp(flags[i].name, name, len) == 0) return &flags[i];
  return NULL;
}

DL_API dl_status dl__flag_set(dl_ctx *ctx, const dl_flag *f, const char *v) {
  char *end = NULL;
  int bounded = !(f->min == 0 && f->max == 0);
  if (f->kind == DL_FLAG_STR) {
    if (!*v) return dl_fail(ctx, DL_ERR_ARG, "--%s: the value is empty", f->name);
    *(const char **)f->value = v;
    return DL_OK;
  }
  errno = 0;
  if (f->kind == DL_FLAG_I64) {
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno == ERANGE)
      return dl_fail(ctx, DL_ERR_ARG, "--%s: '%.100s' is not an integer", f->name, v);
    if (bounded && ((double)x < f->min || (double)x > f->max))
      return dl_fail(ctx, DL_ERR_ARG, "--%s: %lld is outside [%.17g, %.17g]", f->name, x, f->min, f->max);
    *(int64_t *)f->value = (int64_t)x;
    return DL_OK;
  }
  if (f->kind == DL_FLAG_F64) {
    double x = strtod(v, &end);
    if (!*v || *end || errno == ERANGE || x != x || x - x != 0)
      return dl_fail(ctx, DL_ERR_ARG, "--%s: '%.100s' is not a finite number", f->name, v);
    if (bounded && (x < f->min || x > f->max))
      return dl_fail(ctx, DL_ERR_ARG, "--%s: %.17g is outside [%.17g, %.17g]", f->name, x, f->min, f->max);
    *(double *)f->value = x;
    return DL_OK;
  }
  return dl_fail(ctx, DL_ERR_ARG, "--%s: unknown flag kind %d", f->name, (int)f->kind);
}

/* Parse argv[1..argc). Positional arguments (and everything after "--")
 * go to pos[0..maxpos) with their count in *npos (pos may be NULL when
 * none are accepted). DL_OK or DL_ERR_ARG (message in ctx). */
DL_API dl_status dl_flags_parse(dl_ctx *ctx, int argc, char **argv, const dl_flag *flags, int nflags, char **pos,
                                int maxpos, int *npos) {
  int i, np = 0, rest = 0;
  if (npos) *npos = 0;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *name, *eq, *v;
    const dl_flag *f;
    size_t len;
    dl_status s;
    if (rest || a[0] != '-' || a[1] != '-' || a[2] == 0) {
      if (!rest && a[0] == '-' && a[1] == '-' && a[2] == 0) {
        rest = 1;
        continue;
      }
      if (!rest && a[0] == '-' && a[1] != 0)
        return dl_fail(ctx, DL_ERR_ARG, "'%.100s': flags are spelled --name (see --help)", a);
      if (!pos || np >= maxpos)
        return dl_fail(ctx, DL_ERR_ARG, "'%.100s': unexpected argument (%s; see --help)", a,
                       maxpos ? "too many" : "this program takes only flags");
      pos[np++] = argv[i];
      continue;
    }
    name = a + 2;
    eq = strchr(name, '=');
    len = eq ? (size_t)(eq - name) : strlen(name);
    f = dl__flag_find(flags, nflags, name, len);
    if (!f) return dl_fail(ctx, DL_ERR_ARG, "unknown flag --%.*s (see --help)", (int)(len > 100 ? 100 : len), name);
    if (f->kind == DL_FLAG_SWITCH) {
      if (eq) return dl_fail(ctx, DL_ERR_ARG, "--%s takes no value", f->name);
      *(int *)f->value = 1;
      continue;
    }
    if (eq)
      v = eq + 1;
    else if (i + 1 < argc)
      v = argv[++i];
    else
      return dl_fail(ctx, DL_ERR_ARG, "--%s needs a value", f->name);
    if ((s = dl__flag_set(ctx, f, v)) != DL_OK) return s;
  }
  if (npos) *npos = np;
  return DL_OK;
}

/* Every flag with its help and current value (the defaults, before parsing). */
DL_API void dl_flags_usage(FILE *out, const char *prog, const char *what, const dl_flag *flags, int nflags,
                           const char *positional) {
  int i;
  fprintf(out, "usage: %s [flags]%s%s\n", prog ? prog : "prog", positional ? " " : "", positional ? positional : "");
  if (what) fprintf(out, "%s\n", what);
  for (i = 0; i < nflags; i++) {
    const dl_flag *f = &flags[i];
    char left[64], def[96];
    const char *meta = f->meta ? f->meta : f->kind == DL_FLAG_I64 ? "N" : f->kind == DL_FLAG_F64 ? "X" : "S";
    def[0] = 0;
    if (f->kind == DL_FLAG_SWITCH)
      snprintf(left, sizeof left, "--%s", f->name);
    else
      snprintf(left, sizeof left, "--%s %s", f->name, meta);
    if (f->kind == DL_FLAG_I64) snprintf(def, sizeof def, " (default %lld)", (long long)*(int64_t *)f->value);
    if (f->kind == DL_FLAG_F64) snprintf(def, sizeof def, " (default %g)", *(double *)f->value);
    if (f->kind == DL_FLAG_STR && *(const char **)f->value)
      snprintf(def, sizeof def, " (default %.80s)", *(const char **)f->value);
    fprintf(out, "  %-22s %s%s\n", left, f->help ? f->help : "", def);
  }
}

/* Parse, the way a program's main wants it: --help (a switch named "help"
 * in flags) prints the usage to stdout and exits 0; an error prints
 * "prog: message" to stderr and returns DL_ERR_ARG. */
DL_API dl_status dl_flags_main(dl_ctx *ctx, int argc, char **argv, const dl_flag *flags, int nflags, char **pos,
                               int maxpos, int *npos, const char *what) {
  const char *prog = argc > 0 && argv[0] ? argv[0] : "prog";
  const dl_flag *help = dl__flag_find(flags, nflags, "help", 4);
  int i;
  /* --help wins over any error elsewhere on the line */
  for (i = 1; i < argc && help; i++) {
    if (strcmp(argv[i], "--") == 0) break;
    if (strcmp(argv[i], "--help") == 0) {
      dl_flags_usage(stdout, prog, what, flags, nflags, maxpos ? "FILE..." : NULL);
      exit(0);
    }
  }
  if (dl_flags_parse(ctx, argc, argv, flags, nflags, pos, maxpos, npos) != DL_OK) {
    fprintf(stderr, "%s: %s\n", prog, dl_ctx_message(ctx));
    return DL_ERR_ARG;
  }
  return DL_OK;
}

/* >>train ------------------------------------------------------------------------ */

/* The standard flags' values (--epochs --batch --lr --seed ...):
 * dl_train_flags points flags at them. */
typedef struct dl_train_opts {
  int64_t epochs, batch, seed, threads, subset, stop_after; /* --epochs --batch --seed --threads --subset --stop-after */
  double lr; /* --lr */
  const char *save, *load, *checkpoint, *resume, *csv, *chart, *data; /* --save --load --checkpoint --resume --csv --chart --data (NULL: not given) */
  const char *device; /* "cpu" (NULL too) or "cuda" / "cuda:N": see dl_train_device */
  int eval, quiet, help; /* --eval --quiet --help given */
  int deterministic; /* --deterministic: the GPU's deterministic algorithms (dl_gpu_set_deterministic) */
  int no_graphs;     /* --no-graphs: on the GPU, each step's work issued call by call (no dl_gpu_graph_begin) */
} dl_train_opts;

/* How many flags dl_train_flags fills in. */
#define DL_TRAIN_NFLAGS 20

DL_API void dl__flag_def(dl_flag *f, const char *name, dl_flag_kind kind, void *value, double min, double max,
                         const char *help, const char *meta) {
  f->name = name;
  f->kind = kind;
  f->value = value;
  f->min = min;
  f->max = max;
  f->help = help;
  f->meta = meta;
}

/* Fill out[0..DL_TRAIN_NFLAGS) with the standard flags, pointing into o;
 * returns DL_TRAIN_NFLAGS. */
DL_API int dl_train_flags(dl_train_opts *o, dl_flag *out) {
  int n = 0;
  dl__flag_def(&out[n++], "epochs", DL_FLAG_I64, &o->epochs, 0, 100000, "epochs to train (a resumed run: up to this epoch)", "N");
  dl__flag_def(&out[n++], "batch", DL_FLAG_I64, &o->batch, 1, 1 << 20, "mini-batch size", "N");
  dl__flag_def(&out[n++], "lr", DL_FLAG_F64, &o->lr, 0, 1e6, "learning rate", "X");
  dl__flag_def(&out[n++], "seed", DL_FLAG_I64, &o->seed, 0, 9007199254740992.0, "seed of the initialisation, data order and dropout", "N");
  dl__flag_def(&out[n++], "threads", DL_FLAG_I64, &o->threads, 0, 4096, "threads (0: OpenMP's default)", "N");
  dl__flag_def(&out[n++], "save", DL_FLAG_STR, (void *)&o->save, 0, 0, "write the trained weights here (safetensors)", "FILE");
  dl__flag_def(&out[n++], "load", DL_FLAG_STR, (void *)&o->load, 0, 0, "start from these weights (safetensors)", "FILE");
  dl__flag_def(&out[n++], "eval", DL_FLAG_SWITCH, &o->eval, 0, 0, "only evaluate the model given by --load", NULL);
  dl__flag_def(&out[n++], "checkpoint", DL_FLAG_STR, (void *)&o->checkpoint, 0, 0, "write the whole training state here after every epoch", "FILE");
  dl__flag_def(&out[n++], "resume", DL_FLAG_STR, (void *)&o->resume, 0, 0, "continue training from this checkpoint", "FILE");
  dl__flag_def(&out[n++], "csv", DL_FLAG_STR, (void *)&o->csv, 0, 0, "per-epoch log (CSV)", "FILE");
  dl__flag_def(&out[n++], "chart", DL_FLAG_STR, (void *)&o->chart, 0, 0, "loss and accuracy curves (PNG)", "FILE");
  dl__flag_def(&out[n++], "data", DL_FLAG_STR, (void *)&o->data, 0, 0, "where the data set is", "DIR");
  dl__flag_def(&out[n++], "stop-after", DL_FLAG_I64, &o->stop_after, 0, 100000,
                       "end this process after N epochs, as if interrupted (resume with --resume; 0: never)", "N");
  dl__flag_def(&out[n++], "subset", DL_FLAG_I64, &o->subset, 0, 1e15, "train on the first N samples only (0: all)", "N");
  dl__flag_def(&out[n++], "device", DL_FLAG_STR, (void *)&o->device, 0, 0,
                       "cpu, or cuda[:N] to train on GPU N (a build with DL_USE_CUDA, see dl/gpu.h)", "DEV");
  dl__flag_def(&out[n++], "deterministic", DL_FLAG_SWITCH, &o->deterministic, 0, 0,
                       "on the GPU, algorithms that give the same bits on every run (the CPU always does)", NULL);
  dl__flag_def(&out[n++], "no-graphs", DL_FLAG_SWITCH, &o->no_graphs, 0, 0,
                       "on the GPU, issue each step's work call by call instead of replaying CUDA graphs (the same bits)",
                       NULL);
  dl__flag_def(&out[n++], "quiet", DL_FLAG_SWITCH, &o->quiet, 0, 0, "no progress line", NULL);
  dl__flag_def(&out[n++], "help", DL_FLAG_SWITCH, &o->help, 0, 0, "this list", NULL);
  return n;
}

/* Contradictions between the standard flags: DL_OK or DL_ERR_ARG. */
DL_API dl_status dl_train_opts_check(dl_ctx *ctx, const dl_train_opts *o) {
  if (o->load && o->resume)
    return dl_fail(ctx, DL_ERR_ARG, "--load and --resume: give one (a checkpoint holds the weights too)");
  if (o->eval && !o->load && !o->resume)
    return dl_fail(ctx, DL_ERR_ARG, "--eval evaluates a trained model: give it with --load FILE");
  if (o->eval && o->checkpoint) return dl_fail(ctx, DL_ERR_ARG, "--eval trains nothing: --checkpoint makes no sense");
  if (o->device && strcmp(o->device, "cpu") != 0) {
    if (strncmp(o->device, "cuda", 4) != 0 || (o->device[4] && (o->device[4] != ':' || !isdigit((unsigned char)o->device[5]))))
      return dl_fail(ctx, DL_ERR_ARG, "--device %.100s: cpu, cuda or cuda:N", o->device);
    if (o->load || o->resume || o->checkpoint)
      return dl_fail(ctx, DL_ERR_UNSUPPORTED, "--device %.100s with --load, --resume or --checkpoint: "
                     "reading and writing training state from the GPU is not implemented yet; train on the "
                     "CPU for those (--save works: the weights come back to the host at the end)", o->device);
  }
#ifndef DL_USE_STB_IMAGE_WRITE
  if (o->chart)
    return dl_fail(ctx, DL_ERR_UNSUPPORTED, "--chart %.200s: this program was built without PNG output "
                   "(define DL_USE_STB_IMAGE_WRITE; Debian: apt-get install libstb-dev)", o->chart);
#endif
  return DL_OK;
}

/* Where a program writes what the user did not name. */
typedef struct dl_train_paths {
  char dir[256];                      /* runs/NAME */
  char save[320], csv[320], chart[320]; /* where the weights, the CSV log and the chart go */
} dl_train_paths;

/* Default outputs: a training program writes files only where it is told,
 * and by default into a folder of its own, never into the current one.
 * For each of --save, --csv and --chart (the chart with
 * DL_USE_STB_IMAGE_WRITE) that the user did not give, o's field is pointed
 * at runs/NAME/NAME.safetensors, .csv, .png in paths (the caller's, which
 * must outlive o's use); with --eval nothing is written and nothing
 * changes. On the rank that writes (root != 0) the folder is made (runs/,
 * then runs/NAME/) and one line says so on out:
 *   outputs: runs/NAME/ (weights, CSV log, chart; --save/--csv/--chart put them elsewhere)
 * DL_OK, or DL_ERR_ARG (a name that is not a plain file name) / DL_ERR_IO
 * (the folder cannot be made: the message names it and why). */
DL_API dl_status dl_train_default_outputs(dl_ctx *ctx, dl_train_opts *o, const char *name, dl_train_paths *paths,
                                          FILE *out, int root) {
  int used = 0;
  if (!name || !*name || strchr(name, '/') || strlen(name) > 100 || !strcmp(name, ".") || !strcmp(name, ".."))
    return dl_fail(ctx, DL_ERR_ARG, "dl_train_default_outputs: '%.100s' is not a plain name", name ? name : "(null)");
  memset(paths, 0, sizeof *paths);
  if (o->eval) return DL_OK;
  snprintf(paths->dir, sizeof paths->dir, "runs/%s", name);
  if (!o->save) snprintf(paths->save, sizeof paths->save, "%s/%s.safetensors", paths->dir, name), o->save = paths->save, used = 1;
  if (!o->csv) snprintf(paths->csv, sizeof paths->csv, "%s/%s.csv", paths->dir, name), o->csv = paths->csv, used = 1;
#ifdef DL_USE_STB_IMAGE_WRITE
  if (!o->chart) snprintf(paths->chart, sizeof paths->chart, "%s/%s.png", paths->dir, name), o->chart = paths->chart, used = 1;
#endif
  if (!used || !root) return DL_OK;
#ifdef DL__HAVE_DIRENT
  {
    struct stat sb;
    if ((mkdir("runs", 0777) != 0 && errno != EEXIST) || (mkdir(paths->dir, 0777) != 0 && errno != EEXIST))
      return dl_fail(ctx, DL_ERR_IO, "cannot make the output folder %s: %s (--save, --csv and --chart choose other "
                     "places)", paths->dir, strerror(errno));
    if (stat(paths->dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return dl_fail(ctx, DL_ERR_IO, "the output folder %s is not a folder (--save, --csv and --chart choose other "
                     "places)", paths->dir);
  }
#endif
  fprintf(out ? out : stdout, "outputs: %s/ (weights, CSV log%s; --save/--csv/--chart put them elsewhere)\n",
          paths->dir,
#ifdef DL_USE_STB_IMAGE_WRITE
          ", chart"
#else
          ""
#endif
  );
  return DL_OK;
}

/* --device: NULL or "cpu": *gpu = NULL and nothing moves. "cuda" or
 * "cuda:N": opens GPU N on ctx (gpu.h) and moves model m there; call it
 * before making the optimizer (whose state is then made on the device) and
 * give the tape to dl_tape_use_gpu. DL_OK, or DL_ERR_NO_DEVICE (no GPU, a
 * build without DL_USE_CUDA) / DL_ERR_NOMEM with the message in ctx. */
DL_API dl_status dl_train_device(dl_ctx *ctx, const dl_train_opts *o, dl_model *m, dl_gpu **gpu) {
  dl_status s;
  int dev = 0;
  *gpu = NULL;
  if (!o->device || strcmp(o->device, "cpu") == 0) return DL_OK;
  if (strncmp(o->device, "cuda", 4) != 0 ||
      (o->device[4] && (o->device[4] != ':' || !isdigit((unsigned char)o->device[5]))))
    return dl_fail(ctx, DL_ERR_ARG, "--device %.100s: cpu, cuda or cuda:N", o->device);
  if (o->device[4] == ':') dev = atoi(o->device + 5);
  if ((s = dl_gpu_open(gpu, ctx, dev)) != DL_OK) return s;
  dl_gpu_set_deterministic(*gpu, o->deterministic);
  if ((s = dl_model_to_device(m, *gpu)) != DL_OK) {
    dl_gpu_close(*gpu);
    *gpu = NULL;
  }
  return s;
}

/* The next batch of a training loop whose steps are recorded for CUDA
 * graphs on g (dl_gpu_graph_begin first; g NULL, a CPU run or --no-graphs:
 * dl_batcher_next alone): 1 with *out filled (end the step with
 * dl_gpu_graph_end), 0 when the epoch is over, -1 when the device failed
 * (the message in its ctx).
 *   while ((k = dl_train_next(graphs, &tb, &b)) > 0) {
 *     ... forward, loss, dl_run_step_async, dl_train_step_nowait ...
 *     if (dl_gpu_graph_end(graphs) != DL_OK) break;
 *     dl_tape_rewind(&tp);
 *   } */
DL_API int dl_train_next(dl_gpu *g, dl_batcher *b, dl_batch *out) {
  if (dl_gpu_graph_begin(g) != DL_OK) return -1;
  if (dl_batcher_next(b, out)) return 1;
  return dl_gpu_graph_end(g) == DL_OK ? 0 : -1; /* the empty recording of the batcher's last call */
}

/* One line on f: what the device was asked per step, c the sum over
 * `steps` steps (dl_gpu_counts_add): "device calls per training step: ..."
 * (kernel launches, GEMMs, CUDA graph launches and captures, copies,
 * fills, host waits, cudaMalloc). Nothing for steps <= 0. */
DL_API void dl_gpu_counts_print(FILE *f, const dl_gpu_counts *c, int64_t steps) {
  const double k = (double)steps;
  if (steps <= 0) return;
  fprintf(f, "device calls per training step: %.1f launches, %.1f GEMMs, %.2f graph launches (%.3f captured), "
          "%.1f copies, %.1f fills, %.3f host waits, %.3f cudaMalloc\n", (double)c->launches / k,
          (double)c->blas / k, (double)c->graph_launches / k, (double)c->graph_builds / k, (double)c->copies / k,
          (double)c->memsets / k, (double)c->syncs / k, (double)c->mallocs / k);
}

/* >>run ------------------------------------------------------------------------------- */

/* The most epochs a history holds (later ones are trained and checkpointed
 * but not logged). */
#ifndef DL_RUN_MAX_EPOCHS
#define DL_RUN_MAX_EPOCHS 1000
#endif
#define DL_RUN_MAX_VALUES 36 /* the run's own 13 and the program's */

/* dl_run_desc:
 *   opts             the parsed standard flags (borrowed)
 *   model, optim     what is trained (optim may be NULL for --eval-only programs)
 *   batcher          the training batcher: its shuffle position is checkpointed
 *                    (NULL: the program keeps its own order in desc.values)
 *   steps_per_epoch  for the progress line's percentage and ETA (and a resume's
 *                    check that the settings did not change)
 *   values, nvalues  the program's own numbers or tensors to checkpoint
 *                    (at most DL_RUN_MAX_VALUES - 13)
 *   title            the chart's title; NULL: none
 *   val_name         the legend's name of the evaluation curve; NULL: "test"
 *   out              progress and summary lines; NULL: stdout
 *   dist             the ranks of a data-parallel run (dist.h); NULL: one
 *                    process. Then every rank calls every dl_run function;
 *                    the epoch's loss, accuracy and samples are summed over
 *                    the ranks; only rank 0 prints, writes the CSV, chart,
 *                    checkpoint and weights (and every rank gets its write's
 *                    status); a failed --load / --resume on any rank fails
 *                    on every rank; the checkpoint records the number of
 *                    ranks and resumes only on as many. While an epoch runs,
 *                    rank 0's progress line shows its own mini-batches. */
typedef struct dl_run_desc {
  const dl_train_opts *opts; /* the parsed standard flags (borrowed) */
  dl_model *model; /* what is trained */
  dl_optim *optim; /* its optimizer (NULL for evaluation-only programs) */
  dl_batcher *batcher; /* the training batcher, whose position is checkpointed (NULL: none) */
  int64_t steps_per_epoch; /* for the progress line and a resume's checks */
  const dl_named_value *values; /* the program's own numbers or tensors to checkpoint */
  int nvalues; /* how many */
  const char *title, *val_name; /* the chart's title; the evaluation curve's name (NULL: "test") */
  FILE *out; /* progress and summary lines; NULL: stdout */
  dl_dist *dist; /* the ranks of a data-parallel run; NULL: one process */
} dl_run_desc;

/* A training program's run (dl_run_begin): its options, history, progress
 * line, CSV log, chart and checkpoints. dl_run_free. */
typedef struct dl_run {
  dl_run_desc desc; /* as given */
  dl_ctx *ctx; /* allocator and error reports */
  int64_t epoch;          /* epochs finished (a resumed run starts at the checkpoint's) */
  int64_t step;           /* optimizer steps so far, all processes */
  int64_t first_epoch;    /* the epoch this process started from */
  int64_t samples;        /* training samples this process trained on */
  double train_s;         /* this process's seconds in training (evaluation excluded) */
  double t0;              /* clock at dl_run_begin */
  double wall_before;     /* wall seconds of the processes before a resume */
  int in_epoch; /* 1 between dl_run_next_epoch and dl_run_end_epoch */
  dl_progress pg; /* the progress line */
  dl_tensor *hist;        /* f64 [DL_EPOCH_STATS_COLUMNS, DL_RUN_MAX_EPOCHS]: one column per epoch */
  int64_t shuffle[3];     /* the batcher's seed, epoch, position */
  int64_t world;          /* ranks (checkpointed as run/world when > 1) */
  int64_t cfg[4];         /* this run's batch size per rank, data size, steps per epoch, --epochs */
  double cfg_lr;          /* this run's --lr (all five checkpointed as run/...) */
  double cfg_wd;          /* its optimizer's weight decay (run/weight_decay; 0 without one) */
  dl_named_value vals[DL_RUN_MAX_VALUES]; /* what the checkpoint holds: the run's numbers and the program's */
  int nvals; /* how many */
  dl_load_report report;  /* what --load / --resume found wrong, name by name */
  struct dl__run_dev *dev; /* dl_run_step_async on the GPU: the step waiting to be counted (NULL: none yet) */
} dl_run;

DL_API double *dl__run_col(const dl_run *r, int c) { return dl_f64(r->hist) + (size_t)c * DL_RUN_MAX_EPOCHS; }

/* The named values a checkpoint of this run holds: ours, then the caller's. */
DL_API void dl__run_values(dl_run *r) {
  int i, n = 0;
  dl__nv_set(&r->vals[n++], "run/epoch", &r->epoch, NULL, NULL);
  dl__nv_set(&r->vals[n++], "run/step", &r->step, NULL, NULL);
  dl__nv_set(&r->vals[n++], "run/history", NULL, NULL, r->hist);
  dl__nv_set(&r->vals[n++], "run/wall_s", NULL, &r->wall_before, NULL);
  dl__nv_set(&r->vals[n++], "run/steps_per_epoch", &r->cfg[2], NULL, NULL);
  dl__nv_set(&r->vals[n++], "run/epochs", &r->cfg[3], NULL, NULL);
  dl__nv_set(&r->vals[n++], "run/lr", NULL, &r->cfg_lr, NULL);
  dl__nv_set(&r->vals[n++], "run/weight_decay", NULL, &r->cfg_wd, NULL);
  if (r->desc.batcher) {
    dl__nv_set(&r->vals[n++], "run/batch_size", &r->cfg[0], NULL, NULL);
    dl__nv_set(&r->vals[n++], "run/data_size", &r->cfg[1], NULL, NULL);
    dl__nv_set(&r->vals[n++], "run/shuffle_seed", &r->shuffle[0], NULL, NULL);
    dl__nv_set(&r->vals[n++], "run/shuffle_epoch", &r->shuffle[1], NULL, NULL);
    dl__nv_set(&r->vals[n++], "run/shuffle_pos", &r->shuffle[2], NULL, NULL);
  }
  if (r->world > 1) dl__nv_set(&r->vals[n++], "run/world", &r->world, NULL, NULL);
  for (i = 0; i < r->desc.nvalues; i++) r->vals[n++] = r->desc.values[i];
  r->nvals = n;
}

/* dl_run_step_async's state on the GPU: the metrics of the last step,
 * computed there and on their way to page-locked memory (two slots, used
 * in turn, so that a step's copy never overwrites the one being read). */
typedef struct dl__run_dev {
  dl_gpu *gpu;
  unsigned char *pin; /* page-locked: per slot, the loss's bytes (8) then the count (int64) */
  int64_t *dcount;    /* device: one count per slot */
  void *ev[2];        /* recorded after each slot's copies */
  int64_t *lab;       /* host labels widened to int64 */
  int64_t labcap;
  int slot, pending, counted;
  int64_t psamples;
  dl_dtype pdtype;
} dl__run_dev;

DL_API void dl__run_dev_free(dl_run *r) {
  dl__run_dev *d = r->dev;
  if (!d) return;
#ifdef DL_USE_CUDA
  if (d->gpu) {
    dlg_handle *h = dl__gpu_handle(d->gpu);
    (void)dl_gpu_sync(d->gpu);
    dlg_event_free(h, d->ev[0]);
    dlg_event_free(h, d->ev[1]);
    dlg_host_free(h, d->pin);
    if (d->dcount) dl_gpu_free(d->gpu, d->dcount);
  }
#endif
  dl_free(r->ctx, d->lab);
  dl_free(r->ctx, d);
  r->dev = NULL;
}

/* Release what the run holds (its log, history, buffers); NULL is fine. */
DL_API void dl_run_free(dl_run *r) {
  if (!r) return;
  dl__run_dev_free(r);
  dl_tensor_free(r->hist);
  r->hist = NULL;
}

/* This run's settings, as a checkpoint records them (run/batch_size, ...). */
DL_API void dl__run_settings(dl_run *r) {
  const dl_batcher *b = r->desc.batcher;
  r->cfg[0] = b ? b->batch_size : 0;
  r->cfg[1] = b ? b->shuf.n : 0;
  r->cfg[2] = r->desc.steps_per_epoch;
  r->cfg[3] = r->desc.opts->epochs;
  r->cfg_lr = r->desc.opts->lr;
  r->cfg_wd = r->desc.optim ? dl_optim_weight_decay(r->desc.optim) : 0;
}

/* A 0-d I64 or F64 value of an open checkpoint: 1 and *i / *d (both set),
 * or 0 when the key is absent or not such a number. */
DL_API int dl__run_peek(const dl_safetensors *st, const char *key, int64_t *i, double *d) {
  const dl_st_tensor *e = dl_safetensors_find(st, key);
  dl_tensor tmp;
  *i = 0;
  *d = 0;
  if (!e || e->ndim != 0 || (e->dtype != DL_I64 && e->dtype != DL_F64)) return 0;
  dl_tensor_wrap(&tmp, st->ctx, e->dtype, 0, NULL, e->dtype == DL_I64 ? (void *)i : (void *)d);
  if (dl_safetensors_read(st, e, &tmp, 0) != DL_OK) return 0;
  if (e->dtype == DL_I64) *d = (double)*i;
  else *i = (*d >= -9.2e18 && *d <= 9.2e18) ? (int64_t)*d : 0;
  return 1;
}

/* --resume, before anything is loaded: the run's values in the checkpoint
 * are range-checked (an epoch outside the history, a negative step, ...)
 * and compared with this run. What cannot be honoured is refused, naming
 * the setting: another number of ranks, another batch size or steps per
 * epoch (--batch), another data set size (--subset, --data), another data
 * order (--seed). What can
 * is applied, with a note on out: --lr, --epochs and the optimizer's weight
 * decay (the program's schedule follows them from the checkpoint's step on). Keys a checkpoint
 * lacks are left to the strict load, which names them. */
DL_API dl_status dl__run_check_resume(dl_run *r, const char *path) {
  static const struct { const char *key; double lo, hi; } range[] = {
      {"extra/run/epoch", 0, DL__IO_MAX_COUNT},    {"extra/run/step", 0, DL__IO_MAX_COUNT},
      {"extra/run/wall_s", 0, DBL_MAX},            {"extra/run/shuffle_epoch", 0, DL__IO_MAX_COUNT},
      {"extra/run/shuffle_pos", 0, DL__IO_MAX_COUNT}, {"extra/run/world", 1, 1 << 30},
      {"extra/run/batch_size", 1, DL__IO_MAX_COUNT}, {"extra/run/data_size", 0, DL__IO_MAX_COUNT},
      {"extra/run/steps_per_epoch", 0, DL__IO_MAX_COUNT}, {"extra/run/epochs", 0, DL__IO_MAX_COUNT},
      {"extra/run/lr", 0, DBL_MAX}, {"extra/run/weight_decay", 0, DBL_MAX}};
  const dl_train_opts *o = r->desc.opts;
  const dl_batcher *b = r->desc.batcher;
  dl_ctx *ctx = r->ctx;
  dl_safetensors st;
  dl_status s = DL_OK;
  int64_t iv, epoch, step, spe, have_epoch, have_step, have_spe;
  double dv;
  size_t k;
  if ((s = dl_safetensors_open(&st, ctx, path)) != DL_OK) return s;
  for (k = 0; k < sizeof range / sizeof range[0] && s == DL_OK; k++)
    if (dl__run_peek(&st, range[k].key, &iv, &dv) && !(dv >= range[k].lo && dv <= range[k].hi)) {
      const dl_st_tensor *e = dl_safetensors_find(&st, range[k].key);
      char val[64];
      if (e->dtype == DL_I64) snprintf(val, sizeof val, "%lld", (long long)iv);
      else snprintf(val, sizeof val, "%.17g", dv);
      s = dl_fail(ctx, DL_ERR_FORMAT, "'%s' is %s, outside %.17g .. %.17g: not a checkpoint a run can continue",
                  range[k].key + 6, val, range[k].lo, range[k].hi);
    }
  have_epoch = dl__run_peek(&st, "extra/run/epoch", &epoch, &dv);
  have_step = dl__run_peek(&st, "extra/run/step", &step, &dv);
  have_spe = dl__run_peek(&st, "extra/run/steps_per_epoch", &spe, &dv);
  /* step = epoch x steps per epoch (checkpoints are written at epochs' ends); compared by division, which
   * cannot overflow; a program that gives no steps per epoch (0: unknown) is not checked */
  if (s == DL_OK && have_epoch && have_step && have_spe && spe > 0 && (step % spe != 0 || step / spe != epoch))
    s = dl_fail(ctx, DL_ERR_FORMAT, "'run/step' is %lld, but 'run/epoch' %lld x 'run/steps_per_epoch' %lld is not: "
                "the checkpoint contradicts itself", (long long)step, (long long)epoch, (long long)spe);
  if (s == DL_OK) { /* the number of ranks first: a batch size per rank only compares on as many */
    int64_t was = dl__run_peek(&st, "extra/run/world", &iv, &dv) ? iv : 1;
    if (was != r->world)
      s = dl_fail(ctx, DL_ERR_ARG, "written by %lld ranks, this run has %lld: resume on %lld", (long long)was,
                  (long long)r->world, (long long)was);
  }
  if (s == DL_OK && b && dl__run_peek(&st, "extra/run/batch_size", &iv, &dv) && iv != b->batch_size)
    s = dl_fail(ctx, DL_ERR_ARG, "it was trained with batches of %lld%s, this run has %lld (--batch): resume with the "
                "batch size it was trained with", (long long)iv, r->world > 1 ? " per rank" : "", (long long)b->batch_size);
  if (s == DL_OK && b && dl__run_peek(&st, "extra/run/data_size", &iv, &dv) && iv != b->shuf.n)
    s = dl_fail(ctx, DL_ERR_ARG, "it was trained on %lld samples, this run has %lld (--subset or --data): resume on the "
                "same data", (long long)iv, (long long)b->shuf.n);
  if (s == DL_OK && b && dl__run_peek(&st, "extra/run/shuffle_pos", &iv, &dv) && iv > b->shuf.per_rank)
    s = dl_fail(ctx, DL_ERR_FORMAT, "'run/shuffle_pos' is %lld, past the %lld samples of an epoch on this rank",
                (long long)iv, (long long)b->shuf.per_rank);
  if (s == DL_OK && b && dl__run_peek(&st, "extra/run/shuffle_seed", &iv, &dv) && (uint64_t)iv != b->shuf.seed)
    s = dl_fail(ctx, DL_ERR_ARG, "its data order has seed %llu, this run's %llu (--seed): resume with --seed %llu",
                (unsigned long long)(uint64_t)iv, (unsigned long long)b->shuf.seed, (unsigned long long)(uint64_t)iv);
  if (s == DL_OK && have_spe && spe != r->desc.steps_per_epoch)
    s = dl_fail(ctx, DL_ERR_ARG, "it was trained with %lld steps per epoch, this run has %lld (--batch or the data): "
                "resume with the settings it was trained with", (long long)spe, (long long)r->desc.steps_per_epoch);
  if (s == DL_OK && dl_dist_is_root(r->desc.dist)) { /* applied, with a note of what changed and from what */
    FILE *out = r->desc.out ? r->desc.out : stdout;
    if (dl__run_peek(&st, "extra/run/lr", &iv, &dv) && dv != o->lr)
      fprintf(out, "note: --resume %.200s: --lr %.6g (the checkpoint's run had %.6g) applies from step %lld on (the "
              "optimizer's lr scaled by %.6g)\n", path, o->lr, dv, (long long)(have_step ? step : 0),
              dv > 0 ? o->lr / dv : 1.0);
    if (dl__run_peek(&st, "extra/run/epochs", &iv, &dv) && iv != o->epochs)
      fprintf(out, "note: --resume %.200s: --epochs %lld (the checkpoint's run had %lld)%s\n", path, (long long)o->epochs,
              (long long)iv, have_epoch && o->epochs <= epoch ? ": nothing left to train" : "");
    if (r->desc.optim && dl__run_peek(&st, "extra/run/weight_decay", &iv, &dv) &&
        dv != dl_optim_weight_decay(r->desc.optim))
      fprintf(out, "note: --resume %.200s: weight decay %.6g (the checkpoint's run had %.6g) applies from step %lld on\n",
              path, dl_optim_weight_decay(r->desc.optim), dv, (long long)(have_step ? step : 0));
  }
  dl_safetensors_free(&st);
  return s;
}

/* --load or --resume on this rank. */
DL_API dl_status dl__run_load(dl_run *r) {
  const dl_train_opts *o = r->desc.opts;
  dl_ctx *ctx = r->ctx;
  int64_t world = r->world;
  dl_status s;
  if (o->load) {
    s = dl_model_load(r->desc.model, o->load, &r->report);
    if (s != DL_OK) {
      char msg[sizeof ctx->message];
      snprintf(msg, sizeof msg, "%s", dl_ctx_message(ctx));
      return dl_fail(ctx, s, "--load %.200s: %s", o->load, msg);
    }
  }
  if (o->resume) {
    s = dl__run_check_resume(r, o->resume);
    if (s != DL_OK) {
      char msg[sizeof ctx->message];
      snprintf(msg, sizeof msg, "%s", dl_ctx_message(ctx));
      return dl_fail(ctx, s, "--resume %.200s: %s; nothing was loaded", o->resume, msg);
    }
    s = dl_checkpoint_load(r->desc.model, r->desc.optim, o->resume, r->vals, r->nvals, &r->report);
    if (s == DL_OK && r->desc.optim && r->cfg_lr != o->lr) {
      /* another --lr: the optimizer's lr (the schedule's value at the checkpoint) scaled by new / old, so
       * that it applies to programs that never set the lr themselves too */
      dl_optim *opt = r->desc.optim;
      dl_optim_set_lr(opt, r->cfg_lr > 0 ? dl_optim_lr(opt) * (o->lr / r->cfg_lr) : o->lr);
    }
    dl__run_settings(r); /* the checkpoint's settings were checked above; this run's apply from here */
    if (s != DL_OK) {
      char msg[sizeof ctx->message];
      snprintf(msg, sizeof msg, "%s", dl_ctx_message(ctx));
      return dl_fail(ctx, s, "--resume %.200s: %s%s", o->resume, msg,
                     strstr(r->report.text, "run/world") ? " (the checkpoint was written by a different number of "
                                                           "ranks: resume on as many as wrote it)" : "");
    }
    if (r->world != world) {
      int64_t was = r->world;
      r->world = world;
      return dl_fail(ctx, DL_ERR_ARG, "--resume %.200s: written by %lld ranks, this run has %lld: resume on %lld",
                     o->resume, (long long)was, (long long)world, (long long)was);
    }
    if (r->desc.batcher) {
      dl_shuffler_state st = dl_batcher_get_state(r->desc.batcher);
      st.seed = r->shuffle[0];
      st.epoch = r->shuffle[1];
      st.pos = r->shuffle[2];
      if ((s = dl_batcher_restore(r->desc.batcher, &st)) != DL_OK) {
        char msg[sizeof ctx->message];
        snprintf(msg, sizeof msg, "%s", dl_ctx_message(ctx));
        return dl_fail(ctx, s, "--resume %.200s: the data order does not fit this run: %s", o->resume, msg);
      }
    }
  }
  return DL_OK;
}

/* Set up the run; --load or --resume are applied here. DL_OK, or the
 * load's status with a message naming the file, and r->report.text listing
 * every tensor that did not match (nothing is changed then; print both
 * with dl_run_print_error). */
DL_API dl_status dl_run_begin(dl_run *r, dl_ctx *ctx, const dl_run_desc *desc) {
  const dl_train_opts *o = desc->opts;
  dl_status s;
  int i;
  memset(r, 0, sizeof *r);
  r->desc = *desc;
  r->ctx = ctx;
  if (!desc->opts || !desc->model) return dl_fail(ctx, DL_ERR_ARG, "dl_run_begin: opts and model are required");
  if (desc->nvalues < 0 || desc->nvalues > DL_RUN_MAX_VALUES - 13)
    return dl_fail(ctx, DL_ERR_ARG, "dl_run_begin: %d values (at most %d)", desc->nvalues, DL_RUN_MAX_VALUES - 13);
  if ((s = dl_train_opts_check(ctx, o)) != DL_OK) return s;
  r->hist = dl_tensor_make(ctx, DL_F64, DL_SHAPE(DL_EPOCH_STATS_COLUMNS, DL_RUN_MAX_EPOCHS));
  if (!r->hist) return DL_ERR_NOMEM;
  for (i = 0; i < DL_EPOCH_STATS_COLUMNS * DL_RUN_MAX_EPOCHS; i++) dl_f64(r->hist)[i] = (double)NAN;
  if (desc->batcher) {
    dl_shuffler_state st = dl_batcher_get_state(desc->batcher);
    r->shuffle[0] = st.seed;
    r->shuffle[1] = st.epoch;
    r->shuffle[2] = st.pos;
  }
  r->world = desc->dist ? desc->dist->world : 1;
  dl__run_settings(r);
  dl__run_values(r);
  s = dl__run_load(r);
  if (r->world > 1) s = dl_dist_agree(desc->dist, s);
  if (s != DL_OK) return s;
  r->first_epoch = r->epoch;
  {
    int quiet = o->quiet || !dl_dist_is_root(desc->dist); /* only rank 0 shows progress */
    dl_progress_desc pd;
    memset(&pd, 0, sizeof pd);
    pd.stream = desc->out ? desc->out : stdout;
    pd.epochs = o->epochs;
    pd.steps = desc->steps_per_epoch;
    pd.mode = quiet ? DL_PROGRESS_LINES : DL_PROGRESS_AUTO;
    pd.every_frac = quiet ? -1 : 0;
    pd.every_s = quiet ? -1 : 0;
    dl_progress_init(&r->pg, &pd);
  }
  r->t0 = dl_clock_monotonic(NULL);
  return DL_OK;
}

/* The error of a failed dl_run_begin, and the load report behind it. */
DL_API void dl_run_print_error(const dl_run *r, FILE *f, const char *prog) {
  if (r->desc.dist && r->desc.dist->agreed && !dl_dist_is_root(r->desc.dist)) return; /* rank 0 says it */
  fprintf(f, "%s: %s\n", prog ? prog : "error", dl_ctx_message(r->ctx));
  if (r->report.text[0]) fprintf(f, "%s", r->report.text);
}

/* Start the next epoch: 1 while r->epoch < --epochs (and not --eval, and
 * fewer than --stop-after epochs in this process), else 0. */
DL_API int dl_run_next_epoch(dl_run *r) {
  const dl_train_opts *o = r->desc.opts;
  if (o->eval || r->epoch >= o->epochs) return 0;
  if (o->stop_after > 0 && r->epoch - r->first_epoch >= o->stop_after) return 0;
  r->in_epoch = 1;
  dl_progress_begin(&r->pg, r->epoch + 1);
  return 1;
}

/* One optimizer step of the current epoch: its samples, its loss and (for
 * a classifier; < 0: none) how many it got right. */
DL_API void dl__run_progress(dl_run *r, int64_t samples, double loss, int64_t correct);
/* Record one optimizer step of the current epoch (see above) and update the
 * progress line. */
DL_API void dl_run_step(dl_run *r, int64_t samples, double loss, int64_t correct) {
  r->step++;
  r->samples += samples;
  dl__run_progress(r, samples, loss, correct);
}
/* The progress line's part of dl_run_step (dl_run_step_async's late half). */
DL_API void dl__run_progress(dl_run *r, int64_t samples, double loss, int64_t correct) {
  if (correct >= 0)
    dl_progress_update_acc(&r->pg, samples, loss, correct);
  else
    dl_progress_update(&r->pg, samples, loss);
}

/* The GPU step dl_run_step_async left pending, counted now (its values
 * are on the host once the device reached its event). */
DL_API void dl__run_drain(dl_run *r);
/* After an epoch's last step, before evaluating: counts the step
 * dl_run_step_async left pending (waiting for the device to reach it), so
 * that the epoch's training time ends there. dl_run_end_epoch does it too
 * (but then the evaluation's time counts as training). Nothing to do on
 * the host. */
DL_API void dl_run_flush(dl_run *r) { dl__run_drain(r); }
DL_API void dl__run_drain(dl_run *r) {
#ifdef DL_USE_CUDA
  dl__run_dev *d = r->dev;
  if (d && d->pending) {
    const int s = d->slot ^ 1; /* the slot written last */
    const unsigned char *p = d->pin + 16 * s;
    double lv;
    int64_t c;
    if (dlg_event_wait(dl__gpu_handle(d->gpu), d->ev[s]) != DLG_OK)
      DL_PANIC(r->ctx, "dl_run_step_async", "on the GPU: %s", dlg_message(dl__gpu_handle(d->gpu)));
    if (d->pdtype == DL_F32) {
      float f;
      memcpy(&f, p, sizeof f);
      lv = f;
    } else memcpy(&lv, p, sizeof lv);
    memcpy(&c, p + 8, sizeof c);
    d->pending = 0;
    dl__run_progress(r, d->psamples, lv, d->counted ? c : -1);
  }
#else
  (void)r;
#endif
}

/* One optimizer step given by its tensors: loss (one element) and, for a
 * classifier, logits [N, C] and labels [N] (i64 / i32; logits NULL: no
 * accuracy). On the host: dl_run_step(r, samples, dl_item(loss),
 * dl_accuracy_count(logits, labels)) now. On the GPU nothing waits: the
 * count is computed there, loss and count are copied to page-locked memory
 * behind the step's work, and they reach the progress line one step later
 * (at the next call, or at dl_run_flush / dl_run_end_epoch; r->step counts
 * the step at once). So the host runs at most a step ahead of the device:
 * it waits there only when the device is the slower of the two, and a
 * training loop that reads nothing else never waits for anything else. Call it after the forward pass, before the tape is
 * rewound (the logits must still be there; labels the loss already
 * checked), and dl_run_flush after the epoch's last step. Out of memory or
 * a device failure panics (op named). */
DL_API void dl_run_step_async(dl_run *r, int64_t samples, const dl_tensor *loss, const dl_tensor *logits,
                              const dl_tensor *labels) {
#ifdef DL_USE_CUDA
  if (loss->device == DL_CUDA) {
    dl_gpu *g = loss->ctx->gpu;
    dlg_handle *h = dl__gpu_handle(g);
    dl__run_dev *d = r->dev;
    const int64_t *lh = NULL;
    const void *ldev = NULL;
    const char *op = "dl_run_step_async";
    int s;
    if (!d) {
      d = (dl__run_dev *)dl_alloc(r->ctx, sizeof *d);
      if (!d) DL_NOMEM(r->ctx, op, "%zu bytes of host memory", sizeof *d);
      memset(d, 0, sizeof *d);
      r->dev = d;
      d->gpu = g;
      if (dlg_host_alloc(h, (void **)&d->pin, 32) != DLG_OK)
        DL_NOMEM(r->ctx, op, "32 bytes of page-locked host memory: %s", dlg_message(h));
      if (dl_gpu_alloc(g, (void **)&d->dcount, 2 * sizeof(int64_t)) != DL_OK)
        DL_NOMEM(r->ctx, op, "16 bytes of device memory: %s", dl_ctx_message(r->ctx));
    }
    if (d->gpu != g) DL_PANIC(r->ctx, op, "the loss is on another device than this run's earlier steps");
    if (loss->numel != 1) DL_PANIC(r->ctx, op, "the loss %s is not one element", DL_SHAPESTR(loss));
    dl__run_drain(r); /* the step before (the device is usually past it: no wait) */
    s = d->slot;
    d->counted = logits != NULL;
    if (logits) {
      const int64_t N = logits->ndim == 2 ? logits->shape[0] : -1;
      if (logits->ndim != 2 || logits->device != DL_CUDA || !labels || labels->ndim != 1 || labels->shape[0] != N ||
          (labels->dtype != DL_I64 && labels->dtype != DL_I32) || (logits->dtype != DL_F32 && logits->dtype != DL_F64))
        DL_PANIC(r->ctx, op, "logits %s (f32/f64 [N, C] on the GPU) and labels %s (i64/i32 [N]) do not fit",
                 DL_SHAPESTR(logits), labels ? DL_SHAPESTR(labels) : "none");
      if (labels->device == DL_CUDA) ldev = labels->data;
      else if (labels->dtype == DL_I64 && labels->strides[0] == 1) lh = (const int64_t *)labels->data;
      else { /* widened to int64 in a buffer kept for the next steps */
        int64_t i;
        if (N > d->labcap) {
          int64_t *nl = (int64_t *)dl_alloc(r->ctx, (size_t)N * sizeof(int64_t));
          if (!nl) DL_NOMEM(r->ctx, op, "%lld labels", (long long)N);
          dl_free(r->ctx, d->lab);
          d->lab = nl;
          d->labcap = N;
        }
        for (i = 0; i < N; i++)
          d->lab[i] = labels->dtype == DL_I64 ? ((const int64_t *)labels->data)[i * labels->strides[0]]
                                              : (int64_t)((const int32_t *)labels->data)[i * labels->strides[0]];
        lh = d->lab;
      }
      dl__gpu_ok(logits, op,
                 dlg_argmax_hits(h, (int)logits->dtype, N, logits->shape[1], logits->data, logits->strides[0],
                                 logits->strides[1], lh, ldev, labels->dtype == DL_I64 ? DLG_I64 : DLG_I32,
                                 labels->strides[0], d->dcount + s));
      dl__gpu_ok(logits, op, dlg_copy_async(h, d->pin + 16 * s + 8, d->dcount + s, sizeof(int64_t), DLG_D2H));
    }
    dl__gpu_ok(loss, op, dlg_copy_async(h, d->pin + 16 * s, loss->data, dl_dtype_size(loss->dtype), DLG_D2H));
    dl__gpu_ok(loss, op, dlg_event_record(h, &d->ev[s]));
    d->pdtype = loss->dtype;
    d->psamples = samples;
    d->pending = 1;
    d->slot = s ^ 1;
    r->step++; /* counted now (a learning-rate schedule reads it); its values reach the progress a step later */
    r->samples += samples;
    return;
  }
#endif
  dl_run_step(r, samples, dl_item(loss), logits ? dl_accuracy_count(logits, labels) : -1);
}

/* Rewrite the CSV log from the history, atomically (dl_csv_save): a
 * resumed run's log is whole, an epoch logged twice (a crash between log
 * and checkpoint) cannot be, and a full disk or a kill leaves the previous
 * log whole. */
DL_API dl_status dl__run_csv(dl_run *r) {
  int64_t e, n = r->epoch < DL_RUN_MAX_EPOCHS ? r->epoch : DL_RUN_MAX_EPOCHS;
  double *rows = (double *)dl_alloc(r->ctx, (size_t)(n ? n : 1) * DL_EPOCH_STATS_COLUMNS * sizeof(double));
  dl_status s;
  int c;
  if (!rows) return r->ctx ? r->ctx->status : DL_ERR_NOMEM;
  for (e = 0; e < n; e++)
    for (c = 0; c < DL_EPOCH_STATS_COLUMNS; c++) rows[e * DL_EPOCH_STATS_COLUMNS + c] = dl__run_col(r, c)[e];
  {
    dl_csv_log_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.path = r->desc.opts->csv;
    s = dl_csv_save(r->ctx, &cd, rows, n);
  }
  dl_free(r->ctx, rows);
  return s;
}

/* The chart of the history so far (--chart). */
DL_API dl_status dl_run_chart(dl_run *r, const char *path) {
  int64_t n = r->epoch < DL_RUN_MAX_EPOCHS ? r->epoch : DL_RUN_MAX_EPOCHS;
  dl_chart_desc cd;
  if (n < 1) return DL_OK;
  memset(&cd, 0, sizeof cd);
  cd.n = n;
  cd.x = dl__run_col(r, 0);
  cd.train_loss = dl__run_col(r, 1);
  cd.train_acc = dl__run_col(r, 2);
  cd.val_loss = dl__run_col(r, 3);
  cd.val_acc = dl__run_col(r, 4);
  cd.title = r->desc.title;
  cd.val_name = r->desc.val_name ? r->desc.val_name : "test";
  return dl_chart_save_png(r->ctx, path, &cd);
}

/* The epoch's files (rank 0 only): CSV, chart, checkpoint. The log and
 * the chart are for people to look at: a failure there (a full disk, a
 * path that is not a regular file) is printed as a warning on out and the
 * run goes on, checkpoint included; only a checkpoint that cannot be
 * written fails the epoch. */
DL_API dl_status dl__run_write(dl_run *r, double now) {
  const dl_train_opts *o = r->desc.opts;
  FILE *out = r->desc.out ? r->desc.out : stdout;
  dl_status s;
  if (o->csv && dl__run_csv(r) != DL_OK)
    fprintf(out, "warning: --csv %.200s not written (training goes on): %s\n", o->csv, dl_ctx_message(r->ctx));
  if (o->chart && dl_run_chart(r, o->chart) != DL_OK)
    fprintf(out, "warning: --chart %.200s not written (training goes on): %s\n", o->chart, dl_ctx_message(r->ctx));
  if (o->checkpoint) {
    double wall = r->wall_before;
    if (r->desc.batcher) {
      dl_shuffler_state st = dl_batcher_get_state(r->desc.batcher);
      r->shuffle[0] = st.seed;
      r->shuffle[1] = st.epoch;
      r->shuffle[2] = st.pos;
    }
    r->wall_before = wall + (now - r->t0); /* saved as the wall time so far */
    s = dl_checkpoint_save(r->desc.model, r->desc.optim, o->checkpoint, r->vals, r->nvals, NULL);
    r->wall_before = wall;
    if (s != DL_OK) return s;
  }
  return DL_OK;
}

/* End the epoch with its evaluation (NaN: none): the summary line, the
 * history, the CSV log, the chart and the checkpoint. DL_OK, or the status
 * of a write that failed (the message names the file). */
DL_API dl_status dl_run_end_epoch(dl_run *r, double val_loss, double val_acc) {
  double now = dl_clock_monotonic(NULL), tl, ta;
  dl_status s;
  int64_t e;
  if (!r->in_epoch) return dl_fail(r->ctx, DL_ERR_ARG, "dl_run_end_epoch: no epoch was started (dl_run_next_epoch)");
  dl__run_drain(r); /* dl_run_step_async's last step */
  now = dl_clock_monotonic(NULL);
  r->in_epoch = 0;
  r->train_s += r->pg.t_update - r->pg.t_epoch; /* the epoch's start to its last step */
  if (r->world > 1) { /* the epoch over all ranks */
    double v[4];
    v[0] = (double)r->pg.samples;
    v[1] = r->pg.loss_sum;
    v[2] = (double)r->pg.correct;
    v[3] = (double)r->pg.acc_samples;
    if ((s = dl_dist_sum(r->desc.dist, v, 4)) != DL_OK) return s;
    r->samples += (int64_t)v[0] - r->pg.samples;
    r->pg.samples = (int64_t)v[0];
    r->pg.loss_sum = v[1];
    r->pg.correct = (int64_t)v[2];
    r->pg.acc_samples = (int64_t)v[3];
  }
  tl = dl_progress_loss(&r->pg);
  ta = r->pg.acc_samples > 0 ? dl_progress_accuracy(&r->pg) : (double)NAN;
  if (!dl_dist_is_root(r->desc.dist)) {
    r->pg.epoch_s = now - r->pg.t_epoch;
    r->pg.epochs_done++;
  } else if (val_acc == val_acc)
    dl_progress_end_epoch(&r->pg, "test_loss %.4f | test_acc %.4f", val_loss, val_acc);
  else if (val_loss == val_loss)
    dl_progress_end_epoch(&r->pg, "test_loss %.4f", val_loss);
  else
    dl_progress_end_epoch(&r->pg, NULL);
  e = r->epoch;
  r->epoch++;
  if (e < DL_RUN_MAX_EPOCHS) {
    double row[DL_EPOCH_STATS_COLUMNS];
    int c;
    row[0] = (double)(e + 1);
    row[1] = tl;
    row[2] = ta;
    row[3] = val_loss;
    row[4] = val_acc;
    row[5] = r->desc.optim ? dl_optim_lr(r->desc.optim) : (double)NAN;
    row[6] = dl_progress_samples_per_s(&r->pg);
    row[7] = r->wall_before + (now - r->t0);
    for (c = 0; c < DL_EPOCH_STATS_COLUMNS; c++) dl__run_col(r, c)[e] = row[c];
  }
  s = dl_dist_is_root(r->desc.dist) ? dl__run_write(r, now) : DL_OK;
  return r->world > 1 ? dl_dist_agree(r->desc.dist, s) : s;
}

/* After training: --save writes the weights (atomically; rank 0). */
DL_API dl_status dl_run_finish(dl_run *r) {
  const dl_train_opts *o = r->desc.opts;
  dl_status s = DL_OK;
  if (o->save && !o->eval && dl_dist_is_root(r->desc.dist)) {
    /* a model on the GPU comes back to the host first (training is over) */
    s = dl_model_to_host(r->desc.model);
    if (s == DL_OK) s = dl_model_save(r->desc.model, o->save, NULL);
  }
  return r->world > 1 ? dl_dist_agree(r->desc.dist, s) : s;
}

/* Training samples per second of this process (0 when it trained none). */
DL_API double dl_run_samples_per_s(const dl_run *r) { return r->train_s > 0 ? (double)r->samples / r->train_s : 0; }
/* Seconds since dl_run_begin. */
DL_API double dl_run_wall_s(const dl_run *r) { return dl_clock_monotonic(NULL) - r->t0; }

/* The last line of the program, for scripts:
 *   result: test_acc=0.8931 epochs=10 train_samples_per_s=15234.1 wall_s=41.20 [extra]
 * epochs: epochs the model has been trained (a resumed run counts the
 * earlier ones); extra: the caller's key=value pairs (printf format).
 * With several ranks: rank 0 prints it, and the samples are all ranks'. */
DL_API void dl_run_result(const dl_run *r, FILE *f, double test_acc, const char *fmt, ...) DL__PRINTF(4, 5);
DL_API void dl_run_result(const dl_run *r, FILE *f, double test_acc, const char *fmt, ...) {
  if (!dl_dist_is_root(r->desc.dist)) return;
  fprintf(f, "result: test_acc=%.4f epochs=%lld train_samples_per_s=%.1f wall_s=%.2f", test_acc, (long long)r->epoch,
          dl_run_samples_per_s(r), dl_run_wall_s(r));
  if (fmt && *fmt) {
    va_list ap;
    fputc(' ', f);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
  }
  fputc('\n', f);
  fflush(f);
}

#endif /* !DL__SCALAR_ONLY && !DL_NO_STDIO */
DL__HEADER_END
#endif /* DL_RUN_H */
