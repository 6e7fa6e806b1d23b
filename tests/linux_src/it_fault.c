/* A load inside an IT block faults; the handler makes the page readable and
 * returns, so the load runs again: the frame must keep the IT state, or the
 * block's else-instruction would then run unconditionally (pick 5, not 42)
 * (tests/test_linux_signals.py). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static int *page;

static void on_segv(int signal) {
    (void)signal;
    mprotect(page, 4096, PROT_READ | PROT_WRITE);
}

__attribute__((noinline)) static int pick(int *p, int c) {
    int r;
    __asm__ volatile("cmp %2, #0\n\tite ne\n\tldrne %0, [%1]\n\tmoveq %0, #5" : "=&r"(r) : "r"(p), "r"(c) : "cc", "memory");
    return r;
}

int main(void) {
    page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    page[0] = 42;
    mprotect(page, 4096, PROT_NONE);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_segv;
    sigaction(SIGSEGV, &action, NULL);
    printf("pick %d\n", pick(page, 1));
    return 0;
}
