/* MAP_SHARED mappings of a file in /dev/shm and of a memfd: two mappings,
 * the file's write and read, and an unmap all see one set of bytes
 * (tests/test_linux_shared_maps.py, against qemu-user). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int check(int fd, const char *what) {
    char got[8] = {0};
    if (ftruncate(fd, 8192) != 0) return 1;
    char *a = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *b = mmap(0, 8192, PROT_READ, MAP_SHARED, fd, 0);
    if (a == MAP_FAILED || b == MAP_FAILED || a == b) return 1;
    strcpy(a + 4096, "hello");
    printf("%s: the other mapping reads %s\n", what, b + 4096);
    pwrite(fd, "written", 7, 100);
    printf("%s: after write the mapping reads %.7s\n", what, a + 100);
    memcpy(a + 200, "stored", 6);
    pread(fd, got, 6, 200);
    printf("%s: after a store read gives %s\n", what, got);
    munmap(a, 8192);
    printf("%s: unmapped one, the other reads %s\n", what, b + 4096);
    if (mprotect(b, 4096, PROT_READ | PROT_WRITE) != 0) return 1;
    strcpy(b + 300, "through b");
    pread(fd, got, 7, 300);
    printf("%s: half of it made writable, a store there reads %.7s\n", what, got);
    return munmap(b, 8192);
}

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "/dev/shm/unwind-harness-%d", (int)getpid());
    int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || check(fd, "shm")) return 1;
    unlink(name);
    int memfd = memfd_create("region", 0);
    if (memfd < 0 || check(memfd, "memfd")) return 2;
    return 0;
}
