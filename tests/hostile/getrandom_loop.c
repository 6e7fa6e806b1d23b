/* getrandom of 1 MiB, forever: each call costs the emulator real work for
 * no instructions, so only a clock can end it. */
#define _GNU_SOURCE
#include <sys/random.h>

static char buffer[1 << 20];

int main(void)
{
    for (;;)
        getrandom(buffer, sizeof buffer, 0);
}
