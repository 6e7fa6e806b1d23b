/* getpid through syscall(), forever (glibc's getpid could be answered
 * without a call). */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
    for (;;)
        syscall(SYS_getpid);
}
