/* Ground-truth cases of C user space: a longjmp out of several frames,
 * qsort calling back into our code, stdin, argv, and the exit status. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jmp_buf escape;
static volatile int sink;

/* Called where the test looks at the shadow stack: after the longjmp, its
 * callers must be main and what called main, nothing of the frames left. */
__attribute__((noinline)) void marker(int where) { __asm__ volatile("" ::"r"(where)); }

__attribute__((noinline)) int dive(int depth) {
    if (depth == 0) longjmp(escape, 42);
    int below = dive(depth - 1);
    sink = below;  /* work after the call: no loop can replace the recursion */
    return below + depth;
}

static int by_value(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int main(int argc, char **argv) {
    int values[16];
    for (int i = 0; i < 16; i++) values[i] = (i * 37) % 17;
    qsort(values, 16, sizeof values[0], by_value);
    for (int i = 0; i < 16; i++) printf("%d%c", values[i], i == 15 ? '\n' : ' ');
    int code = setjmp(escape);
    if (code == 0) dive(6);
    marker(code);
    printf("longjmp returned %d\n", code);
    char line[128];
    int lines = 0;
    while (fgets(line, sizeof line, stdin)) lines++;
    printf("%d lines of stdin, %d arguments:", lines, argc - 1);
    for (int i = 1; i < argc; i++) printf(" %s", argv[i]);
    printf("\n");
    return argc == 1 ? 0 : 5;
}
