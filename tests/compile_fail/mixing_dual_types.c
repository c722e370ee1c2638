/* expect: dl__ERROR_mixing_dl_dual_and_dl_dual64
 * A dl_dual (float) operand where the scalar context is dl_dual64: dual
 * numbers are never converted, so this must not compile. */
#include "dl/dual.h"

dl_dual64 scale(dl_dual64 x, dl_dual s);
dl_dual64 scale(dl_dual64 x, dl_dual s) {
  DL_SCALAR(dl_dual64);
  return dl_mul(x, s); /* the mistake: s is a dl_dual */
}
