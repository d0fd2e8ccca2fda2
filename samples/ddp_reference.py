# PyTorch DistributedDataParallel reference for ortc's data-parallel tests: RANKS gloo processes
# on loopback train a sample with DDP (SGD), each on its share of every step's batch: rank r
# takes rows [r * B/RANKS, (r+1) * B/RANKS) of reference.py's per-step batch (the same numpy
# seed, so ortc's rank-strided feed of the halves is this split). BatchNorm statistics are each
# rank's own (DDP without SyncBatchNorm; broadcast_buffers keeps rank 0's running statistics
# everywhere), or with --sync-batchnorm torch.nn.SyncBatchNorm's global ones. Writes what
# reference.py writes for --steps: init/, final/ (rank 0's parameters and buffers), and losses
# (the mean over the ranks, as ortc logs it). See README.md.
import argparse, json, os, sys
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common


def parse():
    ap = argparse.ArgumentParser(description='torch DDP reference for an ortc sample (see samples/README.md)')
    ap.add_argument('name', choices=common.NAMES)
    ap.add_argument('out', help='output .npz')
    ap.add_argument('--ranks', type=int, default=2)
    ap.add_argument('--seed', type=int, default=0, help='seeds the feeds (numpy), as reference.py')
    ap.add_argument('--dtype', choices=['float64', 'float32'], default='float64')
    ap.add_argument('--steps', type=int, default=5)
    ap.add_argument('--lr', type=float, default=0.01)
    ap.add_argument('--batch', type=int, default=common.BATCH, help='the global batch of a step')
    ap.add_argument('--sync-batchnorm', action='store_true')
    ap.add_argument('--port', type=int, default=29517)
    return ap.parse_args()


def worker(rank, a, batches, out):
    dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%d' % a.port, rank=rank,
                            world_size=a.ranks)
    torch.set_num_threads(1)
    dtype = getattr(torch, a.dtype)
    mod, model, mapping, params = common.model_from_onnx(a.name, None, dtype)
    common.set_dropout(model, 0.0)
    init = {on: common.to_numpy(t).copy() for tn, on in mapping.items()
            for t in [dict(model.state_dict())[tn]]}
    if a.sync_batchnorm:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ddp = torch.nn.parallel.DistributedDataParallel(model.train())
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr)
    share = a.batch // a.ranks
    losses = []
    for feed in batches:
        part = {k: v[rank * share:(rank + 1) * share] for k, v in feed.items()}
        args = [common.to_torch(part[n]) for n in mod.INPUTS]
        args = [t.to(dtype) if t.is_floating_point() else t for t in args]
        opt.zero_grad()
        loss = F.cross_entropy(ddp(*args).reshape(-1, mod.NUM_CLASSES),
                               common.to_torch(part['labels']).reshape(-1))
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / a.ranks)
    if rank == 0:
        state = {k[len('module.'):] if k.startswith('module.') else k: v
                 for k, v in ddp.state_dict().items()}
        res = {'init/' + on: v for on, v in init.items()}
        res.update(('final/' + on, common.to_numpy(state[tn])) for tn, on in mapping.items()
                   if tn in params or tn.endswith(('running_mean', 'running_var')))
        res['losses'] = np.array(losses, dtype=a.dtype)
        res['meta'] = np.array(json.dumps(vars(a)))
        np.savez(out, **res)
    dist.destroy_process_group()


def main():
    a = parse()
    if a.batch % a.ranks:
        sys.exit('--batch %d is not a multiple of --ranks %d' % (a.batch, a.ranks))
    mod = common.load_sample(a.name)
    rng = np.random.RandomState(a.seed)
    batches = [common.make_batch(mod, rng, a.batch) for _ in range(a.steps)]
    mp.spawn(worker, args=(a, batches, a.out), nprocs=a.ranks, join=True)
    print('%s: DDP over %d ranks%s, losses %s -> %s' % (a.name, a.ranks, ' (SyncBatchNorm)' if a.sync_batchnorm else '',
                                                   np.round(np.load(a.out)['losses'], 5).tolist(), a.out))


if __name__ == '__main__':
    main()
