/* Dense switches: compiled to table branches (tbb/tbh) at -O2/-Os. */
#include "common.h"

NOINLINE u32 sw_helper(u32 x)
{
    return (x << 3) ^ (x >> 2);
}

/* Byte-offset table (tbb) with a call in some arms. */
NOINLINE u32 sw_small(u32 op, u32 x)
{
    switch (op) {
    case 0: return x + 1u;
    case 1: return x ^ 0xa5u;
    case 2: return sw_helper(x);
    case 3: return x * 9u;
    case 4: return x - 77u;
    case 5: return sw_helper(x + 5u) + 1u;
    case 6: return x >> 3;
    case 7: return x << 2;
    case 8: return ~x;
    case 9: return x | 0x100u;
    default: return 0xdefau;
    }
}

/* Larger arms push the offsets past 255 half-words: tbh. */
#define ARM(n) case n: acc = sw_helper(acc + n##u) ^ (acc * (n##u + 3u)); acc += x >> (n % 7); break;

NOINLINE u32 sw_large(u32 op, u32 x)
{
    u32 acc = x;
    switch (op) {
    ARM(0) ARM(1) ARM(2) ARM(3) ARM(4) ARM(5) ARM(6) ARM(7)
    ARM(8) ARM(9) ARM(10) ARM(11) ARM(12) ARM(13) ARM(14) ARM(15)
    ARM(16) ARM(17) ARM(18) ARM(19) ARM(20) ARM(21) ARM(22) ARM(23)
    ARM(24) ARM(25) ARM(26) ARM(27) ARM(28) ARM(29) ARM(30) ARM(31)
    default: acc = 0;
    }
    return acc;
}

unsigned entry_switch_table(void)
{
    u32 h = 0x5e1ecu;
    for (u32 i = 0; i < 11u; i++)
        h = mix32(h, sw_small(i, h & 0xffffu));
    for (u32 i = 0; i < 34u; i += 3u)
        h = mix32(h, sw_large(i, h));
    return h;
}
