#!/usr/bin/env bash
# Prepares tinyshakespeare with the project's own tokenizer (./tokenize), exactly as
# llm.c's dev/data/tinyshakespeare.py does, so that loss figures compare with llm.c's
# own runs:
#   - the text is char-rnn's tinyshakespeare input.txt (1,115,394 bytes), the file
#     llm.c downloads;
#   - it is cut after every blank line ("\n\n") into 7,222 sections, one document each
#     (a speech, mostly): <|endoftext|> (50256) comes before every section, and every
#     section but the last keeps its "\n\n" at its end (llm.c's kept quirk), each
#     section encoded on its own (./tokenize --sections);
#   - the first 32,768 tokens are the validation split, the rest the training split
#     (./tokenize --val-tokens):
#   dev/data/tinyshakespeare/tiny_shakespeare_val.bin     32,768 tokens  (66,560 bytes)
#   dev/data/tinyshakespeare/tiny_shakespeare_train.bin  305,260 tokens (611,544 bytes)
# The counts are llm.c's; test/e2e/test_tokenizer_exact.sh checks them and checks both
# shards byte for byte against the same procedure run with the Python reference.
# Both are llm.c token shards (magic 20240520, version 1, uint16 GPT-2 tokens).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=dev/data/tinyshakespeare
[ -x ./tokenize ] || { echo "tinyshakespeare.sh: ./tokenize is missing: run make tokenize" >&2; exit 1; }
./tokenize --sections '\n\n' --val-tokens 32768 "$dir/input.txt" \
    "$dir/tiny_shakespeare_val.bin" "$dir/tiny_shakespeare_train.bin"
