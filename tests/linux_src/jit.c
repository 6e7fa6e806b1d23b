/* A function made at run time in anonymous memory, as a JIT makes one
   (V8's in Chromium): Thumb `adds r0, #1; bx lr`, written into a page,
   made executable and called through a pointer. Exit status 40. */
#include <string.h>
#include <sys/mman.h>

static const unsigned short code[] = {0x3001, 0x4770};

int main(void) {
    unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 1;
    memcpy(page, code, sizeof code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC))
        return 2;
    __builtin___clear_cache((char *)page, (char *)page + sizeof code);
    int (*made)(int) = (int (*)(int))(page + 1); /* Thumb */
    int n = 0;
    for (int i = 0; i < 40; i++)
        n = made(n);
    return n;
}
