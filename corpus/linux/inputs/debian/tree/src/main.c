#include <stdio.h>
#include "util.h"

int main(void)
{
    int i;
    for (i = 1; i <= 10; i++)
        printf("%d! = %lu\n", i, factorial(i));
    return 0;
}
