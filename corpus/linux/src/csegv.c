/* Signals from faults (the Linux corpus; not in the manifest yet: the
 * emulation ends a run at a fault instead of delivering it).  Faults 1-5
 * happen at the bottom of a 20-frame call chain, in a handler installed
 * with SA_SIGINFO:
 *
 *  1. a store through a NULL pointer (SIGSEGV, SEGV_MAPERR), siglongjmp out;
 *  2. a store to a page mprotect'ed read-only (SEGV_ACCERR): the handler
 *     makes the page writable and returns, so the store runs again and
 *     succeeds (the classic write barrier of garbage collectors);
 *  3. a memset that runs from a mapped page into an unmapped one: the
 *     fault is inside libc's memset (a dynamic program's is in libc.so.6),
 *     siglongjmp out;
 *  4. a call through a NULL function pointer: the fault is the fetch at
 *     pc 0, lr still pointing into the caller;
 *  5. __builtin_trap() (an undefined instruction, udf): SIGILL.  (ARM has
 *     no integer division trap: SIGFPE never comes from a division.)
 *  6. a thread whose 64 KiB stack overflows into its guard page (SIGSEGV,
 *     SEGV_ACCERR): its handler, installed with SA_ONSTACK, runs on that
 *     thread's alternate stack and siglongjmps out; main joins the thread.
 *
 * Each handler also checks what the kernel says: the signal, si_code for
 * SIGSEGV (not for SIGILL: qemu-user says ILL_ILLOPN where Linux says
 * ILL_ILLOPC), si_addr, and that the interrupted sp is below main's frame. */
#define _GNU_SOURCE  /* pthread_getattr_np */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static sigjmp_buf back;
static char *main_top;
static volatile int got_signal, got_code, addr_ok, below_main, retried;
static void *expect_addr;    /* si_addr the fault must report */
static char *page;           /* one page, read-only while case 2 stores */
static size_t page_size;
static volatile int fix_and_return;  /* case 2: the handler fixes the page and returns */

static void on_fault(int signal, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    got_signal = signal;
    got_code = info->si_code;
    /* SIGILL's si_addr is the instruction's: where the interrupted pc is. */
    addr_ok = info->si_addr == (signal == SIGILL ? (void *)uc->uc_mcontext.arm_pc : expect_addr);
    below_main = uc->uc_mcontext.arm_sp < (uintptr_t)main_top;
    if (fix_and_return) {
        retried++;
        mprotect(page, page_size, PROT_READ | PROT_WRITE);
        return;  /* sigreturn: the store runs again */
    }
    siglongjmp(back, signal);
}

/* The faults, each at the bottom of the chain. */
enum what { NULL_STORE, READ_ONLY_STORE, MEMSET_UNMAPPED, NULL_CALL, TRAP };
static int *volatile null_int;          /* volatile: the compiler may not see it is NULL */
static void (*volatile null_function)(void);
static char *volatile unmapped, *volatile memset_start;
static volatile size_t memset_size = 256;

__attribute__((noinline)) static int fault(enum what what) {
    switch (what) {
    case NULL_STORE: *null_int = 42; break;
    case READ_ONLY_STORE: page[64] = 7; return page[64];
    case MEMSET_UNMAPPED: memset(memset_start, 0x5a, memset_size); break;
    case NULL_CALL: null_function(); break;
    case TRAP: __builtin_trap();
    }
    return -1;
}

__attribute__((noinline)) static int chain(int depth, enum what what) {
    volatile int local = depth;
    if (depth == 0) return fault(what);
    int below = chain(depth - 1, what);
    return below + local - depth;  /* work after the call: not a tail call */
}

static void install(int signal) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigaction(signal, &action, NULL);
}

static const char *code_name(int signal, int code) {
    if (signal != SIGSEGV) return "-";
    return code == SEGV_MAPERR ? "SEGV_MAPERR" : code == SEGV_ACCERR ? "SEGV_ACCERR" : "other";
}

static void run(const char *name, enum what what, void *addr) {
    got_signal = got_code = addr_ok = below_main = 0;
    expect_addr = addr;
    int jumped = sigsetjmp(back, 1);  /* 1: the mask (the signal blocked in the handler) comes back */
    if (jumped == 0) {
        int value = chain(20, what);
        printf("%s: returned %d, ", name, value);
    } else {
        printf("%s: siglongjmp with %d, ", name, jumped);
    }
    sigset_t now;
    sigprocmask(SIG_BLOCK, NULL, &now);
    printf("signal %d (%s), si_addr as expected %d, sp below main %d, mask clear %d\n", got_signal,
           code_name(got_signal, got_code), addr_ok, below_main,
           !sigismember(&now, SIGSEGV) && !sigismember(&now, SIGILL));
}

/* 6. The thread that overflows its stack. */
static sigjmp_buf overflow_back;
static char *guard_low, *guard_high;  /* the guard page(s) below its stack */
static volatile int fault_in_guard, handler_on_alt, overflow_code;
static char alt_stack[16384];

static void on_overflow(int signal, siginfo_t *info, void *context) {
    char here;
    (void)signal, (void)context;
    overflow_code = info->si_code;
    fault_in_guard = (char *)info->si_addr >= guard_low && (char *)info->si_addr < guard_high;
    handler_on_alt = &here >= alt_stack && &here < alt_stack + sizeof alt_stack;
    siglongjmp(overflow_back, 1);
}

__attribute__((noinline)) static int descend(int n) {
    volatile char frame[512];  /* 64 KiB is gone after about 120 frames */
    frame[0] = (char)n;
    frame[511] = (char)n;
    if (n > 100000) return 0;  /* never: the guard page comes first */
    return descend(n + 1) + frame[0] + frame[511];
}

static void *overflow(void *arg) {
    (void)arg;
    pthread_attr_t attr;
    void *low;
    size_t size, guard;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstack(&attr, &low, &size);
    pthread_attr_getguardsize(&attr, &guard);
    pthread_attr_destroy(&attr);
    guard_low = (char *)low - guard;
    guard_high = (char *)low;
    stack_t stack = { .ss_sp = alt_stack, .ss_size = sizeof alt_stack, .ss_flags = 0 };
    sigaltstack(&stack, NULL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_overflow;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &action, NULL);
    if (sigsetjmp(overflow_back, 1) == 0) descend(0);
    stack.ss_flags = SS_DISABLE;
    sigaltstack(&stack, NULL);
    return (void *)1;
}

static void thread_overflow(void) {
    pthread_t thread;
    pthread_attr_t attr;
    void *value;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 65536);
    pthread_create(&thread, &attr, overflow, NULL);
    pthread_join(thread, &value);
    pthread_attr_destroy(&attr);
    printf("thread stack overflow: returned %d, signal %s, fault in the guard page %d, "
           "handler on the alternate stack %d\n",
           (int)(intptr_t)value, code_name(SIGSEGV, overflow_code), fault_in_guard, handler_on_alt);
}

int main(void) {
    char top;
    main_top = &top;
    install(SIGSEGV);
    install(SIGILL);
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    /* Two pages: the second unmapped, for memset to run into. */
    page = mmap(NULL, 2 * page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(page + page_size, page_size);
    unmapped = page + page_size;
    memset_start = unmapped - 64;  /* 64 bytes, then the fault */

    run("null store", NULL_STORE, NULL);
    mprotect(page, page_size, PROT_READ);
    fix_and_return = 1;
    run("read-only store", READ_ONLY_STORE, page + 64);
    fix_and_return = 0;
    printf("read-only store: the handler ran %d time(s), the page holds %d\n", retried, page[64]);
    run("memset into an unmapped page", MEMSET_UNMAPPED, unmapped);
    run("call through NULL", NULL_CALL, NULL);
    run("trap", TRAP, NULL);
    thread_overflow();  /* last: it replaces the SIGSEGV handler */
    return 0;
}
