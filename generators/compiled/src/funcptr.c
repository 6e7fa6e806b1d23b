/* Calls through function pointers (blx rN): a table of operations, a
 * callback-taking higher-order function, and a pointer returned by a call. */
#include "common.h"

typedef u32 (*op_fn)(u32, u32);

NOINLINE u32 fp_add(u32 a, u32 b) { return a + b; }
NOINLINE u32 fp_xor(u32 a, u32 b) { return a ^ b; }
NOINLINE u32 fp_mul(u32 a, u32 b) { return a * b + 1u; }
NOINLINE u32 fp_rot(u32 a, u32 b) { return rotl32(a, b); }

static op_fn const fp_table[4] = { fp_add, fp_xor, fp_mul, fp_rot };

NOINLINE u32 fp_fold(op_fn f, const u32 *p, u32 n, u32 init)
{
    u32 acc = init;
    for (u32 i = 0; i < n; i++)
        acc = f(acc, p[i]);
    return acc;
}

NOINLINE op_fn fp_choose(u32 x)
{
    return fp_table[x & 3u];
}

struct fp_obj {
    u32 state;
    u32 (*step)(struct fp_obj *self, u32 x);
};

NOINLINE u32 fp_obj_step_a(struct fp_obj *self, u32 x)
{
    self->state = self->state * 3u + x;
    return self->state;
}

NOINLINE u32 fp_obj_step_b(struct fp_obj *self, u32 x)
{
    self->state ^= x << 4;
    return self->state + 1u;
}

unsigned entry_funcptr(void)
{
    static const u32 data[5] = { 11u, 22u, 33u, 44u, 55u };
    u32 h = 0xf00du;
    for (u32 i = 0; i < 4u; i++)
        h = mix32(h, fp_fold(fp_table[i], data, 5u, h));
    h = mix32(h, fp_choose(h)(h, 7u));
    struct fp_obj objs[2] = { { 1u, fp_obj_step_a }, { 2u, fp_obj_step_b } };
    for (u32 i = 0; i < 4u; i++)
        h = mix32(h, objs[i & 1u].step(&objs[i & 1u], h));
    return h;
}
