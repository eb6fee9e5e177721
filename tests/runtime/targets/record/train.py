"""A small training loop with real per-step syncs and the decoys static rules flag wrongly.

tests/runtime/test_record.py records it with `perflsp record` and finds its lines by the
`# case:` comments, never by number.
"""
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DEBUG = False


class UnusedHead(nn.Module):
    """An nn.Module nothing builds: its forward is per-step code to the static rules."""

    def forward(self, x):
        scale = x.abs().max().item()  # case: unused class
        return x / scale


class Net(nn.Module):
    """Takes the batch's lengths, which the collate function builds on the host and nobody moves."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x, lengths):
        longest = lengths.max().item()  # case: collate tensor on the host
        return self.body(x[:, :longest])


class Loss:
    """A callable loss object."""

    def __init__(self):
        self.fn = nn.MSELoss()

    def __call__(self, out, target):
        value = self.fn(out, target)
        if value.isnan():  # case: loss object branch
            raise ValueError("nan loss")
        return value


class Ema:
    """An exponential moving average over the model's state_dict()."""

    def __init__(self, model):
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def update(self, model):
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:  # case: ema dtype check
                self.shadow[k].mul_(0.9).add_(v.detach(), alpha=0.1)


class Logger:
    """A callback invoked per batch."""

    def __init__(self):
        self.history = []

    def on_batch(self, loss):
        self.history.append(loss.item())  # case: callback read


def collate(batch):
    xs = torch.stack([x for x, _ in batch])
    ys = torch.stack([y for _, y in batch])
    lengths = torch.tensor([len(x) for x, _ in batch])
    return xs, ys, lengths


def main():
    torch.manual_seed(0)
    data = [(torch.randn(8), torch.randn(1)) for _ in range(64)]
    loader = torch.utils.data.DataLoader(data, batch_size=8, collate_fn=collate)
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = Loss()
    ema = Ema(model)
    logger = Logger()
    verbose = False
    scale = None
    for epoch in range(100):
        mloss = torch.zeros(2, device=device)
        for i, (x, y, lengths) in enumerate(loader):
            x, y = x.to(device), y.to(device)  # case: copies to the device
            if scale is None:
                scale = torch.ones(1, device=device)
                print("scale", scale.item())  # case: lazy init
            out = model(x, lengths) * scale
            loss = loss_fn(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.update(model)
            logger.on_batch(loss)
            mloss = (mloss * i + torch.stack([loss.detach(), out.abs().mean().detach()])) / (i + 1)
            line = "%g %g" % (*mloss,)  # case: formatted log line
            if DEBUG:
                print(loss.item())  # case: off branch
            if verbose:  # case: python bool branch
                print(line)


if __name__ == "__main__":
    main()
