/* Signals delivered to their handlers (the Linux corpus; tests/test_linux_signals.py): raise
 * from deep recursion, SA_SIGINFO, a blocked signal delivered on unblock,
 * SA_RESETHAND, SA_NODEFER, an alternate stack, siglongjmp out of a
 * handler, registers (core and VFP) clobbered by a handler and restored
 * by sigreturn, a signal ignored; then abort() (SIGABRT, default action)
 * when argv[1] is "abort". */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int hits, nested, on_alt;
static sigjmp_buf back;
static char alt_stack[16384];

static void count(int signal) { (void)signal; hits++; }
static void with_info(int signal, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    if (info->si_signo == signal && uc->uc_mcontext.arm_sp > (unsigned long)&info) hits += 100;
}
static void again(int signal) {  /* SA_NODEFER: the same signal may arrive inside */
    if (nested++ < 3) raise(signal);
}
static void where(int signal) {
    char here;
    (void)signal;
    on_alt = &here >= alt_stack && &here < alt_stack + sizeof alt_stack;
}
static void jump(int signal) { (void)signal; siglongjmp(back, 7); }
static void clobber(int signal) {  /* what a handler may clobber, the interrupted code must get back */
    (void)signal;
    __asm__ volatile("mov r4, #1\n mov r5, #2\n mov r6, #3\n mov r8, #4\n mov r10, #5\n"
                     "vmov.f64 d8, #1.0\n vmov.f64 d9, #2.0\n vmov.f64 d15, #3.0" ::: "r4", "r5", "r6", "r8", "r10",
                     "d8", "d9", "d15");
}

__attribute__((noinline)) static int deep(int n) {
    if (n == 0) { raise(SIGUSR1); return 0; }
    int below = deep(n - 1);
    __asm__ volatile("" ::: "memory");  /* work after the call: no loop made of the recursion */
    return below + 1;
}

static void install(int signal, void (*handler)(int), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigaction(signal, &action, NULL);
}

static int kept(void) {  /* registers live across a raise whose handler clobbers them */
    register int a __asm__("r4") = 11, b __asm__("r5") = 12, c __asm__("r6") = 13;
    register double x __asm__("d8") = 0.5, y __asm__("d9") = 0.25;
    __asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+w"(x), "+w"(y));
    raise(SIGUSR2);
    __asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+w"(x), "+w"(y));
    return a == 11 && b == 12 && c == 13 && x == 0.5 && y == 0.25;
}

int main(int argc, char **argv) {
    install(SIGUSR1, count, 0);
    for (int i = 0; i < 5; i++) raise(SIGUSR1);
    deep(40);
    struct sigaction info;
    memset(&info, 0, sizeof info);
    info.sa_sigaction = with_info;
    info.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR2, &info, NULL);
    raise(SIGUSR2);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    raise(SIGUSR1);
    printf("while blocked: %d\n", hits);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    printf("after unblock: %d\n", hits);
    install(SIGHUP, count, SA_RESETHAND);
    raise(SIGHUP);
    struct sigaction now;
    sigaction(SIGHUP, NULL, &now);
    printf("reset: %d\n", now.sa_handler == SIG_DFL);
    install(SIGINT, again, SA_NODEFER);
    raise(SIGINT);
    printf("nested: %d\n", nested);
    stack_t stack = { .ss_sp = alt_stack, .ss_size = sizeof alt_stack, .ss_flags = 0 };
    sigaltstack(&stack, NULL);
    install(SIGWINCH, where, SA_ONSTACK);
    raise(SIGWINCH);
    printf("on the alternate stack: %d\n", on_alt);
    install(SIGUSR2, clobber, 0);
    printf("registers kept: %d\n", kept());
    install(SIGALRM, jump, 0);
    int jumped = sigsetjmp(back, 1);
    if (!jumped) raise(SIGALRM);
    printf("jumped: %d\n", jumped);
    signal(SIGTERM, SIG_IGN);
    raise(SIGTERM);
    raise(SIGCHLD);
    printf("hits: %d\n", hits);
    if (argc > 1 && !strcmp(argv[1], "abort")) abort();
    return 0;
}
