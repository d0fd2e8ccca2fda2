#!/usr/bin/env python3
# Why this exists: ortc claims that compiling the whole training step ahead of time beats running
# it through a framework. This script checks that claim on the CPU at sizes people train: two
# GPT-2-style decoders, a BERT-style encoder, torchvision's ResNet-18 and an MNIST-sized MLP, each
# trained by ortc at 1 and 2 threads, by PyTorch eager (best of 1 and 2 threads) and by ONNX Runtime
# Training, in one run on one machine, with the same batch; plus a per-op table (GEMM 1024^3 against
# the machine's FMA peak, ResNet-18's convolutions forward+backward against PyTorch). It reports
# measurements only and asserts nothing on time. See bench/README.md.
#
#   .venv/bin/python bench/bench_cpu.py [--models NAME...] [--threads 1 2] [--warmup 3] [--steps 10]
#                                       [--no-ops] [--markdown] [--readme] [--samples]
#
# PyTorch and ONNX Runtime each run in their own child process (this script with --worker), one per
# thread count, so each peak RSS belongs to one framework only.
import argparse, datetime, json, os, re, shutil, statistics, subprocess, sys, tempfile, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES_DIR = os.path.join(REPO, 'samples')
README = os.path.join(REPO, 'README.md')
README_BEGIN = '<!-- speed table: written by bench/bench_cpu.py --readme -->'
README_END = '<!-- end of speed table -->'
ADAMW = dict(optimizer='adamw', lr=1e-3, weight_decay=0.01)  # betas (0.9, 0.999), eps 1e-8 everywhere
SGD = dict(optimizer='sgd', lr=0.01, momentum=0.9)

# The benchmark's models: the samples' classes at training sizes (vocab 512, head size 64), built
# with torch.manual_seed(0) and exported by samples/common.export_training like the samples.
MODELS = {
    'gpt d256 L6 T128': dict(family='gpt', d=256, layers=6, heads=4, seq=128, vocab=512, batch=8, **ADAMW),
    'gpt d128 L4 T64': dict(family='gpt', d=128, layers=4, heads=2, seq=64, vocab=512, batch=8, **ADAMW),
    'bert d256 L4 T128': dict(family='bert', d=256, layers=4, heads=4, seq=128, vocab=512, batch=8, **ADAMW),
    'resnet18 64x64': dict(family='resnet', size=64, classes=10, batch=8, **SGD),
    'mlp 784-1024-1024-10': dict(family='mlp', sizes=[784, 1024, 1024, 10], batch=64, **ADAMW),
}
# --samples: the four tiny samples as they are in samples/ (their .onnx files), batch 4.
SAMPLES = {name: dict(family='sample', sample=name, batch=4, **ADAMW) for name in ('mlp', 'cnn', 'gpt2', 'bert')}
# Reported, not asserted: ortc 2 threads / 1 thread, and PyTorch eager's best / ortc's best.
TARGET_SCALING = 1.6
TARGET_VS_TORCH = {'resnet': 1.2}  # every other family: 1.0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description='CPU training-step benchmark: ortc vs PyTorch eager vs ONNX Runtime Training')
    ap.add_argument('--models', nargs='+', metavar='NAME', help='a subset of: ' + ', '.join(MODELS))
    ap.add_argument('--samples', action='store_true', help='the four tiny samples (batch 4) instead of the training sizes')
    ap.add_argument('--threads', nargs='+', type=int, default=[1, 2], help='thread counts (default 1 2)')
    ap.add_argument('--warmup', type=int, default=3, help='steps left out of the median')
    ap.add_argument('--rounds', type=int, default=3,
                    help='ortc runs per artifact and thread count, interleaved; the median counts (default 3)')
    ap.add_argument('--steps', type=int, default=10, help='timed steps after the warm-up (median; at least 5)')
    ap.add_argument('--no-ops', action='store_true', help='skip the per-op table (GEMM, ResNet-18 convolutions)')
    ap.add_argument('--no-ort', action='store_true', help='skip ONNX Runtime Training')
    ap.add_argument('--precisions', nargs='*', default=[], metavar='P', choices=['bf16', 'fp16'],
                    help='also build and train ortc with --precision P (bf16, fp16): arena and step time against fp32')
    ap.add_argument('--no-fusion-compare', action='store_true',
                    help='skip the second ortc build with --fusion none (launches, bytes, arena, step time)')
    ap.add_argument('--timeout', type=int, default=900, help='seconds for one build or one framework run (default 900)')
    ap.add_argument('--markdown', action='store_true', help='print the tables as markdown (the README block)')
    ap.add_argument('--readme', action='store_true', help="rewrite README.md's speed table between its markers")
    ap.add_argument('--label', default='', help='a note for the header line of the tables (e.g. which ortc)')
    ap.add_argument('--ortc', default=os.path.join(REPO, 'build/tools/ortc/ortc'))
    ap.add_argument('--ortc-run', default=os.path.join(REPO, 'build/runtime/ortc-run'))
    ap.add_argument('--workdir', help='keep models, artifacts, feeds and logs here (default: a temporary folder, removed)')
    ap.add_argument('--worker', choices=['torch', 'ort', 'torch-ops'], help=argparse.SUPPRESS)  # child-process mode
    ap.add_argument('--spec', help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    configs = SAMPLES if args.samples else MODELS
    unknown = [m for m in args.models or [] if m not in configs]
    if unknown:
        ap.error('unknown model(s) %s; choose from: %s' % (', '.join(unknown), ', '.join(configs)))
    if args.steps < 5 and not args.worker:
        ap.error('--steps must be at least 5')
    if args.rounds < 1:
        ap.error('--rounds must be at least 1')
    args.configs = {m: configs[m] for m in (args.models or configs)}
    return args


# ---------------------------------------------------------------------------------------------
# Shared helpers

def add_tool_args(ap):
    """--markdown, --workdir, --ortc and --ortc-run, as the scripts built on this one take them."""
    ap.add_argument('--markdown', action='store_true')
    ap.add_argument('--workdir', help='keep models, artifacts and logs here (default: a temporary folder)')
    ap.add_argument('--ortc', default=os.path.join(REPO, 'build/tools/ortc/ortc'))
    ap.add_argument('--ortc-run', default=os.path.join(REPO, 'build/runtime/ortc-run'))


def thread_env(threads):
    """Environment for a child that runs `threads` threads: OpenMP (ortc's kernels, torch),
    OpenBLAS, and ortc's own ORTC_THREADS; the command line's --threads is added where supported."""
    n = str(threads)
    env = dict(os.environ, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, MKL_NUM_THREADS=n, ORTC_THREADS=n)
    env['ORTC_KERNEL_CACHE'] = 'off'  # a cached kernels.so would skip the C++ compile we time
    return env


def median_after_warmup(times_ms, warmup):
    timed = times_ms[warmup:]
    if not timed:
        raise RuntimeError('no steps after the warm-up')
    return statistics.median(timed)


def last_json_line(text):
    """The worker's result: the last stdout line that parses as a JSON object."""
    for line in reversed(text.splitlines()):
        if line.startswith('{'):
            return json.loads(line)
    raise RuntimeError('no result line')


def short_error(proc_or_text):
    text = proc_or_text if isinstance(proc_or_text, str) else (proc_or_text.stderr or '') + (proc_or_text.stdout or '')
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else 'failed without a message'


def cell(results, key, fn):
    """Runs one measurement; a failure becomes an error string in that cell only."""
    try:
        results[key] = fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported, none aborts the run
        results[key] = 'error: %s' % (str(e).strip().splitlines() or [type(e).__name__])[-1]
    return results[key]


def best(runs):
    """The fastest measured run of {threads: result} (None if none was measured)."""
    ok = [r for r in runs.values() if isinstance(r, dict)]
    return min(ok, key=lambda r: r['ms']) if ok else None


def samples_common():
    sys.path.insert(0, SAMPLES_DIR)
    import common
    return common


# ---------------------------------------------------------------------------------------------
# Models: one builder per family, returning (module with INPUTS/NUM_CLASSES/random_inputs/Model,
# seeded torch model). Both the export (parent) and the PyTorch worker call them.

def gpt_model(cfg):
    """samples/gpt2's decoder (tied LM head, causal mask buffer, exact GELU, dropout 0.1), resized."""
    common = samples_common()
    mod = common.load_sample('gpt2')
    mod.VOCAB, mod.C, mod.HEADS, mod.LAYERS, mod.SEQ = cfg['vocab'], cfg['d'], cfg['heads'], cfg['layers'], cfg['seq']
    mod.NUM_CLASSES = mod.VOCAB
    return mod, common.build(mod)


def bert_model(cfg):
    """samples/bert's encoder (post-LayerNorm, padding mask, tanh pooler, 4 classes), resized."""
    common = samples_common()
    mod = common.load_sample('bert')
    mod.VOCAB, mod.H, mod.HEADS, mod.LAYERS, mod.SEQ = cfg['vocab'], cfg['d'], cfg['heads'], cfg['layers'], cfg['seq']
    return mod, common.build(mod)


def mlp_model(cfg):
    """samples/mlp's Model (Linear/ReLU stack in self.net, its forward) with cfg['sizes'] widths."""
    import torch.nn as nn
    common = samples_common()
    mod = common.load_sample('mlp')
    sizes = cfg['sizes']

    class Model(mod.Model):
        def __init__(self):
            nn.Module.__init__(self)
            layers = [m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
            self.net = nn.Sequential(*layers[:-1])

    mod.Model, mod.NUM_CLASSES = Model, sizes[-1]
    mod.random_inputs = lambda rng, batch: {'x': rng.randn(batch, sizes[0]).astype('float32')}
    return mod, common.build(mod)


def resnet_model(cfg):
    """torchvision's resnet18 (BatchNorm in training mode), cfg['size'] square RGB input."""
    import types
    import torchvision
    common = samples_common()
    mod = types.SimpleNamespace(
        INPUTS=['input'], NUM_CLASSES=cfg['classes'],
        Model=lambda: torchvision.models.resnet18(num_classes=cfg['classes']),
        random_inputs=lambda rng, batch: {'input': rng.randn(batch, 3, cfg['size'], cfg['size']).astype('float32')})
    return mod, common.build(mod)


def sample_model(cfg):
    """A tiny sample as it is (--samples)."""
    common = samples_common()
    mod = common.load_sample(cfg['sample'])
    return mod, common.build(mod)


BUILDERS = dict(gpt=gpt_model, bert=bert_model, mlp=mlp_model, resnet=resnet_model, sample=sample_model)


def prepare_model(name, cfg, workdir, export_batch=None):
    """Exports the model (training mode, opset 17; the samples' own .onnx with --samples), writes the
    feed (inputs + labels from numpy RandomState(0)) and a spec that the workers read. The batch
    axis is dynamic: export_batch traces at a smaller one (the 124M GPT at B=8, T=1024 needs over
    24 GB to trace)."""
    import numpy as np, onnx
    common = samples_common()
    mod, model = BUILDERS[cfg['family']](cfg)
    slug = re.sub(r'[^A-Za-z0-9]+', '_', name)
    if cfg['family'] == 'sample':
        path = common.onnx_path(cfg['sample'])
    else:
        path = os.path.join(workdir, slug + '.onnx')
        common.export_training(mod, model, path, batch=export_batch or cfg['batch'])
    mapping, _, params = common.load_onnx_weights(model, onnx.load(path))
    feed_path = os.path.join(workdir, slug + '_feed.npz')
    np.savez(feed_path, **common.make_batch(mod, np.random.RandomState(0), cfg['batch']))
    spec = dict(name=name, slug=slug, cfg=cfg, onnx=path, feed=feed_path, workdir=workdir,
                trainable=[mapping[p] for p in params], inputs=list(mod.INPUTS),
                num_classes=mod.NUM_CLASSES, seq_labels=bool(getattr(mod, 'SEQ_LABELS', False)))
    return write_spec(spec, os.path.join(workdir, slug + '_spec.json'))


def write_spec(spec, path):
    with open(path, 'w') as f:
        json.dump(spec, f)
    return spec, path


# ---------------------------------------------------------------------------------------------
# ortc

def optimizer_flags(cfg):
    if cfg['optimizer'] == 'adamw':
        return ['--optimizer', 'adamw', '--weight-decay', str(cfg['weight_decay'])]
    return ['--optimizer', 'sgd', '--momentum', str(cfg.get('momentum', 0))]


def ortc_build(args, onnx_path, artifact, flags):
    """`ortc build --timing`: wall time of the whole command, and the package phase (C++ compile)."""
    shutil.rmtree(artifact, ignore_errors=True)
    cmd = [args.ortc, 'build', onnx_path, '-o', artifact, '--timing'] + flags
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=thread_env(1), capture_output=True, text=True, timeout=args.timeout)
    wall_s = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError('ortc build: ' + short_error(p))
    m = re.search(r'codegen: ([\d.]+) ms, package \([^)]*\): ([\d.]+) ms', p.stderr)
    if not m:
        raise RuntimeError('ortc build --timing printed no codegen/package line')
    k = re.search(r'@train_step: (\d+) launches, (\d+) distinct kernels, ~([\d.]+) MB', p.stderr)
    arena = re.search(r'memory plan @train_step: arena (\d+) bytes', p.stderr)
    return dict(artifact=artifact, build_s=wall_s, compile_s=float(m.group(2)) / 1e3, codegen_ms=float(m.group(1)),
                launches=int(k.group(1)) if k else None, distinct=int(k.group(2)) if k else None,
                mbytes=float(k.group(3)) if k else None, arena=int(arena.group(1)) if arena else None)


def ortc_run_has_threads(args):
    if not hasattr(args, '_run_threads'):
        p = subprocess.run([args.ortc_run, '--help'], capture_output=True, text=True)
        args._run_threads = '--threads' in (p.stdout + p.stderr)
    return args._run_threads


def ortc_train(args, artifact, feed, lr, threads, log, steps=None):
    """`ortc-run train` under /usr/bin/time -v: median step time_ms after warm-up, peak RSS."""
    if not os.path.exists('/usr/bin/time'):
        raise RuntimeError('/usr/bin/time is missing (apt-get install time)')
    cmd = ['/usr/bin/time', '-v', args.ortc_run, 'train', artifact, '--data', feed, '--quiet',
           '--steps', str(args.warmup + (steps or args.steps)), '--lr', str(lr), '--log-json', log]
    if ortc_run_has_threads(args):
        cmd += ['--threads', str(threads)]
    p = subprocess.run(cmd, env=thread_env(threads), capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError('ortc-run train: ' + short_error(p))
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rss = re.search(r'Maximum resident set size \(kbytes\): (\d+)', p.stderr)
    return dict(ms=median_after_warmup([r['time_ms'] for r in rows], args.warmup), threads=threads,
                rss_kb=int(rss.group(1)) if rss else None, loss_1=rows[0]['loss'], loss_last=rows[-1]['loss'])


# ---------------------------------------------------------------------------------------------
# PyTorch eager and ONNX Runtime Training: each in a child process (run_worker), whose peak RSS
# is its own ru_maxrss

def run_worker(kind, args, spec_path, threads):
    cmd = [sys.executable, os.path.abspath(__file__), '--worker', kind, '--spec', spec_path,
           '--threads', str(threads), '--warmup', str(args.warmup), '--steps', str(args.steps)]
    p = subprocess.run(cmd, env=thread_env(threads), capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError(short_error(p))
    return last_json_line(p.stdout)


def worker_result(times_s, warmup, losses, **extra):
    import resource
    return dict(ms=median_after_warmup([t * 1e3 for t in times_s], warmup), loss_1=losses[0],
                loss_last=losses[-1], rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, **extra)


def torch_worker(args, spec):
    """PyTorch eager, train mode (dropout on, BatchNorm on batch statistics), the model's optimizer;
    times forward + loss + backward + step + zero_grad."""
    import numpy as np, onnx, torch
    import torch.nn.functional as F
    common = samples_common()
    torch.set_num_threads(args.threads[0])
    cfg = spec['cfg']
    _, model = BUILDERS[cfg['family']](cfg)
    common.load_onnx_weights(model, onnx.load(spec['onnx']))  # the exported initial weights
    model = model.float().train()
    feed = dict(np.load(spec['feed']))
    inputs = [common.to_torch(feed[n]) for n in spec['inputs']]
    labels = common.to_torch(feed['labels']).reshape(-1)
    if cfg['optimizer'] == 'adamw':
        opt = torch.optim.AdamW(model.parameters(), lr=cfg['lr'], weight_decay=cfg['weight_decay'])
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg['lr'], momentum=cfg['momentum'])
    times, losses = [], []
    for _ in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        logits = model(*inputs)
        loss = F.cross_entropy(logits.reshape(-1, spec['num_classes']), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())  # outside the timed region
    return worker_result(times, args.warmup, losses, threads=torch.get_num_threads())


def ort_training_model(spec):
    """The model's graph, adapted where ORT Training 1.19 needs it (see bench/README.md)."""
    import numpy as np, onnx
    proto = onnx.load(spec['onnx'])
    g = proto.graph
    # ORT's LayerNormalizationGrad reads the optional Mean/InvStdDev outputs, which torch's
    # export leaves unnamed: name them (the forward result is unchanged).
    for k, node in enumerate(g.node):
        if node.op_type == 'LayerNormalization':
            while len(node.output) < 3:
                node.output.append('bench_ln%d_out%d' % (k, len(node.output)))
    # SoftmaxCrossEntropyLoss takes classes on axis 1: flatten [B,T,V] logits to [B*T,V].
    if spec['seq_labels']:
        out = g.output[0].name
        g.initializer.append(onnx.numpy_helper.from_array(np.array([-1, spec['num_classes']], np.int64), 'bench_2d'))
        g.node.append(onnx.helper.make_node('Reshape', [out, 'bench_2d'], [out + '_2d']))
        del g.output[:]
        g.output.append(onnx.helper.make_tensor_value_info(out + '_2d', onnx.TensorProto.FLOAT, ['n', spec['num_classes']]))
    return proto


def ort_not_same_step(proto, cfg):
    """Why ORT Training 1.19 would not run the same training step as the others, or None."""
    for node in proto.graph.node:
        # Its BatchNormalization gradient reads outputs 3-4 (saved mean, saved inv std) that only the
        # old 5-output op had; opset 15+ allows 3 outputs, and the gradients then come out wrong
        # (checked against torch on the cnn sample).
        training = any(a.name == 'training_mode' and a.i for a in node.attribute)
        if node.op_type == 'BatchNormalization' and training and len(node.output) < 5:
            return ("ORT's BatchNormalizationGrad needs the saved mean/inv-std outputs that "
                    'opset-15 BatchNormalization lacks: wrong gradients')
    if cfg['optimizer'] == 'sgd' and cfg.get('momentum'):
        return "ORT's onnxblock SGD has no momentum"
    return None


def ort_worker(args, spec):
    """ORT Training: generate_artifacts (CrossEntropyLoss, AdamW or SGD), then Module + Optimizer;
    times module(*inputs) (forward+backward) + optimizer.step() + lazy_reset_grad()."""
    import numpy as np, onnx
    import onnxruntime as ort
    from onnxruntime.training import artifacts, onnxblock, api
    cfg = spec['cfg']
    proto = ort_training_model(spec)
    frozen = [i.name for i in proto.graph.initializer if i.name not in spec['trainable']]
    d = os.path.join(spec['workdir'], spec['slug'] + '_ort')
    os.makedirs(d, exist_ok=True)
    optim = (onnxblock.optim.AdamW(eps=1e-8, weight_decay=cfg['weight_decay']) if cfg['optimizer'] == 'adamw'
             else onnxblock.optim.SGD())
    t0 = time.perf_counter()
    artifacts.generate_artifacts(proto, requires_grad=spec['trainable'], frozen_params=frozen,
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=optim, artifact_directory=d)
    gen_s = time.perf_counter() - t0
    # The optimizer graph is written with the onnx package's IR version (14 for onnx 1.23), above
    # what ORT 1.19 loads (10); it uses nothing newer, so label it 10.
    opt_path = os.path.join(d, 'optimizer_model.onnx')
    opt_model = onnx.load(opt_path)
    opt_model.ir_version = min(opt_model.ir_version, 10)
    onnx.save(opt_model, opt_path)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads[0], 1
    state = api.CheckpointState.load_checkpoint(os.path.join(d, 'checkpoint'))
    # No eval model: it is not timed, and ORT rejects a BatchNorm one (3-output BatchNormalization
    # with training_mode switched off).
    module = api.Module(os.path.join(d, 'training_model.onnx'), state, None, session_options=so)
    optimizer = api.Optimizer(opt_path, module)
    optimizer.set_learning_rate(cfg['lr'])
    feed = dict(np.load(spec['feed']))
    feed['labels'] = feed['labels'].reshape(-1) if spec['seq_labels'] else feed['labels']
    inputs = [feed[n] for n in module.input_names()]
    module.train()
    times, losses = [], []
    for _ in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = module(*inputs)
        optimizer.step()
        module.lazy_reset_grad()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return worker_result(times, args.warmup, losses, threads=args.threads[0], generate_s=gen_s,
                         wrong=ort_not_same_step(proto, cfg))


# ---------------------------------------------------------------------------------------------
# One model: ortc at each thread count, PyTorch and ORT at each thread count (best is reported)

def interleaved(args, jobs):
    """Runs each ortc measurement (store, threads, fn) --rounds times, one round of every job
    after another, so that a slow spell of the VM falls on every configuration of the model
    alike rather than on one. store[threads] gets the median of the rounds' step times (each a
    median after the warm-up; the rounds are kept in 'rounds'), or the first error."""
    rounds = [[] for _ in jobs]
    for _ in range(args.rounds):
        for k, (_, _, fn) in enumerate(jobs):
            rounds[k].append(cell({}, 0, fn))
    for (store, t, _), runs in zip(jobs, rounds):
        failed = [r for r in runs if isinstance(r, str)]
        if failed:
            store[t] = failed[0]
            continue
        med = statistics.median(r['ms'] for r in runs)
        at = min(runs, key=lambda r: abs(r['ms'] - med))
        store[t] = dict(at, ms=med, rounds=[r['ms'] for r in runs])


def bench_model(args, name, cfg, workdir):
    res = dict(cfg=cfg, ortc={}, torch={}, ort={})
    spec = cell(res, 'spec', lambda: prepare_model(name, cfg, workdir))
    if isinstance(spec, str):
        res['build'] = spec
        for key in ('ortc', 'torch', 'ort'):
            res[key] = {t: spec for t in args.threads}
        return res
    spec, spec_path = spec
    flags = ['--dim', 'batch=%d' % cfg['batch']] + optimizer_flags(cfg)
    build = cell(res, 'build', lambda: ortc_build(args, spec['onnx'], os.path.join(workdir, spec['slug'] + '.ortc'), flags))
    # Every ortc artifact of this model: the default build, --fusion none (issue 20's baseline)
    # and each 16-bit build (issue 26's table), all timed in interleaved rounds below.
    artifacts = [(res['ortc'], build, '')]
    if not args.no_fusion_compare:
        res['unfused'] = {}
        res['unfused_build'] = cell(res, 'unfused_build', lambda: ortc_build(
            args, spec['onnx'], os.path.join(workdir, spec['slug'] + '-unfused.ortc'), flags + ['--fusion', 'none']))
        artifacts.append((res['unfused'], res['unfused_build'], '_unfused'))
    for prec in args.precisions:
        pres = res.setdefault('precision', {}).setdefault(prec, {'runs': {}})
        cell(pres, 'build', lambda: ortc_build(
            args, spec['onnx'], os.path.join(workdir, '%s-%s.ortc' % (spec['slug'], prec)),
            flags + ['--precision', prec]))
        artifacts.append((pres['runs'], pres['build'], '_' + prec))
    jobs = []
    for t in args.threads:
        for store, b, tag in artifacts:
            if isinstance(b, str):
                store[t] = b
            else:
                log = os.path.join(workdir, '%s_ortc%s_%dt.jsonl' % (spec['slug'], tag, t))
                jobs.append((store, t, lambda b=b, t=t, log=log: ortc_train(args, b['artifact'], spec['feed'], cfg['lr'], t, log)))
    interleaved(args, jobs)
    for t in args.threads:
        cell(res['torch'], t, lambda: run_worker('torch', args, spec_path, t))
        if args.no_ort:
            res['ort'][t] = 'n/a: skipped (--no-ort)'
            continue
        ort = cell(res['ort'], t, lambda: run_worker('ort', args, spec_path, t))
        if isinstance(ort, str):
            res['ort'][t] = ort.replace('error:', 'n/a:', 1)  # ORT cannot train this model
        elif ort.get('wrong'):  # it ran, but not the same training step: no comparable time
            res['ort'][t] = 'n/a: %s (its step took %.3f ms)' % (ort['wrong'], ort['ms'])
    return res


# ---------------------------------------------------------------------------------------------
# Per-op table: GEMM 1024^3 and ResNet-18's convolutions, forward + backward, one op per ortc model

GEMM_N = 1024


def op_model(path, nodes, params):
    """An ONNX model whose only tensors are trainable initializers `params` and whose output is
    `loss` = ReduceSum(y): ortc's train step is the op, its backward (dY = ones), and one plain SGD
    update per tensor; no inputs."""
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    nodes = nodes + [helper.make_node('ReduceSum', ['y'], ['loss'], keepdims=0)]
    g = helper.make_graph(nodes, 'op', [], [helper.make_tensor_value_info('loss', TensorProto.FLOAT, [])],
                          [numpy_helper.from_array(v, k) for k, v in params.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), path)


def resnet_convs(size=64, batch=8):
    """ResNet-18's distinct convolutions at size x size, batch `batch`: dicts with the input shape,
    weight shape, stride, padding and the layers that use it (found by forward hooks)."""
    import torch, torchvision
    model = torchvision.models.resnet18(num_classes=10).eval()
    found = {}

    def hook(name):
        def f(m, inp, _):
            key = (tuple(inp[0].shape), tuple(m.weight.shape), m.stride[0], m.padding[0])
            found.setdefault(key, []).append(name)
        return f
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook(name))
    with torch.no_grad():
        model(torch.zeros(batch, 3, size, size))
    return [dict(x=list(k[0]), w=list(k[1]), stride=k[2], pad=k[3], layers=v) for k, v in found.items()]


def conv_label(c):
    n, ci, h, w = c['x']
    co, _, kh, kw = c['w']
    return '%dx%d %d->%d s%d @%dx%d' % (kh, kw, ci, co, c['stride'], h, w)


def conv_flops(c):
    """Multiply-adds x 2 of the forward; the backward (data + filter gradients) is twice that."""
    n, ci, h, w = c['x']
    co, _, kh, kw = c['w']
    ho = (h + 2 * c['pad'] - kh) // c['stride'] + 1
    wo = (w + 2 * c['pad'] - kw) // c['stride'] + 1
    return 2.0 * n * co * ho * wo * ci * kh * kw


def machine_peak(threads, ghz, isa):
    """FP32 FMA peak in GFLOP/s for `threads` cores: AVX-512F 64 flop/cycle, AVX2+FMA 32 (two FMA
    units per core assumed; Zen 4 runs AVX-512 on 256-bit units and peaks at 32 too)."""
    per_cycle = 64 if 'avx512f' in isa else 32 if {'avx2', 'fma'} <= set(isa) else 8
    return threads * ghz * per_cycle, per_cycle


def bench_ops(args, workdir):
    """ortc: one artifact per op, trained warm-up + steps with SGD (lr tiny); torch: the same op
    forward + backward + SGD update of both tensors, in a child per thread count (torch-ops worker)."""
    import numpy as np
    rng = np.random.RandomState(0)
    ops = [dict(kind='gemm', label='GEMM %d^3' % GEMM_N, flops=3 * 2.0 * GEMM_N ** 3)]
    ops += [dict(kind='conv', label=conv_label(c), flops=3 * conv_flops(c), **c) for c in resnet_convs()]
    empty = os.path.join(workdir, 'op_empty.npz')
    np.savez(empty)
    for k, op in enumerate(ops):
        path = os.path.join(workdir, 'op%d.onnx' % k)
        if op['kind'] == 'gemm':
            a, b = (rng.randn(GEMM_N, GEMM_N).astype(np.float32) * 0.03 for _ in range(2))
            op_model(path, [onnx_node('MatMul', ['a', 'b'], ['y'])], dict(a=a, b=b))
        else:
            x = rng.randn(*op['x']).astype(np.float32)
            w = (rng.randn(*op['w']) * 0.05).astype(np.float32)
            kh = op['w'][2]
            op_model(path, [onnx_node('Conv', ['x', 'w'], ['y'], kernel_shape=[kh, kh], strides=[op['stride']] * 2,
                                      pads=[op['pad']] * 4)], dict(x=x, w=w))
        op['onnx'] = path
        op['ortc'] = {}
        build = cell(op, 'build', lambda: ortc_build(args, path, os.path.join(workdir, 'op%d.ortc' % k),
                                                     ['--loss', 'none', '--loss-output', 'loss']))
        for t in args.threads:
            if isinstance(build, str):
                op['ortc'][t] = build
            else:
                log = os.path.join(workdir, 'op%d_%dt.jsonl' % (k, t))
                cell(op['ortc'], t, lambda: ortc_train(args, build['artifact'], empty, 1e-9, t, log))
    spec, spec_path = write_spec(dict(ops=[{k: v for k, v in op.items() if k in ('kind', 'x', 'w', 'stride', 'pad')}
                                           for op in ops]), os.path.join(workdir, 'ops_spec.json'))
    for t in args.threads:
        res = {}
        got = cell(res, 'torch', lambda: run_worker('torch-ops', args, spec_path, t))
        for k, op in enumerate(ops):
            op.setdefault('torch', {})[t] = got if isinstance(got, str) else dict(ms=got['ms'][k], threads=t)
        ops[0].setdefault('matmul', {})[t] = got if isinstance(got, str) else dict(ms=got['matmul_ms'], threads=t)
    exe = cell(ops[0], 'kernel_build', lambda: build_gemm_kernel(workdir))
    for t in args.threads:
        ops[0].setdefault('kernel', {})[t] = exe if exe.startswith('error: ') else cell(
            {}, 'run', lambda: run_gemm_kernel(args, exe, t))
    return ops


def build_gemm_kernel(workdir):
    """bench/gemm_kernel.cpp against the kernel library, with the flags of an artifact's
    kernels.so (codegen/Artifact.cpp, cpuKernelBuild, default --cpu level)."""
    exe = os.path.join(workdir, 'gemm_kernel')
    subprocess.run(['c++', '-std=c++17', '-O2', '-march=x86-64-v3', '-fno-math-errno', '-fno-trapping-math',
                    '-fopenmp', '-DORTC_KERN_DNNL', '-I', os.path.join(REPO, 'kernels', 'cpu'), '-I', os.path.join(REPO, 'kernels', 'common'),
                    os.path.join(REPO, 'bench', 'gemm_kernel.cpp'), '-o', exe, '-ldnnl', '-lmvec'],
                   check=True, capture_output=True, text=True)
    return exe


def run_gemm_kernel(args, exe, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run([exe, str(GEMM_N), str(args.warmup), str(max(args.steps, 5))], env=env,
                       capture_output=True, text=True, check=True, timeout=args.timeout)
    got = json.loads(p.stdout)
    return dict(ms=min(got.values()), by_form=got, threads=threads)


def onnx_node(*a, **kw):
    from onnx import helper
    return helper.make_node(*a, **kw)


def torch_ops_worker(args, spec):
    """The ops of bench_ops in PyTorch: y = op(a, b), y.sum().backward(), SGD step on a and b."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads[0])
    torch.manual_seed(0)
    out = []
    for op in spec['ops']:
        if op['kind'] == 'gemm':
            a, b = torch.randn(GEMM_N, GEMM_N) * 0.03, torch.randn(GEMM_N, GEMM_N) * 0.03
            f = torch.matmul
        else:
            a, b = torch.randn(*op['x']), torch.randn(*op['w']) * 0.05
            f = lambda x, w, op=op: F.conv2d(x, w, stride=op['stride'], padding=op['pad'])
        a.requires_grad_(), b.requires_grad_()
        opt = torch.optim.SGD([a, b], lr=1e-9)
        times = []
        for _ in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            f(a, b).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
        out.append(median_after_warmup([t * 1e3 for t in times], args.warmup))
    a, b = torch.randn(GEMM_N, GEMM_N), torch.randn(GEMM_N, GEMM_N)
    times = []
    for _ in range(args.warmup + args.steps):  # torch.matmul alone, for the GEMM line
        t0 = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - t0)
    import resource
    return dict(ms=out, matmul_ms=median_after_warmup([t * 1e3 for t in times], args.warmup),
                rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def worker_main(args):
    with open(args.spec) as f:
        spec = json.load(f)
    fn = dict(torch=torch_worker, ort=ort_worker)[args.worker] if args.worker != 'torch-ops' else torch_ops_worker
    print(json.dumps(fn(args, spec)))


# ---------------------------------------------------------------------------------------------
# The machine: CPU model, ISA, clock (busy loop), load

def cpu_info():
    model, flags, mhz = '?', set(), None
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                key, _, val = line.partition(':')
                key = key.strip()
                if key == 'model name' and model == '?':
                    model = val.strip()
                elif key == 'flags' and not flags:
                    flags = set(val.split())
                elif key == 'cpu MHz' and mhz is None:
                    mhz = float(val)
    except OSError:
        pass
    isa = [f for f in ('avx512f', 'avx2', 'fma') if f in flags]
    return dict(model=model, isa=isa, cpuinfo_mhz=mhz, cpus=os.cpu_count(), flags=flags)


BUSY_LOOP_C = r'''
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(void) {  /* 8 dependent 1-cycle adds per iteration: cycles = 8 * iterations */
  /* Register operands: Intel's recent cores fold chains of immediate adds at rename (the
     `add $1` form measured 19 GHz on a 4 GHz Xeon). */
  long n = 250000; unsigned long x = 0, one = 1; double best = 0;
  __asm__ volatile("" : "+r"(one));
  for (int chunk = 0; chunk < 400; chunk++) {  /* ~1 ms chunks: the fastest one was not descheduled */
    double t0 = now();
    for (long i = 0; i < n; i++)
      __asm__ volatile("add %1,%0\n\tadd %1,%0\n\tadd %1,%0\n\tadd %1,%0\n\t"
                       "add %1,%0\n\tadd %1,%0\n\tadd %1,%0\n\tadd %1,%0" : "+r"(x) : "r"(one));
    double ghz = 8.0 * n / (now() - t0) / 1e9;
    if (ghz > best) best = ghz;
  }
  printf("%f\n", best);
  return x == 0;
}
'''


FMA_PEAK_C = r'''
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>
#ifdef __AVX512F__
typedef __m512 V;
#define FMA _mm512_fmadd_ps
#define SET _mm512_set1_ps
#define LANES 16
#else
typedef __m256 V;
#define FMA _mm256_fmadd_ps
#define SET _mm256_set1_ps
#define LANES 8
#endif
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
/* Every thread runs 12 independent FMA chains (enough to fill two pipelined FMA units; written
   out, so that they stay in registers) at the same time as the others; the sum of the threads'
   best rates over ~5 ms chunks. */
int main(void) {
  double best[256] = {0};
  int nt = 1;
#pragma omp parallel
  {
    int id = omp_get_thread_num();
#pragma omp single
    nt = omp_get_num_threads();
    V m = SET(0.999999f), c = SET(1e-7f);
    V a0 = SET(0.f), a1 = SET(1.f), a2 = SET(2.f), a3 = SET(3.f), a4 = SET(4.f), a5 = SET(5.f);
    V a6 = SET(6.f), a7 = SET(7.f), a8 = SET(8.f), a9 = SET(9.f), a10 = SET(10.f), a11 = SET(11.f);
    for (int rep = 0; rep < 60; rep++) {
#pragma omp barrier
      double t0 = now();
      for (long it = 0; it < 200000; it++) {
#define STEP(x) x = FMA(x, m, c);
        STEP(a0) STEP(a1) STEP(a2) STEP(a3) STEP(a4) STEP(a5)
        STEP(a6) STEP(a7) STEP(a8) STEP(a9) STEP(a10) STEP(a11)
        /* "+v": any vector register (zmm included); the chains never touch memory. */
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5),
                         "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
      }
      double gf = 200000.0 * 12 * 2 * LANES / (now() - t0) / 1e9;
      if (gf > best[id]) best[id] = gf;
    }
  }
  double total = 0;
  for (int i = 0; i < nt && i < 256; i++) total += best[i];
  printf("%f\n", total);
  return 0;
}
'''


def measure_fma_peak(workdir, info, threads):
    """The FP32 FMA rate the cores reach together: `threads` OpenMP threads each running
    independent FMA chains at once, built with cc for AVX2+FMA and, where the CPU has it,
    AVX-512 (the faster of the two: some CPUs run 512-bit FMAs on one unit or at a lower clock).
    {threads: GFLOP/s}, or {} when it cannot be built (no AVX2/FMA, no compiler)."""
    if not ({'avx2', 'fma'} <= set(info['isa'])):
        return {}
    variants = [('fma_peak_avx2', ['-mavx2', '-mfma'])]
    if 'avx512f' in info['isa']:
        variants.append(('fma_peak_avx512', ['-mavx512f']))
    src = os.path.join(workdir, 'fma_peak.c')
    try:
        with open(src, 'w') as f:
            f.write(FMA_PEAK_C)
        out = {}
        for name, flags in variants:
            exe = os.path.join(workdir, name)
            subprocess.run(['cc', '-O2', '-fopenmp'] + flags + [src, '-o', exe], check=True, capture_output=True)
            # Three tries a thread count, 1 s apart, the fastest kept: a VM's vCPUs may share one
            # physical core for a while (one probe read the 2T peak equal to the 1T one, and the
            # GEMM then ran at 136% of it).
            for _ in range(3):
                for t in threads:
                    env = dict(os.environ, OMP_NUM_THREADS=str(t), OMP_PROC_BIND='spread')
                    gf = float(subprocess.run([exe], capture_output=True, text=True, env=env, check=True).stdout)
                    out[t] = max(out.get(t, 0.0), gf)
                time.sleep(1)
        return out
    except (OSError, ValueError, subprocess.CalledProcessError):
        return {}


def measure_ghz(workdir, info):
    """Core clock from a calibrated busy loop (a chain of dependent integer adds, one per cycle, built
    with cc; the fastest of 400 ~1 ms chunks), else /proc/cpuinfo's 'cpu MHz'. Returns (GHz, how)."""
    src, exe = os.path.join(workdir, 'busy.c'), os.path.join(workdir, 'busy')
    try:
        with open(src, 'w') as f:
            f.write(BUSY_LOOP_C)
        subprocess.run(['cc', '-O2', src, '-o', exe], check=True, capture_output=True)
        ghz = float(subprocess.run([exe], capture_output=True, text=True).stdout)
        mhz = info['cpuinfo_mhz']
        return ghz, 'busy loop of dependent adds%s' % ('; /proc/cpuinfo says %.0f MHz' % mhz if mhz else '')
    except (OSError, ValueError, subprocess.CalledProcessError):
        mhz = info['cpuinfo_mhz']
        return (mhz / 1e3 if mhz else float('nan')), '/proc/cpuinfo cpu MHz'


def loadavg():
    try:
        with open('/proc/loadavg') as f:
            return ' '.join(f.read().split()[:3])
    except OSError:
        return '?'


# ---------------------------------------------------------------------------------------------
# Tables

def fmt_ms(r):
    if not isinstance(r, dict):
        return 'n/a' if r.startswith('n/a') else 'error'
    return '%.1f' % r['ms'] if r['ms'] >= 10 else '%.2f' % r['ms'] if r['ms'] >= 1 else '%.3f' % r['ms']


def fmt_best(runs):
    b = best(runs)
    if b is None:
        return fmt_ms(next(iter(runs.values())))
    return '%s (%dT)' % (fmt_ms(b), b['threads'])


def ratio(a, b):
    return a['ms'] / b['ms'] if a and b and b['ms'] > 0 else None


def fmt_ratio(x):
    return '%.2fx' % x if x else '-'


def fmt_rss(runs):
    rss = [r['rss_kb'] for r in runs.values() if isinstance(r, dict) and r.get('rss_kb')]
    return '%.0f MB' % (max(rss) / 1024) if rss else '-'


def fmt_build(b):
    return '%.1f (%.1f)' % (b['build_s'], b['compile_s']) if isinstance(b, dict) else 'error'


def model_rows(args, results):
    t1, t2 = args.threads[0], args.threads[-1]
    header = ['model', 'batch, optimizer'] + ['ortc %dT ms' % t for t in args.threads]
    header += ['ortc %dT/%dT' % (t2, t1), 'torch ms (best)', 'ORT ms (best)', 'torch/ortc', 'ORT/ortc',
               'peak RSS ortc / torch / ORT', 'ortc build s (compile)']
    rows = []
    for name, r in results.items():
        cfg, ob = r['cfg'], best(r['ortc'])
        o1, o2 = (r['ortc'][t] if isinstance(r['ortc'][t], dict) else None for t in (t1, t2))
        rows.append([name, '%d, %s' % (cfg['batch'], 'AdamW' if cfg['optimizer'] == 'adamw' else 'SGD m0.9')]
                    + [fmt_ms(r['ortc'][t]) for t in args.threads]
                    + [fmt_ratio(ratio(o1, o2)), fmt_best(r['torch']), fmt_best(r['ort']),
                       fmt_ratio(ratio(best(r['torch']), ob)), fmt_ratio(ratio(best(r['ort']), ob)),
                       ' / '.join(fmt_rss(r[k]) for k in ('ortc', 'torch', 'ort')), fmt_build(r.get('build', 'error'))])
    return header, rows


def op_rows(args, ops, peak):
    header = ['op (fwd+bwd, batch 8)']
    for t in args.threads:
        header += ['ortc %dT ms' % t, 'torch %dT ms' % t, 'torch/ortc %dT' % t]
    header += ['ortc best GFLOP/s (% of peak)']
    rows = []
    for op in ops:
        uses = '' if op['kind'] == 'gemm' else ' (%s%s)' % (op['layers'][0], ' x%d' % len(op['layers']) if len(op['layers']) > 1 else '')
        row = [op['label'] + uses]
        for t in args.threads:
            o, p = op['ortc'][t], op['torch'][t]
            row += [fmt_ms(o), fmt_ms(p), fmt_ratio(ratio(p if isinstance(p, dict) else None,
                                                          o if isinstance(o, dict) else None))]
        o = best(op['ortc'])
        if o:
            gf = op['flops'] / o['ms'] / 1e6
            row.append('%.1f (%.0f%% at %dT)' % (gf, 100 * gf / peak[o['threads']], o['threads']))
        else:
            row.append('-')
        rows.append(row)
    return header, rows


def gemm_line(args, ops, peak, per_cycle, ghz, how, nominal):
    g = ops[0]
    parts = []
    for t in args.threads:
        gf = lambda r, flops: '%.1f' % (flops / r['ms'] / 1e6) if isinstance(r, dict) else fmt_ms(r)
        k = g.get('kernel', {}).get(t)
        kernel = ('; ortc\'s GEMM kernel alone %s (%s)' % (
            gf(k, g['flops'] / 3), ', '.join('%s %s' % (form, gf(dict(ms=ms), g['flops'] / 3))
                                            for form, ms in sorted(k['by_form'].items())))
                  if isinstance(k, dict) else '; ortc\'s GEMM kernel alone: %s' % k if k else '')
        parts.append('%dT: ortc %s, torch %s (torch.matmul alone %s%s) of a peak %.0f GFLOP/s' % (
            t, gf(g['ortc'][t], g['flops']), gf(g['torch'][t], g['flops']), gf(g['matmul'][t], g['flops'] / 3),
            kernel, peak[t]))
    return ('GEMM %d^3 measured as a train step of y = a @ b with a and b trained (3 GEMMs: y, dA = dY b^T, '
            'dB = a^T dY; the step also holds ReduceSum, the ones dY and two SGD updates, counted as GEMM time): '
            '%s. %s' % (GEMM_N, '; '.join(parts), peak_note(args, peak, per_cycle, ghz, how, nominal)))


def peak_note(args, peak, per_cycle, ghz, how, nominal):
    """How the peak was found: measured (every thread running FMA chains at once), with the
    nominal figure beside it; else the nominal one."""
    isa = '+'.join(sorted(cpu_info()['isa'])) or 'no AVX2'
    formula = 'cores x %.2f GHz (%s) x %d flop/cycle (%s; two FMA units per core assumed)' % (
        ghz, how, per_cycle, isa)
    if peak is nominal:
        return 'FP32 FMA peak = %s.' % formula
    return ('FP32 FMA peak measured: every thread running 12 independent FMA chains at the same time '
            '(%s GFLOP/s); the nominal %s would be %s GFLOP/s (the cores do not hold that clock under '
            'vector load).' % (', '.join('%dT %.0f' % (t, peak[t]) for t in args.threads), formula,
                               ', '.join('%dT %.0f' % (t, nominal[t]) for t in args.threads)))


def render(header, rows, markdown):
    if markdown:
        out = ['| ' + ' | '.join(header) + ' |', '|' + '|'.join(['---'] + ['---:'] * (len(header) - 1)) + '|']
        out += ['| ' + ' | '.join(row) + ' |' for row in rows]
        return '\n'.join(out)
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    return '\n'.join('  '.join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(row, widths)))
                     for row in [header] + rows)


def target_lines(args, results):
    """The issue's targets, reported: ortc 2T >= 1.6x 1T; torch best / ortc best >= 1.2 (resnet), 1.0."""
    t1, t2 = args.threads[0], args.threads[-1]
    out = []
    for name, r in results.items():
        o1, o2 = (r['ortc'][t] if isinstance(r['ortc'][t], dict) else None for t in (t1, t2))
        s, v = ratio(o1, o2), ratio(best(r['torch']), best(r['ortc']))
        want = TARGET_VS_TORCH.get(r['cfg']['family'], 1.0)
        out.append('%s: %dT/%dT %s (target %.1fx: %s), vs PyTorch %s (target %.1fx: %s)' % (
            name, t2, t1, fmt_ratio(s), TARGET_SCALING, 'met' if s and s >= TARGET_SCALING else 'missed',
            fmt_ratio(v), want, 'met' if v and v >= want else 'missed'))
    return out


def gemm_target(args, ops, peak):
    """GEMM 1024^3 >= 70% of the FMA peak: ortc's GEMM kernel alone (its fastest form) at its
    best thread count; the train step around it is the table's figure."""
    k = ops[0].get('kernel', {})
    rates = {t: ops[0]['flops'] / 3 / k[t]['ms'] / 1e6 for t in args.threads if isinstance(k.get(t), dict)}
    if not rates:
        return 'GEMM %d^3: the GEMM kernel was not measured' % GEMM_N
    t = max(rates, key=lambda t: rates[t] / peak[t])
    share = rates[t] / peak[t]
    return 'GEMM %d^3: ortc\'s GEMM kernel %.0f GFLOP/s at %dT, %.0f%% of the measured FMA peak (target 70%%: %s)' % (
        GEMM_N, rates[t], t, 100 * share, 'met' if share >= 0.7 else 'missed')


def detail_lines(results, ops):
    """Losses (a check that the frameworks train the same thing), ORT extras, and every error."""
    out = []
    for name, r in results.items():
        parts = []
        for key in ('ortc', 'torch', 'ort'):
            b = best(r[key])
            if b:
                parts.append('%s loss %.4f -> %.4f' % (key, b['loss_1'], b['loss_last']))
        b = best(r['ort'])
        if b:
            parts.append('ORT generate_artifacts %.1f s' % b['generate_s'])
        if isinstance(r.get('build'), dict):
            parts.append('ortc codegen %.1f ms' % r['build']['codegen_ms'])
        out.append('%s: %s' % (name, '; '.join(parts)))
        msgs = {}
        for key in ('build', 'ortc', 'torch', 'ort'):
            for t, v in (r[key].items() if isinstance(r.get(key), dict) and key != 'build' else [('', r.get(key))]):
                if isinstance(v, str):
                    msgs.setdefault('%s: %s' % (key, v), []).append(str(t))
        out += ['%s: %s%s' % (name, m, ' (%sT)' % ','.join(ts) if ts != [''] else '') for m, ts in msgs.items()]
    for op in ops or []:
        for key in ('ortc', 'torch'):
            for t, v in op[key].items():
                if isinstance(v, str):
                    out.append('%s: %s %dT %s' % (op['label'], key, t, v))
        if isinstance(op.get('build'), str):
            out.append('%s: build %s' % (op['label'], op['build']))
    return out


def fusion_rows(args, results):
    """Fused (default) vs --fusion none: train-step launches, distinct kernels, estimated bytes,
    arena, and step time at the best thread count of each."""
    header = ['model', 'launches none -> fused', 'distinct kernels', 'MB read+written', 'arena KiB',
              'step ms none -> fused (best threads)', 'fused speed-up']
    rows = []
    for name, r in results.items():
        b, u = r.get('build'), r.get('unfused_build')
        if not isinstance(b, dict) or not isinstance(u, dict) or b.get('launches') is None:
            continue
        def best(d):
            ts = [v['ms'] for v in d.values() if isinstance(v, dict)]
            return min(ts) if ts else None
        fused_ms, none_ms = best(r['ortc']), best(r.get('unfused', {}))
        pct = lambda a, b: '%d -> %d (%.0f%%)' % (a, b, 100.0 * b / a) if a else '-'
        rows.append([name, pct(u['launches'], b['launches']), '%d -> %d' % (u['distinct'], b['distinct']),
                     '%.1f -> %.1f (%.0f%%)' % (u['mbytes'], b['mbytes'], 100.0 * b['mbytes'] / u['mbytes']),
                     '%d -> %d (%.0f%%)' % (u['arena'] // 1024, b['arena'] // 1024, 100.0 * b['arena'] / u['arena']),
                     '%.2f -> %.2f' % (none_ms, fused_ms) if none_ms and fused_ms else '-',
                     '%.2fx' % (none_ms / fused_ms) if none_ms and fused_ms else '-'])
    return header, rows


def precision_rows(args, results):
    """fp32 (the table above) vs each --precisions build: train-step arena, step time at the best
    thread count, the first and last logged loss."""
    header = ['model', 'precision', 'arena KiB fp32 -> 16-bit', 'step ms fp32 -> 16-bit (best threads)',
              'loss first -> last (fp32 | 16-bit)']
    rows = []
    def best(d):
        runs = [v for v in d.values() if isinstance(v, dict)]
        return min(runs, key=lambda v: v['ms']) if runs else None
    for name, r in results.items():
        b = r.get('build')
        for prec, pr in r.get('precision', {}).items():
            pb = pr.get('build')
            if not isinstance(b, dict) or not isinstance(pb, dict) or not b.get('arena') or not pb.get('arena'):
                rows.append([name, prec, str(pb)[:80] if isinstance(pb, str) else '-', '-', '-'])
                continue
            f, h = best(r['ortc']), best(pr['runs'])
            losses = lambda v: '%.4f -> %.4f' % (v['loss_1'], v['loss_last']) if v and 'loss_1' in v else '-'
            rows.append([name, prec, '%d -> %d (%.0f%%)' % (b['arena'] // 1024, pb['arena'] // 1024,
                                                             100.0 * pb['arena'] / b['arena']),
                         '%.2f -> %.2f (%.2fx)' % (f['ms'], h['ms'], f['ms'] / h['ms']) if f and h else '-',
                         '%s | %s' % (losses(f), losses(h))])
    return header, rows


def report(args, results, ops, mach, markdown):
    """The whole output (also the README block): header, model table, targets, op table, details."""
    lines = []
    date = datetime.date.today().isoformat()
    lines.append('Measured %s%s on %d CPUs, %s (%s), clock %.2f GHz (%s); load average %s at the start, %s at the end.'
                 % (date, ' with ' + args.label if args.label else '', mach['cpus'], mach['model'],
                    ', '.join(mach['isa']) or 'no AVX2', mach['ghz'], mach['ghz_how'], mach['load_start'], mach['load_end']))
    lines.append('')
    lines.append('Medians of %d steps after %d warm-up; each ortc time is the median of %d such runs, every build and '
                 'thread count of a model taking its turn in each round; PyTorch eager (torch %s) and ORT Training take '
                 'the best of %s threads, each in its own process; ratios > 1: ortc is faster than the other.'
                 % (args.steps, args.warmup, args.rounds, mach.get('torch', '?'), ' and '.join(map(str, args.threads))))
    lines.append('')
    lines.append(render(*model_rows(args, results), markdown))
    lines.append('')
    targets = target_lines(args, results)
    if ops:
        targets.append(gemm_target(args, ops, mach['peak']))
    lines += [('- ' if markdown else '') + l for l in ['Targets (reported, not asserted):'] + targets]
    header, rows = fusion_rows(args, results)
    if rows:
        lines.append('')
        lines.append('Kernel formation (ortc build --fusion default, the table above) against --fusion none (one '
                     'kernel per op), same run; the train step:')
        lines.append('')
        lines.append(render(header, rows, markdown))
    header, rows = precision_rows(args, results)
    if rows:
        lines.append('')
        lines.append('Mixed precision (ortc build --precision, activations stored in 16 bits, float32 master '
                     'weights; bf16 GEMMs in hardware where the CPU has AVX-512 BF16 (%s here), else float32 '
                     'compute) against the fp32 build above, same run; the train step:'
                     % ('it has' if 'avx512_bf16' in cpu_info()['flags'] else 'not'))
        lines.append('')
        lines.append(render(header, rows, markdown))
    if ops:
        lines.append('')
        lines.append(gemm_line(args, ops, mach['peak'], mach['per_cycle'], mach['ghz'], mach['ghz_how'],
                               mach['nominal']))
        lines.append('')
        lines.append('Per op, forward + backward (data and filter/weight gradients) + SGD update, ortc (one-op '
                     'artifact) vs PyTorch eager, same thread count; GFLOP/s counts 3x the forward FLOPs:')
        lines.append('')
        lines.append(render(*op_rows(args, ops, mach['peak']), markdown))
    return '\n'.join(lines)


def write_readme(block):
    with open(README) as f:
        text = f.read()
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit('README.md has no speed table markers (%s ... %s)' % (README_BEGIN, README_END))
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    with open(README, 'w') as f:
        f.write(head + README_BEGIN + '\n' + block + '\n' + README_END + tail)


def main():
    args = parse_args()
    if args.worker:
        args.threads = args.threads[:1]
        return worker_main(args)
    t_start = time.time()
    workdir = args.workdir or tempfile.mkdtemp(prefix='ortc-bench-')
    os.makedirs(workdir, exist_ok=True)
    mach = cpu_info()
    mach['load_start'] = loadavg()
    mach['ghz'], mach['ghz_how'] = measure_ghz(workdir, mach)
    mach['nominal'] = {t: machine_peak(t, mach['ghz'], mach['isa'])[0] for t in args.threads}
    measured = measure_fma_peak(workdir, mach, args.threads)
    mach['peak'] = measured if len(measured) == len(args.threads) else mach['nominal']
    mach['per_cycle'] = machine_peak(1, mach['ghz'], mach['isa'])[1]
    import torch
    mach['torch'] = torch.__version__
    print('FP32 FMA peak: %s GFLOP/s (%s)' % (
        ', '.join('%dT %.0f' % (t, mach['peak'][t]) for t in args.threads),
        'nominal' if mach['peak'] is mach['nominal'] else 'measured'), flush=True)
    print('machine: %d CPUs, %s, %s, clock %.2f GHz (%s), load average %s' % (
        mach['cpus'], mach['model'], ', '.join(mach['isa']), mach['ghz'], mach['ghz_how'], mach['load_start']), flush=True)
    try:
        results = {}
        for name, cfg in args.configs.items():
            print('.. %s' % name, file=sys.stderr, flush=True)
            results[name] = bench_model(args, name, cfg, workdir)
        ops = None
        if not args.no_ops:
            print('.. per-op table', file=sys.stderr, flush=True)
            ops = bench_ops(args, workdir)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    mach['load_end'] = loadavg()
    block = report(args, results, ops, mach, markdown=args.markdown or args.readme)
    print()
    print(block)
    print()
    print('\n'.join(detail_lines(results, ops)))
    print('\nwhole run: %.0f s' % (time.time() - t_start))
    if args.readme:
        write_readme(block)
        print('rewrote the speed table in %s' % README)
    # ORT "n/a" is a finding, not a failure; an error in any ortc or torch cell makes the exit status 1.
    cells = [v for r in results.values() for k in ('ortc', 'torch') for v in r[k].values()]
    cells += [v for op in ops or [] for k in ('ortc', 'torch') for v in op[k].values()]
    return 1 if any(isinstance(v, str) for v in cells) else 0


if __name__ == '__main__':
    sys.exit(main())
