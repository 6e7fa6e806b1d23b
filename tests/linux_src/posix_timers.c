/* POSIX timers of each kind (tests/test_linux_posix_timers.py): SIGEV_SIGNAL
 * timers on CLOCK_MONOTONIC and CLOCK_PROCESS_CPUTIME_ID landing in busy
 * loops; overruns counted while the signal is blocked; timer_gettime,
 * TIMER_ABSTIME and disarming; SIGEV_NONE; a CLOCK_THREAD_CPUTIME_ID timer
 * signalling its own thread (SIGEV_THREAD_ID); SIGEV_THREAD, glibc's helper
 * thread starting a thread at each expiry while main waits on a semaphore.
 * The output does not depend on when exactly the timers expire. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

static volatile int hits[2], info_ok = 1, overrun = -1, getoverrun = -2;
static volatile int thread_hits, thread_ok = 1, callbacks, callbacks_ok = 1;
static volatile pid_t worker_tid;
static volatile unsigned sink;
static timer_t overrun_timer;
static pthread_t main_thread;
static sem_t expired;

/* Conditional steps (IT blocks in Thumb-2): an expiry inside one waits for its end. */
__attribute__((noinline)) static unsigned churn(unsigned x) {
    x = x & 1 ? 3 * x + 1 : x >> 1;
    return x > 1000 ? x - 999 : x + 2654435761u;
}

static void spin_until(volatile int *counter, int target) {
    unsigned x = 1;
    while (*counter < target) x = churn(x);
    sink ^= x;
}

static void on_timer(int signal, siginfo_t *info, void *context) {
    (void)context;
    int which = signal == SIGUSR1 ? 0 : 1;
    hits[which]++;
    if (info->si_code != SI_TIMER || info->si_value.sival_int != 100 + which || info->si_overrun < 0) info_ok = 0;
}

static void on_overrun(int signal, siginfo_t *info, void *context) {
    (void)signal, (void)context;
    if (overrun < 0) {  /* the first expiry's, taken after the wait */
        overrun = info->si_overrun;
        getoverrun = timer_getoverrun(overrun_timer);
    }
}

static void on_thread_timer(int signal, siginfo_t *info, void *context) {
    (void)signal, (void)context;
    thread_hits++;
    if (gettid() != worker_tid || info->si_code != SI_TIMER || info->si_value.sival_int != 103) thread_ok = 0;
}

static void on_expiry(union sigval value) {
    if (value.sival_int != 7 || pthread_equal(pthread_self(), main_thread)) callbacks_ok = 0;
    __atomic_add_fetch(&callbacks, 1, __ATOMIC_SEQ_CST);
    sem_post(&expired);
}

static timer_t make(clockid_t clock, int notify, int signal, int value) {
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = notify;
    event.sigev_signo = signal;
    event.sigev_value.sival_int = value;
    if (notify == SIGEV_THREAD_ID) event.sigev_notify_thread_id = gettid();
    if (notify == SIGEV_THREAD) event.sigev_notify_function = on_expiry;
    timer_t timer;
    if (timer_create(clock, &event, &timer) != 0) perror("timer_create");
    return timer;
}

static void arm(timer_t timer, long long value_ns, long long interval_ns) {
    struct itimerspec setting = { { interval_ns / 1000000000, interval_ns % 1000000000 },
                                  { value_ns / 1000000000, value_ns % 1000000000 } };
    if (timer_settime(timer, 0, &setting, NULL) != 0) perror("timer_settime");
}

static void handle(int signal, void (*handler)(int, siginfo_t *, void *)) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = handler;
    action.sa_flags = SA_SIGINFO;
    sigaction(signal, &action, NULL);
}

static void *worker(void *arg) {
    (void)arg;
    worker_tid = gettid();
    timer_t own = make(CLOCK_THREAD_CPUTIME_ID, SIGEV_THREAD_ID, SIGVTALRM, 103);
    arm(own, 100000, 100000);
    spin_until(&thread_hits, 2);
    timer_delete(own);
    return NULL;
}

static void overruns(void) {
    sigset_t alarm_set;
    sigemptyset(&alarm_set);
    sigaddset(&alarm_set, SIGALRM);
    sigprocmask(SIG_BLOCK, &alarm_set, NULL);
    overrun_timer = make(CLOCK_MONOTONIC, SIGEV_SIGNAL, SIGALRM, 102);
    arm(overrun_timer, 100000, 100000);
    struct timespec pause = { 0, 1000000 };  /* 1 ms: the first expiry waits, 9 more periods pass */
    nanosleep(&pause, NULL);
    struct itimerspec waiting;
    timer_gettime(overrun_timer, &waiting);
    sigprocmask(SIG_UNBLOCK, &alarm_set, NULL);  /* the handler runs here */
    arm(overrun_timer, 0, 0);
    timer_delete(overrun_timer);
    printf("overrun at least 9: %d, timer_getoverrun agrees: %d, next expiry within a period: %d\n",
           overrun >= 9, getoverrun == overrun,
           waiting.it_interval.tv_nsec == 100000 && waiting.it_value.tv_sec == 0 &&
           waiting.it_value.tv_nsec > 0 && waiting.it_value.tv_nsec <= 100000);
}

static void settings(void) {
    timer_t probe = make(CLOCK_MONOTONIC, SIGEV_SIGNAL, SIGUSR1, 100);
    struct itimerspec left, old, off = { { 0, 0 }, { 0, 0 } };
    arm(probe, 10000000000LL, 0);
    timer_gettime(probe, &left);
    int relative = left.it_value.tv_sec == 9 && left.it_interval.tv_sec == 0 && left.it_interval.tv_nsec == 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    struct itimerspec at = { { 0, 0 }, { now.tv_sec + 5, now.tv_nsec } };
    timer_settime(probe, TIMER_ABSTIME, &at, &old);
    timer_gettime(probe, &left);
    int absolute = old.it_value.tv_sec == 9 && left.it_value.tv_sec == 4;
    timer_settime(probe, 0, &off, NULL);
    timer_gettime(probe, &left);
    int disarmed = left.it_value.tv_sec == 0 && left.it_value.tv_nsec == 0;
    timer_delete(probe);
    timer_t silent = make(CLOCK_MONOTONIC, SIGEV_NONE, 0, 0);
    arm(silent, 200000, 0);
    struct timespec pause = { 0, 300000 };
    nanosleep(&pause, NULL);
    timer_gettime(silent, &left);
    int none = left.it_value.tv_sec == 0 && left.it_value.tv_nsec == 0;
    timer_delete(silent);
    printf("gettime relative %d, absolute %d, disarmed %d, sigev_none expired silently %d\n", relative, absolute,
           disarmed, none);
}

int main(void) {
    main_thread = pthread_self();
    handle(SIGUSR1, on_timer);
    handle(SIGUSR2, on_timer);
    handle(SIGALRM, on_overrun);
    handle(SIGVTALRM, on_thread_timer);

    timer_t monotonic = make(CLOCK_MONOTONIC, SIGEV_SIGNAL, SIGUSR1, 100);
    arm(monotonic, 100000, 100000);
    spin_until(&hits[0], 3);
    timer_delete(monotonic);
    timer_t cpu = make(CLOCK_PROCESS_CPUTIME_ID, SIGEV_SIGNAL, SIGUSR2, 101);
    arm(cpu, 150000, 150000);
    spin_until(&hits[1], 2);
    timer_delete(cpu);
    printf("monotonic hits at least 3: %d, cpu-time hits at least 2: %d, siginfo SI_TIMER with its value: %d\n",
           hits[0] >= 3, hits[1] >= 2, info_ok);

    overruns();
    settings();

    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    pthread_join(thread, NULL);
    printf("thread cpu-time hits at least 2: %d, in its own thread with its value: %d\n", thread_hits >= 2, thread_ok);

    sem_init(&expired, 0, 0);
    timer_t threaded = make(CLOCK_MONOTONIC, SIGEV_THREAD, 0, 7);
    arm(threaded, 200000, 200000);
    for (int round = 0; round < 3; round++) sem_wait(&expired);
    timer_delete(threaded);
    printf("sigev_thread callbacks at least 3: %d, off the main thread with its value: %d\n", callbacks >= 3,
           callbacks_ok);
    return 0;
}
