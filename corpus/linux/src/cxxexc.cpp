// C++ exceptions, for unwinders that must agree with the EHABI personality
// routine: throws that cross several frames at different depths, a rethrow,
// a catch by base class, destructors that run during unwinding, a throw from
// inside libstdc++ (vector::at), noexcept functions, and one exception that
// only main catches.  Output is counts and codes only, so it is the same on
// every run and with every compiler.
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <vector>

namespace {

int live_guards;     // Guards constructed and not yet destroyed
int unwound_guards;  // Guard destructors that ran while an exception was in flight

// A local with a destructor gives each frame a cleanup landing pad, so the
// unwinder has to stop in it instead of only passing through.
struct Guard {
    Guard() { ++live_guards; }
    ~Guard() {
        --live_guards;
        if (std::uncaught_exceptions() > 0) ++unwound_guards;
    }
};

struct Failure {  // base class of our own exceptions
    int code;
    explicit Failure(int c) : code(c) {}
    virtual ~Failure() {}
    virtual const char *kind() const { return "failure"; }
};

struct DepthFailure : Failure {
    int depth;
    DepthFailure(int c, int d) : Failure(c), depth(d) {}
    const char *kind() const override { return "depth"; }
};

// Recurse down to 0, one Guard per frame, throwing at depth `throw_at`
// (never, when throw_at < 0).  noinline keeps every level a real frame.
__attribute__((noinline)) int descend(int depth, int throw_at) {
    Guard g;
    if (depth == throw_at) throw DepthFailure(depth * 7 + 1, depth);
    if (depth == 0) return 1;
    return descend(depth - 1, throw_at) + 1;
}

// Catches, counts, and rethrows the same object with `throw;`.
__attribute__((noinline)) int relay(int depth, int throw_at, int &relayed) {
    try {
        return descend(depth, throw_at);
    } catch (Failure &) {
        ++relayed;
        throw;
    }
}

// The exception comes out of libstdc++ (std::__throw_out_of_range_fmt).
__attribute__((noinline)) int fetch(const std::vector<int> &v, unsigned i) {
    Guard g;
    return v.at(i);
}

// noexcept with its own try/catch: nothing may escape, so the compilers
// attach a terminate handler (or .cantunwind) to it.
__attribute__((noinline)) int checked_div(int a, int b) noexcept {
    try {
        if (b == 0) throw std::domain_error("division by zero");
        return a / b;
    } catch (const std::exception &) {
        return -1;
    }
}

// A noexcept leaf, called on the way down between throws.
__attribute__((noinline)) int mix(int x) noexcept { return (x * 2654435761u) >> 20; }

}  // namespace

int main() {
    int caught = 0, relayed = 0, code_sum = 0, depth_sum = 0, returned = 0;

    // Throws from every depth 0..11 of a 12-frame recursion, two rounds;
    // every third one goes through relay() and is rethrown.
    for (int round = 0; round < 2; ++round) {
        for (int at = 0; at < 12; ++at) {
            try {
                if (at % 3 == 0)
                    relay(11, at, relayed);
                else
                    descend(11, at);
            } catch (Failure &f) {  // catch by base class
                ++caught;
                code_sum += f.code;
                if (DepthFailure *d = dynamic_cast<DepthFailure *>(&f)) depth_sum += d->depth;
            }
        }
        returned += descend(11, -1);  // no throw: the normal return path
    }
    std::printf("depth throws: caught %d relayed %d code_sum %d depth_sum %d returned %d\n",
                caught, relayed, code_sum, depth_sum, returned);

    // Out-of-range vector::at, caught as std::exception.
    std::vector<int> v{3, 1, 4, 1, 5, 9, 2, 6};
    int ok = 0, oor = 0;
    for (unsigned i = 0; i < 16; ++i) {
        try {
            ok += fetch(v, i);
        } catch (const std::exception &e) {
            ++oor;
        }
    }
    std::printf("vector::at: sum %d out_of_range %d\n", ok, oor);

    int divs = 0;
    for (int b = -3; b <= 3; ++b) divs += checked_div(100 + mix(b) % 7, b);
    std::printf("noexcept: checked_div sum %d\n", divs);

    std::printf("guards: live %d unwound %d\n", live_guards, unwound_guards);

    // The last exception is only caught here, in main.
    try {
        relay(20, 17, relayed);
        std::puts("not reached");
    } catch (Failure &f) {
        std::printf("main caught %s code %d, relayed %d, live guards %d\n",
                    f.kind(), f.code, relayed, live_guards);
    }
    return 0;
}
