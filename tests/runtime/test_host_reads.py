"""The torch-function mode behind `perflsp record`: which tensors are bound for the compute device,
and which calls read them on the host, on the line of the user's code that made them.

The user's code is a real module in a temporary workspace, run in this process on the CPU.
"""
from __future__ import annotations

import contextlib
import importlib.util
import warnings

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from perflsp.runtime.cuda_syncs import SyncWatch
from perflsp.runtime.host_reads import HostReadMode, QuietOptimizer
from perflsp.runtime.hot_record import WorkspaceFiles
from perflsp.runtime.line_record import LineRecorder

PROGRAM = '''
import torch
from torch import nn

device = torch.device("cpu")  # what a program without a GPU resolves its device to


def model():
    net = nn.Linear(4, 2).to(device)
    return net


def step(net, x):
    out = net(x.to(device))  # line: move
    loss = out.square().mean()
    loss.backward()
    grad = net.weight.grad.norm().item()  # line: grad read
    value = f"{loss:.3f}"  # line: format
    kept = out[out > 0]  # line: mask
    host = out.detach().to("cpu")  # line: to host
    return value, grad, kept, host


def ema(net):
    shadow = {k: v.clone() for k, v in net.state_dict().items()}  # line: state dict
    return float(shadow["bias"].sum())  # line: ema read


def host_only():
    lengths = torch.tensor([3, 4])
    made = torch.zeros(2, device=device)  # line: factory
    return lengths.max().item(), made.sum().item()  # line: host read


def from_a_worker():
    data = [torch.randn(4) for _ in range(8)]
    loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=1)
    return next(iter(loader))


def send(helper, x):
    return helper.move(x)  # to the device


def keep(helper, x):
    return helper.move(x)


def warn_sync():
    import warnings
    warnings.warn("called a synchronizing CUDA operation", UserWarning)  # line: sync warning
'''


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    spec = importlib.util.spec_from_file_location("perflsp_test_prog", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = WorkspaceFiles(str(tmp_path), str(tmp_path))

    def line(mark):
        return "prog.py", next(i for i, t in enumerate(PROGRAM.splitlines(), 1) if t.endswith(f"# line: {mark}"))

    return module, files, line


@contextlib.contextmanager
def recording(files, candidates):
    """The mode with the line recorder that tells it which candidate line is running, as in a record."""
    lines = LineRecorder(candidates, files.relative_path)
    mode = HostReadMode(files.relative_path, candidates, lines.counts)
    lines.start()
    try:
        with mode:
            yield mode
    finally:
        lines.stop()


def _recorded(mode, line):
    return {counter: amount for (at, counter), amount in mode.tally.totals.items() if at == line}


def test_reads_of_tensors_sent_to_the_device_are_counted_where_the_program_made_them(program):
    module, files, line = program
    with recording(files, [line("move")]) as mode:
        net = module.model()
        mode.armed = True
        module.step(net, torch.randn(3, 4))
        mode.end_step()
    assert net.weight in mode.bound and net.bias in mode.bound  # a module moved to the device
    assert _recorded(mode, line("move")).get("h2d") == 1  # the input came from the host
    assert ("cpu", False, "float32") in mode.operands[line("move")]
    assert _recorded(mode, line("grad read")) == {"read:item": 1}  # a bound parameter's gradient is bound
    assert _recorded(mode, line("format")) == {"read:format": 1}
    assert _recorded(mode, line("mask")) == {"read:data-dependent-shape": 1}
    assert _recorded(mode, line("to host")) == {"read:to-host": 1}  # `.to("cpu")` spells the host


def test_the_mark_travels_through_state_dict_and_stays_off_host_tensors(program):
    module, files, line = program
    with recording(files, [line("factory")]) as mode:
        net = module.model()
        mode.armed = True
        module.ema(net)
        module.host_only()
        mode.end_step()
    assert _recorded(mode, line("ema read")) == {"read:float": 1}
    assert _recorded(mode, line("host read")) == {"host-read": 1, "read:item": 1}
    assert mode.operands[line("factory")] == {("cpu", True, "float32"): 2}  # made with device=


def test_nothing_is_counted_before_the_recorders_are_armed(program):
    module, files, line = program
    with recording(files, [line("move")]) as mode:
        net = module.model()
        module.step(net, torch.randn(3, 4))
        mode.end_step()
    assert mode.tally.totals == {} and mode.operands == {}


def test_cuda_sync_warnings_are_counted_on_the_users_line_once_armed(program):
    module, files, line = program
    mode = HostReadMode(files.relative_path, [])
    levels = []
    with SyncWatch(mode, available=lambda: True, set_mode=levels.append) as watch:
        with pytest.warns(UserWarning, match="synchronizing"):
            module.warn_sync()  # not armed yet: the warm-up's syncs are not the steps', and the warning shows
        watch.arm()
        module.warn_sync()
        mode.reading = True  # a read the mode counts already, with its stall time
        module.warn_sync()
        mode.reading = False
        with pytest.warns(UserWarning, match="unrelated"):
            warnings.warn("unrelated", UserWarning)
    mode.end_step()
    assert levels == ["warn", "default"]
    assert _recorded(mode, line("sync warning")) == {"sync": 1}


def test_without_cuda_the_sync_watch_stays_off(program):
    module, files, _ = program
    mode = HostReadMode(files.relative_path, [])
    levels = []
    with SyncWatch(mode, available=lambda: False, set_mode=levels.append) as watch:
        watch.arm()
    assert levels == []


def test_a_librarys_own_device_argument_is_not_the_programs_device(program):
    module, files, line = program
    with recording(files, [line("factory")]) as mode:
        mode.armed = True
        batch = module.from_a_worker()  # rebuilt by torch with `empty(..., device=storage.device)`
        module.host_only()  # a factory the program calls with `device=`: bound
        mode.end_step()
    assert batch not in mode.bound
    assert mode.operands[line("factory")] == {("cpu", True, "float32"): 2}


def test_a_move_made_inside_a_library_counts_only_where_the_programs_line_asks_for_one(program, tmp_path_factory):
    module, files, line = program
    library = tmp_path_factory.mktemp("site") / "helper.py"  # outside the workspace: a library
    library.write_text("import torch\n\nDEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n\n\n"
                       "def move(x):\n    return x.to(DEVICE)\n")
    spec = importlib.util.spec_from_file_location("perflsp_test_helper", library)
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    with recording(files, []) as mode:
        mode.armed = True
        kept = module.keep(helper, torch.randn(2))
        sent = module.send(helper, torch.randn(2))
    assert kept not in mode.bound and sent in mode.bound


def test_the_optimizers_own_calls_are_not_seen_and_zero_grad_is_restored_after():
    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    originals = (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad)
    net = nn.Linear(4, 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    quiet = QuietOptimizer().install()
    try:
        with Seen() as seen:
            net(torch.ones(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            net(torch.ones(2, 4)).sum().backward()
            net.zero_grad()
    finally:
        quiet.remove()
    assert seen.names.count("linear") == 2 and seen.names.count("backward") == 2
    assert "__get__" not in seen.names and "__set__" not in seen.names  # no `p.grad` of theirs
    assert net.weight.grad is None
    assert (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad) == originals
    with Seen() as seen:
        net.zero_grad()
        net(torch.ones(2, 4)).sum().backward()
        opt.zero_grad()
    assert "__set__" in seen.names  # removed: the program's own calls are seen again
