#!/usr/bin/env bash
# What to run first on a GPU node, in about 8 minutes on one H100: the table of
# docs/gpu-nodes.md ("The paper profile in six hours") measured again, with the hardware JPEG
# path, each part of the gpu decode path alone and beside the step, and the step's options.
#
# It runs in the node's own Python and PyTorch (a cluster's container, or a lent machine whose
# torch is not the kit's pin) with the kit from this checkout on PYTHONPATH and only the small
# packages training needs beside it, installed from wheels carried in .whl/ (no network needed
# there). Make them once on a machine with pip and the package index (for the node's Python,
# 3.12 by default; PYTHON_VERSION=3.11 for another):
#
#     echo /.whl/ >> .git/info/exclude        # keep them out of git
#     bash benchmarks/gpu_first_run.sh wheels # about 33 MB into .whl/
#
# Then, on the node, in the repository's root with .whl/ beside it:
#
#     bash benchmarks/gpu_first_run.sh        # writes $OUT (default ./first_run)
#
# $OUT gets node.json (benchmarks/gpu_input.py's rows: the ceilings, every decode path fed to the
# compiled step, the parts), steps.json (the step's options), versions.txt and the log. Read the
# hours from node.json where the kit is installed:
#
#     python -m kit launch plan --profile paper-8xh100 --gpu h100 --rates first_run/node.json \
#         --set train.data.decode=gpu
#
# Each stage has a time limit and the JSON is rewritten after every row, so a stage cut short
# still leaves what it measured.
set -uo pipefail
cd "$(dirname "$0")/.."

# the training path's packages that a node's image may lack, at the versions of uv.lock
WHEELS=(
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0 schedulefree==1.4.1
    nvidia-nvimgcodec-cu13==0.9.0.20 nvidia-nvjpeg==13.3.2.43
)

if [ "${1:-}" = wheels ]; then
    mkdir -p .whl
    for wheel in "${WHEELS[@]}"; do
        python3 -m pip download -q --no-deps --only-binary=:all: -d .whl \
            --python-version "${PYTHON_VERSION:-3.12}" --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$wheel" || exit 1
    done
    du -sh .whl
    exit 0
fi

OUT=${OUT:-$PWD/first_run}
mkdir -p "$OUT"
exec > >(tee "$OUT/first_run.log") 2>&1
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/kit_site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/kit_site:$PWD
else
    export PYTHONPATH=$PWD
fi
started=$(date +%s)
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    nproc
    python3 -c 'import sys, torch, torchvision; print(sys.version.split()[0], torch.__version__,
torch.version.cuda, torchvision.__version__)'
    python3 -m pip list 2>/dev/null | grep -i -E "^(pydantic|schedulefree|nvidia-nvimgcodec|nvidia-nvjpeg|torchcodec) "
    git log -1 --format='kit at %h %s' 2>/dev/null
} | tee "$OUT/versions.txt"

# 1. the table: the ceilings, each decode path fed to the compiled step (gpu: the hardware
#    JPEG engines; gpu-cuda: the CUDA decoder), and each part of the gpu path (about 5 minutes)
timeout 330 python3 benchmarks/gpu_input.py --windows 5 --warm 2 --parts \
    --cpu-workers 8 12 --out "$OUT/node.json"
echo "stage 1 ended with status $? after $(($(date +%s) - started)) s"

# 2. the step's options on a fixed batch, the likeliest first, in what is left of 8 minutes
left=$((470 - ($(date +%s) - started)))
if [ "$left" -gt 60 ]; then
    timeout "$left" python3 benchmarks/gpu_input.py --no-paths \
        --windows 4 --warm 2 --out "$OUT/steps.json" --steps \
        "compile reduce-overhead (CUDA graphs)" "optimizer step compiled" "channels-last off" \
        "BatchNorm removed" "bf16 autocast off" "optimizer for-loop" \
        "compile max-autotune-no-cudagraphs"
    echo "stage 2 ended with status $? after $(($(date +%s) - started)) s"
fi
ls -la "$OUT"
