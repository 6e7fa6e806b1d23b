/* Guests that spend what the host must bound (tests/test_guest_runs.py):
 * argv[1] names the way. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>

int main(int argc, char **argv) {
    const char *way = argc > 1 ? argv[1] : "";
    if (!strcmp(way, "getpid")) for (;;) syscall(SYS_getpid);          /* the clock, between system calls */
    if (!strcmp(way, "random")) {                                       /* the clock, within them */
        static char buffer[1 << 20];
        for (;;) getrandom(buffer, sizeof buffer, 0);
    }
    if (!strcmp(way, "spin")) for (volatile unsigned i = 0;; i++) {}    /* the clock, no system call */
    if (!strcmp(way, "touch")) {                                        /* memory, no system call */
        char *pages = mmap(0, 900 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (pages == MAP_FAILED) { perror("mmap"); return 1; }
        for (long i = 0; i < (900 << 20); i += 4096) pages[i] = 1;
    }
    if (!strcmp(way, "midr")) {                                         /* privileged: SIGILL in user mode */
        unsigned id;
        __asm__ volatile("mrc p15, 0, %0, c0, c0, 0" : "=r"(id));
        printf("%#x\n", id);
    }
    puts(way);
    return 0;
}
