#!/usr/bin/env bash
# NVMe tier throughput: our io_uring swapper (dev/bench_nvme.c over zero3/nvme.h) next to
# fio on the same directory. Each side, each run: a fresh file preallocated with fallocate
# (unwritten extents, both sides), a sequential write of SIZE_MIB in BS_MIB requests kept
# QD deep with O_DIRECT, the page cache dropped (when allowed), then a sequential read of
# the file just written (ours computes and checks the swap file's block checksums as the
# trainer does: their cost is in its figures). The two sides alternate RUNS times (ours first in odd runs, fio
# first in even ones) because a shared virtual disk drifts by 2x and more within a minute;
# the summary gives medians.
#   usage: scripts/bench_nvme.sh DIR      (needs gcc, liburing, fio, python3: make deps)
#   env:   SIZE_MIB=1024 BS_MIB=8 QD=8 RUNS=5 FIO_EXTRA="" (more fio options, e.g. --mem=shmhuge)
# Per run it also prints the average size of the requests the block device saw
# (/proc/diskstats, both directions together): near max_sectors_kb means the I/O buffers
# were physically contiguous (few scatter-gather segments), which is what decides
# throughput on a virtual disk; about 1 MiB means scattered 4 KiB pages (see "Huge pages"
# in zero3/nvme.h). The counters are the whole device's, so other I/O on it (and the
# re-reads after a cache drop) is counted too: a rough guide.
# Last line: nvme: read_gbps=A write_gbps=B fio_read_gbps=C fio_write_gbps=D read_ratio=A/C
#            write_ratio=B/D runs=N   (medians; GB/s = 1e9 B/s)
set -euo pipefail
DIR=${1:?usage: scripts/bench_nvme.sh DIR}
SIZE_MIB=${SIZE_MIB:-1024}
BS_MIB=${BS_MIB:-8}
QD=${QD:-8}
RUNS=${RUNS:-5}
FIO_EXTRA=${FIO_EXTRA:-}
cd "$(dirname "$0")/.."
[ -d "$DIR" ] || { echo "bench_nvme: no directory $DIR" >&2; exit 1; }
command -v fio >/dev/null || { echo "bench_nvme: fio not installed (apt-get install fio)" >&2; exit 1; }
[ "$RUNS" -ge 1 ] 2>/dev/null || { echo "bench_nvme: RUNS must be >= 1" >&2; exit 1; }
make -s build/bench_nvme

src=$(df -P "$DIR" | awk 'NR==2 {print $1}')
dev=$(basename "$(readlink -f "$src" 2>/dev/null || echo "$src")")
grep -q " $dev " /proc/diskstats 2>/dev/null || dev=""
thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo "n/a")
echo "bench_nvme: $DIR on $(df -T "$DIR" | awk 'NR==2 {print $1, $2}')${dev:+ (block device $dev:\
 max_sectors_kb=$(cat /sys/class/block/$dev/queue/max_sectors_kb 2>/dev/null || echo ?)\
 max_segments=$(cat /sys/class/block/$dev/queue/max_segments 2>/dev/null || echo ?))}; THP: $thp"
echo "bench_nvme: ${SIZE_MIB} MiB, ${BS_MIB} MiB requests, queue depth $QD, O_DIRECT, $RUNS alternated runs"

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
# requests and sectors completed by the device so far (reads + writes); printf,
# because mawk prints sums past 2^31 as 2.1e+09, which bash's arithmetic refuses
disk_snap() { if [ -n "$dev" ]; then awk -v d="$dev" '$3==d {printf "%.0f %.0f\n", $4+$8, $6+$10}' /proc/diskstats; else echo "0 0"; fi; }
# average KiB per device request between two snapshots "n s" "n s"
disk_avg() {
    local a=($1) b=($2)
    local n=$(( b[0] - a[0] ))
    if [ -z "$dev" ] || [ "$n" -le 0 ]; then echo "n/a"; else echo "$(( (b[1] - a[1]) / 2 / n ))KiB x$n"; fi
}

fio_file="$DIR/bench_nvme_fio.bin"
fio_cmd() {  # $1 = write|read
    echo fio --name=nvme_$1 --filename="$fio_file" --ioengine=io_uring --direct=1 --rw="$1" \
        --bs=${BS_MIB}m --size=${SIZE_MIB}m --iodepth="$QD" --fallocate=native $FIO_EXTRA --output-format=json
}
echo "bench_nvme: fio write: $(fio_cmd write)"
echo "bench_nvme: fio read:  $(fio_cmd read)"
echo "bench_nvme: ours:      ./build/bench_nvme $DIR $SIZE_MIB $BS_MIB $QD"
fio_gbps() {  # $1 = write|read; bw_bytes of the job's json is bytes/s
    $(fio_cmd "$1") | python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print('%.3f' % (j['$1']['bw_bytes']/1e9))"
}
trap 'rm -f "$fio_file"' EXIT

run_ours() {
    local a b out
    a=$(disk_snap)
    out=$(./build/bench_nvme "$DIR" "$SIZE_MIB" "$BS_MIB" "$QD" | tail -1)
    b=$(disk_snap)
    ours_w=$(echo "$out" | sed -n 's/.*write_gbps=\([0-9.]*\).*/\1/p')
    ours_r=$(echo "$out" | sed -n 's/.*read_gbps=\([0-9.]*\).*/\1/p')
    ours_req=$(disk_avg "$a" "$b")
}
run_fio() {
    local a b
    rm -f "$fio_file"
    a=$(disk_snap)
    fio_w=$(fio_gbps write)
    drop_caches
    fio_r=$(fio_gbps read)
    b=$(disk_snap)
    rm -f "$fio_file"
    fio_req=$(disk_avg "$a" "$b")
}

R_OURS=() W_OURS=() R_FIO=() W_FIO=()
for i in $(seq "$RUNS"); do
    if [ $((i % 2)) -eq 1 ]; then run_ours; run_fio; order="ours,fio"; else run_fio; run_ours; order="fio,ours"; fi
    R_OURS+=("$ours_r"); W_OURS+=("$ours_w"); R_FIO+=("$fio_r"); W_FIO+=("$fio_w")
    printf 'bench_nvme: run %d (%s): read %s vs fio %s GB/s, write %s vs fio %s GB/s; device requests: ours %s, fio %s\n' \
        "$i" "$order" "$ours_r" "$fio_r" "$ours_w" "$fio_w" "$ours_req" "$fio_req"
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {printf "%.3f", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
mr=$(median "${R_OURS[@]}"); mw=$(median "${W_OURS[@]}"); fr=$(median "${R_FIO[@]}"); fw=$(median "${W_FIO[@]}")
echo "nvme: read_gbps=$mr write_gbps=$mw fio_read_gbps=$fr fio_write_gbps=$fw" \
     "read_ratio=$(ratio "$mr" "$fr") write_ratio=$(ratio "$mw" "$fw") runs=$RUNS"
