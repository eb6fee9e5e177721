#!/usr/bin/env bash
# The prepared GPU check for perflsp.runtime: one script, a few minutes, nothing downloaded.
#
#   OUT=/some/dir bash bench/gpu_check.sh        (the device tool sets OUT itself)
#
# 1. installs this checkout in place (pip --no-deps --no-build-isolation -e .: no network)
# 2. the GPU tests (pytest -m gpu tests/runtime)
# 3. `perflsp peaks` (expect ~4.3 TB/s copy and ~790 TFLOP/s bf16 on an H200)
# 4. the reference suite through the real CLI: matmul (compute-bound), elementwise and copy
#    (memory-bound), a loop of tiny ops (overhead-bound), an .item()-per-step loop (sync-bound),
#    a chain of tiny kernels (launch/overhead-bound), a host round trip (transfer-bound)
# 5. torch.compile side by side: the chain of tiny kernels with --compile-mode reduce-overhead
#    (CUDA graphs: expect a large speedup); on a CPU the compile cases' fixture, where
#    reduce-overhead falls back to the default mode with a note
# 6. summary.md: the verdict and attained fraction per case, beside the expected regime, and the
#    compile line
#
# Without CUDA it still runs: the GPU tests skip, peaks and the reference suite run on the CPU
# with the CPU cases (tests/runtime/targets/ref_cases.py), and summary.md says so.
# Everything lands in at most 8 files directly under $OUT (the device tool's limit); scratch
# (the workspace, the ceilings cache) stays in a temporary folder.
set -u
cd "$(dirname "$0")/.."
REPO=$PWD

OUT=${OUT:-$REPO/bench/results/local}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python}
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
export PERFLSP_CACHE_DIR="$SCRATCH/cache"
LOG="$OUT/run.log"
: > "$LOG"
say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$LOG"; }

say "install (no network): pip install --no-deps --no-build-isolation -e ."
$PY -m pip install --no-deps --no-build-isolation -e . >> "$LOG" 2>&1 || say "install failed (see above)"
if ! $PY -c "import perflsp.runtime.cli" >> "$LOG" 2>&1; then
  # No editable install: mirror the package layout (perflsp.runtime -> runtime/, ...) with links.
  say "perflsp.runtime not importable: using a linked package tree on PYTHONPATH"
  mkdir -p "$SCRATCH/shadow/perflsp"
  for f in perflsp/*; do ln -s "$REPO/$f" "$SCRATCH/shadow/perflsp/$(basename "$f")"; done
  for sub in runtime rules server; do ln -s "$REPO/$sub" "$SCRATCH/shadow/perflsp/$sub"; done
  export PYTHONPATH="$SCRATCH/shadow${PYTHONPATH:+:$PYTHONPATH}"
fi
# From here on, run outside the checkout: the current folder comes first on sys.path and the
# checkout's own perflsp/ (which has no runtime/ inside) would shadow the installed package.
cd "$SCRATCH"

$PY - >> "$LOG" 2>&1 <<'EOF'
import platform, sys, torch
print("python", sys.version.split()[0], platform.platform())
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, f"cc {p.major}.{p.minor}", f"{p.total_memory / 2**30:.0f} GiB")
EOF
HAS_CUDA=$($PY -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)

# `perflsp peaks` when the console script forwards it, else the same main through -m.
if perflsp peaks --help > /dev/null 2>&1; then PERFLSP=(perflsp); else PERFLSP=("$PY" -m perflsp.runtime); fi
say "entry point: ${PERFLSP[*]}"

say "GPU tests"
$PY -m pytest "$REPO/tests/runtime" -m gpu -q -rs -p no:cacheprovider --rootdir "$REPO" \
    --confcutdir "$REPO/tests/runtime" > "$OUT/gpu_tests.txt" 2>&1
say "GPU tests exit code $? ($(tail -n 1 "$OUT/gpu_tests.txt"))"

say "peaks"
"${PERFLSP[@]}" peaks --json "$OUT/peaks.json" --progress none > "$OUT/peaks.txt" 2>> "$LOG"
say "peaks exit code $?"

if [ "$HAS_CUDA" = "1" ]; then
  CASES_FILE=$REPO/tests/runtime/targets/gpu_cases.py
  CASES="matmul_bf16:compute-bound gemm_then_item:compute-bound copy:memory-bound elementwise:memory-bound tiny_ops:overhead-bound tiny_kernels:overhead-bound item_per_step:sync-bound round_trip:transfer-bound"
else
  CASES_FILE=$REPO/tests/runtime/targets/ref_cases.py
  CASES="matmul:compute-bound elementwise:memory-bound copy:memory-bound tiny_ops:overhead-bound mixed:compute-bound"
fi

: > "$OUT/reference.txt"
mkdir -p "$SCRATCH/results"
for entry in $CASES; do
  name=${entry%%:*}
  say "reference case $name (expected ${entry#*:})"
  "${PERFLSP[@]}" profile "$CASES_FILE:$name" --min-time 0.3 --timeout 180 --progress none \
      --workspace "$SCRATCH/ws" --json "$SCRATCH/results/$name.json" >> "$OUT/reference.txt" 2>> "$LOG"
  echo "exit code $?" >> "$OUT/reference.txt"
  echo >> "$OUT/reference.txt"
done
# The examples' training step, through the very command the editor's "Profile this function"
# spawns (the server itself needs pygls, which this machine lacks unless its wheels are carried).
say "examples/train_loop.py:train_step"
echo "== examples/train_loop.py:train_step (the editor's Profile command) ==" >> "$OUT/reference.txt"
"$PY" -m perflsp.runtime profile "$REPO/examples/train_loop.py:train_step" --min-time 0.3 --timeout 180 \
    --progress none --workspace "$SCRATCH/ws" --json "$SCRATCH/train_step.json" >> "$OUT/reference.txt" 2>> "$LOG"
echo "exit code $?" >> "$OUT/reference.txt"
# torch.compile with CUDA graphs on the launch-bound chain (the compile has its own timeout).
if [ "$HAS_CUDA" = "1" ]; then COMPILE_TARGET="$CASES_FILE:tiny_kernels"
else COMPILE_TARGET="$REPO/tests/runtime/targets/compile_cases.py:pointwise_with_breaks"; fi
say "torch.compile reduce-overhead: $COMPILE_TARGET"
echo "== $COMPILE_TARGET --compile-mode reduce-overhead ==" >> "$OUT/reference.txt"
"${PERFLSP[@]}" profile "$COMPILE_TARGET" --compile-mode reduce-overhead --compile-timeout 300 --min-time 0.3 \
    --timeout 180 --progress none --workspace "$SCRATCH/ws" --json "$SCRATCH/compile.json" \
    >> "$OUT/reference.txt" 2>> "$LOG"
echo "exit code $?" >> "$OUT/reference.txt"
# The roofline of the first case, as the editor's HTML plot would show it.
first=${CASES%% *}
"${PERFLSP[@]}" profile "$CASES_FILE:${first%%:*}" --min-time 0.3 --progress none --workspace "$SCRATCH/ws" \
    --plot "$OUT/roofline.html" > /dev/null 2>> "$LOG"

$PY - "$SCRATCH/results" "$OUT" "$HAS_CUDA" "$CASES" "$SCRATCH/compile.json" >> "$LOG" 2>&1 <<'EOF'
import json, sys
from pathlib import Path

from perflsp.profile_result import compile_summary
from perflsp.units import byte_rate, flop_rate

results_dir, out, has_cuda, cases = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1", sys.argv[4].split()
rows, combined = [], {}
for entry in cases:
    name, expected = entry.split(":")
    path = results_dir / f"{name}.json"
    if not path.exists():
        rows.append(f"| {name} | {expected} | (no result) | | |")
        continue
    result = json.loads(path.read_text())
    combined[name] = result
    if result["status"] != "ok":
        rows.append(f"| {name} | {expected} | error: {result['error']['kind']} | | |")
        continue
    regime = result["verdict"]["regime"]
    totals = result["totals"]
    fraction = totals["bandwidth_fraction"] if regime == "memory-bound" else totals["flops_fraction"]
    if regime in ("overhead-bound", "sync-bound", "transfer-bound"):
        k = result["kernels"]
        fraction_text = f"busy {k['busy_fraction']:.0%}, blocked {k['host_blocked_us']:.0f} µs/call"
    else:
        fraction_text = f"{fraction:.1%}" if fraction is not None else "-"
    mark = "ok" if regime == expected else "MISMATCH"
    rows.append(f"| {name} | {expected} | {regime} ({mark}) | {fraction_text} | {result['verdict']['summary']} |")
(out / "reference.json").write_text(json.dumps(combined, indent=1))
peaks_path = out / "peaks.json"
peaks = json.loads(peaks_path.read_text()) if peaks_path.exists() else None
lines = ["# perflsp GPU check" if has_cuda else "# perflsp GPU check (no CUDA here: CPU fallback run)", ""]
if peaks:
    d = peaks["device"]
    lines += [f"device: {d['kind']} {d['name']}, torch {peaks['torch']}, CUDA {peaks.get('cuda')}", "",
              "| ceiling | measured |", "| --- | --- |",
              f"| bandwidth (copy/triad best) | {byte_rate(peaks['bandwidth_bytes_per_s'])} |"]
    lines += [f"| {k} matmul | {flop_rate(v)} |" for k, v in peaks["compute_flops_per_s"].items()]
    lines.append("")
lines += ["| case | expected | verdict | attained | summary |", "| --- | --- | --- | --- | --- |"] + rows
compiled = Path(sys.argv[5])
block = json.loads(compiled.read_text()).get("compile") if compiled.exists() else None
lines += ["", "torch.compile (reduce-overhead): " + (f"mode {block['mode']}, {compile_summary(block)}"
                                                    if block else "(no result)")]
tests = (out / "gpu_tests.txt").read_text().strip().splitlines()
lines += ["", f"GPU tests: {tests[-1] if tests else '(no output)'}"]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
say "done: $(ls "$OUT" | tr '\n' ' ')"
