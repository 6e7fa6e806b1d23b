/* PTHREAD_PRIO_INHERIT mutexes, which glibc locks in user space and, when
 * contended, with FUTEX_LOCK_PI / FUTEX_UNLOCK_PI / FUTEX_TRYLOCK_PI
 * (harness.linux.pi_futex; tests/test_linux_pi_futex.py): threads that
 * contend for one, a trylock and a timed lock of one another thread holds. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define THREADS 4
#define ROUNDS 3000

static pthread_mutex_t lock;
static volatile long counter;
static volatile int held, release;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&lock);
        long seen = counter;
        for (volatile int spin = 0; spin < 50; spin++) {
        }
        counter = seen + 1;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    held = 1;
    while (!release)
        sched_yield();
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void) {
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
    pthread_mutexattr_setprotocol(&attributes, PTHREAD_PRIO_INHERIT);
    pthread_mutex_init(&lock, &attributes);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    printf("counter %ld\n", counter);

    pthread_t other;
    pthread_create(&other, NULL, holder, NULL);
    while (!held)
        sched_yield();
    int busy = pthread_mutex_trylock(&lock);
    struct timespec soon;
    clock_gettime(CLOCK_REALTIME, &soon);
    soon.tv_nsec += 1000000;
    if (soon.tv_nsec >= 1000000000) {
        soon.tv_sec++;
        soon.tv_nsec -= 1000000000;
    }
    int timed = pthread_mutex_timedlock(&lock, &soon);
    release = 1;
    int locked = pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    pthread_join(other, NULL);
    printf("trylock %s, timedlock %s, lock %d\n", busy == EBUSY ? "EBUSY" : "?",
           timed == ETIMEDOUT ? "ETIMEDOUT" : "?", locked);
    return 0;
}
