#!/usr/bin/python3
"""A PyTorch MLP (784-512-256-10, batch 64, Adam) on a device, trained on
synthetic data made on that device, either through the parameter servers
(under scripts/ps_run: ps.torch.DistributedModule, the servers apply Adam)
or locally (--local: torch.optim.Adam in this process, no servers). Prints
one JSON line: {"bench": "torch_module", "mode": "ps"|"local", "device",
"rank", "steps", "samples_per_s", "last_loss"}; the first --warmup steps are
not timed.

    scripts/ps_run --workers 1 --servers 1 -- /usr/bin/python3 benchmarks/gpu/torch_module.py --device cuda
    /usr/bin/python3 benchmarks/gpu/torch_module.py --device cuda --local

Exit 0 when it trained, 2 for bad options or a device torch does not have.
"""
import argparse
import json
import sys
import time

import torch


def parse_args(argv):
    p = argparse.ArgumentParser(prog="torch_module.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--local", action="store_true", help="no servers: torch.optim.Adam in this process")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {a.device}: this torch ({torch.__version__}) has no CUDA device")
    if not 0 <= a.warmup < a.steps:
        p.error("--warmup must be in [0, --steps)")
    return a


def main(argv):
    a = parse_args(argv)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    x = torch.randn(a.batch, 784, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    rank, client = 0, None
    if a.local:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        begin, end = opt.zero_grad, opt.step
    else:
        import ps
        import ps.torch
        client = ps.connect()
        rank = client.rank
        dist = ps.torch.DistributedModule(client, model, optimizer={"kind": "adam", "lr": 1e-3})
        begin, end = dist.begin_step, dist.end_step
    t0 = time.monotonic()
    for step in range(a.steps):
        if step == a.warmup:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.monotonic()
        begin()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        end()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - t0
    print(json.dumps({"bench": "torch_module", "mode": "local" if a.local else "ps", "device": a.device,
                      "rank": rank, "steps": a.steps - a.warmup, "batch": a.batch,
                      "samples_per_s": round((a.steps - a.warmup) * a.batch / seconds, 1),
                      "last_loss": round(loss.item(), 4)}), flush=True)
    if client is not None:
        client.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
