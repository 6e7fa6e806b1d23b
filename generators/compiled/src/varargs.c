/* Variadic functions: the callee spills r0-r3 next to the stacked arguments
 * (sub sp / push {r0-r3} before the frame), then walks them with va_arg. */
#include "common.h"

typedef __builtin_va_list va_list;
#define va_start(ap, last) __builtin_va_start(ap, last)
#define va_arg(ap, type) __builtin_va_arg(ap, type)
#define va_end(ap) __builtin_va_end(ap)
#define va_copy(d, s) __builtin_va_copy(d, s)

NOINLINE u32 va_sum(u32 count, ...)
{
    va_list ap;
    u32 s = count;
    va_start(ap, count);
    for (u32 i = 0; i < count; i++)
        s = s * 17u + va_arg(ap, u32);
    va_end(ap);
    return s;
}

/* A tiny format walker: 'i' takes a u32, 'd' a double, 'l' a u64. */
NOINLINE u32 va_format(const char *fmt, ...)
{
    va_list ap;
    u32 h = 0x7a11u;
    va_start(ap, fmt);
    for (const char *p = fmt; *p; p++) {
        if (*p == 'i') {
            h = mix32(h, va_arg(ap, u32));
        } else if (*p == 'd') {
            double d = va_arg(ap, double);
            h = mix32(h, (u32)(i32)(d * 8.0));
        } else if (*p == 'l') {
            u64 v = va_arg(ap, u64);
            h = mix32(h, (u32)v ^ (u32)(v >> 32));
        }
    }
    va_end(ap);
    return h;
}

NOINLINE u32 va_inner(u32 count, va_list ap)
{
    u32 m = 0;
    for (u32 i = 0; i < count; i++) {
        u32 v = va_arg(ap, u32);
        if (v > m)
            m = v;
    }
    return m;
}

/* Hands its va_list (and a copy) to another function. */
NOINLINE u32 va_forward(u32 count, ...)
{
    va_list ap, copy;
    va_start(ap, count);
    va_copy(copy, ap);
    u32 m = va_inner(count, ap);
    u32 first = va_arg(copy, u32);
    va_end(copy);
    va_end(ap);
    return m * 3u + first;
}

unsigned entry_varargs(void)
{
    u32 h = va_sum(6u, 1u, 2u, 3u, 4u, 5u, 6u);
    h = mix32(h, va_format("idil", h, 2.75, 9u, (u64)0x123456789abcdefULL));
    h = mix32(h, va_forward(5u, 10u, 40u, 30u, h & 0xffu, 20u));
    return h;
}
