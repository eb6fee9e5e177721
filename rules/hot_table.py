"""Where a training or inference step begins, and which code is known to run once: data, not code.

Every row is documented in docs/configuration.md ("Hot code") and has a fixture in
tests/rules/test_hotness.py. Framework classes are matched by the top-level package of the
base class's qualified name and the class's own name (`transformers.Trainer`,
`transformers.trainer.Trainer` and a `Trainer` defined inside transformers itself are one
class), never by a bare method name: `step` of any class is not an optimizer step.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Tuple


# Every class of `torch.nn` with a capitalised name (`nn.LayerNorm`, `nn.Sequential`, ...) is an
# `nn.Module`: a subclass's `forward` is an entry point like a direct subclass's.
TORCH_NN = "torch.nn."


class EntryPoint(NamedTuple):
    packages: Tuple[str, ...]  # top-level packages the base class lives in
    classes: Tuple[str, ...]  # the base class's own names
    methods: Tuple[str, ...]  # method names or fnmatch-style patterns (`on_*_batch_*`)
    why: str  # completes "in `Net.forward`, which ..." in a finding's message


ENTRY_POINTS: Tuple[EntryPoint, ...] = (
    EntryPoint(("torch",), ("Module",), ("forward",), "runs on every forward pass (`nn.Module.forward`)"),
    EntryPoint(("transformers",), ("PreTrainedModel",), ("forward",), "runs on every forward pass (a model's `forward`)"),
    EntryPoint(("diffusers",), ("ModelMixin",), ("forward",), "runs on every forward pass (a model's `forward`)"),
    EntryPoint(("torch",), ("Function",), ("forward", "backward"),
               "autograd runs on every forward or backward pass"),
    EntryPoint(("torch",), ("Optimizer",), ("step",), "runs on every optimizer step (`Optimizer.step`)"),
    EntryPoint(("lightning", "pytorch_lightning", "lightning_fabric"), ("LightningModule",),
               ("training_step", "validation_step", "test_step", "predict_step", "forward", "backward",
                "optimizer_step", "on_*_batch_start", "on_*_batch_end", "on_before_backward",
                "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad"),
               "Lightning calls on every batch"),
    EntryPoint(("lightning", "pytorch_lightning"), ("Callback",),
               ("on_*_batch_start", "on_*_batch_end", "on_before_backward", "on_after_backward",
                "on_before_optimizer_step", "on_before_zero_grad"),
               "Lightning calls on every batch"),
    EntryPoint(("transformers",), ("Trainer", "Seq2SeqTrainer"),
               ("compute_loss", "training_step", "prediction_step", "_compute_loss", "compute_loss_func",
                "_prepare_inputs"),
               "the HF `Trainer` calls on every training step"),
    EntryPoint(("transformers",), ("TrainerCallback",),
               ("on_step_begin", "on_substep_end", "on_pre_optimizer_step", "on_optimizer_step", "on_step_end",
                "on_prediction_step"),
               "the HF `Trainer` calls on every step"),
    EntryPoint(("fastai",), ("Callback",),
               ("before_batch", "after_pred", "after_loss", "before_backward", "after_backward", "before_step",
                "after_step", "after_batch"),
               "fastai's `Learner` calls on every batch"),
    EntryPoint(("composer",), ("Callback",),
               ("before_dataloader", "after_dataloader", "batch_start", "before_train_batch", "before_forward",
                "after_forward", "before_loss", "after_loss", "before_backward", "after_backward",
                "after_train_batch", "batch_end", "eval_batch_start", "eval_before_forward", "eval_after_forward",
                "eval_batch_end", "predict_batch_start", "predict_before_forward", "predict_after_forward",
                "predict_batch_end"),
               "composer's `Trainer` calls on every batch"),
    EntryPoint(("mmengine",), ("Hook",),
               ("before_train_iter", "after_train_iter", "before_val_iter", "after_val_iter", "before_test_iter",
                "after_test_iter"),
               "mmengine's runner calls on every iteration"),
    EntryPoint(("torchmetrics",), ("Metric",), ("update", "forward", "_forward_full_state_update",
                                               "_forward_reduce_state_update"),
               "torchmetrics calls on every batch a metric sees"),
    EntryPoint(("ignite",), ("Metric",), ("update", "iteration_completed"),
               "ignite calls on every iteration of an engine the metric is attached to"),
    EntryPoint(("diffusers",), ("SchedulerMixin",), ("step", "scale_model_input"),
               "a diffusers pipeline calls on every denoising step"),
    EntryPoint(("deepspeed",), ("DeepSpeedEngine",), ("forward", "backward", "step"),
               "the DeepSpeed engine runs on every step"),
)

# Framework methods that run once per run, epoch or logging interval: cold even with loops inside,
# unless per-step code calls them directly.
RARE_METHODS: Tuple[EntryPoint, ...] = (
    EntryPoint(("lightning", "pytorch_lightning", "lightning_fabric"), ("Logger", "LightningLoggerBase"),
               ("log_metrics", "log_hyperparams", "log_graph", "save", "finalize", "after_save_checkpoint"),
               "a logger method: it runs once per logging interval"),
    EntryPoint(("lightning", "pytorch_lightning"), ("LightningModule", "Callback"),
               ("on_*_epoch_start", "on_*_epoch_end", "on_fit_*", "on_train_start", "on_train_end",
                "on_validation_start", "on_validation_end", "on_test_start", "on_test_end", "setup", "teardown",
                "configure_*", "on_save_checkpoint", "on_load_checkpoint", "*_dataloader"),
               "a Lightning hook that runs once per epoch or per run"),
    EntryPoint(("torchmetrics",), ("Metric",), ("compute", "reset", "plot", "_sync_dist", "sync", "unsync"),
               "torchmetrics runs it once per epoch (compute, sync, reset)"),
    EntryPoint(("ignite",), ("Metric",), ("compute", "reset", "started", "completed"),
               "ignite runs it once per epoch (compute, reset)"),
    EntryPoint(("transformers",), ("Trainer", "Seq2SeqTrainer"),
               ("log", "save_model", "create_optimizer", "create_scheduler", "_save_checkpoint",
                "_load_from_checkpoint", "get_train_dataloader", "get_eval_dataloader"),
               "the HF `Trainer` runs it once per run or logging interval"),
    EntryPoint(("transformers",), ("TrainerCallback",),
               ("on_init_end", "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_evaluate",
                "on_predict", "on_save", "on_log"),
               "the HF `Trainer` calls it once per run, epoch, evaluation or logging interval"),
    EntryPoint(("fastai",), ("Callback",),
               ("before_fit", "after_fit", "before_epoch", "after_epoch", "before_train", "after_train",
                "before_validate", "after_validate"),
               "fastai's `Learner` calls it once per run, epoch or validation"),
    EntryPoint(("composer",), ("Callback",),
               ("init", "fit_start", "fit_end", "epoch_start", "epoch_end", "epoch_checkpoint", "iteration_start",
                "iteration_end", "eval_before_all", "eval_start", "eval_end", "eval_after_all", "predict_start",
                "predict_end", "close", "post_close", "state_dict", "load_state_dict"),
               "composer's `Trainer` calls it once per run, epoch or evaluation"),
    EntryPoint(("mmengine",), ("Hook",),
               ("before_run", "after_run", "before_train", "after_train", "before_val", "after_val", "before_test",
                "after_test", "before_train_epoch", "after_train_epoch", "before_val_epoch", "after_val_epoch",
                "before_test_epoch", "after_test_epoch", "before_save_checkpoint", "after_load_checkpoint"),
               "mmengine's runner calls it once per run or epoch"),
)

# Decorators that mark a function hot (qualified names through imports).
HOT_MARKERS = {"perflsp.hot": "@perflsp.hot", "perflsp.profile": "@perflsp.profile"}
# ignite events that fire on every iteration: a handler registered with `@engine.on(Events.X)`
# runs per step.
IGNITE_PER_ITERATION = frozenset({"ITERATION_STARTED", "ITERATION_COMPLETED", "GET_BATCH_STARTED",
                                  "GET_BATCH_COMPLETED"})
HOT_COMMENT = "perflsp: hot"

# Functions that run once per model, run or data set: cold even with loops inside, unless
# per-step code calls them.
COLD_FUNCTIONS = frozenset(
    """__init__ __post_init__ __init_subclass__ __new__ __repr__ __str__ extra_repr reset_parameters
    _reset_parameters init_weights _init_weights initialize_weights _initialize_weights setup
    prepare_data process download _download load_state_dict _load_from_state_dict load_checkpoint
    _load_checkpoint load_pretrained from_pretrained save_pretrained save_checkpoint state_dict
    configure_optimizers configure_model parse_args add_argparse_args set_timesteps merge _merge unmerge _unmerge
    merge_adapter unmerge_adapter merge_and_unload unload fuse unfuse""".split()
)
COLD_PREFIXES = ("load_", "_load_", "save_", "_save_", "build_", "_build_", "init_", "_init_", "setup_",
                 "_setup_", "set_", "prepare_", "download_", "convert_", "plot", "_plot")
# One-off work on data or for people (dataset processing, conversion, debugging output): not even
# what it sets up runs per step, so the setup rules (a DataLoader's workers, ...) stay silent too.
ONE_OFF_FUNCTIONS = ("process", "_process", "download", "_download", "prepare_data", "preprocess*", "convert_*",
                     "*print*", "debug*", "_debug*", "dump*", "_dump*", "plot*", "_plot*", "visuali[sz]e*")

# A loop over these is a step loop: one iteration is one step, and what it calls runs per step.
STEP_ITERABLE = re.compile(r"(loader|batches|data_?iter|timesteps|dataset_iter)$", re.IGNORECASE)
# A comprehension is a step loop only over a loader (`sum(loss(model(x)) for x in val_loader)`): over
# other sequences (`[x.item() for x in loss_batches]`) it collects values, it does not run steps.
LOADER_ITERABLE = re.compile(r"(loader|data_?iter|dataset_iter)$", re.IGNORECASE)
# A grid of settings, even of batch sizes and step counts (`itertools.product(BATCHES, STEPS)`): a
# sweep that runs once per setting, not a step loop.
SETTING_GRIDS = frozenset({"product", "itertools.product"})
# The same for a decoding loop: one iteration is one generated token (`range(max_new_tokens)`,
# `while cur_len < max_length`).
STEP_RANGE_BOUND = re.compile(
    r"(steps|iters|iterations|batches|max_iter|max_new_tokens|sample_len|gen_len|max_gen_len|max_length|max_decode_len)$",
    re.IGNORECASE)

# Gradient-accumulation boundaries are per optimizer step: a modulo test on these stays hot.
ACCUMULATION = re.compile(r"accum", re.IGNORECASE)

# A test named like these asks "is this a logging (eval, checkpoint) step?": what runs only when it
# holds (`if should_log(step):`, or after `if not self.metrics.should_log(step): return`) is periodic.
PERIODIC_PREDICATE = re.compile(
    r"^_?(should|is|do|time_to)_?(log|logging|eval|evaluate|validate|save|checkpoint|print|report)(_step|_now)?$",
    re.IGNORECASE)
# A test named like these asks "is the cache built?": `if not self._cache_ready(n): rebuild()` runs
# once, and again only when the cache must grow (a lazy init).
LAZY_READY = re.compile(r"_?(ready|initiali[sz]ed|built|warmed_up)$", re.IGNORECASE)

# Test code is not per-step code: nothing in these files is hot by default.
TEST_FILE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$|(^|/)tests?/")
