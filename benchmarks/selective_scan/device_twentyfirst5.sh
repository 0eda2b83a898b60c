#!/bin/bash
# Twenty-first session, call 5: do the split forward's local pass (MUFU-bound) and real pass
# (latency-bound) run faster side by side than one after the other? mix_probe.py replays recorded
# launches of two independent problems from CUDA graphs: one problem's local pass and the other's
# real pass in series and on two streams at once (and two of one kind at once). Library kernels.
source benchmarks/selective_scan/device_lib.sh
cd benchmarks/selective_scan
for dt in bf16 fp32; do
  timeout 150 python3 mix_probe.py --dtype $dt > $L/mix_$dt.log 2>&1
  grep -E " us|Error|error" $L/mix_$dt.log | tail -14; el
done
