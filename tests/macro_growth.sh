#!/usr/bin/env bash
# tests/macro_growth.sh CC OUTDIR - the generic math's macro text must grow
# linearly with nesting depth (DESIGN.md, "Macro text must grow linearly").
#
# For depths 0, 5 and 10 it writes one program whose DL_ASSIGN expression
# and whose dual-number (DL_SCALAR) expression nest `depth` levels of
# dl_add(dl_mul(., t), 0.5) / dl_tanh(.), preprocesses it with CC, and fails
# if the text added by the last 5 levels exceeds 1.25x the text added by
# the first 5 (a macro that pastes an argument twice makes it 32x). The
# depth-10 program is also built and run: its tensor and dual results must
# equal the same expression written as plain C.
# Prints "ok: ..." lines or "FAIL: ..." lines; exits non-zero on failure.
set -u
CC=$1; OUT=$2
mkdir -p "$OUT"
gen() { # depth -> C file on stdout
  local d=$1 e="x" s="v" k
  for ((k = 0; k < d; k++)); do
    if ((k % 2)); then e="dl_tanh($e)"; s="dl_tanh($s)"
    else e="dl_add(dl_mul($e, t), 0.5)"; s="dl_add(dl_mul($s, 0.75), 0.5)"; fi
  done
  local pe="xv" ps="u" pd="1.0"
  for ((k = 0; k < d; k++)); do
    if ((k % 2)); then pd="$pd * (1 - tanh($ps) * tanh($ps))"; ps="tanh($ps)"; pe="tanhf($pe)"
    else pe="($pe * tv + 0.5f)"; ps="($ps * 0.75 + 0.5)"; pd="$pd * 0.75"; fi
  done
  cat <<C
#include <stdio.h>
#include <math.h>
#include "dl.h"
static dl_dual64 f(dl_dual64 v) {
  DL_SCALAR(dl_dual64);
  return $s;
}
int main(void) {
  dl_tensor *x = dl_tensor_make(NULL, DL_F32, DL_SHAPE(1000));
  dl_tensor *t = dl_tensor_make(NULL, DL_F32, DL_SHAPE(1000));
  dl_tensor *y = dl_tensor_make(NULL, DL_F32, DL_SHAPE(1000));
  const float *xp = (const float *)x->data, *tp = (const float *)t->data, *yp = (const float *)y->data;
  double worst = 0, u = 0.3;
  dl_dual64 r;
  int i;
  for (i = 0; i < 1000; i++) { ((float *)x->data)[i] = (float)(i % 37) / 37.0f - 0.5f; ((float *)t->data)[i] = (float)(i % 11) / 11.0f; }
  DL_ASSIGN(y, $e);
  for (i = 0; i < 1000; i++) {
    const float xv = xp[i], tv = tp[i];
    const double want = (double)($pe), e = fabs((double)yp[i] - want) / (1e-6 + fabs(want));
    if (e > worst) worst = e;
  }
  r = f(dl_dual64_make(u, 1.0));
  printf("tensor %.3g dual value %.17g want %.17g derivative %.17g want %.17g\\n", worst, r.v, (double)($ps), r.d, (double)($pd));
  return !(worst < 1e-5 && fabs(r.v - ($ps)) < 1e-12 && fabs(r.d - ($pd)) < 1e-12);
}
C
}
fail=0
for d in 0 5 10; do gen $d >"$OUT/growth_$d.c"; done
s0=$($CC -std=c11 -E -Iinclude "$OUT/growth_0.c" | wc -c)
s5=$($CC -std=c11 -E -Iinclude "$OUT/growth_5.c" | wc -c)
s10=$($CC -std=c11 -E -Iinclude "$OUT/growth_10.c" | wc -c)
a=$((s5 - s0)); b=$((s10 - s5))
if [ "$a" -gt 0 ] && [ $((b * 100)) -le $((a * 125)) ]; then
  echo "ok: $CC: preprocessed text +$a bytes for levels 1-5, +$b for levels 6-10 (linear)"
else
  echo "FAIL: $CC: preprocessed text +$a bytes for levels 1-5, +$b for levels 6-10 (bound: 1.25x)"; fail=1
fi
if $CC -std=c11 -O1 -Wall -Wextra -Wpedantic -Werror -Iinclude "$OUT/growth_10.c" -o "$OUT/growth_10" -lm 2>"$OUT/growth.log" &&
   "$OUT/growth_10" >"$OUT/growth.out"; then
  echo "ok: $CC: depth-10 expression evaluates right: $(cat "$OUT/growth.out")"
else
  echo "FAIL: $CC: depth-10 expression"; head -20 "$OUT/growth.log" "$OUT/growth.out"; fail=1
fi
exit $fail
