/* Host-side driver (x86-64, hosted): build.sh compiles the corpus sources
 * natively with this main and records the printed values as the expected
 * checksums.  Output: one "<symbol> <decimal checksum>" line per entry point,
 * `entry` first.  Every program runs twice to make sure a second run in the
 * same process gives the same value (the harness may do that). */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

unsigned entry(void);

int main(void)
{
    unsigned total = entry();
    if (entry() != total) {
        fprintf(stderr, "entry: second run differs\n");
        return 1;
    }
    printf("entry %u\n", total);
#define CORPUS_PRINT(name)                                            \
    {                                                                 \
        unsigned first = entry_##name();                              \
        if (entry_##name() != first) {                                \
            fprintf(stderr, "entry_" #name ": second run differs\n"); \
            return 1;                                                 \
        }                                                             \
        printf("entry_" #name " %u\n", first);                      \
    }
    CORPUS_PROGRAMS(CORPUS_PRINT)
#undef CORPUS_PRINT
    return 0;
}
