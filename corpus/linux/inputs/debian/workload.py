"""python3.11 -I -S -B workload.py 40: the interpreter on its own
(builtins and sys only, nothing read from the disk but this file): a
recursive-descent parser and evaluator whose errors are exceptions raised
deep in the recursion, generators, classes, a sieve, sorting, formatting.
Prints only what it computes (no time, no paths, no randomness)."""
import sys


class ParseError(Exception):
    pass


class Num:
    def __init__(self, value):
        self.value = value

    def eval(self, env):
        return self.value


class Var:
    def __init__(self, name):
        self.name = name

    def eval(self, env):
        if self.name not in env:
            raise NameError(f"unbound {self.name}")
        return env[self.name]


class BinOp:
    OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b,
           "*": lambda a, b: a * b, "/": lambda a, b: a // b,
           "%": lambda a, b: a % b, "^": lambda a, b: a ** b}

    def __init__(self, op, left, right):
        self.op, self.left, self.right = op, left, right

    def eval(self, env):
        return self.OPS[self.op](self.left.eval(env), self.right.eval(env))


def tokens(text):
    i = 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c.isdigit():
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            yield ("num", int(text[i:j]))
            i = j
        elif c.isalpha():
            j = i
            while j < len(text) and text[j].isalnum():
                j += 1
            yield ("name", text[i:j])
            i = j
        elif c in "+-*/%^()":
            yield ("op", c)
            i += 1
        else:
            raise ParseError(f"bad character {c!r} at {i}")


class Parser:
    LEVELS = [("+", "-"), ("*", "/", "%"), ("^",)]

    def __init__(self, text):
        self.toks = list(tokens(text)) + [("end", None)]
        self.pos = 0

    def peek(self):
        return self.toks[self.pos]

    def take(self):
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def parse(self):
        node = self.level(0)
        if self.peek()[0] != "end":
            raise ParseError(f"trailing {self.peek()[1]!r}")
        return node

    def level(self, n):
        if n == len(self.LEVELS):
            return self.atom()
        node = self.level(n + 1)
        while self.peek()[0] == "op" and self.peek()[1] in self.LEVELS[n]:
            op = self.take()[1]
            node = BinOp(op, node, self.level(n + 1) if op != "^" else self.level(n))
        return node

    def atom(self):
        kind, value = self.take()
        if kind == "num":
            return Num(value)
        if kind == "name":
            return Var(value)
        if (kind, value) == ("op", "("):
            node = self.level(0)
            if self.take() != ("op", ")"):
                raise ParseError("missing )")
            return node
        raise ParseError(f"unexpected {value!r}")


def evaluate(text, env):
    try:
        return Parser(text).parse().eval(env)
    except ParseError as e:
        return f"parse error: {e}"
    except ZeroDivisionError:
        return "division by zero"
    except (NameError, RecursionError) as e:
        return f"{type(e).__name__}: {e}"


def nested(depth):
    return "(" * depth + "1" + "+1)" * depth


def primes(limit):
    sieve = bytearray([1]) * (limit + 1)
    sieve[0:2] = b"\0\0"
    for p in range(2, int(limit ** 0.5) + 1):
        if sieve[p]:
            sieve[p * p::p] = bytes(len(range(p * p, limit + 1, p)))
    return [i for i, v in enumerate(sieve) if v]


def collatz(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
        yield n


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 40
    env = {"x": 7, "y": 12, "n": n}
    for expr in ["1 + 2 * 3", "(1 + 2) * 3", "2 ^ 3 ^ 2", "x * y - n % 7",
                 "2 ^ 100 / 3", "(x + y) * (x - y) / (n - 40)", "z + 1",
                 "3 + * 4", "(1 + 2", "12 $ 4", nested(60), nested(400)]:
        shown = expr if len(expr) < 40 else expr[:20] + "..." + expr[-10:]
        print(f"{shown:<36} = {evaluate(expr, env)}")
    ps = primes(n * 250)
    print(f"{len(ps)} primes below {n * 250}; last five {ps[-5:]}")
    twins = [(p, q) for p, q in zip(ps, ps[1:]) if q - p == 2]
    print(f"{len(twins)} twin pairs; largest {twins[-1]}")
    lengths = {k: sum(1 for _ in collatz(k)) for k in range(1, n * 25)}
    best = sorted(lengths.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    print("longest Collatz runs:", ", ".join(f"{k}:{v}" for k, v in best))
    words = "the quick brown fox jumps over the lazy dog and the cat".split()
    freq = {}
    for w in words:
        freq[w] = freq.get(w, 0) + 1
    print(sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:4])
    print(f"{2 ** n:,} {hex(3 ** n)} {sum(ps) / len(ps):.6f} {'-'.join(map(str, range(n % 10)))}")
    table = [[i * j for j in range(1, 6)] for i in range(1, 6)]
    print("\n".join(" ".join(f"{v:3d}" for v in row) for row in table))
    return 0 if len(ps) > 100 else 1


sys.exit(main(sys.argv))
