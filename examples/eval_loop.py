"""Evaluation of a detector-style model: per-batch host syncs and autograd left on."""
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

device = "cuda"


def evaluate(model: nn.Module, loader: DataLoader, threshold: float = 0.5):
    model.eval()
    all_scores = torch.empty(0)
    positives = 0
    matrix = 0
    for batch, targets in loader:
        batch = batch.to(device, non_blocking=True)
        scores = model(batch)  # PFL605: autograd records every activation after .eval()
        keep = scores > threshold
        kept = scores[keep]  # PFL105: boolean mask, data-dependent shape
        idx = torch.nonzero(keep)  # PFL105
        positives += idx.shape[0]
        all_scores = torch.cat([all_scores, kept.cpu()])  # PFL404 and PFL102
        if (scores < 0).any():  # PFL103: `if` on a tensor syncs
            print("negative score")
        torch.cuda.synchronize()  # PFL104
        preds = scores.argmax(dim=1).cpu().numpy()  # PFL102
        np.save("preds.npy", preds)
        matrix += confusion(scores.argmax(dim=1), targets, scores.shape[1])
    return all_scores, positives


def benchmark(model: nn.Module, x: torch.Tensor, iters: int = 20) -> float:
    # Timing code: synchronizing around the timed region is right here, PFL104 stays silent.
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start = time.perf_counter()
        model(x)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def confusion(preds: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    matrix = torch.zeros(num_classes, num_classes)
    for i in range(preds.shape[0]):  # PFL405: one tiny kernel per element
        matrix[labels[i], preds[i]] += 1
    return matrix
