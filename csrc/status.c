/* The words of each return code of the core (enum ss_status in simstore.h). */
#include "simstore.h"

const char *ss_strerror(int rc) {
    switch (rc) {
    case SS_OK: return "ok";
    case SS_IDENTICAL: return "identical fingerprints met (group them first)";
    case SS_ENOMEM: return "out of memory";
    case SS_EINVAL: return "bad arguments";
    case SS_ENEED: return "a run the call needs is not loaded";
    case SS_EMAP: return "LMDB's map cannot answer (a page or record does not check out)";
    case SS_EROOM: return "a table or buffer given has no room";
    case SS_EBADCODE: return "stored bytes are malformed";
    case SS_EOS: return "the OS refused the call";
    }
    return "unknown status";
}
