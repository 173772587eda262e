#!/usr/bin/env bash
# One-command GPU check for a fresh CUDA machine (written for one H200; about 10 minutes at most).
#
#   bash benchmarks/gpu.sh [OUTDIR]      # OUTDIR: default $OUT if set, else ./gpu-check
#
# Needs a Python that holds a CUDA build of torch and the project's runtime dependencies (numpy,
# pyarrow; pytest for step 2); nothing is installed. The interpreter is $PYTHON if set, else the repo's
# .venv/bin/python when its torch sees a GPU, else python3. Steps, each under `timeout`, each logged to
# OUTDIR/<step>.log (stdout and stderr, also shown here); a failing step does not stop the next one:
#
#   1. env         nvidia-smi, python, torch and CUDA versions
#   2. pytest      the tests marked gpu (python -m pytest -m gpu -q, in the files that carry the mark)
#   3. kernel      benchmarks/kernel.py --device cuda --no-sweep --skip torchhd (+ OUTDIR/kernel.json)
#   4. train_step  benchmarks/train_step.py --device cuda --bf16, presets tiny small bert-base
#                  (+ OUTDIR/train_step.json)
#
# OUTDIR/summary.txt lists each step's exit status and seconds; the script exits 1 if any step failed
# (124: the step ran past its timeout). The step timeouts add up to 570 s; override any with
# GPU_CHECK_T_ENV, GPU_CHECK_T_PYTEST, GPU_CHECK_T_KERNEL, GPU_CHECK_T_TRAIN (seconds).
set -u
set -o pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-${OUT:-./gpu-check}}"
mkdir -p "$dir" || exit 2
dir="$(cd "$dir" && pwd)"
cd "$repo" || exit 2

export PYTHONUNBUFFERED=1
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"

cuda_ok() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; }
if [ -n "${PYTHON:-}" ]; then
    py="$PYTHON"
elif [ -x "$repo/.venv/bin/python" ] && cuda_ok "$repo/.venv/bin/python"; then
    py="$repo/.venv/bin/python"
else
    py="python3"
fi

summary="$dir/summary.txt"
: >"$summary"
failed=0

# step NAME SECONDS COMMAND...: run COMMAND under timeout, tee its output to NAME.log, record its status
step() {
    local name="$1" limit="$2"
    shift 2
    local log="$dir/$name.log" t0 rc
    t0="$(date +%s)"
    echo "=== $name (timeout ${limit} s): $*" | tee "$log"
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
    rc="${PIPESTATUS[0]}"
    local secs=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
        echo "ok      $name  (${secs} s)" | tee -a "$summary"
    else
        [ "$rc" -eq 124 ] && echo "=== $name: timed out after ${limit} s" | tee -a "$log"
        echo "FAILED  $name  exit $rc  (${secs} s)" | tee -a "$summary"
        failed=1
    fi
}

env_report() {
    local rc=0
    nvidia-smi || rc=1
    echo "python: $py"
    "$py" - <<'PY' || rc=1
import platform, sys
import torch
print(f"Python {platform.python_version()} at {sys.executable}")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
print(f"cuda available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, sm_{p.major}{p.minor}")
sys.exit(0 if torch.cuda.is_available() else 1)
PY
    return "$rc"
}

gpu_tests() {
    local files
    mapfile -t files < <(grep -rlE --include='test_*.py' 'pytest\.mark\.gpu' tests | sort)
    [ "${#files[@]}" -gt 0 ] || files=(tests)
    "$py" -m pytest -m gpu -q -p no:cacheprovider "${files[@]}"
}

# timeout runs commands, not shell functions: the two function steps run in a child bash
export py
export -f env_report gpu_tests
step env "${GPU_CHECK_T_ENV:-30}" bash -c env_report
step pytest "${GPU_CHECK_T_PYTEST:-90}" bash -c gpu_tests
step kernel "${GPU_CHECK_T_KERNEL:-210}" \
    "$py" benchmarks/kernel.py --device cuda --no-sweep --skip torchhd --json "$dir/kernel.json"
step train_step "${GPU_CHECK_T_TRAIN:-240}" \
    "$py" benchmarks/train_step.py --device cuda --bf16 --presets tiny small bert-base \
    --batch tiny=256 small=256 bert-base=256 --json "$dir/train_step.json"

echo "=== summary ($dir)"
cat "$summary"
exit "$failed"
