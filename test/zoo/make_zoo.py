"""Generates ortc's model zoo: small random-init real-world models exported by PyTorch 2.x.

Why: the samples/ are hand-written models exported by PyTorch 1.13. Real models exported by a
current PyTorch (both the dynamo exporter and the legacy TorchScript one) use many more ONNX ops
and idioms. This script builds small, seeded versions of well-known architectures (HF
transformers GPT-2, BERT, Llama, T5; torchvision ResNet-18-shaped, MobileNetV3-small,
EfficientNet-B0, ConvNeXt, ViT; a hand-written U-Net; LSTM and GRU classifiers), exports each
with both exporters, and records PyTorch's float32 and float64 training trajectories (5 steps of
SGD with momentum and of AdamW on one fixed batch) so that test_zoo.py can judge ortc's training
against PyTorch float64 using only numpy and the ortc binary (no torch in CI).

How to run (by hand; the fixtures are checked in, CI never runs this):

    /usr/bin/python3 -m venv .venv-zoo
    .venv-zoo/bin/pip install torch torchvision transformers onnxscript onnx numpy
    .venv-zoo/bin/python test/zoo/make_zoo.py               # every model, both exporters
    .venv-zoo/bin/python test/zoo/make_zoo.py gpt2 unet --exporter dynamo   # a subset

It writes test/zoo/<model>.<exporter>.onnx (weights inside the file), <model>.<exporter>.npz and
the manifest zoo.json (a subset run replaces only its own entries). Keys of the .npz:
  <input>                       the feed, one array per ONNX graph input, plus `labels` (int64)
  init/<initializer>            initial value of each initializer that is a torch parameter or a
                                BatchNorm running statistic, in the ONNX layout
  const/<initializer>           initial value of every other float initializer (exporter constants,
                                non-trained buffers): ortc must leave them unchanged
  <dtype>/<opt>/losses          PyTorch's loss at each of the 5 steps (float64)
  float64/<opt>/update/<init>   p5 - p0 of PyTorch's float64 run, ONNX layout, stored as float32
                                (relative precision 6e-8, far below the oracle's 2e-3 floor)
  float32/<opt>/update_err/<init>  ||dp32 - dp64|| / ||dp64|| of PyTorch's float32 run (the
                                yardstick; its own updates are not needed)
  float32/<opt>/spread/losses_err       per step, the largest |L32 - L64| / max(|L64|, 1e-3)
  float32/<opt>/spread/update_err/<init>  and the largest update error, of PERTURBED_RUNS more
                                PyTorch float32 runs whose start is the float32 start with every
                                parameter element moved by one ulp (a seeded random direction):
                                what float32 rounding alone does to this model's trajectory
with dtype in float32, float64 and opt in sgd, adamw.

The spread is the yardstick's second half. On a well-conditioned model the perturbed runs land
where the plain float32 run does; on one where float32 rounding decides the trajectory (a ReLU
pre-activation within rounding of zero, a gradient below float32 noise fed to AdamW's sign-like
first step) the plain run's distance is one draw of a coin flip, and the spread is how far float32
can land. `--spread-only` adds it to the committed fixtures without exporting again (the seeded
model's initial values must equal the fixture's).

Choices (also recorded in zoo.json): every dropout probability is 0 (HF configs, torchvision
dropout arguments, stochastic depth) so trajectories are deterministic; models are in train mode
when exported (BatchNorm exports with training_mode=1); input shapes are static. Parameters whose
every element has one value (zero biases, LayerNorm gains of 1, ViT's zero class token and head,
ConvNeXt's 1e-6 layer scale) get a small seeded perturbation, so that value matching of ONNX
initializers to torch parameters is unambiguous and no gradient is zero by construction.
The ResNet is ResNet-18-shaped ([2,2,2,2] torchvision BasicBlocks, torchvision's ResNet forward)
with widths 8-16-32-64 instead of 64-128-256-512, to keep the file small.
"""
import argparse
import copy
import json
import os
import sys
import traceback
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ZOO = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(ZOO, "zoo.json")
STEPS = 5
BATCH = 2
VOCAB = 128
LR = {"sgd": 0.05, "adamw": 0.003}
DTYPES = ("float32", "float64")
PERTURBED_RUNS = 4
OPTS = ("sgd", "adamw")
DYNAMO_OPSET, LEGACY_OPSET = 18, 17
EXPORTERS = ("dynamo", "legacy")
DYNAMO_OPTIMIZE_REASON = (
    "dynamo exports use optimize=False: with the onnxscript optimizer on, the (eval-mode, see "
    "'batchnorm') BatchNormalization nodes are folded into the preceding Conv (unet: 42 -> 21 nodes, "
    "no BatchNormalization left), so the BatchNorm scale/shift stop being separate parameters and "
    "training semantics change; it also lifts folded constants into initializers (bert: 43 -> 52).")


def versions():
    v = {"torch": torch.__version__}
    for mod in ("torchvision", "transformers", "onnx", "onnxscript", "numpy"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            v[mod] = None
    return v


# ---------------------------------------------------------------------------------------------
# Models. Each builder returns (model, feed {input name: np array} in forward-argument order,
# number of classes, class axis of the logits, notes).

class CausalLM(nn.Module):
    """An HF causal LM returning only the logits tensor."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        out = self.m(input_ids=input_ids, use_cache=False, return_dict=False)
        return out[0]


class Classifier(nn.Module):
    """An HF sequence classifier returning only the logits (no attention_mask: all ones)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, return_dict=False)[0]


class Seq2SeqLM(nn.Module):
    """An HF encoder-decoder LM with decoder_input_ids given, returning only the logits."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, decoder_input_ids):
        return self.m(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False,
                      return_dict=False)[0]


def ids(rng, *shape):
    return rng.randint(0, VOCAB, size=shape).astype(np.int64)


def image(rng, c=3, hw=32, batch=BATCH):
    return rng.standard_normal((batch, c, hw, hw)).astype(np.float32)


def hf_config(cls, attn, **kw):
    cfg = cls(**kw)
    cfg._attn_implementation = attn
    return cfg


def gpt2(rng, attn="sdpa"):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = hf_config(GPT2Config, attn, vocab_size=VOCAB, n_positions=32, n_embd=24, n_layer=2, n_head=2,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
                    use_cache=False, tie_word_embeddings=True)
    return CausalLM(GPT2LMHeadModel(cfg)), {"input_ids": ids(rng, BATCH, 16)}, VOCAB, -1, \
        ["GPT2LMHeadModel, n_embd 24, 2 layers, 2 heads, vocab 128, lm_head tied to wte"]


def bert(rng, attn="sdpa"):
    from transformers import BertConfig, BertForSequenceClassification
    cfg = hf_config(BertConfig, attn, vocab_size=VOCAB, hidden_size=24, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=48, max_position_embeddings=32,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
                    num_labels=4)
    return Classifier(BertForSequenceClassification(cfg)), {"input_ids": ids(rng, BATCH, 16)}, 4, -1, \
        ["BertForSequenceClassification, hidden 24, intermediate 48, 2 layers, 2 heads, 4 classes, no attention_mask"]


def llama(rng, attn="sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = hf_config(LlamaConfig, attn, vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    max_position_embeddings=64, rms_norm_eps=1e-6, attention_dropout=0.0,
                    tie_word_embeddings=False, use_cache=False, hidden_act="silu")
    return CausalLM(LlamaForCausalLM(cfg)), {"input_ids": ids(rng, BATCH, 16)}, VOCAB, -1, \
        ["LlamaForCausalLM, hidden 32, intermediate 48, 2 layers, 4 heads, 2 KV heads (GQA), RoPE, RMSNorm, SiLU"]


def t5(rng, attn="sdpa"):
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = hf_config(T5Config, attn, vocab_size=VOCAB, d_model=24, d_kv=8, d_ff=48, num_layers=2,
                    num_decoder_layers=2, num_heads=2, relative_attention_num_buckets=8,
                    relative_attention_max_distance=16, dropout_rate=0.0, use_cache=False,
                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    feed = {"input_ids": ids(rng, BATCH, 12), "decoder_input_ids": ids(rng, BATCH, 8)}
    return Seq2SeqLM(T5ForConditionalGeneration(cfg)), feed, VOCAB, -1, \
        ["T5ForConditionalGeneration, d_model 24, d_kv 8, d_ff 48, 2+2 layers, 2 heads, relative attention buckets 8, "
         "tied embeddings"]


def resnet18(rng):
    from torchvision.models.resnet import BasicBlock, ResNet

    class NarrowResNet18(ResNet):
        """torchvision's ResNet (its forward and _make_layer, its BasicBlock) with [2,2,2,2]
        blocks and widths 4-8-16-32 instead of 64-128-256-512."""

        def __init__(self, widths=(4, 8, 16, 32), num_classes=10):
            nn.Module.__init__(self)
            self._norm_layer = nn.BatchNorm2d
            self.inplanes, self.dilation, self.groups, self.base_width = widths[0], 1, 1, 64
            self.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(BasicBlock, widths[0], 2)
            self.layer2 = self._make_layer(BasicBlock, widths[1], 2, stride=2)
            self.layer3 = self._make_layer(BasicBlock, widths[2], 2, stride=2)
            self.layer4 = self._make_layer(BasicBlock, widths[3], 2, stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[3], num_classes)
            for m in self.modules():  # torchvision's init
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

    return NarrowResNet18(), {"x": image(rng, hw=64, batch=4)}, 10, -1, \
        ["torchvision ResNet/BasicBlock, [2,2,2,2] blocks, widths 4-8-16-32 (not 64-512), "
         "batch 4 of 64x64 (the last BatchNorms see 2x2x4 values)"]


def mobilenet_v3_small(rng):
    from torchvision.models import mobilenet_v3_small as mnv3
    return mnv3(width_mult=0.1, num_classes=10, dropout=0.0), {"x": image(rng, hw=64, batch=4)}, 10, -1, \
        ["torchvision mobilenet_v3_small(width_mult=0.1, dropout=0), batch 4 of 64x64"]


def efficientnet_b0(rng):
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf
    setting, last = _efficientnet_conf("efficientnet_b0", width_mult=0.1, depth_mult=0.5)
    model = EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=10,
                         last_channel=last)
    return model, {"x": image(rng, hw=64, batch=4)}, 10, -1, \
        ["torchvision EfficientNet, efficientnet_b0 conf with width_mult 0.1, depth_mult 0.5 (B0 at full size is 5.3M "
         "parameters; at width 0.1 depth 1.0 still 94K), "
         "dropout 0, stochastic depth 0, batch 4 of 64x64"]


def convnext(rng):
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    setting = [CNBlockConfig(4, 8, 1), CNBlockConfig(8, 16, 1), CNBlockConfig(16, 32, 3),
               CNBlockConfig(32, None, 1)]
    return ConvNeXt(setting, stochastic_depth_prob=0.0, num_classes=10), {"x": image(rng)}, 10, -1, \
        ["torchvision ConvNeXt, 4 stages like tiny with widths 4-8-16-32, depths 1-1-3-1, "
         "stochastic depth 0, 32x32 input"]


def vit(rng):
    from torchvision.models.vision_transformer import VisionTransformer
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64,
                              mlp_dim=128, dropout=0.0, attention_dropout=0.0, num_classes=10)
    return model, {"x": image(rng)}, 10, -1, \
        ["torchvision VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, "
         "hidden_dim=64, mlp_dim=128, num_classes=10)"]


class UNet(nn.Module):
    """A small U-Net: Conv+BatchNorm+ReLU encoder with MaxPool, a ConvTranspose up step, a
    bilinear Upsample up step, skip concats, a nearest-upsampled bottleneck side path."""

    def __init__(self, classes=4):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU())

        self.enc1, self.enc2, self.mid = block(3, 8), block(8, 16), block(16, 32)
        self.pool = nn.MaxPool2d(2)
        self.up1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec1 = nn.Sequential(nn.Conv2d(32, 16, 3, padding=1), nn.ReLU())
        self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.red2 = nn.Conv2d(16, 8, 1)
        self.dec2 = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU())
        self.side = nn.Conv2d(32, 8, 1)
        self.side_up = nn.Upsample(scale_factor=4, mode="nearest")
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)                      # 8 x 32 x 32
        e2 = self.enc2(self.pool(e1))          # 16 x 16 x 16
        m = self.mid(self.pool(e2))            # 32 x 8 x 8
        d1 = self.dec1(torch.cat([self.up1(m), e2], 1))             # 16 x 16 x 16
        d2 = self.dec2(torch.cat([self.red2(self.up2(d1)), e1], 1))  # 8 x 32 x 32
        return self.head(d2 + self.side_up(self.side(m)))          # classes x 32 x 32


def unet(rng):
    return UNet(), {"x": image(rng)}, 4, 1, \
        ["hand-written U-Net: Conv/BatchNorm/ReLU, MaxPool, ConvTranspose, Upsample bilinear and "
         "nearest, skip concat; logits [N,4,32,32], class axis 1"]


class RNNClassifier(nn.Module):
    def __init__(self, cell, layers):
        super().__init__()
        self.rnn = cell(16, 32, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        _, h = self.rnn(x)
        if isinstance(h, tuple):  # LSTM: (h_n, c_n)
            h = h[0]
        return self.fc(h[-1])


def lstm(rng):
    return RNNClassifier(nn.LSTM, 2), {"x": rng.standard_normal((BATCH, 12, 16)).astype(np.float32)}, \
        10, -1, ["nn.LSTM(16, 32, num_layers=2, batch_first=True), last layer's h_n -> Linear(32, 10)"]


def gru(rng):
    return RNNClassifier(nn.GRU, 1), {"x": rng.standard_normal((BATCH, 12, 16)).astype(np.float32)}, \
        10, -1, ["nn.GRU(16, 32, num_layers=1, batch_first=True), h_n -> Linear(32, 10)"]


MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5, "resnet18": resnet18,
          "mobilenet_v3_small": mobilenet_v3_small, "efficientnet_b0": efficientnet_b0,
          "convnext": convnext, "vit": vit, "unet": unet, "lstm": lstm, "gru": gru}
HF = ("gpt2", "bert", "llama", "t5")


def perturb_constant_params(model):
    """Adds seeded noise to every parameter whose elements all have one value (zero biases,
    LayerNorm gains of 1): an exporter may merge equal initializers, and value matching of
    initializers to parameters must be unambiguous."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            flat = p.detach().flatten()
            if flat.numel() > 1 and bool((flat == flat[0]).all()):
                c = float(flat[0])
                scale = 0.02 if c == 0 else 0.1 * abs(c)
                p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


def make(name, attn=None):
    """Seeded model (train mode, perturbed constant-valued params), feed with labels, metadata."""
    rng = np.random.RandomState(0)
    torch.manual_seed(0)
    model, feed, classes, axis, notes = MODELS[name](rng, attn) if name in HF else MODELS[name](rng)
    model = perturb_constant_params(model.float().train())
    for m in model.modules():
        for attr in ("p", "dropout", "attention_dropout"):
            v = getattr(m, attr, None)
            if isinstance(v, float) and v != 0 and isinstance(m, (nn.Dropout, nn.MultiheadAttention)):
                raise RuntimeError("%s: %s has %s=%r" % (name, type(m).__name__, attr, v))
    # Logits shape, for the labels.
    with torch.no_grad():
        probe = copy.deepcopy(model)
        out = probe(*[torch.from_numpy(a) for a in feed.values()])
    shape = list(out.shape)
    lshape = shape[:-1] if axis == -1 else shape[:axis] + shape[axis + 1:]
    labels = rng.randint(0, classes, size=lshape).astype(np.int64)
    return model, feed, labels, classes, axis, notes, shape


# ---------------------------------------------------------------------------------------------
# Export.

def export(model, feed, exporter, path, optimize):
    m = copy.deepcopy(model).train()
    args = tuple(torch.from_numpy(a) for a in feed.values())
    names = list(feed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            torch.onnx.export(m, args, path, dynamo=True, opset_version=DYNAMO_OPSET, optimize=optimize,
                              external_data=False, input_names=names, output_names=["logits"])
        else:
            torch.onnx.export(m, args, path, dynamo=False, opset_version=LEGACY_OPSET,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                              input_names=names, output_names=["logits"])


def float_inits(proto):
    from onnx import numpy_helper
    out = {}
    for i in proto.graph.initializer:
        out[i.name] = numpy_helper.to_array(i)
    return out


def torch_tensors(model):
    """(params {name: tensor} deduplicated, aliases {alias: name}, bn stats {name: tensor},
    other float buffers {name: tensor})."""
    params = dict(model.named_parameters())
    aliases = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        for c, q in params.items():
            if q is p:
                aliases[n] = c
    bn, other = {}, {}
    bn_mods = {n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
    for n, b in model.named_buffers():
        if not b.is_floating_point():
            continue
        mod, _, leaf = n.rpartition(".")
        if mod in bn_mods and leaf in ("running_mean", "running_var"):
            bn[n] = b
        else:
            other[n] = b
    return params, aliases, bn, other


def map_initializers(model, inits, unused):
    """{onnx name: (torch name, layout)} for params and BN stats, by name then by exact value
    (identity or transpose). Raises if a used parameter has no initializer."""
    params, aliases, bn, other = torch_tensors(model)
    tensors = dict(params)
    tensors.update(bn)
    tensors.update(other)
    mapping, free = {}, [n for n, a in inits.items() if a.dtype.kind == "f"]
    # 1. by name (with aliases of tied weights)
    for o in list(free):
        t = aliases.get(o, o)
        if t in tensors and t not in [v[0] for v in mapping.values()] \
                and tuple(inits[o].shape) == tuple(tensors[t].shape):
            mapping[o] = (t, "same")
            free.remove(o)
    # 2. by exact value
    done = {v[0] for v in mapping.values()}
    for t, tv in tensors.items():
        if t in done:
            continue
        v = tv.detach().numpy()
        for o in free:
            a = inits[o]
            if a.shape == v.shape and np.array_equal(a, v):
                mapping[o] = (t, "same")
            elif a.ndim == 2 and v.ndim == 2 and a.shape == v.T.shape and np.array_equal(a, v.T):
                mapping[o] = (t, "transposed")
            else:
                continue
            free.remove(o)
            done.add(t)
            break
    missing = [t for t in params if t not in done and t not in unused]
    if missing:
        raise RuntimeError("no ONNX initializer for parameter(s) %s" % ", ".join(missing))
    missing_bn = [t for t in bn if t not in done]
    if missing_bn:
        raise RuntimeError("no ONNX initializer for BatchNorm stat(s) %s" % ", ".join(missing_bn))
    return mapping, params, bn, other


# ---------------------------------------------------------------------------------------------
# PyTorch trajectories.

def loss_fn(logits, labels, axis):
    if axis == -1:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    return F.cross_entropy(logits, labels)


def trajectory(model, feed, labels, axis, dtype, opt, lr, bn_eval=False, perturb=None):
    """Trains a copy of `model` in `dtype` for STEPS steps; with `perturb` (a seed), every
    parameter element first moves one ulp of `dtype` up or down (seeded random direction)."""
    m = copy.deepcopy(model).to(getattr(torch, dtype)).train()
    if perturb is not None:
        g = torch.Generator().manual_seed(perturb)
        with torch.no_grad():
            for p in m.parameters():
                up = torch.rand(p.shape, generator=g) < 0.5
                p.copy_(torch.nextafter(p, torch.where(up, torch.full_like(p, float("inf")),
                                                       torch.full_like(p, float("-inf")))))
    if bn_eval:  # what a graph with BatchNormalization training_mode=0 computes
        for mod in m.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.eval()
    ps = [p for _, p in m.named_parameters()]
    o = (torch.optim.SGD(ps, lr=lr, momentum=0.9, weight_decay=0.01) if opt == "sgd"
         else torch.optim.AdamW(ps, lr=lr, weight_decay=0.01, eps=1e-8))
    args = [torch.from_numpy(a).to(getattr(torch, dtype)) if a.dtype.kind == "f" else torch.from_numpy(a)
            for a in feed.values()]
    lab = torch.from_numpy(labels)
    losses, grads = [], []
    for _ in range(STEPS):
        o.zero_grad(set_to_none=True)
        loss = loss_fn(m(*args), lab, axis)
        loss.backward()
        grads.append({n: (None if p.grad is None else p.grad.detach().double().clone())
                      for n, p in m.named_parameters()})
        o.step()
        losses.append(loss.item())
    state = {n: t.detach().double().clone() for n, t in m.state_dict(keep_vars=True).items()}
    for n, p in m.named_parameters():
        state[n] = p.detach().double().clone()
    return np.array(losses, np.float64), state, grads


def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def f32_spread(model, feed, labels, axis, lr, bn_eval, tensors, f64):
    """The spread keys of the .npz (see the module doc) and their summary {opt: {loss, update}}:
    PERTURBED_RUNS float32 runs per optimizer from one-ulp-perturbed starts, each against the
    float64 run f64[opt] = (losses, state). `tensors` maps each judged initializer to its torch
    name (the norms do not depend on the ONNX layout)."""
    p0 = {n: p.detach().double() for n, p in model.named_parameters()}
    p0.update({n: t.detach().double() for n, t in model.state_dict(keep_vars=True).items() if n not in p0})
    out, summary = {}, {}
    for opt in OPTS:
        l64, s64 = f64[opt]
        lerr, uerr = np.zeros(STEPS), {o: 0.0 for o in tensors}
        for seed in range(1, PERTURBED_RUNS + 1):
            l32, s32, _ = trajectory(model, feed, labels, axis, "float32", opt, lr[opt], bn_eval, perturb=seed)
            lerr = np.maximum(lerr, np.abs(l32 - l64) / np.maximum(np.abs(l64), 1e-3))
            for o, t in tensors.items():
                uerr[o] = max(uerr[o], rel((s32[t] - p0[t]).numpy(), (s64[t] - p0[t]).numpy()))
        out["float32/%s/spread/losses_err" % opt] = lerr
        for o, e in uerr.items():
            out["float32/%s/spread/update_err/%s" % (opt, o)] = np.float64(e)
        summary[opt] = {"loss": float(lerr.max()), "update": max(uerr.values(), default=0.0)}
    return out, summary


def add_spread(entry, log):
    """--spread-only: adds the spread to one committed fixture (its .npz and zoo.json entry)
    without exporting again; the seeded model must reproduce the fixture's feed, initial values
    and float64 losses."""
    base = entry["file"]
    path = os.path.join(ZOO, base + ".npz")
    with np.load(path) as z:
        ref = dict(z)
    attn = next((n.split("=", 1)[1] for n in entry["notes"] if n.startswith("attn_implementation=")), None)
    model, feed, labels, _, axis, _, _ = make(entry["model"], attn)
    for k, v in list(feed.items()) + [("labels", labels)]:
        if not np.array_equal(ref[k], v):
            raise RuntimeError("%s: the seeded model's %s differs from the fixture's" % (base, k))
    state = dict(model.named_parameters())
    state.update({n: t for n, t in model.state_dict(keep_vars=True).items() if n not in state})
    tensors = {}
    for o in entry["trainable"] + entry["buffers"]:
        m = entry["mapping"][o]
        v = state[m["torch"]].detach().numpy()
        if not np.array_equal(v.T if m["layout"] == "transposed" else v, ref["init/" + o]):
            raise RuntimeError("%s: the seeded model's %s differs from the fixture's init/%s" % (base, m["torch"], o))
        if o not in entry["noise_only"]:
            tensors[o] = m["torch"]
    bn_eval = entry["batchnorm"].startswith("eval")
    f64 = {}
    for opt in OPTS:
        losses, s64, _ = trajectory(model, feed, labels, axis, "float64", opt, entry["lr"][opt], bn_eval)
        want = ref["float64/%s/losses" % opt]
        if not np.allclose(losses, want, rtol=1e-9, atol=0):
            raise RuntimeError("%s/%s: float64 losses %s, the fixture's %s" % (base, opt, losses, want))
        f64[opt] = (losses, s64)
    keys, summary = f32_spread(model, feed, labels, axis, entry["lr"], bn_eval, tensors, f64)
    ref.update(keys)
    np.savez_compressed(path, **ref)
    entry["torch_f32_spread"] = summary
    entry["npz_bytes"] = os.path.getsize(path)
    log("%-32s spread %s (plain float32 run %s)" % (
        base, {k: "%.1e/%.1e" % (v["loss"], v["update"]) for k, v in summary.items()},
        {k: "%.1e/%.1e" % (v["loss"], v["update"]) for k, v in entry["torch_f32_vs_f64"].items()}))


# ---------------------------------------------------------------------------------------------

def generate(name, exporter, optimize, log):
    """Exports one model with one exporter; returns its manifest entry (raises on failure)."""
    import onnx
    from onnx import numpy_helper
    base = "%s.%s" % (name, exporter)
    path = os.path.join(ZOO, base + ".onnx")
    notes = []
    attn = "sdpa" if name in HF else None
    model, feed, labels, classes, axis, mnotes, out_shape = make(name, attn)
    try:
        export(model, feed, exporter, path, optimize)
    except Exception as e:  # noqa: BLE001
        if name not in HF:
            raise
        first = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
        log("  %s with sdpa attention failed (%s); retrying with eager attention" % (base, first[:200]))
        notes.append("export with attn_implementation=sdpa failed (%s); exported with eager" % first[:300])
        attn = "eager"
        model, feed, labels, classes, axis, mnotes, out_shape = make(name, attn)
        try:
            export(model, feed, exporter, path, optimize)
        except Exception as e2:  # noqa: BLE001
            lines = [l for l in str(e2).strip().splitlines() if l.strip()]
            raise RuntimeError("with sdpa attention: %s; with eager attention: %s: %s" % (
                first[:300], type(e2).__name__, lines[0] if lines else "")) from e2
    notes = mnotes + (["attn_implementation=%s" % attn] if attn else []) + notes

    proto = onnx.load(path)
    if any(len(n.metadata_props) for n in proto.graph.node):
        # The dynamo exporter's per-node provenance (module path, FX node, stack): most of the
        # file for small models. Graph value_info metadata (parameter/buffer kinds) is kept.
        for n in proto.graph.node:
            del n.metadata_props[:]
        onnx.save(proto, path)
        notes.append("per-node metadata_props (exporter provenance) stripped to keep the file small")
    inits = float_inits(proto)
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    bn_modes = []
    for n in proto.graph.node:
        if n.op_type == "BatchNormalization":
            tm = [a.i for a in n.attribute if a.name == "training_mode"]
            bn_modes.append(tm[0] if tm else 0)
    bn_eval = has_bn and (not bn_modes or not all(bn_modes))
    if bn_eval:
        notes.append("the exporter wrote BatchNormalization with training_mode=0 (%d of %d nodes) although "
                     "the model was in train mode (onnxscript's torchlib forces training=False for "
                     "aten::_native_batch_norm_legit_functional): the PyTorch reference trains with its "
                     "BatchNorm modules in eval mode (frozen statistics), which is what the graph computes; "
                     "running stats are constants" % (bn_modes.count(0), len(bn_modes)))
    # Parameters torch never gives a gradient (not on the loss path) need no initializer.
    _, _, g0 = trajectory(model, feed, labels, axis, "float64", "sgd", 0.0, bn_eval)
    unused = [n for n, g in g0[0].items() if g is None]
    mapping, params, bn, other = map_initializers(model, inits, unused)
    # Store the initializers of BatchNorm stats as constructed (a trace may have run a
    # train-mode forward that moved them).
    changed = False
    for i in proto.graph.initializer:
        if i.name in mapping and mapping[i.name][0] in bn:
            v = bn[mapping[i.name][0]].detach().numpy().astype(inits[i.name].dtype)
            if not np.array_equal(v, inits[i.name]):
                i.CopyFrom(numpy_helper.from_array(v, i.name))
                inits[i.name] = v
                changed = True
    if changed:
        onnx.save(proto, path)
        notes.append("BatchNorm running stats in the file reset to their initial values")
    trainable = sorted(o for o, (t, _) in mapping.items() if t in params)
    buffers = [] if bn_eval else sorted(o for o, (t, _) in mapping.items() if t in bn)
    frozen = sorted(o for o, (t, _) in mapping.items() if t in other)
    constants = sorted(n for n in inits if n not in trainable and n not in buffers)
    tmap = {o: t for o, (t, _) in mapping.items()}
    layout = {o: l for o, (_, l) in mapping.items()}
    # Same value as a parameter under another initializer: ortc would train the copy separately.
    dups = []
    for c in constants:
        a = inits[c]
        if a.dtype.kind != "f" or a.size < 2:
            continue
        for o in trainable:
            b = inits[o]
            if (a.shape == b.shape and np.array_equal(a, b)) or (a.ndim == 2 and a.shape == b.T.shape
                                                                 and np.array_equal(a, b.T)):
                dups.append("%s duplicates %s" % (c, o))
    if dups:
        notes.append("constant initializers equal to parameters: " + "; ".join(dups))

    def compact(res, inits):
        """The fixture as stored: float64 updates as float32 deltas, float32 runs as their
        per-tensor distance to float64 (what the oracle needs, at a third of the size)."""
        out = {}
        for k, v in res.items():
            parts = k.split("/")
            if len(parts) >= 4 and parts[2] == "final":
                dt, opt, name = parts[0], parts[1], "/".join(parts[3:])
                p0 = np.asarray(inits[name], np.float64)
                if dt == "float64":
                    out["float64/%s/update/%s" % (opt, name)] = (v - p0).astype(np.float32)
                else:
                    d64 = res["float64/%s/final/%s" % (opt, name)] - p0
                    out["float32/%s/update_err/%s" % (opt, name)] = np.float64(rel(v - p0, d64))
            else:
                out[k] = v
        return out

    def onnx_layout(o, t):
        v = t.numpy()
        return v.T if layout[o] == "transposed" else v

    res = dict(feed)
    res["labels"] = labels
    for o in trainable + buffers:
        res["init/" + o] = inits[o]
    for c in constants:
        if inits[c].dtype.kind == "f":
            res["const/" + c] = inits[c]
    lr = dict(LR)
    runs = {}
    for opt in OPTS:
        while True:
            r = {dt: trajectory(model, feed, labels, axis, dt, opt, lr[opt], bn_eval) for dt in DTYPES}
            l64, l32 = r["float64"][0], r["float32"][0]
            chaos = float(np.max(np.abs(l32 - l64) / np.maximum(np.abs(l64), 1e-3)))
            if (np.all(np.isfinite(l64)) and l64[-1] < 1.5 * l64[0] + 1e-6 and chaos < 1e-3) or lr[opt] < 1e-5:
                break
            log("  %s/%s at lr %g: float64 losses %s, float32 off by %.1e: lr / 3" % (
                base, opt, lr[opt], np.round(l64, 4).tolist(), chaos))
            notes.append("%s: lr %g gave float64 losses %s with PyTorch float32 off by %.1e (diverging or "
                         "chaotic): lowered" % (opt, lr[opt], np.round(l64, 4).tolist(), chaos))
            lr[opt] /= 3
        runs[opt] = r
        for dt in DTYPES:
            losses, state, _ = r[dt]
            res["%s/%s/losses" % (dt, opt)] = losses
            for o in trainable + buffers:
                res["%s/%s/final/%s" % (dt, opt, o)] = onnx_layout(o, state[tmap[o]])
    # Structurally zero gradients (float64 SGD run, every step).
    # A gradient is structurally zero when, at every step, it is below 1e-10 of the largest
    # gradient element of the model (float64 rounding noise is ~1e-16 of it).
    grads = runs["sgd"]["float64"][2]
    noise_only = []
    scales = [max(float(v.abs().max()) for v in g.values() if v is not None) for g in grads]
    for o in trainable:
        t = tmap[o]
        if all(g[t] is None or float(g[t].abs().max()) <= 1e-10 * sc for g, sc in zip(grads, scales)):
            noise_only.append(o)
    # PyTorch float32 vs float64 (the yardstick test_zoo.py scales by).
    f32 = {}
    for opt in OPTS:
        a, b = res["float32/%s/losses" % opt], res["float64/%s/losses" % opt]
        lerr = max(abs(x - y) / max(abs(y), 1e-3) for x, y in zip(a, b))
        uerr = 0.0
        for o in trainable + buffers:
            if o in noise_only:
                continue
            p0 = inits[o].astype(np.float64)
            d64 = res["float64/%s/final/%s" % (opt, o)] - p0
            d32 = res["float32/%s/final/%s" % (opt, o)] - p0
            uerr = max(uerr, rel(d32, d64))
        f32[opt] = {"loss": lerr, "update": uerr}
    spread, f32_spread_summary = f32_spread(
        model, feed, labels, axis, lr, bn_eval,
        {o: tmap[o] for o in trainable + buffers if o not in noise_only},
        {opt: runs[opt]["float64"][:2] for opt in OPTS})
    res.update(spread)
    np.savez_compressed(os.path.join(ZOO, base + ".npz"), **compact(res, inits))

    # BatchNorm export check and ops.
    ops = sorted({n.op_type if not n.domain or n.domain == "ai.onnx" else n.domain + "::" + n.op_type
                  for n in proto.graph.node})
    funcs = sorted({f.name for f in proto.functions})

    def vi(v):
        t = v.type.tensor_type
        return {"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name,
                "shape": [d.dim_param if d.dim_param else d.dim_value for d in t.shape.dim]}

    inputs = [vi(v) for v in proto.graph.input if v.name not in inits]
    outputs = [vi(v) for v in proto.graph.output]
    flags = ["--loss", "cross_entropy"]
    if len(outputs) > 1:
        flags += ["--logits", outputs[0]["name"]]
    if axis != -1:
        flags += ["--class-axis", str(axis)]
    for v in inputs:
        for d in v["shape"]:
            if isinstance(d, str) and d:
                flags += ["--dim", "%s=%d" % (d, feed[v["name"]].shape[v["shape"].index(d)])]
    for f in frozen:
        flags += ["--freeze", f]
    if frozen:
        notes.append("non-parameter float buffers (%s) are frozen with --freeze: nothing in the ONNX "
                     "file tells them from weights" % ", ".join(tmap[f] for f in frozen))
    if set(feed) != {v["name"] for v in inputs}:
        raise RuntimeError("ONNX inputs %s differ from the feed %s" % ([v["name"] for v in inputs], list(feed)))
    entry = {
        "file": base, "model": name, "exporter": exporter,
        "opset": DYNAMO_OPSET if exporter == "dynamo" else LEGACY_OPSET,
        "export_args": ({"dynamo": True, "optimize": optimize, "external_data": False}
                        if exporter == "dynamo" else
                        {"dynamo": False, "training": "TRAINING", "do_constant_folding": False}),
        "versions": versions(), "notes": notes,
        "inputs": inputs, "outputs": outputs, "logits_shape": out_shape, "class_axis": axis,
        "num_classes": classes, "labels_shape": list(labels.shape),
        "flags": flags, "lr": lr, "steps": STEPS,
        "trainable": trainable, "buffers": buffers, "constants": constants, "frozen": frozen,
        "noise_only": noise_only, "unused_params": unused,
        "batchnorm": ("none" if not has_bn else "eval (training_mode=0)" if bn_eval else "train (training_mode=1)"),
        "mapping": {o: {"torch": tmap[o], "layout": layout[o]} for o in sorted(mapping)},
        "ops": ops, "functions": funcs, "nodes": len(proto.graph.node),
        "params": int(sum(inits[o].size for o in trainable)),
        "onnx_bytes": os.path.getsize(path), "npz_bytes": os.path.getsize(os.path.join(ZOO, base + ".npz")),
        "torch_f32_vs_f64": f32, "torch_f32_spread": f32_spread_summary,
        "losses_f64": {opt: res["float64/%s/losses" % opt].tolist() for opt in OPTS},
    }
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help="default: all of %s" % ", ".join(MODELS))
    ap.add_argument("--exporter", choices=EXPORTERS, action="append")
    ap.add_argument("--optimize", action="store_true",
                    help="dynamo: run the onnxscript optimizer (off by default, see zoo.json)")
    ap.add_argument("--spread-only", action="store_true",
                    help="add the perturbed float32 runs' spread to the committed fixtures, exporting nothing")
    a = ap.parse_args()
    models = a.models or list(MODELS)
    bad = [m for m in models if m not in MODELS]
    if bad:
        ap.error("unknown model(s) %s" % ", ".join(bad))
    exporters = a.exporter or list(EXPORTERS)
    manifest = {"files": [], "failed_exports": []}
    if os.path.exists(MANIFEST):
        with open(MANIFEST) as f:
            manifest = json.load(f)

    def log(s):
        print(s, flush=True)

    if a.spread_only:
        for e in manifest["files"]:
            if e["model"] in models and e["exporter"] in exporters:
                add_spread(e, log)
        with open(MANIFEST, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")
        return
    keep = lambda e: not (e["model"] in models and e["exporter"] in exporters)  # noqa: E731
    manifest["files"] = [e for e in manifest["files"] if keep(e)]
    manifest["failed_exports"] = [e for e in manifest["failed_exports"] if keep(e)]
    for name in models:
        for exporter in exporters:
            base = "%s.%s" % (name, exporter)
            for ext in (".onnx", ".npz"):
                if os.path.exists(os.path.join(ZOO, base + ext)):
                    os.remove(os.path.join(ZOO, base + ext))
            try:
                e = generate(name, exporter, a.optimize, log)
                manifest["files"].append(e)
                log("%-32s ok  %7d params, %4d nodes, %7d B onnx, lr %s, f32-vs-f64 %s%s" % (
                    base, e["params"], e["nodes"], e["onnx_bytes"], e["lr"],
                    {k: "%.1e/%.1e" % (v["loss"], v["update"]) for k, v in e["torch_f32_vs_f64"].items()},
                    (" noise_only %s" % e["noise_only"]) if e["noise_only"] else ""))
            except Exception as ex:  # noqa: BLE001
                for ext in (".onnx", ".npz"):
                    if os.path.exists(os.path.join(ZOO, base + ext)):
                        os.remove(os.path.join(ZOO, base + ext))
                lines = [l for l in str(ex).strip().splitlines() if l.strip()]
                reason = "%s: %s" % (type(ex).__name__, lines[0] if lines else "")
                tb = traceback.format_exc()
                manifest["failed_exports"].append({"model": name, "exporter": exporter, "reason": reason,
                                                   "versions": versions(), "detail": "\n".join(lines[:30])})
                log("%-32s FAILED  %s" % (base, reason))
                if os.environ.get("ZOO_VERBOSE"):
                    log(tb)
    order = {m: i for i, m in enumerate(MODELS)}
    key = lambda e: (order.get(e["model"], 99), EXPORTERS.index(e["exporter"]))  # noqa: E731
    manifest["files"].sort(key=key)
    manifest["failed_exports"].sort(key=key)
    manifest.update({"generated_by": "test/zoo/make_zoo.py", "steps": STEPS, "batch": BATCH,
                     "optimizer_args": {"sgd": {"momentum": 0.9, "weight_decay": 0.01},
                                        "adamw": {"weight_decay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8}},
                     "default_lr": LR, "versions": versions(), "dynamo_optimize": a.optimize,
                     "dynamo_optimize_reason": DYNAMO_OPTIMIZE_REASON})
    with open(MANIFEST, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(ZOO, p)) for p in os.listdir(ZOO) if p.endswith((".onnx", ".npz")))
    log("wrote %s: %d files, %d failed exports, zoo %.2f MB" % (
        MANIFEST, len(manifest["files"]), len(manifest["failed_exports"]), total / 1e6))


if __name__ == "__main__":
    main()
