# End to end on the CPU target: `ortc build` + `ortc train` for 5 steps with SGD (momentum,
# weight decay) and AdamW must reproduce PyTorch's loss at every step within 1e-4 relative
# and each parameter's update over the run (p5 - p0) within 2e-3 relative, BatchNorm
# running statistics included.
import json
import os
import unittest

import numpy as np

from ortc_testlib import ORTC, SAMPLES, TempDir, feed_of, reference, rel_err, run, without_dropout

STEPS = 5
CONFIGS = {
    "sgd": (["--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.01"],
            ["--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.01"], 0.05),
    "adamw": (["--optimizer", "adamw", "--weight-decay", "0.01"],
              ["--optimizer", "adamw", "--weight-decay", "0.01"], 0.003),
}


class TrainVsTorch(unittest.TestCase):
    def check(self, name, opt):
        build_args, ref_args, lr = CONFIGS[opt]
        with TempDir() as d:
            ref = reference(name, d, "--dtype", "float32", "--steps", str(STEPS), "--lr", str(lr),
                            "--no-dropout", *ref_args)
            model = without_dropout(name, d)
            art = os.path.join(d, "m.ortc")
            run([ORTC, "build", model, "-o", art, "--dim", "batch=4"] + build_args)
            np.savez(os.path.join(d, "feed.npz"), **feed_of(ref))
            log, params = os.path.join(d, "log.jsonl"), os.path.join(d, "p.npz")
            run([ORTC, "train", art, "--data", os.path.join(d, "feed.npz"), "--steps", str(STEPS),
                 "--lr", str(lr), "--log-json", log, "--save-params", params])
            with open(log) as f:
                losses = [json.loads(line)["loss"] for line in f]
            self.assertEqual(len(losses), STEPS)
            for i, (got, want) in enumerate(zip(losses, ref["losses"])):
                self.assertLess(abs(got - want) / abs(want), 1e-4,
                                "%s/%s step %d: loss %r vs torch %r" % (name, opt, i + 1, got, want))
            trained = dict(np.load(params))
            checked = 0
            # Parameters whose gradient is zero in exact arithmetic (a conv bias right
            # before BatchNorm, BERT's key bias): both sides see only rounding noise, and
            # AdamW turns noise into full-size steps, so their updates (and, through the
            # bias, the BatchNorm running means) cannot be compared.
            noise_only = [k[len("grad/"):] for k in ref if k.startswith("grad/")
                          and np.abs(ref[k]).max() < 1e-6 * max(1.0, np.abs(ref["init/" + k[5:]]).max())]
            for key in ref:
                if not key.startswith("final/"):
                    continue
                pname = key[len("final/"):]
                self.assertIn(pname, trained, "ortc did not save '%s'" % pname)
                want = ref[key] - ref["init/" + pname]
                got = trained[pname] - ref["init/" + pname]
                if pname in noise_only or (opt == "adamw" and noise_only and
                                           pname.endswith("running_mean")):
                    continue
                err = rel_err(got, want)
                self.assertLess(err, 2e-3, "%s/%s: update of '%s' off by %.2e" % (name, opt, pname, err))
                checked += 1
            self.assertGreater(checked, 0)


for _name in SAMPLES:
    for _opt in CONFIGS:
        setattr(TrainVsTorch, "test_%s_%s" % (_name, _opt),
                lambda self, n=_name, o=_opt: self.check(n, o))

if __name__ == "__main__":
    unittest.main()
