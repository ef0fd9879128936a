#!/usr/bin/env bash
# GPT-2 (774M) on FineWeb, llm.c's reproduction (karpathy/llm.c scripts/run_gpt2_774M.sh):
# d36 as in llm.c (36 layers, 20 heads, 1280 channels: GPT-2 large), T=1024, 524,288
# tokens per step, AdamW lr 2.5e-4, 700 warmup steps, cosine decay to 0, weight decay 0.1,
# clipping 1.0, 286,102 steps = 150B tokens of FineWeb 100B (1.5 epochs).
#
# Memory on one 80 GB GPU (stage 0 on one GPU, 1 on several):
#   model states 11.53 GiB  (estimator, stage 0: 16 bytes x 774.09M params)
#   activations  52.1 GiB  (B=16, T=1024, -r 0; the trainer's --estimate)
#   total        63.6 GiB  <= 70 GiB (llm.c's B=32 would need 93 GiB even with -r 1):
#                           32 accumulation steps on one GPU, 4 on eight.
# llm.c's -h 1 (HellaSwag) is on when its eval file is there (HELLASWAG in run_common.sh).
# Usage: scripts/run_gpt2_774M.sh [more trainer flags]; env: see scripts/run_common.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"

NAME=gpt2_774M MODEL=d36 T=1024 TOTAL_BATCH=524288 STEPS=286102
LR=2.5e-4 FINAL_LR_FRAC=0.0 WARMUP=700 WEIGHT_DECAY=0.1
DEF_B=16 DEF_RECOMPUTE=0 DEF_STAGE=auto DEF_OFFLOAD_OPT=none DEF_OFFLOAD_PARAM=none
DEF_DATA=dev/data/fineweb100B/fineweb
VAL_EVERY=250 SAMPLE_EVERY=300000 GEN_T=144 CKPT_EVERY=4000
run_main "$@"
