/* YIELD and WFE, the hints a spin lock's wait runs (Chromium's
 * base::SpinLock), execute at user level under Linux as on a device: each
 * completes and the next instruction runs, in Thumb (16 and 32 bits, and
 * inside an IT block) and in ARM state. An undefined instruction right
 * after a YIELD still raises SIGILL at its own address
 * (tests/test_linux_hints.py). */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static sigjmp_buf back;
static volatile unsigned long faulted;

extern char undefined_after_yield[];

static void on_ill(int signal, siginfo_t *info, void *context) {
    (void)signal;
    (void)context;
    faulted = (unsigned long)info->si_addr;
    siglongjmp(back, 1);
}

__attribute__((noinline)) static int spin(int n) {
    __asm__ volatile("1: subs %0, %0, #1\n\tyield\n\tbne 1b" : "+r"(n) : : "cc");
    return n;
}

__attribute__((noinline)) static int wide(int n) {
    __asm__ volatile("1: subs %0, %0, #1\n\tyield.w\n\twfe.w\n\twfe\n\tbne 1b" : "+r"(n) : : "cc");
    return n + 7;
}

__attribute__((noinline)) static int in_it(int c) {
    int r;
    __asm__ volatile("cmp %1, #0\n\tite ne\n\tyieldne\n\tmoveq %0, #5\n\tit ne\n\tmovne %0, #9"
                     : "=&r"(r) : "r"(c) : "cc");
    return r;
}

__attribute__((noinline, target("arm"))) static int arm_hints(int n) {
    __asm__ volatile("1: subs %0, %0, #1\n\tyield\n\twfe\n\tyieldne\n\tbne 1b" : "+r"(n) : : "cc");
    return n + 3;
}

__attribute__((noinline)) static void hint_then_undefined(void) {
    __asm__ volatile("yield\n\t.global undefined_after_yield\nundefined_after_yield:\n\tudf #7");
}

int main(void) {
    printf("spin %d\n", spin(1000));
    printf("wide %d\n", wide(100));
    printf("it %d %d\n", in_it(1), in_it(0));
    printf("arm %d\n", arm_hints(100));
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_ill;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGILL, &action, NULL);
    if (!sigsetjmp(back, 1))
        hint_then_undefined();
    printf("SIGILL at the udf: %d\n", (faulted & ~1UL) == ((unsigned long)undefined_after_yield & ~1UL));
    return 0;
}
