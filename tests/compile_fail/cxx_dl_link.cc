/* expect: dl: compile-once (DL_LINK, DL_IMPLEMENTATION) is C only
 * C++: a file built with -DDL_LINK (the compile-once mode of C programs). */
#define DL_LINK
#include "dl.h"
