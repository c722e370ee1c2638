/* expect: dl__ERROR_dual_number_in_tensor_expression
 * A dl_dual variable inside a DL_ASSIGN expression: the loop computes in the
 * tensor's element type, and a dual number has no place there. */
#include "dl/expr.h"

void step(dl_tensor *y, dl_tensor *a, dl_dual s);
void step(dl_tensor *y, dl_tensor *a, dl_dual s) {
  DL_ASSIGN(y, dl_mul(a, s)); /* the mistake: s is a dl_dual */
}
