/* Code that only data or a join reveals: an interpreter dispatching with
   computed goto (GCC's labels-as-values, as Lua's luaV_execute), and a
   function whose alloca on one path meets the other path with sp at
   another depth (glibc's __printf_fp_l). Tables from code alone must
   follow both (tests/test_synthesis_linux.py). */
#include <alloca.h>
#include <stdio.h>

static int __attribute__((noinline)) sum(const int *values, int count) {
    int total = 0;
    for (int i = 0; i < count; i++)
        total += values[i];
    return total;
}

static int __attribute__((noinline)) scratch(int count) {
    int total = count;
    if (count > 2) {
        int *buffer = alloca(count * sizeof(int));
        for (int i = 0; i < count; i++)
            buffer[i] = i * count;
        total = sum(buffer, count);
    }
    return total + sum(&count, 1);  /* both paths meet here, sp apart */
}

enum { ADD, SCRATCH, CALL, END };

static int __attribute__((noinline)) interpret(const unsigned char *code) {
    static const void *const dispatch[] = {&&op_add, &&op_scratch, &&op_call, &&op_end};
    int acc = 0;
    goto *dispatch[*code++];
op_add:
    acc += *code++;
    goto *dispatch[*code++];
op_scratch:
    acc += scratch(*code++);
    goto *dispatch[*code++];
op_call:
    acc ^= sum(&acc, 1) * 3;
    goto *dispatch[*code++];
op_end:
    return acc;
}

int main(void) {
    static const unsigned char program[] = {ADD, 5, SCRATCH, 4, CALL, SCRATCH, 1, ADD, 7, SCRATCH, 6, END};
    int result = 0;
    for (int round = 0; round < 3; round++)
        result += interpret(program) + round;
    printf("%d\n", result);
    return 0;
}
