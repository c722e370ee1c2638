/* expect: dl__ERROR_dual_number_in_float_context
 * A dl_dual64 operand where the scalar context is float: a dual number is
 * never reduced to its value silently. */
#include "dl/dual.h"

float value_plus(float x, dl_dual64 d);
float value_plus(float x, dl_dual64 d) {
  DL_SCALAR(float);
  return dl_add(x, d); /* the mistake: d is a dl_dual64 */
}
