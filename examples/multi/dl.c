/* examples/multi/dl.c - the library, compiled once for the whole program
 * (see mlp.h): its functions become this object's external symbols, which
 * the files compiled with -DDL_LINK call. */
#define DL_IMPLEMENTATION
#include "dl.h"
