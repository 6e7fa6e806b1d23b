/* Fill a pipe that nothing ever drains, 1 MiB a write.
 *
 * Blocking (no argument): Linux's pipe holds 64 KiB; the first write
 * copies that much and then sleeps until a reader makes room, and with one
 * thread none ever will.  The harness cannot wait forever, so the run must
 * end as a fault.
 * `nonblock`: the first write is partial (64 KiB), the next gets EAGAIN.
 * Prints `buffered=N errno=NAME`. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char chunk[1 << 20];

int main(int argc, char **argv)
{
    int nonblock = argc > 1 && strcmp(argv[1], "nonblock") == 0;
    int fds[2];
    if (pipe2(fds, nonblock ? O_NONBLOCK : 0) != 0) {
        printf("pipe2 errno=%s\n", strerrorname_np(errno));
        return 1;
    }
    long buffered = 0;
    for (;;) {
        ssize_t written = write(fds[1], chunk, sizeof chunk);
        if (written < 0) {
            printf("buffered=%ld errno=%s\n", buffered, strerrorname_np(errno));
            return 0;
        }
        buffered += written;
    }
}
