/* Threads as glibc makes them: workers that take jobs from a queue under a
 * mutex and condition variable, recurse a few calls deep, count in
 * thread-local storage, one leaving with pthread_exit from a nested call;
 * joins, a timed wait that times out, a sleep. The output does not depend
 * on the order the threads run in. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <errno.h>

#define WORKERS 3
#define JOBS 24

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static int queue[JOBS], head, tail, closed;
static long results[JOBS];
static __thread int done_here;
static int done_by[WORKERS];

__attribute__((noinline)) static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) static void leave_early(int depth) {
    if (depth) leave_early(depth - 1);
    else pthread_exit((void *)7);
}

static void *worker(void *arg) {
    int index = (int)(long)arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (head == tail && !closed) pthread_cond_wait(&ready, &lock);
        if (head == tail) { pthread_mutex_unlock(&lock); break; }
        int job = queue[head++];
        pthread_mutex_unlock(&lock);
        results[job] = fib(8 + job % 9);
        done_here++;
    }
    done_by[index] = done_here;
    if (index == 1) leave_early(5);
    return (void *)(long)index;
}

int main(void) {
    pthread_t threads[WORKERS];
    for (long i = 0; i < WORKERS; i++) pthread_create(&threads[i], NULL, worker, (void *)i);
    for (int job = 0; job < JOBS; job++) {
        pthread_mutex_lock(&lock);
        queue[tail++] = job;
        pthread_cond_signal(&ready);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_lock(&lock);
    closed = 1;
    pthread_cond_broadcast(&ready);
    pthread_mutex_unlock(&lock);
    long returned = 0;
    for (int i = 0; i < WORKERS; i++) {
        void *value;
        pthread_join(threads[i], &value);
        returned += (long)value;
    }
    long sum = 0;
    int jobs = 0;
    for (int i = 0; i < JOBS; i++) sum += results[i];
    for (int i = 0; i < WORKERS; i++) jobs += done_by[i];
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 2000000;
    if (until.tv_nsec >= 1000000000) { until.tv_sec++; until.tv_nsec -= 1000000000; }
    pthread_mutex_lock(&lock);
    int timed = pthread_cond_timedwait(&ready, &lock, &until);
    pthread_mutex_unlock(&lock);
    printf("sum %ld, jobs %d, returned %ld, main's own count %d, timed wait %s\n", sum, jobs, returned, done_here,
           timed == ETIMEDOUT ? "timed out" : "did not time out");
    return 0;
}
