#!/usr/bin/python3
"""
Independent reference for the C tokenizer: GPT-2's byte-level BPE written
straight from its definition, with Python's `regex` module (the engine GPT-2's
own encoder uses) and GPT-2's pattern verbatim.

  /usr/bin/python3 test/e2e/ref_bpe.py [--encoder PATH] [--vocab PATH] IN.txt OUT.bin
  /usr/bin/python3 test/e2e/ref_bpe.py [--encoder PATH] [--vocab PATH] --llmc-split N IN.txt VAL.bin TRAIN.bin
  /usr/bin/python3 test/e2e/ref_bpe.py [--encoder PATH] [--vocab PATH] --fineweb-shards SIZE IN.jsonl PREFIX
  /usr/bin/python3 test/e2e/ref_bpe.py [--encoder PATH] [--vocab PATH] --hellaswag IN.jsonl OUT.bin

writes one llm.c data shard: 256 x int32 little-endian header
([0]=20240520 magic, [1]=1 version, [2]=token count), then uint16 tokens.
The file is read as bytes and decoded as strict UTF-8 (no newline translation).

--llmc-split N follows llm.c's dev/data/tinyshakespeare.py step by step instead
(N = 32768 there): the text is split on "\\n\\n", every piece is a document that
<|endoftext|> precedes, every piece but the last gets its "\\n\\n" back, each piece
is encoded alone; the first N tokens go to VAL.bin, the others to TRAIN.bin.

--fineweb-shards SIZE follows llm.c's dev/data/fineweb.py: every JSON line's "text" is a
document, <|endoftext|> before it; the tokens fill shards of SIZE, a document that does not
fit split, the rest starting the next shard, the last holding what is left; shard i is
PREFIX_val_000000.bin for i = 0, else PREFIX_train_%06d.bin.

--hellaswag follows llm.c's dev/data/hellaswag.py and data_common.write_evalfile: per JSON
line the "ctx" encoded as is, each of the "endings" as " " + ending, the "label"; written
as the eval file (256 x int32 header: 20240522, 1, examples, the longest example's bytes;
then per example the uint16 stream 65535, its bytes, its index, label, endings, then the
context and each ending as a length and its tokens).
"""
import argparse
import json
import os
import struct
import sys


PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_alphabet():
    """byte -> the printable character GPT-2 uses for it in encoder.json / vocab.bpe"""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Reference:
    def __init__(self, encoder_path, vocab_path):
        with open(encoder_path, "r", encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(vocab_path, "r", encoding="utf-8") as f:
            lines = f.read().split("\n")
        # first line is "#version ...", the last piece follows the final newline
        merges = [tuple(line.split()) for line in lines[1:] if line.strip()]
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.alphabet = byte_alphabet()
        import regex  # Debian's python3-regex; `re` lacks \p{L} / \p{N} (imported here: write_evalfile needs none)
        self.pattern = regex.compile(PATTERN)
        self.cache = {}

    def bpe(self, word):
        """word: string over the byte alphabet -> list of symbols after merging"""
        if word in self.cache:
            return self.cache[word]
        symbols = list(word)
        while len(symbols) > 1:
            # lowest-ranked adjacent pair
            best = None
            best_rank = None
            for i in range(len(symbols) - 1):
                r = self.ranks.get((symbols[i], symbols[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best_rank, best = r, (symbols[i], symbols[i + 1])
            if best is None:
                break
            # merge each occurrence of it, scanning left to right
            merged = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    merged.append(best[0] + best[1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        self.cache[word] = symbols
        return symbols

    def encode(self, text):
        ids = []
        for piece in self.pattern.findall(text):
            word = "".join(self.alphabet[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[s] for s in self.bpe(word))
        return ids


def llmc_documents(ref, text):
    """token stream of llm.c's tinyshakespeare procedure (see the top of the file)"""
    eot = ref.encoder["<|endoftext|>"]
    pieces = text.split("\n\n")
    ids = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        ids.append(eot)
        ids.extend(ref.encode(piece if last else piece + "\n\n"))
    return ids


def write_shard(path, ids):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(ids)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(ids), *ids))
    os.replace(tmp, path)


def write_evalfile(path, examples):
    """examples: (label, ctx_ids, [ending_ids, ...]) each"""
    words, longest = [], 0
    for idx, (label, ctx, endings) in enumerate(examples):
        ex = [65535, 0, idx, label, len(endings), len(ctx)] + ctx
        for e in endings:
            ex += [len(e)] + e
        ex[1] = 2 * len(ex)
        longest = max(longest, ex[1])
        words += ex
    header = [0] * 256
    header[0], header[1], header[2], header[3] = 20240522, 1, len(examples), longest
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(words), *words))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default="dev/data/gpt2/encoder.json")
    ap.add_argument("--vocab", default="dev/data/gpt2/vocab.bpe")
    ap.add_argument("--llmc-split", type=int, metavar="N",
                    help="llm.c's tinyshakespeare documents; the first N tokens to VAL.bin")
    ap.add_argument("--fineweb-shards", type=int, metavar="SIZE", help="llm.c's fineweb.py shards of SIZE tokens")
    ap.add_argument("--hellaswag", action="store_true", help="HellaSwag's jsonl into llm.c's eval file")
    ap.add_argument("input")
    ap.add_argument("outputs", nargs="+", metavar="OUT.bin")
    args = ap.parse_args()
    if args.hellaswag:
        ref = Reference(args.encoder, args.vocab)
        examples = []
        with open(args.input, "rb") as f:
            for line in f:
                if line.strip():
                    d = json.loads(line.decode("utf-8"))
                    examples.append((int(d["label"]), ref.encode(d["ctx"]), [ref.encode(" " + e) for e in d["endings"]]))
        write_evalfile(args.outputs[0], examples)
        print("wrote %d examples to %s" % (len(examples), args.outputs[0]))
        return 0
    if args.fineweb_shards is not None:
        ref = Reference(args.encoder, args.vocab)
        ids = []
        with open(args.input, "rb") as f:
            for line in f:
                if line.strip():
                    ids += [ref.encoder["<|endoftext|>"]] + ref.encode(json.loads(line.decode("utf-8"))["text"])
        size = args.fineweb_shards
        for i in range(0, len(ids), size):
            split = "val" if i == 0 else "train"
            path = "%s_%s_%06d.bin" % (args.outputs[0], split, i // size)
            write_shard(path, ids[i:i + size])
            print("wrote %d tokens to %s" % (len(ids[i:i + size]), path))
        return 0
    if len(args.outputs) != (1 if args.llmc_split is None else 2):
        ap.error("expected OUT.bin, or VAL.bin TRAIN.bin with --llmc-split")
    with open(args.input, "rb") as f:
        text = f.read().decode("utf-8")
    ref = Reference(args.encoder, args.vocab)
    if args.llmc_split is None:
        shards = [ref.encode(text)]
    else:
        ids = llmc_documents(ref, text)
        shards = [ids[:args.llmc_split], ids[args.llmc_split:]]
    for path, ids in zip(args.outputs, shards):
        write_shard(path, ids)
        print("wrote %d tokens to %s" % (len(ids), path))


if __name__ == "__main__":
    sys.exit(main())
