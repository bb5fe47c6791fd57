"""A user's own PyTorch training script on the parameter servers: a small
CNN on Fashion-MNIST, saved as a state_dict at the end. Runs unchanged from
one to many workers under scripts/ps_run, which hands each copy its rank and
the job (PS_SCHEDULER, PS_RANK, PS_NUM_WORKERS):

    scripts/ps_run --workers 2 --servers 2 -- /usr/bin/python3 worker/python/examples/my_model.py OUT.pt [EPOCHS [IMAGES]]

The lines a DDP script would have instead are marked "ps:"."""
import gzip
import sys

import numpy as np
import torch

import ps
import ps.torch


def idx(name):  # Debian's dataset-fashion-mnist
    with gzip.open(f"/usr/share/datasets/fashion-mnist/{name}-ubyte.gz") as f:
        data = f.read()
    dims = data[3]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(
        [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)])


out, epochs, images = sys.argv[1], int((sys.argv[2:] or [1])[0]), int((sys.argv[3:] or [60000])[0])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10))
client = ps.connect()                                                   # ps: instead of init_process_group
dist = ps.torch.DistributedModule(client, model, optimizer={"kind": "adam", "lr": 1e-3})  # ps: instead of DDP(model)
x = torch.from_numpy(idx("train-images-idx3")[client.rank:images:client.num_workers] / 255.0).float().unsqueeze(1)
y = torch.from_numpy(idx("train-labels-idx1")[client.rank:images:client.num_workers].astype(np.int64))
steps = images // client.num_workers // 64  # the same on every worker: a sync step waits for all of them
for epoch in range(epochs):
    for i in range(steps):
        dist.begin_step()                                               # ps: no optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[i * 64:(i + 1) * 64]), y[i * 64:(i + 1) * 64])
        loss.backward()
        dist.end_step()                                                 # ps: instead of optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
state = dist.state_dict()                                               # ps: the servers' parameters and buffers
if client.rank == 0:
    torch.save(state, out)
client.finish()
