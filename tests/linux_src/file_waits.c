/* Waits on files across threads, and signals that end them: a reader
 * that waits on an empty pipe until another thread writes, an eventfd
 * read woken by a write, poll and epoll_wait woken by another thread,
 * poll and select whose timeouts expire (the clock moves on by them at
 * least), a sleep that a signal ends (the time left written back), a
 * read of a pipe that SIGALRM interrupts without and with SA_RESTART, and
 * pselect letting a pending signal through the mask it waits under.
 * main prints everything, after the joins: the output does not depend on
 * the order the threads run in. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int fds[2], event;
static volatile sig_atomic_t alarms, write_in_handler, usr1s;

static void pause_ms(long ms) {
    struct timespec span = {ms / 1000, ms % 1000 * 1000000L};
    nanosleep(&span, NULL);
}

static long ms_since(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

static void *reader(void *result) {
    char *buffer = result;
    ssize_t got = read(fds[0], buffer, 15);  /* waits: main writes 20 ms later */
    buffer[got > 0 ? got : 0] = 0;
    return (void *)got;
}

static void *event_reader(void *unused) {
    uint64_t value = 0;
    (void)unused;
    if (read(event, &value, sizeof value) != sizeof value) return (void *)-1L;
    return (void *)(long)value;
}

static void *write_later(void *text) {
    pause_ms(20);
    if (write(fds[1], text, strlen(text)) < 0) perror("write");
    return NULL;
}

static void *count_later(void *unused) {
    uint64_t three = 3;
    (void)unused;
    pause_ms(20);
    if (write(event, &three, sizeof three) < 0) perror("write");
    return NULL;
}

static void on_alarm(int signal) {
    (void)signal;
    alarms++;
    if (write_in_handler && write(fds[1], "x", 1) < 0) alarms += 100;
}

static void alarm_in(long ms, int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_alarm;
    action.sa_flags = flags;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval timer = {{0, 0}, {ms / 1000, ms % 1000 * 1000}};
    setitimer(ITIMER_REAL, &timer, NULL);
}

static void pipe_and_eventfd(void) {
    pthread_t thread;
    char text[16];
    void *got;
    pthread_create(&thread, NULL, reader, text);
    pause_ms(20);
    if (write(fds[1], "hello", 5) != 5) perror("write");
    pthread_join(thread, &got);
    printf("reader got %ld bytes: %s\n", (long)got, text);
    pthread_create(&thread, NULL, event_reader, NULL);
    pause_ms(20);
    uint64_t seven = 7;
    if (write(event, &seven, sizeof seven) != sizeof seven) perror("write");
    pthread_join(thread, &got);
    printf("eventfd read %ld\n", (long)got);
}

static void poll_and_epoll(void) {
    pthread_t thread;
    char byte;
    struct pollfd polled = {fds[0], POLLIN, 0};
    pthread_create(&thread, NULL, write_later, "!");
    int ready = poll(&polled, 1, -1);
    pthread_join(thread, NULL);
    printf("poll woke: %d, POLLIN %s\n", ready, polled.revents & POLLIN ? "yes" : "no");
    if (read(fds[0], &byte, 1) != 1) perror("read");
    int epoll = epoll_create1(0);
    struct epoll_event interest = {EPOLLIN, {.u64 = 42}}, out = {0, {0}};
    epoll_ctl(epoll, EPOLL_CTL_ADD, event, &interest);
    pthread_create(&thread, NULL, count_later, NULL);
    ready = epoll_wait(epoll, &out, 1, -1);
    pthread_join(thread, NULL);
    uint64_t value = 0;
    if (read(event, &value, sizeof value) != sizeof value) perror("read");
    printf("epoll_wait woke: %d, data %llu, count %llu\n", ready, (unsigned long long)out.data.u64,
           (unsigned long long)value);
    close(epoll);
}

static void timeouts(void) {
    struct timespec start;
    struct pollfd polled = {fds[0], POLLIN, 0};
    clock_gettime(CLOCK_MONOTONIC, &start);
    int ready = poll(&polled, 1, 50);
    printf("poll timed out: %d, revents %d, 50 ms passed: %s\n", ready, polled.revents,
           ms_since(&start) >= 50 ? "yes" : "no");
    fd_set reads;
    FD_ZERO(&reads);
    FD_SET(fds[0], &reads);
    struct timeval left = {0, 30000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    ready = select(fds[0] + 1, &reads, NULL, NULL, &left);
    printf("select timed out: %d, set %s, time left %ld.%06ld, 30 ms passed: %s\n", ready,
           FD_ISSET(fds[0], &reads) ? "kept" : "cleared", (long)left.tv_sec, (long)left.tv_usec,
           ms_since(&start) >= 30 ? "yes" : "no");
}

static void interrupted(void) {
    struct timespec asked = {1, 0}, rem = {0, 0};
    char buffer[4];
    alarm_in(50, 0);
    int slept = nanosleep(&asked, &rem);
    int error = errno;
    long rem_ms = rem.tv_sec * 1000 + rem.tv_nsec / 1000000;
    printf("nanosleep: %d %s, rem between 900 and 960 ms: %s\n", slept, strerrorname_np(error),
           rem_ms >= 900 && rem_ms <= 960 ? "yes" : "no");
    alarm_in(20, 0);
    ssize_t got = read(fds[0], buffer, sizeof buffer);
    error = errno;
    printf("read without SA_RESTART: %zd %s\n", got, got < 0 ? strerrorname_np(error) : "-");
    write_in_handler = 1;
    alarm_in(20, SA_RESTART);
    got = read(fds[0], buffer, sizeof buffer);
    printf("read with SA_RESTART: %zd %.*s, alarms %d\n", got, got > 0 ? (int)got : 0, buffer, (int)alarms);
}

static void on_usr1(int signal) {
    (void)signal;
    usr1s++;
}

static void masked_wait(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1;
    sigaction(SIGUSR1, &action, NULL);
    sigset_t usr1, none, now;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigemptyset(&none);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    raise(SIGUSR1);  /* pending: blocked */
    fd_set reads;
    FD_ZERO(&reads);
    FD_SET(fds[0], &reads);
    struct timespec limit = {1, 0};
    int ready = pselect(fds[0] + 1, &reads, NULL, NULL, &limit, &none);
    int error = errno;
    sigprocmask(SIG_BLOCK, NULL, &now);
    printf("pselect: %d %s, handler ran %d, SIGUSR1 blocked again: %s\n", ready, strerrorname_np(error), (int)usr1s,
           sigismember(&now, SIGUSR1) ? "yes" : "no");
}

int main(void) {
    if (pipe(fds) != 0 || (event = eventfd(0, 0)) < 0) return 1;
    pipe_and_eventfd();
    poll_and_epoll();
    timeouts();
    interrupted();
    masked_wait();
    return 0;
}
