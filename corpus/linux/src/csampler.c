/* Asynchronous signals, as profilers send them (the Linux corpus; not in the
 * manifest yet: the emulation runs no threads and no interval timers).
 *
 *  1. SIGPROF from setitimer(ITIMER_PROF) every millisecond of CPU time,
 *     while the only thread runs a recursive computation that makes no
 *     system call: the handler lands anywhere in it.
 *  2. SIGALRM from setitimer(ITIMER_REAL) (what alarm() is on ARM EABI,
 *     which has no alarm call) while the program spins 40 frames deep until
 *     the handler sets a flag.
 *  3. A sampler as Chrome's: a sampler thread sends SIGURG to a worker
 *     thread with tgkill; the worker's SA_SIGINFO handler copies the
 *     interrupted pc and sp from its ucontext and posts a semaphore the
 *     sampler waits on; sixteen times.
 *
 * Where a signal lands and how many arrive depend on the clock and the
 * scheduler, so nothing printed does: the computations' results (the same
 * every round), and facts true of every sample (its sp on the interrupted
 * thread's stack, its pc in the program's text). */
#define _GNU_SOURCE  /* syscall */
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define SAMPLES 16

extern char __executable_start[], etext[];  /* the program's text, from the linker */

/* The work: a recursion about twenty frames deep over and over, no calls out. */
__attribute__((noinline)) static uint32_t tree(int depth, uint32_t seed) {
    if (depth == 0) return seed * 2654435761u ^ (seed >> 11);
    uint32_t left = tree(depth - 1, seed + 0x9e37u);
    uint32_t right = tree(depth - 1, left ^ (seed << 2));
    return left * 3 + right + (uint32_t)depth;
}

__attribute__((noinline)) static uint32_t chain(int depth, uint32_t seed) {
    if (depth == 0) return tree(10, seed);
    uint32_t below = chain(depth - 1, seed * 5 + 1);
    return below ^ (uint32_t)depth;  /* work after the call: not a tail call */
}

/* The seed is read every round: the compiler may not call work() once and
 * keep the result (the functions are pure). */
static volatile uint32_t seed = 1;
static uint32_t work(void) { return chain(12, seed); }

static void install(int signal, void (*handler)(int, siginfo_t *, void *), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = handler;
    action.sa_flags = SA_SIGINFO | flags;
    sigaction(signal, &action, NULL);
}

static int in_text(uintptr_t pc) {
    return pc >= (uintptr_t)__executable_start && pc < (uintptr_t)etext;
}

/* --- 1. SIGPROF ---------------------------------------------------------- */

static volatile unsigned prof_hits, prof_outside;
static volatile int measuring;  /* in the loop: not in setitimer on the way in or out */
static char *main_top;  /* an address near the top of the main thread's stack */

static void on_prof(int signal, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    (void)signal, (void)info;
    prof_hits++;
    if (measuring && (!in_text(uc->uc_mcontext.arm_pc) || uc->uc_mcontext.arm_sp > (uintptr_t)main_top)) prof_outside++;
}

static void profile(void) {
    install(SIGPROF, on_prof, SA_RESTART);
    struct itimerval every = { { 0, 1000 }, { 0, 1000 } }, off = { { 0, 0 }, { 0, 0 } };
    uint32_t first = work(), result = first;
    unsigned rounds = 0, differ = 0;
    setitimer(ITIMER_PROF, &every, NULL);
    measuring = 1;
    /* Until a sample (a millisecond of CPU, or the kernel's next tick); the
     * bound is a guard. */
    while (prof_hits == 0 && rounds < 1000000) {
        result = work();
        differ += result != first;
        rounds++;
    }
    measuring = 0;
    setitimer(ITIMER_PROF, &off, NULL);
    unsigned hits = prof_hits;  /* a last one may still come; it changes nothing below */
    printf("sigprof: result %08x, rounds all equal %d, sampled %d, all in the computation %d\n",
           result, differ == 0, hits > 0, prof_outside == 0);
}

/* --- 2. SIGALRM into a spinning recursion -------------------------------- */

static volatile int woken;
static volatile uintptr_t alarm_sp;

static void on_alarm(int signal, siginfo_t *info, void *context) {
    (void)signal, (void)info;
    alarm_sp = ((ucontext_t *)context)->uc_mcontext.arm_sp;
    woken = 1;
}

__attribute__((noinline)) static int spin(int depth, uint32_t *out) {
    if (depth == 0) {
        uint32_t value = 0;
        while (!woken) value = tree(6, value);  /* no system call: only the signal ends it */
        *out = value != 0xffffffffu;
        return 0;
    }
    int below = spin(depth - 1, out);
    __asm__ volatile("" ::: "memory");
    return below + 1;
}

static void wait_for_alarm(void) {
    char top;
    install(SIGALRM, on_alarm, 0);
    struct itimerval once = { { 0, 0 }, { 0, 1000 } };  /* 1 ms, one shot */
    setitimer(ITIMER_REAL, &once, NULL);
    uint32_t computed = 0;
    int depth = spin(40, &computed);
    printf("sigalrm: spun %d frames deep until the handler, interrupted below main %d, computed %u\n",
           depth, alarm_sp < (uintptr_t)&top, computed);
}

/* --- 3. a sampler thread and tgkill --------------------------------------- */

static sem_t ready, sampled;
static volatile pid_t worker_tid;
static volatile int stop, spinning;
static char *worker_top;
static uintptr_t sample_pc[SAMPLES], sample_sp[SAMPLES];
static volatile int samples;

static void on_sample(int signal, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    (void)signal, (void)info;
    if (samples < SAMPLES) {
        sample_pc[samples] = uc->uc_mcontext.arm_pc;
        sample_sp[samples] = uc->uc_mcontext.arm_sp;
        samples++;
    }
    sem_post(&sampled);  /* async-signal-safe */
}

static void *worker(void *arg) {
    char top;
    uint32_t expected = work(), differ = 0;
    unsigned rounds = 0;
    (void)arg;
    worker_top = &top;
    worker_tid = (pid_t)syscall(SYS_gettid);
    sem_post(&ready);
    while (!stop) {
        differ += work() != expected;
        rounds++;
        spinning = 1;  /* from here on every sample lands in our code */
    }
    return (void *)(uintptr_t)(differ == 0 && rounds > 0 ? expected : 0);
}

static void *sampler(void *arg) {
    (void)arg;
    sem_wait(&ready);
    while (!spinning) sched_yield();
    for (int i = 0; i < SAMPLES; i++) {
        syscall(SYS_tgkill, getpid(), worker_tid, SIGURG);
        while (sem_wait(&sampled) != 0) continue;  /* EINTR: try again */
    }
    stop = 1;
    return NULL;
}

static void sample_a_thread(void) {
    pthread_t w, s;
    void *result;
    sem_init(&ready, 0, 0);
    sem_init(&sampled, 0, 0);
    install(SIGURG, on_sample, SA_RESTART);
    pthread_create(&w, NULL, worker, NULL);
    pthread_create(&s, NULL, sampler, NULL);
    pthread_join(s, NULL);
    pthread_join(w, &result);
    int on_stack = 0, in_code = 0;
    for (int i = 0; i < samples; i++) {
        on_stack += sample_sp[i] < (uintptr_t)worker_top && sample_sp[i] > (uintptr_t)worker_top - (1u << 20);
        in_code += in_text(sample_pc[i]);
    }
    printf("sampler: %d samples, sp on the worker's stack %d, pc in the program's text %d, worker's result %08x\n",
           samples, on_stack, in_code, (uint32_t)(uintptr_t)result);
}

int main(void) {
    char top;
    main_top = &top;
    profile();
    wait_for_alarm();
    sample_a_thread();
    return 0;
}
