/* dl/report.h - what a person watching training sees: a progress line,
 * classification metrics, a per-epoch CSV log and a PNG chart of the curves.
 *
 *   dl_progress pg;
 *   dl_progress_init(&pg, &(dl_progress_desc){.epochs = 10, .steps = n_batches});
 *   dl_csv_log log;
 *   if (dl_csv_log_open(&log, ctx, &(dl_csv_log_desc){.path = "train.csv"}) != DL_OK) ...
 *   dl_confusion cm;
 *   dl_confusion_init(&cm, ctx, 10);
 *   for (epoch = 1; epoch <= 10; epoch++) {
 *     dl_progress_begin(&pg, epoch);
 *     for (each batch) {
 *       ... forward, backward, step ...
 *       dl_progress_update_acc(&pg, batch, loss, dl_accuracy_count(logits, labels));
 *     }
 *     dl_confusion_reset(&cm);
 *     for (each validation batch) dl_confusion_add(&cm, logits, labels);
 *     dl_progress_end_epoch(&pg, "val_acc %.4f", dl_confusion_accuracy(&cm));
 *     dl_csv_log_epoch(&log, &(dl_epoch_stats){.epoch = epoch,
 *         .train_loss = dl_progress_loss(&pg), .train_acc = dl_progress_accuracy(&pg),
 *         .val_loss = vl, .val_acc = dl_confusion_accuracy(&cm), .lr = lr,
 *         .samples_per_s = dl_progress_samples_per_s(&pg), .wall_s = dl_progress_total_s(&pg)});
 *     tl[epoch - 1] = dl_progress_loss(&pg); ...                     // the curves so far
 *     dl_chart_save_png(ctx, "train.png", &(dl_chart_desc){.n = epoch,
 *         .train_loss = tl, .val_loss = vl_hist, .train_acc = ta, .val_acc = va});
 *   }
 *   dl_confusion_fprint(stdout, &cm, class_names);
 *
 * >>progress  One line for the epoch being trained:
 *       epoch 2/10 | step 150/469 ( 31%) | loss 0.4521 | acc 0.8512 | 1234.5 samples/s | elapsed 0:00:12 | eta 0:00:27
 *   redrawn in place ('\r') at most every redraw_s seconds when the stream is a
 *   terminal (isatty(fileno(stream))); otherwise (CI logs, files) a plain line
 *   each time another tenth of the epoch is done (or every N seconds), so a
 *   log holds ten lines per epoch, not thousands. end_epoch prints one summary
 *   line per epoch either way:
 *       epoch 2/10 done | 469 steps in 0:00:31 | loss 0.4012 | acc 0.8531 | 1500.2 samples/s | total 0:01:02 | eta 0:04:08 | val_acc 0.8620
 *   The running loss is the epoch's mean so far, weighted by samples (or, with
 *   desc.smoothing, an exponential moving average); accuracy is the epoch's
 *   correct / samples so far. Throughput is the epoch's samples over the time
 *   from begin to the latest update; elapsed is rounded down and the ETA
 *   (elapsed / steps done * steps left) up, to whole seconds, shown h:mm:ss.
 *   The summary's eta is for the epochs left, at the mean epoch time of this
 *   run (validation included). The clock is a function pointer in the desc
 *   (tests use a fake one); the default is clock_gettime(CLOCK_MONOTONIC).
 * >>metrics   Accuracy from logits [N, C] (f32/f64, any strides) and labels
 *   [N] (i64/i32): a row's prediction is its first maximum (torch.argmax:
 *   ties go to the lower index, a NaN wins). dl_confusion accumulates an
 *   int64 [C, C] matrix over batches, rows = true class, columns = predicted,
 *   and prints it as a table with per-class accuracy.
 * >>csv       dl_csv_log: one row per epoch, header written once (appending
 *   to an existing log of the same columns resumes it), flushed every row.
 *   dl_csv_save writes a whole log at once, atomically (file.h): what
 *   run.h does every epoch, so a full disk or a kill never cuts the log.
 * >>chart     dl_chart_render draws loss and accuracy curves (two panels:
 *   loss left, accuracy right; train and validation in each, with axes,
 *   ticks, numbers, a legend in the corner the curves leave free) into an
 *   RGB buffer with the library's own rasteriser and bitmap font;
 *   dl_chart_save_png writes it as a PNG through stb_image_write and
 *   file.h's atomic writer (a unique temporary renamed over the target).
 *
 * Configuration:
 *   DL_USE_STB_IMAGE_WRITE   define before including dl.h to get PNG output:
 *                            report.h then includes <stb/stb_image_write.h>
 *                            (Debian/Ubuntu: apt-get install libstb-dev) with
 *                            STB_IMAGE_WRITE_STATIC and its implementation,
 *                            so every translation unit has a private copy and
 *                            nothing clashes at link time; its allocations go
 *                            through DL_MALLOC/DL_REALLOC/DL_FREE. If
 *                            stb_image_write.h was included before dl.h, that
 *                            copy is used (its implementation is then yours).
 *                            Without the macro dl_chart_save_png returns
 *                            DL_ERR_UNSUPPORTED, saying how to enable it.
 *   DL_STB_IMAGE_WRITE_HEADER  another path for it, e.g. "stb_image_write.h"
 *   DL_NO_STDIO              leaves out everything that needs FILE (progress,
 *                            CSV, printing, PNG); metrics and rendering stay.
 * The glyphs of the chart's font are stb_easy_font.h's (Sean Barrett, public
 * domain), stored here as bitmaps: no font header is needed.
 */
#ifndef DL_REPORT_H
#define DL_REPORT_H

#include "tensor.h"
#include "file.h" /* the atomic writer: the chart and dl_csv_save */
DL__HEADER_BEGIN
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef DL_NO_STDIO
#include <stdio.h>
#if defined(_WIN32)
#include <io.h>
#elif defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif
#endif

#if defined(DL_USE_STB_IMAGE_WRITE) && !defined(DL_NO_STDIO) && !defined(INCLUDE_STB_IMAGE_WRITE_H)
#if !defined(STBIW_MALLOC) && !defined(STBIW_REALLOC) && !defined(STBIW_FREE) && !defined(STBIW_REALLOC_SIZED) && \
    !defined(DL__MODE_LINK)
/* stb_image_write asserts (or, with NDEBUG, writes through NULL) when an
 * allocation fails inside its deflate. Its allocations come here instead:
 * during dl_chart_save_png they are carved from chunks on that call's list
 * (this thread's dl__png_cur) that the ctx's allocator makes; a failure
 * frees the list and jumps back to dl_chart_save_png, which returns
 * DL_ERR_NOMEM. Outside it (a program calling stb itself) they are
 * DL_MALLOC's, NULL on failure.
 *
 * Why chunks: stb's deflate keeps one growing array per hash bucket, so one
 * chart took 7,000-13,000 mallocs and reallocs (stb 1.16), and how many
 * depended on the picture; a training run's allocation count then moved
 * with its curves. The first chunk is sized for the image (dl__png_encode's
 * hint) and holds a chart's whole encode: one allocation per chart,
 * whatever its curves (a noisy photograph, whose deflate output is large,
 * takes a few more chunks, from 1 MiB doubling). Pieces are bumped off the
 * newest chunk; freeing or growing the newest piece gives back or takes
 * room in place, other frees wait for the end of the encode (stb's doubling
 * arrays leave at most about as much behind as they hold). A request too
 * large to represent is out of memory like a failed chunk. */
#include <setjmp.h>
typedef struct dl__png_block { /* before each chunk and piece: 32 bytes keep them 16-aligned */
  struct dl__png_block *prev, *next; /* a chunk: the list; a piece: unused */
  size_t size;                       /* a chunk: its room after the header; a piece: the bytes asked */
  int tracked;                       /* 0 DL_MALLOC's (outside an encode), 1 a chunk, 2 a piece */
} dl__png_block;
typedef struct dl__png_mem {
  jmp_buf jb;
  dl_ctx *ctx;
  dl__png_block head;  /* the chunks' list (newest first), its sentinel */
  size_t used;         /* bytes carved from the newest chunk */
  size_t next_chunk;   /* the room of the next chunk, at least */
  int chunks;          /* chunks taken so far */
  size_t in_use, asked;
} dl__png_mem;
static DL__TLS dl__png_mem *dl__png_cur;
#define DL__PNG_HDR ((sizeof(dl__png_block) + 31) & ~(size_t)31)
#define DL__PNG_ROUND(n) (((n) + 31) & ~(size_t)31)
static void dl__png_unlink(dl__png_block *b) {
  b->prev->next = b->next;
  b->next->prev = b->prev;
}
/* Give back every chunk of m. */
static void dl__png_release(dl__png_mem *m) {
  while (m->head.next != &m->head) {
    dl__png_block *f = m->head.next;
    dl__png_unlink(f);
    dl_raw_free(m->ctx, f);
  }
  m->used = 0;
}
/* Is the piece b the newest chunk's last? */
static int dl__png_is_last(const dl__png_mem *m, const dl__png_block *b) {
  return m->head.next != &m->head &&
         (const unsigned char *)b + DL__PNG_HDR + DL__PNG_ROUND(b->size) ==
             (const unsigned char *)m->head.next + DL__PNG_HDR + m->used;
}
/* Out of memory inside an encode: give back everything it holds, leave it. */
static void dl__png_oom(dl__png_mem *m, size_t asked) {
  m->asked = asked;
  dl__png_release(m);
  longjmp(m->jb, 1);
}
static void *dl__png_malloc(size_t n) {
  dl__png_mem *m = dl__png_cur;
  dl__png_block *b;
  size_t need;
  if (n > SIZE_MAX / 4) {
    if (m) dl__png_oom(m, n);
    return NULL;
  }
  if (!m) {
    b = (dl__png_block *)DL_MALLOC(DL__PNG_HDR + n, NULL);
    if (!b) return NULL;
    b->tracked = 0;
    b->size = n;
    return (unsigned char *)b + DL__PNG_HDR;
  }
  need = DL__PNG_HDR + DL__PNG_ROUND(n);
  if (m->head.next == &m->head || m->head.next->size - m->used < need) { /* a new chunk */
    size_t room = m->next_chunk > need ? m->next_chunk : need;
    dl__png_block *c = (dl__png_block *)dl_raw_alloc(m->ctx, DL__PNG_HDR + room);
    if (!c) dl__png_oom(m, DL__PNG_HDR + room);
    c->tracked = 1;
    c->size = room;
    c->next = m->head.next;
    c->prev = &m->head;
    m->head.next->prev = c;
    m->head.next = c;
    m->used = 0;
    m->next_chunk = ++m->chunks == 1 ? (size_t)1 << 20 : room <= SIZE_MAX / 8 ? room * 2 : room;
  }
  b = (dl__png_block *)((unsigned char *)m->head.next + DL__PNG_HDR + m->used);
  m->used += need;
  b->tracked = 2;
  b->size = n;
  m->in_use += n;
  return (unsigned char *)b + DL__PNG_HDR;
}
static void dl__png_free(void *p) {
  dl__png_block *b;
  dl__png_mem *m = dl__png_cur;
  if (!p) return;
  b = (dl__png_block *)((unsigned char *)p - DL__PNG_HDR);
  if (!b->tracked) {
    DL_FREE(b, NULL);
    return;
  }
  m->in_use -= b->size;
  if (dl__png_is_last(m, b)) m->used -= DL__PNG_HDR + DL__PNG_ROUND(b->size); /* else: at the encode's end */
}
static void *dl__png_realloc(void *p, size_t n) {
  dl__png_block *b;
  dl__png_mem *m = dl__png_cur;
  void *q;
  if (!p) return dl__png_malloc(n);
  b = (dl__png_block *)((unsigned char *)p - DL__PNG_HDR);
  if (!b->tracked) {
    if (n > SIZE_MAX / 4) return NULL;
    b = (dl__png_block *)DL_REALLOC(b, DL__PNG_HDR + n, NULL);
    if (!b) return NULL;
    b->size = n;
    return (unsigned char *)b + DL__PNG_HDR;
  }
  if (n <= SIZE_MAX / 4 && dl__png_is_last(m, b) &&
      m->head.next->size - (m->used - DL__PNG_ROUND(b->size)) >= DL__PNG_ROUND(n)) { /* grows (or shrinks) in place */
    m->used = m->used - DL__PNG_ROUND(b->size) + DL__PNG_ROUND(n);
    m->in_use = m->in_use - b->size + n;
    b->size = n;
    return p;
  }
  q = dl__png_malloc(n); /* jumps on failure (never NULL here), p's chunk still on the list */
  memcpy(q, p, n < b->size ? n : b->size);
  dl__png_free(p);
  return q;
}
#define STBIW_MALLOC(sz) dl__png_malloc(sz)
#define STBIW_REALLOC(p, newsz) dl__png_realloc((p), (newsz))
#define STBIW_FREE(p) dl__png_free(p)
#define DL__PNG_TRACKED 1
#endif
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
/* a single file: stb's functions static in it; compiled once: in the
 * DL_IMPLEMENTATION file, with external names the DL_LINK files call */
#if !defined(DL__MODE_IMPL) && !defined(DL__MODE_LINK)
#define STB_IMAGE_WRITE_STATIC
#endif
#ifndef DL__MODE_LINK
#define STB_IMAGE_WRITE_IMPLEMENTATION
#endif
#ifdef DL_STB_IMAGE_WRITE_HEADER
#include DL_STB_IMAGE_WRITE_HEADER
#else
#include <stb/stb_image_write.h>
#endif
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#ifndef DL_NO_STDIO
/* POSIX's fileno and clock_gettime are hidden by glibc's headers under
 * -std=c11 (no _POSIX_C_SOURCE); isatty comes with <unistd.h> either way.
 * Declaring fileno ourselves keeps `cc -std=c11 prog.c` enough. */
#if !defined(__cplusplus) && !defined(_WIN32) && (defined(__unix__) || defined(__APPLE__)) && \
    !defined(fileno)
extern int fileno(FILE *);
#endif
#endif
#if !defined(__cplusplus) && !defined(CLOCK_MONOTONIC) && defined(__linux__)
/* Linux's clockid_t is an int and CLOCK_MONOTONIC is 1 in its ABI. */
extern int clock_gettime(int, struct timespec *);
#define DL__LINUX_CLOCK_MONOTONIC 1
#endif

/* >>clock ------------------------------------------------------------------ */

/* Seconds on a clock that only moves forward (its zero is arbitrary).
 * clock_gettime(CLOCK_MONOTONIC) where POSIX has it; under plain -std=c11
 * on other systems C11's timespec_get(TIME_UTC), which can jump if the
 * system time is set. user is ignored (the dl_clock_fn signature). */
typedef double (*dl_clock_fn)(void *user);
/* Seconds from CLOCK_MONOTONIC (the default clock of the progress line and
 * the run). */
DL_API double dl_clock_monotonic(void *user) {
  struct timespec ts;
  (void)user;
#if defined(CLOCK_MONOTONIC)
  clock_gettime(CLOCK_MONOTONIC, &ts);
#elif defined(DL__LINUX_CLOCK_MONOTONIC)
  clock_gettime(DL__LINUX_CLOCK_MONOTONIC, &ts);
#else
  timespec_get(&ts, TIME_UTC);
#endif
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "h:mm:ss" of seconds s (>= 0), rounded down (up = 0) or up (up = 1). */
DL_API char *dl__fmt_hms(char *buf, size_t n, double s, int up) {
  long long t;
  if (!(s > 0)) s = 0; /* also NaN */
  if (s > 3.6e12) s = 3.6e12;
  t = (long long)(up ? ceil(s - 1e-9) : floor(s + 1e-9));
  if (t < 0) t = 0;
  snprintf(buf, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}
/* A loss or rate for a one-line display: 4 decimals in [1e-3, 1e4), else %.3e. */
DL_API char *dl__fmt_num(char *buf, size_t n, double v) {
  double a = fabs(v);
  if (v == 0 || (a >= 1e-3 && a < 1e4) || v != v) snprintf(buf, n, "%.4f", v);
  else snprintf(buf, n, "%.3e", v);
  return buf;
}

#ifndef DL_NO_STDIO
/* >>progress --------------------------------------------------------------- */

/* How the progress line is shown. */
enum {
  DL_PROGRESS_AUTO = 0,   /* redraw in place if isatty(fileno(stream)), else lines */
  DL_PROGRESS_TTY = 1,    /* redraw in place with '\r' */
  DL_PROGRESS_LINES = 2   /* plain periodic lines */
};

/* dl_progress_desc: zero fields are defaults.
 *   stream       NULL: stderr
 *   epochs       E, shown as "epoch e/E"; 0: unknown, "epoch e"
 *   steps        S, steps (update calls) per epoch; 0: unknown: no
 *                percentage and no ETA
 *   mode         DL_PROGRESS_AUTO: in place on a terminal, lines otherwise
 *   redraw_s     in place: least seconds between redraws; 0: 0.1
 *   every_frac   lines: a line each time another every_frac of the epoch's
 *                steps is done (not at the last step: the summary follows);
 *                0: 0.1; < 0: never
 *   every_s      lines: also a line when every_s seconds passed since the
 *                last one; 0: 10 when steps is 0, never otherwise; < 0: never
 *   smoothing    the running loss shown while an epoch runs: 0: the epoch's
 *                mean so far, weighted by samples; in (0, 1]: an exponential
 *                moving average over steps with this weight on the newest
 *                loss, bias-corrected (ema / (1 - (1 - smoothing)^steps))
 *   width        in place: lines are cut to width - 1 characters so that the
 *                terminal never wraps them; 0: $COLUMNS when set, else no cut
 *   label        a prefix ("train | epoch ..."); NULL: none
 *   clock        seconds from clock(clock_user); NULL: dl_clock_monotonic */
typedef struct dl_progress_desc {
  FILE *stream; /* NULL: stderr */
  int64_t epochs, steps; /* E for "epoch e/E" and S steps per epoch; 0: unknown */
  int mode; /* DL_PROGRESS_AUTO: in place on a terminal, lines otherwise */
  double redraw_s, every_frac, every_s, smoothing; /* timing of redraws and lines, and the loss shown (see above) */
  int width; /* in place: cut lines to width - 1; 0: $COLUMNS, else no cut */
  const char *label; /* a prefix; NULL: none */
  dl_clock_fn clock; /* seconds from clock(clock_user); NULL: dl_clock_monotonic */
  void *clock_user; /* passed to clock */
} dl_progress_desc;

/* Plain memory the caller owns; nothing to free. Fields are readable. */
typedef struct dl_progress {
  dl_progress_desc desc;   /* as given, defaults filled in */
  int tty;                 /* 1: redrawing in place */
  int64_t epoch;           /* the epoch number given to begin */
  int64_t step;            /* updates this epoch */
  int64_t samples;         /* samples this epoch */
  int64_t correct;         /* correct predictions this epoch (update_acc) */
  int64_t acc_samples;     /* samples of the updates that gave correct counts */
  double loss_sum;         /* sum of loss * samples this epoch */
  double ema, ema_decay;   /* smoothing: EMA and (1 - smoothing)^step */
  double t_init;           /* clock at dl_progress_init */
  double t_epoch;          /* clock at dl_progress_begin */
  double t_update;         /* clock at the latest update (t_epoch before one) */
  double t_now;            /* clock at the latest call */
  double t_shown;          /* clock at the latest redraw or line */
  double epoch_s;          /* the finished epoch's seconds (set by end_epoch) */
  int64_t marks;           /* lines: every_frac marks printed this epoch */
  int64_t epochs_done;     /* end_epoch calls since init */
  int drawn;               /* in place: characters on the line now (0: none) */
} dl_progress;

DL_API double dl__progress_clock(dl_progress *p) {
  p->t_now = p->desc.clock(p->desc.clock_user);
  return p->t_now;
}

/* Fill *p from desc (NULL: all defaults) and start the run's clock. */
DL_API void dl_progress_init(dl_progress *p, const dl_progress_desc *desc) {
  memset(p, 0, sizeof *p);
  if (desc) p->desc = *desc;
  if (!p->desc.stream) p->desc.stream = stderr;
  if (!p->desc.clock) p->desc.clock = dl_clock_monotonic;
  if (p->desc.redraw_s == 0) p->desc.redraw_s = 0.1;
  if (p->desc.every_frac == 0) p->desc.every_frac = 0.1;
  if (p->desc.every_s == 0) p->desc.every_s = p->desc.steps > 0 ? -1 : 10;
  if (p->desc.smoothing < 0 || p->desc.smoothing > 1) p->desc.smoothing = 0;
  if (p->desc.width == 0) {
    const char *cols = getenv("COLUMNS");
    long w = cols ? strtol(cols, NULL, 10) : 0;
    p->desc.width = (w > 0 && w < 100000) ? (int)w : 0;
  }
  if (p->desc.mode == DL_PROGRESS_TTY) p->tty = 1;
  else if (p->desc.mode == DL_PROGRESS_LINES) p->tty = 0;
  else {
#if defined(_WIN32)
    p->tty = _isatty(_fileno(p->desc.stream)) != 0;
#elif defined(__unix__) || defined(__APPLE__)
    p->tty = isatty(fileno(p->desc.stream)) != 0;
#else
    p->tty = 0;
#endif
  }
  p->t_init = dl__progress_clock(p);
  p->t_epoch = p->t_update = p->t_shown = p->t_init;
}

/* Start epoch number `epoch` (the number shown: 1 .. epochs). */
DL_API void dl_progress_begin(dl_progress *p, int64_t epoch) {
  p->epoch = epoch;
  p->step = p->samples = p->correct = p->acc_samples = 0;
  p->loss_sum = p->ema = 0;
  p->ema_decay = 1;
  p->marks = 0;
  p->drawn = 0;
  p->epoch_s = 0;
  p->t_epoch = p->t_update = p->t_shown = dl__progress_clock(p);
}

/* The epoch's mean loss so far (weighted by samples); NaN before any sample. */
DL_API double dl_progress_loss(const dl_progress *p) {
  return p->samples > 0 ? p->loss_sum / (double)p->samples : NAN;
}
/* The loss the line shows: the mean, or the EMA with desc.smoothing. */
DL_API double dl_progress_running_loss(const dl_progress *p) {
  if (p->desc.smoothing > 0) return p->step > 0 ? p->ema / (1 - p->ema_decay) : NAN;
  return dl_progress_loss(p);
}
/* The epoch's accuracy so far (correct / samples over the updates that gave
 * counts); NaN when none did. */
DL_API double dl_progress_accuracy(const dl_progress *p) {
  return p->acc_samples > 0 ? (double)p->correct / (double)p->acc_samples : NAN;
}
/* The epoch's samples per second, begin to the latest update; 0 before one. */
DL_API double dl_progress_samples_per_s(const dl_progress *p) {
  double dt = p->t_update - p->t_epoch;
  return dt > 0 ? (double)p->samples / dt : 0;
}
/* Seconds since begin at the latest call (after end_epoch: the epoch's). */
DL_API double dl_progress_epoch_s(const dl_progress *p) { return p->t_now - p->t_epoch; }
/* Seconds since init at the latest call (the run's wall time so far). */
DL_API double dl_progress_total_s(const dl_progress *p) { return p->t_now - p->t_init; }

/* "epoch 2/10" (+ label prefix) into buf at *at. */
DL_API void dl__progress_head(const dl_progress *p, char *buf, size_t n, size_t *at) {
  int k;
  if (p->desc.label) {
    k = snprintf(buf + *at, n - *at, "%s | ", p->desc.label);
    if (k > 0) *at += (size_t)k < n - *at ? (size_t)k : n - *at - 1;
  }
  if (p->desc.epochs > 0)
    k = snprintf(buf + *at, n - *at, "epoch %lld/%lld", (long long)p->epoch, (long long)p->desc.epochs);
  else
    k = snprintf(buf + *at, n - *at, "epoch %lld", (long long)p->epoch);
  if (k > 0) *at += (size_t)k < n - *at ? (size_t)k : n - *at - 1;
}
DL_API void dl__progress_cat(char *buf, size_t n, size_t *at, const char *fmt, ...) DL__PRINTF(4, 5);
DL_API void dl__progress_cat(char *buf, size_t n, size_t *at, const char *fmt, ...) {
  va_list ap;
  int k;
  if (*at + 1 >= n) return;
  va_start(ap, fmt);
  k = vsnprintf(buf + *at, n - *at, fmt, ap);
  va_end(ap);
  if (k > 0) *at += (size_t)k < n - *at ? (size_t)k : n - *at - 1;
}
DL_API void dl__progress_rate(const dl_progress *p, char *buf, size_t n, size_t *at) {
  double r = dl_progress_samples_per_s(p);
  if (p->t_update > p->t_epoch) dl__progress_cat(buf, n, at, " | %.1f samples/s", r);
  else dl__progress_cat(buf, n, at, " | - samples/s");
}

/* The line for the epoch in progress (what update shows), without '\r' or
 * '\n', into buf; returns its length. */
DL_API size_t dl_progress_format(const dl_progress *p, char *buf, size_t n) {
  char a[64], b[64];
  size_t at = 0;
  double el = p->t_update - p->t_epoch;
  if (n == 0) return 0;
  buf[0] = 0;
  dl__progress_head(p, buf, n, &at);
  if (p->desc.steps > 0) {
    int w = snprintf(a, sizeof a, "%lld", (long long)p->desc.steps);
    dl__progress_cat(buf, n, &at, " | step %*lld/%lld (%3lld%%)", w, (long long)p->step,
                     (long long)p->desc.steps, (long long)(p->step * 100 / p->desc.steps));
  } else {
    dl__progress_cat(buf, n, &at, " | step %lld", (long long)p->step);
  }
  dl__progress_cat(buf, n, &at, " | loss %s", dl__fmt_num(a, sizeof a, dl_progress_running_loss(p)));
  if (p->acc_samples > 0) dl__progress_cat(buf, n, &at, " | acc %.4f", dl_progress_accuracy(p));
  dl__progress_rate(p, buf, n, &at);
  dl__progress_cat(buf, n, &at, " | elapsed %s", dl__fmt_hms(a, sizeof a, el, 0));
  if (p->desc.steps > 0 && p->step > 0) {
    double left = (double)(p->desc.steps - p->step);
    dl__progress_cat(buf, n, &at, " | eta %s",
                     dl__fmt_hms(b, sizeof b, left > 0 ? el / (double)p->step * left : 0, 1));
  }
  return at;
}

/* Write a line: in place ('\r', cut to the width, padded over the previous
 * one) or as a plain line; final = 1 ends an in-place line with '\n'. */
DL_API void dl__progress_emit(dl_progress *p, const char *line, size_t len, int final) {
  FILE *f = p->desc.stream;
  if (p->tty) {
    int pad;
    if (p->desc.width > 1 && len > (size_t)p->desc.width - 1) len = (size_t)p->desc.width - 1;
    pad = p->drawn > (int)len ? p->drawn - (int)len : 0;
    fprintf(f, "\r%.*s%*s", (int)len, line, pad, "");
    if (final) { fputc('\n', f); p->drawn = 0; }
    else p->drawn = (int)len;
  } else {
    fprintf(f, "%.*s\n", (int)len, line);
  }
  fflush(f);
  p->t_shown = p->t_now;
}

/* One step done: `samples` samples (>= 0) whose mean loss was `loss`, and
 * `correct` of them predicted right (dl_progress_update_acc; < 0: no count).
 * Reads the clock once; shows the line when it is due. */
DL_API void dl_progress_update_acc(dl_progress *p, int64_t samples, double loss, int64_t correct) {
  char line[512];
  double now;
  int show = 0;
  if (samples < 0 || correct > samples)
    DL_PANIC(NULL, "dl_progress_update", "samples must be >= 0 and correct <= samples: samples %lld, correct %lld",
             (long long)samples, (long long)correct);
  now = dl__progress_clock(p);
  p->t_update = now;
  p->step++;
  p->samples += samples;
  p->loss_sum += loss * (double)samples;
  if (correct >= 0) { p->correct += correct; p->acc_samples += samples; }
  if (p->desc.smoothing > 0) {
    p->ema = p->desc.smoothing * loss + (1 - p->desc.smoothing) * p->ema;
    p->ema_decay *= 1 - p->desc.smoothing;
  }
  if (p->tty) {
    show = p->step == 1 || now - p->t_shown >= p->desc.redraw_s;
  } else {
    int last = p->desc.steps > 0 && p->step >= p->desc.steps;
    if (p->desc.steps > 0 && p->desc.every_frac > 0) {
      int64_t mark = (int64_t)floor((double)p->step / ((double)p->desc.steps * p->desc.every_frac) + 1e-9);
      if (mark > p->marks) { p->marks = mark; show = !last; }
    }
    if (p->desc.every_s > 0 && now - p->t_shown >= p->desc.every_s && !last) show = 1;
  }
  if (show) dl__progress_emit(p, line, dl_progress_format(p, line, sizeof line), 0);
}
/* dl_progress_update_acc without an accuracy: count a step of samples with
 * its mean loss. */
DL_API void dl_progress_update(dl_progress *p, int64_t samples, double loss) {
  dl_progress_update_acc(p, samples, loss, -1);
}

/* The epoch's summary line (replacing the in-place line on a terminal),
 * with fmt's text (printf-style; NULL for none) appended after " | ".
 * ("" works too but -Wall warns about an empty format.) */
DL_API void dl_progress_end_epoch(dl_progress *p, const char *fmt, ...) DL__PRINTF(2, 3);
DL_API void dl_progress_end_epoch(dl_progress *p, const char *fmt, ...) {
  char line[1024], a[64];
  size_t at = 0;
  double now = dl__progress_clock(p), total;
  p->epoch_s = now - p->t_epoch;
  p->epochs_done++;
  total = now - p->t_init;
  dl__progress_head(p, line, sizeof line, &at);
  dl__progress_cat(line, sizeof line, &at, " done | %lld steps in %s", (long long)p->step,
                   dl__fmt_hms(a, sizeof a, p->epoch_s, 0));
  dl__progress_cat(line, sizeof line, &at, " | loss %s", dl__fmt_num(a, sizeof a, dl_progress_loss(p)));
  if (p->acc_samples > 0) dl__progress_cat(line, sizeof line, &at, " | acc %.4f", dl_progress_accuracy(p));
  dl__progress_rate(p, line, sizeof line, &at);
  dl__progress_cat(line, sizeof line, &at, " | total %s", dl__fmt_hms(a, sizeof a, total, 0));
  if (p->desc.epochs > 0 && p->epoch < p->desc.epochs)
    dl__progress_cat(line, sizeof line, &at, " | eta %s",
                     dl__fmt_hms(a, sizeof a, total / (double)p->epochs_done * (double)(p->desc.epochs - p->epoch), 1));
  if (fmt && fmt[0] && at + 4 < sizeof line) {
    va_list ap;
    int k;
    dl__progress_cat(line, sizeof line, &at, " | ");
    va_start(ap, fmt);
    k = vsnprintf(line + at, sizeof line - at, fmt, ap);
    va_end(ap);
    if (k > 0) at += (size_t)k < sizeof line - at ? (size_t)k : sizeof line - at - 1;
  }
  dl__progress_emit(p, line, at, 1);
}
#endif /* DL_NO_STDIO */

/* >>metrics ---------------------------------------------------------------- */

DL_API void dl__metric_check(const char *op, const dl_tensor *x, const dl_tensor *labels) {
  if (x->dtype != DL_F32 && x->dtype != DL_F64)
    DL_PANIC(x->ctx, op, "logits must be f32 or f64: logits %s, labels %s", DL_SHAPESTR(x),
             labels ? DL_SHAPESTR(labels) : "(none)");
  if (x->ndim != 2 || x->shape[1] < 1)
    DL_PANIC(x->ctx, op, "logits must be [N, C] with C >= 1: logits %s, labels %s", DL_SHAPESTR(x),
             labels ? DL_SHAPESTR(labels) : "(none)");
  if (x->device != DL_CPU || (labels && labels->device != DL_CPU))
    DL_PANIC(x->ctx, op, "tensors must be on the CPU: logits %s, labels %s", DL_SHAPESTR(x),
             labels ? DL_SHAPESTR(labels) : "(none)");
  if (!labels) return;
  if (labels->dtype != DL_I64 && labels->dtype != DL_I32)
    DL_PANIC(x->ctx, op, "labels must be i64 or i32: logits %s, labels %s", DL_SHAPESTR(x),
             DL_SHAPESTR(labels));
  if (labels->ndim != 1 || labels->shape[0] != x->shape[0])
    DL_PANIC(x->ctx, op, "shape mismatch: logits %s and labels %s (want logits [N, C], labels [N])",
             DL_SHAPESTR(x), DL_SHAPESTR(labels));
}
/* Label i, checked against [0, C). */
DL_API int64_t dl__metric_label(const char *op, const dl_tensor *x, const dl_tensor *labels, int64_t i,
                                int64_t C) {
  const int64_t off = i * labels->strides[0];
  const int64_t v = labels->dtype == DL_I64 ? ((const int64_t *)labels->data)[off]
                                            : (int64_t)((const int32_t *)labels->data)[off];
  if (v < 0 || v >= C)
    DL_PANIC(x->ctx, op, "label %lld at position %lld is out of range: %lld classes (valid 0..%lld); "
             "logits %s, labels %s", (long long)v, (long long)i, (long long)C, (long long)(C - 1),
             DL_SHAPESTR(x), DL_SHAPESTR(labels));
  return v;
}
/* Column of row i's first maximum; a NaN counts as the maximum (torch.argmax). */
DL_API int64_t dl__argmax_row(const dl_tensor *x, int64_t i) {
  const int64_t C = x->shape[1], s1 = x->strides[1];
  int64_t j, best = 0;
  if (x->dtype == DL_F32) {
    const float *r = (const float *)x->data + i * x->strides[0];
    float bv = r[0];
    if (bv != bv) return 0;
    for (j = 1; j < C; j++) {
      const float v = r[j * s1];
      if (v != v) return j;
      if (v > bv) { bv = v; best = j; }
    }
  } else {
    const double *r = (const double *)x->data + i * x->strides[0];
    double bv = r[0];
    if (bv != bv) return 0;
    for (j = 1; j < C; j++) {
      const double v = r[j * s1];
      if (v != v) return j;
      if (v > bv) { bv = v; best = j; }
    }
  }
  return best;
}

/* out[i] = argmax of row i of logits [N, C] (f32/f64, any strides): the first
 * maximum, a NaN winning (as torch.argmax(dim=1)). out holds N int64s. */
DL_API void dl_argmax_rows(const dl_tensor *logits, int64_t *out) {
  int64_t i;
  dl__metric_check("dl_argmax_rows", logits, NULL);
  for (i = 0; i < logits->shape[0]; i++) out[i] = dl__argmax_row(logits, i);
}
/* Rows of logits [N, C] whose argmax equals the label (labels [N], i64/i32,
 * each in [0, C); a label out of range panics naming it). */
DL_API int64_t dl_accuracy_count(const dl_tensor *logits, const dl_tensor *labels) {
  int64_t i, n = 0;
  dl__metric_check("dl_accuracy_count", logits, labels);
  for (i = 0; i < logits->shape[0]; i++)
    n += dl__argmax_row(logits, i) == dl__metric_label("dl_accuracy_count", logits, labels, i, logits->shape[1]);
  return n;
}
/* dl_accuracy_count / N; NaN for N = 0. */
DL_API double dl_accuracy(const dl_tensor *logits, const dl_tensor *labels) {
  const int64_t c = dl_accuracy_count(logits, labels);
  return logits->shape[0] > 0 ? (double)c / (double)logits->shape[0] : NAN;
}

/* A confusion matrix accumulated over batches. matrix is int64 [C, C],
 * owned: row = true class, column = predicted class. */
typedef struct dl_confusion {
  int64_t classes; /* the number of classes */
  dl_tensor *matrix; /* i64 [classes, classes]: row the true class, column the predicted one */
  dl_ctx *ctx; /* allocator and error reports */
} dl_confusion;

/* Zeroed C x C matrix. DL_ERR_ARG for classes < 1, DL_ERR_NOMEM /
 * DL_ERR_OVERFLOW from the allocation (cm->matrix NULL then). */
DL_API dl_status dl_confusion_init(dl_confusion *cm, dl_ctx *ctx, int64_t classes) {
  memset(cm, 0, sizeof *cm);
  cm->ctx = ctx;
  if (classes < 1)
    return dl_fail(ctx, DL_ERR_ARG, "dl_confusion_init: classes must be >= 1, not %lld", (long long)classes);
  {
    const int64_t shape[2] = {classes, classes};
    cm->matrix = dl_tensor_make(ctx, DL_I64, 2, shape);
  }
  if (!cm->matrix) return ctx ? ctx->status : DL_ERR_NOMEM;
  cm->classes = classes;
  return DL_OK;
}
/* Release the confusion matrix's counts. */
DL_API void dl_confusion_free(dl_confusion *cm) {
  dl_tensor_free(cm->matrix);
  memset(cm, 0, sizeof *cm);
}
/* All counts back to 0 (a new epoch). */
DL_API void dl_confusion_reset(dl_confusion *cm) {
  if (cm->matrix) memset(cm->matrix->data, 0, (size_t)(cm->classes * cm->classes) * sizeof(int64_t));
}
DL_API void dl__confusion_check(const dl_confusion *cm, const char *op, const dl_tensor *x,
                                const dl_tensor *labels) {
  if (!cm->matrix) DL_PANIC(x->ctx, op, "the confusion matrix was not initialised");
  if (x->shape[1] != cm->classes)
    DL_PANIC(x->ctx, op, "logits have %lld classes but the matrix %lld: logits %s, labels %s",
             (long long)x->shape[1], (long long)cm->classes, DL_SHAPESTR(x), DL_SHAPESTR(labels));
}
/* Count a batch: logits [N, C] (C = the matrix's classes; f32/f64, any
 * strides) predicted by argmax, labels [N] i64/i32. Returns the batch's
 * correct predictions. Panics on shape, dtype or label-range misuse. */
DL_API int64_t dl_confusion_add(dl_confusion *cm, const dl_tensor *logits, const dl_tensor *labels) {
  int64_t i, n = 0, *m;
  dl__metric_check("dl_confusion_add", logits, labels);
  dl__confusion_check(cm, "dl_confusion_add", logits, labels);
  m = (int64_t *)cm->matrix->data;
  for (i = 0; i < logits->shape[0]; i++) {
    const int64_t t = dl__metric_label("dl_confusion_add", logits, labels, i, cm->classes);
    const int64_t pr = dl__argmax_row(logits, i);
    m[t * cm->classes + pr]++;
    n += t == pr;
  }
  return n;
}
/* Count a batch of predicted class indices pred [N] against labels [N]
 * (each i64/i32, in [0, C)). Returns the batch's correct predictions. */
DL_API int64_t dl_confusion_add_pred(dl_confusion *cm, const dl_tensor *pred, const dl_tensor *labels) {
  int64_t i, n = 0, *m;
  const char *op = "dl_confusion_add_pred";
  if (!cm->matrix) DL_PANIC(pred->ctx, op, "the confusion matrix was not initialised");
  if ((pred->dtype != DL_I64 && pred->dtype != DL_I32) || (labels->dtype != DL_I64 && labels->dtype != DL_I32) ||
      pred->ndim != 1 || labels->ndim != 1 || pred->shape[0] != labels->shape[0] ||
      pred->device != DL_CPU || labels->device != DL_CPU)
    DL_PANIC(pred->ctx, op, "want predictions [N] and labels [N], i64 or i32, on the CPU: pred %s, labels %s",
             DL_SHAPESTR(pred), DL_SHAPESTR(labels));
  m = (int64_t *)cm->matrix->data;
  for (i = 0; i < pred->shape[0]; i++) {
    const int64_t p = pred->dtype == DL_I64 ? ((const int64_t *)pred->data)[i * pred->strides[0]]
                                            : (int64_t)((const int32_t *)pred->data)[i * pred->strides[0]];
    const int64_t t = labels->dtype == DL_I64 ? ((const int64_t *)labels->data)[i * labels->strides[0]]
                                              : (int64_t)((const int32_t *)labels->data)[i * labels->strides[0]];
    if (p < 0 || p >= cm->classes || t < 0 || t >= cm->classes)
      DL_PANIC(pred->ctx, op, "class out of range at position %lld: pred %lld, label %lld, %lld classes; pred %s, labels %s",
               (long long)i, (long long)p, (long long)t, (long long)cm->classes, DL_SHAPESTR(pred),
               DL_SHAPESTR(labels));
    m[t * cm->classes + p]++;
    n += t == p;
  }
  return n;
}
/* Samples of true class t predicted as p. */
DL_API int64_t dl_confusion_count(const dl_confusion *cm, int64_t t, int64_t p) {
  if (t < 0 || t >= cm->classes || p < 0 || p >= cm->classes)
    DL_PANIC(cm->ctx, "dl_confusion_count", "class (%lld, %lld) out of range: %lld classes", (long long)t,
             (long long)p, (long long)cm->classes);
  return ((const int64_t *)cm->matrix->data)[t * cm->classes + p];
}
/* Samples counted, and those on the diagonal. */
DL_API int64_t dl_confusion_total(const dl_confusion *cm) {
  int64_t k, n = 0, N = cm->classes * cm->classes;
  for (k = 0; k < N; k++) n += ((const int64_t *)cm->matrix->data)[k];
  return n;
}
/* How many samples were classified right: the diagonal's sum. */
DL_API int64_t dl_confusion_correct(const dl_confusion *cm) {
  int64_t c, n = 0;
  for (c = 0; c < cm->classes; c++) n += ((const int64_t *)cm->matrix->data)[c * cm->classes + c];
  return n;
}
/* correct / total; NaN when nothing was counted. */
DL_API double dl_confusion_accuracy(const dl_confusion *cm) {
  const int64_t t = dl_confusion_total(cm);
  return t > 0 ? (double)dl_confusion_correct(cm) / (double)t : NAN;
}
/* Per-class accuracy (recall) of true class c: diagonal / row sum; NaN when
 * class c had no samples. */
DL_API double dl_confusion_class_accuracy(const dl_confusion *cm, int64_t c) {
  int64_t p, n = 0;
  const int64_t *row;
  if (c < 0 || c >= cm->classes)
    DL_PANIC(cm->ctx, "dl_confusion_class_accuracy", "class %lld out of range: %lld classes", (long long)c,
             (long long)cm->classes);
  row = (const int64_t *)cm->matrix->data + c * cm->classes;
  for (p = 0; p < cm->classes; p++) n += row[p];
  return n > 0 ? (double)row[c] / (double)n : NAN;
}

#ifndef DL_NO_STDIO
/* Print the matrix as a table: a header line, then one row per true class
 * with its counts, its sample count n and its accuracy ("-" with no
 * samples). names: C class names, or NULL for 0, 1, ... Example:
 *   confusion matrix: 3 classes, 10 samples, accuracy 0.7000 (rows: true class, columns: predicted)
 *   true\pred  cat  dog bird |  n    acc
 *   cat          3    1    0 |  4 0.7500
 *   ...                                                                   */
DL_API void dl_confusion_fprint(FILE *f, const dl_confusion *cm, const char *const *names) {
  const int64_t C = cm->classes, *m = (const int64_t *)cm->matrix->data;
  int64_t t, p, maxc = 0, total = dl_confusion_total(cm);
  int w = 1, lw = 9 /* "true\pred" */, nw, k;
  char buf[32];
  for (t = 0; t < C * C; t++) if (m[t] > maxc) maxc = m[t];
  w = snprintf(buf, sizeof buf, "%lld", (long long)maxc);
  nw = snprintf(buf, sizeof buf, "%lld", (long long)total);
  if (nw < 1) nw = 1;
  for (t = 0; t < C; t++) {
    k = names && names[t] ? (int)strlen(names[t]) : snprintf(buf, sizeof buf, "%lld", (long long)t);
    if (k > w) w = k;
    if (k > lw) lw = k;
  }
  fprintf(f, "confusion matrix: %lld classes, %lld samples, accuracy ", (long long)C, (long long)total);
  if (total > 0) fprintf(f, "%.4f", dl_confusion_accuracy(cm));
  else fputs("-", f);
  fputs(" (rows: true class, columns: predicted)\n", f);
  fprintf(f, "%-*s", lw, "true\\pred");
  for (p = 0; p < C; p++) {
    if (names && names[p]) fprintf(f, " %*s", w, names[p]);
    else fprintf(f, " %*lld", w, (long long)p);
  }
  fprintf(f, " | %*s %6s\n", nw, "n", "acc");
  for (t = 0; t < C; t++) {
    int64_t n = 0;
    if (names && names[t]) fprintf(f, "%-*s", lw, names[t]);
    else fprintf(f, "%-*lld", lw, (long long)t);
    for (p = 0; p < C; p++) {
      fprintf(f, " %*lld", w, (long long)m[t * C + p]);
      n += m[t * C + p];
    }
    fprintf(f, " | %*lld", nw, (long long)n);
    if (n > 0) fprintf(f, " %6.4f\n", (double)m[t * C + t] / (double)n);
    else fprintf(f, " %6s\n", "-");
  }
}

/* >>csv -------------------------------------------------------------------- */

/* The default columns and the values that fill them (dl_csv_log_epoch). A
 * NaN field is written as an empty cell (e.g. no validation this epoch). */
typedef struct dl_epoch_stats {
  double epoch, train_loss, train_acc, val_loss, val_acc, lr, samples_per_s, wall_s; /* the CSV log's columns, in its order */
} dl_epoch_stats;
/* The columns of dl_epoch_stats: epoch, train_loss, train_acc, val_loss,
 * val_acc, lr, samples_per_s, wall_s. */
#define DL_EPOCH_STATS_COLUMNS 8
DL_API const char *dl__csv_default_column(int i) {
  static const char *const cols[DL_EPOCH_STATS_COLUMNS] = {
      "epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "samples_per_s", "wall_s"};
  return cols[i];
}

/* dl_csv_log_desc: zero fields are defaults.
 *   path       the file (required)
 *   columns    ncolumns names (no comma, quote or line break); NULL: the
 *              dl_epoch_stats columns: epoch,train_loss,train_acc,val_loss,
 *              val_acc,lr,samples_per_s,wall_s
 *   fresh      0: append to an existing log whose header is the same (a
 *              resumed run; a different header is DL_ERR_FORMAT), or start
 *              one; 1: truncate and start over
 *   digits     significant digits of the values (%.*g); 0: 10 */
typedef struct dl_csv_log_desc {
  const char *path; /* the file (required) */
  const char *const *columns; /* ncolumns names; NULL: the dl_epoch_stats columns */
  int ncolumns; /* number of columns */
  int fresh; /* 0: append to a log with the same header (or start one); 1: start over */
  int digits; /* significant digits of the values; 0: 10 */
} dl_csv_log_desc;

/* The log keeps the file's whole text and rewrites it through the atomic
 * writer (file.h: a unique temporary, fsync, rename) after every row: a
 * reader, a crash or a full disk sees the log as it was before the row or
 * after it, never half a row. Meant for a row per epoch (each row costs a
 * write of the file and an fsync); text NULL: not open. */
typedef struct dl_csv_log {
  char *path;          /* the file (a copy) */
  char *text;          /* its content: header and rows */
  size_t len, cap; /* text's length and capacity */
  int ncolumns, digits, default_columns; /* columns, digits, whether they are dl_epoch_stats' */
  int64_t rows;        /* rows written by this log object */
  dl_ctx *ctx; /* allocator and error reports */
} dl_csv_log;

/* Open (or create) the log and write the header if the file is new or
 * empty. DL_ERR_ARG (bad columns), DL_ERR_IO (cannot read or write it: the
 * message names the path and the reason), DL_ERR_FORMAT (existing header
 * differs), DL_ERR_NOMEM. */
/* The header line of desc's columns into header[size] (no newline), and
 * log's ncolumns / default_columns; DL_ERR_ARG naming op and the column. */
DL_API dl_status dl__csv_header(dl_ctx *ctx, const char *op, const dl_csv_log_desc *desc, char *header, size_t size,
                                dl_csv_log *log) {
  size_t at = 0;
  int i, n = desc->columns ? desc->ncolumns : DL_EPOCH_STATS_COLUMNS;
  if (n < 1) return dl_fail(ctx, DL_ERR_ARG, "%s(\"%s\"): %d columns", op, desc->path, n);
  for (i = 0; i < n; i++) {
    const char *c = desc->columns ? desc->columns[i] : dl__csv_default_column(i);
    size_t len = c ? strlen(c) : 0;
    if (!c || !len || strpbrk(c, ",\"\r\n"))
      return dl_fail(ctx, DL_ERR_ARG, "%s(\"%s\"): column %d (%s%s%s) is empty or holds a comma, quote or line break",
                     op, desc->path, i, c ? "\"" : "", c ? c : "NULL", c ? "\"" : "");
    if (at + len + 2 >= size)
      return dl_fail(ctx, DL_ERR_ARG, "%s(\"%s\"): header longer than %zu bytes", op, desc->path, size - 2);
    if (i) header[at++] = ',';
    memcpy(header + at, c, len);
    at += len;
  }
  header[at] = 0;
  log->ncolumns = n;
  log->default_columns = desc->columns == NULL;
  return DL_OK;
}

/* n more bytes of room in the log's text. */
DL_API dl_status dl__csv_room(dl_csv_log *log, size_t n) {
  size_t cap = log->cap ? log->cap : 4096;
  char *t;
  if (log->len + n + 1 <= log->cap) return DL_OK;
  while (cap < log->len + n + 1) cap *= 2;
  t = (char *)dl_alloc(log->ctx, cap);
  if (!t) return dl_fail(log->ctx, DL_ERR_NOMEM, "dl_csv_log: out of memory holding %zu bytes of \"%s\"", cap, log->path);
  if (log->len) memcpy(t, log->text, log->len);
  dl_free(log->ctx, log->text);
  log->text = t;
  log->cap = cap;
  return DL_OK;
}
DL_API dl_status dl__csv_add(dl_csv_log *log, const char *s, size_t n) {
  dl_status st = dl__csv_room(log, n);
  if (st != DL_OK) return st;
  memcpy(log->text + log->len, s, n);
  log->len += n;
  log->text[log->len] = 0;
  return DL_OK;
}
DL_API void dl__csv_free(dl_csv_log *log) {
  dl_free(log->ctx, log->text);
  dl_free(log->ctx, log->path);
  log->text = log->path = NULL;
  log->len = log->cap = 0;
}
/* The log's text to its file, atomically. */
DL_API dl_status dl__csv_write(dl_csv_log *log, const char *op) {
#ifdef DL__IO_FILES
  dl_status st = dl_atomic_write(log->ctx, log->path, log->text, log->len, NULL);
  if (st != DL_OK)
    return dl_fail(log->ctx, st, "%s: cannot write \"%s\": %s", op, log->path, dl_ctx_message(log->ctx));
  return DL_OK;
#else
  return dl_fail(log->ctx, DL_ERR_UNSUPPORTED, "%s(\"%s\"): files are written through POSIX (file.h)", op, log->path);
#endif
}

/* Open the CSV log that desc names and write its header row; DL_OK, or a
 * failure status with the message in ctx. */
DL_API dl_status dl_csv_log_open(dl_csv_log *log, dl_ctx *ctx, const dl_csv_log_desc *desc) {
  char header[4096];
  dl_status st;
  FILE *f;
  memset(log, 0, sizeof *log);
  log->ctx = ctx;
  if (!desc->path) return dl_fail(ctx, DL_ERR_ARG, "dl_csv_log_open: no path");
  if ((st = dl__csv_header(ctx, "dl_csv_log_open", desc, header, sizeof header, log)) != DL_OK) return st;
  log->path = dl__io_strdup(ctx, desc->path);
  if (!log->path || dl__csv_room(log, 0) != DL_OK) {
    dl__csv_free(log);
    return dl_fail(ctx, DL_ERR_NOMEM, "dl_csv_log_open(\"%s\"): out of memory", desc->path);
  }
  if (!desc->fresh && (f = fopen(desc->path, "rb")) != NULL) { /* the existing log, kept */
    char buf[4096];
    size_t got;
    int bad = 0;
    while (!bad && (got = fread(buf, 1, sizeof buf, f)) > 0)
      if (log->len + got > ((size_t)1 << 30) || dl__csv_add(log, buf, got) != DL_OK) bad = 1;
    if (ferror(f) || bad) {
      fclose(f);
      st = bad ? DL_ERR_NOMEM : DL_ERR_IO;
      dl_fail(ctx, st, "dl_csv_log_open: cannot read \"%s\"%s", desc->path, bad ? " (past 1 GiB, or out of memory)" : "");
      dl__csv_free(log);
      return st;
    }
    fclose(f);
  }
  if (log->len) {
    const size_t hl = strlen(header);
    const char *nl = strchr(log->text, '\n');
    size_t l = nl ? (size_t)(nl - log->text) : log->len;
    while (l && log->text[l - 1] == '\r') l--;
    if (l != hl || memcmp(log->text, header, hl) != 0) {
      char first[256];
      const size_t fl = l < sizeof first - 1 ? l : sizeof first - 1;
      memcpy(first, log->text, fl);
      first[fl] = 0;
      dl_fail(ctx, DL_ERR_FORMAT,
              "dl_csv_log_open(\"%s\"): the file's columns \"%.200s\" are not this log's \"%.200s\" "
              "(set .fresh = 1 to start a new log)", desc->path, first, header);
      dl__csv_free(log);
      return DL_ERR_FORMAT;
    }
    if (log->text[log->len - 1] != '\n' && dl__csv_add(log, "\n", 1) != DL_OK) { /* a row cut short: own line */
      dl__csv_free(log);
      return DL_ERR_NOMEM;
    }
  } else if ((st = dl__csv_add(log, header, strlen(header))) != DL_OK || (st = dl__csv_add(log, "\n", 1)) != DL_OK) {
    dl__csv_free(log);
    return st;
  }
  if ((st = dl__csv_write(log, "dl_csv_log_open")) != DL_OK) {
    dl__csv_free(log);
    return st;
  }
  log->digits = desc->digits > 0 && desc->digits <= 17 ? desc->digits : 10;
  return DL_OK;
}

/* Append one row of ncolumns values (NaN: an empty cell): the file is
 * rewritten atomically with it. DL_ERR_IO when the write fails (disk
 * full...): the file keeps its rows before this one, and this row stays in
 * the log's text, written with the next row that succeeds. */
DL_API dl_status dl_csv_log_row(dl_csv_log *log, const double *values) {
  char cell[40];
  int i;
  dl_status st;
  if (!log->text) return dl_fail(log->ctx, DL_ERR_ARG, "dl_csv_log_row: the log is not open");
  for (i = 0; i < log->ncolumns; i++) {
    int k = 0;
    if (i && (st = dl__csv_add(log, ",", 1)) != DL_OK) return st;
    if (values[i] == values[i]) k = snprintf(cell, sizeof cell, "%.*g", log->digits, values[i]);
    if (k > 0 && (st = dl__csv_add(log, cell, (size_t)k)) != DL_OK) return st;
  }
  if ((st = dl__csv_add(log, "\n", 1)) != DL_OK) return st;
  if ((st = dl__csv_write(log, "dl_csv_log_row")) != DL_OK) return st;
  log->rows++;
  return DL_OK;
}
/* A row of the default columns (the log must use them: panics otherwise). */
DL_API dl_status dl_csv_log_epoch(dl_csv_log *log, const dl_epoch_stats *s) {
  double v[DL_EPOCH_STATS_COLUMNS];
  if (log->text && !log->default_columns)
    DL_PANIC(log->ctx, "dl_csv_log_epoch", "the log has its own %d columns; use dl_csv_log_row", log->ncolumns);
  v[0] = s->epoch; v[1] = s->train_loss; v[2] = s->train_acc; v[3] = s->val_loss;
  v[4] = s->val_acc; v[5] = s->lr; v[6] = s->samples_per_s; v[7] = s->wall_s;
  return dl_csv_log_row(log, v);
}
/* Close the log (idempotent): every row was written when it was given, so
 * this only frees the text. DL_OK. */
DL_API dl_status dl_csv_log_close(dl_csv_log *log) {
  if (log->text || log->path) dl__csv_free(log);
  return DL_OK;
}

/* Write a whole log at once through file.h's atomic writer: the header
 * (desc's columns, or the default epoch columns) and nrows rows of the
 * columns' values, row-major (NaN: an empty cell), %.*g with desc->digits.
 * The file is a temporary renamed over desc->path, so a full disk or a
 * crash leaves the previous log whole, never a cut row (desc->fresh is
 * ignored: the log is always whole). DL_ERR_ARG (bad columns), DL_ERR_IO,
 * DL_ERR_NOMEM; DL_ERR_UNSUPPORTED without POSIX files. */
DL_API dl_status dl_csv_save(dl_ctx *ctx, const dl_csv_log_desc *desc, const double *values, int64_t nrows) {
#ifdef DL__IO_FILES
  dl_csv_log_desc d = *desc;
  dl_csv_log probe;
  dl_atomic_file f;
  char header[4096 + 2], cell[40];
  int64_t r;
  int c, n, digits = desc->digits > 0 && desc->digits <= 17 ? desc->digits : 10;
  dl_status st;
  if (!desc->path) return dl_fail(ctx, DL_ERR_ARG, "dl_csv_save: no path");
  n = desc->columns ? desc->ncolumns : DL_EPOCH_STATS_COLUMNS;
  if (nrows < 0 || (nrows > 0 && !values)) return dl_fail(ctx, DL_ERR_ARG, "dl_csv_save(\"%s\"): %lld rows", desc->path, (long long)nrows);
  d.fresh = 1;
  if ((st = dl__csv_header(ctx, "dl_csv_save", &d, header, sizeof header - 1, &probe)) != DL_OK) return st;
  if ((st = dl_atomic_begin(&f, ctx, desc->path, NULL)) != DL_OK) return st;
  dl_atomic_put(&f, header, strlen(header));
  dl_atomic_put(&f, "\n", 1);
  for (r = 0; r < nrows; r++) {
    for (c = 0; c < n; c++) {
      double v = values[r * n + c];
      int k = 0;
      if (c) dl_atomic_put(&f, ",", 1);
      if (v == v) k = snprintf(cell, sizeof cell, "%.*g", digits, v);
      if (k > 0) dl_atomic_put(&f, cell, (size_t)k);
    }
    dl_atomic_put(&f, "\n", 1);
  }
  return dl_atomic_commit(&f);
#else
  (void)values;
  (void)nrows;
  return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_csv_save(\"%s\"): files are written through POSIX (file.h)",
                 desc->path ? desc->path : "(null)");
#endif
}
#endif /* DL_NO_STDIO */

/* >>chart ------------------------------------------------------------------ */

/* dl_chart_desc: zero fields are defaults.
 *   n            points per curve (epochs), >= 1
 *   x            [n] x values, increasing; NULL: 1, 2, ..., n (epochs)
 *   train_loss, val_loss, train_acc, val_acc
 *                [n] each, or NULL. A NaN or infinite value is no point (the
 *                line joins its finite neighbours). The loss panel is drawn
 *                when a loss array is given, the accuracy panel when an
 *                accuracy array is; at least one must be.
 *   width, height  pixels (16 .. 16384); 0: 1000 x 420 with two panels,
 *                600 x 420 with one
 *   scale        font and line scale in pixels per font pixel; 0: 2 when
 *                height >= 300, else 1
 *   title        a line above the panels; NULL: none
 *   x_label      NULL: "epoch"
 *   train_name, val_name   the legend's names; NULL: "train", "val" */
typedef struct dl_chart_desc {
  int64_t n; /* points per curve (epochs), >= 1 */
  const double *x; /* [n] x values, increasing; NULL: 1 .. n */
  const double *train_loss, *val_loss, *train_acc, *val_acc; /* [n] each, or NULL (see above) */
  int width, height, scale; /* pixels and font scale; 0: defaults */
  const char *title, *x_label, *train_name, *val_name; /* the title, the x axis' label and the legend's names; NULL: defaults */
} dl_chart_desc;

/* Where a panel went. The frame's left column and bottom row are the axes
 * (black); data (x, y) is drawn at pixel
 *   px = px0 + (x - xmin) / (xmax - xmin) * (px1 - px0)
 *   py = py0 + (y - ymin) / (ymax - ymin) * (py1 - py0)     (py1 < py0)
 * with pixel centres at integer coordinates (dl_chart_map). The y range is
 * the data's, widened to whole ticks (ystep apart); the x range is the
 * data's. */
typedef struct dl_chart_panel {
  int present; /* 1: the panel is drawn */
  int left, top, right, bottom;       /* the frame, inclusive */
  double px0, px1, py0, py1;          /* pixels of xmin, xmax, ymin, ymax */
  double xmin, xmax, ymin, ymax;      /* the data range shown */
  double xstep, ystep;                /* tick spacing */
} dl_chart_panel;
/* Where a chart's two panels (loss, accuracy) go in the image, with their
 * pixel size and scale. */
typedef struct dl_chart_layout {
  int width, height, scale; /* the image's pixels and the font scale */
  dl_chart_panel panel[2];            /* [0] loss, [1] accuracy */
} dl_chart_layout;

/* The colours: train, val (matplotlib's first two), axes and text, grid. */
#define DL_CHART_TRAIN_RGB 31, 119, 180
/* The validation curve's colour (R, G, B). */
#define DL_CHART_VAL_RGB 255, 127, 14

/* Data coordinates (x, y) -> pixel coordinates in panel p. */
DL_API void dl_chart_map(const dl_chart_panel *p, double x, double y, double *px, double *py) {
  *px = p->px0 + (x - p->xmin) / (p->xmax - p->xmin) * (p->px1 - p->px0);
  *py = p->py0 + (y - p->ymin) / (p->ymax - p->ymin) * (p->py1 - p->py0);
}

/* One glyph of the font: {advance, 9 rows top to bottom, bit k = column k};
 * rows 0..6 hold capitals and digits, 7..8 descenders. Glyphs are
 * stb_easy_font.h's (v1.1, Sean Barrett, public domain), rasterised. */
DL_API const unsigned char *dl__glyph(int c) {
  static const unsigned char font[95][10] = {
      {6,0,0,0,0,0,0,0,0,0}, {3,1,1,1,1,0,0,1,0,0}, {5,5,5,0,0,0,0,0,0,0}, {7,10,10,31,10,31,10,10,0,0},
      {7,4,30,5,14,20,15,4,0,0}, {7,19,19,8,4,2,25,25,0,0}, {7,6,9,5,2,5,9,22,0,0}, {4,2,2,1,0,0,0,0,0,0},
      {4,2,1,1,1,1,1,2,0,0}, {4,1,2,2,2,2,2,1,0,0}, {7,0,17,10,31,10,17,0,0,0}, {7,0,4,4,31,4,4,0,0,0},
      {4,0,0,0,0,0,2,2,1,0}, {6,0,0,0,15,0,0,0,0,0}, {3,0,0,0,0,0,0,1,0,0}, {5,0,4,4,2,2,1,1,0,0},
      {6,6,9,13,11,9,9,6,0,0}, {6,4,6,4,4,4,4,14,0,0}, {6,7,8,8,4,2,1,15,0,0}, {6,7,8,8,6,8,8,7,0,0},
      {6,9,9,9,15,8,8,8,0,0}, {6,15,1,1,7,8,8,7,0,0}, {6,6,1,1,7,9,9,6,0,0}, {6,15,8,8,4,4,2,2,0,0},
      {6,6,9,9,6,9,9,6,0,0}, {6,6,9,9,14,8,4,2,0,0}, {3,0,0,1,0,0,1,0,0,0}, {4,0,0,2,0,0,2,2,1,0},
      {5,0,4,2,1,2,4,0,0,0}, {6,0,0,15,0,0,15,0,0,0}, {5,0,1,2,4,2,1,0,0,0}, {7,14,17,16,8,4,0,4,0,0},
      {9,62,65,93,85,125,1,62,0,0}, {6,6,9,9,15,9,9,9,0,0}, {6,7,9,9,7,9,9,7,0,0}, {6,14,1,1,1,1,1,14,0,0},
      {6,7,9,9,9,9,9,7,0,0}, {6,15,1,1,7,1,1,15,0,0}, {6,15,1,1,7,1,1,1,0,0}, {7,14,1,1,25,17,17,14,0,0},
      {6,9,9,9,15,9,9,9,0,0}, {5,7,2,2,2,2,2,7,0,0}, {6,8,8,8,8,8,8,7,0,0}, {6,9,9,5,7,5,9,9,0,0},
      {6,1,1,1,1,1,1,15,0,0}, {7,17,27,21,21,17,17,17,0,0}, {6,9,11,13,9,9,9,9,0,0}, {6,6,9,9,9,9,9,6,0,0},
      {6,7,9,9,7,1,1,1,0,0}, {7,14,17,17,17,21,9,22,0,0}, {6,7,9,9,7,5,9,9,0,0}, {6,14,1,1,6,8,8,7,0,0},
      {7,31,4,4,4,4,4,4,0,0}, {6,9,9,9,9,9,9,15,0,0}, {7,17,17,17,10,10,4,4,0,0}, {7,17,17,21,21,31,27,17,0,0},
      {7,17,17,10,4,10,17,17,0,0}, {7,17,17,10,10,4,4,4,0,0}, {6,15,8,4,2,1,1,15,0,0}, {4,3,1,1,1,1,1,3,0,0},
      {6,1,1,2,2,4,4,8,8,0}, {4,3,2,2,2,2,2,3,0,0}, {7,0,4,10,17,0,0,0,0,0}, {6,0,0,0,0,0,0,0,15,0},
      {4,1,1,2,0,0,0,0,0,0}, {6,0,0,14,9,9,9,14,0,0}, {6,1,1,7,9,9,9,7,0,0}, {6,0,0,14,1,1,1,14,0,0},
      {6,8,8,14,9,9,9,14,0,0}, {6,0,0,6,9,15,1,6,0,0}, {6,12,2,7,2,2,2,2,0,0}, {6,0,0,14,9,9,9,14,8,6},
      {6,1,1,7,9,9,9,9,0,0}, {3,0,1,0,1,1,1,1,0,0}, {5,0,4,0,4,4,4,4,4,3}, {6,1,1,9,5,3,5,9,0,0},
      {3,1,1,1,1,1,1,1,0,0}, {7,0,0,11,21,21,21,17,0,0}, {6,0,0,7,9,9,9,9,0,0}, {6,0,0,6,9,9,9,6,0,0},
      {6,0,0,7,9,9,9,7,1,1}, {6,0,0,14,9,9,9,14,8,8}, {5,0,0,5,3,1,1,1,0,0}, {5,0,0,6,1,2,4,3,0,0},
      {5,2,2,7,2,2,2,2,0,0}, {6,0,0,9,9,9,9,6,0,0}, {7,0,0,17,17,10,10,4,0,0}, {7,0,0,17,17,17,21,27,0,0},
      {7,0,0,17,10,4,10,17,0,0}, {6,0,0,9,9,9,9,14,8,6}, {6,0,0,15,8,4,2,15,0,0}, {5,4,2,2,1,2,2,4,0,0},
      {3,1,1,1,1,1,1,1,0,0}, {5,1,2,2,4,2,2,1,0,0}, {6,0,0,10,5,0,0,0,0,0}};
  return font[(c >= 32 && c < 127) ? c - 32 : '?' - 32];
}

/* An RGB canvas with a clip rectangle (inclusive). */
typedef struct dl__canvas {
  unsigned char *px;
  int w, h;
  int cx0, cy0, cx1, cy1;
} dl__canvas;

DL_API void dl__canvas_clip(dl__canvas *c, int x0, int y0, int x1, int y1) {
  c->cx0 = x0 < 0 ? 0 : x0;
  c->cy0 = y0 < 0 ? 0 : y0;
  c->cx1 = x1 >= c->w ? c->w - 1 : x1;
  c->cy1 = y1 >= c->h ? c->h - 1 : y1;
}
/* Blend colour col over pixel (x, y) with opacity a in [0, 1]. */
DL_API void dl__canvas_put(dl__canvas *c, int x, int y, const unsigned char *col, double a) {
  unsigned char *p;
  int k;
  if (x < c->cx0 || x > c->cx1 || y < c->cy0 || y > c->cy1 || !(a > 0)) return;
  p = c->px + ((size_t)y * (size_t)c->w + (size_t)x) * 3;
  if (a >= 1) { p[0] = col[0]; p[1] = col[1]; p[2] = col[2]; return; }
  for (k = 0; k < 3; k++) p[k] = (unsigned char)floor((double)p[k] * (1 - a) + (double)col[k] * a + 0.5);
}
DL_API void dl__canvas_fill(dl__canvas *c, int x0, int y0, int x1, int y1, const unsigned char *col) {
  int x, y;
  for (y = y0; y <= y1; y++)
    for (x = x0; x <= x1; x++) dl__canvas_put(c, x, y, col, 1);
}
/* Width in pixels of text at scale s (the advance of every glyph). */
DL_API int dl__text_width(const char *s, int scale) {
  int w = 0;
  for (; *s; s++) w += dl__glyph((unsigned char)*s)[0];
  return w > 0 ? (w - 1) * scale : 0;
}
/* Draw text with its top-left corner at (x, y); rows 0..6 are the capitals. */
DL_API void dl__text(dl__canvas *c, int x, int y, const char *s, int scale, const unsigned char *col) {
  for (; *s; s++) {
    const unsigned char *g = dl__glyph((unsigned char)*s);
    int r, k;
    for (r = 0; r < 9; r++)
      for (k = 0; k < 8; k++)
        if (g[1 + r] >> k & 1) dl__canvas_fill(c, x + k * scale, y + r * scale, x + k * scale + scale - 1, y + r * scale + scale - 1, col);
    x += g[0] * scale;
  }
}

/* Coverage of an anti-aliased segment of half-width hw into cov (w x h
 * bytes, max with what is there): a pixel at distance d from the segment
 * gets clamp(hw + 0.5 - d, 0, 1). */
DL_API void dl__cov_segment(unsigned char *cov, int w, int h, double ax, double ay, double bx, double by, double hw) {
  const double dx = bx - ax, dy = by - ay, l2 = dx * dx + dy * dy;
  int x, y, x0 = (int)floor((ax < bx ? ax : bx) - hw - 1), x1 = (int)ceil((ax > bx ? ax : bx) + hw + 1);
  int y0 = (int)floor((ay < by ? ay : by) - hw - 1), y1 = (int)ceil((ay > by ? ay : by) + hw + 1);
  if (x0 < 0) x0 = 0;
  if (y0 < 0) y0 = 0;
  if (x1 > w - 1) x1 = w - 1;
  if (y1 > h - 1) y1 = h - 1;
  for (y = y0; y <= y1; y++)
    for (x = x0; x <= x1; x++) {
      double t = l2 > 0 ? (((double)x - ax) * dx + ((double)y - ay) * dy) / l2 : 0, ex, ey, cv;
      unsigned char v;
      if (t < 0) t = 0;
      if (t > 1) t = 1;
      ex = (double)x - (ax + t * dx);
      ey = (double)y - (ay + t * dy);
      cv = hw + 0.5 - sqrt(ex * ex + ey * ey);
      if (cv <= 0) continue;
      v = (unsigned char)(cv >= 1 ? 255 : cv * 255 + 0.5);
      if (v > cov[(size_t)y * (size_t)w + (size_t)x]) cov[(size_t)y * (size_t)w + (size_t)x] = v;
    }
}

/* A "nice" tick step near range / target: 1, 2, 2.5 or 5 times a power of
 * ten (2 instead of 2.5 when integers = 1, and then at least 1). */
DL_API double dl__nice_step(double range, int target, int integers) {
  double raw = range / (double)target, mag, f, s;
  if (!(raw > 0)) raw = 1;
  mag = pow(10, floor(log10(raw)));
  f = raw / mag;
  f *= 1 - 1e-9; /* 0.1 / 5 may come out as 0.020000000000000007 */
  s = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? (integers ? 2 : 2.5) : f <= 5 ? 5 : 10;
  s *= mag;
  if (integers && s < 1) s = 1;
  return s;
}
/* A tick's text: as many decimals as the step needs. */
DL_API void dl__tick_label(char *buf, size_t n, double v, double step) {
  int e = (int)floor(log10(step) + 1e-9), dec;
  double m = step / pow(10, e);
  dec = (e < 0 ? -e : 0) + (fabs(m - 2.5) < 1e-6 && e <= 0 ? 1 : 0);
  if (fabs(v) < step * 1e-6) v = 0;
  if (dec > 6 || fabs(v) >= 1e7) snprintf(buf, n, "%.3g", v);
  else snprintf(buf, n, "%.*f", dec, v);
}

/* The panels' series: [panel][0 train, 1 val]. */
DL_API const double *dl__chart_series(const dl_chart_desc *d, int panel, int k) {
  return panel == 0 ? (k == 0 ? d->train_loss : d->val_loss) : (k == 0 ? d->train_acc : d->val_acc);
}
DL_API double dl__chart_x(const dl_chart_desc *d, int64_t i) { return d->x ? d->x[i] : (double)(i + 1); }

/* Fill in the layout for desc (defaults resolved). DL_ERR_ARG with a
 * message when desc cannot be drawn. */
DL_API dl_status dl_chart_layout_of(dl_ctx *ctx, const dl_chart_desc *d, dl_chart_layout *L) {
  int np = 0, k, s, W, H, ch, tick, top, bottom, i;
  int panels[2];
  int64_t j;
  double xmin = HUGE_VAL, xmax = -HUGE_VAL;
  memset(L, 0, sizeof *L);
  if (!d || d->n < 1)
    return dl_fail(ctx, DL_ERR_ARG, "dl_chart: need at least one point (n = %lld)", d ? (long long)d->n : 0LL);
  for (i = 0; i < 2; i++)
    if (dl__chart_series(d, i, 0) || dl__chart_series(d, i, 1)) panels[np++] = i;
  if (!np) return dl_fail(ctx, DL_ERR_ARG, "dl_chart: no curve given (train_loss, val_loss, train_acc, val_acc are NULL)");
  W = d->width ? d->width : (np == 2 ? 1000 : 600);
  H = d->height ? d->height : 420;
  if (W < 16 || H < 16 || W > 16384 || H > 16384)
    return dl_fail(ctx, DL_ERR_ARG, "dl_chart: size %d x %d is outside 16 .. 16384", W, H);
  s = d->scale > 0 ? d->scale : (H >= 300 ? 2 : 1);
  L->width = W;
  L->height = H;
  L->scale = s;
  for (j = 0; j < d->n; j++) {
    const double x = dl__chart_x(d, j);
    if (!isfinite(x)) continue;
    if (x < xmin) xmin = x;
    if (x > xmax) xmax = x;
  }
  if (!(xmin <= xmax)) return dl_fail(ctx, DL_ERR_ARG, "dl_chart: no finite x value");
  if (xmax - xmin <= 1e-12 * (fabs(xmax) > 1 ? fabs(xmax) : 1)) { xmin -= 0.5; xmax += 0.5; }
  ch = 9 * s;
  tick = 2 + 2 * s;
  top = 4 * s + (d->title ? ch + 4 * s : 0) + ch + 3 * s;
  bottom = H - 1 - (4 * s + ch + 3 * s + ch + 2 * s + tick);
  for (k = 0; k < np; k++) {
    dl_chart_panel *P = &L->panel[panels[k]];
    int rx0 = W * k / np, rx1 = W * (k + 1) / np - 1, maxw = 0, pad, series;
    double lo = HUGE_VAL, hi = -HUGE_VAL, st, v;
    char buf[64];
    for (series = 0; series < 2; series++) {
      const double *y = dl__chart_series(d, panels[k], series);
      if (!y) continue;
      for (j = 0; j < d->n; j++)
        if (isfinite(y[j]) && isfinite(dl__chart_x(d, j))) {
          if (y[j] < lo) lo = y[j];
          if (y[j] > hi) hi = y[j];
        }
    }
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    if (hi - lo <= 1e-12 * (fabs(hi) > 1 ? fabs(hi) : 1)) {
      double dd = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
      lo -= dd;
      hi += dd;
    }
    st = dl__nice_step(hi - lo, 5, 0);
    P->present = 1;
    P->ystep = st;
    P->ymin = floor(lo / st + 1e-9) * st;
    P->ymax = ceil(hi / st - 1e-9) * st;
    for (v = P->ymin / st; v <= P->ymax / st + 1e-9; v += 1) {
      dl__tick_label(buf, sizeof buf, floor(v + 0.5) * st, st);
      if (dl__text_width(buf, s) > maxw) maxw = dl__text_width(buf, s);
    }
    P->left = rx0 + 6 * s + maxw + 2 * s + tick;
    P->right = rx1 - 8 * s;
    P->top = top;
    P->bottom = bottom;
    if (P->right - P->left < 24 * s || P->bottom - P->top < 24 * s)
      return dl_fail(ctx, DL_ERR_ARG, "dl_chart: %d x %d pixels is too small for %d panel%s at scale %d", W, H, np,
                     np > 1 ? "s" : "", s);
    pad = 5 * s;
    P->xmin = xmin;
    P->xmax = xmax;
    P->xstep = dl__nice_step(xmax - xmin, (P->right - P->left) / (45 * s) > 2 ? (P->right - P->left) / (45 * s) : 2,
                             d->x == NULL);
    P->px0 = P->left + pad;
    P->px1 = P->right - pad;
    P->py0 = P->bottom - pad;
    P->py1 = P->top + pad;
  }
  return DL_OK;
}

/* Legend box of a panel at one of four corners; returns how many points
 * sampled along the panel's curves fall in it (fewer is better). */
DL_API int dl__legend_score(const dl_chart_desc *d, int panel, const dl_chart_panel *P, int bx0, int by0, int bx1,
                            int by1) {
  int series, hits = 0;
  for (series = 0; series < 2; series++) {
    const double *y = dl__chart_series(d, panel, series);
    double lx = 0, ly = 0;
    int have = 0;
    int64_t j;
    if (!y) continue;
    for (j = 0; j < d->n; j++) {
      double px, py;
      int m, steps;
      if (!isfinite(y[j]) || !isfinite(dl__chart_x(d, j))) continue;
      dl_chart_map(P, dl__chart_x(d, j), y[j], &px, &py);
      if (!have) { lx = px; ly = py; have = 1; }
      steps = (int)(fabs(px - lx) + fabs(py - ly)) / 2 + 1;
      for (m = 0; m <= steps; m++) {
        const double qx = lx + (px - lx) * m / steps, qy = ly + (py - ly) * m / steps;
        hits += qx >= bx0 && qx <= bx1 && qy >= by0 && qy <= by1;
      }
      lx = px;
      ly = py;
    }
  }
  return hits;
}

/* Draw the chart into rgb (width * height * 3 bytes, rows top to bottom,
 * the layout's size: dl_chart_layout_of tells it before drawing). The
 * layout goes to *layout when not NULL. DL_ERR_ARG (nothing to draw, bad
 * size) or DL_ERR_NOMEM (the w * h scratch of the line coverage). */
DL_API dl_status dl_chart_render(dl_ctx *ctx, const dl_chart_desc *d, unsigned char *rgb, dl_chart_layout *layout) {
  static const unsigned char white[3] = {255, 255, 255}, black[3] = {0, 0, 0}, grid[3] = {226, 226, 226},
                             text[3] = {30, 30, 30}, border[3] = {170, 170, 170};
  static const unsigned char colours[2][3] = {{DL_CHART_TRAIN_RGB}, {DL_CHART_VAL_RGB}};
  dl_chart_layout L;
  dl__canvas cv;
  unsigned char *cov;
  int panel, s, W, H, ch;
  dl_status st = dl_chart_layout_of(ctx, d, &L);
  if (layout) *layout = L;
  if (st != DL_OK) return st;
  W = L.width;
  H = L.height;
  s = L.scale;
  ch = 9 * s;
  cov = (unsigned char *)dl_alloc(ctx, (size_t)W * (size_t)H);
  if (!cov) return ctx ? ctx->status : DL_ERR_NOMEM;
  cv.px = rgb;
  cv.w = W;
  cv.h = H;
  dl__canvas_clip(&cv, 0, 0, W - 1, H - 1);
  memset(rgb, 255, (size_t)W * (size_t)H * 3);
  if (d->title) dl__text(&cv, (W - dl__text_width(d->title, s)) / 2, 4 * s, d->title, s, black);
  for (panel = 0; panel < 2; panel++) {
    const dl_chart_panel *P = &L.panel[panel];
    const char *names[2];
    char buf[64];
    double v, px, py;
    int series, tick = 2 + 2 * s, nleg = 0, legw = 0, best = -1, bestscore = 0, corner, i;
    if (!P->present) continue;
    names[0] = d->train_name ? d->train_name : "train";
    names[1] = d->val_name ? d->val_name : "val";
    /* grid */
    for (v = floor(P->ymin / P->ystep + 0.5); v <= P->ymax / P->ystep + 1e-9; v += 1) {
      dl_chart_map(P, P->xmin, v * P->ystep, &px, &py);
      dl__canvas_fill(&cv, P->left + 1, (int)floor(py + 0.5), P->right - 1, (int)floor(py + 0.5), grid);
    }
    for (v = ceil(P->xmin / P->xstep - 1e-9); v <= P->xmax / P->xstep + 1e-9; v += 1) {
      dl_chart_map(P, v * P->xstep, P->ymin, &px, &py);
      dl__canvas_fill(&cv, (int)floor(px + 0.5), P->top + 1, (int)floor(px + 0.5), P->bottom - 1, grid);
    }
    /* curves: coverage of the polyline, then markers, composited per series */
    for (series = 0; series < 2; series++) {
      const double *y = dl__chart_series(d, panel, series);
      double lx = 0, ly = 0;
      int have = 0;
      int64_t j, finite = 0;
      if (!y) continue;
      memset(cov, 0, (size_t)W * (size_t)H);
      for (j = 0; j < d->n; j++) finite += isfinite(y[j]) && isfinite(dl__chart_x(d, j));
      for (j = 0; j < d->n; j++) {
        if (!isfinite(y[j]) || !isfinite(dl__chart_x(d, j))) continue;
        dl_chart_map(P, dl__chart_x(d, j), y[j], &px, &py);
        if (have || finite == 1) dl__cov_segment(cov, W, H, have ? lx : px, have ? ly : py, px, py, 0.9 * s);
        if (finite <= 60) dl__cov_segment(cov, W, H, px, py, px, py, 1.6 * s + 0.5);
        lx = px;
        ly = py;
        have = 1;
      }
      dl__canvas_clip(&cv, P->left + 1, P->top + 1, P->right - 1, P->bottom - 1);
      {
        int x, yy;
        for (yy = cv.cy0; yy <= cv.cy1; yy++)
          for (x = cv.cx0; x <= cv.cx1; x++) {
            const unsigned char c = cov[(size_t)yy * (size_t)W + (size_t)x];
            if (c) dl__canvas_put(&cv, x, yy, colours[series], c / 255.0);
          }
      }
      dl__canvas_clip(&cv, 0, 0, W - 1, H - 1);
      nleg++;
      if (dl__text_width(names[series], s) > legw) legw = dl__text_width(names[series], s);
    }
    /* frame, ticks, tick labels */
    dl__canvas_fill(&cv, P->left, P->top, P->right, P->top, black);
    dl__canvas_fill(&cv, P->left, P->bottom, P->right, P->bottom, black);
    dl__canvas_fill(&cv, P->left, P->top, P->left, P->bottom, black);
    dl__canvas_fill(&cv, P->right, P->top, P->right, P->bottom, black);
    for (v = floor(P->ymin / P->ystep + 0.5); v <= P->ymax / P->ystep + 1e-9; v += 1) {
      int yi;
      dl_chart_map(P, P->xmin, v * P->ystep, &px, &py);
      yi = (int)floor(py + 0.5);
      dl__canvas_fill(&cv, P->left - tick, yi, P->left - 1, yi, black);
      dl__tick_label(buf, sizeof buf, v * P->ystep, P->ystep);
      dl__text(&cv, P->left - tick - 2 * s - dl__text_width(buf, s), yi - (7 * s) / 2, buf, s, text);
    }
    for (v = ceil(P->xmin / P->xstep - 1e-9); v <= P->xmax / P->xstep + 1e-9; v += 1) {
      int xi;
      dl_chart_map(P, v * P->xstep, P->ymin, &px, &py);
      xi = (int)floor(px + 0.5);
      dl__canvas_fill(&cv, xi, P->bottom + 1, xi, P->bottom + tick, black);
      dl__tick_label(buf, sizeof buf, v * P->xstep, P->xstep);
      dl__text(&cv, xi - dl__text_width(buf, s) / 2, P->bottom + tick + 3 * s, buf, s, text);
    }
    {
      const char *xl = d->x_label ? d->x_label : "epoch";
      const char *pt = panel == 0 ? "loss" : "accuracy";
      dl__text(&cv, (P->left + P->right - dl__text_width(xl, s)) / 2, P->bottom + tick + 3 * s + ch + 2 * s, xl, s, text);
      dl__text(&cv, (P->left + P->right - dl__text_width(pt, s)) / 2, P->top - 3 * s - ch, pt, s, black);
    }
    /* legend: the corner its box covers the fewest curve points in
     * (top right, bottom right, top left, bottom left on ties) */
    if (nleg) {
      const int pad = 3 * s, line = 12 * s, bw = pad + line + 3 * s + legw + pad, bh = pad + nleg * (ch + 2 * s) + pad - 2 * s;
      int bx0 = 0, by0 = 0, row = 0;
      for (corner = 0; corner < 4; corner++) {
        const int x0 = corner < 2 ? P->right - 4 * s - bw : P->left + 4 * s, y0 = corner % 2 == 0 ? P->top + 4 * s : P->bottom - 4 * s - bh;
        const int score = dl__legend_score(d, panel, P, x0 - 2 * s, y0 - 2 * s, x0 + bw + 2 * s, y0 + bh + 2 * s);
        if (best < 0 || score < bestscore) { best = corner; bestscore = score; bx0 = x0; by0 = y0; }
      }
      dl__canvas_fill(&cv, bx0, by0, bx0 + bw, by0 + bh, white);
      dl__canvas_fill(&cv, bx0, by0, bx0 + bw, by0, border);
      dl__canvas_fill(&cv, bx0, by0 + bh, bx0 + bw, by0 + bh, border);
      dl__canvas_fill(&cv, bx0, by0, bx0, by0 + bh, border);
      dl__canvas_fill(&cv, bx0 + bw, by0, bx0 + bw, by0 + bh, border);
      for (i = 0; i < 2; i++) {
        const int ty = by0 + pad + row * (ch + 2 * s);
        if (!dl__chart_series(d, panel, i)) continue;
        memset(cov, 0, (size_t)W * (size_t)H);
        dl__cov_segment(cov, W, H, bx0 + pad, ty + 3.5 * s, bx0 + pad + line, ty + 3.5 * s, 0.9 * s);
        {
          int x, yy;
          for (yy = ty; yy <= ty + 7 * s; yy++)
            for (x = bx0 + pad - 2 * s; x <= bx0 + pad + line + 2 * s; x++)
              if (x >= 0 && x < W && yy >= 0 && yy < H && cov[(size_t)yy * (size_t)W + (size_t)x])
                dl__canvas_put(&cv, x, yy, colours[i], cov[(size_t)yy * (size_t)W + (size_t)x] / 255.0);
        }
        dl__text(&cv, bx0 + pad + line + 3 * s, ty, names[i], s, text);
        row++;
      }
    }
  }
  dl_free(ctx, cov);
  return DL_OK;
}

#ifndef DL_NO_STDIO
#if defined(DL_USE_STB_IMAGE_WRITE) && defined(DL__IO_FILES)
DL_API void dl__png_write(void *context, void *data, int size) {
  if (size > 0) dl_atomic_put((dl_atomic_file *)context, data, (size_t)size); /* a failure is sticky in the file */
}
#endif

#ifdef DL__PNG_TRACKED
/* stb's encoder with every block it takes carved from chunks on mem's list
 * (see the hooks at the top), all given back at the end: 1 written, 0 stb
 * failed, -1 out of memory (mem->asked: the bytes that failed). The first
 * chunk is sized for a w x h image: stb's filtered copy of the pixels and
 * its line buffer, its deflate's hash table (128 KiB), the buckets' arrays
 * and a chart's compressed output (3 MiB for those); a larger output goes
 * to further chunks. */
static int dl__png_encode(dl__png_mem *mem, dl_ctx *ctx, dl_atomic_file *f, int w, int h, const unsigned char *rgb) {
  int ok;
  memset(mem, 0, sizeof *mem);
  mem->ctx = ctx;
  mem->head.next = mem->head.prev = &mem->head;
  mem->next_chunk = ((size_t)w * 3 + 1) * (size_t)h + (size_t)w * 3 + ((size_t)3 << 20);
  int (*volatile encode)(stbi_write_func *, void *, int, int, int, const void *, int) = stbi_write_png_to_func;
  dl__png_cur = mem;
  if (setjmp(mem->jb)) {
    dl__png_cur = NULL;
    return -1;
  }
  ok = encode(dl__png_write, f, w, h, 3, rgb, w * 3); /* through a pointer: stb is not inlined next to setjmp */
  dl__png_cur = NULL;
  dl__png_release(mem);
  return ok;
}
#endif
/* Draw the chart and save it as a PNG at path through file.h's atomic
 * writer (a temporary in the same folder, created exclusively, renamed
 * over path), so a reader never sees half a file and a failure leaves the
 * previous chart as it was. DL_ERR_IO (the message names the file and the
 * system's reason; a path that is not a regular file is refused),
 * DL_ERR_ARG / DL_ERR_NOMEM from drawing or encoding, DL_ERR_UNSUPPORTED
 * without DL_USE_STB_IMAGE_WRITE or without POSIX files. */
DL_API dl_status dl_chart_save_png(dl_ctx *ctx, const char *path, const dl_chart_desc *desc) {
#if !defined(DL_USE_STB_IMAGE_WRITE)
  (void)desc;
  return dl_fail(ctx, DL_ERR_UNSUPPORTED,
                 "dl_chart_save_png(\"%s\"): PNG output needs stb_image_write: #define DL_USE_STB_IMAGE_WRITE "
                 "before including dl.h (Debian/Ubuntu: apt-get install libstb-dev); dl_chart_render draws "
                 "into an RGB buffer without it", path ? path : "(null)");
#elif !defined(DL__IO_FILES)
  (void)desc;
  return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_chart_save_png(\"%s\"): files are written through POSIX (file.h); "
                 "dl_chart_render draws into an RGB buffer", path ? path : "(null)");
#else
  dl_chart_layout L;
  dl_status st;
  unsigned char *rgb;
  dl_atomic_file f;
  int ok;
  if (!path || !path[0]) return dl_fail(ctx, DL_ERR_ARG, "dl_chart_save_png: no path");
  st = dl_chart_layout_of(ctx, desc, &L);
  if (st != DL_OK) return st;
  rgb = (unsigned char *)dl_alloc(ctx, (size_t)L.width * (size_t)L.height * 3);
  if (!rgb)
    return dl_fail(ctx, DL_ERR_NOMEM, "dl_chart_save_png(\"%s\"): out of memory for the %dx%d image (%zu bytes)", path,
                   L.width, L.height, (size_t)L.width * (size_t)L.height * 3);
  st = dl_chart_render(ctx, desc, rgb, NULL);
  if (st == DL_ERR_NOMEM) { /* the rasteriser's own message names no file */
    char m[sizeof ctx->message];
    memcpy(m, ctx->message, sizeof m);
    dl_fail(ctx, st, "dl_chart_save_png(\"%s\"): %s", path, m);
  }
  if (st == DL_OK) st = dl_atomic_begin(&f, ctx, path, NULL);
  if (st != DL_OK) { dl_free(ctx, rgb); return st; }
#ifdef DL__PNG_TRACKED
  {
    dl__png_mem mem;
    ok = dl__png_encode(&mem, ctx, &f, L.width, L.height, rgb);
    if (ok < 0) {
      dl_free(ctx, rgb);
      dl_atomic_abort(&f);
      return dl_fail(ctx, DL_ERR_NOMEM,
                     "dl_chart_save_png(\"%s\"): the PNG encoder ran out of memory (%zu bytes asked, %zu in use)", path,
                     mem.asked, mem.in_use);
    }
  }
#else
  ok = stbi_write_png_to_func(dl__png_write, &f, L.width, L.height, 3, rgb, L.width * 3);
#endif
  dl_free(ctx, rgb);
  if (!ok) {
    dl_atomic_abort(&f);
    return dl_fail(ctx, DL_ERR_NOMEM, "dl_chart_save_png(\"%s\"): the PNG encoder ran out of memory", path);
  }
  return dl_atomic_commit(&f); /* a write that failed on the way fails here, naming the file */
#endif
}
#endif /* DL_NO_STDIO */

#ifdef __cplusplus
}
#endif
DL__HEADER_END
#endif /* DL_REPORT_H */
