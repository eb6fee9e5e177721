"""Feature preparation that leaks float64 and legacy tensor types into training."""
import numpy as np
import torch


def make_features(n: int, dim: int) -> torch.Tensor:
    raw = np.random.randn(n, dim)  # numpy's default is float64
    features = torch.from_numpy(raw)  # PFL201: a float64 tensor reaches the model
    noise = torch.randn(n, dim).cuda()  # PFL402: built on the host, then copied
    return features.cuda() + noise


def normalise(batch: torch.Tensor) -> torch.Tensor:
    batch = batch.type(torch.cuda.FloatTensor)  # PFL204: legacy type API
    mean = torch.zeros(batch.shape[1]).to("cuda")  # PFL402
    return batch - mean


def batches(data: torch.Tensor, batch_size: int):
    stats = torch.tensor(np.linspace(0.0, 1.0, data.shape[1]))  # PFL201
    for start in range(0, data.shape[0], batch_size):
        chunk = data[start:start + batch_size]
        yield chunk.half() * stats.half()  # PFL203: `stats.half()` recomputed every batch


def flatten_patches(images: torch.Tensor) -> torch.Tensor:
    patches = []
    for img in images:
        p = img.unfold(1, 8, 8).unfold(2, 8, 8).permute(1, 2, 0, 3, 4)
        patches.append(p.reshape(-1, 3 * 64))
    return torch.cat(patches).clone().contiguous()  # PFL302: clone is already contiguous


def feed(model, loader):
    for batch in loader:  # a step loop: what it calls runs on every step
        for chunk in batches(normalise(batch), 64):
            model(flatten_patches(chunk))
