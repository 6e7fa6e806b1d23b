/* madvise(MADV_DONTNEED) on every kind of mapping, as Linux answers it:
 * anonymous private pages read zeros after it; a private file mapping's
 * read the file again, the program's stores gone, zeros past the file's
 * end; shared ones (a memfd, a file in /dev/shm, MAP_SHARED|MAP_ANONYMOUS)
 * keep their bytes, which the page cache holds
 * (tests/test_linux_madvise.py, against qemu-user). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void dropped(const char *what, char *page) {
    strcpy(page + 16, "before");
    int done = madvise(page, 8192, MADV_DONTNEED);
    printf("%s: madvise %d, then reads \"%s\"\n", what, done, page + 16);
}

static int shared_file(int fd, const char *what) {
    char got[8] = {0};
    if (ftruncate(fd, 8192) != 0) return 1;
    char *map = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return 1;
    dropped(what, map);
    pread(fd, got, 6, 16);
    printf("%s: the file reads \"%s\"\n", what, got);
    return munmap(map, 8192);
}

static int private_file(void) {
    char name[64], text[6000];
    snprintf(name, sizeof name, "/tmp/unwind-harness-madvise-%d", (int)getpid());
    int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    memset(text, 'a', sizeof text);
    if (fd < 0 || write(fd, text, sizeof text) != sizeof text) return 1;
    char *map = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) return 1;
    memcpy(map + 2, "mine", 4);
    memcpy(map + 7000, "tail", 4);
    int done = madvise(map, 8192, MADV_DONTNEED);
    printf("private file: madvise %d, then reads \"%.8s\" and past its end %d %d %d %d\n", done, map, map[7000],
           map[7001], map[7002], map[7003]);
    unlink(name);
    return munmap(map, 8192);
}

int main(void) {
    char *anon = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *shared = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (anon == MAP_FAILED || shared == MAP_FAILED) return 1;
    dropped("private anonymous", anon);
    dropped("shared anonymous", shared);
    char name[64];
    snprintf(name, sizeof name, "/dev/shm/unwind-harness-madvise-%d", (int)getpid());
    int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || shared_file(fd, "shared /dev/shm file")) return 2;
    unlink(name);
    int memfd = memfd_create("region", 0);
    if (memfd < 0 || shared_file(memfd, "shared memfd")) return 3;
    return private_file() ? 4 : 0;
}
