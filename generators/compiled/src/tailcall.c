/* Tail calls: functions ending in `return other(x)`; at -O2/-Os the
 * compilers tear down the frame and branch (b.w) instead of calling. */
#include "common.h"

NOINLINE u32 tc_final(u32 x, u32 y)
{
    return x * 2654435761u + y;
}

/* Frame with a callee-saved register, then a tail call. */
NOINLINE u32 tc_with_frame(u32 x, u32 y)
{
    u32 t = tc_final(x, y);
    return tc_final(t ^ x, y + 1u);
}

NOINLINE u32 tc_chain3(u32 x)
{
    return tc_final(x + 3u, x);
}

NOINLINE u32 tc_chain2(u32 x)
{
    return tc_chain3(x ^ 0x22u);
}

NOINLINE u32 tc_chain1(u32 x)
{
    return tc_chain2(x * 5u);
}

/* Conditional tail calls to two different targets. */
NOINLINE u32 tc_pick(u32 x)
{
    if (x & 1u)
        return tc_chain1(x >> 1);
    return tc_with_frame(x, x >> 3);
}

/* Tail recursion the compiler may turn into a loop. */
NOINLINE u32 tc_count(u32 n, u32 acc)
{
    if (n == 0)
        return acc;
    return tc_count(n - 1u, acc * 3u + n);
}

unsigned entry_tailcall(void)
{
    u32 h = 0x7a11ca11u;
    for (u32 i = 0; i < 4u; i++)
        h = mix32(h, tc_pick(h + i));
    h = mix32(h, tc_count(10u, 1u));
    return h;
}
