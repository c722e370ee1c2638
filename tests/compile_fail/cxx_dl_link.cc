/* expect: dl: DL_LINK and DL_IMPLEMENTATION are C only
 * C++: a file built with -DDL_LINK (the compile-once mode of C programs). */
#define DL_LINK
#include "dl.h"
