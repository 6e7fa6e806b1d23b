/* System calls reach the program's memory as its protections let them
 * (tests/test_linux_user_memory.py): a write to a page made read-only
 * (getrlimit's result: Chromium's PartitionAlloc checks a page is
 * read-only that way) or a read of a PROT_NONE page fails with EFAULT and
 * changes nothing; writable pages, and read-only ones read, work. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static void result(const char *what, long value) {
    printf("%s: %s\n", what, value >= 0 ? "ok" : strerrorname_np(errno));
}

int main(void) {
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *memory = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return 1;
    memset(memory, 0x5a, 3 * page);
    result("getrlimit into a writable page", getrlimit(RLIMIT_NPROC, (struct rlimit *)memory));
    mprotect(memory + page, page, PROT_READ);
    result("getrlimit into a read-only page", getrlimit(RLIMIT_NPROC, (struct rlimit *)(memory + page)));
    printf("unchanged %d\n", memory[page] == 0x5a && memory[page + 7] == 0x5a);
    result("getrlimit across into it", getrlimit(RLIMIT_NPROC, (struct rlimit *)(memory + page - 4)));
    int fds[2];
    if (pipe(fds) != 0) return 1;
    result("write from a read-only page", write(fds[1], memory + page, 4));
    mprotect(memory + 2 * page, page, PROT_NONE);
    result("write from a PROT_NONE page", write(fds[1], memory + 2 * page, 4));
    result("read into a read-only page", read(fds[0], memory + page, 4));
    result("read into a writable page", read(fds[0], memory, 4));
    mprotect(memory + page, page, PROT_READ | PROT_WRITE);
    result("getrlimit once writable again", getrlimit(RLIMIT_NPROC, (struct rlimit *)(memory + page)));
    return 0;
}
