/* Time that interrupts code that makes no system call: SIGPROF from
 * ITIMER_PROF landing in a busy loop, SIGALRM from ITIMER_REAL ending a
 * spin, and two threads that take turns through a flag only another
 * thread's time slice can set (tests/test_linux_threads.py; with an
 * argument, the timers alone). The output
 * does not depend on when exactly the signals land. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

static volatile int prof_hits, alarmed, turn;

static void on_prof(int signal) { (void)signal; prof_hits++; }
static void on_alarm(int signal) { (void)signal; alarmed = 1; }

/* Conditional steps (IT blocks in Thumb-2): a deadline that falls inside one waits for its end. */
__attribute__((noinline)) static unsigned churn(unsigned x) {
    x = x & 1 ? 3 * x + 1 : x >> 1;
    return x > 1000 ? x - 999 : x + 2654435761u;
}

static void *other(void *arg) {
    (void)arg;
    for (int round = 0; round < 3; round++) {
        while (turn != 1) continue;  /* no system call: only a time slice's end lets the main thread on */
        turn = 0;
    }
    return NULL;
}

int main(int argc, char **argv) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_prof;
    sigaction(SIGPROF, &action, NULL);
    action.sa_handler = on_alarm;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval every = { { 0, 200 }, { 0, 200 } }, off = { { 0, 0 }, { 0, 0 } }, left;
    setitimer(ITIMER_PROF, &every, NULL);
    unsigned x = 1;
    while (prof_hits < 3) x = churn(x);
    setitimer(ITIMER_PROF, &off, NULL);
    struct itimerval once = { { 0, 0 }, { 0, 500 } };
    setitimer(ITIMER_REAL, &once, NULL);
    getitimer(ITIMER_REAL, &left);
    while (!alarmed) x = churn(x);
    if (argc < 2) {  /* "timers" alone: no turns */
        pthread_t thread;
        pthread_create(&thread, NULL, other, NULL);
        for (int round = 0; round < 3; round++) {
            turn = 1;
            while (turn != 0) continue;
        }
        pthread_join(thread, NULL);
    }
    printf("prof hits %d, alarm %d, left %d, turns taken, x %s\n", prof_hits, alarmed,
           left.it_value.tv_sec == 0 && left.it_value.tv_usec > 0 && left.it_value.tv_usec <= 500, x ? "churned" : "0");
    return 0;
}
