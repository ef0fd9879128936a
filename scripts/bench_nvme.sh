#!/usr/bin/env bash
# NVMe tier throughput: our io_uring swapper (dev/bench_nvme.c over zero3/nvme.h) next to
# fio on the same directory: sequential write then read of 1 GiB, 8 MiB requests, depth 8,
# O_DIRECT. The page cache is dropped between write and read when allowed.
#   usage: scripts/bench_nvme.sh DIR      (needs gcc, liburing, fio)
# Last line: nvme: read_gbps=A write_gbps=B fio_read_gbps=C fio_write_gbps=D  (GB/s = 1e9 B/s)
set -euo pipefail
DIR=${1:?usage: scripts/bench_nvme.sh DIR}
SIZE_MIB=${SIZE_MIB:-1024}
BS_MIB=${BS_MIB:-8}
QD=${QD:-8}
cd "$(dirname "$0")/.."
[ -d "$DIR" ] || { echo "bench_nvme: no directory $DIR" >&2; exit 1; }
command -v fio >/dev/null || { echo "bench_nvme: fio not installed (apt-get install fio)" >&2; exit 1; }
mkdir -p build
gcc -O2 -Wall -Wextra -Wno-unused-function -I. dev/bench_nvme.c -o build/bench_nvme $(pkg-config --cflags --libs liburing)

echo "bench_nvme: $DIR on $(df -T "$DIR" | awk 'NR==2 {print $1, $2}')"
out=$(./build/bench_nvme "$DIR" "$SIZE_MIB" "$BS_MIB" "$QD")
echo "$out"
ours=$(echo "$out" | tail -1)
write_gbps=$(echo "$ours" | sed -n 's/.*write_gbps=\([0-9.]*\).*/\1/p')
read_gbps=$(echo "$ours" | sed -n 's/.*read_gbps=\([0-9.]*\).*/\1/p')

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# fio: one job per direction on one file; bw_bytes of the job's json is bytes/s
fio_file="$DIR/bench_nvme_fio.bin"
fio_gbps() {  # $1 = write|read
    fio --name=nvme_$1 --filename="$fio_file" --ioengine=io_uring --direct=1 --rw="$1" \
        --bs=${BS_MIB}m --size=${SIZE_MIB}m --iodepth="$QD" --output-format=json |
        python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print('%.3f' % (j['$1']['bw_bytes']/1e9))"
}
rm -f "$fio_file"
fio_write=$(fio_gbps write)
drop_caches
fio_read=$(fio_gbps read)
rm -f "$fio_file"
echo "nvme: read_gbps=$read_gbps write_gbps=$write_gbps fio_read_gbps=$fio_read fio_write_gbps=$fio_write"
