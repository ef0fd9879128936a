#!/usr/bin/env python3
"""Writes the seed corpus of test/fuzz (test/fuzz/corpus/<parser>/): for each parser a few
small valid files (ok_*, which its reader must accept: run_fuzz.sh checks) and near-valid
ones (truncated, one field wrong), from which the fuzzer mutates. The checkpoint seeds come
from the harness itself (FUZZ_MAKE_SEED=DIR build/fuzz/fuzz_checkpoint writes a state file
in the engine's own layout: ok_stage3, cut and edited by hand for the others). Findings are
committed next to them by name. Run from the repository root: python3 test/fuzz/make_corpus.py"""
import os
import struct

root = "test/fuzz/corpus"


def put(parser, name, data):
    os.makedirs(os.path.join(root, parser), exist_ok=True)
    with open(os.path.join(root, parser, name), "wb") as f:
        f.write(data)


def header(ints, kind="i"):
    return struct.pack("<256" + kind, *(list(ints) + [0] * (256 - len(ints))))


# model: GPT-2 with max_seq_len T, vocab V padded to Vp, L layers, C channels: the 16
# kinds' sizes add up to Vp*C + T*C + L*(12*C*C + 13*C) + 2*C
def model(version, T, V, L, NH, C, Vp):
    n = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    values = [((i * 37) % 101 - 50) / 64.0 for i in range(n)]
    if version == 3:
        body = struct.pack("<%df" % n, *values)
    else:  # bf16: the top half of each fp32
        body = b"".join(struct.pack("<f", v)[2:] for v in values)
    return header([20240326, version, T, V, L, NH, C, Vp]) + body


put("model", "ok_fp32_c1", model(3, 8, 25, 1, 1, 1, 25))
put("model", "ok_bf16_c2_l2", model(5, 4, 5, 2, 2, 2, 8))
put("model", "ok_fp32_c4_nh2", model(3, 4, 3, 1, 2, 4, 4))
put("model", "truncated", model(3, 8, 25, 1, 1, 1, 25)[:-4])
put("model", "bad_version", model(4, 8, 25, 1, 1, 1, 25))
put("model", "header_only", header([20240326, 3, 8, 25, 1, 1, 1, 25]))


# token shard: magic 20240520, version 1, count, then uint16 tokens
def shard(tokens, count=None):
    n = len(tokens) if count is None else count
    return header([20240520, 1, n]) + struct.pack("<%dH" % len(tokens), *tokens)


put("shard", "ok_13_tokens", shard([(i * 7919) % 65536 for i in range(13)]))
put("shard", "ok_40_tokens", shard([(i * 31) % 50257 for i in range(40)]))
put("shard", "count_too_big", shard(list(range(20)), count=21))
put("shard", "too_few_tokens", shard(list(range(12))))


# tokenizer: magic 20240328, version 2, vocab size, eot; then a length byte and the bytes
def tokenizer(tokens, eot, vocab=None):
    body = b"".join(bytes([len(t)]) + t for t in tokens)
    return header([20240328, 2, len(tokens) if vocab is None else vocab, eot], "I") + body


toks = [b"a", b"b", b"\x00", b" the", b"<|endoftext|>"]
put("tokenizer", "ok_five", tokenizer(toks, 4))
put("tokenizer", "ok_bytes_256", tokenizer([bytes([i]) for i in range(256)], 255))
put("tokenizer", "vocab_too_big", tokenizer(toks, 4, vocab=6))
put("tokenizer", "trailing", tokenizer(toks, 4) + b"x")

# DeepSpeed configs: the keys the trainer reads (docs/USAGE.md) and a few it warns about
put("ds_config", "ok_stage3.json", b"""{
  "train_micro_batch_size_per_gpu": 12, "gradient_accumulation_steps": 1, "train_batch_size": 24,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "gradient_clipping": 1.0, "bf16": {"enabled": true}, "communication_data_type": "fp32",
  "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 0,
                        "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                        "overlap_comm": true, "contiguous_gradients": true, "reduce_bucket_size": 5e8,
                        "stage3_frobnicate": 1},
  "wall_clock_breakdown": false
}
""")
put("ds_config", "ok_nvme.json", b"""{"zero_optimization": {"stage": 3, "sub_group_size": 2048,
  "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/nvme", "buffer_count": 2, "pipeline_read": true, "pipeline_write": true},
  "offload_param": {"device": "cpu", "pin_memory": true}}}
""")
put("ds_config", "ok_stage1.json", b'{"zero_optimization": {"stage": 1, "reduce_scatter": true, "allgather_bucket_size": 2e8}, "communication_data_type": null}\n')
put("ds_config", "duplicate.json", b'{"zero_optimization": {"stage": 1, "stage": 2}}\n')
put("ds_config", "malformed.json", b'{"zero_optimization": {"stage": 3,\n')
