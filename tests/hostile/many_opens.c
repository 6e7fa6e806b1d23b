/* Open one existing file (argv[1]) 10,000 times, closing none.  Prints
 * `opened=N errno=NAME` when an open fails (EMFILE at the descriptor
 * limit: 1024, so N = 1021 with 0-2 taken), else `opened=10000`. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        puts("usage: many_opens FILE");
        return 2;
    }
    int opened = 0;
    for (; opened < 10000; opened++) {
        if (open(argv[1], O_RDONLY) < 0) {
            printf("opened=%d errno=%s\n", opened, strerrorname_np(errno));
            return 0;
        }
    }
    printf("opened=%d\n", opened);
    return 0;
}
