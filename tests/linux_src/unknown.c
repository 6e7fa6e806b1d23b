/* A system call no emulation knows: the run must end as a fault naming it. */
#include <unistd.h>
#include <sys/syscall.h>
int main(void) { return (int)syscall(987, 1, 2, 3); }
