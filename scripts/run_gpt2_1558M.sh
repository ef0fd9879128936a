#!/usr/bin/env bash
# GPT-2 (1558M) on FineWeb-Edu, llm.c's reproduction (karpathy/llm.c
# scripts/run_gpt2_1558M.sh): d48 as in llm.c (48 layers, 25 heads, 1600 channels:
# GPT-2 XL), T=1024, 1,048,576 tokens per step (2^20), AdamW lr 6e-4, 700 warmup steps,
# cosine decay to 10% (-q 0.1), weight decay 0.1, clipping 1.0, 32,000 steps = 33.6B
# tokens of FineWeb-Edu 100B (llm.c's `python dev/data/fineweb.py -t edu -v 100B`, or set
# TRAIN_DATA/VAL_DATA).
#
# Memory on one 80 GB GPU (stage 0 on one GPU, 1 on several; no offload needed):
#   model states 23.21 GiB  (estimator, stage 0: 16 bytes x 1557.69M params)
#   activations  42.6 GiB  (B=8, T=1024, -r 0; the trainer's --estimate)
#   total        65.8 GiB  <= 70 GiB (llm.c's B=16 would need 76 GiB even with -r 1):
#                           128 accumulation steps on one GPU, 16 on eight.
#   With OFFLOAD_OPTIMIZER=cpu ZERO_STAGE=2 the states drop to 5.80 GiB (estimator,
#   stage 2 + cpu) and the host holds 23.21 GiB; scripts/bench_gpu.sh compares the two.
# llm.c's -h 1 (HellaSwag) is on when its eval file is there (HELLASWAG in run_common.sh);
# its -ge 1 (GELU fused into the matmul's epilogue) is what the bf16 build always does.
# Usage: scripts/run_gpt2_1558M.sh [more trainer flags]; env: see scripts/run_common.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"

NAME=gpt2_1558M MODEL=d48 T=1024 TOTAL_BATCH=1048576 STEPS=32000
LR=6e-4 FINAL_LR_FRAC=0.1 WARMUP=700 WEIGHT_DECAY=0.1
DEF_B=8 DEF_RECOMPUTE=0 DEF_STAGE=auto DEF_OFFLOAD_OPT=none DEF_OFFLOAD_PARAM=none
DEF_DATA=dev/data/edu_fineweb100B/edu_fineweb
VAL_EVERY=250 SAMPLE_EVERY=300000 GEN_T=384 CKPT_EVERY=2000
run_main "$@"
