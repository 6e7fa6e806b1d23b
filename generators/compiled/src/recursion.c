/* Deep recursion (depth 48): every level keeps a small array whose address
 * escapes to the callee, so no compiler can turn it into a loop; the stack
 * holds 48+ frames of the same function when the innermost one runs. */
#include "common.h"

#define DEPTH 48u

NOINLINE u32 rec_descend(u32 n, u32 *out)
{
    u32 local[2];
    if (n == 0) {
        out[0] = 0x9e3779b9u;
        out[1] = 1u;
        return 17u;
    }
    u32 r = rec_descend(n - 1u, local);
    out[0] = local[0] ^ (r + n);
    out[1] = local[1] + (local[0] >> 27);
    return r * 3u + (local[1] & 7u);
}

/* Mutual recursion: even/odd levels alternate between two functions. */
NOINLINE u32 rec_odd(u32 n, u32 acc);

NOINLINE u32 rec_even(u32 n, u32 acc)
{
    if (n == 0)
        return acc;
    u32 r = rec_odd(n - 1u, acc + n);
    return r ^ (acc << 1);
}

NOINLINE u32 rec_odd(u32 n, u32 acc)
{
    if (n == 0)
        return acc * 5u;
    u32 r = rec_even(n - 1u, acc ^ n);
    return r + (acc >> 2);
}

unsigned entry_recursion(void)
{
    u32 out[2];
    u32 h = rec_descend(DEPTH, out);
    h = mix32(h, out[0]);
    h = mix32(h, out[1]);
    h = mix32(h, rec_even(16u, 3u));
    return h;
}
