/* tests/data/make_images.c - writes the image folders tests/test_data.c reads,
 * with stb_image_write (Debian libstb-dev), independently of dl/data.h:
 *
 *   gcc -std=c11 -O2 tests/data/make_images.c -o /tmp/make_images -lm && /tmp/make_images tests/data
 *
 *   images/cat/a.png   4x4 RGB, pixel (y, x) = (10y + x, 50 + 20x, 200 - 30y)
 *   images/cat/b.png   8x8 grey (1 channel), value 16x + 2y
 *   images/cat/c.jpg   8x8 RGB, solid (200, 100, 50), quality 100
 *   images/dog/a.png   2x2 RGBA, (255, 0, 0, 255) (0, 255, 0, 128) / (0, 0, 255, 0) (255, 255, 255, 255)
 *   images/dog/b.JPG   16x16 RGB, solid (20, 180, 90), quality 100
 *   images/dog/notes.txt, images/dog/.hidden.png, images/.hidden/x.png: skipped by the loader
 *   images_bad/only/broken.png: not an image
 *   images_empty/: no class folders
 */
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char path[4096];
static const char *root;

static const char *at(const char *rel) {
  snprintf(path, sizeof path, "%s/%s", root, rel);
  return path;
}
static void dir(const char *rel) { mkdir(at(rel), 0755); }
static void check(int ok, const char *what) {
  if (!ok) { fprintf(stderr, "cannot write %s\n", what); exit(1); }
}

int main(int argc, char **argv) {
  unsigned char a[4 * 4 * 3], b[8 * 8], c[8 * 8 * 3], d[2 * 2 * 4], e[16 * 16 * 3];
  static const unsigned char rgba[16] = {255, 0, 0, 255, 0, 255, 0, 128, 0, 0, 255, 0, 255, 255, 255, 255};
  int y, x, i;
  FILE *f;
  root = argc > 1 ? argv[1] : "tests/data";
  for (y = 0; y < 4; y++)
    for (x = 0; x < 4; x++) {
      a[(y * 4 + x) * 3 + 0] = (unsigned char)(10 * y + x);
      a[(y * 4 + x) * 3 + 1] = (unsigned char)(50 + 20 * x);
      a[(y * 4 + x) * 3 + 2] = (unsigned char)(200 - 30 * y);
    }
  for (y = 0; y < 8; y++)
    for (x = 0; x < 8; x++) b[y * 8 + x] = (unsigned char)(16 * x + 2 * y);
  for (i = 0; i < 64; i++) { c[3 * i] = 200; c[3 * i + 1] = 100; c[3 * i + 2] = 50; }
  memcpy(d, rgba, sizeof d);
  for (i = 0; i < 256; i++) { e[3 * i] = 20; e[3 * i + 1] = 180; e[3 * i + 2] = 90; }

  dir("images"); dir("images/cat"); dir("images/dog"); dir("images/.hidden");
  dir("images_bad"); dir("images_bad/only"); dir("images_empty");
  check(stbi_write_png(at("images/cat/a.png"), 4, 4, 3, a, 4 * 3), "a.png");
  check(stbi_write_png(at("images/cat/b.png"), 8, 8, 1, b, 8), "b.png");
  check(stbi_write_jpg(at("images/cat/c.jpg"), 8, 8, 3, c, 100), "c.jpg");
  check(stbi_write_png(at("images/dog/a.png"), 2, 2, 4, d, 2 * 4), "dog a.png");
  check(stbi_write_jpg(at("images/dog/b.JPG"), 16, 16, 3, e, 100), "b.JPG");
  check(stbi_write_png(at("images/dog/.hidden.png"), 4, 4, 3, a, 4 * 3), ".hidden.png");
  check(stbi_write_png(at("images/.hidden/x.png"), 4, 4, 3, a, 4 * 3), "x.png");
  f = fopen(at("images/dog/notes.txt"), "wb");
  check(f != NULL, "notes.txt");
  fputs("not an image\n", f);
  fclose(f);
  f = fopen(at("images_bad/only/broken.png"), "wb");
  check(f != NULL, "broken.png");
  fputs("\x89PNG\r\n\x1a\n this is not really a png", f);
  fclose(f);
  f = fopen(at("images_empty/README"), "wb");
  check(f != NULL, "README");
  fputs("no class folders here\n", f);
  fclose(f);
  return 0;
}
