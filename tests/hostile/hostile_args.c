/* The file, memory and descriptor calls the harness emulates, each given
 * hostile arguments: huge counts, offsets near 2^63, unmapped and
 * kernel-space buffers, negative and out-of-range descriptors.  Raw
 * system calls, so that glibc checks nothing first.  Prints `name=RESULT`
 * per call, RESULT an errno name, a count, or `ok` where the value is an
 * address (addresses differ from one emulator to another).
 *
 * argv[1]: an existing regular file of at least 16 bytes; `.` must be a
 * directory and writable (the program creates scratch.txt in it). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define HUGE 0xffffffffUL
#define UNMAPPED 0x10UL
#define KERNEL 0xffff1000UL /* above user space on a 3G/1G split, and past the vector page */

static void show(const char *name, long result)
{
    if (result == -1)
        printf("%s=%s\n", name, strerrorname_np(errno));
    else
        printf("%s=%ld\n", name, result);
}

static void show_address(const char *name, long result)
{
    if (result == -1)
        printf("%s=%s\n", name, strerrorname_np(errno));
    else
        printf("%s=ok\n", name);
}

/* 64-bit arguments of EABI calls go in an even/odd register pair. */
#define LOW(x) ((unsigned long)(uint64_t)(x))
#define HIGH(x) ((unsigned long)((uint64_t)(x) >> 32))

int main(int argc, char **argv)
{
    if (argc < 2) {
        puts("usage: hostile_args FILE");
        return 2;
    }
    char buffer[64];
    long long position;
    int fd = open(argv[1], O_RDONLY);
    int out = open("scratch.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    int directory = open(".", O_RDONLY | O_DIRECTORY);
    /* One page with nothing mapped after it: a huge count from here runs
     * into a hole at once, whatever the emulator does with it. */
    char *page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fd < 0 || out < 0 || directory < 0 || page == MAP_FAILED) {
        puts("set-up failed");
        return 1;
    }
    munmap(page + 4096, 4096);

    show("read_fd_minus1", syscall(SYS_read, -1, buffer, 16));
    show("read_fd_minus100", syscall(SYS_read, -100, buffer, 16));
    show("read_fd_max", syscall(SYS_read, 0x7fffffff, buffer, 16));
    show("read_buf_unmapped", syscall(SYS_read, fd, UNMAPPED, 16));
    show("read_buf_kernel", syscall(SYS_read, fd, KERNEL, 16));
    show("read_count_huge", syscall(SYS_read, fd, page, HUGE));

    show("write_fd_minus1", syscall(SYS_write, -1, buffer, 16));
    show("write_fd_max", syscall(SYS_write, 0x7fffffff, buffer, 16));
    show("write_buf_unmapped", syscall(SYS_write, out, UNMAPPED, 16));
    show("write_buf_kernel", syscall(SYS_write, out, KERNEL, 16));
    show("write_count_huge", syscall(SYS_write, out, page, HUGE));

    show("pread_fd_minus1", syscall(SYS_pread64, -1, buffer, 16, 0, LOW(0), HIGH(0)));
    show("pread_buf_unmapped", syscall(SYS_pread64, fd, UNMAPPED, 16, 0, LOW(0), HIGH(0)));
    show("pread_offset_far", syscall(SYS_pread64, fd, buffer, 16, 0, LOW(1ULL << 62), HIGH(1ULL << 62)));
    show("pread_offset_wraps", syscall(SYS_pread64, fd, buffer, 16, 0, LOW((1ULL << 63) - 8), HIGH((1ULL << 63) - 8)));
    show("pread_offset_negative", syscall(SYS_pread64, fd, buffer, 16, 0, LOW(1ULL << 63), HIGH(1ULL << 63)));

    struct iovec good = {buffer, 16};
    struct iovec unmapped = {(void *)UNMAPPED, 16};
    struct iovec kernel = {(void *)KERNEL, 16};
    struct iovec huge = {page, HUGE};
    show("writev_fd_minus1", syscall(SYS_writev, -1, &good, 1));
    show("writev_vector_unmapped", syscall(SYS_writev, out, UNMAPPED, 1));
    show("writev_base_unmapped", syscall(SYS_writev, out, &unmapped, 1));
    show("writev_base_kernel", syscall(SYS_writev, out, &kernel, 1));
    show("writev_length_huge", syscall(SYS_writev, out, &huge, 1));
    show("writev_count_huge", syscall(SYS_writev, out, &good, 1025));
    show("readv_fd_minus1", syscall(SYS_readv, -1, &good, 1));
    show("readv_vector_unmapped", syscall(SYS_readv, fd, UNMAPPED, 1));
    show("readv_base_kernel", syscall(SYS_readv, fd, &kernel, 1));
    show("readv_count_huge", syscall(SYS_readv, fd, &good, HUGE));

    show("lseek_fd_minus1", syscall(SYS_lseek, -1, 0, SEEK_SET));
    show("lseek_whence_bad", syscall(SYS_lseek, fd, 0, 7));
    show("lseek_offset_negative", syscall(SYS_lseek, fd, -1, SEEK_SET));
    show("lseek_offset_max", syscall(SYS_lseek, fd, 0x7fffffff, SEEK_SET));
    show("lseek_past_2g", syscall(SYS_lseek, fd, 0x7fffffff, SEEK_CUR));
    show("llseek_fd_minus1", syscall(SYS__llseek, -1, 0, 0, &position, SEEK_SET));
    show("llseek_whence_bad", syscall(SYS__llseek, fd, 0, 0, &position, 5));
    show("llseek_offset_max", syscall(SYS__llseek, fd, 0x7fffffffUL, HUGE, &position, SEEK_SET));
    show("llseek_offset_negative", syscall(SYS__llseek, fd, 0x80000000UL, 0, &position, SEEK_SET));
    show("llseek_result_unmapped", syscall(SYS__llseek, fd, 0, 0, UNMAPPED, SEEK_SET));

    int anonymous = MAP_PRIVATE | MAP_ANONYMOUS, rw = PROT_READ | PROT_WRITE;
    show_address("mmap_length_huge", syscall(SYS_mmap2, 0, HUGE, rw, anonymous, -1, 0));
    show_address("mmap_length_zero", syscall(SYS_mmap2, 0, 0, rw, anonymous, -1, 0));
    show_address("mmap_fd_minus1", syscall(SYS_mmap2, 0, 4096, rw, MAP_PRIVATE, -1, 0));
    show_address("mmap_fixed_unaligned", syscall(SYS_mmap2, 0x10001, 4096, rw, anonymous | MAP_FIXED, -1, 0));
    show("munmap_unaligned", syscall(SYS_munmap, UNMAPPED, 4096));
    show("munmap_length_zero", syscall(SYS_munmap, page, 0));
    show("munmap_length_huge", syscall(SYS_munmap, page, HUGE));
    show_address("mremap_length_huge", syscall(SYS_mremap, page, 4096, HUGE, MREMAP_MAYMOVE, 0));
    show_address("mremap_unaligned", syscall(SYS_mremap, UNMAPPED, 4096, 8192, 0, 0));
    show_address("mremap_fixed_without_maymove", syscall(SYS_mremap, page, 4096, 8192, MREMAP_FIXED, 0));
    long before = syscall(SYS_brk, 0);
    long after = syscall(SYS_brk, HUGE);
    printf("brk_huge=%s\n", after == before ? "unchanged" : "moved");
    after = syscall(SYS_brk, 0x1000);
    printf("brk_low=%s\n", after == before ? "unchanged" : "moved");

    show("getrandom_buf_unmapped", syscall(SYS_getrandom, UNMAPPED, 16, 0));
    show("getrandom_buf_kernel", syscall(SYS_getrandom, KERNEL, 16, 0));
    show("getrandom_count_huge", syscall(SYS_getrandom, page, HUGE, 0));
    show("getrandom_flags_bad", syscall(SYS_getrandom, buffer, 16, 0xff));

    show("getdents64_fd_minus1", syscall(SYS_getdents64, -1, page, 4096));
    show("getdents64_not_directory", syscall(SYS_getdents64, fd, page, 4096));
    show("getdents64_buf_unmapped", syscall(SYS_getdents64, directory, UNMAPPED, 4096));
    show("getdents64_buf_kernel", syscall(SYS_getdents64, directory, KERNEL, 4096));
    show("getdents64_count_huge", syscall(SYS_getdents64, directory, page, HUGE));

    show("fcntl64_fd_minus1", syscall(SYS_fcntl64, -1, F_GETFL));
    show("fcntl64_command_bad", syscall(SYS_fcntl64, fd, 0x7fffffff, 0));
    show("fcntl64_dupfd_100000", syscall(SYS_fcntl64, fd, F_DUPFD, 100000));
    show("fcntl64_dupfd_minus1", syscall(SYS_fcntl64, fd, F_DUPFD, -1));
    show("dup2_fd_minus1", syscall(SYS_dup2, -1, 10));
    show("dup2_target_minus1", syscall(SYS_dup2, fd, -1));
    show("dup2_target_100000", syscall(SYS_dup2, fd, 100000));
    show("dup2_target_max", syscall(SYS_dup2, fd, 0x7fffffff));

    show("close_fd_minus1", syscall(SYS_close, -1));
    show("close_fd_minus100", syscall(SYS_close, -100));
    show("close_fd_max", syscall(SYS_close, 0x7fffffff));
    show("close_fd_100000", syscall(SYS_close, 100000));
    /* Last: where it succeeds (qemu-user lets it), the page it maps would
     * turn the kernel-space buffers above into good ones. */
    show_address("mmap_fixed_kernel", syscall(SYS_mmap2, KERNEL, 4096, rw, anonymous | MAP_FIXED, -1, 0));
    return 0;
}
