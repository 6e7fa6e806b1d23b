/* Threads (the Linux corpus).  A pool of four workers takes jobs from a
 * queue guarded by a mutex and two condition variables; each job is a
 * recursive computation 14-21 frames deep before a 511-call binary
 * recursion, so the workers' stacks are deep wherever they are stopped.
 * One job ends its worker with pthread_exit from the bottom of its
 * recursion: glibc unwinds the thread with _Unwind_ForcedUnwind (libgcc_s,
 * dlopen'ed by a dynamic program) through our frames and runs a cleanup
 * handler on the way.  A start barrier, pthread_once, a thread-specific key
 * whose destructor adds each worker's __thread counter to a total, atomics
 * (ldrex/strex), and a detached thread with a 64 KiB stack that reports
 * through a semaphore.  (The thread whose stack overflows into its guard
 * page is in csegv.c: signals from faults are that program's business.)
 *
 * Which worker takes which job depends on scheduling, so nothing printed
 * does: results are kept by job number, totals are sums, and everything is
 * printed after the threads are joined (or have posted). */
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>

#define WORKERS 4
#define JOBS 24
#define EXIT_JOB 13          /* the job whose worker leaves with pthread_exit */
#define EXIT_VALUE ((void *)0x5e1f)

static __thread unsigned calls;  /* per thread: frames entered by walk/chain */
static unsigned total_calls;     /* the key destructor adds each worker's calls */
static unsigned serial_waiters;  /* PTHREAD_BARRIER_SERIAL_THREAD returned */
static unsigned done_atomic;     /* jobs done, counted with ldrex/strex */
static unsigned once_runs;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nonempty = PTHREAD_COND_INITIALIZER;  /* a job was queued, or closing */
static pthread_cond_t all_done = PTHREAD_COND_INITIALIZER;  /* completed reached JOBS */
static pthread_barrier_t start;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t key;

static int queue[JOBS], head, tail, closing, completed;
static uint32_t results[JOBS];

__attribute__((noinline)) static uint32_t tree(int depth, uint32_t seed) {
    calls++;
    if (depth == 0) return seed * 2654435761u ^ (seed >> 13);
    uint32_t left = tree(depth - 1, seed * 31 + 7);
    uint32_t right = tree(depth - 1, seed ^ (left << 3));
    return (left + right) ^ (uint32_t)depth;
}

static void finish(int job, uint32_t value) {  /* under no lock: takes it */
    pthread_mutex_lock(&lock);
    results[job] = value;
    if (++completed == JOBS) pthread_cond_signal(&all_done);
    pthread_mutex_unlock(&lock);
    __atomic_fetch_add(&done_atomic, 1, __ATOMIC_RELAXED);
}

static void exit_cleanup(void *job) {  /* run by pthread_exit's unwinding */
    finish((int)(intptr_t)job, 0xe817u);
}

__attribute__((noinline)) static uint32_t leave(int job) {
    uint32_t value = 0;
    pthread_cleanup_push(exit_cleanup, (void *)(intptr_t)job);
    value = tree(4, (uint32_t)job);       /* some work, then out of the thread */
    if (value != 1) pthread_exit(EXIT_VALUE);  /* always: tree(4, 13) != 1 */
    pthread_cleanup_pop(0);
    return value;
}

/* A chain of frames with locals (a stack that grows), then the real work. */
__attribute__((noinline)) static uint32_t chain(int depth, int job) {
    volatile uint32_t local[6];
    calls++;
    if (depth == 0) return job == EXIT_JOB ? leave(job) : tree(8, (uint32_t)job * 977u + 1);
    for (int i = 0; i < 6; i++) local[i] = (uint32_t)(depth * i + job);
    uint32_t below = chain(depth - 1, job);
    return below + local[depth % 6];  /* work after the call: not a tail call */
}

static void init_once(void) { once_runs++; }

static void flush_calls(void *unused) {  /* the key's destructor, at thread exit */
    (void)unused;
    pthread_mutex_lock(&lock);
    total_calls += calls;
    pthread_mutex_unlock(&lock);
}

static void *worker(void *arg) {
    (void)arg;
    pthread_setspecific(key, &calls);  /* non-NULL: the destructor runs */
    pthread_once(&once, init_once);
    if (pthread_barrier_wait(&start) == PTHREAD_BARRIER_SERIAL_THREAD)
        __atomic_fetch_add(&serial_waiters, 1, __ATOMIC_RELAXED);
    for (;;) {
        pthread_mutex_lock(&lock);
        while (head == tail && !closing) pthread_cond_wait(&nonempty, &lock);
        if (head == tail) {  /* closing, nothing left */
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        int job = queue[head++];
        pthread_mutex_unlock(&lock);
        finish(job, chain(14 + job % 8, job));
    }
}

/* The detached thread: work, then a semaphore post (nobody joins it). */
static sem_t detached_done;
static uint32_t detached_result;
static void *detached(void *arg) {
    detached_result = tree(9, (uint32_t)(uintptr_t)arg);
    sem_post(&detached_done);
    return NULL;
}

static uint32_t checksum(void) {
    uint32_t sum = 0;
    for (int i = 0; i < JOBS; i++) sum = (sum << 5 | sum >> 27) ^ results[i];
    return sum;
}

int main(void) {
    pthread_t workers[WORKERS], other;
    pthread_key_create(&key, flush_calls);
    pthread_barrier_init(&start, NULL, WORKERS + 1);
    for (int i = 0; i < WORKERS; i++) pthread_create(&workers[i], NULL, worker, NULL);
    if (pthread_barrier_wait(&start) == PTHREAD_BARRIER_SERIAL_THREAD)
        __atomic_fetch_add(&serial_waiters, 1, __ATOMIC_RELAXED);

    for (int job = 0; job < JOBS; job++) {  /* one at a time: a signal each */
        pthread_mutex_lock(&lock);
        queue[tail++] = job;
        pthread_cond_signal(&nonempty);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_lock(&lock);
    while (completed < JOBS) pthread_cond_wait(&all_done, &lock);
    closing = 1;
    pthread_cond_broadcast(&nonempty);
    pthread_mutex_unlock(&lock);

    int exited = 0, returned = 0;
    for (int i = 0; i < WORKERS; i++) {
        void *value;
        pthread_join(workers[i], &value);
        if (value == EXIT_VALUE) exited++;
        else if (value == NULL) returned++;
    }
    printf("jobs: %d, checksum %08x, exit job's result %x\n", completed, checksum(), results[EXIT_JOB]);
    printf("workers: %d returned, %d left with pthread_exit\n", returned, exited);
    printf("calls in all workers (__thread, summed at exit): %u\n", total_calls);
    printf("atomic count: %u, once: %u, barrier serial: %u\n", done_atomic, once_runs, serial_waiters);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 65536);
    sem_init(&detached_done, 0, 0);
    pthread_create(&other, &attr, detached, (void *)(uintptr_t)99);
    sem_wait(&detached_done);
    printf("detached: %08x\n", detached_result);
    pthread_attr_destroy(&attr);
    return 0;
}
