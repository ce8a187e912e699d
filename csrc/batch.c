/* Batch all-pairs search (find_all) over arrays of fingerprints.
 * Filled in by the batch-search work; kept as its own translation unit. */
#include "simstore.h"
