# `ortc train` as users run it (issue 22): learning-rate schedules against PyTorch's own
# schedulers (the values logged per step, and SGD under a schedule against the float64
# oracle), evaluation records (loss and accuracy against PyTorch's eval), and a table of
# every flag the command line refuses, each with its exit status and the flag named.
import json
import math
import os
import re
import shutil
import subprocess
import unittest
import warnings

import numpy as np

from ortc_testlib import ENV, ORTC, ORTC_RUN, ROOT, TempDir, check_sgd_vs_torch, run, sample_path

STEPS = 12
LR = 0.2


def hf_lambda(kind, warmup, total, min_ratio=0.0):
    """The lr factor of 0-based step p under Hugging Face's schedules (transformers'
    get_{constant,linear,cosine,inverse_sqrt}_schedule_with_warmup), with a floor."""
    def f(p):
        if p < warmup:
            return p / max(1, warmup)
        if kind == "constant":
            return 1.0
        if kind == "inverse-sqrt":
            scale = warmup or 10000
            return max(min_ratio, 1.0 / math.sqrt((p + scale - warmup) / scale))
        progress = min(1.0, (p - warmup) / max(1, total - warmup))
        decay = 1.0 - progress if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_ratio + (1.0 - min_ratio) * decay
    return f


def small_model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


class Schedules(unittest.TestCase):
    def test_logged_lr_matches_torch_schedulers(self):
        import torch
        x = np.random.RandomState(0).randn(8, 16).astype(np.float32)
        labels = np.random.RandomState(1).randint(0, 5, 8)
        cases = [("constant", 3, 0.0), ("linear", 3, 0.0), ("cosine", 0, 0.02),
                 ("cosine", 4, 0.0), ("inverse-sqrt", 4, 0.0), ("inverse-sqrt", 0, 0.0)]
        with TempDir() as d:
            art, feed, log = (os.path.join(d, n) for n in ("m.ortc", "feed.npz", "log.jsonl"))
            self.export(small_model(), x, os.path.join(d, "m.onnx"))
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", art])
            np.savez(feed, x=x, labels=labels)
            for kind, warmup, min_lr in cases:
                flags = ["--lr-schedule", kind, "--warmup-steps", str(warmup)]
                if min_lr:
                    flags += ["--min-lr", str(min_lr)]
                for tool in (ORTC, ORTC_RUN):
                    run([tool, "train", art, "--data", feed, "--steps", str(STEPS), "--lr", str(LR),
                         "--log-json", log, "--quiet"] + flags)
                    got = [r["lr"] for r in read_log(log)]
                    want = self.torch_lrs(kind, warmup, min_lr)
                    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12,
                                               err_msg="%s warmup %d" % (kind, warmup))

    def torch_lrs(self, kind, warmup, min_lr):
        """The lr of each step as PyTorch's schedulers give it: CosineAnnealingLR where it
        is that schedule (no warm-up), else LambdaLR over HF's factor."""
        import torch
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)
        if kind == "cosine" and warmup == 0:
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS, eta_min=min_lr)
        else:
            sched = torch.optim.lr_scheduler.LambdaLR(
                opt, hf_lambda(kind, warmup, STEPS, min_lr / LR))
        lrs = []
        for _ in range(STEPS):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return lrs

    @staticmethod
    def export(model, x, path):
        import torch
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, torch.from_numpy(x), path, opset_version=17,
                              input_names=["x"], output_names=["logits"])

    def test_sgd_under_warmup_cosine_meets_the_oracle(self):
        x = np.random.RandomState(2).randn(8, 16).astype(np.float32)
        labels = np.random.RandomState(3).randint(0, 5, 8)
        check_sgd_vs_torch(self, small_model(), x, labels, STEPS, LR, "warm-up + cosine",
                           train_flags=["--lr-schedule", "cosine", "--warmup-steps", "3",
                                        "--min-lr", "0.02"],
                           lr_lambda=hf_lambda("cosine", 3, STEPS, 0.02 / LR))

    def test_resumed_run_continues_the_schedule(self):
        x = np.random.RandomState(4).randn(8, 16).astype(np.float32)
        labels = np.random.RandomState(5).randint(0, 5, 8)
        with TempDir() as d:
            art, feed = os.path.join(d, "m.ortc"), os.path.join(d, "feed.npz")
            Schedules.export(small_model(), x, os.path.join(d, "m.onnx"))
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", art])
            np.savez(feed, x=x, labels=labels)
            flags = ["--lr", str(LR), "--lr-schedule", "linear", "--warmup-steps", "2",
                     "--schedule-steps", "10", "--quiet"]
            run([ORTC, "train", art, "--data", feed, "--steps", "10", "--log-json",
                 os.path.join(d, "whole.jsonl")] + flags)
            run([ORTC, "train", art, "--data", feed, "--steps", "4", "--save-checkpoint",
                 os.path.join(d, "c.npz")] + flags)
            run([ORTC, "train", art, "--data", feed, "--steps", "6", "--load-checkpoint",
                 os.path.join(d, "c.npz"), "--log-json", os.path.join(d, "rest.jsonl")] + flags)
            whole = read_log(os.path.join(d, "whole.jsonl"))
            rest = read_log(os.path.join(d, "rest.jsonl"))
            self.assertEqual([r["lr"] for r in whole[4:]], [r["lr"] for r in rest])
            self.assertEqual([r["loss"] for r in whole[4:]], [r["loss"] for r in rest])


class GradAccumulation(unittest.TestCase):
    """--grad-accum N on micro-batches of B rows against one step on the N*B batch, judged
    by the float64 oracle (PyTorch's float32 large-batch run as the yardstick)."""
    N, B, STEPS, LR = 3, 4, 4, 0.1

    def torch_run(self, model, xs, ys, dtype):
        import copy
        import torch
        import torch.nn.functional as F
        model = copy.deepcopy(model).to(dtype).train()
        opt = torch.optim.SGD(model.parameters(), lr=self.LR, momentum=0.9)
        losses = []
        for i in range(self.STEPS):
            sl = slice(i * self.N, (i + 1) * self.N)
            x = torch.from_numpy(np.concatenate(xs[sl])).to(dtype)
            y = torch.from_numpy(np.concatenate(ys[sl]))
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, {k: v.detach().double().numpy() for k, v in model.named_parameters()}

    def test_accumulation_matches_the_large_batch(self):
        import torch
        from ortc_testlib import check_oracle
        rs = np.random.RandomState(7)
        k = self.N * self.STEPS
        xs = rs.randn(k, self.B, 16).astype(np.float32)
        ys = rs.randint(0, 5, (k, self.B))
        model = small_model()
        init = {n: v.detach().double().numpy() for n, v in model.named_parameters()}
        losses64, final64 = self.torch_run(model, xs, ys, torch.float64)
        losses32, final32 = self.torch_run(model, xs, ys, torch.float32)
        with TempDir() as d:
            art, feed = os.path.join(d, "m.ortc"), os.path.join(d, "feed.npz")
            Schedules.export(model, xs[0], os.path.join(d, "m.onnx"))
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", art, "--grad-accum",
                 "--momentum", "0.9"])
            np.savez(feed, x=xs, labels=ys)
            for tool in (ORTC, ORTC_RUN):
                log, params = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
                run([tool, "train", art, "--data", feed, "--steps", str(self.STEPS), "--lr",
                     str(self.LR), "--grad-accum", str(self.N), "--log-json", log,
                     "--save-params", params, "--quiet"])
                losses = [r["loss"] for r in read_log(log)]
                trained = dict(np.load(params))
                upd = {n: trained[n].astype(np.float64) - init[n] for n in init}
                failures, worst = check_oracle(
                    losses, losses64, losses32, upd, {n: final64[n] - init[n] for n in init},
                    {n: final32[n] - init[n] for n in init}, "grad-accum %d" % self.N)
                print("grad-accum: worst loss err %.1e (torch f32 %.1e), update err %.1e "
                      "(torch f32 %.1e)" % (worst["loss"], worst["loss32"], worst["update"],
                                            worst["update32"]))
                self.assertFalse(failures, "\n".join(failures))
            # N = 1 on an accumulating artifact is the plain step; N > 1 on a plain one is refused.
            run([ORTC, "train", art, "--data", feed, "--steps", "2", "--save-params",
                 os.path.join(d, "one.npz"), "--quiet"])
            plain = os.path.join(d, "plain.ortc")
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", plain, "--momentum", "0.9"])
            run([ORTC, "train", plain, "--data", feed, "--steps", "2", "--save-params",
                 os.path.join(d, "plain.npz"), "--quiet"])
            a, b = np.load(os.path.join(d, "one.npz")), np.load(os.path.join(d, "plain.npz"))
            for n in a:
                np.testing.assert_array_equal(a[n], b[n], err_msg=n)
            # One micro-batch's activations in memory: each step of the accumulating artifact
            # plans the arena of the plain step on the same batch (the running sums are state).
            arenas = {}
            for name, path in (("acc", art), ("plain", plain)):
                with open(os.path.join(path, "manifest.json")) as f:
                    arenas[name] = {k: v["arena_bytes"] for k, v in json.load(f)["functions"].items()}
            self.assertLessEqual(arenas["acc"]["accumulate_step"], arenas["plain"]["train_step"])
            self.assertLessEqual(arenas["acc"]["train_step"], arenas["plain"]["train_step"])
            p = subprocess.run([ORTC, "train", plain, "--data", feed, "--grad-accum", "2"],
                               capture_output=True, text=True, env=ENV)
            self.assertEqual(p.returncode, 1)
            self.assertIn("has no accumulate_step; build it with ortc build --grad-accum", p.stderr)


class GradAccumulationWithBatchNorm(unittest.TestCase):
    """With BatchNorm, accumulation is not the large batch (each micro-batch is normalised by
    its own statistics and moves the running ones): ortc matches PyTorch's own accumulation
    loop (loss / N backward per micro-batch, one step), running statistics included."""
    N, B, STEPS, LR = 2, 6, 3, 0.1

    def torch_run(self, model, xs, ys, dtype):
        import copy
        import torch
        import torch.nn.functional as F
        model = copy.deepcopy(model).to(dtype).train()
        opt = torch.optim.SGD(model.parameters(), lr=self.LR)
        losses = []
        for i in range(self.STEPS):
            opt.zero_grad()
            total = 0.0
            for k in range(self.N):
                x = torch.from_numpy(xs[i * self.N + k]).to(dtype)
                loss = F.cross_entropy(model(x), torch.from_numpy(ys[i * self.N + k]))
                (loss / self.N).backward()
                total += loss.item() / self.N
            opt.step()
            losses.append(total)
        return losses, {k: v.detach().double().numpy() for k, v in model.state_dict().items()
                        if v.dtype.is_floating_point}

    def test_matches_torch_accumulation(self):
        import torch
        from ortc_testlib import check_oracle
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.BatchNorm1d(24),
                                    torch.nn.ReLU(), torch.nn.Linear(24, 5))
        rs = np.random.RandomState(9)
        k = self.N * self.STEPS
        xs, ys = rs.randn(k, self.B, 16).astype(np.float32), rs.randint(0, 5, (k, self.B))
        with TempDir() as d:
            art, feed = os.path.join(d, "m.ortc"), os.path.join(d, "feed.npz")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, torch.from_numpy(xs[0]), os.path.join(d, "m.onnx"),
                                  opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False, input_names=["x"],
                                  output_names=["logits"])
            # The export ran the model once in training mode, moving its running statistics:
            # PyTorch's runs start from what the ONNX file holds, as ortc does.
            import onnx
            from onnx import numpy_helper
            stored = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(d, "m.onnx")).graph.initializer}
            with torch.no_grad():
                for name, buf in model.named_buffers():
                    if name in stored:
                        buf.copy_(torch.from_numpy(stored[name]))
            init = {n: v.detach().double().numpy() for n, v in model.state_dict().items()
                    if v.dtype.is_floating_point}
            losses64, final64 = self.torch_run(model, xs, ys, torch.float64)
            losses32, final32 = self.torch_run(model, xs, ys, torch.float32)
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", art, "--grad-accum"])
            np.savez(feed, x=xs, labels=ys)
            log, params = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
            run([ORTC, "train", art, "--data", feed, "--steps", str(self.STEPS), "--lr", str(self.LR),
                 "--grad-accum", str(self.N), "--log-json", log, "--save-params", params, "--quiet"])
            trained = dict(np.load(params))
            losses = [r["loss"] for r in read_log(log)]
        self.assertIn("1.running_mean", trained)
        upd = {n: trained[n].astype(np.float64) - init[n] for n in init if n in trained}
        failures, worst = check_oracle(
            losses, losses64, losses32, upd, {n: final64[n] - init[n] for n in upd},
            {n: final32[n] - init[n] for n in upd}, "grad-accum with BatchNorm")
        print("grad-accum with BatchNorm: worst loss err %.1e (torch f32 %.1e), update err %.1e "
              "(torch f32 %.1e)" % (worst["loss"], worst["loss32"], worst["update"], worst["update32"]))
        self.assertFalse(failures, "\n".join(failures))


class AdamWSettings(unittest.TestCase):
    """AdamW's betas, eps and weight decay are `ortc train` flags: training an artifact
    built with the defaults under the flags is, bit for bit, training one built with those
    values (which test_train_vs_torch holds against PyTorch's AdamW)."""
    def test_train_flags_equal_build_flags(self):
        rs = np.random.RandomState(8)
        x, y = rs.randn(3, 8, 16).astype(np.float32), rs.randint(0, 5, (3, 8))
        settings = ["--beta1", "0.8", "--beta2", "0.95", "--eps", "1e-6", "--weight-decay", "0.05"]
        with TempDir() as d:
            onnx_path, feed = os.path.join(d, "m.onnx"), os.path.join(d, "feed.npz")
            Schedules.export(small_model(), x[0], onnx_path)
            np.savez(feed, x=x, labels=y)
            default, built = os.path.join(d, "default.ortc"), os.path.join(d, "built.ortc")
            run([ORTC, "build", onnx_path, "-o", default, "--optimizer", "adamw"])
            run([ORTC, "build", onnx_path, "-o", built, "--optimizer", "adamw"] + settings)
            out = {}
            for name, art, flags in (("flags", default, settings), ("built", built, []),
                                     ("defaults", default, [])):
                p = os.path.join(d, name + ".npz")
                run([ORTC, "train", art, "--data", feed, "--steps", "5", "--lr", "0.01",
                     "--save-params", p, "--quiet"] + flags)
                out[name] = dict(np.load(p))
            for k in out["built"]:
                np.testing.assert_array_equal(out["flags"][k], out["built"][k], err_msg=k)
            self.assertFalse(all(np.array_equal(out["defaults"][k], out["built"][k])
                                 for k in out["built"]), "the flags changed nothing")
            sgd = os.path.join(d, "sgd.ortc")
            run([ORTC, "build", onnx_path, "-o", sgd])
            p = subprocess.run([ORTC, "train", sgd, "--data", feed, "--beta1", "0.8"],
                               capture_output=True, text=True, env=ENV)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("--beta1: %s has no run-time 'beta1'" % sgd, p.stderr)


class Evaluation(unittest.TestCase):
    def test_eval_records_match_torch(self):
        import torch
        import torch.nn.functional as F
        rs = np.random.RandomState(6)
        x = rs.randn(8, 16).astype(np.float32)
        labels = rs.randint(0, 5, 8)
        ex = rs.randn(3, 8, 16).astype(np.float32)       # three eval batches
        ey = rs.randint(0, 5, (3, 8))
        ey[1, 2] = -100                                  # ignored: counted in neither
        model = small_model().double().eval()
        with torch.no_grad():
            logits = [model(torch.from_numpy(b).double()) for b in ex]
            want_loss = np.mean([F.cross_entropy(l, torch.from_numpy(y)).item()
                                 for l, y in zip(logits, ey)])
            kept = ey != -100
            hits = sum(((l.argmax(1).numpy() == y) & k).sum() for l, y, k in zip(logits, ey, kept))
            want_acc = hits / kept.sum()
        with TempDir() as d:
            art = os.path.join(d, "m.ortc")
            Schedules.export(small_model(), x, os.path.join(d, "m.onnx"))
            run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", art])
            np.savez(os.path.join(d, "feed.npz"), x=x, labels=labels)
            np.savez(os.path.join(d, "eval.npz"), x=ex, labels=ey)
            log = os.path.join(d, "log.jsonl")
            # Before any step: the records are PyTorch's eval of the same weights.
            out = run([ORTC, "train", art, "--data", os.path.join(d, "feed.npz"), "--steps", "0",
                       "--eval", "--eval-data", os.path.join(d, "eval.npz")]).stdout
            self.assertRegex(out, r"eval loss [0-9.]+ accuracy [0-9.]+")
            loss, acc = (float(v) for v in out.split()[2::2])
            self.assertAlmostEqual(loss, want_loss, delta=1e-5 * abs(want_loss))
            self.assertAlmostEqual(acc, want_acc, delta=1e-5)
            # Every 4 steps of 10: records after steps 4 and 8, each over the 3 batches.
            run([ORTC, "train", art, "--data", os.path.join(d, "feed.npz"), "--steps", "10",
                 "--eval-data", os.path.join(d, "eval.npz"), "--eval-every", "4", "--log-json",
                 log, "--quiet"])
            records = [r for r in read_log(log) if "eval_loss" in r]
            self.assertEqual([(r["step"], r["eval_batches"]) for r in records], [(4, 3), (8, 3)])
            for r in records:
                self.assertTrue(0 <= r["eval_accuracy"] <= 1 and r["eval_loss"] > 0)
            steps = [r for r in read_log(log) if "loss" in r]
            self.assertEqual(len(steps), 10)


class ReadmeExample(unittest.TestCase):
    """The README's fine-tuning run, end to end, as written there (on the MLP sample, its
    step counts scaled down): every flag it shows is accepted and does what it says."""
    SCALE = {"--steps": "8", "--warmup-steps": "2", "--eval-every": "4", "--log-every": "2"}

    def test_fine_tuning_run_as_the_readme_writes_it(self):
        with open(os.path.join(ROOT, "README.md")) as f:
            text = f.read()
        block = re.search(r"A fine-tuning run, end to end:\n\n```sh\n(.*?)```", text, re.S).group(1)
        with TempDir() as d:
            rs = np.random.RandomState(5)
            for name, n in (("train.npz", 16), ("val.npz", 2)):
                np.savez(os.path.join(d, name), x=rs.randn(n, 8, 32).astype(np.float32),
                         labels=rs.randint(0, 10, (n, 8)))
            shutil.copy(sample_path("mlp"), os.path.join(d, "model.onnx"))
            for line in block.replace("\\\n", " ").strip().splitlines():
                words = line.split()
                for i, w in enumerate(words[:-1]):
                    words[i + 1] = self.SCALE.get(w, words[i + 1])
                words[0] = {"ortc": ORTC}[words[0]]
                run(words, cwd=d)
            records = read_log(os.path.join(d, "log.jsonl"))
            self.assertEqual([r["step"] for r in records if "loss" in r], list(range(1, 9)))
            self.assertEqual([r["step"] for r in records if "eval_loss" in r], [4, 8])
            self.assertEqual(records[0]["lr"], 0.0)  # warm-up from 0
            for f in ("trained.npz", "ckpt.npz", "trained.onnx"):
                self.assertTrue(os.path.exists(os.path.join(d, f)), f)


class RefusedFlags(unittest.TestCase):
    """Every refused flag: exit status (2: usage) and a message naming the flag."""
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        d = cls.d = cls.tmp.__enter__()
        x = np.zeros((4, 16), np.float32)
        Schedules.export(small_model(), x, os.path.join(d, "m.onnx"))
        cls.art = os.path.join(d, "m.ortc")
        run([ORTC, "build", os.path.join(d, "m.onnx"), "-o", cls.art])
        np.savez(os.path.join(d, "feed.npz"), x=x, labels=np.zeros(4, np.int64))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.__exit__(None, None, None)

    def expect(self, args, status, needle, tools=(ORTC,)):
        for tool in tools:
            p = subprocess.run([tool] + args, capture_output=True, text=True, env=ENV)
            self.assertEqual(p.returncode, status, "%s %s: %s" % (tool, args, p.stderr))
            self.assertIn(needle, p.stderr, "%s %s" % (tool, args))
            self.assertNotIn("loc(", p.stderr)

    def test_build_flags(self):
        m = os.path.join(self.d, "m.onnx")
        out = ["-o", os.path.join(self.d, "never.ortc")]
        table = [
            (["--dim", "batch=0"], "--dim takes NAME=N with N >= 1"),
            (["--dim", "b=2", "--dim", "b=2"], "--dim b given twice"),
            (["--shape", "x=0x16"], "--shape takes INPUT=AxBxC"),
            (["--momentum", "-1"], "--momentum"),
            (["--momentum", "nan"], "--momentum"),
            (["--dampening", "2"], "--dampening"),
            (["--weight-decay", "inf"], "--weight-decay"),
            (["--optimizer", "adamw", "--beta1", "1"], "--beta1"),
            (["--optimizer", "adamw", "--beta2", "-0.1"], "--beta2"),
            (["--optimizer", "adamw", "--eps", "0"], "--eps"),
            (["--clip-grad-norm", "0"], "--clip-grad-norm"),
            (["--label-smoothing", "1.5"], "--label-smoothing"),
            (["--optimizer", "adamw", "--momentum", "0.9"], "--momentum is an sgd setting"),
            (["--beta1", "0.8"], "--beta1 is an adamw setting"),
            (["--nesterov"], "--nesterov needs --momentum > 0"),
            (["--loss", "mse", "--label-smoothing", "0.1"], "--label-smoothing is a cross_entropy setting"),
            (["--loss", "none"], "--loss none needs --loss-output"),
            (["--loss-output", "y"], "--loss-output names the graph's own loss"),
            (["--arch", "sm_90"], "--arch is for --target cuda or rocm"),
            (["--target", "cuda", "--cpu", "x86-64-v3"], "--cpu is for --target cpu"),
            (["--no-ptx"], "--no-ptx is for --target cuda"),
            (["--dump-dir", self.d], "--dump-dir needs --dump-after"),
            (["--emit-file", os.path.join(self.d, "x.mlir")], "--emit-file is where"),
            (["--target", "tpu"], "--target"),
            (["--fusion", "max"], "--fusion"),
            (["-j", "0"], "--jobs"),
        ]
        for args, needle in table:
            self.expect(["build", m] + out + args, 2, needle)
        self.expect(["build", m, "--stop-after", "import", "-o", os.path.join(self.d, "x.mlir")], 2,
                    "--stop-after prints IR and writes no artifact")
        self.expect(["build", m], 2, "build needs -o OUT")
        self.assertFalse(os.path.exists(os.path.join(self.d, "never.ortc")))

    def test_train_flags(self):
        base = ["train", self.art, "--data", os.path.join(self.d, "feed.npz")]
        ev = ["--eval-data", os.path.join(self.d, "feed.npz")]
        table = [
            (["--lr", "nan"], "--lr"),
            (["--lr", "-1"], "--lr"),
            (["--steps", "-1"], "--steps"),
            (["--grad-accum", "0"], "--grad-accum"),
            (["--beta1", "1"], "--beta1"),
            (["--beta2", "nan"], "--beta2"),
            (["--eps", "0"], "--eps"),
            (["--weight-decay", "-0.1"], "--weight-decay"),
            (["--epochs", "0"], "--epochs"),
            (["--shuffle", "-2"], "--shuffle"),
            (["--lr-schedule", "cosin"], "--lr-schedule"),
            (["--warmup-steps", "-2"], "--warmup-steps"),
            (["--lr-schedule", "cosine", "--min-lr", "1"], "--min-lr"),
            (["--min-lr", "0.001"], "--min-lr is the floor of a decaying --lr-schedule"),
            (["--schedule-steps", "20"], "--schedule-steps is where linear and cosine"),
            (["--lr-schedule", "cosine", "--schedule-steps", "0"], "--schedule-steps"),
            (["--steps", "3", "--epochs", "1"], "--epochs"),
            (["--eval-every", "5"], "--eval-every needs --eval-data"),
            (["--eval-every", "0"] + ev, "--eval-every"),
            (ev, "--eval-data needs --eval-every N or --eval"),
            (["--log-every", "0"], "--log-every"),
            (["--log-every", "5", "--quiet"], "--log-every and --quiet"),
            (["--threads", "0"], "--threads"),
            (["--init-seed", "-3"], "--init-seed"),
            (["--on-nonfinite", "ignore"], "--on-nonfinite"),
            (["--save-params", "a.npz", "--save-checkpoint", "a.npz"], "name the same file"),
        ]
        for args, needle in table:
            self.expect(base + args, 2, needle, tools=(ORTC, ORTC_RUN))
        # A schedule that cannot decay within the run is the run's problem (exit 1).
        self.expect(base + ["--steps", "3", "--lr-schedule", "linear", "--warmup-steps", "5"], 1,
                    "--lr-schedule linear decays after the 5 warm-up steps", tools=(ORTC, ORTC_RUN))

    def test_log_every_and_quiet(self):
        """Progress lines: every step by default, every N-th and the last with --log-every N,
        none with --quiet (the JSON log has every step regardless)."""
        base = ["train", self.art, "--data", os.path.join(self.d, "feed.npz"), "--steps", "5"]
        for tool in (ORTC, ORTC_RUN):
            for extra, steps in (([], [1, 2, 3, 4, 5]), (["--log-every", "2"], [2, 4, 5]), (["--quiet"], [])):
                log = os.path.join(self.d, "log.jsonl")
                p = subprocess.run([tool] + base + extra + ["--log-json", log], capture_output=True,
                                   text=True, env=ENV)
                self.assertEqual(p.returncode, 0, p.stderr)
                printed = [int(m) for m in re.findall(r"^step (\d+) loss", p.stdout + p.stderr, re.M)]
                self.assertEqual(printed, steps, "%s %s" % (os.path.basename(tool), extra))
                with open(log) as f:
                    self.assertEqual(len(f.readlines()), 5)

    def test_commands_and_version(self):
        self.expect(["bogus"], 2, "unknown command 'bogus'")
        p = subprocess.run([ORTC, "--version"], capture_output=True, text=True, env=ENV)
        self.assertEqual(p.returncode, 0)
        self.assertRegex(p.stdout, r"ortc \d+\.\d+\.\d+ \(LLVM/MLIR 22")
        for target in ("cpu", "cuda", "rocm"):
            self.assertRegex(p.stdout, r"\n  %s: +\S" % target)


if __name__ == "__main__":
    unittest.main()
