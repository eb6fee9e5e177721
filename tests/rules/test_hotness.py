"""The per-step model across a project: entry points, cold contexts, periodic code, the call graph.

Each test writes a small project to disk and checks it the way `perflsp check` does (summaries,
project graph, then the rules), so imports, packages and re-exports are resolved for real.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from perflsp.hot_file import HOT_VERSION
from perflsp.rules.runner import Cache, check_paths, discover


def _project(root: Path, files: Dict[str, str], **overrides) -> List[Tuple[str, int, str, str]]:
    """(relative path, row, code, hot message) of every finding in the project."""
    (root / "perflsp.toml").write_text("")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    # Every rule, and PFL101 wherever the code is per step (it asks for stronger evidence by
    # default, which test_sync_rules_need_direct_evidence covers): hotness is the subject here.
    defaults = {"preview": True, "rules": {"PFL101": {"call-chains": True}}}
    results = check_paths(discover([str(root)]), {**defaults, **overrides}, jobs=1)
    return [(Path(r.path).relative_to(root).as_posix(), f.start.row, f.code, f.hot.message if f.hot else "")
            for r in results for f in r.findings]


def _rows(found, code="PFL101") -> List[Tuple[str, int]]:
    return [(path, row) for path, row, c, _ in found if c == code]


def test_module_forward_is_an_entry_point_through_imports(tmp_path):
    found = _project(tmp_path, {"net.py": """
        from torch import nn

        class Net(nn.Module):
            def forward(self, x):
                return x.sum().item()

        class NotAModule:
            def forward(self, x):
                return x.sum().item()
        """})
    assert _rows(found) == [("net.py", 6)]
    assert "in `Net.forward`, which runs on every forward pass (`nn.Module.forward`)" in found[0][3]


def test_trainer_subclass_across_modules_and_its_helpers(tmp_path):
    found = _project(tmp_path, {
        "pkg/__init__.py": "from .stats import log_stats\n",
        "pkg/stats.py": """
            def log_stats(loss):
                return loss.mean().item()

            def unused(loss):
                return loss.mean().item()
            """,
        "pkg/base.py": """
            from transformers import Trainer

            class BaseTrainer(Trainer):
                pass
            """,
        "pkg/sft.py": """
            from pkg import log_stats
            from .base import BaseTrainer

            class SFTTrainer(BaseTrainer):
                def compute_loss(self, model, inputs):
                    loss = model(**inputs).loss
                    log_stats(loss)
                    return loss
            """,
    })
    assert _rows(found) == [("pkg/stats.py", 3)]
    message = found[0][3]
    assert "in `log_stats`, called from `SFTTrainer.compute_loss` (sft.py:8)" in message
    assert "the HF `Trainer` calls on every training step" in message


def test_method_name_alone_is_not_an_entry_point(tmp_path):
    found = _project(tmp_path, {"sched.py": """
        class Schedule:
            def step(self, t):
                return t.max().item()

            def training_step(self, batch):
                return batch.sum().item()
        """})
    assert _rows(found) == []


def test_framework_class_inside_its_own_repository(tmp_path):
    found = _project(tmp_path, {
        "torchmetrics/__init__.py": "",
        "torchmetrics/metric.py": """
            class Metric:
                def update(self, preds):
                    return preds.sum().item()
            """,
        "torchmetrics/functional/__init__.py": "",
        "torchmetrics/functional/acc.py": """
            import torch

            def _acc_update(preds: torch.Tensor, target: torch.Tensor):
                return int((preds == target).sum())
            """,
        "torchmetrics/acc.py": """
            from torchmetrics.metric import Metric
            from torchmetrics.functional.acc import _acc_update

            class Accuracy(Metric):
                def update(self, preds, target):
                    self.correct += _acc_update(preds, target)
            """,
    })
    assert ("torchmetrics/metric.py", 4) in _rows(found)
    assert ("torchmetrics/functional/acc.py", 5) in _rows(found, "PFL103")


def test_cold_contexts_even_with_loops(tmp_path):
    found = _project(tmp_path, {"model.py": """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self, sizes):
                super().__init__()
                self.scale = [torch.tensor(s).item() for s in sizes]
                self.table = build_table(sizes)

            def reset_parameters(self):
                for p in self.parameters():
                    p.data.norm().item()

            def forward(self, x):
                if self.cache is None:
                    self.cache = x.max().item()
                return x

        def build_table(sizes):
            for s in sizes:
                torch.tensor(s).item()

        def prepare_data(paths):
            for p in paths:
                torch.load(p).sum().item()
        """})
    assert _rows(found) == []


def test_per_step_evidence_beats_a_cold_name(tmp_path):
    found = _project(tmp_path, {"model.py": """
        from torch import nn

        class Net(nn.Module):
            def forward(self, x):
                self.reset_parameters()
                return x

            def reset_parameters(self):
                for p in self.parameters():
                    p.norm().item()
        """})
    assert _rows(found) == [("model.py", 11)]
    assert "in `Net.reset_parameters`, called from `Net.forward` (line 6)" in found[0][3]


def test_periodic_code_is_amortised_but_accumulation_boundaries_stay_hot(tmp_path):
    found = _project(tmp_path, {"train.py": """
        def train(model, loader, optimizer, log_every, accum_steps):
            for step, batch in enumerate(loader):
                loss = model(batch)
                if step % log_every == 0:
                    print(loss.item())
                    log_metrics(loss)
                if (step + 1) % accum_steps == 0:
                    print(loss.item())

        def log_metrics(loss):
            for _ in range(3):
                loss.item()
        """})
    assert _rows(found) == [("train.py", 9)]  # log_metrics is only called every N steps


def test_step_loops_make_callees_per_step_and_other_loops_nothing(tmp_path):
    found = _project(tmp_path, {
        "steps.py": """
            def train_step(batch):
                return batch.sum().item()

            def summarise(t):
                return t.sum().item()
            """,
        "main.py": """
            from steps import summarise, train_step

            def report(values):
                for v in values:
                    summarise(v)
                    v.item()

            if __name__ == "__main__":
                for batch in train_loader:
                    train_step(batch)
            """,
    })
    assert sorted(_rows(found)) == [("steps.py", 3)]  # `report` is not known to run per step
    hot = dict(((p, r), m) for p, r, c, m in found)
    assert "called inside a step loop (main.py:11)" in hot[("steps.py", 3)]


def test_test_files_are_not_hot(tmp_path):
    source = """
        def test_loop(loader):
            for batch in loader:
                batch.sum().item()
        """
    found = _project(tmp_path, {"tests/test_a.py": source, "conftest.py": source, "a_test.py": source})
    assert _rows(found) == []


def test_hot_functions_config_covers_subclasses(tmp_path):
    files = {"runner.py": """
        class Runner:
            def run(self, x):
                return x.item()

        class Fast(Runner):
            def run(self, x):
                return x.item()

        class Other:
            def run(self, x):
                return x.item()
        """}
    assert _rows(_project(tmp_path, files, **{"hot-functions": ["Runner.run"]})) == [("runner.py", 4), ("runner.py", 8)]


def test_markers(tmp_path):
    found = _project(tmp_path, {"m.py": """
        import perflsp

        @perflsp.hot
        def a(t):
            return t.item()

        # perflsp: hot
        def b(t):
            return t.item()
        """})
    assert _rows(found) == [("m.py", 6), ("m.py", 10)]


def test_lightning_hooks(tmp_path):
    found = _project(tmp_path, {"lit.py": """
        import lightning.pytorch as pl

        class Lit(pl.LightningModule):
            def training_step(self, batch, batch_idx):
                return batch.sum().item()

            def on_train_batch_end(self, outputs, batch, batch_idx):
                return outputs.item()

            def configure_optimizers(self):
                return [p.norm().item() for p in self.parameters()]
        """})
    assert _rows(found) == [("lit.py", 6), ("lit.py", 9)]


def test_setup_rules_report_in_init_and_per_execution_rules_do_not(tmp_path):
    found = _project(tmp_path, {"m.py": """
        import torch
        from torch import nn
        from torch.utils.data import DataLoader

        class Net(nn.Module):
            def __init__(self, data):
                super().__init__()
                self.loader = DataLoader(data, batch_size=32)
                self.table = torch.randn(8).cuda()
        """})
    codes = {c for _, _, c, _ in found}
    assert "PFL601" in codes and "PFL402" not in codes


@pytest.mark.parametrize("files", [
    {"a.py": "from b import g\ndef f(x):\n    return g(x)\n", "b.py": "from a import f\ndef g(x):\n    return f(x)\n"},
    {"a.py": "from b import *\nfrom nowhere import thing\nthing.attr.call()\n", "b.py": "from a import *\n"},
    {"pkg/__init__.py": "from .pkg import pkg\n", "pkg/pkg.py": "from . import pkg\n"},
])
def test_cycles_star_imports_and_unresolved_names_only_make_less_code_hot(tmp_path, files):
    _project(tmp_path, files)


def test_warm_run_reanalyses_only_what_changed(tmp_path):
    files = {
        "helpers.py": "def helper(t):\n    return t.item()\n",
        "model.py": "from torch import nn\nfrom helpers import helper\n\nclass Net(nn.Module):\n"
                    "    def forward(self, x):\n        return helper(x)\n",
        "other.py": "def unrelated(t):\n    return t\n",
    }
    _project(tmp_path, files)
    cache = Cache(tmp_path / ".perflsp_cache")
    paths = discover([str(tmp_path)])
    check_paths(paths, jobs=1, cache=cache)
    (tmp_path / "model.py").write_text(files["model.py"].replace("return helper(x)", "return x"))
    results = {Path(r.path).name: r for r in check_paths(paths, jobs=1, cache=Cache(tmp_path / ".perflsp_cache"))}
    assert results["other.py"].cached
    assert not results["model.py"].cached and not results["helpers.py"].cached  # helper is no longer per step
    assert results["helpers.py"].findings == []


def test_framework_methods_that_run_once_per_epoch_or_log_interval(tmp_path):
    found = _project(tmp_path, {"m.py": """
        from lightning.pytorch.loggers import Logger
        from torchmetrics import Metric

        class MyLogger(Logger):
            def log_metrics(self, metrics, step):
                for key, val in metrics.items():
                    print(key, val.cpu())

        class MyMetric(Metric):
            def compute(self):
                return [v.item() for v in self.values]
        """})
    assert [c for _, _, c, _ in found if c.startswith("PFL1")] == []


def test_one_off_work_silences_even_setup_rules(tmp_path):
    found = _project(tmp_path, {"ds.py": """
        from torch.utils.data import DataLoader

        class Images:
            def process(self):
                loader = DataLoader(self.raw, batch_size=8)
                for batch in loader:
                    self.out.append(batch.cuda().sum().item())

        def debug_print(t):
            for row in t:
                print(row.contiguous().view(-1))

        def train(data):
            return DataLoader(data, batch_size=8)
        """})
    assert [(row, code) for _, row, code, _ in found] == [(15, "PFL601"), (15, "PFL602")]


def test_configuration_setters_are_cold_unless_called_per_step(tmp_path):
    found = _project(tmp_path, {"m.py": """
        import torch
        from torch import nn

        class Attn(nn.Module):
            def set_window_size(self, size):
                self.coords = torch.log(1.0 + torch.arange(size, device="cuda").abs())

            def forward(self, x):
                return x
        """})
    assert found == []


def test_subclasses_of_any_torch_nn_class_and_model_bases(tmp_path):
    found = _project(tmp_path, {"m.py": """
        import torch.nn as nn
        from transformers import PreTrainedModel

        def _manual_norm(x):
            return x.mean().item()

        class Norm(nn.LayerNorm):
            def forward(self, x):
                return _manual_norm(x)

        class Model(PreTrainedModel):
            def forward(self, x):
                return x.max().item()
        """})
    assert _rows(found) == [("m.py", 6), ("m.py", 14)]


def test_an_early_return_unless_every_n_steps_makes_the_rest_periodic(tmp_path):
    found = _project(tmp_path, {"cb.py": """
        from lightning.pytorch import Callback

        class Monitor(Callback):
            def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
                if batch_idx % self.every != 0:
                    return
                for name, value in outputs.items():
                    print(name, value.item())

        class Always(Callback):
            def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
                if batch_idx % self.accumulate_steps != 0:
                    return
                print(outputs["loss"].item())
        """})
    assert _rows(found) == [("cb.py", 15)]


def test_hf_trainer_callbacks_and_fastai_callbacks_run_per_step_hooks_per_step(tmp_path):
    found = _project(tmp_path, {"callbacks.py": """
        from fastai.callback.core import Callback
        from transformers import TrainerCallback

        class GradNorm(TrainerCallback):
            def on_step_end(self, args, state, control, model=None, **kwargs):
                print(model.weight.grad.norm().item())

            def on_log(self, args, state, control, model=None, **kwargs):
                print(model.weight.norm().item())

        class Watch(Callback):
            def after_loss(self):
                print(self.learn.loss.item())

            def after_epoch(self):
                print(self.learn.loss.item())
        """})
    assert [(row, hot) for _, row, code, hot in found if code == "PFL101"] == [
        (7, "in `GradNorm.on_step_end`, which the HF `Trainer` calls on every step"),
        (14, "in `Watch.after_loss`, which fastai's `Learner` calls on every batch")]


def test_ignite_iteration_handlers_and_metric_updates_run_per_step(tmp_path):
    found = _project(tmp_path, {"train.py": """
        from ignite.engine import Engine, Events
        from ignite.metrics import Metric

        def run(trainer):
            @trainer.on(Events.ITERATION_COMPLETED)
            def log_loss(engine):
                print(engine.state.output.item())

            @trainer.on(Events.ITERATION_COMPLETED(every=100))
            def log_every(engine):
                print(engine.state.output.item())

            @trainer.on(Events.EPOCH_COMPLETED)
            def log_epoch(engine):
                print(engine.state.output.item())

        class Hits(Metric):
            def update(self, output):
                self.hits += (output[0].argmax(1) == output[1]).sum().item()

            def compute(self):
                return self.hits.item()
        """})
    assert [(row, hot) for _, row, code, hot in found if code == "PFL101"] == [
        (8, "in `run.log_loss`, which ignite runs on every iteration (`@trainer.on(Events.ITERATION_COMPLETED)`)"),
        (20, "in `Hits.update`, which ignite calls on every iteration of an engine the metric is attached to")]


def test_composer_callbacks_and_mmengine_hooks_run_their_batch_events_per_step(tmp_path):
    found = _project(tmp_path, {"hooks.py": """
        from composer import Callback
        from mmengine.hooks import Hook

        class Speed(Callback):
            def batch_end(self, state, logger):
                print(state.loss.item())

            def epoch_end(self, state, logger):
                print(state.loss.item())

        class Ema(Hook):
            def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
                print(outputs["loss"].item())

            def after_train_epoch(self, runner):
                print(runner.loss.item())
        """})
    assert [(row, hot) for _, row, code, hot in found if code == "PFL101"] == [
        (7, "in `Speed.batch_end`, which composer's `Trainer` calls on every batch"),
        (14, "in `Ema.after_train_iter`, which mmengine's runner calls on every iteration")]


def test_loops_in_code_not_known_to_run_per_step_are_not_hot(tmp_path):
    found = _project(tmp_path, {"util.py": """
        def summarize(values):
            for v in values:
                print(v.item())
            return [v.item() for v in values]
        """})
    assert found == []


def test_a_conditional_call_to_a_one_off_method_stays_cold(tmp_path):
    found = _project(tmp_path, {"lora.py": """
        from torch import nn

        class Lora(nn.Module):
            def merge(self):
                for p in self.parameters():
                    p.norm().item()

            def unmerge(self):
                for p in self.parameters():
                    p.norm().item()

            def forward(self, x):
                if self.merged:
                    self.unmerge()
                return x

        class Always(Lora):
            def forward(self, x):
                self.merge()
                return x
        """})
    assert _rows(found) == [("lora.py", 7)]  # `merge` runs on every forward of `Always`


def test_only_the_modulo_itself_decides_an_accumulation_boundary(tmp_path):
    found = _project(tmp_path, {"loop.py": """
        def train(model, loader, interval):
            for step, batch in enumerate(loader):
                is_accumulating = step % 4 != 0
                loss = model(batch)
                if not is_accumulating and step % interval == 0:
                    print(loss.item())
        """})
    assert _rows(found) == []


def test_a_recorded_run_is_the_strongest_evidence(tmp_path):
    (tmp_path / ".perflsp").mkdir()
    (tmp_path / ".perflsp" / "hot.json").write_text(json.dumps({
        "version": HOT_VERSION, "steps": 40, "step_source": "optimizer.step", "command": "python train.py",
        "measured_at": "2026-12-01T12:00:00Z", "functions": [
            {"file": "lib.py", "qualname": "scale", "first_line": 2, "calls": 40, "steps": 40},
            {"file": "lib.py", "qualname": "Net.forward", "first_line": 8, "calls": 2, "steps": 1},
        ]}))
    found = _project(tmp_path, {"lib.py": """
        def scale(t):
            return t.max().item()

        from torch import nn

        class Net(nn.Module):
            def forward(self, x):
                return x.sum().item()
        """})
    assert _rows(found) == [("lib.py", 3)]
    assert found[0][3] == "in `scale`, measured: 40 calls in 40 steps"


def test_a_name_bound_to_a_logging_step_test_is_periodic(tmp_path):
    found = _project(tmp_path, {"loop.py": """
        def train(model, loader, log_every, accum_freq):
            for i_accum, batch in enumerate(loader):
                loss = model(batch)
                is_console_step = (i_accum % log_every == 0) or i_accum == 0
                is_metric_step = is_console_step or i_accum % 100 == 0
                if is_metric_step:
                    print(loss.item())
                if (i_accum + 1) % accum_freq == 0:
                    print(loss.item())
        """})
    assert _rows(found) == [("loop.py", 10)]  # the divisor names the accumulation boundary


def test_a_validation_every_n_steps_or_at_the_last_step_is_periodic(tmp_path):
    found = _project(tmp_path, {"loop.py": """
        def train(model, loader, cfg, total):
            for step, batch in enumerate(loader):
                loss = model(batch)
                is_last_step = step == total
                is_valid_step = step % cfg.test_freq == 0
                if is_last_step or (cfg.test_freq > 0 and is_valid_step):
                    print(loss.item())
                if is_last_step or (step + 1) % cfg.grad_accum_steps == 0:
                    print(loss.item())
        """})
    assert _rows(found) == [("loop.py", 10)]  # every optimizer step, or the last one: per step


def test_back_to_back_reads_are_one_finding_at_the_first(tmp_path):
    found = _project(tmp_path, {"loop.py": """
        def train(model, loader):
            for batch in loader:
                token_loss, f0_loss = model(batch)
                for part in token_loss.unbind():
                    print(part.item())
                total = token_loss.item()
                total += f0_loss.item()

                n = (batch > 0).sum().item()
                model.step()
                print(f0_loss.item())
                if f0_loss.item() > 1.0:
                    print("f0 loss out of range", f0_loss.item())
        """})
    # 6 waits (the inner loop's last statement drains the queue), then `model.step()` queues work.
    assert _rows(found) == [("loop.py", 6), ("loop.py", 12)]  # 13 and 14 follow 12
    [result] = check_paths(discover([str(tmp_path)]), {"preview": True}, jobs=1)
    first = next(f for f in result.findings if f.code == "PFL101" and f.start.row == 6)
    assert "(with `token_loss.item()`, `f0_loss.item()`, `(batch > 0).sum().item()` right after it" in first.message


def test_a_grid_of_settings_is_not_a_step_loop(tmp_path):
    sweep = """
        import itertools
        import torch

        def bench(device):
            for batch, steps in {iterable}:
                mask = torch.rand(batch, steps, device=device) < 0.1
                print(mask.float().mean().item())
        """
    assert _rows(_project(tmp_path, {"bench.py": sweep.format(iterable="itertools.product(BATCHES, STEPS)")})) == []
    assert _rows(_project(tmp_path, {"bench.py": sweep.format(iterable="zip(BATCHES, STEPS)")})) == [("bench.py", 8)]


def test_src_layouts_and_relative_imports_resolve(tmp_path):
    found = _project(tmp_path, {
        "src/mylib/__init__.py": "from .ops import scale\n",
        "src/mylib/ops.py": "def scale(t):\n    return t.max().item()\n",
        "src/mylib/models/__init__.py": "",
        "src/mylib/models/net.py": """
            from torch import nn
            from .. import scale

            class Net(nn.Module):
                def forward(self, x):
                    return scale(x)
            """,
    })
    assert _rows(found) == [("src/mylib/ops.py", 2)]
    assert "called from `Net.forward` (net.py:7)" in found[0][3]


def test_a_logging_predicate_makes_what_it_guards_periodic(tmp_path):
    found = _project(tmp_path, {"trainer.py": """
        class Trainer:
            def train_step(self, batch):
                loss = self.model(batch)
                loss.backward()
                if self.metrics.should_log(self.step):
                    print(loss.item())
                if not self.metrics.should_log(self.step):
                    return
                self.log(grad_norm.item())

            def eval_and_log(self, loss):
                if self.should_evaluate_now:
                    print(loss.item())
                print(loss.item())

            def fit(self, loader):
                for batch in loader:
                    self.train_step(batch)
                    self.eval_and_log(batch)
        """})
    assert _rows(found) == [("trainer.py", 15)]


def test_a_cache_rebuilt_only_when_not_ready_is_a_lazy_init(tmp_path):
    found = _project(tmp_path, {"rope.py": """
        import torch

        class Rotary(torch.nn.Module):
            def forward(self, x, positions):
                if not self._cache_ready(positions):
                    self._rebuild(int(positions.max().item()) + 1)
                if not self.enabled:
                    x = x * positions.max().item()
                return x
        """})
    assert _rows(found) == [("rope.py", 9)]  # `enabled` says nothing about a cache


def test_a_comprehension_over_batches_is_not_a_step_loop(tmp_path):
    found = _project(tmp_path, {"sampler.py": """
        def gather_losses(loss_batches, batch_sizes):
            return [x.item() for y, bs in zip(loss_batches, batch_sizes) for x in y[:bs]]
        """})
    assert found == []


def test_assert_messages_and_raise_statements_run_only_on_failure(tmp_path):
    found = _project(tmp_path, {"net.py": """
        import torch

        class Net(torch.nn.Module):
            def forward(self, x, grid):
                assert x.dim() == 3, f"bad grid {grid.tolist()} max {grid.max().item()}"
                if x.shape[0] > 4:
                    raise ValueError(f"batch too large: {describe(x)} {x.sum().item()}")
                assert grid.min().item() >= 0
                return x

        def describe(x):
            return x.mean().item()
        """})
    assert _rows(found) == [("net.py", 9)]
    assert ("net.py", 6) not in _rows(found, "PFL102")


def test_an_evaluation_run_every_n_steps_is_amortised_but_a_script_main_still_trains(tmp_path):
    found = _project(tmp_path, {"train.py": """
        def calc_loss_loader(model, data_loader):
            total = 0.0
            for batch in data_loader:
                total += model(batch).item()
            return total

        def train(model, loader, val_loader, eval_every):
            for step, batch in enumerate(loader):
                loss = model(batch)
                if step % eval_every == 0:
                    calc_loss_loader(model, val_loader)

        def main():
            train(build(), make_loader(), make_loader(), 100)

        if __name__ == "__main__":
            main()
        """})
    assert _rows(found) == []  # the only loop with `.item()` is an evaluation every 100 steps
    found = _project(tmp_path, {"train.py": """
        def train(model, loader):
            for batch in loader:
                print(model(batch).item())

        def main():
            train(build(), make_loader())

        if __name__ == "__main__":
            main()
        """})
    assert _rows(found) == [("train.py", 4)]


def test_a_block_that_ends_the_run_is_a_failure_path(tmp_path):
    found = _project(tmp_path, {"train.py": """
        import math
        import sys

        def train(model, loader):
            for batch in loader:
                loss = model(batch)
                if not math.isfinite(loss.item()):
                    print("loss is", loss.item())
                    sys.exit(1)
        """})
    assert _rows(found) == [("train.py", 8)]


def test_a_branch_that_warns_is_a_failure_path(tmp_path):
    found = _project(tmp_path, {"decoder.py": """
        import warnings

        import torch

        class Decoder(torch.nn.Module):
            def forward(self, f0):
                if self.check and not self.in_range(f0):
                    warnings.warn(f"f0 out of range: max {f0.max().item()} min {f0.min().item()}")
                    f0 = f0.clamp(0, self.size - 1)
                return self.embedding(f0)
        """})
    assert _rows(found) == []


def test_sync_rules_need_direct_evidence(tmp_path):
    files = {"train.py": """
        import torch

        class Net(torch.nn.Module):
            def forward(self, x):
                scale = x.abs().max().item()
                for row in x:
                    print(row.sum().item())
                return x / scale

        def metrics(batch):
            return {"score": batch["score"].mean().item(), "loss": batch["loss"].cuda().mean().item()}

        def train(model, loader):
            for batch in loader:
                loss = model(batch["x"])
                print(loss.item())
                metrics(batch)
        """}
    strict = _project(tmp_path, files, rules={})
    # In `forward` itself and in the step loop: reported. In `metrics`, reached through a call, and
    # in the loop nested in `forward`: only the tensor moved to the GPU.
    assert _rows(strict) == [("train.py", 6), ("train.py", 12), ("train.py", 17)]
    # The two reads of line 12 wait once: one finding.
    assert _rows(_project(tmp_path, files)) == [("train.py", 6), ("train.py", 8), ("train.py", 12), ("train.py", 17)]


def test_a_loop_whose_body_calls_backward_is_a_training_loop(tmp_path):
    found = _project(tmp_path, {"train.py": """
        import torch

        def fit(model, opt, buffer, tepoch, n_epochs):
            for epoch in range(n_epochs):
                for batch in buffer.get(64):
                    loss = model(batch).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    clip = loss.detach().abs().max().item()
                print(loss.item())

        def run(model, opt, tepoch):
            for i, batch in enumerate(tepoch):
                loss = model(batch).mean()
                scaler.scale(loss).backward()
                log(loss.item())
        """})
    # The epoch loop around the training loop is not one: only the loop whose own body calls
    # `backward()` is.
    assert [(row, why) for _, row, code, why in found if code == "PFL101"] == [
        (11, "inside the training loop `for batch in buffer.get(64)` at line 6"),
        (18, "inside the training loop `for i, batch in enumerate(tepoch)` at line 15"),
    ]


def test_calling_an_object_runs_its_class_call_method(tmp_path):
    found = _project(tmp_path, {
        "utils/__init__.py": "",
        "utils/loss.py": """
            class ComputeLoss:
                def __call__(self, pred, targets):
                    return self.match(pred, targets).sum()

                def match(self, pred, targets):
                    return pred[targets > 0].max().item()

            class Unused:
                def __call__(self, pred):
                    return pred.max().item()
            """,
        "train.py": """
            from utils.loss import ComputeLoss

            def train(model, loader, opt):
                compute_loss = ComputeLoss()
                for imgs, targets in loader:
                    loss = compute_loss(model(imgs), targets)
                    loss.backward()
                    opt.step()
            """,
    })
    assert _rows(found) == [("utils/loss.py", 7)]
    assert "called from `ComputeLoss.__call__` (line 4), called inside a step loop (train.py:7)" in found[0][3]


def test_attributes_bound_to_objects_and_annotated_parameters(tmp_path):
    found = _project(tmp_path, {
        "units.py": """
            class TrainUnit:
                def __call__(self, batch):
                    raise NotImplementedError

            class DpoUnit(TrainUnit):
                def __call__(self, batch):
                    return batch.chosen.sum().item()

            class Decoder:
                def step(self, state):
                    return state.argmax().item()
            """,
        "trainer.py": """
            from typing import Optional
            from units import Decoder, TrainUnit

            class Trainer:
                decoder: "Decoder"  # a forward reference

                def __init__(self, unit: Optional[TrainUnit]):
                    self._unit = unit

                def run(self, data_loader):
                    for batch in data_loader:
                        self._unit(batch)
                        self.decoder.step(batch)
            """,
    })
    # `self._unit` is a `TrainUnit`: any subclass's `__call__` can run.
    assert _rows(found) == [("units.py", 8), ("units.py", 12)]


def test_while_loops_that_end_at_a_step_count_and_decoding_loops(tmp_path):
    found = _project(tmp_path, {"run.py": """
        def train(model, get_batch, max_iters):
            iter_num = 0
            while True:
                x = get_batch()
                print(model(x).item())
                iter_num += 1
                if iter_num > max_iters:
                    break

        def poll(queue):
            while True:
                job = queue.get()
                print(job.size.item())

        def sample(model, idx, max_new_tokens):
            for _ in range(max_new_tokens):
                logits = model(idx)
                if logits.isnan().any().item():
                    break

        def decode(model, scores, should_stop):
            while not should_stop(scores[-1]):
                scores.append(model(scores[-1]).max().item())
        """})
    assert _rows(found) == [("run.py", 6), ("run.py", 19), ("run.py", 24)]


def test_branches_a_cuda_run_does_not_take_are_cold(tmp_path):
    found = _project(tmp_path, {"net.py": """
        import torch
        from torch import nn

        class Net(nn.Module):
            def forward(self, x):
                if x.device.type == "mps":
                    n = x.sum().item()
                elif not torch.cuda.is_available():
                    n = x.max().item()
                if x.is_cuda:
                    m = x.min().item()
                else:
                    m = x.mean().item()
                if str(x.device) != "cpu":
                    k = x.std().item()
                return n + m + k
        """})
    assert _rows(found) == [("net.py", 12), ("net.py", 16)]


def test_private_torch_nn_bases_are_modules(tmp_path):
    found = _project(tmp_path, {"loss.py": """
        from torch.nn.modules.loss import _Loss

        class DiceLoss(_Loss):
            def forward(self, x, y):
                return (x - y).abs().max().item()
        """})
    assert _rows(found) == [("loss.py", 6)]


def test_first_passes_grown_caches_and_nan_repairs_run_rarely(tmp_path):
    found = _project(tmp_path, {"net.py": """
        import torch
        from torch import nn

        class Net(nn.Module):
            def forward(self, x, i):
                if self.buf is None or self.buf.size(0) != x.size(0):
                    self.buf = torch.zeros(x.size(0)).to(x.device)
                if i == 0:
                    print(x.max().item())
                if torch.isnan(x).any():
                    x = torch.nan_to_num(x, nan=x.nanmean().item())
                if i == 1:
                    print(x.min().item())
                return x + self.buf
        """})
    # The first pass, the cache rebuilt only when it must grow and the NaN repair are rare; the
    # test of the NaN repair runs every time (PFL105's territory, not a read).
    assert [(row, code) for _, row, code, _ in found if code in ("PFL101", "PFL402")] == [(14, "PFL101")]


def test_back_to_back_host_copies_and_transfers_are_one_finding_at_the_first(tmp_path):
    found = _project(tmp_path, {"loop.py": """
        import torch
        from torch.utils.data import DataLoader

        def train(model, dataset, opt, device, metric):
            loader = DataLoader(dataset, batch_size=64, pin_memory=True)
            for images, labels, boxes in loader:
                images = images.to(device)
                labels = labels.to(device)
                loss = model(images, labels).mean()
                loss.backward()
                opt.step()
                boxes = boxes.to(device)
                preds = model.last_logits.argmax(1).cpu()
                metric(preds, labels.cpu().numpy())
        """})
    transfers = [(row, why) for _, row, code, why in found if code == "PFL106"]
    copies = [row for _, row, code, _ in found if code == "PFL102"]
    # `boxes` moves after `opt.step()` queued work: a second wait.
    assert [row for row, _ in transfers] == [8, 13]
    assert copies == [14]
    [result] = check_paths(discover([str(tmp_path)]), {"preview": True}, jobs=1)
    first = next(f for f in result.findings if f.code == "PFL106" and f.start.row == 8)
    assert "(with `labels.to(device)` right after it, which then waits only for the work queued since)" in first.message
    # The fix makes both transfers from the pinned loader non-blocking.
    assert [edit.content for edit in first.fix.edits] == ["images.to(device, non_blocking=True)",
                                                          "labels.to(device, non_blocking=True)"]
    copy = next(f for f in result.findings if f.code == "PFL102")
    assert "(with `labels.cpu().numpy()` right after it" in copy.message


def test_a_script_that_exits_with_its_main_result_still_trains(tmp_path):
    found = _project(tmp_path, {"recipe.py": """
        import sys

        class Recipe:
            def train(self, dataloader, opt):
                for idx, batch in enumerate(dataloader):
                    loss = self.model(batch)
                    loss.backward()
                    opt.step()
                    print(loss.item())

        def recipe_main():
            recipe = Recipe()
            recipe.train(make_loader(), make_opt())

        if __name__ == "__main__":
            sys.exit(recipe_main())
        """})
    # `sys.exit(recipe_main())` runs the whole program before it exits: no failure path, and
    # `recipe.train()` (through the object) is the run's training loop.
    assert _rows(found) == [("recipe.py", 10)]


def test_calls_from_tests_do_not_make_library_code_cold(tmp_path):
    found = _project(tmp_path, {
        "lib/__init__.py": "",
        "lib/pipeline.py": """
            class Pipeline:
                def __call__(self, latents, timesteps):
                    for t in timesteps:
                        latents = self.step(latents, t)
                        print(latents.abs().max().item())
                    return latents
            """,
        "tests/test_pipeline.py": """
            from lib.pipeline import Pipeline

            def test_pipeline(latents):
                pipe = Pipeline()
                assert pipe(latents, [1, 2]) is not None
            """,
    })
    assert _rows(found) == [("lib/pipeline.py", 6)]


def test_a_transfer_run_fixes_the_copies_from_pinned_memory(tmp_path):
    (tmp_path / "perflsp.toml").write_text("")
    (tmp_path / "loop.py").write_text(textwrap.dedent("""
        def train(model, loader, device, class_weights):
            for images, labels in loader:
                images = images.pin_memory().to(device)
                labels = labels.cuda()
                model(images, labels).backward()
        """))
    [result] = check_paths(discover([str(tmp_path)]), {"preview": True}, jobs=1)
    [finding] = [f for f in result.findings if f.code == "PFL106"]
    assert "(with `labels.cuda()` right after it" in finding.message
    # `labels` comes from pageable memory: only the pinned copy gets `non_blocking=True`.
    assert [edit.content for edit in finding.fix.edits] == ["images.pin_memory().to(device, non_blocking=True)"]
