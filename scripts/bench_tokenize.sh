#!/usr/bin/env bash
# ./tokenize --shards against tiktoken (PyPI) on the same text in the same run: MB of text
# and tokens per second, and their ratio. Not a test: it prints measured figures. The goal is
# a ratio above 1.
#   usage: scripts/bench_tokenize.sh [DIR]     (DIR: where the text and shards go; a temporary one)
#   env:   BENCH_MB (64): the text, JSON lines of tinyshakespeare's paragraphs repeated to
#          about that many MB; BENCH_THREADS (every core): ./tokenize's OpenMP threads and
#          tiktoken's encode_ordinary_batch's; BENCH_VENV (build/bench_venv): where tiktoken
#          is installed with pip if it is missing
# tiktoken is built from this repository's GPT-2 vocabulary (dev/data/gpt2: encoder.json,
# vocab.bpe), not downloaded: the machine need reach only PyPI. Both encode every document
# on its own, with <|endoftext|> before it. The two token streams are compared: they must be
# the same, or the figures mean nothing. The text repeats tinyshakespeare's paragraphs, so
# ./tokenize's cache of pre-tokens hits more often than on fresh web text would: the ratio
# on FineWeb itself is not what this measures.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-}
if [ -z "$dir" ]; then dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT; fi
[ -d "$dir" ] || { echo "error: $dir is not a directory" >&2; exit 1; }
mb=${BENCH_MB:-64}
threads=${BENCH_THREADS:-$(nproc)}
venv=${BENCH_VENV:-build/bench_venv}
make -s tokenize data > /dev/null
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import tiktoken" 2> /dev/null; then
    if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q tiktoken; }; then
        echo "error: could not install tiktoken into $venv (pip from PyPI)" >&2; exit 1
    fi
fi
"$venv/bin/python" - "$dir/text.jsonl" "$mb" <<'PY'
import json, sys
paras = open("dev/data/tinyshakespeare/input.txt", encoding="utf-8").read().split("\n\n")
out, want, n = open(sys.argv[1], "w"), float(sys.argv[2]) * 1e6, 0
while n < want:
    for i, p in enumerate(paras):
        line = json.dumps({"text": p + f" ({n})"}) + "\n"   # (a number: not the same text over and over)
        out.write(line); n += len(line)
PY
echo "bench_tokenize: $(du -m "$dir/text.jsonl" | cut -f1) MB of JSON lines, $threads threads, $(nproc) cores"
OMP_NUM_THREADS=$threads ./tokenize --shards "$dir/ours" --jsonl "$dir/text.jsonl" > "$dir/ours.log"
ours=$(grep '^tokenize:' "$dir/ours.log")
echo "ours:     $ours"
"$venv/bin/python" - "$dir/text.jsonl" "$threads" "$dir" "$ours" <<'PY'
import glob, json, re, struct, sys, time
import tiktoken
# GPT-2's ranks from the repository's files: each token's bytes, GPT-2's byte alphabet undone
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}
encoder = json.load(open("dev/data/gpt2/encoder.json", encoding="utf-8"))
ranks = {bytes(byte_of[ch] for ch in tok): i for tok, i in encoder.items() if tok != "<|endoftext|>"}
enc = tiktoken.Encoding(name="gpt2_local", pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                        mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
path, threads, d, ours = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t0 = time.perf_counter()
with open(path, encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f]
docs = enc.encode_ordinary_batch(texts, num_threads=threads)
secs = time.perf_counter() - t0
nbytes = sum(len(t.encode("utf-8")) for t in texts)
ntok = sum(len(x) + 1 for x in docs)
print(f"tiktoken: {ntok} tokens from {nbytes / 1e6:.1f} MB of text in {secs:.2f} s on {threads} threads: "
      f"{nbytes / 1e6 / secs:.2f} MB/s, {ntok / secs:.0f} tokens/s (reading and parsing the JSON included, writing no shard)")
# the same tokens?
mine = []
for p in sorted(glob.glob(f"{d}/ours_val_*.bin")) + sorted(glob.glob(f"{d}/ours_train_*.bin")):
    raw = open(p, "rb").read()
    n = struct.unpack_from("<i", raw, 8)[0]
    mine.extend(struct.unpack_from(f"<{n}H", raw, 1024))
theirs = []
for x in docs:
    theirs.append(50256); theirs.extend(x)
if mine != theirs:
    first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
    print(f"error: the token streams differ (ours {len(mine)} tokens, tiktoken's {len(theirs)}; first at {first})", file=sys.stderr)
    sys.exit(1)
m = re.search(r"([0-9.]+) MB/s, ([0-9]+) tokens/s", ours)
print(f"tokenize: same {len(mine)} tokens; ours / tiktoken: {float(m.group(1)) / (nbytes / 1e6 / secs):.2f}x in MB/s")
PY
