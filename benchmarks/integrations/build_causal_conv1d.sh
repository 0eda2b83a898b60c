#!/bin/bash
# Build causal-conv1d's CUDA extension (causal_conv1d_cuda) for sm_90 only from its sdist, into one
# folder that also holds its Python package: with the folder on sys.path (bench_gpu_models.py's
# --causal-conv1d), `import causal_conv1d` works and mamba-ssm takes its fused paths.
#
#   bash benchmarks/integrations/build_causal_conv1d.sh [SDIST] [DIR]
#
# SDIST defaults to .whl/causal_conv1d-1.5.3.post1.tar.gz, DIR to /tmp/ccbuild. Prints CAUSAL_OK
# (and the seconds taken) once `import causal_conv1d` and its extension load from DIR; exits 1
# otherwise. The sdist's setup.py compiles for every architecture from sm_75 up (its -gencode
# list is fixed, TORCH_CUDA_ARCH_LIST does not change it), so this compiles its four sources with
# torch.utils.cpp_extension.load and setup.py's nvcc flags, for sm_90 only; MAX_JOBS (default 14)
# sets ninja's parallelism. Needs nvcc and ninja; no network. To build beside other work:
#
#   (setsid nohup bash benchmarks/integrations/build_causal_conv1d.sh > /tmp/cc.log 2>&1 &)
#   ... ; until grep -q -e CAUSAL_OK -e CAUSAL_FAILED /tmp/cc.log; do sleep 5; done
set -u
SDIST=${1:-.whl/causal_conv1d-1.5.3.post1.tar.gz}
DIR=${2:-/tmp/ccbuild}
SRC_ROOT=/tmp/cc
if [ ! -f "$SDIST" ]; then
    echo "CAUSAL_FAILED: no sdist at $SDIST"
    exit 1
fi
mkdir -p "$SRC_ROOT" "$DIR"
tar xzf "$SDIST" -C "$SRC_ROOT"
SRC=$(ls -d "$SRC_ROOT"/causal_conv1d-*/ | head -1)
rm -rf "$DIR/causal_conv1d"
cp -r "$SRC/causal_conv1d" "$DIR/causal_conv1d"
export MAX_JOBS=${MAX_JOBS:-14}
python3 - "$SRC" "$DIR" <<'EOF'
import sys
import time

import torch.utils.cpp_extension as ce

src, out = sys.argv[1].rstrip("/"), sys.argv[2]
t0 = time.time()
csrc = f"{src}/csrc"
ce.load(
    name="causal_conv1d_cuda",
    sources=[f"{csrc}/{f}" for f in ("causal_conv1d.cpp", "causal_conv1d_fwd.cu",
                                      "causal_conv1d_bwd.cu", "causal_conv1d_update.cu")],
    extra_cflags=["-O3", "-std=c++17"],
    extra_cuda_cflags=[
        "-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
        "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
        "-gencode", "arch=compute_90,code=sm_90", "--threads", "4",
    ],
    extra_include_paths=[csrc],
    build_directory=out,
    verbose=False,
)
print(f"built in {time.time() - t0:.0f} s", flush=True)
EOF
rc=$?
if [ $rc -ne 0 ]; then
    echo "CAUSAL_FAILED: the build exited with $rc"
    exit 1
fi
# A fresh process, as the benchmark will see it: the package and its extension from DIR alone.
if (cd / && PYTHONPATH="$DIR" python3 -c "
import causal_conv1d, causal_conv1d_cuda
from causal_conv1d.cpp_functions import causal_conv1d_fwd_function
print('causal_conv1d', causal_conv1d.__version__, 'from', causal_conv1d.__file__)
"); then
    echo "CAUSAL_OK"
else
    echo "CAUSAL_FAILED: the build finished but causal_conv1d does not import from $DIR"
    exit 1
fi
