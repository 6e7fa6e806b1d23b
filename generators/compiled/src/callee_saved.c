/* Many callee-saved registers live across calls: r4-r11 all hold values
 * that survive several calls, so the prologue pushes the whole set. */
#include "common.h"

NOINLINE u32 cs_step(u32 x, u32 y)
{
    return (x ^ (y >> 3)) + y * 5u;
}

NOINLINE u32 cs_many(u32 a, u32 b, u32 c, u32 d)
{
    u32 e = a + 1u, f = b ^ 0x55u, g = c * 3u, h = d + a;
    u32 i = a ^ c, j = b + d, k = e ^ h, l = f + g;
    u32 t = cs_step(a, b);
    t = cs_step(t, e) ^ f;
    t = cs_step(t, g) + h;
    t = cs_step(t, i) ^ j;
    t = cs_step(t, k) + l;
    return t ^ (a + b + c + d + e + f + g + h + i + j + k + l);
}

/* A loop that keeps many values across the call in every iteration. */
NOINLINE u32 cs_loop(u32 n, u32 s)
{
    u32 a = s, b = s * 7u, c = s ^ 0xffu, d = s + 3u, e = 1u, f = 2u, g = 3u;
    for (u32 i = 0; i < n; i++) {
        u32 t = cs_step(a + i, b);
        a += t; b ^= a; c += b; d ^= c; e += d; f ^= e; g += f;
    }
    return a ^ b ^ c ^ d ^ e ^ f ^ g;
}

unsigned entry_callee_saved(void)
{
    u32 h = cs_many(1u, 2u, 3u, 4u);
    h = mix32(h, cs_many(h, h >> 8, h >> 16, 9u));
    h = mix32(h, cs_loop(6u, h));
    return h;
}
