"""What the measured-hotness recorder (runtime/hot_record.py) costs a running program.

    python bench/hot_overhead.py [--steps 300] [--runs 5] [--python /path/to/python3.12]

Two workloads, each timed bare, with the recorder counting, and with it paused (as while the
profiler measures), interleaved over --runs rounds; the median is reported.

- `train`: a small CPU training loop (torch): 4 residual blocks of Linear(256) on a batch of
  32, cross-entropy, SGD. Every block, the loss and a data helper are workspace functions, as in
  a real project, so the recorder counts ~12 calls per step besides torch's own.
- `calls`: pure Python, 200,000 calls of tiny workspace functions: the worst case, the cost per
  counted call. Runs under this interpreter and under `--python` (e.g. a 3.12+ one, to compare
  sys.monitoring with the sys.setprofile fallback); needs no torch and no installed perflsp.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A small residual MLP, shared with bench/record_overhead.py so both recorders time one model.
MODEL = '''
class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.fc(x))


class Net(torch.nn.Module):
    def __init__(self, width=256, depth=4, classes=10):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = torch.nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.blocks(x))
'''

TRAIN = "import torch\n\n" + MODEL + '''

def loss_of(logits, labels):
    return torch.nn.functional.cross_entropy(logits, labels)


def batch(data, i):
    return data[i % len(data)]


def run(steps):
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    data = [(torch.randn(32, 256), torch.randint(0, 10, (32,))) for _ in range(8)]
    for i in range(steps):
        x, y = batch(data, i)
        loss = loss_of(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
'''

CALLS = '''
def leaf(x):
    return x + 1


def middle(x):
    return leaf(x) * 2


def run(n):
    total = 0
    for i in range(n // 2):
        total += middle(i)
    return total
'''


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorder_module():
    sys.path.insert(0, ROOT)  # `perflsp` (core) from the repository, installed or not
    return load(os.path.join(ROOT, "runtime", "hot_record.py"), "hot_record")


def timed(fn, arg) -> float:
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


def measure(source: str, arg: int, runs: int) -> dict:
    hot_record = recorder_module()
    with tempfile.TemporaryDirectory() as workspace:
        path = os.path.join(workspace, "workload.py")
        with open(path, "w") as handle:
            handle.write(source)
        module = load(path, "workload")
        module.run(max(1, arg // 10))  # warm-up: allocator, first-call setup
        seconds = {"bare": [], "recording": [], "paused": []}
        counted = 0
        for _ in range(runs):
            seconds["bare"].append(timed(module.run, arg))
            recorder = hot_record.HotRecorder(workspace, "bench", cwd=workspace)
            recorder.start()
            seconds["recording"].append(timed(module.run, arg))
            recorder.pause()
            seconds["paused"].append(timed(module.run, arg))
            recorder.stop()
            counted = sum(recorder.counts.values())
        return {"python": sys.version.split()[0], "recorder": recorder.method, "counted_calls": counted,
                **{key: statistics.median(values) for key, values in seconds.items()}}


def report(name: str, unit: str, per: int, figures: dict) -> None:
    bare = figures["bare"]
    print(f"{name}: python {figures['python']}, {figures['recorder']}, {figures['counted_calls']} calls counted per run")
    for key in ("bare", "recording", "paused"):
        print(f"  {key:<10} {figures[key] / per * 1e6:10.2f} µs/{unit}   {figures[key] / bare:6.3f}x")
    extra = (figures["recording"] - bare) / max(1, figures["counted_calls"])
    print(f"  cost per counted call {extra * 1e9:.0f} ns")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", action="append", default=[], help="also run the `calls` workload under this one")
    parser.add_argument("--calls-only-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.calls_only_json:
        print(json.dumps(measure(CALLS, args.calls, args.runs)))
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        print("train: skipped (no torch here)")
    else:
        torch.set_num_threads(1)  # steadier on a shared machine
        report("train", "step", args.steps, measure(TRAIN, args.steps, args.runs))
    report("calls", "call", args.calls, measure(CALLS, args.calls, args.runs))
    for python in args.python:
        out = subprocess.run([python, os.path.abspath(__file__), "--calls-only-json", "--calls", str(args.calls),
                              "--runs", str(args.runs)], capture_output=True, text=True, check=True)
        report("calls", "call", args.calls, json.loads(out.stdout))


if __name__ == "__main__":
    main()
