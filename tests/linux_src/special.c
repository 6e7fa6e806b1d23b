/* What a program reads of /proc/self and /dev, and an eventfd waited for
   with epoll: the same under qemu-user and the harness
   (tests/test_linux_calls_more.py). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Is `address` inside the [stack] line of /proc/self/maps? */
static int on_the_stack(uintptr_t address) {
    char line[512];
    FILE *maps = fopen("/proc/self/maps", "r");
    int found = 0;
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        if (strstr(line, "[stack]") && sscanf(line, "%lx-%lx", &start, &end) == 2)
            found = start <= address && address < end;
    }
    if (maps)
        fclose(maps);
    return found;
}

int main(void) {
    char exe[256] = "";
    char buffer[8];
    int local = 0;
    ssize_t length = readlink("/proc/self/exe", exe, sizeof exe - 1);
    printf("exe absolute: %d\n", length > 0 && exe[0] == '/');
    printf("local on [stack]: %d\n", on_the_stack((uintptr_t)&local));
    int null = open("/dev/null", O_RDWR);
    printf("/dev/null: read %zd, write %zd\n", read(null, buffer, sizeof buffer), write(null, "x", 1));
    int zero = open("/dev/zero", O_RDONLY);
    printf("/dev/zero: read %zd, first %d\n", read(zero, buffer, sizeof buffer), buffer[0]);
    int counter = eventfd(0, EFD_NONBLOCK);
    int epoll = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.u64 = 77}, got;
    epoll_ctl(epoll, EPOLL_CTL_ADD, counter, &event);
    printf("ready before: %d\n", epoll_wait(epoll, &got, 1, 0));
    eventfd_write(counter, 5);
    int ready = epoll_wait(epoll, &got, 1, -1);
    eventfd_t value = 0;
    eventfd_read(counter, &value);
    printf("ready after: %d, data %llu, counter %llu\n", ready, (unsigned long long)got.data.u64,
           (unsigned long long)value);
    return 0;
}
