/* alloca and variable-length arrays with run-time sizes: sp moves by an
 * amount only known at run time, so unwinding needs a frame pointer (r7)
 * even with -fomit-frame-pointer. */
#include "common.h"

static volatile u32 alloca_sizes[4] = { 5u, 12u, 3u, 9u };

NOINLINE u32 alloca_consume(const u32 *p, u32 n)
{
    u32 h = n;
    for (u32 i = 0; i < n; i++)
        h = h * 33u + p[i];
    return h;
}

NOINLINE u32 alloca_user(u32 n, u32 seed)
{
    u32 *p = __builtin_alloca(n * sizeof(u32));
    for (u32 i = 0; i < n; i++)
        p[i] = seed + i * i;
    return alloca_consume(p, n);
}

NOINLINE u32 vla_user(u32 n, u32 seed)
{
    u32 v[n];
    for (u32 i = 0; i < n; i++)
        v[i] = seed ^ (i << 3);
    u32 r = alloca_consume(v, n);
    return r + v[n - 1u];
}

/* Two run-time sized areas in one frame, the second inside a block. */
NOINLINE u32 vla_nested(u32 a, u32 b)
{
    u8 outer[a];
    for (u32 i = 0; i < a; i++)
        outer[i] = (u8)(i * 7u + b);
    u32 r = 0;
    {
        u32 inner[b];
        for (u32 i = 0; i < b; i++)
            inner[i] = outer[i % a] + i;
        r = alloca_consume(inner, b);
    }
    return r ^ outer[a - 1u];
}

unsigned entry_alloca(void)
{
    u32 h = 0xa11cau;
    h = mix32(h, alloca_user(alloca_sizes[0], 3u));
    h = mix32(h, vla_user(alloca_sizes[1], h & 0xffu));
    h = mix32(h, vla_nested(alloca_sizes[2], alloca_sizes[3]));
    return h;
}
