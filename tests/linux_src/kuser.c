/* The kuser helpers at their fixed addresses (Linux's ARM ABI): read the
 * TLS pointer, compare-and-swap, barrier. */
#include <stdio.h>

typedef void *(*get_tls_t)(void);
typedef int (*cmpxchg_t)(int oldval, int newval, volatile int *ptr);
typedef void (*barrier_t)(void);

int main(void) {
    void *tls = ((get_tls_t)0xffff0fe0)();
    volatile int word = 5;
    int swapped = ((cmpxchg_t)0xffff0fc0)(5, 9, &word);
    int refused = ((cmpxchg_t)0xffff0fc0)(5, 11, &word);
    ((barrier_t)0xffff0fa0)();
    printf("tls %s, swap %d -> %d, refused %s -> %d, helpers %d\n", tls ? "set" : "null", swapped, word,
           refused ? "yes" : "no", word, *(int *)0xffff0ffc >= 3);
    return 0;
}
