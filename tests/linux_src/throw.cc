// Ground-truth cases of C++: an exception thrown through several frames,
// a destructor run while unwinding, a catch in main.
#include <cstdio>
#include <stdexcept>

extern "C" __attribute__((noinline)) void marker(int where) { __asm__ volatile("" ::"r"(where)); }

struct Guard {
    int level;
    explicit Guard(int l) : level(l) {}
    __attribute__((noinline)) ~Guard() { marker(100 + level); }
};

__attribute__((noinline)) int thrower(int depth) {
    Guard guard(depth);
    if (depth == 0) throw std::runtime_error("deep");
    return thrower(depth - 1) + 1;
}

int main() {
    int caught = 0;
    for (int round = 0; round < 3; round++) {
        try {
            thrower(4);
        } catch (const std::exception &error) {
            marker(1);
            caught++;
        }
    }
    std::printf("caught %d\n", caught);
    return 0;
}
