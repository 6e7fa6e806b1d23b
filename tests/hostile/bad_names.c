/* Path arguments the host could choke on, given to every path call the
 * harness emulates: a name that is not UTF-8, a path of 5,000 bytes (past
 * PATH_MAX, 4096), a 300-byte component (past NAME_MAX, 255), an unmapped
 * pointer and NULL.  Prints `call:name=RESULT` for each, RESULT an errno
 * name, `ok` or a count: raw system calls, so glibc checks nothing first. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char long_path[5001];
static char long_component[301];
static struct stat64 info;
static char link_target[64];

static void show(const char *call, const char *name, long result)
{
    if (result < 0)
        printf("%s:%s=%s\n", call, name, strerrorname_np(errno));
    else
        printf("%s:%s=ok\n", call, name);
}

static void each_call(const char *name, const char *path)
{
    long fd;
    show("open", name, fd = syscall(SYS_open, path, O_RDONLY));
    if (fd >= 0)
        close(fd);
    show("openat", name, fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY));
    if (fd >= 0)
        close(fd);
    show("stat64", name, syscall(SYS_stat64, path, &info));
    show("lstat64", name, syscall(SYS_lstat64, path, &info));
    show("access", name, syscall(SYS_access, path, F_OK));
    show("readlink", name, syscall(SYS_readlink, path, link_target, sizeof link_target));
    show("unlink", name, syscall(SYS_unlink, path));
    /* Then made: a name Linux accepts becomes a file that stat finds and
     * unlink removes. */
    show("create", name, fd = syscall(SYS_open, path, O_CREAT | O_WRONLY | O_TRUNC, 0644));
    if (fd >= 0)
        close(fd);
    show("stat64_created", name, syscall(SYS_stat64, path, &info));
    show("unlink_created", name, syscall(SYS_unlink, path));
}

int main(void)
{
    for (size_t i = 0; i + 2 <= sizeof long_path - 1; i += 2)
        memcpy(long_path + i, "a/", 2);
    memset(long_component, 'b', sizeof long_component - 1);
    each_call("not_utf8", "\xff\xfe");
    each_call("not_utf8_dir", "\xff\xfe/x");
    each_call("path_5000", long_path);
    each_call("component_300", long_component);
    each_call("unmapped", (const char *)0x10);
    each_call("null", NULL);
    return 0;
}
