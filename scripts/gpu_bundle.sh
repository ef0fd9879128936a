#!/usr/bin/env bash
# `make test-gpu` on a GPU machine that cannot install packages (such as the GPU machines
# lent to this project's sessions: CUDA, PyTorch and NCCL's Python wheel, no Open MPI,
# no network).
#
#   bash scripts/gpu_bundle.sh pack [DIR]
#       here, where `make deps` works: builds what `make test-gpu` runs (the kernels'
#       tests, both GPU trainer builds, the CPU trainer, the data) and copies into DIR
#       (default .gpu, git-ignored), as one compressed archive (about 14 MB; the
#       device tool carries 64 MiB a call), the built files, the shared libraries they
#       and Open MPI's mpirun load (not glibc's, the C++ runtime's or CUDA's, which the GPU
#       machine has in its own versions) and Open MPI's plugins and help files.
#   bash scripts/gpu_bundle.sh run [DIR]
#       there, from the repository root, DIR carried along: puts the built files back,
#       links in only the libraries that machine lacks (never shadowing its own: its
#       Python needs its newer ones), uses the carried Open MPI when it has no mpirun,
#       finds NCCL in its Python packages when the loader does not, then runs the steps
#       of `make test-gpu` without building. Set PY to a python3 with torch (default:
#       python3).
#   bash scripts/gpu_bundle.sh exec DIR COMMAND...
#       the same set-up, then COMMAND (scripts/bench_gpu.sh, scripts/profile.sh, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
DIR=${2:-.gpu}
GPU_BINS="build/test_kernels_gpu build/test_kernels_gpu_fp32 build/test_kernels2_gpu build/test_kernels2_gpu_fp32"
BINS="$GPU_BINS train_gpt2_zero3 train_gpt2_zero3_fp32 train_gpt2_zero3_cpu tokenize"
DATA="dev/data/tinyshakespeare/tiny_shakespeare_train.bin dev/data/tinyshakespeare/tiny_shakespeare_val.bin dev/data/gpt2_tokenizer.bin"
# what the GPU machine brings itself: glibc, the compiler's runtimes, the driver and CUDA
SYSTEM_LIBS='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libutil|libresolv|libstdc\+\+|libgcc_s|libgomp|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[.-]'

libs_of() {  # the resolved paths of the shared libraries the given files load, minus SYSTEM_LIBS
    { ldd "$@" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
        while read -r name path; do
            if ! [[ $name =~ $SYSTEM_LIBS ]]; then echo "$path"; fi
        done | sort -u
}

ompi_files() {  # the carried Open MPI's programs and plugins (what loads libraries)
    find "$1/ompi" -type f \( -name '*.so' -o -path '*/bin/*' \)
}

case "$mode" in
pack)
    make deps
    # shellcheck disable=SC2086
    make all data $GPU_BINS train_gpt2_zero3 train_gpt2_zero3_fp32
    out=$DIR
    DIR=$(mktemp -d)
    trap 'rm -rf "$DIR"' EXIT
    mkdir -p "$DIR/tree/build" "$DIR/lib" "$DIR/ompi"
    for f in $BINS $DATA; do mkdir -p "$DIR/tree/$(dirname "$f")"; cp -a "$f" "$DIR/tree/$f"; done
    # Open MPI as installed (prefix /usr): its programs, libraries and plugins, kept under
    # the same relative paths so that OPAL_PREFIX=$DIR/ompi relocates it
    MPIRUN=$(readlink -f "$(command -v mpirun)")
    OMPI_LIBDIR=$(dirname "$(readlink -f "$(ldd train_gpt2_zero3_cpu | awk '/libmpi.so/ {print $3}')")")
    ompi_pkgs=$(dpkg -S "$MPIRUN" "$OMPI_LIBDIR/libmpi.so.40" | cut -d: -f1 | tr ',' ' ')
    for p in $ompi_pkgs openmpi-common libpmix2; do
        dpkg -L "$p" 2>/dev/null | while read -r f; do
            case "$f" in /usr/*) ;; *) continue ;; esac
            [ -f "$f" ] || [ -L "$f" ] || continue
            case "$f" in */doc/*|*/man/*|*.a|*/include/*|*/lintian/*) continue ;; esac
            mkdir -p "$DIR/ompi/$(dirname "${f#/usr/}")"
            cp -a "$f" "$DIR/ompi/${f#/usr/}"
        done
    done
    ln -sf "$(basename "$MPIRUN")" "$DIR/ompi/bin/mpirun"
    # every shared library the binaries, mpirun and the plugins load
    # shellcheck disable=SC2086,SC2046
    for l in $(libs_of $BINS $(ompi_files "$DIR")); do cp -L "$l" "$DIR/lib/"; done
    rm -rf "$out"; mkdir -p "$out"
    tar -C "$DIR" -cf - . | xz -6 -T2 > "$out/bundle.tar.xz"
    echo "pack: $(du -h "$out/bundle.tar.xz" | cut -f1) in $out/bundle.tar.xz; on the GPU machine: carry [\"$out\"], run: bash scripts/gpu_bundle.sh run $out"
    ;;
run|exec)
    [ -f "$DIR/bundle.tar.xz" ] || { echo "gpu_bundle: $DIR/bundle.tar.xz not found: run 'bash scripts/gpu_bundle.sh pack $DIR' where packages install, and carry $DIR" >&2; exit 1; }
    DIR="$(cd "$DIR" && pwd)/x"
    rm -rf "$DIR"; mkdir -p "$DIR"
    xz -dc "$DIR/../bundle.tar.xz" | tar -C "$DIR" -xf -
    cp -a "$DIR/tree/." .
    # the libraries this machine lacks, and only those, from the carried copies
    need="$DIR/need"
    rm -rf "$need"; mkdir -p "$need"
    # NCCL: the loader's, or the one in the Python packages (nvidia-nccl-cu*)
    if ! ldconfig -p | grep -q 'libnccl.so.2 '; then
        nccl=$(${PY:-python3} -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null || true)
        [ -n "$nccl" ] && [ -f "$nccl/libnccl.so.2" ] && ln -sf "$nccl/libnccl.so.2" "$need/"
    fi
    export LD_LIBRARY_PATH="$need${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    own_mpi=1; command -v mpirun > /dev/null || own_mpi=0
    loaders="$BINS"
    [ $own_mpi = 1 ] || loaders="$BINS $(ompi_files "$DIR")"
    for _ in 1 2 3; do  # a library linked in can need another: a few rounds
        # shellcheck disable=SC2086
        { ldd $loaders 2>/dev/null || true; } | awk '/not found/ {print $1}' | sort -u | while read -r l; do
            if [ -e "$DIR/lib/$l" ]; then ln -sf "$DIR/lib/$l" "$need/$l"; else echo "gpu_bundle: $l is missing here and was not carried" >&2; fi
        done
    done
    if [ $own_mpi = 0 ]; then
        export OPAL_PREFIX="$DIR/ompi" PATH="$DIR/ompi/bin:$PATH"
        echo "gpu_bundle: mpirun from $OPAL_PREFIX"
    fi
    export PY=${PY:-python3}
    if [ "$mode" = exec ]; then shift 2; exec "$@"; fi
    status=0
    for t in $GPU_BINS; do echo "=== $t"; ./"$t" || status=1; done
    echo "=== test/gpu/test_gpu_trainer.sh"; bash test/gpu/test_gpu_trainer.sh || status=1
    exit $status
    ;;
*)
    echo "usage: bash scripts/gpu_bundle.sh pack|run [DIR] | exec DIR COMMAND..." >&2
    exit 2
    ;;
esac
