"""Messages claim only what is true, and fixes are never wrong (beyond what the examples check)."""
from __future__ import annotations

import textwrap

from perflsp.config import Settings
from perflsp.rules.engine import check_source

CONV_BN = """\
import torch
from torch import nn

stem = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
"""


def _findings(source, code):
    return [f for f in check_source(textwrap.dedent(source), "m.py", Settings(preview=True)) if f.code == code]


def test_conv_bias_keeps_checkpoints_loadable_and_is_left_alone_in_inference():
    [plain] = _findings(CONV_BN, "PFL606")
    assert plain.fix is not None
    [loaded] = _findings(CONV_BN + 'stem.load_state_dict(torch.load("stem.pt"), strict=True)\n', "PFL606")
    assert loaded.fix is None and "`running_mean`" in loaded.message
    evaluating = CONV_BN + "stem.eval()\nwith torch.no_grad():\n    y = stem(torch.randn(1, 3, 8, 8))\n"
    assert _findings(evaluating, "PFL606") == []
    training = evaluating + "y.sum().backward()\n"
    assert len(_findings(training, "PFL606")) == 1


def test_contiguous_after_torch_tensor_of_a_tensor_is_not_a_safe_removal():
    [from_list, from_tensor] = _findings(
        """\
        import torch

        # perflsp: hot
        def f(t):
            return torch.tensor([1.0, 2.0]).contiguous(), torch.tensor(t).contiguous()
        """, "PFL302")
    assert from_list.fix.applicability == "safe"
    assert from_tensor.fix.applicability == "unsafe"  # `torch.tensor(t)` keeps the strides of `t`


def test_cat_accumulation_advice_fits_a_loop_that_reads_the_accumulator():
    [finding] = _findings(
        """\
        import torch

        def generate(model, tokens, steps):
            for _ in range(steps):
                tokens = torch.cat([tokens, model(tokens).argmax(-1, keepdim=True)], dim=1)
            return tokens
        """, "PFL404")
    assert "preallocate" in finding.message and "list" not in finding.message


def test_loader_messages_name_what_was_seen_and_claim_no_training():
    source = """\
        from torch.utils.data import DataLoader

        def export(dataset, model):
            for x in DataLoader(dataset, batch_size=8):
                model(x.cuda())
        """
    [workers] = _findings(source, "PFL601")
    assert "training" not in workers.message and "GPU" not in workers.message
    [pinning] = _findings(source, "PFL602")
    assert "(`x.cuda()`)" in pinning.message and "if the loader's batches are among them" in pinning.message


def test_the_copy_that_merging_heads_needs_is_not_flagged():
    # `.view()` cannot merge the dims the transpose separated, and `.reshape()` would copy too.
    merge = """\
        import torch

        # perflsp: hot
        def merge_heads(y, b, t, c):
            return y.transpose(1, 2).contiguous().view(b, t, c)
        """
    assert check_source(textwrap.dedent(merge), "m.py", Settings(preview=True)) == []
