#!/usr/bin/env bash
# The layering rule (docs/ARCHITECTURE.md), checked on the includes themselves:
#   common/  below everything: system calls only (opening files without blocking, locks);
#            includes nothing of the project
#   zero3/   the ZeRO engine: includes nothing but zero3/ and common/ (and system and
#            library headers)
#   llmc/    the kernels, the CPU ops, the model and the trainer glue: the model's code
#            (ops, kernels, gpt2.h, data, tokenizer) includes nothing of zero3/; only the
#            glue that drives an engine does (args.h: the ZeRO flags, trainer.h and
#            checkpoint.h: the engine, manifest.h: the bound on ranks, cuda_common.cuh:
#            the compute precision floatX, op_timer.cuh: the engine's clock)
#   dev/     tools and benchmarks over both; the trainers at the top over both
# so no folder reaches back up, and none is in a circle with another. Ends with
# "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # cd to the repo root; ok/bad/finish

# "FILE INCLUDED" for every quoted include of the project's files
includes() { grep -H -o '^#include "[^"]*"' "$@" | sed -E 's/:#include "(.*)"$/ \1/'; }

bad_common=$(includes common/*.h common/*.c | awk '$2 !~ /^common\//')
if [ -z "$bad_common" ]; then ok "common/ includes nothing of the project"; else bad "common/ reaches up: $bad_common"; fi

bad_zero3=$(includes zero3/*.h zero3/*.c zero3/*.cu zero3/*.cuh | awk '$2 !~ /^(zero3|common)\//')
if [ -z "$bad_zero3" ]; then ok "zero3/ includes only zero3/ and common/"; else bad "zero3/ reaches outside itself: $bad_zero3"; fi

glue="llmc/args.h llmc/trainer.h llmc/trainer_proc.h llmc/trainer_setup.h llmc/trainer_report.h llmc/trainer_checkpoint.h llmc/tensor_log.h llmc/checkpoint.h llmc/manifest.h llmc/cuda_common.cuh llmc/op_timer.cuh"
# (a glue header's .c is glue too: the includes its implementation needs live there)
glue="$glue $(for h in $glue; do case "$h" in *.h) [ -f "${h%.h}.c" ] && echo "${h%.h}.c" ;; esac; done | tr '\n' ' ')"
bad_llmc=$(includes llmc/*.h llmc/*.c llmc/*.cuh | while read -r f inc; do
    case "$inc" in zero3/*) case " $glue " in *" $f "*) ;; *) echo "$f -> $inc" ;; esac ;; esac
done)
if [ -z "$bad_llmc" ]; then ok "llmc/'s model and ops include nothing of zero3/ (only the glue: $glue)"
else bad "llmc/ model code includes zero3/: $bad_llmc"; fi

bad_up=$(includes common/*.h llmc/*.h llmc/*.c llmc/*.cuh zero3/*.h zero3/*.cu zero3/*.cuh dev/*.c | awk '$2 ~ /^(train_gpt2_zero3|test\/|dev\/)/')
if [ -z "$bad_up" ]; then ok "no library file includes a trainer, a tool or a test"; else bad "includes reaching up: $bad_up"; fi

# sizes a reader can hold: no file of common/, llmc/ or zero3/ over 800 lines, no C function
# there with a body over 120 (kernels aside); test/e2e/code_sizes.py names each one over
if sizes=$($PY test/e2e/code_sizes.py common llmc zero3 2>&1); then ok "no library file over 800 lines, no C function over 120"
else bad "sizes: $(echo "$sizes" | tr '\n' ';')"; fi

# the folder graph, for the record (and the check that it has no cycle: zero3 -> llmc
# never appears, nor anything out of common/, which the first checks already hold)
echo "folder include graph:"
includes train_gpt2_zero3.c train_gpt2_zero3.cu common/*.h llmc/*.h llmc/*.cuh zero3/*.h zero3/*.cu zero3/*.cuh dev/*.c | awk '
    { split($1, a, "/"); from = (a[2] == "" ? "trainers" : a[1]); split($2, b, "/"); to = b[1];
      if (from ~ /^train_gpt2/) from = "trainers"; if (from != to) edge[from " -> " to] = 1 }
    END { for (e in edge) print "  " e }' | sort
finish
