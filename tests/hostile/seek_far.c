/* Seek far into a new file and write one byte there.
 *  - At 3 GiB: a sparse file of 3 GiB + 1 byte; a raw fstat64 says
 *    `size=3221225473`.
 *  - To 2^62: past the largest offset a 32-bit kernel allows (its
 *    MAX_LFS_FILESIZE, 2^44 - 4096), so the seek itself is refused:
 *    `seek_2^62 errno=EINVAL`.
 *  - At 2^44 - 4096 exactly: the seek is allowed, a byte written there would
 *    end past the largest file, `write_at_2^44-4096 errno=EFBIG`.
 * O_LARGEFILE, as a program built with 64-bit offsets opens its files:
 * without it a 32-bit process may not write past 2 GiB at all. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static long seek_to(int fd, uint64_t offset)
{
    long long result;
    return syscall(SYS__llseek, fd, (unsigned long)(offset >> 32), (unsigned long)offset, &result, SEEK_SET);
}

static void show(const char *what, long result)
{
    if (result < 0)
        printf("%s errno=%s\n", what, strerrorname_np(errno));
    else
        printf("%s=%ld\n", what, result);
}

int main(void)
{
    int fd = open("far.bin", O_CREAT | O_RDWR | O_TRUNC | O_LARGEFILE, 0644);
    if (fd < 0) {
        show("open", fd);
        return 1;
    }
    long result = seek_to(fd, 3ULL << 30);
    if (result == 0)
        result = syscall(SYS_write, fd, "x", 1);
    if (result < 0) {
        show("write_at_3GiB", result);
        return 1;
    }
    struct stat64 info;
    if (syscall(SYS_fstat64, fd, &info) != 0) {
        show("fstat64", -1);
        return 1;
    }
    printf("size=%lld\n", (long long)info.st_size);
    show("seek_2^62", seek_to(fd, 1ULL << 62));
    result = seek_to(fd, (1ULL << 44) - 4096);
    if (result < 0)
        show("seek_2^44-4096", result);
    else
        show("write_at_2^44-4096", syscall(SYS_write, fd, "x", 1));
    return 0;
}
