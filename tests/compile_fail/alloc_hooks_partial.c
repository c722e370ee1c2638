/* expect: define all of DL_MALLOC, DL_REALLOC and DL_FREE */
#include <stdlib.h>
#define DL_MALLOC(n, user) malloc(n)
#include "dl.h"
int main(void) { return 0; }
