"""The English-like text of debian.sh's make_text, of any size (its first
40 KB are corpus/linux/inputs/debian/text.txt): the same Park-Miller
generator and words, line-wrapped at 72 columns, a blank line every seven
sentences. For long-run.sh's input, made at run time, never committed.

    python long_text.py BYTES > FILE
"""

from __future__ import annotations

import sys

WORDS = ("the of and to in is was that for on with as by at from it his an were are "
         "which this be or has had not but one all their they there been its new "
         "river stone winter harbour engine signal market letter garden window "
         "morning distance question village station pattern frame stack return "
         "program compiler register table unwind instruction memory value function "
         "simple quiet early narrow heavy bright careful common ordinary northern "
         "carried opened measured followed crossed noticed gathered answered "
         "slowly often again nearly always rather almost perhaps").split()


def text(size: int) -> str:
    x, out, written, line, sentences = 12345, [], 0, "", 0
    while written < size:
        x = x * 16807 % 2147483647
        words = []
        for i in range(6 + x % 14):
            x = x * 16807 % 2147483647
            word = WORDS[x % len(WORDS)]
            if i == 0:
                word = word[0].upper() + word[1:]
            if x % 23 == 0:
                word += ","
            if x % 97 == 0:
                x = x * 16807 % 2147483647
                word += f" {x % 2000}"
            words.append(word)
        sentences += 1
        for token in (" ".join(words) + ".").split(" "):
            if len(line) + 1 + len(token) > 72:
                out.append(line)
                written += len(line) + 1
                line = token
            else:
                line = f"{line} {token}" if line else token
        if sentences % 7 == 0:
            out += [line, ""]
            written += len(line) + 2
            line = ""
    if line:
        out.append(line)
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(text(int(sys.argv[1])))
