/* Shared declarations for the compiled corpus (freestanding: no libc, no OS).
 *
 * Every program defines `unsigned entry_<name>(void)` returning a 32-bit
 * checksum.  The arithmetic only uses u32 (unsigned int is 32 bits on both
 * ARM32 and x86-64), never pointer values, sizeof of pointer-holding types or
 * byte order, so the same sources compiled for the host give the same values
 * (build.sh records those as the expected checksums).
 */
#ifndef COMPILED_COMMON_H
#define COMPILED_COMMON_H

typedef unsigned int u32;
typedef int i32;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned long long u64;
typedef __SIZE_TYPE__ size_t;

#if defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noinline, noclone))
#endif

/* The compiler may emit calls to these even with -fno-builtin. */
void *memset(void *dst, int c, size_t n);
void *memcpy(void *dst, const void *src, size_t n);

/* Bump allocator over a static arena (rt.c). */
void rt_heap_reset(void);
void *rt_alloc(u32 size);

static inline u32 rotl32(u32 x, u32 r)
{
    r &= 31u;
    return r ? (x << r) | (x >> (32u - r)) : x;
}

/* One mixing step shared by the programs' checksums: rotate left by 5, xor.
 * A macro, so -O0 builds do not spend a call on every step; `h` must be a
 * plain u32 variable. */
#define mix32(h, v) ((((h) << 5) | ((h) >> 27)) ^ (u32)(v))

/* Every program of the corpus, in the order `entry` runs them. */
#define CORPUS_PROGRAMS(X) \
    X(leaf)                \
    X(recursion)           \
    X(alloca)              \
    X(frame4k)             \
    X(frame256k)           \
    X(callee_saved)        \
    X(vfp)                 \
    X(varargs)             \
    X(tailcall)            \
    X(early_return)        \
    X(switch_table)        \
    X(funcptr)             \
    X(interp)              \
    X(lz)                  \
    X(sortsearch)

#define CORPUS_DECLARE(name) unsigned entry_##name(void);
CORPUS_PROGRAMS(CORPUS_DECLARE)
#undef CORPUS_DECLARE

#endif
