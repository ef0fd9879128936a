#!/usr/bin/env bash
# GPT-2 (350M) on FineWeb, llm.c's reproduction (karpathy/llm.c scripts/run_gpt2_350M.sh):
# d24 as in llm.c (24 layers, 16 heads, 1024 channels: GPT-2 medium), T=1024, 524,288
# tokens per step, AdamW lr 3e-4, 700 warmup steps, cosine decay to 0, weight decay 0.1,
# clipping 1.0, 60,000 steps = 31.5B tokens of FineWeb 100B
# (llm.c's `python dev/data/fineweb.py --version 100B`).
#
# Memory on one 80 GB GPU (stage 0 on one GPU, 1 on several):
#   model states  5.29 GiB  (estimator, stage 0: 16 bytes x 354.87M params)
#   activations  57.7 GiB  (B=32, T=1024, -r 0; the trainer's --estimate)
#   total        63.0 GiB  <= 70 GiB. llm.c's B=64 would need 115 GiB of activations
#                           here (its cuDNN attention keeps no T x T matrices; ours does),
#                           so B=32 with 16 accumulation steps on one GPU (2 on eight).
# llm.c's -h 1 (HellaSwag) is on when its eval file is there (HELLASWAG in run_common.sh).
# Usage: scripts/run_gpt2_350M.sh [more trainer flags]; env: see scripts/run_common.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"

NAME=gpt2_350M MODEL=d24 T=1024 TOTAL_BATCH=524288 STEPS=60000
LR=3e-4 FINAL_LR_FRAC=0.0 WARMUP=700 WEIGHT_DECAY=0.1
DEF_B=32 DEF_RECOMPUTE=0 DEF_STAGE=auto DEF_OFFLOAD_OPT=none DEF_OFFLOAD_PARAM=none
DEF_DATA=dev/data/fineweb100B/fineweb
VAL_EVERY=250 SAMPLE_EVERY=100000 GEN_T=144 CKPT_EVERY=2000
run_main "$@"
