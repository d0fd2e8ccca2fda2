#!/usr/bin/env python3
# Why this exists: the CUDA target's claim (a compiled training step beats the framework on a GPU)
# has to be measured on a GPU, at sizes people train: the GPT-2-124M shape (tied embeddings, 12
# layers, d=768, 12 heads, vocab 50257, T=1024, B=8) and the CPU benchmark's GPT and BERT models,
# each trained by ortc on the CUDA target and by PyTorch eager and torch.compile (fp32, and bf16
# autocast) in the same run: ms/step (median after warm-up), tokens/s and peak device memory. It
# reports measurements only.
#
# Without a GPU, --emulate runs the same script end to end on the emulated device
# (test/gpu/emu) at tiny sizes: the artifacts are built through the emulator's compiler driver
# and trained on it; PyTorch's columns say that no CUDA device is there. The emulator's times
# say nothing about a GPU's; the run proves the pipeline.
#
#   .venv/bin/python bench/bench_gpu.py [--emulate] [--models NAME...] [--warmup 3] [--steps 10]
#                                       [--markdown] [--workdir DIR]
import argparse, json, os, statistics, subprocess, sys, tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu  # noqa: E402  (model builders, export, ortc helpers)

ADAMW = dict(optimizer='adamw', lr=1e-3, weight_decay=0.01)
MODELS = {
    'gpt2-124M B8 T1024': dict(family='gpt', d=768, layers=12, heads=12, seq=1024, vocab=50257, batch=8, **ADAMW),
    'gpt d256 L6 T128': bench_cpu.MODELS['gpt d256 L6 T128'],
    'gpt d128 L4 T64': bench_cpu.MODELS['gpt d128 L4 T64'],
    'bert d256 L4 T128': bench_cpu.MODELS['bert d256 L4 T128'],
}
# --emulate: the same families at sizes the emulated device trains in seconds.
TINY = {
    'gpt2 shape, tiny': dict(family='gpt', d=64, layers=2, heads=2, seq=32, vocab=512, batch=2, **ADAMW),
    'gpt tiny': dict(family='gpt', d=32, layers=1, heads=2, seq=16, vocab=128, batch=2, **ADAMW),
    'bert tiny': dict(family='bert', d=32, layers=1, heads=2, seq=16, vocab=128, batch=2, **ADAMW),
}
TORCH_MODES = [('eager', 'fp32'), ('eager', 'bf16'), ('compile', 'fp32'), ('compile', 'bf16')]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description='GPU training-step benchmark: ortc (CUDA target) vs PyTorch')
    ap.add_argument('--emulate', action='store_true', help='tiny models on the emulated device (no GPU needed)')
    ap.add_argument('--models', nargs='+', metavar='NAME')
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--steps', type=int, default=10)
    ap.add_argument('--timeout', type=int, default=3600)
    ap.add_argument('--markdown', action='store_true')
    ap.add_argument('--workdir')
    ap.add_argument('--ortc', default=os.path.join(REPO, 'build/tools/ortc/ortc'))
    ap.add_argument('--ortc-run', default=os.path.join(REPO, 'build/runtime/ortc-run'))
    ap.add_argument('--emu-dir', default=os.path.join(REPO, 'build/test/gpu/emu'))
    ap.add_argument('--worker', help=argparse.SUPPRESS)
    ap.add_argument('--spec', help=argparse.SUPPRESS)
    ap.add_argument('--mode', help=argparse.SUPPRESS)
    ap.add_argument('--precision', help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def env_for(args):
    env = dict(os.environ)
    if args.emulate:
        env['ORTC_NVCC'] = os.path.join(args.emu_dir, 'emu-cuda')
    return env


def device_bytes(artifact):
    """What ortc allocates on the device: every tensor of the manifest (parameters, optimizer
    state, inputs, buffers) plus the largest function arena."""
    with open(os.path.join(artifact, 'manifest.json')) as f:
        m = json.load(f)
    size = {'f32': 4, 'f64': 8, 'i64': 8, 'i32': 4, 'bool': 1, 'f16': 2, 'bf16': 2}
    total = 0
    for t in m['tensors']:
        n = 1
        for d in t['shape']:
            n *= d
        total += n * size.get(t['dtype'], 4)
    return total + max(f['arena_bytes'] for f in m['functions'].values())


def ortc_cuda(args, spec, workdir):
    art = os.path.join(workdir, spec['slug'] + '.cuda.ortc')
    cfg = spec['cfg']
    # --no-params: a 124M-parameter artifact stays small enough to travel to the GPU machine;
    # the weights are drawn there (--init-seed), which the step time does not depend on.
    cmd = [args.ortc, 'build', spec['onnx'], '-o', art, '--target', 'cuda', '--dim', 'batch=%d' % cfg['batch'],
           '--no-params'] + bench_cpu.optimizer_flags(cfg)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env_for(args), timeout=args.timeout)
    if p.returncode:
        raise RuntimeError('ortc build: ' + bench_cpu.short_error(p))
    log = os.path.join(workdir, spec['slug'] + '.cuda.jsonl')
    p = subprocess.run([args.ortc_run, 'train', art, '--data', spec['feed'], '--quiet', '--init-seed', '0', '--steps',
                        str(args.warmup + args.steps), '--lr', str(cfg['lr']), '--log-json', log],
                       capture_output=True, text=True, env=env_for(args), timeout=args.timeout)
    if p.returncode:
        raise RuntimeError('ortc-run train: ' + bench_cpu.short_error(p))
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    ms = statistics.median([r['time_ms'] for r in rows[args.warmup:]])
    return dict(ms=ms, device_mb=device_bytes(art) / 2**20, loss_1=rows[0]['loss'], loss_last=rows[-1]['loss'])


def torch_worker(args, spec):
    """PyTorch on the GPU: eager or torch.compile, fp32 or bf16 autocast; AdamW; times forward +
    loss + backward + step with the device synchronised; peak device memory."""
    import time
    import numpy as np, onnx, torch
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        return dict(error='no CUDA device')
    common = bench_cpu.samples_common()
    cfg = spec['cfg']
    _, model = bench_cpu.BUILDERS[cfg['family']](cfg)
    common.load_onnx_weights(model, onnx.load(spec['onnx']))
    model = model.float().cuda().train()
    if args.mode == 'compile':
        if not hasattr(torch, 'compile'):
            return dict(error='torch %s has no torch.compile' % torch.__version__)
        model = torch.compile(model)
    feed = dict(np.load(spec['feed']))
    inputs = [common.to_torch(feed[n]).cuda() for n in spec['inputs']]
    labels = common.to_torch(feed['labels']).reshape(-1).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg['lr'], weight_decay=cfg['weight_decay'])
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast('cuda', dtype=torch.bfloat16, enabled=args.precision == 'bf16'):
            logits = model(*inputs)
            loss = F.cross_entropy(logits.reshape(-1, spec['num_classes']).float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return dict(ms=statistics.median([t * 1e3 for t in times[args.warmup:]]),
                device_mb=torch.cuda.max_memory_allocated() / 2**20, loss_1=losses[0], loss_last=losses[-1])


def run_torch(args, spec_path, mode, precision):
    cmd = [sys.executable, os.path.abspath(__file__), '--worker', 'torch', '--spec', spec_path, '--mode', mode,
           '--precision', precision, '--warmup', str(args.warmup), '--steps', str(args.steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode:
        return dict(error=bench_cpu.short_error(p))
    return bench_cpu.last_json_line(p.stdout)


def fmt(r, tokens):
    if 'error' in r:
        return 'n/a (%s)' % r['error']
    return '%.1f ms, %.0f tok/s, %.2f MB' % (r['ms'], tokens / r['ms'] * 1e3, r['device_mb'])


def main():
    args = parse_args()
    if args.worker:
        with open(args.spec) as f:
            print(json.dumps(torch_worker(args, json.load(f))))
        return 0
    models = TINY if args.emulate else MODELS
    names = args.models or list(models)
    workdir = args.workdir or tempfile.mkdtemp(prefix='ortc-bench-gpu-')
    os.makedirs(workdir, exist_ok=True)
    header = ['model', 'ortc (cuda%s)' % (', emulated' if args.emulate else '')] + [
        'PyTorch %s %s' % m for m in TORCH_MODES] + ['ortc vs best PyTorch']
    rows = []
    for name in names:
        cfg = models[name]
        spec, spec_path = bench_cpu.prepare_model(name, cfg, workdir)
        tokens = cfg['batch'] * cfg['seq']
        try:
            ours = ortc_cuda(args, spec, workdir)
        except RuntimeError as e:
            ours = dict(error=str(e))
        theirs = [run_torch(args, spec_path, *m) for m in TORCH_MODES]
        timed = [t['ms'] for t in theirs if 'error' not in t]
        speedup = '%.2fx' % (min(timed) / ours['ms']) if timed and 'error' not in ours else 'n/a'
        rows.append([name, fmt(ours, tokens)] + [fmt(t, tokens) for t in theirs] + [speedup])
        if 'error' not in ours:
            print('%s: ortc loss %.4f -> %.4f' % (name, ours['loss_1'], ours['loss_last']), file=sys.stderr)
    if args.markdown:
        print('| ' + ' | '.join(header) + ' |')
        print('|' + '---|' * len(header))
        for r in rows:
            print('| ' + ' | '.join(r) + ' |')
    else:
        for r in rows:
            print('\n'.join('%-28s %s' % (h, c) for h, c in zip(header, r)) + '\n')
    return 1 if any(r[1].startswith('n/a') for r in rows) else 0


if __name__ == '__main__':
    sys.exit(main())
