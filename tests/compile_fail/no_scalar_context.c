/* expect: dl__ERROR_generic_math_needs_DL_SCALAR_or_DL_ASSIGN
 * Generic math on a double in a function with no DL_SCALAR: the context, not
 * the argument, picks the type, so there is nothing to pick from. */
#include "dl/dual.h"

double f(double x);
double f(double x) {
  return dl_exp(x); /* the mistake: no DL_SCALAR(double); above */
}
