/* Hard links as Linux makes them (tests/test_linux_links.py): link and
 * linkat give a file a second name that shares its data, inode and link
 * count; AT_SYMLINK_FOLLOW links a symlink's target, AT_EMPTY_PATH an open
 * file; EEXIST, ENOENT, ENOTDIR, EPERM (a directory), EINVAL; unlink and a
 * rename over a name take one link away, a rename between two links of one
 * file does nothing. Run in a new directory of /tmp, removed after. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void result(const char *what, int value) {
    printf("%s: %s\n", what, value == 0 ? "0" : strerrorname_np(errno));
}

static unsigned long links(const char *path) {
    struct stat info;
    return lstat(path, &info) == 0 ? (unsigned long)info.st_nlink : 999;
}

static unsigned long fd_links(int fd) {
    struct stat info;
    return fstat(fd, &info) == 0 ? (unsigned long)info.st_nlink : 999;
}

static int same_file(const char *a, const char *b) {
    struct stat one, two;
    return stat(a, &one) == 0 && stat(b, &two) == 0 && one.st_ino == two.st_ino && one.st_dev == two.st_dev;
}

static void first_names(void) {
    char text[32] = {0};
    int fd = open("a", O_CREAT | O_RDWR, 0644);
    if (write(fd, "hello", 5) != 5) exit(2);
    printf("a %lu\n", fd_links(fd));
    result("link a b", link("a", "b"));
    printf("a %lu b %lu fd %lu same %d\n", links("a"), links("b"), fd_links(fd), same_file("a", "b"));
    int other = open("b", O_WRONLY | O_APPEND);
    if (write(other, " world", 6) != 6) exit(2);
    close(other);
    printf("read through a: %s\n", pread(fd, text, sizeof text - 1, 0) > 0 ? text : "-");
    result("link a b again", link("a", "b"));
    result("link missing", link("missing", "c"));
    mkdir("d", 0755);
    result("link d", link("d", "e"));
    result("link into missing", link("a", "nowhere/x"));
    result("link under a file", link("a", "a/x"));
    close(fd);
}

static void symlinks_and_renames(void) {
    symlink("a", "s");
    result("link s t", link("s", "t"));
    printf("t is a symlink %d, s %lu, a %lu\n", (int)readlink("t", (char[8]){0}, 8), links("s"), links("a"));
    result("linkat follow", linkat(AT_FDCWD, "s", AT_FDCWD, "u", AT_SYMLINK_FOLLOW));
    printf("a %lu same %d\n", links("a"), same_file("a", "u"));
    result("unlink b", unlink("b"));
    int fd = open("a", O_RDONLY);
    printf("a %lu fd %lu\n", links("a"), fd_links(fd));
    result("rename u a", rename("u", "a"));
    printf("u %lu a %lu\n", links("u"), links("a"));
    close(open("c", O_CREAT | O_WRONLY, 0644));
    result("rename c a", rename("c", "a"));
    printf("fd %lu u %lu a %lu\n", fd_links(fd), links("u"), links("a"));
    result("unlink u", unlink("u"));
    printf("fd %lu\n", fd_links(fd));
    result("linkat an unlinked file", linkat(fd, "", AT_FDCWD, "back", AT_EMPTY_PATH));
    close(fd);
}

static void open_files(void) {
    int fd = open("f", O_CREAT | O_RDWR, 0600);
    result("linkat empty path", linkat(fd, "", AT_FDCWD, "g", AT_EMPTY_PATH));
    printf("f %lu g %lu fd %lu\n", links("f"), links("g"), fd_links(fd));
    result("linkat empty path without the flag", linkat(fd, "", AT_FDCWD, "h", 0));
    result("linkat the cwd", linkat(AT_FDCWD, "", AT_FDCWD, "h", AT_EMPTY_PATH));
    result("linkat bad flags", linkat(AT_FDCWD, "f", AT_FDCWD, "h", 1));
    struct statx info;
    result("statx g", statx(AT_FDCWD, "g", 0, STATX_NLINK, &info));
    printf("statx nlink %u\n", info.stx_nlink);
    close(fd);
}

int main(void) {
    char directory[] = "/tmp/links-XXXXXX";
    if (!mkdtemp(directory) || chdir(directory) != 0) return 1;
    first_names();
    symlinks_and_renames();
    open_files();
    const char *names[] = {"a", "s", "t", "f", "g"};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++) unlink(names[i]);
    rmdir("d");
    if (chdir("..") != 0 || rmdir(directory) != 0) return 3;
    return 0;
}
