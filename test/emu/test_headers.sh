#!/usr/bin/env bash
# The emulator's stand-in headers (test/emu) against the real CUDA, cuBLAS, cuBLASLt, NCCL,
# cuda_bf16, cub and NVTX headers: every enumerator's value, #define'd constant, type name,
# struct member and function signature the stand-ins declare, read from the stand-ins
# themselves (test/emu/check_headers.py says how, and lists the types that differ on purpose).
# Prints PASS/FAIL lines and "N passed, N failed"; "SKIP CUDA headers: <reason>" and
# "0 passed, 0 failed" where nvcc is not installed. About 15 seconds.
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
exec "$PY" test/emu/check_headers.py
