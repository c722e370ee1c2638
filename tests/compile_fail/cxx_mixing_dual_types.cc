/* expect: dl: mixing dual number types
 * C++: dl_dual (float) and dl_dual64 (double) in one generic call. */
#include "dl/dual.h"

dl_dual64 f(dl_dual a, dl_dual64 b);
dl_dual64 f(dl_dual a, dl_dual64 b) { return dl_add(a, b); }
