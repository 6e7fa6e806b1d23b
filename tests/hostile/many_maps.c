/* 20,000 one-page anonymous mappings, one mmap each, none unmapped.
 * Prints `maps=N errno=NAME` when one fails, else `maps=20000`.  (Linux
 * merges neighbouring anonymous mappings into one area, so on a real kernel
 * all 20,000 succeed.) */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

int main(void)
{
    int maps = 0;
    for (; maps < 20000; maps++) {
        if (mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED) {
            printf("maps=%d errno=%s\n", maps, strerrorname_np(errno));
            return 0;
        }
    }
    printf("maps=%d\n", maps);
    return 0;
}
