"""What `perflsp record`'s recorders cost a running program (issue 19: at most 1.5× the step).

    python bench/record_overhead.py [--steps 300] [--runs 5] [--width 256]

A small CPU training loop (torch, one thread): 4 residual blocks of Linear(width) on a batch of 32,
cross-entropy, SGD, a `.to(device)` of each batch and a `.item()` of each loss, as in a real
project. Timed bare and with the recorders on and armed, as during the recorded steps: line
events in the code objects that hold a candidate (the loop's), and the torch-function mode that
marks device-bound tensors and counts host reads, which sees every torch call of the step but
the optimizer's own (`QuietOptimizer`).
Interleaved over --runs rounds; the median is reported, with the machine's load average.
The recorders cost a fixed time per torch call: the default width (a 1.3 ms step of ~35 calls)
is the worst case; `--width 1024` is a step whose calls do some work, as in a real model.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from hot_overhead import MODEL, load, timed  # bench/ is the script's folder: the same model and timer

TRAIN = '''
import torch

device = torch.device("cpu")

''' + MODEL + '''

def run(steps, net=None, opt=None):
    torch.manual_seed(0)
    net = Net(WIDTH).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    data = [(torch.randn(32, WIDTH), torch.randint(0, 10, (32,))) for _ in range(8)]
    losses = []
    for i in range(steps):
        x, y = data[i % len(data)]
        x, y = x.to(device), y.to(device)  # candidate
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())  # candidate
    return losses
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--width", type=int, default=256, help="the model's width (default: the worst case)")
    args = parser.parse_args()

    import torch

    from perflsp.runtime.host_reads import HostReadMode, QuietOptimizer
    from perflsp.runtime.hot_record import WorkspaceFiles
    from perflsp.runtime.line_record import LineRecorder

    torch.set_num_threads(1)  # steadier on a shared machine
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as workspace:
        path = os.path.join(workspace, "train.py")
        with open(path, "w") as handle:
            handle.write(TRAIN.replace("WIDTH", str(args.width)))
        candidates = [("train.py", i) for i, text in enumerate(TRAIN.splitlines(), 1) if text.endswith("# candidate")]
        module = load(path, "train")
        module.run(max(1, args.steps // 10))  # warm-up: allocator, first-call setup
        files = WorkspaceFiles(workspace, workspace)
        seconds = {"bare": [], "recording": []}
        method = ""
        for _ in range(args.runs):
            seconds["bare"].append(timed(module.run, args.steps))
            lines = LineRecorder(candidates, files.relative_path)
            mode = HostReadMode(files.relative_path, candidates, lines.counts)
            method = lines.method
            quiet = QuietOptimizer().install()
            lines.start()
            with mode:
                mode.armed = True
                seconds["recording"].append(timed(module.run, args.steps))
            lines.stop()
            quiet.remove()
    bare = statistics.median(seconds["bare"])
    recording = statistics.median(seconds["recording"])
    print(f"train, width {args.width}: python {sys.version.split()[0]}, torch {torch.__version__}, {method}, load average "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after, {os.cpu_count()} cores")
    for key, value in (("bare", bare), ("recording", recording)):
        print(f"  {key:<10} {value / args.steps * 1e6:10.1f} µs/step   {value / bare:6.3f}x")


if __name__ == "__main__":
    main()
