/* Leaf functions: no calls, so no lr save; clang/gcc keep everything in
 * r0-r3/r12 at -O2 and build no frame at all (a frame only at -O0 or with
 * frame pointers). */
#include "common.h"

NOINLINE u32 leaf_add3(u32 a, u32 b, u32 c)
{
    return a + b * 3u + c;
}

NOINLINE u32 leaf_popcount(u32 x)
{
    u32 n = 0;
    while (x) {
        x &= x - 1u;
        n++;
    }
    return n;
}

NOINLINE u32 leaf_select(u32 a, u32 b)
{
    return a > b ? a - b : b - a;
}

/* Enough live values to need callee-saved registers, but still a leaf. */
NOINLINE u32 leaf_many_locals(u32 a, u32 b, u32 c, u32 d)
{
    u32 e = a ^ b, f = b + c, g = c - d, h = d * 7u;
    u32 i = e + f, j = f ^ g, k = g + h, l = h ^ e;
    u32 m = i * j + k * l;
    return m ^ (a + b + c + d + e + f + g + h + i + j + k + l);
}

NOINLINE u32 leaf_sum_array(const u32 *p, u32 n)
{
    u32 s = 0;
    for (u32 i = 0; i < n; i++)
        s = s * 31u + p[i];
    return s;
}

NOINLINE void leaf_fill(u32 *p, u32 n, u32 seed)
{
    for (u32 i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = seed >> 8;
    }
}

unsigned entry_leaf(void)
{
    u32 buf[8];
    u32 h = 0x1eafu;
    leaf_fill(buf, 8u, 7u);
    h = mix32(h, leaf_sum_array(buf, 8u));
    for (u32 i = 0; i < 4u; i++) {
        h = mix32(h, leaf_add3(i, h, buf[i]));
        h = mix32(h, leaf_popcount(buf[i] ^ h));
        h = mix32(h, leaf_select(buf[i], buf[7u - i]));
    }
    h = mix32(h, leaf_many_locals(buf[0], buf[1], buf[2], h));
    return h;
}
