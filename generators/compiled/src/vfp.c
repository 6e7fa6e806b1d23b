/* Double arithmetic live across calls: with -mfloat-abi=hard the values sit
 * in callee-saved d8-d15, so prologues contain vpush {d8-...}. */
#include "common.h"

NOINLINE double vfp_poly(double x)
{
    return ((0.5 * x + 1.5) * x - 2.25) * x + 0.125;
}

NOINLINE double vfp_keep_live(double a, double b, double c)
{
    double p = a * b, q = b + c, r = c - a, s = a * c;
    double t = vfp_poly(p);
    t += vfp_poly(q);
    t *= vfp_poly(r) + s;
    return t + p + q + r + s;
}

NOINLINE double vfp_many(double x)
{
    double v0 = x, v1 = x + 1.0, v2 = x * 2.0, v3 = x - 0.5;
    double v4 = v0 * v1, v5 = v2 * v3, v6 = v0 + v3, v7 = v1 * v2;
    double acc = vfp_keep_live(v0, v1, v2);
    acc += vfp_keep_live(v3 * 0.25, v4 * 0.125, v5 * 0.0625);
    return acc + v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;
}

/* Doubles and integers both live across the calls. */
NOINLINE double vfp_mixed(u32 n, double x)
{
    u32 k = n * 5u;
    double acc = x;
    while (n--) {
        acc = acc * 0.75 + vfp_poly(acc * 0.5);
        k += (u32)(i32)(acc * 16.0);
    }
    return acc + (double)k;
}

/* Exact, order-independent digest of a double: scale and truncate. */
static u32 vfp_digest(double d)
{
    double scaled = d * 1024.0;
    i32 whole = (i32)scaled;
    u32 frac = (u32)(i32)((scaled - (double)whole) * 65536.0);
    return (u32)whole ^ (frac << 7);
}

unsigned entry_vfp(void)
{
    double r = vfp_many(1.25);
    u32 h = vfp_digest(r);
    double m = vfp_mixed(4u, r * 0.001);
    return mix32(h, vfp_digest(m));
}
