#!/usr/bin/env bash
# Exactness test of ./tokenize against the independent Python reference
# (test/ref_bpe.py): both encode the same texts and the shards must be identical
# byte for byte. Also checks that ./tokenize fails cleanly on bad input.
# Run from the repo root after building ./tokenize; builds nothing.
set -u

PY=/usr/bin/python3   # Debian's python, the one with the `regex` module
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

# encodes $2 with both implementations and compares; $1 names the check
check_same() {
    local name=$1 in=$2
    local t0 t1 ms
    t0=$(date +%s%N)
    if ! ./tokenize "$in" "$tmp/$name.c.bin" >/dev/null 2>"$tmp/$name.c.err"; then
        fail "$name: ./tokenize failed: $(head -n1 "$tmp/$name.c.err")"; return
    fi
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    if ! "$PY" test/ref_bpe.py "$in" "$tmp/$name.py.bin" >/dev/null 2>"$tmp/$name.py.err"; then
        fail "$name: ref_bpe.py failed: $(tail -n1 "$tmp/$name.py.err")"; return
    fi
    if cmp -s "$tmp/$name.c.bin" "$tmp/$name.py.bin"; then
        local n=$(( ($(stat -c %s "$tmp/$name.c.bin") - 1024) / 2 ))
        pass "$name: identical shards, $n tokens (./tokenize took ${ms} ms)"
    else
        fail "$name: shards differ: $(cmp "$tmp/$name.c.bin" "$tmp/$name.py.bin" 2>&1 | head -n1)"
    fi
}

# expects ./tokenize "$@" to exit non-zero, say something on stderr and leave no
# output; $1 names the check, $2 the output path that must not appear
check_fails() {
    local name=$1 out=$2
    shift 2
    ./tokenize "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    if [ $rc -eq 0 ]; then fail "$name: exit code 0"; return; fi
    if [ ! -s "$tmp/err" ]; then fail "$name: nothing on stderr"; return; fi
    if [ -e "$out" ] || [ -e "$out.tmp" ]; then fail "$name: left $out or $out.tmp behind"; return; fi
    pass "$name: exit $rc, stderr: $(head -n1 "$tmp/err")"
}

if [ ! -x ./tokenize ]; then
    echo "FAIL ./tokenize not found: build it first (run from the repo root)"
    echo "0 passed, 1 failed"
    exit 1
fi

check_same tinyshakespeare dev/data/tinyshakespeare/input.txt
check_same tricky test/data/tricky.txt

# every Unicode scalar value, in runs mixed with spaces, letters, digits and
# apostrophes, so each character class of the regex is exercised at every code point
"$PY" - "$tmp/allchars.txt" <<'EOF'
import random, sys
random.seed(1234)
cps = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
glue = [" ", "  ", "a", "1", "'s", "\n", " \n", "\t", "x y", "'"]
out = []
for i in range(0, len(cps), 7):
    out.append("".join(chr(c) for c in cps[i:i + 7]))
    out.append(random.choice(glue))
open(sys.argv[1], "w", encoding="utf-8", newline="").write("".join(out))
EOF
check_same allchars "$tmp/allchars.txt"

check_fails "missing input file" "$tmp/missing.bin" "$tmp/no_such_file.txt" "$tmp/missing.bin"
check_fails "unknown flag" "$tmp/flag.bin" --bogus-flag test/data/tricky.txt "$tmp/flag.bin"
check_fails "wrong argument count" "$tmp/args.bin" test/data/tricky.txt
check_fails "output dir missing" "$tmp/no_dir/out.bin" test/data/tricky.txt "$tmp/no_dir/out.bin"
check_fails "missing encoder.json" "$tmp/enc.bin" --encoder "$tmp/nope.json" test/data/tricky.txt "$tmp/enc.bin"
printf 'ok \xff\xfe bad' > "$tmp/bad_utf8.txt"
check_fails "invalid UTF-8" "$tmp/bad.bin" "$tmp/bad_utf8.txt" "$tmp/bad.bin"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
