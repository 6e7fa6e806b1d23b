/* Calls itself forever: the depth guard (the shadow stack's frames) ends
 * it, before the 8 MiB stack would. */
#pragma GCC diagnostic ignored "-Winfinite-recursion"  /* endless on purpose */

__attribute__((noinline)) static int deeper(volatile int n)
{
    return deeper(n + 1) + 1;
}

int main(void)
{
    return deeper(0);
}
