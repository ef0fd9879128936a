#!/usr/bin/env bash
# GPT-2 (124M) on FineWeb, llm.c's reproduction (karpathy/llm.c scripts/run_gpt2_124M.sh):
# d12 (12 layers, 12 heads, 768 channels), T=1024, 524,288 tokens per step (2^19),
# AdamW lr 6e-4 with 700 warmup steps and a cosine decay to 0 (-q 0.0), weight decay 0.1,
# gradient clipping 1.0, 18,865 steps = 9.9B tokens (one epoch of FineWeb 10B;
# make the shards with llm.c's `python dev/data/fineweb.py --version 10B`).
#
# Memory on one 80 GB GPU (NGPU=1: stage 0, as stage 1 with one rank partitions nothing;
# on several GPUs stage 1, llm.c's -z 1):
#   model states  1.85 GiB  (./train_gpt2_zero3_cpu -e d12 --estimate 1:1, stage 0)
#   activations  48.7 GiB  (B=64, T=1024, -r 0; the trainer's --estimate, of
#                           which 19 GiB are the 12 layers' bf16 attention matrices)
#   total        50.6 GiB  <= 70 GiB: llm.c's B=64 fits without recompute; 8 accumulation
#                           steps on one GPU, 1 on eight.
# llm.c's -h 1 (HellaSwag) is on when its eval file is there (HELLASWAG in run_common.sh).
# Usage: scripts/run_gpt2_124M.sh [more trainer flags]; env: see scripts/run_common.sh
# (NGPU, TRAIN_DATA, VAL_DATA, OUT_DIR, EXTRA_ARGS, DRY_RUN=1, ...).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"

NAME=gpt2_124M MODEL=d12 T=1024 TOTAL_BATCH=524288 STEPS=18865
LR=6e-4 FINAL_LR_FRAC=0.0 WARMUP=700 WEIGHT_DECAY=0.1
DEF_B=64 DEF_RECOMPUTE=0 DEF_STAGE=auto DEF_OFFLOAD_OPT=none DEF_OFFLOAD_PARAM=none
DEF_DATA=dev/data/fineweb10B/fineweb
VAL_EVERY=250 SAMPLE_EVERY=20000 GEN_T=144 CKPT_EVERY=5000
run_main "$@"
