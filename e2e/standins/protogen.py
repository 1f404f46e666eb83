"""Generates the kubelet API Python modules from proto/ at run time and imports them."""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO_FILES = (
    "k8s/deviceplugin/v1beta1/api.proto",
    "k8s/podresources/v1/api.proto",
)


def _digest():
    h = hashlib.sha256()
    for rel in PROTO_FILES:
        with open(os.path.join(PROTO_ROOT, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def generate(cache_root=None):
    """Returns a directory holding the generated modules, (re)building it when the protos change.

    The output lives in $MV_PROTO_CACHE or the system temp dir, keyed by a hash of the
    .proto contents, and is built in a scratch dir then renamed so concurrent runs are safe.
    """
    cache_root = cache_root or os.environ.get("MV_PROTO_CACHE") or tempfile.gettempdir()
    out = os.path.join(cache_root, "microview-k8s-pb-%d-%s" % (os.getuid(), _digest()))
    if os.path.isfile(os.path.join(out, "k8s", "podresources", "v1", "api_pb2_grpc.py")):
        return out
    os.makedirs(cache_root, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="microview-k8s-pb-build-", dir=cache_root)
    try:
        cmd = [sys.executable, "-m", "grpc_tools.protoc", "-I", PROTO_ROOT,
               "--python_out=" + scratch, "--grpc_python_out=" + scratch] + list(PROTO_FILES)
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError("protoc failed (%d): %s" % (res.returncode, res.stderr.strip()))
        try:
            os.rename(scratch, out)
        except OSError:
            if not os.path.isdir(out):  # lost a race only if someone else produced it
                raise
    finally:
        if os.path.isdir(scratch):
            shutil.rmtree(scratch, ignore_errors=True)
    return out


_loaded = None


def load():
    """Returns (dp_pb2, dp_grpc, pr_pb2, pr_grpc): device plugin v1beta1 and PodResources v1."""
    global _loaded
    if _loaded is None:
        out = generate()
        if out not in sys.path:
            sys.path.insert(0, out)
        from k8s.deviceplugin.v1beta1 import api_pb2 as dp_pb2
        from k8s.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
        from k8s.podresources.v1 import api_pb2 as pr_pb2
        from k8s.podresources.v1 import api_pb2_grpc as pr_grpc
        _loaded = (dp_pb2, dp_grpc, pr_pb2, pr_grpc)
    return _loaded
