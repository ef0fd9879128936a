#!/usr/bin/env bash
# Prepares tinyshakespeare with the project's own tokenizer (./tokenize):
#   dev/data/tinyshakespeare/tiny_shakespeare_val.bin    the first 10% of the lines
#   dev/data/tinyshakespeare/tiny_shakespeare_train.bin  the rest
# Both are llm.c token shards (magic 20240520, uint16 GPT-2 tokens).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=dev/data/tinyshakespeare
[ -x ./tokenize ] || { echo "tinyshakespeare.sh: ./tokenize is missing: run make tokenize" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lines=$(wc -l < "$dir/input.txt")
nval=$((lines / 10))
head -n "$nval" "$dir/input.txt" > "$tmp/val.txt"
tail -n +"$((nval + 1))" "$dir/input.txt" > "$tmp/train.txt"
./tokenize "$tmp/val.txt" "$dir/tiny_shakespeare_val.bin"
./tokenize "$tmp/train.txt" "$dir/tiny_shakespeare_train.bin"
