/* Ask for 3 GiB a call: one writev of three 1 GiB iovecs, all pointing at
 * one 512 MiB anonymous buffer, to a new file, until a call fails.  Prints
 * `errno=NAME total=N` (N: the bytes all the calls moved).
 *
 * Optional arguments, for a reference run on a real kernel that must not
 * fill the disk: the buffer's size and each iovec's length, in MiB. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    size_t buffer_size = (argc > 1 ? strtoul(argv[1], NULL, 0) : 512) << 20;
    size_t iovec_length = (argc > 2 ? strtoul(argv[2], NULL, 0) : 1024) << 20;
    /* Under a file-size limit the kernel sends SIGXFSZ; ignored, the write
     * fails with EFBIG instead, which the loop reports like any errno. */
    signal(SIGXFSZ, SIG_IGN);
    char *buffer = mmap(NULL, buffer_size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (buffer == MAP_FAILED) {
        printf("mmap errno=%s\n", strerrorname_np(errno));
        return 1;
    }
    int fd = open("out.bin", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
        printf("open errno=%s\n", strerrorname_np(errno));
        return 1;
    }
    struct iovec vector[3];
    for (int i = 0; i < 3; i++) {
        vector[i].iov_base = buffer;
        vector[i].iov_len = iovec_length;
    }
    long long total = 0;
    for (;;) {
        long moved = syscall(SYS_writev, fd, vector, 3);
        if (moved < 0) {
            printf("errno=%s total=%lld\n", strerrorname_np(errno), total);
            return 0;
        }
        total += moved;
    }
}
