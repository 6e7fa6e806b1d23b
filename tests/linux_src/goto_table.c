/* A computed goto's table of labels (.rodata), and a lone word (.data)
   that only looks like an address: `stray` points 8 bytes into run, as the
   integers of a program linked where it runs may. */
#include <stdio.h>

__attribute__((noinline)) static int run(const unsigned char *ops)
{
    static const void *const table[] = {&&add, &&sub, &&stop};
    int acc = 0;
    goto *table[*ops++];
add:
    acc += 3;
    goto *table[*ops++];
sub:
    acc -= 1;
    goto *table[*ops++];
stop:
    return acc;
}

unsigned stray = (unsigned)&run + 8;

int main(void)
{
    static const unsigned char ops[] = {0, 0, 1, 2};
    printf("%d %d\n", run(ops), stray != 0);
    return 0;
}
