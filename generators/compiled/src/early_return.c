/* Several return points: each path has its own epilogue (or branches to a
 * shared one), so the CFI has to describe more than one teardown. */
#include "common.h"

NOINLINE u32 er_helper(u32 x)
{
    return x * 13u + 1u;
}

NOINLINE u32 er_classify(u32 x, u32 y)
{
    if (x == 0)
        return 1u;
    u32 a = er_helper(x);
    if (a > y)
        return a - y;
    u32 b = er_helper(a ^ y);
    if ((b & 3u) == 0)
        return b;
    if ((b & 3u) == 1u)
        return er_helper(b) + a;
    u32 c = er_helper(b + a);
    if (c < 100u)
        return c + b + a;
    return c ^ b ^ a;
}

/* Returns from inside a loop. */
NOINLINE u32 er_find(const u32 *p, u32 n, u32 key)
{
    for (u32 i = 0; i < n; i++) {
        if (p[i] == key)
            return i + 1u;
        if (p[i] > key * 4u)
            return 0x100u + er_helper(i);
    }
    return 0xffffu;
}

unsigned entry_early_return(void)
{
    static const u32 table[6] = { 3u, 9u, 27u, 81u, 243u, 729u };
    u32 h = 0xea51u;
    for (u32 i = 0; i < 5u; i++)
        h = mix32(h, er_classify(i * 7u, h & 0x3ffu));
    h = mix32(h, er_classify(0, 1u));
    h = mix32(h, er_find(table, 6u, 81u));
    h = mix32(h, er_find(table, 6u, 50u));
    h = mix32(h, er_find(table, 6u, 1000u));
    return h;
}
