/* Freestanding runtime linked into every build: memset/memcpy (the compiler
 * may emit calls to them for struct copies and array initialisation), a bump
 * allocator over a static arena, and stub EHABI personality routines. */
#include "common.h"

#ifndef CORPUS_HOST
/* Byte loops with a word-at-a-time middle when the pointers allow it. */
void *memset(void *dst, int c, size_t n)
{
    u8 *d = dst;
    if (n >= 8u && ((size_t)d & 3u) == 0) {
        u32 w = (u8)c * 0x01010101u;
        u32 *wd = (u32 *)d;
        for (; n >= 4u; n -= 4u)
            *wd++ = w;
        d = (u8 *)wd;
    }
    while (n--)
        *d++ = (u8)c;
    return dst;
}

void *memcpy(void *dst, const void *src, size_t n)
{
    u8 *d = dst;
    const u8 *s = src;
    if (n >= 8u && (((size_t)d | (size_t)s) & 3u) == 0) {
        u32 *wd = (u32 *)d;
        const u32 *ws = (const u32 *)s;
        for (; n >= 4u; n -= 4u)
            *wd++ = *ws++;
        d = (u8 *)wd;
        s = (const u8 *)ws;
    }
    while (n--)
        *d++ = *s++;
    return dst;
}

/* -fasynchronous-unwind-tables makes GCC emit .ARM.exidx entries that
 * reference the EHABI personality routines; nothing unwinds at run time
 * here, so stubs reporting _URC_FAILURE (9) are enough. */
int __aeabi_unwind_cpp_pr0(int state, void *ucbp, void *context);
int __aeabi_unwind_cpp_pr1(int state, void *ucbp, void *context);
int __aeabi_unwind_cpp_pr2(int state, void *ucbp, void *context);

int __aeabi_unwind_cpp_pr0(int state, void *ucbp, void *context)
{
    (void)state; (void)ucbp; (void)context;
    return 9;
}

int __aeabi_unwind_cpp_pr1(int state, void *ucbp, void *context)
{
    return __aeabi_unwind_cpp_pr0(state, ucbp, context);
}

int __aeabi_unwind_cpp_pr2(int state, void *ucbp, void *context)
{
    return __aeabi_unwind_cpp_pr0(state, ucbp, context);
}
#endif

#define HEAP_SIZE 4096u

static u8 heap[HEAP_SIZE] __attribute__((aligned(8)));
static u32 heap_used;

void rt_heap_reset(void)
{
    heap_used = 0;
}

/* 8-byte aligned blocks; never freed (programs reset the heap on entry). */
void *rt_alloc(u32 size)
{
    u32 start = (heap_used + 7u) & ~7u;
    if (size > HEAP_SIZE || start > HEAP_SIZE - size)
        return 0;
    heap_used = start + size;
    return &heap[start];
}
