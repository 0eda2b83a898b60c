# What the device scripts share (from the thirteenth session's on; the earlier ones stay as they
# ran): sourced from the repository root. Logs go under $OUT/logs ($L), el prints the seconds
# since the script started.
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))s"; }
L=${OUT:-/tmp}/logs; mkdir -p "$L"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1

# mamba-ssm's CUDA kernel, built in the background from the carried .whl (../shared/anchors)
start_mamba_build() {
    mkdir -p /tmp/mb && tar xzf .whl/mamba_ssm-*.tar.gz -C /tmp/mb
    (MAX_JOBS=8 setsid nohup python3 .whl/build_mamba_cuda.py > /tmp/build.log 2>&1 &)
}

# waits up to $1 seconds for the build, then puts it on PYTHONPATH
wait_mamba_build() {
    for _ in $(seq 1 $(( $1 / 5 ))); do grep -q BUILD_OK /tmp/build.log && break; sleep 5; done
    cp /tmp/build.log "$L/"; tail -1 /tmp/build.log
    export PYTHONPATH=$PYTHONPATH:/tmp/mbuild
}

# gpu_tests SECONDS PATH... [-k EXPR]: the GPU tests under PATHs (those EXPR selects) on 8
# workers, summary to stdout. (Until the thirtieth session a caller's -k was overridden by the
# float64 filter's own -k, pytest taking the last: those calls ran every GPU test of the PATHs.)
gpu_tests() {
    local limit=$1; shift
    local sel="not float64" args=()
    while [ $# -gt 0 ]; do
        if [ "$1" = "-k" ]; then sel="($2) and not float64"; shift 2; else args+=("$1"); shift; fi
    done
    timeout "$limit" python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider "${args[@]}" \
        -k "$sel" > "$L/gpu_tests.log" 2>&1
    grep -E "^FAILED|^ERROR|passed|failed|could not compile|assuming every input" \
        "$L/gpu_tests.log" | tail -8
}

# ssmscan's C CPU kernels, built in place (the device machine runs from PYTHONPATH=src, not an
# install): the float64 oracle of the 2^20-step tests (test_long_sequences.py)
build_cpu_kernels() {
    python3 setup.py -q build_ext --inplace > "$L/build_cpu.log" 2>&1 || tail -5 "$L/build_cpu.log"
}
