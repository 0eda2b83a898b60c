#!/bin/bash
# Twenty-second session, call 2 (run as one command line; kept here as a script): what bounds the
# batch-1 passes, now that the local pass's dt store (call 1) took 6% of the fp32 real pass's
# instructions and 2 of its 38 MUFU a tile for no time at all. Bounding variants (the kernel's
# BOUND, deliberately wrong results): 1 C rows at B's addresses (half the B / C traffic beyond
# L1), 2 u / delta / z of every tile from the segment's first two tiles (L1 hits), 3 B / C rows
# the same, 5 both; each kernel's time under the benchmark's conditions. Then Nsight Compute's
# memory and pipe sections on the library's forward.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
timeout 150 python3 fwd_kernel_split.py --graph --shapes 1x1536x4096x16 \
    --variants "base;BOUND=1;BOUND=2;BOUND=3;BOUND=5" 2>&1 | grep -v -i warn
el
SECS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
 --section ComputeWorkloadAnalysis --section Occupancy"
timeout 150 ncu --clock-control none -k regex:_selective_scan_fwd -c 2 $SECS \
  -f -o /tmp/ncu_mem python3 profile_gpu.py --once --fwd --shapes 1x1536x4096x16 --dtypes bf16 \
  > $L/ncu_mem.log 2>&1
tail -2 $L/ncu_mem.log
ncu --import /tmp/ncu_mem.ncu-rep --page details > $OUT/ncu_mem.txt 2>&1
ncu --import /tmp/ncu_mem.ncu-rep --page raw --csv > $OUT/ncu_mem_raw.csv 2>&1
grep -v "^    ---\|^$" $OUT/ncu_mem.txt | grep -iE "_selective|Duration|Throughput|Hit Rate|Busy|Pipe|Bandwidth|Wavefront|Sector|Achieved Occ|L1|L2|DRAM" | head -80
el
