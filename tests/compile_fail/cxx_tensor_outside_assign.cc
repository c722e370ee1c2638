/* expect: dl: generic math over a tensor is a tensor expression
 * C++: generic math over a tensor used as a number, outside DL_ASSIGN. */
#include "dl/expr.h"

double f(dl_tensor *a);
double f(dl_tensor *a) { return dl_add(a, 1.0); }
