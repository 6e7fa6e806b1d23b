/* Map 900 MiB (or argv[1] MiB) and write a byte in every page, so each
 * page really takes memory.  Prints `touched=N MiB` when done. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
    size_t size = (argc > 1 ? strtoul(argv[1], NULL, 0) : 900) << 20;
    volatile char *memory = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
        printf("mmap errno=%s\n", strerrorname_np(errno));
        return 1;
    }
    for (size_t offset = 0; offset < size; offset += 4096)
        memory[offset] = 1;
    printf("touched=%zu MiB\n", size >> 20);
    return 0;
}
