#!/usr/bin/env bash
# Exactness test of ./tokenize against the independent Python reference
# (test/e2e/ref_bpe.py): both encode the same texts and the shards must be identical
# byte for byte. The same for llm.c's tinyshakespeare documents and validation split
# (./tokenize --sections --val-tokens against ref_bpe.py --llmc-split, which follows
# llm.c's dev/data/tinyshakespeare.py step by step), with llm.c's token counts and
# every <|endoftext|> checked in its place; --shards --jsonl against ref_bpe.py
# --fineweb-shards (llm.c's fineweb.py), at 1 and 2 threads. Also checks that ./tokenize finds its
# vocabulary from another directory and fails cleanly on bad input.
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
    if ! "$PY" test/e2e/ref_bpe.py "$in" "$tmp/$name.py.bin" >/dev/null 2>"$tmp/$name.py.err"; then
        fail "$name: ref_bpe.py failed: $(tail -n1 "$tmp/$name.py.err")"; return
    fi
    if cmp -s "$tmp/$name.c.bin" "$tmp/$name.py.bin"; then
        local n=$(( ($(stat -c %s "$tmp/$name.c.bin") - 1024) / 2 ))
        pass "$name: identical shards, $n tokens (./tokenize took ${ms} ms)"
    else
        fail "$name: shards differ: $(cmp "$tmp/$name.c.bin" "$tmp/$name.py.bin" 2>&1 | head -n1)"
    fi
}

# llm.c's documents and split of $2 by both implementations, the first $3 tokens to the
# validation shard, compared byte for byte; $1 names the check. Leaves ./tokenize's
# shards in $tmp/$1.val.bin and $tmp/$1.train.bin; returns 1 on a failure.
check_split_same() {
    local name=$1 in=$2 nval=$3 split
    if ! ./tokenize --sections '\n\n' --val-tokens "$nval" "$in" "$tmp/$name.val.bin" "$tmp/$name.train.bin" \
            >/dev/null 2>"$tmp/$name.c.err"; then
        fail "$name: ./tokenize failed: $(head -n1 "$tmp/$name.c.err")"; return 1
    fi
    if ! "$PY" test/e2e/ref_bpe.py --llmc-split "$nval" "$in" "$tmp/$name.py.val.bin" "$tmp/$name.py.train.bin" \
            >/dev/null 2>"$tmp/$name.py.err"; then
        fail "$name: ref_bpe.py failed: $(tail -n1 "$tmp/$name.py.err")"; return 1
    fi
    for split in val train; do
        if ! cmp -s "$tmp/$name.$split.bin" "$tmp/$name.py.$split.bin"; then
            fail "$name: $split shards differ: $(cmp "$tmp/$name.$split.bin" "$tmp/$name.py.$split.bin" 2>&1 | head -n1)"
            return 1
        fi
    done
    pass "$name: identical val and train shards (llm.c's documents, the first $nval tokens to val)"
}

# the shards $tmp/$1.{val,train}.bin of the text $2, against the counts $3 (val) and $4
# (train, or "any"): the headers, and every <|endoftext|> in its place, i.e. the stream
# starts with one and the tokens after each decode to the next "\n\n" section of the
# text with its "\n\n" (none after the last section)
check_documents() {
    local name=$1 text=$2 nval=$3 ntrain=$4 out
    if out=$("$PY" - "$tmp/$name" "$text" "$nval" "$ntrain" 2>&1 <<'PYEOF'
import json, struct, sys
sys.path.insert(0, "test/e2e")
from ref_bpe import byte_alphabet
shards, text_path, nval, ntrain = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def read_shard(path):
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[:3] == (20240520, 1, (len(data) - 1024) // 2), "%s: header %s" % (path, header[:3])
    assert not any(header[3:]), "%s: header ints 3..255 are not all zero" % path
    return list(struct.unpack("<%dH" % header[2], data[1024:]))

val, train = read_shard(shards + ".val.bin"), read_shard(shards + ".train.bin")
assert len(val) == nval and ntrain in ("any", str(len(train))), "val %d, train %d tokens" % (len(val), len(train))
encoder = json.load(open("dev/data/gpt2/encoder.json", encoding="utf-8"))
eot = encoder["<|endoftext|>"]
to_byte = {c: b for b, c in byte_alphabet().items()}
decoder = {i: bytes(to_byte[c] for c in s) for s, i in encoder.items()}
tokens = val + train
assert tokens[0] == eot, "the stream starts with %d, not <|endoftext|>" % tokens[0]
docs = []
for t in tokens:
    if t == eot:
        docs.append(b"")
    else:
        docs[-1] += decoder[t]
sections = open(text_path, "rb").read().split(b"\n\n")
assert len(docs) == len(sections), "%d <|endoftext|> for %d sections" % (len(docs), len(sections))
for i, (doc, section) in enumerate(zip(docs, sections)):
    want = section if i == len(sections) - 1 else section + b"\n\n"
    assert doc == want, "document %d decodes to %r, not %r" % (i, doc[:40], want[:40])
print("%d + %d tokens, %d documents" % (len(val), len(train), len(docs)))
PYEOF
    ); then
        pass "$name: $out, each after its <|endoftext|>"
    else
        fail "$name: $(tail -n1 <<< "$out")"
    fi
}

# expects ./tokenize "$@" to exit non-zero, say something on stderr and leave no
# output; $1 names the check, $2 the output path (or what every output path starts
# with) that must not appear
check_fails() {
    local name=$1 out=$2
    shift 2
    ./tokenize "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    if [ $rc -eq 0 ]; then fail "$name: exit code 0"; return; fi
    if [ ! -s "$tmp/err" ]; then fail "$name: nothing on stderr"; return; fi
    if compgen -G "$out*" >/dev/null; then fail "$name: left $(compgen -G "$out*" | head -n1) behind"; return; fi
    pass "$name: exit $rc, stderr: $(head -n1 "$tmp/err")"
}

if [ ! -x ./tokenize ]; then
    echo "FAIL ./tokenize not found: build it first (run from the repo root)"
    echo "0 passed, 1 failed"
    exit 1
fi

check_same tinyshakespeare dev/data/tinyshakespeare/input.txt
check_same tricky test/e2e/data/tricky.txt

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

# llm.c's tinyshakespeare shards: the counts its dev/data/tinyshakespeare.py prints
# (32,768 and 305,260 tokens), and the ones make data wrote (dev/data/tinyshakespeare.sh)
if check_split_same tinyshakespeare-llmc dev/data/tinyshakespeare/input.txt 32768; then
    check_documents tinyshakespeare-llmc dev/data/tinyshakespeare/input.txt 32768 305260
fi
ts=dev/data/tinyshakespeare/tiny_shakespeare
if [ ! -e ${ts}_val.bin ] && [ ! -e ${ts}_train.bin ]; then
    echo "skip: no ${ts}_{val,train}.bin to check (make data writes them)"
elif cmp -s ${ts}_val.bin "$tmp/tinyshakespeare-llmc.val.bin" && cmp -s ${ts}_train.bin "$tmp/tinyshakespeare-llmc.train.bin"; then
    pass "make data's ${ts}_{val,train}.bin are llm.c's shards"
else
    fail "make data's ${ts}_{val,train}.bin are not llm.c's shards (stale? run make data)"
fi
# the corners of the sections: runs of three and of four newlines, a section of spaces,
# a word right after "\n\n" (encoded whole, that would be "\n" "\n" and the word, not
# "\n\n"), an empty last section (the text ends with "\n\n")
printf 'First\n\nSecond line\n\n\nthird\n\n\n\n  \n\nx y\n\nz\n\n' > "$tmp/sections.txt"
if check_split_same sections "$tmp/sections.txt" 5; then
    check_documents sections "$tmp/sections.txt" 5 any
fi
# a text without the separator is one document
if check_split_same one-section test/e2e/data/tricky.txt 100; then
    check_documents one-section test/e2e/data/tricky.txt 100 any
fi

# the vocabulary is found from another directory, next to the executable
root=$PWD
if (cd /tmp && "$root/tokenize" "$root/test/e2e/data/tricky.txt" "$tmp/elsewhere.bin" >/dev/null 2>"$tmp/elsewhere.err") &&
        ./tokenize test/e2e/data/tricky.txt "$tmp/here.bin" >/dev/null && cmp -s "$tmp/here.bin" "$tmp/elsewhere.bin"; then
    pass "vocabulary found from /tmp: the same shard as from the repo root"
else
    fail "vocabulary not found from /tmp: $(head -n1 "$tmp/elsewhere.err")"
fi
# a copy of the executable with no vocabulary next to it fails and names both places
mkdir -p "$tmp/bin" "$tmp/cwd"
cp ./tokenize "$tmp/bin/tokenize"
(cd "$tmp/cwd" && "$tmp/bin/tokenize" "$root/test/e2e/data/tricky.txt" "$tmp/cwd/out.bin" >/dev/null 2>"$tmp/nowhere.err")
rc=$?
if [ $rc -ne 0 ] && [ ! -e "$tmp/cwd/out.bin" ] && grep -qF "$tmp/cwd/dev/data/gpt2/encoder.json" "$tmp/nowhere.err" &&
        grep -qF "$tmp/bin/dev/data/gpt2/encoder.json" "$tmp/nowhere.err"; then
    pass "no vocabulary anywhere: exit $rc, stderr: $(head -n1 "$tmp/nowhere.err")"
else
    fail "no vocabulary anywhere: exit $rc, stderr: $(head -n1 "$tmp/nowhere.err")"
fi

check_fails "missing input file" "$tmp/missing.bin" "$tmp/no_such_file.txt" "$tmp/missing.bin"
check_fails "unknown flag" "$tmp/flag.bin" --bogus-flag test/e2e/data/tricky.txt "$tmp/flag.bin"
check_fails "wrong argument count" "$tmp/args.bin" test/e2e/data/tricky.txt
check_fails "output dir missing" "$tmp/no_dir/out.bin" test/e2e/data/tricky.txt "$tmp/no_dir/out.bin"
check_fails "missing encoder.json" "$tmp/enc.bin" --encoder "$tmp/nope.json" test/e2e/data/tricky.txt "$tmp/enc.bin"
printf 'ok \xff\xfe bad' > "$tmp/bad_utf8.txt"
check_fails "invalid UTF-8" "$tmp/bad.bin" "$tmp/bad_utf8.txt" "$tmp/bad.bin"
printf 'ok\n\nthen \xff bad' > "$tmp/bad_utf8_late.txt"
check_fails "invalid UTF-8 in a later section" "$tmp/badsec.bin" --sections '\n\n' "$tmp/bad_utf8_late.txt" "$tmp/badsec.bin"
if grep -q "byte offset 9 " "$tmp/err"; then pass "invalid UTF-8 in a later section: the offset is the file's";
else fail "invalid UTF-8 in a later section: the offset is not the file's: $(head -n1 "$tmp/err")"; fi
check_fails "--val-tokens leaves no training tokens" "$tmp/split" --sections '\n\n' --val-tokens 1000000 \
    test/e2e/data/tricky.txt "$tmp/split.val.bin" "$tmp/split.train.bin"
check_fails "--val-tokens 0" "$tmp/split" --val-tokens 0 test/e2e/data/tricky.txt "$tmp/split.val.bin" "$tmp/split.train.bin"
check_fails "--val-tokens not a number" "$tmp/split" --val-tokens 12k test/e2e/data/tricky.txt "$tmp/split.val.bin" "$tmp/split.train.bin"
check_fails "--val-tokens with one output" "$tmp/split" --val-tokens 10 test/e2e/data/tricky.txt "$tmp/split.val.bin"
check_fails "--sections empty" "$tmp/sec.bin" --sections '' test/e2e/data/tricky.txt "$tmp/sec.bin"
check_fails "--sections unknown escape" "$tmp/sec.bin" --sections '\q' test/e2e/data/tricky.txt "$tmp/sec.bin"

# no output replaces an input (the text, the vocabulary: by device and inode, so a hard
# link counts) or the other output; refused before anything is read, the file as it was
# check_kept NAME FILE NEEDLE ARGS...: ./tokenize ARGS fails naming NEEDLE, FILE unchanged
check_kept() {
    local name=$1 file=$2 needle=$3
    shift 3
    local before; before=$(md5sum < "$file")
    ./tokenize "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    if [ $rc -ne 0 ] && grep -qF -- "$needle" "$tmp/err" && [ "$(md5sum < "$file")" = "$before" ] && ! compgen -G "$tmp/*.tmp" > /dev/null; then
        pass "$name: exit $rc, $(head -n1 "$tmp/err"), $(basename "$file") unchanged"
    else
        fail "$name: exit $rc, $(head -n1 "$tmp/err")"
    fi
}
cp test/e2e/data/tricky.txt "$tmp/in.txt"
ln "$tmp/in.txt" "$tmp/in_link.txt"
check_kept "the output is the input" "$tmp/in.txt" "refusing to replace $tmp/in.txt: it is an input of this run (IN.txt)" \
    "$tmp/in.txt" "$tmp/in.txt"
check_kept "the output is a hard link of the input" "$tmp/in.txt" "it is an input of this run (IN.txt), the same file as $tmp/in.txt" \
    "$tmp/in.txt" "$tmp/in_link.txt"
cp dev/data/gpt2/vocab.bpe "$tmp/vocab.bpe"
check_kept "--tokenizer-file over --vocab" "$tmp/vocab.bpe" "it is an input of this run (--vocab)" \
    --vocab "$tmp/vocab.bpe" --tokenizer-file "$tmp/vocab.bpe"
check_fails "VAL.bin and TRAIN.bin the same file" "$tmp/same" --val-tokens 10 "$tmp/in.txt" "$tmp/same.bin" "$tmp/./same.bin"
grep -qF "are the same file" "$tmp/err" && pass "VAL.bin and TRAIN.bin the same file: named so" || fail "VAL = TRAIN: $(head -n1 "$tmp/err")"

# --shards (FineWeb's way): JSON lines of tinyshakespeare's paragraphs and some unicode,
# an empty and an extra-field document, against ref_bpe.py --fineweb-shards (llm.c's
# fineweb.py step by step), shard for shard byte for byte, at 1 and 2 threads and from
# standard input; plain files as documents; the errors name the input and line
$PY - "$tmp/docs.jsonl" <<'EOF'
import json, sys
paras = open("dev/data/tinyshakespeare/input.txt", encoding="utf-8").read().split("\n\n")[:1500]
extra = ["", "caf\u00e9 \U0001F600 na\u00efve\n\n  tabs\tand  spaces   ", "x", open("test/e2e/data/tricky.txt", encoding="utf-8").read()]
with open(sys.argv[1], "w") as f:
    for i, t in enumerate(paras[:700] + extra + paras[700:]):
        f.write(json.dumps({"text": t, "id": i} if i % 3 else {"id": i, "text": t}) + "\n")
EOF
if $PY test/e2e/ref_bpe.py --fineweb-shards 20000 "$tmp/docs.jsonl" "$tmp/ref" > /dev/null 2> "$tmp/ref.err"; then
    nref=$(ls "$tmp"/ref_*.bin | wc -l)
    for how in "1 file" "2 file" "2 stdin"; do
        th=${how% *}; src=${how#* }
        rm -f "$tmp"/fw_*.bin
        if [ "$src" = stdin ]; then OMP_NUM_THREADS=$th ./tokenize --shards "$tmp/fw" --shard-size 2e4 --jsonl - < "$tmp/docs.jsonl" > /dev/null 2> "$tmp/err"
        else OMP_NUM_THREADS=$th ./tokenize --shards "$tmp/fw" --shard-size 2e4 --jsonl "$tmp/docs.jsonl" > /dev/null 2> "$tmp/err"; fi
        same=1
        for f in "$tmp"/ref_*.bin; do cmp -s "$f" "$tmp/fw_${f#$tmp/ref_}" || same=0; done
        [ "$same" = 1 ] && [ "$(ls "$tmp"/fw_*.bin | wc -l)" = "$nref" ] && [ -f "$tmp/fw_val_000000.bin" ] && [ -f "$tmp/fw_train_000001.bin" ] \
            && pass "--shards --jsonl, $th thread(s), from the $src: $nref shards named as fineweb.py's, byte for byte the reference's" \
            || fail "--shards --jsonl, $th thread(s), from the $src: $(head -n1 "$tmp/err") $(ls "$tmp"/fw_*.bin 2>/dev/null | wc -l) shards vs $nref"
    done
else
    fail "ref_bpe.py --fineweb-shards: $(tail -n1 "$tmp/ref.err")"
fi
# plain files, each one document: the same tokens as --sections' single shard would give them
printf 'first document\n' > "$tmp/a.txt"; printf 'second one' > "$tmp/b.txt"
./tokenize --shards "$tmp/pl" --shard-size 100 "$tmp/a.txt" "$tmp/b.txt" > /dev/null 2>&1
./tokenize "$tmp/a.txt" "$tmp/a.bin" > /dev/null 2>&1; ./tokenize "$tmp/b.txt" "$tmp/b.bin" > /dev/null 2>&1
$PY - "$tmp/pl_val_000000.bin" "$tmp/a.bin" "$tmp/b.bin" <<'EOF' && pass "--shards with plain files: each one document after <|endoftext|>" || fail "--shards with plain files"
import struct, sys
def toks(p):
    raw = open(p, "rb").read(); n = struct.unpack_from("<i", raw, 8)[0]; return list(struct.unpack_from(f"<{n}H", raw, 1024))
assert toks(sys.argv[1]) == [50256] + toks(sys.argv[2]) + [50256] + toks(sys.argv[3]), toks(sys.argv[1])
EOF
printf '{"text": "ok"}\n{"txt": "no text"}\n' > "$tmp/bad1.jsonl"; printf '{"text": "ok"}\n{"text": "cut\n' > "$tmp/bad2.jsonl"
check_fails "--jsonl: a line without \"text\"" "$tmp/b1" --shards "$tmp/b1" --jsonl "$tmp/bad1.jsonl"
grep -qF "$tmp/bad1.jsonl line 2: no \"text\" string" "$tmp/err" && pass "--jsonl: the line without \"text\" named" || fail "--jsonl no text: $(head -n1 "$tmp/err")"
check_fails "--jsonl: a line cut short" "$tmp/b2" --shards "$tmp/b2" --jsonl "$tmp/bad2.jsonl"
grep -qF "$tmp/bad2.jsonl line 2: not JSON" "$tmp/err" && pass "--jsonl: the cut line named" || fail "--jsonl cut line: $(head -n1 "$tmp/err")"
check_fails "--shard-size 0" "$tmp/b3" --shards "$tmp/b3" --shard-size 0 "$tmp/a.txt"
check_fails "--shards without an input" "$tmp/b4" --shards "$tmp/b4"
check_fails "--jsonl without --shards" "$tmp/b5" --jsonl "$tmp/a.txt" "$tmp/b5.bin"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
