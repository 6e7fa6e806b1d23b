/* pthread_exit from three frames deep in the main thread: glibc unwinds
   them with _Unwind_ForcedUnwind (libgcc_s, loaded by dlopen), running each
   frame's cleanup handler, then lands by longjmp in __libc_start_call_main,
   which ends the process with exit(0): a thread-exit path that never returns. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void __attribute__((noinline)) cleanup(void *arg) { printf("cleanup %s\n", (const char *)arg); }

static void __attribute__((noinline)) leave(int depth) {
    if (depth == 0) {
        printf("leaving\n");
        pthread_exit(NULL);
    }
    pthread_cleanup_push(cleanup, "inner");
    leave(depth - 1);
    pthread_cleanup_pop(0);
}

static void after(void) { printf("atexit ran\n"); }

int main(void) {
    atexit(after);
    leave(3);
    return 1; /* never reached */
}
