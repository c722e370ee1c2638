/* examples/classify.c - classify image files with the MLP that
 * examples/fashion_mlp.c trained.
 *
 *   ./classify shirt.png boot.jpg
 *   shirt.png: Shirt 0.812, T-shirt/top 0.121, Pullover 0.043
 *   boot.jpg: Ankle boot 0.967, Sneaker 0.025, Sandal 0.008
 *
 * The weights are fashion_mlp's --save file (--weights FILE; default
 * runs/fashion_mlp/fashion_mlp.safetensors, where fashion_mlp saves them): nn.Sequential(Flatten, Linear(784, 256), ReLU,
 * Linear(256, 128), ReLU, Linear(128, 10)) by PyTorch name; the hidden sizes
 * are read from the file, so --hidden1 / --hidden2 runs load too.
 *
 * Each image (anything stb_image reads: PNG, JPEG, BMP, GIF, TGA, PNM) is
 * made grey, cropped to the object (what differs from the border's colour;
 * --no-crop keeps the whole image), padded to a square with the border's
 * colour, shrunk to 28x28 by averaging areas (enlarged bilinearly when
 * smaller) - as Fashion-MNIST's thumbnails were made from product photos -
 * and standardised like the training data: (x / 255 - 0.2860) / 0.3530. The
 * model then prints its k most likely classes (--top K) with their softmax
 * probabilities.
 *
 * What the model knows: Fashion-MNIST images show ONE garment, centred and
 * filling the frame, LIGHT on a BLACK background. A photo of a dark object
 * on a light background needs --invert (a note on stderr says so when an
 * image's border is light); crop photos to the object. Anything else (a
 * person wearing the shirt, a busy background) is outside what 60000
 * 28x28 grey thumbnails taught it.
 *
 * Images to try it on: --write-samples DIR writes the first --samples N
 * (default 20) Fashion-MNIST test images to DIR as PNG files named by index
 * and true class (0000_Ankle-boot.png; "/" and " " in class names become "-").
 *
 * A file that cannot be read or decoded gets a message on stderr, the others
 * are still classified, and the exit status is then 1; weights that are
 * missing, corrupt or of another model: a message (with what did not match)
 * and exit 1; bad flags: exit 2.
 *
 * Build (zlib reads the gzip data for --write-samples; stb is header-only,
 * Debian's libstb-dev):
 *   cc -std=c11 -O2 -Iinclude examples/classify.c -o classify -lz -lm
 *   cc -std=c11 -O2 -Iinclude examples/fashion_mlp.c -o fashion_mlp -lz -lm && ./fashion_mlp
 *   ./classify --write-samples samples && ./classify samples/0*.png
 *
 * dl-example-flags: -lz
 */
#if defined(__has_include)
#if !__has_include(<stb/stb_image.h>) || !__has_include(<stb/stb_image_write.h>)
#error "examples/classify.c reads and writes images with stb (header-only): apt-get install libstb-dev"
#endif
#endif
#define DL_USE_ZLIB
#define DL_USE_STB_IMAGE
#define DL_USE_STB_IMAGE_WRITE
#include "dl.h"

#if !defined(_WIN32)
#include <sys/stat.h>
#include <sys/types.h>
#endif

enum { SIDE = 28, CLASSES = 10 };
static const double MEAN = 0.2860, STD = 0.3530; /* of x / 255 over Fashion-MNIST's training set */

/* fashion_mlp.c's model, with its parameter names "1.weight" ... "5.bias". */
static dl_model *make_mlp(dl_ctx *ctx, int64_t h1, int64_t h2) {
  dl_model *m = dl_model_make(ctx, &(dl_model_desc){.dtype = DL_F32});
  dl_flatten_make(m, NULL, NULL, 1);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = SIDE * SIDE, .out = h1});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = h1, .out = h2});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = h2, .out = CLASSES});
  return m;
}

/* The model for the weights in path: its hidden sizes from the file's
 * "1.weight" [h1, 784] and "3.weight" [h2, h1] (fashion_mlp's defaults when
 * absent: the strict load then names what is missing), loaded strictly
 * (float weights of another float dtype converted). NULL with a message
 * (and what did not match) on stderr. */
static dl_model *load_mlp(dl_ctx *ctx, const char *path, const char *argv0) {
  dl_safetensors st;
  dl_load_report rep;
  const dl_st_tensor *w1, *w3;
  const char *fmt;
  int64_t h1 = 256, h2 = 128;
  dl_model *m;
  memset(&rep, 0, sizeof rep);
  if (dl_safetensors_open(&st, ctx, path) != DL_OK) {
    fprintf(stderr, "%s: --weights %s: %s\n", argv0, path, dl_ctx_message(ctx));
    return NULL;
  }
  fmt = dl_safetensors_meta(&st, "format");
  if (fmt && strcmp(fmt, "dl.checkpoint") == 0) {
    fprintf(stderr, "%s: --weights %s: a training checkpoint (fashion_mlp --checkpoint); give the weights it saves "
            "with --save\n", argv0, path);
    dl_safetensors_free(&st);
    return NULL;
  }
  w1 = dl_safetensors_find(&st, "1.weight");
  w3 = dl_safetensors_find(&st, "3.weight");
  if (w1 && w1->ndim == 2 && w1->shape[0] >= 1 && w1->shape[0] <= 65536) h1 = w1->shape[0];
  if (w3 && w3->ndim == 2 && w3->shape[0] >= 1 && w3->shape[0] <= 65536) h2 = w3->shape[0];
  m = make_mlp(ctx, h1, h2);
  if (!m || dl_model_status(m) != DL_OK) {
    fprintf(stderr, "%s: %s\n", argv0, dl_ctx_message(ctx));
    dl_model_free(m);
    dl_safetensors_free(&st);
    return NULL;
  }
  if (dl_model_load_st(m, &st, &(dl_load_desc){.convert = 1}, &rep) != DL_OK) {
    fprintf(stderr, "%s: --weights %s: %s\n%s(are these the weights examples/fashion_mlp.c saves?)\n", argv0, path,
            dl_ctx_message(ctx), rep.text);
    dl_model_free(m);
    m = NULL;
  }
  dl_safetensors_free(&st);
  return m;
}

/* Area-average resampling of the grey square src [s, s] to dst [d, d]:
 * each output pixel is the mean of the source area it covers (partial
 * pixels weighted by the part covered), so shrinking a large photo does not
 * alias. */
static void area_resize(const unsigned char *src, int s, unsigned char *dst, int d) {
  double r = (double)s / d;
  int oy, ox, iy, ix;
  for (oy = 0; oy < d; oy++) {
    double y0 = oy * r, y1 = (oy + 1) * r;
    for (ox = 0; ox < d; ox++) {
      double x0 = ox * r, x1 = (ox + 1) * r, sum = 0;
      for (iy = (int)y0; iy < s && iy < y1; iy++) {
        double wy = (iy + 1 < y1 ? iy + 1 : y1) - (iy > y0 ? iy : y0);
        for (ix = (int)x0; ix < s && ix < x1; ix++) {
          double wx = (ix + 1 < x1 ? ix + 1 : x1) - (ix > x0 ? ix : x0);
          sum += wy * wx * src[(size_t)iy * (size_t)s + (size_t)ix];
        }
      }
      sum = sum / (r * r) + 0.5;
      dst[oy * d + ox] = (unsigned char)(sum >= 255 ? 255 : sum <= 0 ? 0 : sum);
    }
  }
}

/* The image at path as the model's input, the way Fashion-MNIST's images
 * were made from product photos: grey, inverted on request, cropped to the
 * object (the pixels that differ from the border's mean colour by more than
 * a sixth of the range; unless no_crop), padded to a square with that
 * colour, resized to SIDE x SIDE into out. *border: that mean (after
 * inversion). 0, or -1 with a message in msg. */
static int load_image(const char *path, int invert, int no_crop, unsigned char *out, double *border, char *msg,
                      size_t nmsg) {
  int w, h, x, y, s, x0, x1, y0, y1, bg;
  double bsum = 0;
  size_t bytes, i;
  dl_ctx ictx;
  unsigned char *img, *sq;
  dl_ctx_init(&ictx, NULL);
  /* the header first: an image declaring more than DL_IMAGE_MAX_PIXELS is refused undecoded */
  img = dl_image_load(&ictx, path, 1, &w, &h);
  if (!img) { /* the reason: the message after "dl_image_load: PATH: " */
    const char *m = dl_ctx_message(&ictx);
    size_t pl = strlen(path);
    if (strncmp(m, "dl_image_load: ", 15) == 0 && strncmp(m + 15, path, pl) == 0 && strncmp(m + 15 + pl, ": ", 2) == 0)
      m += 15 + pl + 2;
    snprintf(msg, nmsg, "%s", m);
    return -1;
  }
#define PX(x, y) img[(size_t)(y) * (size_t)w + (size_t)(x)]
  if (invert)
    for (i = 0; i < (size_t)w * (size_t)h; i++) img[i] = (unsigned char)(255 - img[i]);
  for (x = 0; x < w; x++) bsum += PX(x, 0) + PX(x, h - 1);
  for (y = 0; y < h; y++) bsum += PX(0, y) + PX(w - 1, y);
  *border = bsum / (2.0 * w + 2.0 * h);
  bg = (int)(*border + 0.5);
  /* the object's bounding box [x0, x1) x [y0, y1); the whole image when nothing stands out */
  x0 = w, x1 = 0, y0 = h, y1 = 0;
  for (y = 0; y < h && !no_crop; y++)
    for (x = 0; x < w; x++)
      if (abs(PX(x, y) - bg) > 42) {
        if (x < x0) x0 = x;
        if (x >= x1) x1 = x + 1;
        if (y < y0) y0 = y;
        if (y >= y1) y1 = y + 1;
      }
  if (x0 >= x1) x0 = 0, x1 = w, y0 = 0, y1 = h;
  s = x1 - x0 > y1 - y0 ? x1 - x0 : y1 - y0;
  if (dl_size_mul((size_t)s, (size_t)s, &bytes) || !(sq = (unsigned char *)malloc(bytes))) {
    snprintf(msg, nmsg, "%dx%d pixels: too large to pad to a square here", w, h);
    dl_image_free(img);
    return -1;
  }
  memset(sq, bg, bytes);
  for (y = y0; y < y1; y++)
    memcpy(sq + (size_t)(y - y0 + (s - (y1 - y0)) / 2) * (size_t)s + (size_t)((s - (x1 - x0)) / 2), &PX(x0, y),
           (size_t)(x1 - x0));
#undef PX
  dl_image_free(img);
  if (s >= SIDE)
    area_resize(sq, s, out, SIDE);
  else
    dl_image_resize(sq, s, s, 1, out, SIDE, SIDE);
  free(sq);
  return 0;
}

/* Class name as a file name part: "T-shirt/top" -> "T-shirt-top". */
static void file_class(int k, char *buf, size_t n) {
  size_t i;
  snprintf(buf, n, "%s", dl_fashion_mnist_class(k));
  for (i = 0; buf[i]; i++)
    if (buf[i] == '/' || buf[i] == ' ') buf[i] = '-';
}

/* --write-samples: the first n test images of Fashion-MNIST (in data_dir;
 * NULL: Debian's place) as DIR/NNNN_Class.png. 0, or 1 with a message. */
static int write_samples(dl_ctx *ctx, const char *dir, int64_t n, const char *data_dir, const char *argv0) {
  dl_dataset test;
  int64_t i;
  if (dl_load_fashion_mnist(ctx, data_dir, NULL, &test) != DL_OK) {
    fprintf(stderr, "%s: %s\n", argv0, dl_ctx_message(ctx));
    return 1;
  }
#if !defined(_WIN32)
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: --write-samples %s: cannot create the folder: %s\n", argv0, dir, strerror(errno));
    dl_dataset_free(&test);
    return 1;
  }
#endif
  if (n > test.n) n = test.n;
  for (i = 0; i < n; i++) {
    char path[4096], cls[32];
    int64_t label = dl_i64(test.y)[i];
    file_class((int)label, cls, sizeof cls);
    snprintf(path, sizeof path, "%s/%04lld_%s.png", dir, (long long)i, cls);
    errno = 0;
    if (!stbi_write_png(path, SIDE, SIDE, 1, dl_u8(test.x) + i * SIDE * SIDE, SIDE)) {
      fprintf(stderr, "%s: cannot write %s: %s\n", argv0, path, errno ? strerror(errno) : "the PNG encoder failed");
      dl_dataset_free(&test);
      return 1;
    }
  }
  printf("wrote %lld Fashion-MNIST test images to %s/ (INDEX_CLASS.png)\n", (long long)n, dir);
  dl_dataset_free(&test);
  return 0;
}

/* Classify each file; returns the number that failed. */
static int classify(dl_ctx *ctx, dl_model *m, char **files, int nfiles, int64_t top, int invert, int no_crop,
                    const char *argv0) {
  dl_tape tp;
  dl_tensor *x = dl_tensor_make(ctx, DL_F32, DL_SHAPE(1, 1, SIDE, SIDE));
  unsigned char px[SIDE * SIDE];
  int i, failed = 0;
  if (!x || dl_tape_init(&tp, ctx, 0) != DL_OK) {
    fprintf(stderr, "%s: %s\n", argv0, dl_ctx_message(ctx));
    dl_tensor_free(x);
    return nfiles;
  }
  dl_model_train(m, 0);
  dl_no_grad_begin(&tp);
  for (i = 0; i < nfiles; i++) {
    char msg[512];
    double border, p[CLASSES];
    int order[CLASSES], j, k;
    dl_tensor *prob;
    if (load_image(files[i], invert, no_crop, px, &border, msg, sizeof msg) != 0) {
      fprintf(stderr, "%s: %s: %s\n", argv0, files[i], msg);
      failed++;
      continue;
    }
    if (border > 127)
      fprintf(stderr, "%s: note: %s has a light background; the model knows light objects on black%s\n", argv0,
              files[i], invert ? " (it was inverted: leave out --invert?)" : ": try --invert");
    for (j = 0; j < SIDE * SIDE; j++) dl_f32(x)[j] = (float)((px[j] / 255.0 - MEAN) / STD);
    prob = dl_t_softmax(&tp, dl_model_forward(m, &tp, x), -1);
    for (j = 0; j < CLASSES; j++) p[j] = dl_f32(prob)[j], order[j] = j;
    for (j = 0; j < CLASSES; j++) /* selection sort, most likely first (ties: lower class first) */
      for (k = j + 1; k < CLASSES; k++)
        if (p[order[k]] > p[order[j]]) {
          int t = order[j];
          order[j] = order[k];
          order[k] = t;
        }
    printf("%s:", files[i]);
    for (j = 0; j < top; j++) printf("%s %s %.3f", j ? "," : "", dl_fashion_mnist_class(order[j]), p[order[j]]);
    printf("\n");
    dl_tape_rewind(&tp);
  }
  dl_no_grad_end(&tp);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  return failed;
}

int main(int argc, char **argv) {
  const char *weights = "runs/fashion_mlp/fashion_mlp.safetensors", *samples_dir = NULL, *data = NULL;
  int64_t top = 3, nsamples = 20;
  int invert = 0, no_crop = 0, help = 0, nfiles = 0, rc = 0;
  dl_flag fl[] = {
      {"weights", DL_FLAG_STR, (void *)&weights, 0, 0, "weights saved by examples/fashion_mlp.c (--save)", "FILE"},
      {"top", DL_FLAG_I64, &top, 1, CLASSES, "print the K most likely classes", "K"},
      {"invert", DL_FLAG_SWITCH, &invert, 0, 0, "invert the grey values first (dark object on light background)", NULL},
      {"no-crop", DL_FLAG_SWITCH, &no_crop, 0, 0, "keep the whole image (default: crop to the object first)", NULL},
      {"write-samples", DL_FLAG_STR, (void *)&samples_dir, 0, 0,
       "write the first --samples Fashion-MNIST test images to DIR as PNG (INDEX_CLASS.png) and stop", "DIR"},
      {"samples", DL_FLAG_I64, &nsamples, 1, 10000, "how many images --write-samples writes", "N"},
      {"data", DL_FLAG_STR, (void *)&data, 0, 0, "where Fashion-MNIST is (for --write-samples; default: Debian's)",
       "DIR"},
      {"help", DL_FLAG_SWITCH, &help, 0, 0, "this list", NULL},
  };
  char **files = (char **)calloc((size_t)(argc > 0 ? argc : 1), sizeof *files);
  dl_ctx ctx;
  dl_model *m;
  if (!files) return fprintf(stderr, "%s: out of memory\n", argv[0]), 1;
  dl_ctx_init(&ctx, NULL);
  if (dl_flags_main(&ctx, argc, argv, fl, (int)(sizeof fl / sizeof fl[0]), files, argc, &nfiles,
                    "Classify image files (PNG, JPEG, ...) with the MLP of examples/fashion_mlp.c: top classes and "
                    "their probabilities.\nFashion-MNIST shows light garments on black: --invert for dark on light.") !=
      DL_OK) {
    free(files);
    return 2;
  }
  if (samples_dir && nfiles > 0) {
    fprintf(stderr, "%s: --write-samples writes images and stops: give image files in another run\n", argv[0]);
    rc = 2;
  } else if (samples_dir) {
    rc = write_samples(&ctx, samples_dir, nsamples, data, argv[0]);
  } else if (nfiles == 0) {
    fprintf(stderr, "%s: no image files given (see --help; --write-samples DIR makes some)\n", argv[0]);
    rc = 2;
  } else if (!(m = load_mlp(&ctx, weights, argv[0]))) {
    rc = 1;
  } else {
    int failed = classify(&ctx, m, files, nfiles, top, invert, no_crop, argv[0]);
    if (failed) fprintf(stderr, "%s: %d of %d images could not be classified\n", argv[0], failed, nfiles);
    rc = failed ? 1 : 0;
    dl_model_free(m);
  }
  free(files);
  return rc;
}
