#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz harnesses (test/fuzz/corpus/<harness>/).

Run by hand after a harness's input format changes (needs the main build and the
venv's onnx and numpy):  .venv/bin/python test/fuzz/make_corpus.py
  onnx        the small .onnxtxt models of test/lit/Inputs, each as protobuf text (first
              byte odd) and binary (first byte even), plus one with external data in
              weights.bin (the harness puts 256 bytes there)
  npz         numpy .npz files: dtypes, 0-d and empty arrays, stored and deflated
  artifact    the mlp sample's manifest.json (scripts/fuzz.sh adds the one it builds,
              whose hashes match the files the harness loads)
  checkpoint  a checkpoint and a parameter file of the mlp sample
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, "build")
CORPUS = os.path.join(HERE, "corpus")


def fresh(name):
    d = os.path.join(CORPUS, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def onnx_corpus():
    d = fresh("onnx")
    inputs = sorted(glob.glob(os.path.join(ROOT, "test", "lit", "Inputs", "*.onnxtxt")))
    for path in inputs:
        text = open(path, "rb").read()
        if len(text) > 12000:
            continue
        stem = os.path.basename(path)[:-len(".onnxtxt")]
        with open(os.path.join(d, stem + ".txt"), "wb") as f:
            f.write(b"\x01" + text)
        model = onnx.ModelProto()
        try:
            text_format.Parse(text.decode(), model)
        except Exception:
            continue  # the bad-*.onnxtxt that are not even text protobuf
        with open(os.path.join(d, stem + ".bin"), "wb") as f:
            f.write(b"\x00" + model.SerializeToString())
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "16"), ("length", "16")):
        w.external_data.add(key=k, value=v)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with open(os.path.join(d, "external.bin"), "wb") as f:
        f.write(b"\x00" + model.SerializeToString())


def npz_corpus():
    d = fresh("npz")
    rng = np.random.default_rng(0)
    arrays = {"f32": rng.standard_normal((2, 3)).astype(np.float32),
              "i64": np.arange(6, dtype=np.int64).reshape(3, 2),
              "b": np.array([True, False]), "scalar": np.float64(2.5),
              "empty": np.zeros((0, 4), np.float32), "f16": np.ones(3, np.float16)}
    np.savez(os.path.join(d, "stored.npz"), **arrays)
    np.savez_compressed(os.path.join(d, "deflated.npz"), **arrays)
    np.savez(os.path.join(d, "one.npz"), x=np.float32([1, 2, 3]))


def mlp_artifact(work):
    out = os.path.join(work, "mlp.ortc")
    env = dict(os.environ, ORTC_CXX_OPT="-O1")
    subprocess.run([os.path.join(BUILD, "tools", "ortc", "ortc"), "build",
                    os.path.join(ROOT, "samples", "mlp", "mlp.onnx"), "--dim", "batch=2", "-o", out],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return out


def artifact_and_checkpoint_corpus():
    with tempfile.TemporaryDirectory() as work:
        art = mlp_artifact(work)
        d = fresh("artifact")
        shutil.copy(os.path.join(art, "manifest.json"), os.path.join(d, "mlp-manifest.json"))
        feed = os.path.join(work, "feed.npz")
        np.savez(feed, x=np.zeros((2, 32), np.float32), labels=np.zeros(2, np.int64))
        run = os.path.join(BUILD, "runtime", "ortc-run")
        d = fresh("checkpoint")
        subprocess.run([run, "train", art, "--data", feed, "--steps", "1", "--quiet",
                        "--save-checkpoint", os.path.join(d, "checkpoint.npz"),
                        "--save-params", os.path.join(d, "params.npz")], check=True)


if __name__ == "__main__":
    onnx_corpus()
    npz_corpus()
    artifact_and_checkpoint_corpus()
    for name in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, name))
        size = sum(os.path.getsize(os.path.join(CORPUS, name, f)) for f in files)
        print("%s: %d files, %d bytes" % (name, len(files), size), file=sys.stderr)
