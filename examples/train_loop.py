"""A small image-classifier training script with the performance bugs people really write.

Run `perflsp check examples/` to see them flagged; each comment names the rule that fires.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import perflsp

os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # PFL604: left on from a debugging session
torch.autograd.set_detect_anomaly(True)  # PFL604

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class ConvNet(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),  # PFL606: bias before BatchNorm
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, x):
        h = self.features(x).flatten(1)
        return self.head(h)


def make_loader(n: int = 512) -> DataLoader:
    images = torch.randn(n, 3, 32, 32)
    labels = torch.randint(0, 10, (n,))
    return DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True)  # PFL601, PFL602


def clip_gradients(model: nn.Module, max_norm: float) -> None:
    for p in model.parameters():  # PFL503: one kernel per parameter
        if p.grad is not None:
            p.grad.data.clamp_(-max_norm, max_norm)


def make_step_inputs():
    """Inputs for `perflsp profile examples/train_loop.py:train_step` (and the editor's Profile action)."""
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.randn(32, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (32,), device=device)
    return model, optimizer, images, labels, torch.ones(10)


@perflsp.profile(setup=make_step_inputs)
def train_step(model, optimizer, images, labels, class_weights):
    weights = class_weights.to(device)  # PFL106: the same copy on every step
    optimizer.zero_grad(set_to_none=False)  # PFL603
    logits = model(images)
    loss = F.cross_entropy(logits, labels, weight=weights)
    loss.backward()
    clip_gradients(model, 1.0)
    optimizer.step()
    return loss, float(loss.detach())  # PFL103: a sync on every step


def train(epochs: int = 2) -> None:
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = make_loader()
    class_weights = torch.ones(10)
    for epoch in range(epochs):
        seen = []
        for step, (images, labels) in enumerate(loader):
            images = images.pin_memory().to(device)  # PFL106: pinned, yet a blocking copy
            labels = labels.cuda() if torch.cuda.is_available() else labels  # PFL106
            weights = class_weights.to(device)  # PFL403: the same copy every step
            loss, running = train_step(model, optimizer, images, labels, weights)
            seen.append(labels)
            if step % 10 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")  # every 10 steps: amortised, not reported
            offsets = torch.tensor([0.0, 1.0, 2.0], device=device)  # PFL107 (it outranks PFL401: one cost, one finding)
        all_labels = torch.cat(seen)
        print(epoch, running, offsets.sum(), all_labels.shape)


if __name__ == "__main__":
    train()
