#!/usr/bin/env python3
# Why this exists: the CUDA target's claim (a compiled training step beats the framework on a GPU)
# has to be measured on a GPU, at sizes people train: the GPT-2-124M shape (tied embeddings, 12
# layers, d=768, 12 heads, vocab 50257, T=1024, B=8) and the CPU benchmark's GPT and BERT models,
# each trained by ortc on the CUDA target and by PyTorch eager and torch.compile (fp32, and bf16
# autocast) in the same run: ms/step (median after warm-up), tokens/s and peak device memory. It
# reports measurements only.
#
# The compiler cannot travel to a lent GPU machine (its MLIR libraries stay here), so the run
# splits in two: --prepare DIR exports, builds the CUDA artifacts (--no-params) and writes the
# feeds and specs into DIR here; --prepared DIR on the GPU machine trains them with ortc-run and
# times PyTorch on the same feeds. The ONNX files stay behind (the 124M one is 500 MB): PyTorch
# there starts from its own seeded init, ortc from --init-seed; the step time depends on neither.
#
# Without a GPU, --emulate runs the same script end to end on the emulated device
# (test/gpu/emu) at tiny sizes: the artifacts are built through the emulator's compiler driver
# and trained on it; PyTorch's columns say that no CUDA device is there. The emulator's times
# say nothing about a GPU's; the run proves the pipeline.
#
#   .venv/bin/python bench/bench_gpu.py [--emulate] [--models NAME...] [--warmup 3] [--steps 10]
#                                       [--markdown] [--workdir DIR] [--prepare DIR | --prepared DIR]
#                                       [--torch-modes eager:fp32 ...]
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
    ap.add_argument('--prepare', metavar='DIR', help='only export, build and write feeds into DIR (no runs)')
    ap.add_argument('--prepared', metavar='DIR', help='run what --prepare wrote into DIR (no ortc compiler needed)')
    ap.add_argument('--recompute', metavar='POLICY',
                    help='also build and time each model with ortc build --recompute POLICY (a column of its own)')
    ap.add_argument('--torch-modes', nargs='+', metavar='MODE:PRECISION',
                    help='PyTorch columns (default: %s)' % ' '.join('%s:%s' % m for m in TORCH_MODES))
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


def cuda_artifact(workdir, spec, recompute='none'):
    return os.path.join(workdir, spec['slug'] + ('.cuda.ortc' if recompute == 'none' else '.cuda-%s.ortc' % recompute))


def build_cuda(args, spec, workdir, recompute='none'):
    """The CUDA artifact of one model (--no-params: a 124M-parameter artifact stays small enough to
    travel to the GPU machine; the weights are drawn there with --init-seed)."""
    art = cuda_artifact(workdir, spec, recompute)
    cmd = [args.ortc, 'build', spec['onnx'], '-o', art, '--target', 'cuda', '--dim', 'batch=%d' % spec['cfg']['batch'],
           '--no-params', '--recompute', recompute] + bench_cpu.optimizer_flags(spec['cfg'])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env_for(args), timeout=args.timeout)
    if p.returncode:
        raise RuntimeError('ortc build: ' + bench_cpu.short_error(p))
    return art


def train_cuda(args, spec, art, workdir):
    cfg = spec['cfg']
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
    if os.path.exists(spec['onnx']):  # --prepared: the ONNX stayed behind; the seeded init stands
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
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return dict(error='over %d s' % args.timeout)
    if p.returncode:
        return dict(error=bench_cpu.short_error(p))
    return bench_cpu.last_json_line(p.stdout)


def fmt(r, tokens):
    if 'error' in r:
        return 'n/a (%s)' % r['error']
    return '%.1f ms, %.0f tok/s, %.2f MB' % (r['ms'], tokens / r['ms'] * 1e3, r['device_mb'])


def prepared_specs(args):
    """(spec, spec path) of each model --prepare wrote into --prepared DIR, its paths moved there."""
    d = os.path.abspath(args.prepared)
    out = []
    for name in sorted(os.listdir(d)):
        if not name.endswith('_spec.json'):
            continue
        with open(os.path.join(d, name)) as f:
            spec = json.load(f)
        spec.update(feed=os.path.join(d, os.path.basename(spec['feed'])), workdir=d,
                    onnx=os.path.join(d, os.path.basename(spec['onnx'])))
        out.append(bench_cpu.write_spec(spec, os.path.join(d, name)))
    if not out:
        raise SystemExit('bench_gpu.py: %s holds no *_spec.json (made by --prepare)' % d)
    return out


def main():
    args = parse_args()
    if args.worker:
        with open(args.spec) as f:
            print(json.dumps(torch_worker(args, json.load(f))))
        return 0
    models = TINY if args.emulate else MODELS
    names = args.models or list(models)
    modes = [tuple(m.split(':')) for m in args.torch_modes] if args.torch_modes else TORCH_MODES
    if args.prepare:
        os.makedirs(args.prepare, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix='ortc-bench-gpu-onnx-')  # the exports stay out of DIR
        for name in names:
            spec, _ = bench_cpu.prepare_model(name, models[name], scratch, export_batch=2)
            for key in ('feed',):
                moved = os.path.join(args.prepare, os.path.basename(spec[key]))
                os.replace(spec[key], moved)
                spec[key] = moved
            build_cuda(args, spec, args.prepare)
            if args.recompute:
                build_cuda(args, spec, args.prepare, args.recompute)
            bench_cpu.write_spec(spec, os.path.join(args.prepare, spec['slug'] + '_spec.json'))
            print('prepared %s' % name, file=sys.stderr)
        return 0
    if args.prepared:
        work = [(s, p, os.path.join(args.prepared, s['slug'] + '.cuda.ortc')) for s, p in prepared_specs(args)]
        work = [w for w in work if not args.models or w[0]['name'] in args.models]
    else:
        workdir = args.workdir or tempfile.mkdtemp(prefix='ortc-bench-gpu-')
        os.makedirs(workdir, exist_ok=True)
        work = [bench_cpu.prepare_model(name, models[name], workdir) + (None,) for name in names]
    # --prepared: the recompute column is there when --prepare built its artifacts.
    recompute = args.recompute or next((p.split('.cuda-')[1][:-len('.ortc')] for p in os.listdir(args.prepared)
                                        if '.cuda-' in p), None) if args.prepared else args.recompute
    header = ['model', 'ortc (cuda%s)' % (', emulated' if args.emulate else '')] + (
        ['ortc (cuda, --recompute %s)' % recompute] if recompute else []) + [
        'PyTorch %s %s' % m for m in modes] + ['ortc vs best PyTorch']
    rows = []
    for spec, spec_path, art in work:
        cfg = spec['cfg']
        tokens = cfg['batch'] * cfg['seq']
        try:
            ours = train_cuda(args, spec, art or build_cuda(args, spec, spec['workdir']), spec['workdir'])
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            ours = dict(error=str(e).splitlines()[-1][:300])
        extra = []
        if recompute:
            try:
                rc = cuda_artifact(spec['workdir'], spec, recompute)
                if not art:
                    build_cuda(args, spec, spec['workdir'], recompute)
                extra = [fmt(train_cuda(args, spec, rc, spec['workdir']), tokens)]
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                extra = [fmt(dict(error=str(e).splitlines()[-1][:300]), tokens)]
        theirs = [run_torch(args, spec_path, *m) for m in modes]
        timed = [t['ms'] for t in theirs if 'error' not in t]
        speedup = '%.2fx' % (min(timed) / ours['ms']) if timed and 'error' not in ours else 'n/a'
        rows.append([spec['name'], fmt(ours, tokens)] + extra + [fmt(t, tokens) for t in theirs] + [speedup])
        if 'error' not in ours:
            print('%s: ortc loss %.4f -> %.4f' % (spec['name'], ours['loss_1'], ours['loss_last']), file=sys.stderr)
        sys.stdout.flush()
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
