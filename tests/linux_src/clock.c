/* Time passes as instructions run: a loop waits for the clock to move
 * 100 us, a loop that makes no system call takes time, and a sleep moves it by what it asks
 * (tests/test_linux_process.py). */
#include <stdio.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    return at.tv_sec * 1000000000LL + at.tv_nsec;
}

int main(void) {
    long long start = now_ns();
    volatile unsigned spins = 0;
    while (now_ns() - start < 100000) spins++;
    long long before = now_ns();
    for (volatile unsigned i = 0; i < 100000; i++) {}  /* no system call at all */
    long long busy = now_ns() - before;
    struct timespec nap = { 0, 250000000 };
    before = now_ns();
    nanosleep(&nap, NULL);
    long long slept = now_ns() - before;
    printf("waited %s, busy loop took time %s, slept at least 250 ms %s\n", spins ? "yes" : "no",
           busy > 100000 ? "yes" : "no", slept >= 250000000 ? "yes" : "no");
    return 0;
}
