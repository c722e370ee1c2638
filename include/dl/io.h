/* dl/io.h - safetensors weights, whole training checkpoints, atomic writes,
 * and the f16 / bf16 conversions.
 *
 * >>half  Correctly rounded (round-to-nearest-even) conversions between f64,
 *   f32, f16 and bf16; NaN stays NaN (sign and leading payload bits kept,
 *   made quiet), infinities stay infinite, values past the largest finite
 *   half become infinite, tiny ones become subnormal or signed zero. f64 goes
 *   to f16/bf16 directly (no double rounding through f32). Nothing in this
 *   header converts a dtype unless the caller asks for it by name (a
 *   _as / convert argument); otherwise a dtype difference is an error.
 *
 *     uint16_t dl_f32_to_f16(float), dl_f32_to_bf16(float),
 *              dl_f64_to_f16(double), dl_f64_to_bf16(double);
 *     float    dl_f16_to_f32(uint16_t), dl_bf16_to_f32(uint16_t);  (exact)
 *     void     dl_tensor_convert_float(dst, src)  any of f64/f32/f16/bf16 to
 *              any other, same shape (panics otherwise)
 *
 * >>safetensors  The format (https://github.com/huggingface/safetensors):
 *   8 bytes little-endian u64 N, then N bytes of JSON
 *     {"__metadata__": {"k": "v", ...},
 *      "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 *   then the data region; offsets are relative to its start, data little-endian.
 *   dtypes: F32 F64 F16 BF16 I64 I32 I8 U8 (others are refused).
 *
 *   Reading: dl_safetensors_open(&st, ctx, path) or dl_safetensors_parse(&st,
 *   ctx, buf, size) (borrows buf) validates everything before anything is
 *   trusted, and fails with a dl_status and a message that names the tensor
 *   and the byte offset:
 *     - the file holds the 8-byte length; the header length is at most
 *       DL_SAFETENSORS_MAX_HEADER (100 MB, as the reference reader) and fits
 *       in the file (DL_ERR_TRUNCATED otherwise);
 *     - the header is one JSON object (a complete JSON parser of its own:
 *       strings are valid UTF-8, escapes and surrogate pairs are checked, no
 *       NUL; nesting at most DL_SAFETENSORS_MAX_DEPTH (64); only whitespace
 *       after the closing brace); each entry has a known dtype, a shape of at
 *       most 8 non-negative sizes and two data_offsets (unknown fields are
 *       skipped, after being checked as JSON); __metadata__ maps strings to
 *       strings; names and metadata keys are unique;
 *     - element and byte counts are computed with overflow checks and must
 *       equal end - begin; the offsets of all tensors, in whatever order the
 *       file lists or stores them, tile the data region exactly: no overlap,
 *       no gap, no trailing bytes; a region shorter than the offsets say is
 *       DL_ERR_TRUNCATED.
 *   The result lists the tensors sorted by name (st.tensors[0 .. ntensors)),
 *   the metadata sorted by key; dl_safetensors_find / _meta look them up,
 *   dl_safetensors_read copies one into a tensor of the same shape (and
 *   dtype, unless convert is asked for), dl_safetensors_get returns an owned
 *   copy. Data in the file need not be aligned: it is copied, never cast.
 *
 *   Writing: dl_st_writer collects (name, tensor) pairs, borrowing the
 *   tensors until it writes; dl_st_writer_add_as stores a float tensor as
 *   another float dtype (the explicit conversion). The file has
 *     - __metadata__ first, then the tensors sorted by name (byte order),
 *     - the header padded with spaces so the data region starts at a
 *       multiple of 8,
 *     - the data of every tensor whose size is a multiple of 8 bytes at an
 *       8-byte-aligned offset, and every other tensor at a multiple of its
 *       element size (the data is ordered by that rule and then by name; the
 *       format allows no padding between tensors, so this is the most
 *       alignment there can be); the data need not follow the header's order.
 *   dl_st_writer_save writes atomically (below); _to_memory returns a buffer.
 *
 * >>atomic  every file is written through file.h's atomic writer
 *   (dl_atomic_begin / _put / _commit: a temporary in the same folder,
 *   fsync, rename; a failure leaves the previous file as it was; a target
 *   that is not a regular file is refused), with injectable dl_io_hooks.
 *
 * >>model weights
 *     dl_model_save(m, path, desc)          every parameter and buffer by its
 *         PyTorch state_dict name ("0.weight", "bn.running_mean",
 *         "bn.num_batches_tracked" as I64 0-d), so that in Python
 *           sd = {k: v for k, v in read_safetensors(path).items()}
 *           model.load_state_dict(sd)       # same architecture in torch
 *         takes them (tools/check_safetensors.py does exactly that).
 *         desc->cast stores the float tensors as f16 / bf16 / ... on request.
 *     dl_model_load(m, path, &report)       strict: every model name present
 *         with the same shape and dtype, no other name in the file. On any
 *         problem nothing in the model changes; the report counts and names
 *         each missing, unexpected and mismatched tensor.
 *     dl_model_load_desc(m, path, desc, &report)  partial = 1 (missing and
 *         unexpected names are reported, not errors: torch's strict=False),
 *         convert = 1 (float tensors of another float dtype are converted).
 *     dl_model_load_st: the same from an already parsed file (e.g. memory).
 *
 * >>checkpoints  one safetensors file holding, by name:
 *     <param or buffer name>           the model, as dl_model_save
 *     optim/<param>/<state>            each optimizer state tensor
 *                                      ("optim/0.weight/exp_avg")
 *     optim/<param>/step               per-parameter step count (I64 0-d)
 *     optim/lr, optim/nsteps           current lr (F64), dl_optim_step calls (I64)
 *     rng/init                         the model's initialisation rng
 *     rng/layer/<layer name>           each Dropout layer's rng (I64 [2]:
 *                                      key and counter, as bits)
 *     extra/<name>                     the caller's named numbers (I64 or F64
 *                                      0-d): epoch, step, shuffler seed and
 *                                      position, best loss ...
 *   plus metadata format = "dl.checkpoint", the optimizer's kind and the
 *   model dtype. dl_checkpoint_load restores all of it, strictly (names,
 *   shapes, dtypes), and changes nothing (model, optimizer, the caller's
 *   numbers) unless everything matches. The optimizer's counts (steps,
 *   nsteps: 0 .. 2^53) and lr (finite, >= 0) are range-checked before
 *   anything is copied (DL_ERR_FORMAT naming the key and the value); the
 *   caller's extras are copied as found: check them (run.h checks its own
 *   before it loads). Training resumed from it continues
 *   bit for bit as if it had not stopped, given the same thread count and
 *   the same data order (which is the caller's: save the shuffler's state in
 *   the extras).
 *
 * The functions (each failure returns a dl_status, message in the ctx):
 *   reader  dl_safetensors_parse(&st, ctx, buf, size)   dl_safetensors_open(&st, ctx, path)
 *           dl_safetensors_find(&st, name) -> const dl_st_tensor *
 *           dl_safetensors_meta(&st, key) -> const char *
 *           dl_safetensors_read(&st, entry, dst, convert)   dl_safetensors_get(&st, name) -> owned
 *           dl_safetensors_free(&st)
 *   writer  dl_st_writer_init(&w, ctx)   dl_st_writer_add(&w, name, t)
 *           dl_st_writer_add_as(&w, name, t, dtype)   dl_st_writer_add_raw(&w, name, dtype, ndim, shape, data)
 *           dl_st_writer_add_model(&w, m, cast)   dl_st_writer_meta(&w, key, value)
 *           dl_st_writer_save(&w, path, io)   dl_st_writer_to_memory(&w, &buf, &size)
 *           dl_st_writer_size(&w, &size)   dl_st_writer_free(&w)
 *   atomic  dl_atomic_begin(&f, ctx, path, io) / dl_atomic_put(&f, p, n) /
 *           dl_atomic_commit(&f) / dl_atomic_abort(&f)   dl_atomic_write(ctx, path, p, n, io)
 *           dl_io_posix() -> the default dl_io_hooks
 *   model   dl_model_save(m, path, desc)   dl_model_save_memory(m, desc, &buf, &size)
 *           dl_model_load(m, path, &report)   dl_model_load_desc(m, path, desc, &report)
 *           dl_model_load_st(m, &st, desc, &report)
 *   train   dl_checkpoint_save(m, o, path, values, nvalues, desc)
 *           dl_checkpoint_load(m, o, path, values, nvalues, &report)
 *           dl_checkpoint_load_st(m, o, &st, values, nvalues, &report) (parsed, e.g. from memory)
 *
 * Configuration: DL_SAFETENSORS_MAX_HEADER, DL_SAFETENSORS_MAX_DEPTH,
 * DL_IO_BUFFER (file.h). The file functions need POSIX (open, write, fsync, rename)
 * and are left out under DL_NO_STDIO or on other systems; parsing and
 * writing to memory are plain C.
 */
#ifndef DL_IO_H
#define DL_IO_H

#include "optim.h"
#include "file.h" /* the atomic writer, dl_io_hooks, DL__IO_FILES */
DL__HEADER_BEGIN

#include <errno.h>
#include <float.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef DL_SAFETENSORS_MAX_HEADER
/* Largest JSON header of a safetensors file a reader accepts, in bytes
 * (refused beyond it). */
#define DL_SAFETENSORS_MAX_HEADER 100000000u
#endif
#ifndef DL_SAFETENSORS_MAX_DEPTH
/* Deepest JSON nesting a safetensors header may have (refused beyond it). */
#define DL_SAFETENSORS_MAX_DEPTH 64
#endif
/* The largest count (steps, epochs, positions) a checkpoint may hold: 2^53,
 * where doubles stop counting exactly. */
#define DL__IO_MAX_COUNT 9007199254740992.0

#ifdef __cplusplus
extern "C" {
#endif

/* >>half ------------------------------------------------------------------- */

/* double -> a binary format with `ebits` exponent and `mbits` mantissa bits
 * (f16: 5, 10; bf16: 8, 7), round to nearest even, as the format's bits. */
DL_API uint16_t dl__f64_to_small(double d, int ebits, int mbits) {
  uint64_t x, ax, mant, full, q, rem, half;
  uint16_t sign;
  int64_t e, bias = ((int64_t)1 << (ebits - 1)) - 1;
  int shift;
  const uint16_t expmask = (uint16_t)(((1u << ebits) - 1) << mbits);
  memcpy(&x, &d, sizeof x);
  sign = (uint16_t)((x >> 63) << (ebits + mbits));
  ax = x & 0x7fffffffffffffffULL;
  if (ax >= 0x7ff0000000000000ULL) {
    if (ax == 0x7ff0000000000000ULL) return (uint16_t)(sign | expmask);
    /* NaN: quiet, keep the leading payload bits */
    return (uint16_t)(sign | expmask | (1u << (mbits - 1)) | ((ax >> (52 - mbits)) & ((1u << mbits) - 1)));
  }
  e = (int64_t)(ax >> 52);
  if (e == 0) return sign; /* f64 subnormals are far below the smallest half */
  e -= 1023;
  mant = ax & 0x000fffffffffffffULL;
  full = mant | (1ULL << 52);
  if (e > bias) return (uint16_t)(sign | expmask);
  if (e >= 1 - bias) { /* a normal result (or a carry into the next binade / infinity) */
    shift = 52 - mbits;
    q = ((uint64_t)(e + bias) << mbits) | (mant >> shift);
    rem = mant & ((1ULL << shift) - 1);
    half = 1ULL << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
  }
  /* subnormal result in units of 2^(1 - bias - mbits) */
  shift = (52 - mbits) + (int)(1 - bias - e);
  if (shift >= 54) return sign;
  q = full >> shift;
  rem = full & ((1ULL << shift) - 1);
  half = 1ULL << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return (uint16_t)(sign | q);
}
/* double -> IEEE half (f16) bits, rounded to nearest even (overflow gives
 * infinity). */
DL_API uint16_t dl_f64_to_f16(double d) { return dl__f64_to_small(d, 5, 10); }
/* double -> bfloat16 bits, rounded to nearest even. */
DL_API uint16_t dl_f64_to_bf16(double d) { return dl__f64_to_small(d, 8, 7); }
/* f32 -> f16: the f32 is exact in double, so this is one rounding. */
DL_API uint16_t dl_f32_to_f16(float f) { return dl__f64_to_small((double)f, 5, 10); }
/* float -> bfloat16 bits, rounded to nearest even (NaN stays NaN). */
DL_API uint16_t dl_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN, quiet */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
DL_API float dl__f32_from_bits(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}
/* IEEE half (f16) bits -> float, exactly. */
DL_API float dl_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return dl__f32_from_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (!m) return dl__f32_from_bits(sign);
    e = 113;
    while (!(m & 0x400u)) { m <<= 1; e--; }
    return dl__f32_from_bits(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  return dl__f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}
/* bfloat16 bits -> float, exactly. */
DL_API float dl_bf16_to_f32(uint16_t h) { return dl__f32_from_bits((uint32_t)h << 16); }

/* 1 for the floating-point dtypes (f32, f64, f16, bf16). */
DL_API int dl_dtype_is_float(dl_dtype d) { return d == DL_F32 || d == DL_F64 || d == DL_F16 || d == DL_BF16; }

/* One element of a float dtype at p, as double (exact). */
DL_API double dl__float_load(dl_dtype d, const void *p) {
  switch (d) {
  case DL_F32: { float f; memcpy(&f, p, 4); return (double)f; }
  case DL_F64: { double v; memcpy(&v, p, 8); return v; }
  case DL_F16: { uint16_t h; memcpy(&h, p, 2); return (double)dl_f16_to_f32(h); }
  default: { uint16_t h; memcpy(&h, p, 2); return (double)dl_bf16_to_f32(h); }
  }
}
/* Store v into a float dtype at p, rounded to nearest even. */
DL_API void dl__float_store(dl_dtype d, void *p, double v) {
  switch (d) {
  case DL_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
  case DL_F64: memcpy(p, &v, 8); break;
  case DL_F16: { uint16_t h = dl_f64_to_f16(v); memcpy(p, &h, 2); break; }
  default: { uint16_t h = dl_f64_to_bf16(v); memcpy(p, &h, 2); break; }
  }
}
/* One element from dtype `from` at src to dtype `to` at dst: a byte copy for
 * the same dtype, a correctly rounded conversion between float dtypes. The
 * caller has checked that the pair is allowed. */
DL_API void dl__elem_convert(dl_dtype to, void *dst, dl_dtype from, const void *src) {
  if (to == from) memcpy(dst, src, dl_dtype_size(to));
  else if (from == DL_F32 && to == DL_BF16) {
    float f;
    uint16_t h;
    memcpy(&f, src, 4);
    h = dl_f32_to_bf16(f);
    memcpy(dst, &h, 2);
  } else dl__float_store(to, dst, dl__float_load(from, src));
}

/* dst = src converted between any two of f64, f32, f16, bf16 (round to
 * nearest even; the same dtype copies). Same shape; any strides. Panics on
 * another dtype or a shape mismatch. */
DL_API void dl_tensor_convert_float(dl_tensor *dst, const dl_tensor *src) {
  int64_t i;
  size_t ds = dl_dtype_size(dst->dtype), ss = dl_dtype_size(src->dtype);
  if (!dl_dtype_is_float(dst->dtype) || !dl_dtype_is_float(src->dtype))
    DL_PANIC(dst->ctx, "dl_tensor_convert_float", "converts between f64, f32, f16 and bf16, not %s to %s",
             DL_SHAPESTR(src), DL_SHAPESTR(dst));
  if (!dl_tensor_same_shape(dst, src))
    DL_PANIC(dst->ctx, "dl_tensor_convert_float", "shape mismatch: %s to %s", DL_SHAPESTR(src), DL_SHAPESTR(dst));
  for (i = 0; i < src->numel; i++)
    dl__elem_convert(dst->dtype, (char *)dst->data + (size_t)dl__offset_of_linear(dst, i) * ds, src->dtype,
                     (const char *)src->data + (size_t)dl__offset_of_linear(src, i) * ss);
}

/* >>byte order -------------------------------------------------------------- */

DL_API int dl__io_big_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 0;
}
DL_API void dl__io_swap(void *p, size_t es) {
  unsigned char *b = (unsigned char *)p, t;
  size_t k;
  for (k = 0; k < es / 2; k++) { t = b[k]; b[k] = b[es - 1 - k]; b[es - 1 - k] = t; }
}
DL_API uint64_t dl__io_le64(const unsigned char *p) {
  uint64_t v = 0;
  int k;
  for (k = 7; k >= 0; k--) v = (v << 8) | p[k];
  return v;
}

DL_API int dl__io_grow(dl_ctx *ctx, void **arr, int *cap, int need, size_t elem) {
  void *n;
  int nc;
  if (need <= *cap) return 1;
  if (need > INT32_MAX / 4) { dl_fail(ctx, DL_ERR_OVERFLOW, "more than %d entries", INT32_MAX / 4); return 0; }
  nc = *cap ? *cap : 8;
  while (nc < need) nc *= 2;
  n = dl_alloc(ctx, elem * (size_t)nc);
  if (!n) return 0;
  if (*arr) {
    memcpy(n, *arr, elem * (size_t)*cap);
    dl_free(ctx, *arr);
  }
  *arr = n;
  *cap = nc;
  return 1;
}

/* Length of the valid UTF-8 sequence at p (avail bytes), 0 if invalid
 * (overlong forms, surrogates and code points past U+10FFFF are invalid). */
DL_API size_t dl__utf8_seq(const unsigned char *p, size_t avail) {
  unsigned c = p[0], lo = 0x80, hi = 0xbf;
  size_t n, k;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else return 0;
  if (avail < n || p[1] < lo || p[1] > hi) return 0;
  for (k = 2; k < n; k++)
    if (p[k] < 0x80 || p[k] > 0xbf) return 0;
  return n;
}
DL_API int dl__utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s), i = 0, k;
  while (i < n) {
    if (!(k = dl__utf8_seq(p + i, n - i))) return 0;
    i += k;
  }
  return 1;
}

/* >>safetensors reader ------------------------------------------------------ */

/* The file's name for each dl_dtype (the enum's order). */
DL_API const char *dl_safetensors_dtype_name(dl_dtype d) {
  static const char *const nm[] = {"F32", "F64", "I32", "I64", "U8", "I8", "F16", "BF16"};
  return (unsigned)d < (unsigned)DL_DTYPE_COUNT ? nm[d] : "?";
}

/* One tensor of a parsed file. */
typedef struct dl_st_tensor {
  const char *name;           /* UTF-8, NUL-terminated, owned by the dl_safetensors */
  dl_dtype dtype; /* F32, F64, F16, BF16, I64, I32, I8 or U8 */
  int ndim;                   /* 0 (a scalar) .. DL_MAX_DIMS */
  int64_t shape[DL_MAX_DIMS]; /* sizes, shape[ndim..] are 1 */
  int64_t numel; /* product of shape */
  uint64_t begin, end;        /* data_offsets: bytes in the data region */
  const unsigned char *data;  /* its bytes (little-endian; not necessarily aligned) */
  size_t header_pos;          /* byte offset of its entry in the header (for messages) */
} dl_st_tensor;

/* One (key, value) pair of a safetensors file's __metadata__. */
typedef struct dl_st_meta {
  const char *key, *value; /* UTF-8, NUL-terminated, owned by the dl_safetensors */
} dl_st_meta;

/* A parsed, validated safetensors file. Zero-initialise or let
 * dl_safetensors_parse / _open fill it; release with dl_safetensors_free. */
typedef struct dl_safetensors {
  dl_ctx *ctx; /* allocator and error reports */
  dl_st_tensor *tensors;      /* ntensors, sorted by name (strcmp) */
  int ntensors; /* number of tensors */
  dl_st_meta *meta;           /* nmeta, sorted by key */
  int nmeta; /* number of metadata pairs */
  uint64_t header_len;        /* bytes of JSON (the 8-byte length not included) */
  uint64_t data_len;          /* bytes of the data region, which starts at file offset 8 + header_len */
  const unsigned char *data;  /* the data region (borrowed from the caller's buffer, or owned) */
  char *strings;              /* decoded names, keys and values */
  void *owned;                /* the file's bytes, for dl_safetensors_open */
  int captensors, capmeta; /* capacities of tensors and meta */
} dl_safetensors;

/* Release what dl_safetensors_parse / dl_safetensors_open made (NULL is
 * fine). */
DL_API void dl_safetensors_free(dl_safetensors *st) {
  if (!st) return;
  dl_free(st->ctx, st->tensors);
  dl_free(st->ctx, st->meta);
  dl_free(st->ctx, st->strings);
  dl_free(st->ctx, st->owned);
  memset(st, 0, sizeof *st);
}

typedef struct dl__js {
  const unsigned char *s;
  size_t n, i;
  dl_ctx *ctx;
  char *out;          /* decoded strings go here (header_len + 1 bytes suffice) */
  size_t outpos;
  const char *tensor; /* the entry being read, for messages */
  dl_status st;
} dl__js;

DL_API dl_status dl__js_fail(dl__js *j, dl_status st, const char *fmt, ...) DL__PRINTF(3, 4);
DL_API dl_status dl__js_fail(dl__js *j, dl_status st, const char *fmt, ...) {
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (j->tensor)
    dl_fail(j->ctx, st, "safetensors: %s, in the entry of tensor '%.100s' (header byte %zu, file offset %zu)", what,
            j->tensor, j->i, j->i + 8);
  else
    dl_fail(j->ctx, st, "safetensors: %s (header byte %zu, file offset %zu)", what, j->i, j->i + 8);
  j->st = st;
  return st;
}
DL_API void dl__js_ws(dl__js *j) {
  while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}
/* Skip whitespace, then require character c. */
DL_API dl_status dl__js_expect(dl__js *j, char c, const char *where) {
  dl__js_ws(j);
  if (j->i >= j->n) return dl__js_fail(j, DL_ERR_FORMAT, "the header ends where '%c' %s was expected", c, where);
  if (j->s[j->i] != (unsigned char)c)
    return dl__js_fail(j, DL_ERR_FORMAT, "expected '%c' %s, found byte 0x%02x", c, where, j->s[j->i]);
  j->i++;
  return DL_OK;
}
DL_API int dl__js_hex4(const dl__js *j, size_t at, unsigned *cp) {
  unsigned v = 0;
  size_t k;
  if (at + 4 > j->n) return 1;
  for (k = 0; k < 4; k++) {
    unsigned c = j->s[at + k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else return 1;
  }
  *cp = v;
  return 0;
}
/* A JSON string at j->i. store: decode it (UTF-8, NUL-terminated) into
 * j->out and return it in *out; otherwise only check it. */
DL_API dl_status dl__js_string(dl__js *j, int store, const char **out) {
  char *dst = store ? j->out + j->outpos : NULL;
  size_t len = 0;
  dl__js_ws(j);
  if (j->i >= j->n || j->s[j->i] != '"')
    return j->i >= j->n ? dl__js_fail(j, DL_ERR_FORMAT, "the header ends where a string was expected")
                        : dl__js_fail(j, DL_ERR_FORMAT, "expected a string, found byte 0x%02x", j->s[j->i]);
  j->i++;
  for (;;) {
    unsigned c, cp;
    if (j->i >= j->n) return dl__js_fail(j, DL_ERR_FORMAT, "unterminated string");
    c = j->s[j->i];
    if (c == '"') { j->i++; break; }
    if (c < 0x20) return dl__js_fail(j, DL_ERR_FORMAT, "control character 0x%02x in a string", c);
    if (c >= 0x80) {
      size_t k = dl__utf8_seq(j->s + j->i, j->n - j->i);
      if (!k) return dl__js_fail(j, DL_ERR_FORMAT, "invalid UTF-8 in a string");
      if (dst) memcpy(dst + len, j->s + j->i, k);
      len += k;
      j->i += k;
      continue;
    }
    if (c != '\\') {
      if (dst) dst[len] = (char)c;
      len++;
      j->i++;
      continue;
    }
    if (j->i + 1 >= j->n) return dl__js_fail(j, DL_ERR_FORMAT, "unterminated escape in a string");
    c = j->s[j->i + 1];
    switch (c) {
    case '"': case '\\': case '/': cp = c; break;
    case 'b': cp = 8; break;
    case 'f': cp = 12; break;
    case 'n': cp = 10; break;
    case 'r': cp = 13; break;
    case 't': cp = 9; break;
    case 'u':
      if (dl__js_hex4(j, j->i + 2, &cp)) return dl__js_fail(j, DL_ERR_FORMAT, "bad \\u escape (four hex digits needed)");
      if (cp >= 0xd800 && cp <= 0xdbff) {
        unsigned lo;
        if (j->i + 8 <= j->n && j->s[j->i + 6] == '\\' && j->s[j->i + 7] == 'u' && !dl__js_hex4(j, j->i + 8, &lo) &&
            lo >= 0xdc00 && lo <= 0xdfff) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          j->i += 6;
        } else return dl__js_fail(j, DL_ERR_FORMAT, "unpaired UTF-16 surrogate \\u%04x", cp);
      } else if (cp >= 0xdc00 && cp <= 0xdfff) return dl__js_fail(j, DL_ERR_FORMAT, "unpaired UTF-16 surrogate \\u%04x", cp);
      if (cp == 0) return dl__js_fail(j, DL_ERR_FORMAT, "NUL character (\\u0000) in a string");
      j->i += 4;
      break;
    default: return dl__js_fail(j, DL_ERR_FORMAT, "invalid escape '\\' followed by byte 0x%02x", c);
    }
    j->i += 2;
    if (dst) { /* UTF-8 encode cp */
      if (cp < 0x80) dst[len] = (char)cp;
      else if (cp < 0x800) {
        dst[len] = (char)(0xc0 | (cp >> 6));
        dst[len + 1] = (char)(0x80 | (cp & 0x3f));
      } else if (cp < 0x10000) {
        dst[len] = (char)(0xe0 | (cp >> 12));
        dst[len + 1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        dst[len + 2] = (char)(0x80 | (cp & 0x3f));
      } else {
        dst[len] = (char)(0xf0 | (cp >> 18));
        dst[len + 1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        dst[len + 2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        dst[len + 3] = (char)(0x80 | (cp & 0x3f));
      }
    }
    len += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  if (dst) {
    dst[len] = 0;
    j->outpos += len + 1;
    *out = dst;
  }
  return DL_OK;
}
/* A non-negative JSON integer that fits in 64 bits (shape sizes, offsets). */
DL_API dl_status dl__js_uint(dl__js *j, uint64_t *v, const char *what) {
  uint64_t x = 0;
  dl__js_ws(j);
  if (j->i >= j->n) return dl__js_fail(j, DL_ERR_FORMAT, "the header ends where %s was expected", what);
  if (j->s[j->i] == '-') return dl__js_fail(j, DL_ERR_FORMAT, "%s is negative", what);
  if (j->s[j->i] < '0' || j->s[j->i] > '9')
    return dl__js_fail(j, DL_ERR_FORMAT, "expected %s (a non-negative integer), found byte 0x%02x", what, j->s[j->i]);
  if (j->s[j->i] == '0' && j->i + 1 < j->n && j->s[j->i + 1] >= '0' && j->s[j->i + 1] <= '9')
    return dl__js_fail(j, DL_ERR_FORMAT, "%s has a leading zero (not JSON)", what);
  while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
    unsigned d = j->s[j->i] - '0';
    if (x > (UINT64_MAX - d) / 10) return dl__js_fail(j, DL_ERR_OVERFLOW, "%s does not fit in 64 bits", what);
    x = x * 10 + d;
    j->i++;
  }
  if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))
    return dl__js_fail(j, DL_ERR_FORMAT, "%s must be an integer", what);
  *v = x;
  return DL_OK;
}
DL_API int dl__js_digit(const dl__js *j) { return j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9'; }
/* Check (and skip) any JSON value, nested at most DL_SAFETENSORS_MAX_DEPTH. */
DL_API dl_status dl__js_skip(dl__js *j, int depth) {
  unsigned c;
  if (depth > DL_SAFETENSORS_MAX_DEPTH)
    return dl__js_fail(j, DL_ERR_FORMAT, "JSON nested deeper than %d levels", DL_SAFETENSORS_MAX_DEPTH);
  dl__js_ws(j);
  if (j->i >= j->n) return dl__js_fail(j, DL_ERR_FORMAT, "the header ends where a value was expected");
  c = j->s[j->i];
  if (c == '{' || c == '[') {
    const char close = c == '{' ? '}' : ']';
    j->i++;
    dl__js_ws(j);
    if (j->i < j->n && j->s[j->i] == (unsigned char)close) { j->i++; return DL_OK; }
    for (;;) {
      if (c == '{') {
        if (dl__js_string(j, 0, NULL) || dl__js_expect(j, ':', "after a key")) return j->st;
      }
      if (dl__js_skip(j, depth + 1)) return j->st;
      dl__js_ws(j);
      if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
      if (j->i < j->n && j->s[j->i] == (unsigned char)close) { j->i++; return DL_OK; }
      return dl__js_fail(j, DL_ERR_FORMAT, c == '{' ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
    }
  }
  if (c == '"') return dl__js_string(j, 0, NULL);
  if (c == 't' || c == 'f' || c == 'n') {
    const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
    size_t k = strlen(lit);
    if (j->i + k > j->n || memcmp(j->s + j->i, lit, k) != 0) return dl__js_fail(j, DL_ERR_FORMAT, "bad literal");
    j->i += k;
    return DL_OK;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    if (c == '-') j->i++;
    if (!dl__js_digit(j)) return dl__js_fail(j, DL_ERR_FORMAT, "bad number");
    if (j->s[j->i] == '0') j->i++;
    else while (dl__js_digit(j)) j->i++;
    if (j->i < j->n && j->s[j->i] == '.') {
      j->i++;
      if (!dl__js_digit(j)) return dl__js_fail(j, DL_ERR_FORMAT, "bad number: no digit after '.'");
      while (dl__js_digit(j)) j->i++;
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
      j->i++;
      if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
      if (!dl__js_digit(j)) return dl__js_fail(j, DL_ERR_FORMAT, "bad number: no digit in the exponent");
      while (dl__js_digit(j)) j->i++;
    }
    return DL_OK;
  }
  return dl__js_fail(j, DL_ERR_FORMAT, "unexpected byte 0x%02x where a value was expected", c);
}

/* One tensor entry {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
DL_API dl_status dl__js_tensor(dl__js *j, dl_st_tensor *t) {
  int have_dtype = 0, have_shape = 0, have_offsets = 0;
  if (dl__js_expect(j, '{', "(a tensor entry is an object)")) return j->st;
  dl__js_ws(j);
  if (j->i < j->n && j->s[j->i] == '}') {
    j->i++;
    return dl__js_fail(j, DL_ERR_FORMAT, "no 'dtype', 'shape' or 'data_offsets'");
  }
  for (;;) {
    const char *key;
    size_t mark = j->outpos;
    if (dl__js_string(j, 1, &key) || dl__js_expect(j, ':', "after a key")) return j->st;
    if (strcmp(key, "dtype") == 0) {
      const char *v;
      int d;
      if (have_dtype++) return dl__js_fail(j, DL_ERR_FORMAT, "'dtype' appears twice");
      if (dl__js_string(j, 1, &v)) return j->st;
      for (d = 0; d < DL_DTYPE_COUNT; d++)
        if (strcmp(v, dl_safetensors_dtype_name((dl_dtype)d)) == 0) break;
      if (d == DL_DTYPE_COUNT)
        return dl__js_fail(j, DL_ERR_UNSUPPORTED, "dtype '%.16s' is not one of F32 F64 F16 BF16 I64 I32 I8 U8", v);
      t->dtype = (dl_dtype)d;
    } else if (strcmp(key, "shape") == 0) {
      if (have_shape++) return dl__js_fail(j, DL_ERR_FORMAT, "'shape' appears twice");
      if (dl__js_expect(j, '[', "(shape is an array)")) return j->st;
      dl__js_ws(j);
      t->ndim = 0;
      if (j->i < j->n && j->s[j->i] == ']') j->i++;
      else
        for (;;) {
          uint64_t v = 0;
          if (dl__js_uint(j, &v, "a shape size")) return j->st;
          if (t->ndim == DL_MAX_DIMS)
            return dl__js_fail(j, DL_ERR_UNSUPPORTED, "more than %d dimensions", DL_MAX_DIMS);
          if (v > (uint64_t)INT64_MAX) return dl__js_fail(j, DL_ERR_OVERFLOW, "shape size %llu does not fit in int64",
                                                          (unsigned long long)v);
          t->shape[t->ndim++] = (int64_t)v;
          dl__js_ws(j);
          if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
          if (dl__js_expect(j, ']', "after a shape size")) return j->st;
          break;
        }
    } else if (strcmp(key, "data_offsets") == 0) {
      if (have_offsets++) return dl__js_fail(j, DL_ERR_FORMAT, "'data_offsets' appears twice");
      if (dl__js_expect(j, '[', "(data_offsets is an array of two integers)") ||
          dl__js_uint(j, &t->begin, "the begin offset") || dl__js_expect(j, ',', "(data_offsets holds two integers)") ||
          dl__js_uint(j, &t->end, "the end offset") || dl__js_expect(j, ']', "(data_offsets holds two integers)"))
        return j->st;
    } else if (dl__js_skip(j, 3)) return j->st; /* an unknown field: checked, ignored */
    j->outpos = mark; /* the key (and dtype text) are not kept */
    dl__js_ws(j);
    if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
    if (dl__js_expect(j, '}', "or ',' after a field")) return j->st;
    break;
  }
  if (!have_dtype) return dl__js_fail(j, DL_ERR_FORMAT, "no 'dtype'");
  if (!have_shape) return dl__js_fail(j, DL_ERR_FORMAT, "no 'shape'");
  if (!have_offsets) return dl__js_fail(j, DL_ERR_FORMAT, "no 'data_offsets'");
  return DL_OK;
}

DL_API int dl__st_cmp_name(const void *a, const void *b) {
  return strcmp(((const dl_st_tensor *)a)->name, ((const dl_st_tensor *)b)->name);
}
DL_API int dl__st_cmp_key(const void *a, const void *b) {
  return strcmp(((const dl_st_meta *)a)->key, ((const dl_st_meta *)b)->key);
}
typedef struct dl__st_span {
  uint64_t begin, end;
  int idx;
} dl__st_span;
DL_API int dl__st_cmp_span(const void *a, const void *b) {
  const dl__st_span *x = (const dl__st_span *)a, *y = (const dl__st_span *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Checks after the JSON: unique names, counts, offsets tiling the data. */
DL_API dl_status dl__st_validate(dl_safetensors *st) {
  dl_ctx *ctx = st->ctx;
  dl__st_span *sp;
  uint64_t at = 0;
  int i, d;
  if (st->ntensors > 1) qsort(st->tensors, (size_t)st->ntensors, sizeof *st->tensors, dl__st_cmp_name);
  if (st->nmeta > 1) qsort(st->meta, (size_t)st->nmeta, sizeof *st->meta, dl__st_cmp_key);
  for (i = 1; i < st->ntensors; i++)
    if (strcmp(st->tensors[i].name, st->tensors[i - 1].name) == 0)
      return dl_fail(ctx, DL_ERR_FORMAT, "safetensors: tensor name '%.100s' appears twice (header bytes %zu and %zu)",
                     st->tensors[i].name, st->tensors[i - 1].header_pos, st->tensors[i].header_pos);
  for (i = 1; i < st->nmeta; i++)
    if (strcmp(st->meta[i].key, st->meta[i - 1].key) == 0)
      return dl_fail(ctx, DL_ERR_FORMAT, "safetensors: __metadata__ key '%.100s' appears twice", st->meta[i].key);
  for (i = 0; i < st->ntensors; i++) {
    dl_st_tensor *t = &st->tensors[i];
    uint64_t n = 1, nz = 1, bytes, es = dl_dtype_size(t->dtype);
    for (d = 0; d < t->ndim; d++) { /* the nonzero sizes too: strides are their products */
      if (t->shape[d] != 0 && nz > (uint64_t)INT64_MAX / (uint64_t)t->shape[d])
        return dl_fail(ctx, DL_ERR_OVERFLOW, "safetensors: tensor '%.100s' (header byte %zu): its shape has more elements than fit in int64",
                       t->name, t->header_pos);
      if (t->shape[d] != 0) nz *= (uint64_t)t->shape[d];
      n *= (uint64_t)t->shape[d];
    }
    if (n > UINT64_MAX / es || n * es > (uint64_t)PTRDIFF_MAX)
      return dl_fail(ctx, DL_ERR_OVERFLOW, "safetensors: tensor '%.100s' (header byte %zu): %llu elements of %s overflow a byte count",
                     t->name, t->header_pos, (unsigned long long)n, dl_safetensors_dtype_name(t->dtype));
    bytes = n * es;
    t->numel = (int64_t)n;
    if (t->begin > t->end)
      return dl_fail(ctx, DL_ERR_FORMAT, "safetensors: tensor '%.100s' (header byte %zu): data_offsets [%llu, %llu] end before they begin",
                     t->name, t->header_pos, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != bytes)
      return dl_fail(ctx, DL_ERR_FORMAT,
                     "safetensors: tensor '%.100s' (header byte %zu): %llu elements of %s take %llu bytes, its data_offsets [%llu, %llu] span %llu",
                     t->name, t->header_pos, (unsigned long long)n, dl_safetensors_dtype_name(t->dtype),
                     (unsigned long long)bytes, (unsigned long long)t->begin, (unsigned long long)t->end,
                     (unsigned long long)(t->end - t->begin));
    if (t->end > st->data_len)
      return dl_fail(ctx, DL_ERR_TRUNCATED,
                     "safetensors: truncated: tensor '%.100s' ends at data byte %llu (file offset %llu) but the file has %llu bytes",
                     t->name, (unsigned long long)t->end, (unsigned long long)(8 + st->header_len + t->end),
                     (unsigned long long)(8 + st->header_len + st->data_len));
  }
  if (!st->ntensors) {
    if (st->data_len)
      return dl_fail(ctx, DL_ERR_FORMAT, "safetensors: %llu bytes after the header but no tensor (file offset %llu)",
                     (unsigned long long)st->data_len, (unsigned long long)(8 + st->header_len));
    return DL_OK;
  }
  sp = (dl__st_span *)dl_alloc(ctx, sizeof *sp * (size_t)st->ntensors);
  if (!sp) return DL_ERR_NOMEM;
  for (i = 0; i < st->ntensors; i++) {
    sp[i].begin = st->tensors[i].begin;
    sp[i].end = st->tensors[i].end;
    sp[i].idx = i;
  }
  qsort(sp, (size_t)st->ntensors, sizeof *sp, dl__st_cmp_span);
  for (i = 0; i < st->ntensors; i++) {
    const dl_st_tensor *t = &st->tensors[sp[i].idx];
    if (sp[i].begin < at) {
      const dl_st_tensor *p = &st->tensors[sp[i - 1].idx];
      dl_status s = dl_fail(ctx, DL_ERR_FORMAT,
                            "safetensors: tensor '%.100s' (data_offsets [%llu, %llu]) overlaps tensor '%.100s' ([%llu, %llu]) at data byte %llu (file offset %llu)",
                            t->name, (unsigned long long)t->begin, (unsigned long long)t->end, p->name,
                            (unsigned long long)p->begin, (unsigned long long)p->end, (unsigned long long)t->begin,
                            (unsigned long long)(8 + st->header_len + t->begin));
      dl_free(ctx, sp);
      return s;
    }
    if (sp[i].begin > at) {
      dl_status s = dl_fail(ctx, DL_ERR_FORMAT,
                            "safetensors: a gap of %llu bytes at data bytes [%llu, %llu) (file offset %llu) belongs to no tensor (the next is '%.100s')",
                            (unsigned long long)(sp[i].begin - at), (unsigned long long)at, (unsigned long long)sp[i].begin,
                            (unsigned long long)(8 + st->header_len + at), t->name);
      dl_free(ctx, sp);
      return s;
    }
    at = sp[i].end;
  }
  dl_free(ctx, sp);
  if (at != st->data_len)
    return dl_fail(ctx, DL_ERR_FORMAT, "safetensors: %llu trailing bytes after the last tensor's data, from file offset %llu",
                   (unsigned long long)(st->data_len - at), (unsigned long long)(8 + st->header_len + at));
  for (i = 0; i < st->ntensors; i++) st->tensors[i].data = st->data + st->tensors[i].begin;
  return DL_OK;
}

/* Parse and validate the safetensors file in buf[0 .. size). st borrows
 * buf (its tensors point into it): keep buf alive until
 * dl_safetensors_free(st). DL_OK, or DL_ERR_TRUNCATED / DL_ERR_FORMAT /
 * DL_ERR_OVERFLOW / DL_ERR_UNSUPPORTED / DL_ERR_NOMEM with a message in ctx
 * naming the tensor and byte offset; on failure st is left empty (nothing to
 * free). */
DL_API dl_status dl_safetensors_parse(dl_safetensors *st, dl_ctx *ctx, const void *buf, size_t size) {
  const unsigned char *b = (const unsigned char *)buf;
  uint64_t hlen;
  dl__js j;
  dl_status s;
  int have_meta = 0;
  memset(st, 0, sizeof *st);
  st->ctx = ctx;
  if (size < 8)
    return dl_fail(ctx, DL_ERR_TRUNCATED, "safetensors: truncated: %zu bytes, fewer than the 8-byte header length", size);
  hlen = dl__io_le64(b);
  if (hlen > (uint64_t)DL_SAFETENSORS_MAX_HEADER)
    return dl_fail(ctx, DL_ERR_FORMAT, "safetensors: header length %llu (file offset 0) is over the cap of %llu bytes",
                   (unsigned long long)hlen, (unsigned long long)DL_SAFETENSORS_MAX_HEADER);
  if (hlen > size - 8)
    return dl_fail(ctx, DL_ERR_TRUNCATED, "safetensors: truncated: the header of %llu bytes runs past the end of the %zu-byte file",
                   (unsigned long long)hlen, size);
  if (hlen < 2 || b[8] != '{')
    return dl_fail(ctx, DL_ERR_FORMAT, "safetensors: the header (file offset 8) does not start with '{'");
  st->header_len = hlen;
  st->data_len = (uint64_t)size - 8 - hlen;
  st->data = b + 8 + hlen;
  st->strings = (char *)dl_alloc(ctx, (size_t)hlen + 1);
  if (!st->strings) return DL_ERR_NOMEM;
  memset(&j, 0, sizeof j);
  j.s = b + 8;
  j.n = (size_t)hlen;
  j.ctx = ctx;
  j.out = st->strings;
  j.i = 1;
  dl__js_ws(&j);
  if (j.i < j.n && j.s[j.i] == '}') j.i++;
  else
    for (;;) {
      const char *key;
      size_t pos;
      dl__js_ws(&j);
      pos = j.i;
      if (dl__js_string(&j, 1, &key) || dl__js_expect(&j, ':', "after a tensor name")) goto fail;
      if (strcmp(key, "__metadata__") == 0) {
        j.tensor = NULL;
        if (have_meta++) {
          dl__js_fail(&j, DL_ERR_FORMAT, "'__metadata__' appears twice");
          goto fail;
        }
        if (dl__js_expect(&j, '{', "(__metadata__ is an object of strings)")) goto fail;
        dl__js_ws(&j);
        if (j.i < j.n && j.s[j.i] == '}') j.i++;
        else
          for (;;) {
            dl_st_meta mm;
            if (dl__js_string(&j, 1, &mm.key) || dl__js_expect(&j, ':', "after a __metadata__ key")) goto fail;
            dl__js_ws(&j);
            if (j.i >= j.n || j.s[j.i] != '"') {
              dl__js_fail(&j, DL_ERR_FORMAT, "the __metadata__ value of '%.100s' is not a string", mm.key);
              goto fail;
            }
            if (dl__js_string(&j, 1, &mm.value)) goto fail;
            if (!dl__io_grow(ctx, (void **)&st->meta, &st->capmeta, st->nmeta + 1, sizeof *st->meta)) {
              s = ctx ? ctx->status : DL_ERR_NOMEM;
              goto fail_s;
            }
            st->meta[st->nmeta++] = mm;
            dl__js_ws(&j);
            if (j.i < j.n && j.s[j.i] == ',') { j.i++; continue; }
            if (dl__js_expect(&j, '}', "or ',' in __metadata__")) goto fail;
            break;
          }
      } else {
        dl_st_tensor t;
        memset(&t, 0, sizeof t);
        t.name = key;
        t.header_pos = pos;
        j.tensor = key;
        if (dl__js_tensor(&j, &t)) goto fail;
        j.tensor = NULL;
        if (!dl__io_grow(ctx, (void **)&st->tensors, &st->captensors, st->ntensors + 1, sizeof *st->tensors)) {
          s = ctx ? ctx->status : DL_ERR_NOMEM;
          goto fail_s;
        }
        st->tensors[st->ntensors++] = t;
      }
      dl__js_ws(&j);
      if (j.i < j.n && j.s[j.i] == ',') { j.i++; continue; }
      if (dl__js_expect(&j, '}', "or ',' after an entry")) goto fail;
      break;
    }
  dl__js_ws(&j);
  if (j.i < j.n) {
    dl__js_fail(&j, DL_ERR_FORMAT, "data after the header's closing brace (only spaces may pad it)");
    goto fail;
  }
  s = dl__st_validate(st);
  if (s != DL_OK) goto fail_s;
  return DL_OK;
fail:
  s = j.st;
fail_s:
  {
    dl_ctx *c = st->ctx;
    st->owned = NULL;
    dl_safetensors_free(st);
    st->ctx = c;
  }
  return s;
}

/* The tensor named `name`, or NULL (binary search). */
DL_API const dl_st_tensor *dl_safetensors_find(const dl_safetensors *st, const char *name) {
  int lo = 0, hi = st->ntensors - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(st->tensors[mid].name, name);
    if (!c) return &st->tensors[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}
/* The __metadata__ value of `key`, or NULL. */
DL_API const char *dl_safetensors_meta(const dl_safetensors *st, const char *key) {
  int lo = 0, hi = st->nmeta - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(st->meta[mid].key, key);
    if (!c) return st->meta[mid].value;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

/* Writes "F32[2, 3]" for a file tensor. */
DL_API char *dl__st_shape_str(const dl_st_tensor *t, char *buf, size_t n) {
  size_t at = (size_t)snprintf(buf, n, "%s[", dl_safetensors_dtype_name(t->dtype));
  int d;
  for (d = 0; d < t->ndim && at < n; d++)
    at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  if (at < n) snprintf(buf + at, n - at, "]");
  return buf;
}
DL_API int dl__st_same_shape(const dl_st_tensor *e, const dl_tensor *t) {
  int d;
  if (e->ndim != t->ndim) return 0;
  for (d = 0; d < e->ndim; d++)
    if (e->shape[d] != t->shape[d]) return 0;
  return 1;
}
/* Whether tensor e of the file can go into dst: same shape, and the same
 * dtype or (convert) both float. 0, or DL_ERR_SHAPE / DL_ERR_DTYPE. */
DL_API dl_status dl__st_fits(const dl_st_tensor *e, const dl_tensor *dst, int convert) {
  if (!dl__st_same_shape(e, dst)) return DL_ERR_SHAPE;
  if (e->dtype != dst->dtype && !(convert && dl_dtype_is_float(e->dtype) && dl_dtype_is_float(dst->dtype)))
    return DL_ERR_DTYPE;
  return DL_OK;
}

/* Copy file tensor e into dst (a CPU tensor of the same shape; any
 * strides). Its dtype must be e's, unless convert is nonzero and both are
 * float dtypes (f64/f32/f16/bf16: rounded to nearest even). DL_OK, or
 * DL_ERR_SHAPE / DL_ERR_DTYPE with a message naming the tensor; dst is
 * unchanged then. */
DL_API dl_status dl_safetensors_read(const dl_safetensors *st, const dl_st_tensor *e, dl_tensor *dst, int convert) {
  char a[160];
  size_t ds = dl_dtype_size(dst->dtype), es = dl_dtype_size(e->dtype);
  int64_t i;
  int swap = dl__io_big_endian() && es > 1;
  dl_status s = dl__st_fits(e, dst, convert);
  if (s == DL_ERR_SHAPE)
    return dl_fail(st->ctx, s, "safetensors: tensor '%.100s' is %s in the file, %s in memory", e->name,
                   dl__st_shape_str(e, a, sizeof a), DL_SHAPESTR(dst));
  if (s == DL_ERR_DTYPE)
    return dl_fail(st->ctx, s, "safetensors: tensor '%.100s' is %s in the file, %s in memory (%s)", e->name,
                   dl__st_shape_str(e, a, sizeof a), DL_SHAPESTR(dst),
                   dl_dtype_is_float(e->dtype) && dl_dtype_is_float(dst->dtype) ? "pass convert = 1 to convert"
                                                                               : "no conversion between these dtypes");
  if (dst->device != DL_CPU || (e->numel && !dst->data))
    return dl_fail(st->ctx, DL_ERR_ARG, "safetensors: tensor '%.100s': the destination is not a CPU tensor with data", e->name);
  if (e->numel == 0) return DL_OK;
  if (e->dtype == dst->dtype && !swap && dl_tensor_is_contiguous(dst)) {
    memcpy(dst->data, e->data, (size_t)e->numel * es);
    return DL_OK;
  }
  for (i = 0; i < e->numel; i++) {
    unsigned char tmp[8];
    memcpy(tmp, e->data + (size_t)i * es, es);
    if (swap) dl__io_swap(tmp, es);
    dl__elem_convert(dst->dtype, (char *)dst->data + (size_t)dl__offset_of_linear(dst, i) * ds, e->dtype, tmp);
  }
  return DL_OK;
}

/* An owned copy (dl_tensor_make: free with dl_tensor_free) of tensor `name`,
 * in the file's dtype; NULL if there is none (DL_ERR_ARG) or out of memory,
 * with the message in st's ctx. */
DL_API dl_tensor *dl_safetensors_get(const dl_safetensors *st, const char *name) {
  const dl_st_tensor *e = dl_safetensors_find(st, name);
  dl_tensor *t;
  if (!e) {
    dl_fail(st->ctx, DL_ERR_ARG, "safetensors: no tensor named '%.100s'", name);
    return NULL;
  }
  t = dl_tensor_make(st->ctx, e->dtype, e->ndim, e->shape);
  if (!t) return NULL;
  dl_safetensors_read(st, e, t, 0);
  return t;
}

#ifdef DL__IO_FILES
/* Read the whole file at path (regular files). *buf (dl_alloc, free with
 * dl_free(ctx, ...)) and *size, or DL_ERR_IO. `head` > 0: read only that
 * many bytes first and call check(head bytes, file size) before the rest
 * (a cheap early refusal of a huge file that is not what it should be). */
DL_API dl_status dl__read_file(dl_ctx *ctx, const char *path, void **buf, size_t *size,
                               dl_status (*check)(dl_ctx *, const unsigned char *, size_t, uint64_t), size_t head) {
  struct stat sb;
  unsigned char *b;
  size_t n, at = 0;
  int fd;
  *buf = NULL;
  *size = 0;
  do fd = open(path, O_RDONLY);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return dl_fail(ctx, DL_ERR_IO, "cannot open '%.200s': %s", path, strerror(errno));
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    int e = errno;
    close(fd);
    return dl_fail(ctx, DL_ERR_IO, "'%.200s' is not a readable regular file%s%s", path, e ? ": " : "", e ? strerror(e) : "");
  }
  if ((uint64_t)sb.st_size > (uint64_t)PTRDIFF_MAX) {
    close(fd);
    return dl_fail(ctx, DL_ERR_OVERFLOW, "'%.200s' is too large for memory", path);
  }
  n = (size_t)sb.st_size;
  b = (unsigned char *)dl_alloc(ctx, n ? n : 1);
  if (!b) {
    close(fd);
    return DL_ERR_NOMEM;
  }
  while (at < n) {
    size_t want = n - at;
    ptrdiff_t r;
    if (head && at < head && want > head - at) want = head - at;
    do r = (ptrdiff_t)read(fd, b + at, want);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
      int e = errno;
      close(fd);
      dl_free(ctx, b);
      return dl_fail(ctx, DL_ERR_IO, "cannot read '%.200s': %s", path, strerror(e));
    }
    if (r == 0) break; /* the file shrank: the caller sees fewer bytes */
    at += (size_t)r;
    if (head && at == head && check) {
      dl_status s = check(ctx, b, head, (uint64_t)n);
      if (s != DL_OK) {
        close(fd);
        dl_free(ctx, b);
        return s;
      }
      head = 0;
    }
  }
  close(fd);
  *buf = b;
  *size = at;
  return DL_OK;
}
DL_API dl_status dl__st_check_head(dl_ctx *ctx, const unsigned char *b, size_t n, uint64_t file_size) {
  uint64_t hlen = dl__io_le64(b);
  (void)n;
  if (hlen > (uint64_t)DL_SAFETENSORS_MAX_HEADER)
    return dl_fail(ctx, DL_ERR_FORMAT, "safetensors: header length %llu (file offset 0) is over the cap of %llu bytes",
                   (unsigned long long)hlen, (unsigned long long)DL_SAFETENSORS_MAX_HEADER);
  if (hlen > file_size - 8)
    return dl_fail(ctx, DL_ERR_TRUNCATED, "safetensors: truncated: the header of %llu bytes runs past the end of the %llu-byte file",
                   (unsigned long long)hlen, (unsigned long long)file_size);
  return DL_OK;
}

/* Read and validate the safetensors file at path (as dl_safetensors_parse;
 * st owns the file's bytes). Messages start with the path. */
DL_API dl_status dl_safetensors_open(dl_safetensors *st, dl_ctx *ctx, const char *path) {
  void *buf;
  size_t size;
  dl_status s;
  memset(st, 0, sizeof *st);
  st->ctx = ctx;
  s = dl__read_file(ctx, path, &buf, &size, dl__st_check_head, 8);
  if (s == DL_OK) {
    s = dl_safetensors_parse(st, ctx, buf, size);
    if (s == DL_OK) st->owned = buf;
    else dl_free(ctx, buf);
  }
  if (s != DL_OK && ctx && !strstr(ctx->message, path)) { /* "path: message" */
    size_t pl = strlen(path), ml = strlen(ctx->message);
    if (pl > 200) pl = 200;
    if (pl + 2 + ml + 1 > sizeof ctx->message) ml = sizeof ctx->message - pl - 3;
    memmove(ctx->message + pl + 2, ctx->message, ml);
    memcpy(ctx->message, path, pl);
    ctx->message[pl] = ':';
    ctx->message[pl + 1] = ' ';
    ctx->message[pl + 2 + ml] = 0;
  }
  return s;
}
#endif /* DL__IO_FILES */

/* >>safetensors writer ------------------------------------------------------ */

typedef struct dl__st_item {
  char *name;       /* owned copy */
  dl_tensor src;    /* a copy of the struct; the data is borrowed */
  dl_dtype as;      /* stored dtype */
  uint64_t bytes, begin;
} dl__st_item;

/* Collects tensors to write. The tensors' data is borrowed: keep it alive
 * and unchanged until the save (or _to_memory) returns. */
typedef struct dl_st_writer {
  dl_ctx *ctx; /* allocator and error reports */
  dl__st_item *items; /* the tensors to write, in order (borrowed data) */
  int n, cap; /* items and capacity */
  char **meta;      /* key, value, key, value ... (owned copies) */
  int nmeta, capmeta; /* meta's pairs and capacity */
  dl_status status; /* the first failure of an add (sticky: the save returns it) */
} dl_st_writer;

/* Start an empty writer; errors go to ctx. */
DL_API void dl_st_writer_init(dl_st_writer *w, dl_ctx *ctx) {
  memset(w, 0, sizeof *w);
  w->ctx = ctx;
}
/* Release the writer's copies and buffers. */
DL_API void dl_st_writer_free(dl_st_writer *w) {
  int i;
  for (i = 0; i < w->n; i++) dl_free(w->ctx, w->items[i].name);
  for (i = 0; i < 2 * w->nmeta; i++) dl_free(w->ctx, w->meta[i]);
  dl_free(w->ctx, w->items);
  dl_free(w->ctx, w->meta);
  memset(w, 0, sizeof *w);
}
DL_API dl_status dl__st_w_fail(dl_st_writer *w, dl_status s) {
  if (w->status == DL_OK) w->status = s;
  return s;
}
/* Add tensor t under `name`, stored as dtype `as`: t's own dtype, or (the
 * explicit conversion) another float dtype when t is f64/f32/f16/bf16.
 * DL_ERR_ARG (a name that is not UTF-8 or is "__metadata__", a tensor
 * without data), DL_ERR_DTYPE (a conversion that is not float to float),
 * DL_ERR_UNSUPPORTED (a device tensor), DL_ERR_NOMEM. Duplicate names are
 * reported by the save. */
DL_API dl_status dl_st_writer_add_as(dl_st_writer *w, const char *name, const dl_tensor *t, dl_dtype as) {
  dl__st_item it;
  if (w->status != DL_OK) return w->status;
  if (!name || !dl__utf8_valid(name) || strcmp(name, "__metadata__") == 0)
    return dl__st_w_fail(w, dl_fail(w->ctx, DL_ERR_ARG, "safetensors writer: '%.100s' cannot be a tensor name (UTF-8, not __metadata__)",
                                    name ? name : "(null)"));
  if ((unsigned)t->dtype >= (unsigned)DL_DTYPE_COUNT || (unsigned)as >= (unsigned)DL_DTYPE_COUNT ||
      (as != t->dtype && !(dl_dtype_is_float(as) && dl_dtype_is_float(t->dtype))))
    return dl__st_w_fail(w, dl_fail(w->ctx, DL_ERR_DTYPE, "safetensors writer: tensor '%.100s' is %s and cannot be stored as %s",
                                    name, DL_SHAPESTR(t), dl_dtype_name(as)));
  if (t->device != DL_CPU)
    return dl__st_w_fail(w, dl_fail(w->ctx, DL_ERR_UNSUPPORTED, "safetensors writer: tensor '%.100s' is not on the CPU", name));
  if (t->numel && !t->data)
    return dl__st_w_fail(w, dl_fail(w->ctx, DL_ERR_ARG, "safetensors writer: tensor '%.100s' has no data", name));
  if (!dl__io_grow(w->ctx, (void **)&w->items, &w->cap, w->n + 1, sizeof *w->items))
    return dl__st_w_fail(w, DL_ERR_NOMEM);
  memset(&it, 0, sizeof it);
  it.name = dl__io_strdup(w->ctx, name);
  if (!it.name) return dl__st_w_fail(w, DL_ERR_NOMEM);
  it.src = *t;
  it.as = as;
  it.bytes = (uint64_t)t->numel * dl_dtype_size(as);
  w->items[w->n++] = it;
  return DL_OK;
}
/* Add t stored in its own dtype. */
DL_API dl_status dl_st_writer_add(dl_st_writer *w, const char *name, const dl_tensor *t) {
  return dl_st_writer_add_as(w, name, t, t->dtype);
}
/* Add raw contiguous data (ndim sizes, dtype) under name; borrowed too. */
DL_API dl_status dl_st_writer_add_raw(dl_st_writer *w, const char *name, dl_dtype dtype, int ndim, const int64_t *shape,
                                      const void *data) {
  dl_tensor t;
  if (w->status != DL_OK) return w->status;
  if (dl_tensor_wrap(&t, w->ctx, dtype, ndim, shape, (void *)(uintptr_t)data) != DL_OK)
    return dl__st_w_fail(w, w->ctx ? w->ctx->status : DL_ERR_ARG);
  return dl_st_writer_add_as(w, name, &t, dtype);
}
/* Add a __metadata__ entry (both strings copied, UTF-8). */
DL_API dl_status dl_st_writer_meta(dl_st_writer *w, const char *key, const char *value) {
  char *k, *v;
  int cap2;
  if (w->status != DL_OK) return w->status;
  if (!key || !value || !dl__utf8_valid(key) || !dl__utf8_valid(value))
    return dl__st_w_fail(w, dl_fail(w->ctx, DL_ERR_ARG, "safetensors writer: metadata key and value must be UTF-8 strings"));
  cap2 = w->capmeta * 2;
  if (!dl__io_grow(w->ctx, (void **)&w->meta, &cap2, 2 * w->nmeta + 2, sizeof *w->meta)) return dl__st_w_fail(w, DL_ERR_NOMEM);
  w->capmeta = cap2 / 2;
  k = dl__io_strdup(w->ctx, key);
  v = k ? dl__io_strdup(w->ctx, value) : NULL;
  if (!v) {
    dl_free(w->ctx, k);
    return dl__st_w_fail(w, DL_ERR_NOMEM);
  }
  w->meta[2 * w->nmeta] = k;
  w->meta[2 * w->nmeta + 1] = v;
  w->nmeta++;
  return DL_OK;
}

/* A growing byte string. */
typedef struct dl__sb {
  dl_ctx *ctx;
  char *s;
  size_t n, cap;
  size_t oom; /* 0, or the bytes the allocation that failed asked for */
} dl__sb;
DL_API void dl__sb_put(dl__sb *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    char *ns;
    while (nc < b->n + n + 1) nc *= 2;
    ns = (char *)dl_alloc(b->ctx, nc);
    if (!ns) { b->oom = nc; return; }
    if (b->s) { memcpy(ns, b->s, b->n); dl_free(b->ctx, b->s); }
    b->s = ns;
    b->cap = nc;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}
DL_API void dl__sb_str(dl__sb *b, const char *s) { dl__sb_put(b, s, strlen(s)); }
DL_API void dl__sb_u64(dl__sb *b, uint64_t v) {
  char t[24];
  snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  dl__sb_str(b, t);
}
/* A JSON string literal of UTF-8 text s. */
DL_API void dl__sb_json(dl__sb *b, const char *s) {
  dl__sb_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      dl__sb_put(b, e, 2);
    } else if (c < 0x20) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", c);
      dl__sb_str(b, e);
    } else dl__sb_put(b, (const char *)&c, 1);
  }
  dl__sb_put(b, "\"", 1);
}

DL_API int dl__st_item_cmp_name(const void *a, const void *b) {
  return strcmp(((const dl__st_item *)a)->name, ((const dl__st_item *)b)->name);
}
/* Data order: tensors of a multiple of 8 bytes first, then by element size
 * (largest first), then by name. */
DL_API int dl__st_item_cmp_data(const void *a, const void *b) {
  const dl__st_item *x = *(const dl__st_item *const *)a, *y = *(const dl__st_item *const *)b;
  int xa = x->bytes % 8 != 0, ya = y->bytes % 8 != 0;
  size_t xs = dl_dtype_size(x->as), ys = dl_dtype_size(y->as);
  if (xa != ya) return xa - ya;
  if (xs != ys) return xs > ys ? -1 : 1;
  return strcmp(x->name, y->name);
}
DL_API int dl__st_meta_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sort, check, lay out and write the header into *hdr (padded); *order
 * receives the items in data order (dl_alloc). */
DL_API dl_status dl__st_layout(dl_st_writer *w, dl__sb *hdr, dl__st_item ***order, uint64_t *total) {
  uint64_t at = 0;
  int i, d;
  dl__st_item **ord;
  *order = NULL;
  memset(hdr, 0, sizeof *hdr);
  hdr->ctx = w->ctx;
  if (w->status != DL_OK) return w->status;
  if (w->n > 1) qsort(w->items, (size_t)w->n, sizeof *w->items, dl__st_item_cmp_name);
  for (i = 1; i < w->n; i++)
    if (strcmp(w->items[i].name, w->items[i - 1].name) == 0)
      return dl__st_w_fail(w, dl_fail(w->ctx, DL_ERR_ARG, "safetensors writer: tensor name '%.100s' added twice", w->items[i].name));
  if (w->nmeta > 1) qsort(w->meta, (size_t)w->nmeta, 2 * sizeof *w->meta, dl__st_meta_cmp);
  for (i = 1; i < w->nmeta; i++)
    if (strcmp(w->meta[2 * i], w->meta[2 * i - 2]) == 0)
      return dl__st_w_fail(w, dl_fail(w->ctx, DL_ERR_ARG, "safetensors writer: metadata key '%.100s' added twice", w->meta[2 * i]));
  ord = (dl__st_item **)dl_alloc(w->ctx, sizeof *ord * (size_t)(w->n ? w->n : 1));
  if (!ord) return DL_ERR_NOMEM;
  for (i = 0; i < w->n; i++) ord[i] = &w->items[i];
  if (w->n > 1) qsort(ord, (size_t)w->n, sizeof *ord, dl__st_item_cmp_data);
  for (i = 0; i < w->n; i++) {
    ord[i]->begin = at;
    at += ord[i]->bytes;
  }
  dl__sb_str(hdr, "{");
  if (w->nmeta) {
    dl__sb_str(hdr, "\"__metadata__\":{");
    for (i = 0; i < w->nmeta; i++) {
      if (i) dl__sb_str(hdr, ",");
      dl__sb_json(hdr, w->meta[2 * i]);
      dl__sb_str(hdr, ":");
      dl__sb_json(hdr, w->meta[2 * i + 1]);
    }
    dl__sb_str(hdr, "}");
  }
  for (i = 0; i < w->n; i++) {
    const dl__st_item *it = &w->items[i];
    if (i || w->nmeta) dl__sb_str(hdr, ",");
    dl__sb_json(hdr, it->name);
    dl__sb_str(hdr, ":{\"dtype\":\"");
    dl__sb_str(hdr, dl_safetensors_dtype_name(it->as));
    dl__sb_str(hdr, "\",\"shape\":[");
    for (d = 0; d < it->src.ndim; d++) {
      if (d) dl__sb_str(hdr, ",");
      dl__sb_u64(hdr, (uint64_t)it->src.shape[d]);
    }
    dl__sb_str(hdr, "],\"data_offsets\":[");
    dl__sb_u64(hdr, it->begin);
    dl__sb_str(hdr, ",");
    dl__sb_u64(hdr, it->begin + it->bytes);
    dl__sb_str(hdr, "]}");
  }
  dl__sb_str(hdr, "}");
  while (!hdr->oom && (hdr->n + 8) % 8) dl__sb_str(hdr, " ");
  if (hdr->oom) {
    size_t asked = hdr->oom;
    dl_free(w->ctx, ord);
    dl_free(w->ctx, hdr->s);
    return dl_fail(w->ctx, DL_ERR_NOMEM, "safetensors writer: out of memory for the header (%zu bytes)", asked);
  }
  *order = ord;
  *total = 8 + (uint64_t)hdr->n + at;
  return DL_OK;
}

/* Where the bytes go: memory (mem != NULL) or an atomic file. */
typedef struct dl__st_sink {
  unsigned char *mem;
  size_t at;
  void *file; /* dl_atomic_file * */
} dl__st_sink;
DL_API dl_status dl__st_sink_put(dl__st_sink *k, const void *p, size_t n) {
  if (k->mem) {
    memcpy(k->mem + k->at, p, n);
    k->at += n;
    return DL_OK;
  }
#ifdef DL__IO_FILES
  return dl_atomic_put((dl_atomic_file *)k->file, p, n);
#else
  return DL_ERR_UNSUPPORTED;
#endif
}
DL_API dl_status dl__st_emit(dl_st_writer *w, const dl__sb *hdr, dl__st_item **ord, dl__st_sink *k) {
  unsigned char len[8], chunk[4096];
  uint64_t hl = hdr->n;
  int i, big = dl__io_big_endian();
  for (i = 0; i < 8; i++) len[i] = (unsigned char)(hl >> (8 * i));
  if (dl__st_sink_put(k, len, 8) || dl__st_sink_put(k, hdr->s, hdr->n)) return DL_ERR_IO;
  for (i = 0; i < w->n; i++) {
    const dl__st_item *it = ord[i];
    const dl_tensor *t = &it->src;
    size_t ss = dl_dtype_size(t->dtype), os = dl_dtype_size(it->as), used = 0;
    int64_t e;
    if (!t->numel) continue;
    if (t->dtype == it->as && !(big && ss > 1) && dl_tensor_is_contiguous(t)) {
      if (dl__st_sink_put(k, t->data, (size_t)it->bytes)) return DL_ERR_IO;
      continue;
    }
    for (e = 0; e < t->numel; e++) {
      dl__elem_convert(it->as, chunk + used, t->dtype, (const char *)t->data + (size_t)dl__offset_of_linear(t, e) * ss);
      if (big) dl__io_swap(chunk + used, os);
      used += os;
      if (used + 8 > sizeof chunk) {
        if (dl__st_sink_put(k, chunk, used)) return DL_ERR_IO;
        used = 0;
      }
    }
    if (used && dl__st_sink_put(k, chunk, used)) return DL_ERR_IO;
  }
  return DL_OK;
}

/* The file's size in bytes, as it would be written now. */
DL_API dl_status dl_st_writer_size(dl_st_writer *w, uint64_t *size) {
  dl__sb hdr;
  dl__st_item **ord;
  dl_status s = dl__st_layout(w, &hdr, &ord, size);
  if (s != DL_OK) return s;
  dl_free(w->ctx, ord);
  dl_free(w->ctx, hdr.s);
  return DL_OK;
}
/* The whole file in one dl_alloc block (free with dl_free(ctx, *buf)). */
DL_API dl_status dl_st_writer_to_memory(dl_st_writer *w, void **buf, size_t *size) {
  dl__sb hdr;
  dl__st_item **ord;
  uint64_t total;
  dl__st_sink k;
  dl_status s = dl__st_layout(w, &hdr, &ord, &total);
  *buf = NULL;
  *size = 0;
  if (s != DL_OK) return s;
  memset(&k, 0, sizeof k);
  if (total > (uint64_t)PTRDIFF_MAX || !(k.mem = (unsigned char *)dl_alloc(w->ctx, (size_t)total))) {
    dl_free(w->ctx, ord);
    dl_free(w->ctx, hdr.s);
    return dl_fail(w->ctx, DL_ERR_NOMEM, "safetensors writer: out of memory for %llu bytes", (unsigned long long)total);
  }
  dl__st_emit(w, &hdr, ord, &k);
  dl_free(w->ctx, ord);
  dl_free(w->ctx, hdr.s);
  *buf = k.mem;
  *size = (size_t)total;
  return DL_OK;
}
#ifdef DL__IO_FILES
/* Write the file at path atomically (io NULL: POSIX). DL_OK, or the add's
 * failure, DL_ERR_ARG (duplicate names), DL_ERR_IO (the previous file at
 * path untouched), DL_ERR_NOMEM. The writer can be saved again. */
DL_API dl_status dl_st_writer_save(dl_st_writer *w, const char *path, const dl_io_hooks *io) {
  dl__sb hdr;
  dl__st_item **ord;
  uint64_t total;
  dl__st_sink k;
  dl_atomic_file f;
  dl_status s = dl__st_layout(w, &hdr, &ord, &total);
  if (s != DL_OK) return s;
  s = dl_atomic_begin(&f, w->ctx, path, io);
  if (s == DL_OK) {
    memset(&k, 0, sizeof k);
    k.file = &f;
    dl__st_emit(w, &hdr, ord, &k);
    s = dl_atomic_commit(&f);
  }
  dl_free(w->ctx, ord);
  dl_free(w->ctx, hdr.s);
  return s;
}
#endif

#ifdef __cplusplus
}
#endif

/* >>model weights ------------------------------------------------------------ */
#ifndef DL__SCALAR_ONLY

/* How a model save stores its float tensors: as they are (0), or converted
 * on request (round to nearest even). Integer buffers are never converted. */
typedef enum dl_st_cast { DL_ST_KEEP = 0, DL_ST_AS_F16, DL_ST_AS_BF16, DL_ST_AS_F32, DL_ST_AS_F64 } dl_st_cast;

/* Save options; zero = default.
 *   meta, nmeta  nmeta (key, value) pairs for __metadata__: meta[2k], meta[2k+1]
 *   cast         dl_model_save only: store float tensors as another dtype
 *   io           system-call hooks (NULL: POSIX) */
typedef struct dl_save_desc {
  const char *const *meta; /* nmeta (key, value) pairs for __metadata__: meta[2k], meta[2k+1] */
  int nmeta; /* number of pairs */
  dl_st_cast cast; /* dl_model_save only: store float tensors as another dtype */
  const dl_io_hooks *io; /* system-call hooks of the atomic write (NULL: POSIX) */
} dl_save_desc;

/* Load options; zero = strict, no conversion.
 *   partial  1: missing and unexpected names are reported but not errors
 *            (torch's load_state_dict(strict=False)); shape or dtype
 *            mismatches still fail
 *   convert  1: a float tensor of another float dtype (f16, bf16, f64 ...) is
 *            converted to the model's, rounded to nearest even */
typedef struct dl_load_desc {
  int partial; /* 1: missing and unexpected names are reported, not errors */
  int convert; /* 1: float tensors of another float dtype are converted */
} dl_load_desc;

/* What a load found. text lists one problem per line ("missing: NAME
 * (model f32[3])", "unexpected: NAME (file F32[2])", "mismatch: NAME: file
 * F32[3, 4], model f32[4, 3]"); when it fills up, the counts stay exact. */
#define DL_LOAD_REPORT_TEXT 4096
/* What a load found (dl_model_load, dl_checkpoint_load): counts of tensors
 * loaded, missing, unexpected and mismatched, and a text naming them. */
typedef struct dl_load_report {
  int nloaded;      /* tensors copied (0 when the load failed) */
  int nmissing;     /* expected names absent from the file */
  int nunexpected;  /* names in the file that nothing expected */
  int nmismatch;    /* present with another shape or dtype */
  char text[DL_LOAD_REPORT_TEXT]; /* "missing: NAME (model f32[3])" ... one line each, cut when full */
} dl_load_report;


/* A caller's named value saved in a checkpoint ("epoch", "shuffle_seed", a
 * history of losses): exactly one of i64 / f64 (a number) or t (a
 * contiguous tensor of any dtype and shape; a load needs the same dtype and
 * shape) points at it; a save reads it there, a load writes it there. */
typedef struct dl_named_value {
  const char *name; /* its name in the file (extra/NAME) */
  int64_t *i64; /* an int64 number, or NULL */
  double *f64; /* a double number, or NULL */
  dl_tensor *t; /* a contiguous tensor, or NULL */
} dl_named_value;
DL_API void dl__nv_set(dl_named_value *v, const char *name, int64_t *i64, double *f64, dl_tensor *t) {
  v->name = name;
  v->i64 = i64;
  v->f64 = f64;
  v->t = t;
}

/* One tensor a load or save moves: its name in the file and the memory it
 * comes from or goes to, described as a tensor. */
typedef struct dl__io_target {
  char name[DL_NAME_MAX + 64];
  dl_tensor t;
  const dl_st_tensor *found;
  int check;      /* a number whose value a load checks against [lo, hi] */
  double lo, hi;
} dl__io_target;
typedef struct dl__io_list {
  dl_ctx *ctx;
  dl__io_target *v;
  int n, cap;
} dl__io_list;

DL_API void dl__io_list_free(dl__io_list *l) {
  dl_free(l->ctx, l->v);
  l->v = NULL;
  l->n = l->cap = 0;
}
DL_API dl_status dl__io_list_add(dl__io_list *l, dl_dtype dt, int ndim, const int64_t *shape, void *data,
                                 const char *fmt, ...) DL__PRINTF(6, 7);
DL_API dl_status dl__io_list_add(dl__io_list *l, dl_dtype dt, int ndim, const int64_t *shape, void *data,
                                 const char *fmt, ...) {
  dl__io_target *t;
  va_list ap;
  int len;
  if (!dl__io_grow(l->ctx, (void **)&l->v, &l->cap, l->n + 1, sizeof *l->v)) return DL_ERR_NOMEM;
  t = &l->v[l->n];
  memset(t, 0, sizeof *t);
  va_start(ap, fmt);
  len = vsnprintf(t->name, sizeof t->name, fmt, ap);
  va_end(ap);
  if (len < 0 || (size_t)len >= sizeof t->name)
    return dl_fail(l->ctx, DL_ERR_ARG, "checkpoint: the name '%.100s...' is too long", t->name);
  dl_tensor_wrap(&t->t, l->ctx, dt, ndim, shape, data);
  l->n++;
  return DL_OK;
}
/* The last target added is a number (I64 or F64 scalar) that a load
 * refuses outside [lo, hi] (or NaN), before anything is copied. */
DL_API void dl__io_list_range(dl__io_list *l, double lo, double hi) {
  dl__io_target *t = &l->v[l->n - 1];
  t->check = 1;
  t->lo = lo;
  t->hi = hi;
}
/* Every parameter and buffer of m, by name. */
DL_API dl_status dl__io_list_model(dl__io_list *l, const dl_model *m) {
  int i;
  for (i = 0; i < m->nparams; i++) {
    const dl_param *p = m->params[i];
    dl_status s = dl__io_list_add(l, p->t.dtype, p->t.ndim, p->t.shape, p->t.data, "%s", p->name);
    if (s != DL_OK) return s;
    /* an integer scalar buffer is a counter (BatchNorm's num_batches_tracked, incremented every step) */
    if (p->t.dtype == DL_I64 && p->t.ndim == 0) dl__io_list_range(l, 0, DL__IO_MAX_COUNT);
  }
  return DL_OK;
}
/* The optimizer kind's name as a checkpoint stores it ("sgd", "adam", ...). */
DL_API const char *dl_optim_kind_name(dl_optim_kind k) {
  static const char *const n[] = {"sgd", "adam", "rmsprop", "adagrad", "lion", "lamb"};
  return (unsigned)k <= (unsigned)DL_OPT_LAMB ? n[k] : "?";
}
/* Everything a checkpoint holds (see the top of this file). */
DL_API dl_status dl__io_list_checkpoint(dl__io_list *l, dl_model *m, dl_optim *o, const dl_named_value *vals, int nvals) {
  static const int64_t two = 2;
  dl_status s;
  int i, k;
  if (o && o->model != m) DL_PANIC(m->ctx, "dl_checkpoint", "the optimizer belongs to another model");
  if ((s = dl__io_list_model(l, m)) != DL_OK) return s;
  if (o) {
    for (i = 0; i < m->nparams; i++) {
      dl_param *p = m->params[i];
      if (p->kind == DL_PARAM_BUFFER) continue;
      for (k = 0; k < o->nstate; k++) {
        const dl_tensor *t = &o->state[i * DL_OPTIM_MAX_STATE + k];
        if ((s = dl__io_list_add(l, t->dtype, t->ndim, t->shape, t->data, "optim/%s/%s", p->name, o->state_name[k])) != DL_OK)
          return s;
      }
      if ((s = dl__io_list_add(l, DL_I64, 0, NULL, &o->steps[i], "optim/%s/step", p->name)) != DL_OK) return s;
      dl__io_list_range(l, 0, DL__IO_MAX_COUNT);
    }
    if ((s = dl__io_list_add(l, DL_F64, 0, NULL, &o->lr, "optim/lr")) != DL_OK) return s;
    dl__io_list_range(l, 0, DBL_MAX);
    if ((s = dl__io_list_add(l, DL_I64, 0, NULL, &o->nsteps, "optim/nsteps")) != DL_OK) return s;
    dl__io_list_range(l, 0, DL__IO_MAX_COUNT);
  }
  /* an rng is two uint64 (key, counter), stored as the bits of I64 [2] */
  if ((s = dl__io_list_add(l, DL_I64, 1, &two, &m->rng, "rng/init")) != DL_OK) return s;
  for (i = 0; i < m->nlayers; i++) {
    dl_rng *r = dl_dropout_rng(m->layers[i]);
    if (r && (s = dl__io_list_add(l, DL_I64, 1, &two, r, "rng/layer/%s", m->layers[i]->name)) != DL_OK) return s;
  }
  for (i = 0; i < nvals; i++) {
    const dl_named_value *v = &vals[i];
    if (!v->name || !*v->name || (v->i64 != NULL) + (v->f64 != NULL) + (v->t != NULL) != 1)
      return dl_fail(m->ctx, DL_ERR_ARG, "checkpoint: value %d ('%.100s') needs a name and exactly one of i64, f64, t", i,
                     v->name ? v->name : "(null)");
    if (v->t && !dl_tensor_is_contiguous(v->t))
      return dl_fail(m->ctx, DL_ERR_ARG, "checkpoint: value '%.100s' is a tensor that is not contiguous", v->name);
    if (v->t)
      s = dl__io_list_add(l, v->t->dtype, v->t->ndim, v->t->shape, v->t->data, "extra/%s", v->name);
    else
      s = dl__io_list_add(l, v->i64 ? DL_I64 : DL_F64, 0, NULL, v->i64 ? (void *)v->i64 : (void *)v->f64, "extra/%s",
                          v->name);
    if (s != DL_OK) return s;
  }
  return DL_OK;
}

DL_API void dl__report_line(dl_load_report *rep, const char *fmt, ...) DL__PRINTF(2, 3);
DL_API void dl__report_line(dl_load_report *rep, const char *fmt, ...) {
  size_t n = strlen(rep->text);
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n + strlen(line) + 2 + 4 < sizeof rep->text) {
    memcpy(rep->text + n, line, strlen(line));
    memcpy(rep->text + n + strlen(line), "\n", 2);
  } else if (n + 5 <= sizeof rep->text && (n < 4 || strcmp(rep->text + n - 4, "...\n") != 0)) {
    memcpy(rep->text + n, "...\n", 5);
  }
}

/* Validate every target against the file, then (only if all is well) copy. */
DL_API dl_status dl__io_load_list(dl__io_list *l, const dl_safetensors *st, const dl_load_desc *desc,
                                  dl_load_report *rep, const char *op, const char *src) {
  dl_load_report local;
  unsigned char *used;
  char first[512] = "", fs[160];
  int i, partial = desc && desc->partial, convert = desc && desc->convert, shape_bad = 0;
  if (!rep) rep = &local;
  memset(rep, 0, sizeof *rep);
  used = (unsigned char *)dl_alloc(l->ctx, (size_t)(st->ntensors ? st->ntensors : 1));
  if (!used) return DL_ERR_NOMEM;
  memset(used, 0, (size_t)(st->ntensors ? st->ntensors : 1));
  for (i = 0; i < l->n; i++) {
    dl__io_target *t = &l->v[i];
    const dl_st_tensor *e = dl_safetensors_find(st, t->name);
    dl_status s;
    t->found = NULL;
    if (!e) {
      rep->nmissing++;
      dl__report_line(rep, "missing: %s (model %s)", t->name, DL_SHAPESTR(&t->t));
      if (!partial && !first[0]) snprintf(first, sizeof first, "'%.100s' is missing", t->name);
      continue;
    }
    used[e - st->tensors] = 1;
    s = dl__st_fits(e, &t->t, convert);
    if (s != DL_OK) {
      rep->nmismatch++;
      shape_bad |= s == DL_ERR_SHAPE;
      dl__report_line(rep, "mismatch: %s: file %s, model %s", t->name, dl__st_shape_str(e, fs, sizeof fs), DL_SHAPESTR(&t->t));
      if (!first[0])
        snprintf(first, sizeof first, "'%.100s' is %s in the file, %s in the model", t->name, dl__st_shape_str(e, fs, sizeof fs),
                 DL_SHAPESTR(&t->t));
      continue;
    }
    t->found = e;
  }
  for (i = 0; i < st->ntensors; i++)
    if (!used[i]) {
      rep->nunexpected++;
      dl__report_line(rep, "unexpected: %s (file %s)", st->tensors[i].name, dl__st_shape_str(&st->tensors[i], fs, sizeof fs));
      if (!partial && !first[0]) snprintf(first, sizeof first, "'%.100s' is not expected", st->tensors[i].name);
    }
  dl_free(l->ctx, used);
  if (rep->nmismatch || (!partial && (rep->nmissing || rep->nunexpected)))
    return dl_fail(l->ctx, shape_bad ? DL_ERR_SHAPE : rep->nmismatch ? DL_ERR_DTYPE : DL_ERR_ARG,
                   "%s: %.200s: %d missing, %d unexpected, %d mismatched (%s); nothing was changed", op, src,
                   rep->nmissing, rep->nunexpected, rep->nmismatch, first);
  /* the numbers with a range, read and checked before anything is copied */
  for (i = 0; i < l->n; i++) {
    const dl__io_target *t = &l->v[i];
    int64_t iv = 0;
    double dv = 0;
    dl_tensor tmp;
    if (!t->check || !t->found || t->t.ndim != 0 || (t->t.dtype != DL_I64 && t->t.dtype != DL_F64)) continue;
    dl_tensor_wrap(&tmp, l->ctx, t->t.dtype, 0, NULL, t->t.dtype == DL_I64 ? (void *)&iv : (void *)&dv);
    if (dl_safetensors_read(st, t->found, &tmp, convert) != DL_OK) return DL_ERR_FORMAT;
    if (t->t.dtype == DL_I64 ? ((double)iv < t->lo || (double)iv > t->hi) : !(dv >= t->lo && dv <= t->hi)) {
      char val[64];
      if (t->t.dtype == DL_I64) snprintf(val, sizeof val, "%lld", (long long)iv);
      else snprintf(val, sizeof val, "%.17g", dv);
      dl__report_line(rep, "out of range: %s = %s (allowed %.17g .. %.17g)", t->name, val, t->lo, t->hi);
      return dl_fail(l->ctx, DL_ERR_FORMAT, "%s: %.200s: '%.100s' is %s, outside %.17g .. %.17g; nothing was changed", op,
                     src, t->name, val, t->lo, t->hi);
    }
  }
  for (i = 0; i < l->n; i++)
    if (l->v[i].found) {
      dl_safetensors_read(st, l->v[i].found, &l->v[i].t, convert);
      rep->nloaded++;
    }
  return DL_OK;
}

/* Add every parameter and buffer of m to w by name, float tensors stored as
 * `cast` says. */
DL_API dl_status dl_st_writer_add_model(dl_st_writer *w, const dl_model *m, dl_st_cast cast) {
  static const dl_dtype as[] = {DL_F32, DL_F16, DL_BF16, DL_F32, DL_F64};
  int i;
  if ((unsigned)cast > (unsigned)DL_ST_AS_F64)
    return dl__st_w_fail(w, dl_fail(w->ctx, DL_ERR_ARG, "dl_st_writer_add_model: unknown cast %d", (int)cast));
  for (i = 0; i < m->nparams; i++) {
    const dl_tensor *t = &m->params[i]->t;
    dl_status s = dl_st_writer_add_as(w, m->params[i]->name, t,
                                      cast != DL_ST_KEEP && dl_dtype_is_float(t->dtype) ? as[cast] : t->dtype);
    if (s != DL_OK) return s;
  }
  return DL_OK;
}
DL_API int dl__meta_has(const dl_save_desc *d, const char *key) {
  int i;
  for (i = 0; d && i < d->nmeta; i++)
    if (d->meta[2 * i] && strcmp(d->meta[2 * i], key) == 0) return 1;
  return 0;
}
DL_API void dl__writer_meta(dl_st_writer *w, const dl_save_desc *d, const char *const *ours, int nours) {
  int i;
  for (i = 0; i < nours; i++)
    if (!dl__meta_has(d, ours[2 * i])) dl_st_writer_meta(w, ours[2 * i], ours[2 * i + 1]);
  for (i = 0; d && i < d->nmeta; i++) dl_st_writer_meta(w, d->meta[2 * i], d->meta[2 * i + 1]);
}

/* Load from a parsed file (memory or disk): see dl_model_load_desc. */
DL_API dl_status dl_model_load_st(dl_model *m, const dl_safetensors *st, const dl_load_desc *desc, dl_load_report *rep) {
  dl__io_list l;
  dl_status s;
  memset(&l, 0, sizeof l);
  l.ctx = m->ctx;
  s = dl__io_list_model(&l, m);
  if (s == DL_OK) s = dl__io_load_list(&l, st, desc, rep, "dl_model_load", "safetensors");
  dl__io_list_free(&l);
  return s;
}

/* Serialise the model's parameters and buffers into one dl_alloc block
 * (free with dl_free(m->ctx, *buf)); desc->meta and ->cast as for a save. */
DL_API dl_status dl_model_save_memory(const dl_model *m, const dl_save_desc *desc, void **buf, size_t *size) {
  static const char *const ours[] = {"format", "pt"};
  dl_st_writer w;
  dl_status s;
  dl_st_writer_init(&w, m->ctx);
  dl__writer_meta(&w, desc, ours, 1);
  dl_st_writer_add_model(&w, m, desc ? desc->cast : DL_ST_KEEP);
  s = dl_st_writer_to_memory(&w, buf, size);
  dl_st_writer_free(&w);
  return s;
}

/* Whether m's parameters or o's state are on a GPU (gpu.h): checkpoints
 * read and write them on the host, so they refuse. */
DL_API int dl__io_on_device(const dl_model *m, const dl_optim *o) {
  int i;
  for (i = 0; i < m->nparams; i++)
    if (m->params[i]->t.device != DL_CPU) return 1;
#ifdef DL_USE_CUDA
  if (o && o->device != DL_CPU) return 1;
#else
  (void)o;
#endif
  return 0;
}
/* dl_checkpoint_load from a parsed file (memory or disk; `src` names it in
 * messages): the same strict, checked, all-or-nothing restore. */
DL_API dl_status dl__checkpoint_load_st(dl_model *m, dl_optim *o, const dl_safetensors *st, const char *src,
                                        const dl_named_value *vals, int nvals, dl_load_report *rep) {
  dl__io_list l;
  dl_status s;
  memset(&l, 0, sizeof l);
  l.ctx = m->ctx;
  s = dl__io_list_checkpoint(&l, m, o, vals, nvals);
  if (s == DL_OK) s = dl__io_load_list(&l, st, NULL, rep, "dl_checkpoint_load", src);
  dl__io_list_free(&l);
  return s;
}
/* dl_checkpoint_load from an already parsed file (memory or disk): the same
 * strict, all-or-nothing restore. */
DL_API dl_status dl_checkpoint_load_st(dl_model *m, dl_optim *o, const dl_safetensors *st, const dl_named_value *vals,
                                       int nvals, dl_load_report *rep) {
  if (rep) memset(rep, 0, sizeof *rep);
  if (dl__io_on_device(m, o))
    return dl_fail(m->ctx, DL_ERR_UNSUPPORTED, "dl_checkpoint_load_st: the model or optimizer is on the GPU; load on "
                   "the host, then move the model (dl_model_to_device) and make the optimizer");
  return dl__checkpoint_load_st(m, o, st, "<memory>", vals, nvals, rep);
}

#ifdef DL__IO_FILES
/* Save every parameter and buffer of m by its PyTorch state_dict name to
 * path, atomically (metadata "format": "pt" unless desc names one).
 * DL_OK, or DL_ERR_IO / DL_ERR_NOMEM / DL_ERR_ARG with a message in m's ctx;
 * a previous file at path is then left as it was. */
DL_API dl_status dl_model_save(const dl_model *m, const char *path, const dl_save_desc *desc) {
  static const char *const ours[] = {"format", "pt"};
  dl_st_writer w;
  dl_status s;
  dl_st_writer_init(&w, m->ctx);
  dl__writer_meta(&w, desc, ours, 1);
  dl_st_writer_add_model(&w, m, desc ? desc->cast : DL_ST_KEEP);
  s = dl_st_writer_save(&w, path, desc ? desc->io : NULL);
  dl_st_writer_free(&w);
  return s;
}
/* Load weights saved by dl_model_save or by PyTorch-side code (any order
 * and alignment, metadata ignored). desc NULL: strict, no conversion. On
 * any problem nothing in m changes; rep (may be NULL) lists each missing,
 * unexpected and mismatched name; the ctx message names the first. */
DL_API dl_status dl_model_load_desc(dl_model *m, const char *path, const dl_load_desc *desc, dl_load_report *rep) {
  dl_safetensors st;
  dl__io_list l;
  dl_status s;
  if (rep) memset(rep, 0, sizeof *rep);
  s = dl_safetensors_open(&st, m->ctx, path);
  if (s != DL_OK) return s;
  memset(&l, 0, sizeof l);
  l.ctx = m->ctx;
  s = dl__io_list_model(&l, m);
  if (s == DL_OK) s = dl__io_load_list(&l, &st, desc, rep, "dl_model_load", path);
  dl__io_list_free(&l);
  dl_safetensors_free(&st);
  return s;
}
/* Strict load: every parameter and buffer present with its shape and dtype,
 * nothing else in the file. */
DL_API dl_status dl_model_load(dl_model *m, const char *path, dl_load_report *rep) {
  return dl_model_load_desc(m, path, NULL, rep);
}

/* >>checkpoints --------------------------------------------------------------- */



/* Save the whole training state (see the top of this file): m, o (may be
 * NULL: no optimizer), the rngs, and the caller's nvals named numbers.
 * desc: metadata and io hooks (cast must be 0: a checkpoint is exact).
 * Atomic. DL_OK, or DL_ERR_ARG / DL_ERR_IO / DL_ERR_NOMEM. */
DL_API dl_status dl_checkpoint_save(dl_model *m, dl_optim *o, const char *path, const dl_named_value *vals, int nvals,
                                    const dl_save_desc *desc) {
  const char *ours[] = {"format", "dl.checkpoint", "dl.version", DL_VERSION_STRING, "dl.optimizer", "none",
                        "dl.dtype", dl_dtype_name(m->dtype)};
  dl__io_list l;
  dl_st_writer w;
  dl_status s;
  int i;
  if (dl__io_on_device(m, o))
    return dl_fail(m->ctx, DL_ERR_UNSUPPORTED, "dl_checkpoint_save %.200s: the model or optimizer is on the GPU; "
                   "checkpoints of device training state are not implemented yet", path);
  if (desc && desc->cast != DL_ST_KEEP)
    return dl_fail(m->ctx, DL_ERR_ARG, "dl_checkpoint_save: a checkpoint stores tensors as they are (cast must be 0)");
  if (o) ours[5] = dl_optim_kind_name(o->kind);
  memset(&l, 0, sizeof l);
  l.ctx = m->ctx;
  s = dl__io_list_checkpoint(&l, m, o, vals, nvals);
  if (s != DL_OK) {
    dl__io_list_free(&l);
    return s;
  }
  dl_st_writer_init(&w, m->ctx);
  dl__writer_meta(&w, desc, ours, 4);
  for (i = 0; i < l.n; i++) dl_st_writer_add(&w, l.v[i].name, &l.v[i].t);
  s = dl_st_writer_save(&w, path, desc ? desc->io : NULL);
  dl_st_writer_free(&w);
  dl__io_list_free(&l);
  return s;
}
/* Restore what dl_checkpoint_save wrote, into m, o (NULL if none was saved)
 * and the caller's values (the same names; each written through its
 * pointer). Strict: every name present with its shape and dtype, nothing
 * else in the file; otherwise nothing at all changes (model, optimizer,
 * rngs, values) and rep lists the problems. */
DL_API dl_status dl_checkpoint_load(dl_model *m, dl_optim *o, const char *path, const dl_named_value *vals, int nvals,
                                    dl_load_report *rep) {
  dl_safetensors st;
  dl_status s;
  if (rep) memset(rep, 0, sizeof *rep);
  if (dl__io_on_device(m, o))
    return dl_fail(m->ctx, DL_ERR_UNSUPPORTED, "dl_checkpoint_load %.200s: the model or optimizer is on the GPU; "
                   "load on the host, then move the model (dl_model_to_device) and make the optimizer", path);
  s = dl_safetensors_open(&st, m->ctx, path);
  if (s != DL_OK) return s;
  s = dl__checkpoint_load_st(m, o, &st, path, vals, nvals, rep);
  dl_safetensors_free(&st);
  return s;
}
#endif /* DL__IO_FILES */

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_IO_H */
