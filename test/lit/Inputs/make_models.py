#!/usr/bin/env python3
"""Writes the small ONNX models the lit tests import, as protobuf text (.onnxtxt).

(Two files are binary: weights.onnx, the binary form of weights.onnxtxt, and
random.onnx, bytes that are no protobuf.)

Run it from anywhere with the repo's venv python:

    .venv/bin/python test/lit/Inputs/make_models.py           # (re)write the models
    .venv/bin/python test/lit/Inputs/make_models.py --check   # fail if any differs

The output is byte-identical from run to run (fixed ir_version, no producer fields,
deterministic tensors), and test/lit/import/models-uptodate.test runs --check.
Every model is tiny and hand-checkable; the tests' CHECK lines state the expected
shapes, so a model changed here must be re-checked there.
"""
import argparse
import os
import sys

import numpy as np
from google.protobuf import text_format
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

F, I64, B, I32 = T.FLOAT, T.INT64, T.BOOL, T.INT32
HERE = os.path.dirname(os.path.abspath(__file__))
INT64_MAX = 2**63 - 1


def vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def out(name, elem=F):
    return h.make_tensor_value_info(name, elem, None)


def raw_tensor(name, elem, dims, raw):
    """A TensorProto whose raw_data may disagree with its shape (make_tensor refuses)."""
    t = T()
    t.name, t.data_type, t.raw_data = name, elem, raw
    t.dims.extend(dims)
    return t


def f32(name, shape, start=0.0):
    n = int(np.prod(shape)) if shape else 1
    return nh.from_array((np.arange(n, dtype=np.float32) * 0.5 + start).reshape(shape), name)


def i64(name, values, shape=None):
    a = np.array(values, dtype=np.int64)
    if shape is not None:
        a = a.reshape(shape)
    return nh.from_array(a, name)


def const(out_name, array, name=None):
    """A Constant node holding `array`."""
    return h.make_node("Constant", [], [out_name], name=name or out_name,
                       value=nh.from_array(np.asarray(array), out_name + "_value"))


def node(op, ins, outs, name, **attrs):
    return h.make_node(op, ins, outs, name=name, **attrs)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


MODELS = {}


def register(name):
    def wrap(fn):
        MODELS[name] = fn
        return fn
    return wrap


#===-- ops, by family ---------------------------------------------------===#

@register("elementwise.onnxtxt")
def elementwise():
    unary = ["Abs", "Erf", "Exp", "Log", "Neg", "Relu", "Sigmoid", "Sqrt", "Tanh",
             "Reciprocal"]
    nodes = [node(op, ["a"], [op.lower()], op.lower() + "_node") for op in unary]
    nodes += [
        node("Not", ["m"], ["not"], "not_node"),
        const("lo", np.float32(0.0)),
        const("hi", np.float32(6.0)),
        node("Clip", ["a", "lo", "hi"], ["clip"], "clip_node"),
        node("Clip", ["a", "", "hi"], ["clip_max"], "clip_max_node"),
        node("Cast", ["a"], ["cast"], "cast_node", to=I64),
        node("Add", ["a", "b"], ["add"], "add_node"),
        node("Sub", ["a", "c"], ["sub"], "sub_node"),
        node("Mul", ["b", "c"], ["mul"], "mul_node"),
        node("Div", ["a", "a"], ["div"], "div_node"),
        node("Pow", ["a", "e"], ["pow"], "pow_node"),
        node("Min", ["a", "b", "c"], ["min"], "min_node"),
        node("Max", ["a", "b"], ["max"], "max_node"),
        node("Sum", ["a", "b", "c"], ["sum"], "sum_node"),
        node("Equal", ["a", "b"], ["equal"], "equal_node"),
        node("Less", ["a", "c"], ["less"], "less_node"),
        node("Greater", ["a", "b"], ["greater"], "greater_node"),
        node("And", ["m", "n"], ["and"], "and_node"),
        node("Where", ["n", "a", "c"], ["where"], "where_node"),
    ]
    outputs = [out(op.lower()) for op in unary] + [
        out("not", B), out("clip"), out("clip_max"), out("cast", I64), out("add"),
        out("sub"), out("mul"), out("div"), out("pow"), out("min"), out("max"),
        out("sum"), out("equal", B), out("less", B), out("greater", B), out("and", B),
        out("where")]
    inputs = [vi("a", F, [2, 3]), vi("b", F, [3]), vi("c", F, [2, 1]),
              vi("m", B, [2, 3]), vi("n", B, [3]), vi("e", I64, [])]
    return model(nodes, inputs, outputs, opset=13)


@register("index-ops.onnxtxt")
def index_ops():
    """Run-time index ops; a loss through each (integer results summed as integers, so
    the GPU build also compiles the integer reductions, then cast, which keeps their
    kernels in the step without a gradient)."""
    nodes = [
        node("ArgMax", ["x"], ["am"], "argmax_node", axis=1, keepdims=0),
        node("ArgMin", ["x"], ["amn"], "argmin_node", axis=0, select_last_index=1),
        node("Mul", ["x", "W"], ["xw"], "scale_node"),
        node("TopK", ["xw", "K"], ["tv", "ti"], "topk_node", axis=-1),
        node("ReduceProd", ["xw"], ["rp"], "prod_node", axes=[1]),
        node("GatherElements", ["xw", "ix"], ["ge"], "gather_elements_node", axis=1),
        node("ScatterElements", ["xw", "ix", "ge"], ["se"], "scatter_node", axis=1,
             reduction="add"),
        node("CumSum", ["xw", "cs_axis"], ["cs"], "cumsum_node", exclusive=1, reverse=1),
        node("Mod", ["a", "b"], ["md"], "mod_node"),
        node("Mod", ["a", "b"], ["mdf"], "fmod_node", fmod=1),
    ]
    terms = []
    for k, src in enumerate(["tv", "rp", "ge", "se", "cs"]):
        nodes.append(node("ReduceSum", [src], ["l%d" % k], "l%d" % k, keepdims=0))
        terms.append("l%d" % k)
    for k, src in enumerate(["am", "amn", "ti", "md", "mdf"]):
        nodes.append(node("ReduceSum", [src], ["i%d" % k], "sum%d" % k, keepdims=0))
        nodes.append(node("Cast", ["i%d" % k], ["s%d" % k], "cast%d" % k, to=F))
        terms.append("s%d" % k)
    nodes.append(node("Sum", terms, ["loss"], "loss_node"))
    inits = [i64("K", [2]), i64("cs_axis", 1),
             nh.from_array(np.linspace(0.5, 1.5, 10, dtype=np.float32).reshape(2, 5), "W")]
    inputs = [vi("x", F, [2, 5]), vi("ix", I64, [2, 3]), vi("a", I32, [4]), vi("b", I32, [4])]
    outputs = [out("loss"), out("am", I64), out("amn", I64), out("ti", I64), out("md", I32),
               out("mdf", I32)]
    return model(nodes, inputs, outputs, inits)


@register("bad-topk-runtime-k.onnxtxt")
def bad_topk_runtime_k():
    nodes = [node("TopK", ["x", "k"], ["v", "i"], "topk_runtime_k")]
    return model(nodes, [vi("x", F, [2, 5]), vi("k", I64, [1])], [out("v")])


@register("gelu-opset20.onnxtxt")
def gelu():
    nodes = [node("Gelu", ["x"], ["g"], "gelu_exact"),
             node("Gelu", ["x"], ["gt"], "gelu_tanh", approximate="tanh")]
    return model(nodes, [vi("x", F, [2, 8])], [out("g"), out("gt")], opset=20)


@register("shape-ops.onnxtxt")
def shape_ops():
    nodes = [
        node("Reshape", ["x", "shape"], ["reshape"], "reshape_node"),
        node("Flatten", ["x"], ["flatten"], "flatten_node", axis=2),
        const("sq_axes", np.array([1], np.int64)),
        node("Squeeze", ["u", "sq_axes"], ["squeeze"], "squeeze_node"),
        const("unsq_axes", np.array([0, -1], np.int64)),
        node("Unsqueeze", ["x", "unsq_axes"], ["unsqueeze"], "unsqueeze_node"),
        node("Transpose", ["x"], ["transpose"], "transpose_node", perm=[2, 0, 1]),
        node("Concat", ["x", "x2"], ["concat"], "concat_node", axis=-2),
        const("sl_starts", np.array([1], np.int64)),
        const("sl_ends", np.array([INT64_MAX], np.int64)),
        const("sl_axes", np.array([2], np.int64)),
        const("sl_steps", np.array([2], np.int64)),
        node("Slice", ["x", "sl_starts", "sl_ends", "sl_axes", "sl_steps"], ["slice"],
             "slice_node"),
        const("rev_starts", np.array([-1], np.int64)),
        const("rev_ends", np.array([-(2**63)], np.int64)),
        const("rev_axes", np.array([1], np.int64)),
        const("rev_steps", np.array([-1], np.int64)),
        node("Slice", ["x", "rev_starts", "rev_ends", "rev_axes", "rev_steps"],
             ["slice_rev"], "slice_rev_node"),
        const("split_sizes", np.array([1, 2], np.int64)),
        node("Split", ["x", "split_sizes"], ["split0", "split1"], "split_node", axis=1),
        node("Gather", ["x", "gidx"], ["gather"], "gather_node", axis=1),
        node("Gather", ["emb", "ids"], ["embed"], "embed_node"),
        const("exp_shape", np.array([2, 3, 4], np.int64)),
        node("Expand", ["col", "exp_shape"], ["expand"], "expand_node"),
        const("reps", np.array([2, 1], np.int64)),
        node("Tile", ["y", "reps"], ["tile"], "tile_node"),
        node("Trilu", ["y"], ["tril"], "tril_node", upper=0),
        const("pads", np.array([0, 1, 2, 0], np.int64)),
        const("pad_value", np.float32(0.5)),
        node("Pad", ["y", "pads", "pad_value"], ["pad"], "pad_node"),
        node("Identity", ["x"], ["identity"], "identity_node"),
    ]
    inits = [i64("shape", [0, -1]), i64("gidx", [0, -1]), f32("emb", [10, 4])]
    inputs = [vi("x", F, [2, 3, 4]), vi("u", F, [2, 1, 4]), vi("x2", F, [2, 5, 4]),
              vi("ids", I64, [5]), vi("col", F, [3, 1]), vi("y", F, [2, 3])]
    outputs = [out(n) for n in ["reshape", "flatten", "squeeze", "unsqueeze", "transpose",
                                "concat", "slice", "slice_rev", "split0", "split1",
                                "gather", "embed", "expand", "tile", "tril", "pad",
                                "identity"]]
    return model(nodes, inputs, outputs, inits)


@register("opset18-forms.onnxtxt")
def opset18():
    nodes = [
        const("ax_last", np.array([-1], np.int64)),
        node("ReduceMean", ["x", "ax_last"], ["rmean"], "rmean_node"),
        const("ax_02", np.array([0, 2], np.int64)),
        node("ReduceMax", ["x", "ax_02"], ["rmax"], "rmax_node", keepdims=0),
        const("ax_1", np.array([1], np.int64)),
        node("ReduceSum", ["x", "ax_1"], ["rsum"], "rsum_node"),
        node("ReduceMean", ["x"], ["rmean_all"], "rmean_all_node", keepdims=0),
        node("ReduceSum", ["x"], ["rsum_noop"], "rsum_noop_node", noop_with_empty_axes=1),
        node("Split", ["z"], ["s0", "s1", "s2"], "split_node", axis=0, num_outputs=3),
        const("pad_pads", np.array([1, 2], np.int64)),
        const("pad_value", np.float32(-1.0)),
        const("pad_axes", np.array([-1], np.int64)),
        node("Pad", ["y", "pad_pads", "pad_value", "pad_axes"], ["pad"], "pad_node"),
    ]
    inputs = [vi("x", F, [2, 3, 4]), vi("z", F, [5, 2]), vi("y", F, [2, 3])]
    outputs = [out(n) for n in ["rmean", "rmax", "rsum", "rmean_all", "rsum_noop", "s0",
                                "s1", "s2", "pad"]]
    return model(nodes, inputs, outputs, opset=18)


@register("reduce-softmax.onnxtxt")
def reduce_softmax():
    nodes = [
        node("ReduceMean", ["x"], ["rmean"], "rmean_node", axes=[1], keepdims=0),
        node("ReduceMax", ["x"], ["rmax"], "rmax_node", axes=[-1]),
        node("Softmax", ["x"], ["softmax"], "softmax_node", axis=1),
        node("LogSoftmax", ["x"], ["logsoftmax"], "logsoftmax_node"),
        node("GlobalAveragePool", ["img"], ["gap"], "gap_node"),
        node("GlobalMaxPool", ["img"], ["gmp"], "gmp_node"),
    ]
    inputs = [vi("x", F, [2, 3, 4]), vi("img", F, [2, 3, 5, 5])]
    outputs = [out(n) for n in ["rmean", "rmax", "softmax", "logsoftmax", "gap", "gmp"]]
    return model(nodes, inputs, outputs, opset=13)


@register("softmax-opset11.onnxtxt")
def softmax11():
    # Before opset 13 Softmax coerces its input to 2-D at `axis`.
    nodes = [node("Softmax", ["x"], ["softmax"], "softmax_node", axis=1)]
    return model(nodes, [vi("x", F, [2, 3, 4])], [out("softmax")], opset=11)


@register("conv-pool.onnxtxt")
def conv_pool():
    nodes = [
        node("Conv", ["x", "W", "B"], ["conv"], "conv_node", pads=[1, 1, 1, 1],
             strides=[2, 2], kernel_shape=[3, 3]),
        node("Conv", ["x", "Wg"], ["conv_group"], "conv_group_node", group=2,
             auto_pad="SAME_UPPER"),
        node("MaxPool", ["x"], ["maxpool"], "maxpool_node", kernel_shape=[2, 2],
             strides=[2, 2]),
        node("MaxPool", ["x"], ["maxpool_ceil"], "maxpool_ceil_node",
             kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        node("AveragePool", ["x"], ["avgpool"], "avgpool_node", kernel_shape=[3, 3],
             pads=[1, 1, 1, 1], count_include_pad=1),
    ]
    inits = [f32("W", [4, 2, 3, 3]), f32("B", [4]), f32("Wg", [2, 1, 3, 3])]
    outputs = [out(n) for n in ["conv", "conv_group", "maxpool", "maxpool_ceil", "avgpool"]]
    return model(nodes, [vi("x", F, [1, 2, 5, 5])], outputs, inits)


@register("upsample.onnxtxt")
def upsample():
    scales = nh.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")
    nodes = [
        node("ConvTranspose", ["x", "Wt", "Bt"], ["convt"], "convt_node", strides=[2, 2],
             pads=[1, 1, 1, 1], output_padding=[1, 1]),
        node("Resize", ["x", "", "scales"], ["nearest"], "nearest_node", mode="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        node("Resize", ["x", "", "", "sizes"], ["linear"], "linear_node", mode="linear"),
    ]
    inits = [f32("Wt", [2, 3, 3, 3]), f32("Bt", [3]), scales, i64("sizes", [1, 2, 5, 5])]
    outputs = [out(n) for n in ["convt", "nearest", "linear"]]
    return model(nodes, [vi("x", F, [1, 2, 3, 3])], outputs, inits)


@register("norm.onnxtxt")
def norm():
    nodes = [
        node("BatchNormalization", ["x", "s", "bias", "mean", "var"], ["bn"], "bn_infer",
             epsilon=1e-3),
        node("BatchNormalization", ["x", "s", "bias", "mean", "var"], ["bn_train"],
             "bn_train_node", training_mode=1, momentum=0.8),
        node("LayerNormalization", ["t", "ln_scale", "ln_bias"], ["ln", "ln_mean", "ln_istd"],
             "ln_node", axis=-1, epsilon=1e-5),
        node("LayerNormalization", ["t", "ln_scale1"], ["ln2"], "ln2_node", axis=1),
    ]
    inits = [f32("s", [3]), f32("bias", [3]), f32("mean", [3]), f32("var", [3], 1.0),
             f32("ln_scale", [4]), f32("ln_bias", [4]), f32("ln_scale1", [1])]
    inputs = [vi("x", F, [2, 3, 4, 4]), vi("t", F, [2, 3, 4])]
    outputs = [out(n) for n in ["bn", "bn_train", "ln", "ln_mean", "ln_istd", "ln2"]]
    return model(nodes, inputs, outputs, inits)


@register("gemm-matmul.onnxtxt")
def gemm_matmul():
    nodes = [
        node("Gemm", ["a", "Bw", "C"], ["gemm"], "gemm_node", transB=1, alpha=0.5,
             beta=2.0),
        node("Gemm", ["a", "Bn"], ["gemm_plain"], "gemm_plain_node"),
        node("MatMul", ["t", "W"], ["mm_2d"], "mm_2d_node"),
        node("MatMul", ["a", "t3"], ["mm_bcast"], "mm_bcast_node"),
        node("MatMul", ["v", "W"], ["mm_vec"], "mm_vec_node"),
        node("MatMul", ["t", "v"], ["mm_matvec"], "mm_matvec_node"),
    ]
    inits = [f32("Bw", [5, 3]), f32("C", [5]), f32("Bn", [3, 4]), f32("W", [4, 5])]
    inputs = [vi("a", F, [2, 3]), vi("t", F, [2, 3, 4]), vi("t3", F, [6, 3, 4]),
              vi("v", F, [4])]
    outputs = [out(n) for n in ["gemm", "gemm_plain", "mm_2d", "mm_bcast", "mm_vec",
                                "mm_matvec"]]
    return model(nodes, inputs, outputs, inits)


@register("wide-softmax.onnxtxt")
def wide_softmax():
    # A softmax over the 2304 columns of a product: its rows kernel computes the product's
    # rows (GPUs: too long a row for shared memory, so each element as it is loaded).
    nodes = [
        node("MatMul", ["x", "W"], ["logits"], "proj"),
        node("Softmax", ["logits"], ["probs"], "softmax", axis=-1),
    ]
    w = (np.sin(np.arange(2 * 2304, dtype=np.float64)) * 0.5).astype(np.float32)
    inits = [nh.from_array(w.reshape(2, 2304), "W")]
    return model(nodes, [vi("x", F, [2, 2])], [out("probs")], inits)


@register("dropout-loss.onnxtxt")
def dropout_loss():
    nodes = [
        const("ratio", np.float32(0.25)),
        const("train", np.bool_(True)),
        node("Dropout", ["x", "ratio", "train"], ["drop"], "drop_train"),
        node("Dropout", ["x"], ["drop_eval"], "drop_eval_node"),
        node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], "sce_node",
             reduction="sum", ignore_index=-100),
        node("SoftmaxCrossEntropyLoss", ["logits", "labels2"], ["loss2"], "sce2_node"),
    ]
    inputs = [vi("x", F, [2, 3]), vi("scores", F, [2, 5, 4]), vi("labels", I64, [2, 4]),
              vi("logits", F, [3, 5]), vi("labels2", I64, [3])]
    outputs = [out("drop"), out("drop_eval"), out("loss"), out("loss2")]
    return model(nodes, inputs, outputs)


#===-- shape subgraphs and weights ----------------------------------------===#

@register("shape-subgraph.onnxtxt")
def shape_subgraph():
    nodes = [
        node("Shape", ["x"], ["shp"], "shape_node"),
        const("zero", np.int64(0)),
        node("Gather", ["shp", "zero"], ["batch"], "gather_batch"),
        const("unsq_axes", np.array([0], np.int64)),
        node("Unsqueeze", ["batch", "unsq_axes"], ["batch1"], "unsqueeze_batch"),
        const("minus1", np.array([-1], np.int64)),
        node("Concat", ["batch1", "minus1"], ["target"], "concat_target", axis=0),
        node("Reshape", ["x", "target"], ["flat"], "reshape_node"),
        node("ConstantOfShape", ["shp"], ["ones"], "cos_node",
             value=nh.from_array(np.array([1.5], np.float32), "v")),
        node("Add", ["x", "ones"], ["plus_ones"], "add_ones"),
        const("two", np.int64(2)),
        node("Gather", ["shp", "two"], ["last"], "gather_last"),
        const("r_start", np.int64(0)),
        const("r_delta", np.int64(1)),
        node("Range", ["r_start", "last", "r_delta"], ["rng"], "range_node"),
        node("Cast", ["rng"], ["rngf"], "cast_range", to=F),
        node("Add", ["x", "rngf"], ["plus_range"], "add_range"),
        node("Expand", ["row", "shp"], ["expanded"], "expand_node"),
        node("Size", ["x"], ["size"], "size_node"),
        node("Cast", ["size"], ["sizef"], "cast_size", to=F),
        node("Div", ["x", "sizef"], ["scaled"], "div_size"),
    ]
    inputs = [vi("x", F, ["batch", 3, 4]), vi("row", F, [1, 4])]
    outputs = [out(n) for n in ["flat", "plus_ones", "plus_range", "expanded", "scaled"]]
    return model(nodes, inputs, outputs, opset=13)


@register("host-fold.onnxtxt")
def host_fold():
    # Nodes whose inputs are all known at import time are evaluated on the host.
    nodes = [
        # A float16 result is not truncated like an integer one.
        const("half", np.float32(0.5)),
        node("Cast", ["half"], ["half16"], "cast_f16", to=T.FLOAT16),
        node("Add", ["h", "half16"], ["h_plus"], "add_f16"),
        # Transpose of a host tensor.
        const("mat", np.array([[1, 2], [3, 4]], np.int64)),
        node("Transpose", ["mat"], ["mat_t"], "transpose_host"),
        node("Cast", ["mat_t"], ["mat_tf"], "cast_mat", to=F),
        node("Add", ["q", "mat_tf"], ["q_plus"], "add_mat"),
        # Slice with a negative step of a shape: [2,3,4] -> [4,3,2].
        node("Shape", ["x"], ["shp"], "shape_x"),
        const("st", np.array([-1], np.int64)),
        const("en", np.array([-(2**63)], np.int64)),
        const("ax", np.array([0], np.int64)),
        const("sp", np.array([-1], np.int64)),
        node("Slice", ["shp", "st", "en", "ax", "sp"], ["rev"], "reverse_shape"),
        node("Reshape", ["x", "rev"], ["x_rev"], "reshape_rev"),
        # Where over host values, with broadcasting.
        const("cond", np.array([True, False])),
        const("yes", np.array([[10, 20], [30, 40]], np.int64)),
        const("no", np.int64(-1)),
        node("Where", ["cond", "yes", "no"], ["picked"], "where_host"),
        node("Cast", ["picked"], ["pickedf"], "cast_picked", to=F),
        node("Mul", ["q", "pickedf"], ["q_scaled"], "mul_picked"),
        # Constant's other value forms.
        h.make_node("Constant", [], ["target"], name="const_ints", value_ints=[6, 4]),
        node("Reshape", ["x", "target"], ["x_64"], "reshape_64"),
        h.make_node("Constant", [], ["three"], name="const_float", value_float=3.0),
        node("Mul", ["q", "three"], ["q_3"], "mul_three"),
    ]
    inputs = [vi("h", T.FLOAT16, [2]), vi("q", F, [2, 2]), vi("x", F, [2, 3, 4])]
    outputs = [out("h_plus", T.FLOAT16), out("q_plus"), out("x_rev"), out("q_scaled"),
               out("x_64"), out("q_3")]
    return model(nodes, inputs, outputs)


@register("clip-f16.onnxtxt")
def clip_f16():
    # float16 initializers read at import time (Clip's bounds) keep their values.
    lo = nh.from_array(np.array(-1.5, np.float16), "lo")
    hi = nh.from_array(np.array(2.5, np.float16), "hi")
    nodes = [node("Clip", ["x", "lo", "hi"], ["y"], "clip_f16")]
    return model(nodes, [vi("x", T.FLOAT16, [3])], [out("y", T.FLOAT16)], [lo, hi])


@register("weights.onnxtxt")
def weights():
    nodes = [
        node("Transpose", ["W"], ["wt"], "transpose_w", perm=[1, 0]),
        node("MatMul", ["x", "wt"], ["y"], "matmul_node"),
        node("Add", ["y", "b"], ["z"], "add_bias"),
        node("Reshape", ["W", "wshape"], ["wflat"], "reshape_w"),
        node("Neg", ["W"], ["wneg"], "neg_w"),
        node("Gather", ["idx_table", "sel"], ["picked"], "gather_table"),
    ]
    inits = [f32("W", [4, 3]), f32("b", [4]), i64("wshape", [-1]),
             i64("idx_table", [3, 1, 2]), i64("sel", [2, 0])]
    outputs = [out("z"), out("wflat"), out("wneg"), out("picked", I64)]
    return model(nodes, [vi("x", F, ["batch", 3])], outputs, inits)


@register("exporter-literals.onnxtxt")
def exporter_literals():
    """A tanh-GELU MLP written the way PyTorch 2.x exports it: literals lifted into
    scalar initializers (val_N), a legacy-style folded scalar, LayerNorm weights merged
    into one shared all-ones tensor, and a BatchNorm in inference form."""
    s = lambda name, v: nh.from_array(np.array(v, dtype=np.float32), name)
    nodes = [
        node("MatMul", ["x", "fc.weight"], ["h"], "fc"),
        node("Mul", ["h", "val_0"], ["half"], "mul_half"),
        node("Mul", ["h", "h"], ["h2"], "sq"),
        node("Mul", ["h2", "h"], ["h3"], "cube"),
        node("Mul", ["h3", "onnx::Mul_7"], ["c3"], "mul_c"),
        node("Add", ["h", "c3"], ["inner"], "add_inner"),
        node("Mul", ["inner", "val_1"], ["scaled"], "mul_k"),
        node("Tanh", ["scaled"], ["t"], "tanh"),
        node("Add", ["t", "val_2"], ["t1"], "add_one"),
        node("Mul", ["half", "t1"], ["g"], "gelu_out"),
        node("LayerNormalization", ["g", "ln.shared", "ln.zero"], ["n1"], "ln1", axis=-1),
        node("LayerNormalization", ["n1", "ln.shared", "ln.zero"], ["n2"], "ln2", axis=-1),
        node("Unsqueeze", ["n2", "axes2"], ["n4"], "to4d"),
        node("BatchNormalization", ["n4", "bn.weight", "bn.bias", "bn.running_mean",
                                    "bn.running_var"], ["b4"], "bn"),
        node("Reshape", ["b4", "shape2"], ["logits"], "flat"),
    ]
    w = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) * 0.1
    inits = [nh.from_array(w, "fc.weight"), s("val_0", 0.5), s("onnx::Mul_7", 0.044715),
             s("val_1", 0.7978846), s("val_2", 1.0), s("ln.shared", np.ones(4)),
             s("ln.zero", np.zeros(4)), i64("axes2", [2, 3]), s("bn.weight", np.ones(4)),
             s("bn.bias", np.zeros(4)), s("bn.running_mean", np.zeros(4)),
             s("bn.running_var", np.ones(4)), i64("shape2", [2, 4])]
    return model(nodes, [vi("x", F, [2, 3])], [out("logits")], inits)


@register("torch-kinds.onnx")
def torch_kinds():
    """As the PyTorch 2.x exporter writes it: each initializer's torch.export input kind in
    value_info metadata (binary only: Debian's ONNX 1.12 text parser does not know the
    field). A scalar PARAMETER trains; a float BUFFER that the loss reaches does not."""
    s = lambda name, v: nh.from_array(np.array(v, dtype=np.float32), name)
    nodes = [
        node("MatMul", ["x", "fc.weight"], ["h"], "fc"),
        node("Mul", ["h", "temperature"], ["t"], "temp"),
        node("Mul", ["t", "rope.inv_freq"], ["logits"], "freq"),
    ]
    w = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) * 0.1
    inits = [nh.from_array(w, "fc.weight"), s("temperature", 0.7),
             s("rope.inv_freq", [1.0, 0.5, 0.25, 0.125])]
    m = model(nodes, [vi("x", F, [2, 3])], [out("logits")], inits, opset=18)
    m.ir_version = 10
    for name, kind in [("fc.weight", "PARAMETER"), ("temperature", "PARAMETER"),
                       ("rope.inv_freq", "BUFFER")]:
        v = h.make_tensor_value_info(name, F, None)
        e = v.metadata_props.add()
        e.key, e.value = "pkg.torch.export.graph_signature.InputSpec.kind", kind
        m.graph.value_info.append(v)
    return m


@register("int-matmul.onnxtxt")
def int_matmul():
    # ortc.matmul takes float tensors: the verifier refuses this after conversion, and
    # its message carries the node's name as the op's location.
    nodes = [node("MatMul", ["p", "q"], ["r"], "int_matmul_node")]
    return model(nodes, [vi("p", I32, [2, 3]), vi("q", I32, [3, 4])], [out("r", I32)])


@register("mixed-matmul.onnxtxt")
def mixed_matmul():
    nodes = [node("MatMul", ["p", "q"], ["r"], "mixed_matmul_node")]
    return model(nodes, [vi("p", F, [2, 3]), vi("q", T.DOUBLE, [3, 4])], [out("r")])


#===-- bad models (bad-inputs.test) ---------------------------------------===#

@register("bad-unknown-op.onnxtxt")
def bad_unknown_op():
    nodes = [node("Relu", ["x"], ["r"], "relu_ok"),
             node("FancyOp", ["r"], ["y"], "fancy_node")]
    return model(nodes, [vi("x", F, [2, 3])], [out("y")])


@register("bad-empty-required.onnxtxt")
def bad_empty_required():
    return model([node("Concat", ["", "x"], ["y"], "concat_node", axis=0)],
                 [vi("x", F, [2])], [out("y")])


@register("bad-resize-runtime.onnxtxt")
def bad_resize_runtime():
    return model([node("Resize", ["x", "", "s"], ["y"], "resize_node")],
                 [vi("x", F, [1, 1, 2, 2]), vi("s", F, [4])], [out("y")])


@register("bad-resize-huge.onnxtxt")
def bad_resize_huge():
    # sizes whose third entry is 2^59 + 1 (found by fuzz-onnx: the host tables OOMed).
    return model([node("Resize", ["x", "", "", "sizes"], ["y"], "huge_sizes")],
                 [vi("x", F, [1, 1, 2, 2])], [out("y")],
                 [i64("sizes", [1, 1, 576460752303423489, 8])])


@register("bad-resize-huge-scales.onnxtxt")
def bad_resize_huge_scales():
    scales = nh.from_array(np.array([1.0, 1.0, 1e30, 2.0], dtype=np.float32), "scales")
    return model([node("Resize", ["x", "", "scales"], ["y"], "huge_scales")],
                 [vi("x", F, [1, 1, 2, 2])], [out("y")], [scales])


@register("bad-dangling.onnxtxt")
def bad_dangling():
    nodes = [node("Add", ["x", "ghost"], ["y"], "add_ghost")]
    return model(nodes, [vi("x", F, [2, 3])], [out("y")])


@register("bad-shapes.onnxtxt")
def bad_shapes():
    nodes = [node("Add", ["p", "q"], ["y"], "add_mismatch")]
    return model(nodes, [vi("p", F, [2, 3]), vi("q", F, [4, 5])], [out("y")])


@register("bad-negative-dim.onnxtxt")
def bad_negative_dim():
    nodes = [node("Relu", ["x"], ["y"], "relu")]
    return model(nodes, [vi("x", F, [2, -3])], [out("y")])


@register("bad-minus-one-dim.onnxtxt")
def bad_minus_one_dim():
    nodes = [node("Relu", ["x"], ["y"], "relu")]
    return model(nodes, [vi("x", F, [2, -1])], [out("y")])


@register("bad-raw-size.onnxtxt")
def bad_raw_size():
    w = raw_tensor("W", F, [2, 3], b"\0" * 20)
    nodes = [node("MatMul", ["x", "W"], ["y"], "mm")]
    return model(nodes, [vi("x", F, [4, 2])], [out("y")], [w])


@register("bad-cycle.onnxtxt")
def bad_cycle():
    nodes = [node("Relu", ["x"], ["r"], "relu_in"),
             node("Add", ["r", "c"], ["a"], "cycle_add"),
             node("Neg", ["a"], ["c"], "cycle_neg"),
             node("Exp", ["a"], ["y"], "after_cycle")]
    return model(nodes, [vi("x", F, [2, 3])], [out("y")])


def external_model(location):
    w = T()
    w.name, w.data_type = "W", F
    w.dims.extend([2, 3])
    w.data_location = T.EXTERNAL
    for k, v in [("location", location), ("offset", "0"), ("length", "24")]:
        e = w.external_data.add()
        e.key, e.value = k, v
    nodes = [node("MatMul", ["x", "W"], ["y"], "mm")]
    return model(nodes, [vi("x", F, [4, 2])], [out("y")], [w])


@register("ext-ok.onnxtxt")
def ext_ok():
    return external_model("w.bin")


@register("ext-parent.onnxtxt")
def ext_parent():
    return external_model("../x.bin")


@register("ext-absolute.onnxtxt")
def ext_absolute():
    return external_model("/tmp/ortc-lit-w.bin")


@register("ext-sub.onnxtxt")
def ext_sub():
    return external_model("sub/w.bin")


@register("bad-unbound-dim.onnxtxt")
def bad_unbound_dim():
    nodes = [node("Relu", ["x"], ["y"], "relu")]
    return model(nodes, [vi("x", F, ["seq_len", 3])], [out("y")])


@register("bad-many.onnxtxt")
def bad_many():
    nodes = [node("Frobnicate", ["x"], ["a"], "frob_1"),
             node("Relu", ["a"], ["b"], "relu"),
             node("Quux", ["b"], ["y"], "quux_2")]
    return model(nodes, [vi("x", F, ["batch", 3])], [out("y")])


@register("bad-constant-raw.onnxtxt")
def bad_constant_raw():
    # A Constant whose raw_data is shorter than its shape needs.
    t = raw_tensor("c_value", F, [4], b"\0" * 8)
    nodes = [h.make_node("Constant", [], ["c"], name="short_const", value=t),
             node("Add", ["x", "c"], ["y"], "add")]
    return model(nodes, [vi("x", F, [4])], [out("y")])


@register("bad-host-perm.onnxtxt")
def bad_host_perm():
    # A Transpose evaluated at import time (its input is a shape) with a bad perm.
    nodes = [node("Shape", ["x"], ["s"], "shape"),
             node("Transpose", ["s"], ["t"], "bad_perm", perm=[3]),
             node("Reshape", ["x", "t"], ["y"], "reshape")]
    return model(nodes, [vi("x", F, [2, 3])], [out("y")])


@register("bad-opset.onnxtxt")
def bad_opset():
    # Gelu is an ONNX op from opset 20 on.
    nodes = [node("Gelu", ["x"], ["y"], "gelu_too_early")]
    return model(nodes, [vi("x", F, [2, 3])], [out("y")], opset=17)


@register("bad-host-concat.onnxtxt")
def bad_host_concat():
    # Concat of host values whose other dims differ.
    nodes = [const("c1", np.zeros((2, 3), np.int64)), const("c2", np.zeros((3, 3), np.int64)),
             node("Concat", ["c1", "c2"], ["cc"], "concat_host", axis=1),
             node("Cast", ["cc"], ["ccf"], "cast", to=F),
             node("Add", ["x", "ccf"], ["y"], "add")]
    return model(nodes, [vi("x", F, [2, 6])], [out("y")])


@register("bad-host-sum.onnxtxt")
def bad_host_sum():
    # Sum of three host values whose middle one does not broadcast with the others.
    nodes = [const("c1", np.zeros((2,), np.int64)), const("c2", np.zeros((3,), np.int64)),
             const("c3", np.zeros((2,), np.int64)),
             node("Sum", ["c1", "c2", "c3"], ["s"], "sum_host"),
             node("Reshape", ["x", "s"], ["y"], "reshape")]
    return model(nodes, [vi("x", F, [2, 6])], [out("y")])


@register("weights.onnx")
def weights_binary():
    # The binary form of weights.onnxtxt (and the source of the truncated model).
    return weights()


#===-- LSTM and GRU (seq 3, batch 2, input 2, hidden 2) -----------------===#

def rnn_model(op, extra_inputs=(), inits=(), **attrs):
    gates = 4 if op == "LSTM" else 3
    ins = ["x", "W", "R", "B"] + list(extra_inputs)
    nodes = [node(op, ins, ["y", "y_h"], op.lower(), hidden_size=2, **attrs)]
    weights = [f32("W", [1, 2 * gates, 2], -1.0), f32("R", [1, 2 * gates, 2], -2.0),
               f32("B", [1, 4 * gates], -3.0)] + list(inits)
    return model(nodes, [vi("x", F, [3, 2, 2])], [out("y"), out("y_h")], weights)


@register("rnn-lstm.onnxtxt")
def rnn_lstm():
    return rnn_model("LSTM")


@register("rnn-bad-clip.onnxtxt")
def rnn_bad_clip():
    return rnn_model("LSTM", clip=1.0)


@register("rnn-bad-activation.onnxtxt")
def rnn_bad_activation():
    return rnn_model("GRU", activations=["Sigmoid", "Relu"])


@register("rnn-bad-input-forget.onnxtxt")
def rnn_bad_input_forget():
    return rnn_model("LSTM", input_forget=1)


@register("rnn-bad-seq-lens.onnxtxt")
def rnn_bad_seq_lens():
    lens = nh.from_array(np.array([3, 2], dtype=np.int32), "lens")
    return rnn_model("GRU", ["lens"], [lens])


@register("random.onnx")
def random_bytes():
    # Not a protobuf at all.
    return np.random.RandomState(1234).bytes(512)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with the files on disk instead of writing them")
    ap.add_argument("--out", default=HERE, help="folder to write (default: this one)")
    args = ap.parse_args()
    stale = []
    for name, fn in sorted(MODELS.items()):
        m = fn()
        if isinstance(m, bytes):
            text = m
        elif name.endswith(".onnx"):
            text = m.SerializeToString(deterministic=True)
        else:
            text = text_format.MessageToString(m).encode()
        path = os.path.join(args.out, name)
        if args.check:
            try:
                with open(path, "rb") as f:
                    same = f.read() == text
            except OSError:
                same = False
            if not same:
                stale.append(name)
        else:
            with open(path, "wb") as f:
                f.write(text)
    if args.check:
        # Every model in the folder comes from this script.
        for name in sorted(os.listdir(args.out)):
            if name.endswith((".onnx", ".onnxtxt")) and name not in MODELS:
                stale.append(name + " (not written by this script)")
    if stale:
        print("stale or missing (rerun make_models.py): " + " ".join(stale))
        return 1
    print(("checked " if args.check else "wrote ") + str(len(MODELS)) + " models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
