#!/bin/bash
# One call on a GPU machine: build the host C kernels, optionally build mamba-ssm's CUDA extension
# in the background, then run the parts asked for. Results go under $OUT (default ./device-out).
#
#   bash benchmarks/device.sh [PART ...]        PART: tests | aoti | bench | scan | ssd | sweep | ssdprofile | decode1 | models | profile | report | all (default)
#
# Environment: OUT (results folder), PYTEST_ARGS (extra pytest arguments for `tests`, e.g. -k),
# BENCH_ARGS (extra arguments for bench_gpu.py), MODELS (`models` and `profile`, e.g.
# mamba2-130m,mamba1-130m), SWEEP_PLANS / SWEEP_PLANS_FP32 (`sweep`: SSD plan variants, bench_gpu.py
# --plans), SSD_PROFILE_ARGS (`ssdprofile`: tools/profile_ssd.py's arguments), DECODE_BLOCKS (`decode1`:
# the decode step's channel blocks timed beside the planned one), T_TESTS / T_BENCH / T_SSD / T_SWEEP / T_MODELS / T_PROFILE / T_REPORT (timeouts, s).
# mamba-ssm side by side: put its sdist and shared/anchors/build_mamba_cuda.py under .whl/ (the
# README's "GPU benchmarks" says how); without them the benchmark times ssmscan alone.
set -u
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
PARTS=${*:-all}
has() { [[ " $PARTS " == *" $1 "* || " $PARTS " == *" all "* ]]; }
T0=$(date +%s)
# Inductor's C++ compiler for the AOTInductor packages: the system g++, whatever CXX says. The lent
# GPU machines set CXX=/opt/gcc/bin/g++, whose libstdc++ is not the one Python loaded, and a package
# it builds kills the process that loads it (README, "AOTInductor, CUDA")
AOT_CXX=/usr/bin/g++
[ -x "$AOT_CXX" ] || AOT_CXX=${CXX:-g++}
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }

if (has bench || has ssd || has ssdprofile || has decode1 || has models) && ls .whl/mamba_ssm-*.tar.gz > /dev/null 2>&1; then
    mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
fi
if (has bench || has models) && ls .whl/mamba_ssm-*.tar.gz > /dev/null 2>&1; then
    (MAX_JOBS=${MAX_JOBS:-14} setsid nohup python3 .whl/build_mamba_cuda.py > "$OUT/mamba_build.log" 2>&1 &)
    stamp "mamba-ssm build started"
fi
if has models && ls .whl/causal_conv1d-*.tar.gz > /dev/null 2>&1; then
    (MAX_JOBS=4 setsid nohup bash benchmarks/integrations/build_causal_conv1d.sh \
        "$(ls .whl/causal_conv1d-*.tar.gz | head -1)" > "$OUT/causal_build.log" 2>&1 &)
    stamp "causal-conv1d build started"
fi
python3 setup.py build_ext --inplace -q > "$OUT/setup.log" 2>&1 || stamp "C kernel build failed (see setup.log)"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"

if has tests; then
    stamp "GPU tests"
    # the suite takes about 225 s alone with 12 workers and more than 330 s while the anchors
    # build beside it; -k: a suite that outlives its time is killed with its workers, which
    # would otherwise keep the GPU busy under the benchmarks that follow
    # shellcheck disable=SC2086
    timeout -k 10 "${T_TESTS:-420}" python3 -m pytest -q -rfE -m gpu -n "${TEST_PROCS:-12}" --dist loadgroup \
        -p no:cacheprovider tests/ ${PYTEST_ARGS:-} > "$OUT/gpu_tests.log" 2>&1
    tail -15 "$OUT/gpu_tests.log"
fi
if has aoti; then
    stamp "AOTInductor package, loaded in a fresh process"
    mkdir -p /tmp/aoti
    CXX=$AOT_CXX timeout 180 python3 benchmarks/selective_scan/aoti_check.py build /tmp/aoti > "$OUT/aoti.log" 2>&1
    echo "aoti build rc=$?"
    timeout 120 python3 benchmarks/selective_scan/aoti_check.py load /tmp/aoti >> "$OUT/aoti.log" 2>&1
    echo "aoti load rc=$?"; tail -4 "$OUT/aoti.log"
fi
if has bench; then
    if [ -f "$OUT/mamba_build.log" ]; then
        for _ in $(seq 1 60); do grep -q BUILD_OK "$OUT/mamba_build.log" && break; sleep 5; done
        tail -2 "$OUT/mamba_build.log"
    fi
    stamp "selective-scan benchmark"
    # shellcheck disable=SC2086
    PYTHONPATH=$PYTHONPATH:/tmp/mbuild timeout "${T_BENCH:-240}" python3 benchmarks/selective_scan/bench_gpu.py \
        --out "$OUT/bench_gpu.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_gpu.log" | grep -v '^{' | tail -30
fi
if has scan; then
    stamp "parallel-scan benchmark"
    timeout 120 python3 benchmarks/scan/bench_parallel_scan.py --device cuda --shape 16 24576 1024 --compile \
        > "$OUT/scan_bench.log" 2>&1
    tail -15 "$OUT/scan_bench.log"
fi
if has ssd; then
    # Mamba-2 SSD: Triton kernels against mamba-ssm's Triton SSD (pure Triton: the unpacked sdist,
    # no build) and flash-linear-attention when importable; then its AOTInductor package
    stamp "SSD benchmark"
    # flash-linear-attention's kernels (its fla-core wheel, no dependencies beyond einops)
    if ls .whl/fla_core-*.whl > /dev/null 2>&1; then
        python3 -m pip install --no-deps -q .whl/fla_core-*.whl > "$OUT/fla_install.log" 2>&1
    fi
    MB=$(ls -d /tmp/mb/mamba_ssm-* 2>/dev/null | head -1)
    # five shapes x two problems, each costing mamba-ssm an autotuning, and the decode table: more
    # than 240 s on an H100 (2026-12-06)
    timeout "${T_SSD:-480}" python3 benchmarks/ssd_scan/bench_gpu.py ${MB:+--mamba-src "$MB"} \
        --out "$OUT/ssd_gpu.json" > "$OUT/ssd_gpu.log" 2>&1
    echo "ssd bench rc=$?"; grep -v '^{' "$OUT/ssd_gpu.log" | tail -30
    mkdir -p /tmp/aoti_ssd
    CXX=$AOT_CXX timeout 180 python3 benchmarks/ssd_scan/aoti_check.py build /tmp/aoti_ssd > "$OUT/ssd_aoti.log" 2>&1
    echo "ssd aoti build rc=$?"
    timeout 120 python3 benchmarks/ssd_scan/aoti_check.py load /tmp/aoti_ssd >> "$OUT/ssd_aoti.log" 2>&1
    echo "ssd aoti load rc=$?"; tail -4 "$OUT/ssd_aoti.log"
fi
if has sweep; then
    # SSD plan variants beside the planned plan (no anchors), at mamba2-2.7b's and -130m's sizes
    # in bf16 and at 2.7b's in float32; each variant checked against float64 first
    stamp "SSD plan sweep"
    # shellcheck disable=SC2086
    timeout "${T_SWEEP:-300}" python3 benchmarks/ssd_scan/bench_gpu.py --parts scan --problems full \
        --anchors --shapes 8,2048,80,64,1,128 16,2048,24,64,1,128 \
        --plans ${SWEEP_PLANS:-dx16=block_p:16 dx16s1=block_p:16,stages:1} \
        --out "$OUT/sweep_bf16.json" > "$OUT/sweep_bf16.log" 2>&1
    echo "sweep bf16 rc=$?"; grep -v '^{' "$OUT/sweep_bf16.log" | tail -12
    # shellcheck disable=SC2086
    timeout "${T_SWEEP:-300}" python3 benchmarks/ssd_scan/bench_gpu.py --parts scan --problems full \
        --anchors --dtype fp32 --shapes 8,2048,80,64,1,128 \
        --plans ${SWEEP_PLANS_FP32:-p16=block_p:16,dbc_block_p:16 p16s1=block_p:16,dbc_block_p:16,stages:1} \
        --out "$OUT/sweep_fp32.json" > "$OUT/sweep_fp32.log" 2>&1
    echo "sweep fp32 rc=$?"; grep -v '^{' "$OUT/sweep_fp32.log" | tail -8
fi
if has ssdprofile; then
    # where the SSD forward+backward's GPU time goes, kernel by kernel, ours beside mamba-ssm's
    stamp "SSD kernel profile"
    MB=$(ls -d /tmp/mb/mamba_ssm-* 2>/dev/null | head -1)
    # shellcheck disable=SC2086
    timeout "${T_PROFILE:-240}" python3 tools/profile_ssd.py ${MB:+--mamba-src "$MB"} ${SSD_PROFILE_ARGS:-} \
        > "$OUT/ssd_profile.log" 2>&1
    echo "ssd profile rc=$?"; grep -v -e Warning -e warn "$OUT/ssd_profile.log" | head -80
fi
if has decode1; then
    # the decode step in Mamba-1's layout (mamba-130m's 1536 x 16) beside mamba-ssm's, ours also
    # at other channel blocks than planned
    stamp "decode step, Mamba-1 layout"
    MB=$(ls -d /tmp/mb/mamba_ssm-* 2>/dev/null | head -1)
    # shellcheck disable=SC2086
    timeout "${T_BENCH:-240}" python3 benchmarks/ssd_scan/bench_gpu.py --parts decode --decode-layout mamba1 \
        --decode-block-p ${DECODE_BLOCKS:-8 16 32 64} ${MB:+--mamba-src "$MB"} --out "$OUT/decode1.json" \
        > "$OUT/decode1.log" 2>&1
    echo "decode1 rc=$?"; grep -v '^{' "$OUT/decode1.log" | tail -24
fi
if has models; then
    # ssmscan's Mamba-2 / Mamba LMs beside mamba-ssm's MambaLMHeadModel (same config and weights)
    for _ in $(seq 1 90); do
        { [ ! -f "$OUT/mamba_build.log" ] || grep -q BUILD_OK "$OUT/mamba_build.log"; } &&
            { [ ! -f "$OUT/causal_build.log" ] || grep -q -e CAUSAL_OK -e CAUSAL_FAILED "$OUT/causal_build.log"; } && break
        sleep 5
    done
    stamp "model benchmark"
    PYTHONPATH=$PYTHONPATH:/tmp/mbuild timeout "${T_MODELS:-420}" python3 benchmarks/integrations/bench_gpu_models.py \
        ${MODELS:+--models "$MODELS"} --out "$OUT/models.json" > "$OUT/models.log" 2>&1
    echo "models rc=$?"; grep -v '^{' "$OUT/models.log" | tail -40
fi
if has profile; then
    # where the built-in models' GPU time goes (tools/profile_models.py), prefill and a decode step
    stamp "model profiles"
    timeout "${T_PROFILE:-240}" python3 tools/profile_models.py ${MODELS:+--models "$MODELS"} \
        --batches 1,8 --decode > "$OUT/profile.log" 2>&1
    echo "profile rc=$?"; grep -E "wall|^  " "$OUT/profile.log" | head -60
fi
if has report; then
    # `ssmscan report --device cuda` on the built-in Mamba and Mamba-2 LMs: eager, compile,
    # export and AOTInductor (loaded in a fresh process) on the GPU, each against eager
    stamp "ssmscan report on CUDA"
    for model in tiny tiny-mamba2; do
        CXX=$AOT_CXX timeout "${T_REPORT:-240}" python3 -m ssmscan report --device cuda \
            --model "$model" --targets eager,compile,export,aoti --json "$OUT/report_$model.json" \
            > "$OUT/report_$model.log" 2>&1
        echo "report $model rc=$?"; tail -12 "$OUT/report_$model.log"
    done
fi
stamp done
