/* expect: dl: a dual number in a tensor expression
 * C++: a dl_dual variable inside a DL_ASSIGN expression (the loop computes
 * in the tensor's element type). */
#include "dl/expr.h"

void step(dl_tensor *y, dl_tensor *a, dl_dual s);
void step(dl_tensor *y, dl_tensor *a, dl_dual s) {
  DL_ASSIGN(y, dl_mul(a, s)); /* the mistake: s is a dl_dual */
}
