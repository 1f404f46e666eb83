"""Replays the shared test vectors (tests/vectors/*.ops) through the Python writer and
compares the segment byte for byte with libmicroview's (tests/vectors/*.hex); checks that the
worked examples of docs/segment-format.md are what the vectors hold."""

import glob
import math
import os
import re
import struct
import tempfile
import unittest

from microview import _microview

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
VECTORS = os.environ.get("MV_VECTORS_DIR", os.path.join(ROOT, "tests", "vectors"))
SPEC = os.path.join(ROOT, "docs", "segment-format.md")


def unescape(s):
    return re.sub(rb"%([0-9a-fA-F]{2})", lambda m: bytes([int(m.group(1), 16)]),
                  s.encode()).decode("utf-8", "surrogateescape")


def num(s):
    return int(s, 0)


def flt(s):
    return float(s)  # accepts nan, inf


def format_header(path, size, instance, created, values_size=0):
    """The spec's formatter (section 7), for vectors that start from a given instance."""
    rest = size - 128
    if not values_size:
        values_size = max(512, (rest // 4) & ~63)
    hdr = struct.pack("<8sHHIQIIIIQQIIIIQQII32s", b"MVIEWSEG", 1, 128, 0, size, 128, values_size,
                      128 + values_size, size - 128 - values_size, instance, 0, 0, 0, 0, 0, 0,
                      created, 0, 0, bytes(32))
    with open(path, "r+b") as f:
        f.write(hdr)


STAMPS = {"instance": (40, 8), "heartbeat_ns": (72, 8), "created_ns": (80, 8), "writer_pid": (88, 4)}


class self_raises:
    """Like assertRaises, for replay(): the block must raise `exc`."""

    def __init__(self, exc, where):
        self.exc, self.where = exc, where

    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        if typ is None:
            raise AssertionError("%s: no %s raised" % (self.where, self.exc.__name__))
        return issubclass(typ, self.exc)


def replay(ops_path, tmpdir):
    path = os.path.join(tmpdir, "segment")
    seg, handles, series, stamps, size = None, {}, {}, [], 0
    with open(ops_path) as f:
        for lineno, line in enumerate(f, 1):
            tok = line.split("#", 1)[0].split()
            if not tok:
                continue
            where = "%s:%d" % (ops_path, lineno)
            op = tok[0]
            if op == "size":
                size = num(tok[1])
                with open(path, "wb") as out:
                    out.write(bytes(size))
            elif op == "format":
                kv = dict(t.split("=", 1) for t in tok[1:])
                format_header(path, size, num(kv["instance"]), num(kv["created_ns"]),
                              num(kv.get("values_size", "0")))
            elif op == "open":
                seg = _microview.Segment(path)
            elif op == "stamp":
                for t in tok[1:]:
                    k, v = t.split("=", 1)
                    stamps.append((STAMPS[k], num(v)))
            elif op in ("counter", "counter_f", "gauge", "histogram", "fail"):
                want = None
                if op == "fail":
                    want, op, tok = tok[1], tok[2], tok[2:]
                name = help_ = unit = None
                labels, bounds = [], None
                for t in tok[2:]:
                    k, v = t.split("=", 1)
                    if k == "label":
                        lk, lv = v.split("=", 1)
                        labels.append((unescape(lk), unescape(lv)))
                    elif k == "bounds":
                        bounds = [flt(b) for b in v.split(",")]
                    elif k in ("name", "help", "unit"):
                        v = unescape(v)
                        if k == "name":
                            name = v
                        elif k == "help":
                            help_ = v
                        else:
                            unit = v
                    else:
                        raise AssertionError("%s: unknown argument %s" % (where, k))
                try:
                    h = seg.register(op, name, help_, unit, tuple(labels), bounds)
                    got = None
                except _microview.Error as e:
                    got = e.args[1]
                except UnicodeEncodeError:
                    got = "invalid"  # not UTF-8: refused before it reaches libmicroview
                if got != want:
                    raise AssertionError("%s: registering %s gave %s, want %s" % (where, name, got, want))
                if got is None:
                    handles[tok[1]] = h
                    series[tok[1]] = (name, tuple(labels))
            elif op == "inc":
                handles[tok[1]].inc()
            elif op == "add":
                handles[tok[1]].inc(num(tok[2]))
            elif op == "set":
                handles[tok[1]].set(flt(tok[2]))
            elif op == "gadd":
                handles[tok[1]].inc(flt(tok[2]))
            elif op == "observe":
                handles[tok[1]].observe(flt(tok[2]))
            elif op == "fadd":
                handles[tok[1]].inc(flt(tok[2]))
            elif op == "refuse" and tok[1] == "fadd":
                h = handles[tok[2]]
                before = h.get()
                with self_raises(ValueError, where):
                    h.inc(flt(tok[3]))
                if h.get() != before:
                    raise AssertionError("%s: a refused add changed the counter" % where)
            elif op == "delete":
                if not seg.delete(*series.pop(tok[1])):
                    raise AssertionError("%s: delete found no live series" % where)
                del handles[tok[1]]
            elif op == "usage":
                want = {k: num(v) for k, v in (t.split("=", 1) for t in tok[1:])}
                u = seg.usage()
                got = {k: u[k] for k in want}
                if got != want:
                    raise AssertionError("%s: usage %s, want %s" % (where, got, want))
            else:
                raise AssertionError("%s: unknown operation %s" % (where, op))
    handles.clear()
    del seg  # unmaps
    with open(path, "rb") as f:
        b = bytearray(f.read())
    for (off, width), v in stamps:
        b[off:off + width] = v.to_bytes(width, "little")
    return bytes(b)


def read_hex(path):
    out = None
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            if line.startswith("size "):
                out = bytearray(int(line[5:]))
                continue
            off, rest = line.split(":", 1)
            o = int(off, 16)
            data = bytes(int(x, 16) for x in rest.split())
            assert len(data) == 16, line
            out[o:o + 16] = data
    return bytes(out)


def spec_text():
    with open(SPEC) as f:
        return f.read()


def spec_block(heading):
    """The hex dump in the first code block after `heading` in the spec."""
    text = spec_text()
    block = text[text.index(heading):].split("```")[1]
    out = bytearray()
    for line in block.splitlines():
        m = re.match(r"^([0-9a-f]{4}): ((?:[0-9a-f]{2} ?)+)", line)
        if m:
            assert int(m.group(1), 16) == len(out), line
            out += bytes(int(x, 16) for x in m.group(2).split())
    return bytes(out)


class Vectors(unittest.TestCase):
    def test_every_vector_byte_for_byte(self):
        os.environ.pop("MICROVIEW_PLACEMENT", None)  # the vectors pin the default placement
        ops = sorted(glob.glob(os.path.join(VECTORS, "*.ops")))
        self.assertTrue(ops, "no vectors in " + VECTORS)
        for p in ops:
            with self.subTest(vector=os.path.basename(p)), tempfile.TemporaryDirectory() as d:
                got = replay(p, d)
                want = read_hex(p[:-4] + ".hex")
                self.assertEqual(len(got), len(want))
                if got != want:
                    i = next(i for i in range(len(got)) if got[i] != want[i])
                    self.fail("first difference at byte 0x%x: Python writer %02x, libmicroview %02x"
                              % (i, got[i], want[i]))

    def test_spec_worked_examples_are_the_vectors(self):
        seg = read_hex(os.path.join(VECTORS, "spec_counter.hex"))
        self.assertEqual(spec_block("### 4.1 Worked example"), seg[:128])
        cat_off = struct.unpack_from("<I", seg, 32)[0]
        rec = spec_block("### 6.5 Worked example")
        self.assertEqual(len(rec), 56)
        self.assertEqual(rec, seg[cat_off:cat_off + 56])
        hist = read_hex(os.path.join(VECTORS, "spec_histogram.hex"))
        count, sum_bits, b0, b1, check = struct.unpack_from("<QQQQQ", hist, 128)
        text = spec_text()
        m = re.search(r"1·W\(2\) = (0x[0-9a-f]+)", text)
        self.assertIsNotNone(m)
        self.assertEqual((count, sum_bits, b0, b1, check),
                         (1, 0x3fe0000000000000, 1, 0, int(m.group(1), 16)))
        self.assertEqual(struct.unpack("<d", struct.pack("<Q", sum_bits))[0], 0.5)
        self.assertFalse(math.isnan(0.5))


if __name__ == "__main__":
    unittest.main()
