#!/usr/bin/env bash
# bare_machine.sh WORK COMMAND...: runs COMMAND in a mount namespace made to look like the
# GPU machines this project is lent (a bare image: CUDA's libraries only as Python wheels,
# no Open MPI, no OpenMP runtime, no ssh, none of the other libraries Debian's packages
# brought here for the trainers: cJSON, liburing, OpenBLAS's OpenMP build), for test/gpu/test_gpu_bundle.sh's rehearsal of scripts/gpu_bundle.sh. Needs root
# (mount namespaces); exits 77 without. WORK is an empty directory for the namespace's
# files. What it does, inside the namespace only:
#   - hides, in the library, program and data directories below, every entry that matches
#     HIDDEN: each directory is replaced by a directory of links to the real entries
#     (bind-mounted aside under WORK/real) less the hidden ones, and the loader's cache
#     is rebuilt from what is left, so neither the loader nor a PATH search finds them;
#   - offers cuBLAS, cuBLASLt and NCCL as CUDA 13's wheels lay them out,
#     WORK/site/nvidia/cu13/lib/libcublas{,Lt}.so.13 and WORK/site/nvidia/nccl/lib/libnccl.so.2,
#     on PYTHONPATH, as a Python's site-packages would hold them;
#   - with HIDE_PY_MODULES="numpy ...", makes `import numpy` fail as it would where numpy is
#     not installed (ModuleNotFoundError naming it).
set -euo pipefail
if [ "${BARE_MACHINE_INSIDE:-}" != 1 ]; then
    [ "$(id -u)" = 0 ] || { echo "bare_machine.sh: needs root (mount namespaces)" >&2; exit 77; }
    BARE_MACHINE_INSIDE=1 exec unshare --mount --propagation private "$0" "$@"
fi
work=$1; shift
ARCH_LIB=/usr/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
CUDA_LIB=$(readlink -f /usr/local/cuda/lib64 2>/dev/null || true)

# directory:pattern|pattern... (extended globs on the entry's name)
HIDDEN=(
  "$ARCH_LIB:@(libmpi|libopen-pal|libopen-rte|libompitrace|libmca_common|liboshmem|libpmix|libhwloc|libevent|libgomp|libcjson|liburing|libfabric|libucp|libucs|libuct|libucm|libpsm|libibverbs|librdmacm|libnccl|libcublas)*|openmpi|pmix*|openblas-openmp|ucx|libfabric"
  "/usr/bin:@(mpi|orte|ompi|opal|oshmem|oshrun|shmem|ssh|rsh|slogin|scp|sftp|nvidia-smi|compute-sanitizer)*"
  "/usr/share:openmpi|pmix"
)
[ -n "$CUDA_LIB" ] && [ -d "$CUDA_LIB" ] && HIDDEN+=("$CUDA_LIB:@(libcublas|libcublasLt|libnccl)*")

shopt -s extglob dotglob nullglob
mkdir -p "$work/real" "$work/farm" "$work/site/nvidia/cu13/lib" "$work/site/nvidia/nccl/lib" "$work/shadow"
i=0
for h in "${HIDDEN[@]}"; do
    dir=${h%%:*} pat=${h#*:}
    [ -d "$dir" ] || continue
    i=$((i + 1))
    real=$work/real/$i farm=$work/farm/$i
    mkdir -p "$real" "$farm"
    mount --bind "$dir" "$real"
    for e in "$real"/*; do
        name=${e##*/}
        # shellcheck disable=SC2053
        if [[ $name == @($pat) ]]; then continue; fi
        ln -s "$e" "$farm/$name"
    done
    # the libraries hidden here are offered as wheels instead
    if [ "$dir" = "$CUDA_LIB" ]; then
        for l in libcublas.so.13 libcublasLt.so.13; do [ -e "$real/$l" ] && ln -s "$real/$l" "$work/site/nvidia/cu13/lib/$l"; done
        [ -e "$real/libnccl.so.2" ] && ln -s "$real/libnccl.so.2" "$work/site/nvidia/nccl/lib/libnccl.so.2"
    fi
    mount --bind "$farm" "$dir"
done
ldconfig -X -C "$work/ld.so.cache" 2>/dev/null || true
mount --bind "$work/ld.so.cache" /etc/ld.so.cache
for m in ${HIDE_PY_MODULES:-}; do
    mkdir -p "$work/shadow/$m"
    printf 'raise ModuleNotFoundError("No module named %s", name="%s")\n' "'$m'" "$m" > "$work/shadow/$m/__init__.py"
done
export PYTHONPATH="$work/shadow:$work/site${PYTHONPATH:+:$PYTHONPATH}"
unset BARE_MACHINE_INSIDE
exec "$@"
