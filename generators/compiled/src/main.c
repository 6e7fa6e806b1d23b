/* The single top-level entry: runs every program of the corpus in turn and
 * combines their checksums.  Each entry_<name> stays a global symbol, so a
 * harness can also run one program at a time. */
#include "common.h"

unsigned entry(void)
{
    u32 h = 0x0c0ffee1u;
#define CORPUS_RUN(name) h = mix32(h, entry_##name());
    CORPUS_PROGRAMS(CORPUS_RUN)
#undef CORPUS_RUN
    return h;
}
