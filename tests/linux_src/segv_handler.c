/* A SIGSEGV handler, entered from a store to an unmapped page, that
 * siglongjmps back (tests/test_linux_signals.py). */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static sigjmp_buf back;

static void caught(int signal) { siglongjmp(back, signal); }

int main(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = caught;
    sigaction(SIGSEGV, &action, NULL);
    int got = sigsetjmp(back, 1);
    if (!got) {
        volatile int *nowhere = (int *)16;
        *nowhere = 1;
    }
    printf("caught %d\n", got);
    return 0;
}
