/* Two shapes of GCC -O2/-Os code the frame analysis must know exactly
 * (harness/thumb/frame_effects.py; tests/test_frame_analysis.py builds this
 * with -fstack-clash-protection, as distributions build their packages):
 *
 *  - mix: shrink-wrapped. It compares and returns before its
 *    `push {r4-r11, lr}`, then, with every register live in its loop, uses
 *    lr as a general register after the save.
 *  - with_alloca, with_vla: dynamic allocations through the r7 frame
 *    pointer; under stack-clash protection sp steps down to the computed
 *    size a page at a time (`sub.w sp, sp, #4096` in a loop), then by the
 *    rest (`sub.w sp, sp, rN`).
 *
 * Deterministic: prints one checksum. */
#include <alloca.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned seed = 12345u;

NOINLINE unsigned mix(const unsigned *a, const unsigned *b, int n, unsigned k)
{
    if (n <= 0)
        return k;
    unsigned s0 = k, s1 = k ^ 0x9e3779b9u, s2 = k * 3u, s3 = k + 7u, s4 = k >> 3, s5 = ~k, s6 = k << 5, s7 = 1u;
    for (int i = 0; i < n; i++) {
        unsigned x = a[i], y = b[i];
        s0 += x * 10u; s1 ^= y + s0; s2 += s1 * x; s3 ^= s2 >> 7;
        s4 += y * s3; s5 ^= s4 + x; s6 += s5 ^ y; s7 = s7 * 31u + s6;
    }
    return s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7;
}

NOINLINE unsigned consume(const unsigned char *buf, unsigned n)
{
    unsigned h = 2166136261u;
    for (unsigned i = 0; i < n; i++)
        h = (h ^ buf[i]) * 16777619u;
    return h;
}

NOINLINE unsigned with_alloca(unsigned n)
{
    unsigned char *buf = alloca(n + 8u);
    for (unsigned i = 0; i < n + 8u; i++)
        buf[i] = (unsigned char)(i * 7u + n);
    return consume(buf, n + 8u) + buf[n];
}

/* A variable-length array per round, freed as each round ends. */
NOINLINE unsigned with_vla(unsigned n)
{
    unsigned total = 0;
    for (unsigned round = 1; round <= 3; round++) {
        unsigned words[n * round + 1u];
        for (unsigned i = 0; i <= n * round; i++)
            words[i] = i * i + round;
        total += consume((const unsigned char *)words, (n * round + 1u) * 4u) ^ words[n];
    }
    return total;
}

int main(void)
{
    unsigned a[64], b[64], x = seed, total = 0;
    for (int i = 0; i < 64; i++) {
        x = x * 1103515245u + 12345u; a[i] = x >> 8;
        x = x * 1103515245u + 12345u; b[i] = x >> 8;
    }
    for (int r = 0; r < 100; r++)
        total += mix(a, b, (r % 67) - 3, total + (unsigned)r);
    /* sizes past a page: the probing loop runs */
    for (unsigned k = 0; k < 12; k++)
        total += with_alloca(600u * k + 37u) ^ with_vla((300u * k) & 2047u);
    printf("%08x\n", total);
    return 0;
}
