/* A frame over 4 KiB: the stack adjustment does not fit one immediate
 * (sub sp, sp, #4096+ takes two instructions or a register). */
#include "common.h"

#define BIG 5000u

NOINLINE u32 frame4k_scan(const u8 *p, u32 n, u32 step)
{
    u32 a = 1u, b = 0u;
    for (u32 i = 0; i < n; i += step) {
        a = (a + p[i]) & 0xffffu;
        b = (b + a) & 0xffffu;
    }
    return (b << 16) | a;
}

NOINLINE u32 frame4k_words(const u32 *p, u32 n, u32 step)
{
    u32 h = n;
    for (u32 i = 0; i < n; i += step)
        h = h * 31u + p[i];
    return h;
}

NOINLINE u32 frame4k_big(u32 s)
{
    u8 buf[BIG];
    for (u32 i = 0; i < BIG; i += 250u)
        buf[i] = (u8)(s + i);
    buf[BIG - 1u] = (u8)s;
    return frame4k_scan(buf, BIG, 250u) ^ buf[BIG - 1u];
}

/* Big frame plus callee-saved registers live across the call. */
NOINLINE u32 frame4k_regs(u32 s, u32 t)
{
    u32 words[1200];
    u32 x = s * 3u, y = t + 11u, z = s ^ t;
    for (u32 i = 0; i < 1200u; i += 300u)
        words[i] = x + i;
    u32 r = frame4k_words(words, 1200u, 300u);
    r += words[300] ^ words[900];
    return r + x + y + z;
}

unsigned entry_frame4k(void)
{
    u32 h = frame4k_big(0x5eu);
    h = mix32(h, frame4k_regs(h, 7u));
    return h;
}
