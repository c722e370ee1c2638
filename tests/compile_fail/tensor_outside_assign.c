/* expect: dl__ERROR_tensor_outside_DL_ASSIGN
 * A tensor passed to the generic math in a DL_SCALAR(float) block: tensors
 * are operands only inside DL_ASSIGN. */
#include "dl/dual.h"

float first_exp(dl_tensor *t);
float first_exp(dl_tensor *t) {
  DL_SCALAR(float);
  return dl_exp(t); /* the mistake: t is a dl_tensor * */
}
