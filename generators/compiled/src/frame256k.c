/* A frame over 256 KiB: a 300,000-byte local array, touched sparsely (every
 * 8 KiB) so it is neither optimised out nor slow to emulate. */
#include "common.h"

#define HUGE 300000u
#define STRIDE 8192u

NOINLINE u32 frame256k_sum(const u8 *p, u32 n, u32 stride)
{
    u32 h = 0x811c9dc5u;
    for (u32 i = 0; i < n; i += stride)
        h = (h ^ p[i]) * 16777619u;
    return h ^ p[n - 1u];
}

NOINLINE u32 frame256k_pick(const u32 *p, u32 n)
{
    return p[0] ^ (p[n / 2u] * 3u) ^ (p[n - 1u] << 1);
}

NOINLINE u32 frame256k_huge(u32 seed)
{
    u8 buf[HUGE];
    for (u32 i = 0; i < HUGE; i += STRIDE)
        buf[i] = (u8)(seed + (i >> 13));
    buf[HUGE - 1u] = (u8)(seed ^ 0x5au);
    return frame256k_sum(buf, HUGE, STRIDE);
}

/* Huge frame with values live across the call. */
NOINLINE u32 frame256k_live(u32 a, u32 b)
{
    u32 words[HUGE / 4u];
    u32 x = a * 9u, y = b ^ a;
    words[0] = x;
    words[HUGE / 8u] = y;
    words[HUGE / 4u - 1u] = x + y;
    u32 r = frame256k_pick(words, HUGE / 4u);
    return r + words[0] + words[HUGE / 8u] + words[HUGE / 4u - 1u] + x * y;
}

unsigned entry_frame256k(void)
{
    u32 h = frame256k_huge(0x33u);
    h = mix32(h, frame256k_live(h, 0x1234u));
    return h;
}
