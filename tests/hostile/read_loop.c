/* Read a file (argv[1]) one byte a call, forever: back to its start at
 * its end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        puts("usage: read_loop FILE");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        puts("open failed");
        return 1;
    }
    char byte;
    for (;;) {
        if (read(fd, &byte, 1) == 0)
            lseek(fd, 0, SEEK_SET);
    }
}
