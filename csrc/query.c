/* Store query helpers (candidate verification over LMDB key bytes).
 * Filled in by the store work; kept as its own translation unit. */
#include "simstore.h"
