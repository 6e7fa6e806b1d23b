// Virtual calls and static constructors.  A class hierarchy with pure
// virtuals (Shape -> Polygon -> Rect/Square, Shape -> Circle), every call
// made through a base pointer or reference, and global objects whose
// constructors and destructors print, so the program runs code before main
// (from .init_array) and after it (from exit).  Some virtuals compute in
// doubles, so their frames save VFP registers (vpush/vpop).
#include <cstdio>
#include <memory>
#include <vector>

namespace {

// Constructed before main, in definition order within this file; the
// destructors run after main returns, in reverse order.
struct Announcer {
    const char *name;
    explicit Announcer(const char *n) : name(n) { std::printf("static init: %s\n", name); }
    ~Announcer() { std::printf("static fini: %s\n", name); }
};
Announcer first("first");

struct Shape {
    virtual ~Shape() {}
    virtual double area() const = 0;
    virtual double perimeter() const = 0;
    virtual const char *name() const = 0;
    virtual int corners() const { return 0; }
    // Not virtual itself: calls three virtuals through `this`.
    double score() const { return area() / (perimeter() + 1.0) + corners(); }
};

struct Circle : Shape {
    double r;
    explicit Circle(double r_) : r(r_) {}
    double area() const override { return 3.14159265358979 * r * r; }
    double perimeter() const override { return 2 * 3.14159265358979 * r; }
    const char *name() const override { return "circle"; }
};

struct Polygon : Shape {  // still abstract: area() and name() stay pure
    int n;
    explicit Polygon(int n_) : n(n_) {}
    int corners() const override { return n; }
};

struct Rect : Polygon {
    double w, h;
    Rect(double w_, double h_) : Polygon(4), w(w_), h(h_) {}
    double area() const override { return w * h; }
    double perimeter() const override { return 2 * (w + h); }
    const char *name() const override { return "rect"; }
};

struct Square final : Rect {
    explicit Square(double s) : Rect(s, s) {}
    const char *name() const override { return "square"; }
};

struct Triangle : Polygon {
    double a, b, c;
    Triangle(double a_, double b_, double c_) : Polygon(3), a(a_), b(b_), c(c_) {}
    double perimeter() const override { return a + b + c; }
    double area() const override {  // Heron, with a few Newton steps for sqrt
        double s = perimeter() / 2, q = s * (s - a) * (s - b) * (s - c), x = q > 1 ? q : 1;
        for (int i = 0; i < 20; ++i) x = 0.5 * (x + q / x);
        return x;
    }
    const char *name() const override { return "triangle"; }
};

struct Counter {
    int calls[4] = {0, 0, 0, 0};
    Counter() { std::printf("static init: counter\n"); }
};
Counter counter;
Announcer last("last");

// Takes a reference to the abstract base: the compiler cannot devirtualise.
__attribute__((noinline)) double visit(const Shape &s) {
    counter.calls[s.corners() % 4]++;
    return s.score();
}

}  // namespace

int main() {
    std::puts("main starts");
    std::vector<std::unique_ptr<Shape>> shapes;
    // A deterministic mix of kinds and sizes (a small LCG, no rand()).
    unsigned seed = 12345;
    for (int i = 0; i < 60; ++i) {
        seed = seed * 1103515245u + 12345u;
        double x = 1 + (seed >> 16) % 50, y = 1 + (seed >> 8) % 30;
        switch (i % 4) {
            case 0: shapes.emplace_back(new Circle(x / 3)); break;
            case 1: shapes.emplace_back(new Rect(x, y)); break;
            case 2: shapes.emplace_back(new Square(y)); break;
            default: shapes.emplace_back(new Triangle(x, x, y < 2 * x ? y : x)); break;
        }
    }

    double total = 0;
    for (int pass = 0; pass < 40; ++pass)
        for (const auto &s : shapes) total += visit(*s);
    std::printf("total score %.4f\n", total);
    std::printf("visits by corners mod 4: %d %d %d %d\n", counter.calls[0], counter.calls[1],
                counter.calls[2], counter.calls[3]);

    for (int i = 0; i < 5; ++i) {
        const Shape *s = shapes[i].get();
        std::printf("%-8s area %10.3f perimeter %8.3f corners %d\n", s->name(), s->area(),
                    s->perimeter(), s->corners());
    }
    std::puts("main returns");
    return 0;  // the unique_ptrs delete through virtual destructors here
}
