// Templates from the standard library: std::string building, std::map
// counting, std::vector of pairs, and std::sort with lambda comparators.
// Most of the code that runs is instantiated templates (inlined or not,
// depending on the compiler and -O level), which is the point.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

// Deterministic pseudo-random numbers (no rand(): its sequence is libc's).
struct Lcg {
    unsigned state;
    unsigned next() { return state = state * 1664525u + 1013904223u; }
};

// A made-up word from syllables, 1..3 syllables long.
std::string make_word(Lcg &g) {
    static const char *const syl[] = {"ka", "lo", "mi", "ne", "ru", "ta", "so", "vi"};
    std::string w;
    int n = 1 + (g.next() >> 28) % 3;
    for (int i = 0; i < n; ++i) w += syl[(g.next() >> 24) % 8];
    return w;
}

template <typename T>
T checksum(const std::vector<T> &v) {
    T sum{};
    for (std::size_t i = 0; i < v.size(); ++i) sum = sum * 31 + v[i];
    return sum;
}

}  // namespace

int main() {
    Lcg g{2024};
    std::map<std::string, int> counts;
    for (int i = 0; i < 300; ++i) ++counts[make_word(g)];

    // Most frequent first, ties by length then alphabetically.
    std::vector<std::pair<std::string, int>> byfreq(counts.begin(), counts.end());
    std::sort(byfreq.begin(), byfreq.end(), [](const auto &a, const auto &b) {
        if (a.second != b.second) return a.second > b.second;
        if (a.first.size() != b.first.size()) return a.first.size() < b.first.size();
        return a.first < b.first;
    });
    std::printf("%zu distinct words\n", counts.size());
    for (std::size_t i = 0; i < 8 && i < byfreq.size(); ++i)
        std::printf("%2zu. %-8s %d\n", i + 1, byfreq[i].first.c_str(), byfreq[i].second);

    // Integers sorted by a comparator that captures state: descending by
    // value mod `m`, then ascending.
    std::vector<unsigned> nums;
    for (int i = 0; i < 300; ++i) nums.push_back(g.next() >> 20);
    unsigned m = 90 + counts.size() % 10;  // a run-time value, so the lambda must capture it
    std::sort(nums.begin(), nums.end(), [m](unsigned a, unsigned b) {
        return a % m != b % m ? a % m > b % m : a < b;
    });
    std::printf("sorted %zu numbers: first %u last %u checksum %u\n", nums.size(), nums.front(),
                nums.back(), checksum(nums));

    // Joined string of the longest words, built by appending.
    std::vector<std::string> longest;
    for (const auto &kv : counts)
        if (kv.first.size() == 6) longest.push_back(kv.first);
    std::sort(longest.begin(), longest.end(),
              [](const std::string &a, const std::string &b) { return a > b; });
    std::string joined;
    for (std::size_t i = 0; i < longest.size() && i < 6; ++i) {
        if (!joined.empty()) joined += ", ";
        joined += longest[i];
    }
    std::printf("%zu six-letter words, last six: %s\n", longest.size(), joined.c_str());
    return 0;
}
