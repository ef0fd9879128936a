"""Sizes a reader can hold (the guide's and issue 25's rule): prints each file of the
library folders over MAX_FILE lines, then each function of their C files whose body (the
lines between its opening and closing braces) is over MAX_FUNC lines. CUDA kernels are
left out of the function check (*.cuh), as the rule allows. Exit 1 when anything is over.

  python3 test/e2e/code_sizes.py DIR...      (test/e2e/test_layers.sh: common llmc zero3)
"""
import glob, os, re, sys

MAX_FILE, MAX_FUNC = 800, 120
# a function's first line: at column 0, a name and an opening parenthesis, not a declaration
START = re.compile(r'^[A-Za-z_][^;#]*\(')

def long_functions(path):
    lines = open(path, errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        if START.match(lines[i]) and not lines[i].startswith(("typedef", "struct", "enum")):
            j = i  # the body's opening brace: on the signature's last line, or the next one
            while j < min(i + 6, len(lines)) and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and "{" in lines[j] and not lines[j].rstrip().endswith(";"):
                k = j + 1  # the body ends at the first "}" in column 0
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                if k - j - 1 > MAX_FUNC:
                    yield i + 1, k - j - 1, lines[i].strip()
                i = k
        i += 1

over = 0
for d in sys.argv[1:]:
    for path in sorted(glob.glob(os.path.join(d, "*"))):
        if not path.endswith((".c", ".h", ".cuh", ".cu")):
            continue
        n = sum(1 for _ in open(path, errors="replace"))
        if n > MAX_FILE:
            print("file %s: %d lines (over %d)" % (path, n, MAX_FILE)); over += 1
        if path.endswith((".c", ".h")):
            for line, body, sig in long_functions(path):
                print("function %s:%d: a body of %d lines (over %d): %s" % (path, line, body, MAX_FUNC, sig[:70]))
                over += 1
sys.exit(1 if over else 0)
