"""prometheus_client's surface: registries, exceptions, get_sample_value read from the segment,
fractional counters (type 4), NaN, Summary/Enum/Info, set_function, decorators, exemplars."""

import inspect
import math
import os
import struct
import tempfile
import unittest
import warnings

import microview
from microview import (REGISTRY, CollectorRegistry, Counter, Enum, Gauge, Histogram, Info, Summary,
                       _microview)


def read_words(path, name, labels=()):
    """The value words of one series (spec sections 4-6), or None."""
    with open(path, "rb") as f:
        b = f.read()
    voff, _, coff = struct.unpack_from("<III", b, 24)
    pos = coff
    for _ in range(struct.unpack_from("<I", b, 56)[0]):
        size, typ, _, nl, vo, vs, _ = struct.unpack_from("<IBBHIIH", b, pos)
        p, strs = pos + 24, []
        for _ in range(3 + 2 * nl):
            n = struct.unpack_from("<H", b, p)[0]
            strs.append(b[p + 2:p + 2 + n].decode())
            p += 3 + n
        if strs[0] == name and tuple(zip(strs[3::2], strs[4::2])) == tuple(labels):
            return typ, struct.unpack_from("<%dQ" % (vs // 8), b, voff + vo)
        pos += size
    return None


def types_of(path, name):
    """The record types of every record named `name`, in catalog order."""
    with open(path, "rb") as f:
        b = f.read()
    coff = struct.unpack_from("<I", b, 32)[0]
    pos, out = coff, []
    for _ in range(struct.unpack_from("<I", b, 56)[0]):
        size, typ = struct.unpack_from("<IB", b, pos)
        n = struct.unpack_from("<H", b, pos + 24)[0]
        if b[pos + 26:pos + 26 + n].decode() == name:
            out.append(typ)
        pos += size
    return out


def REGISTRY_OF(reg, name):  # noqa: N802
    return reg._names_to_collectors[name]


def f64(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


class Compat(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "segment")
        with open(self.path, "wb") as f:
            f.write(bytes(65536))
        self.seg = _microview.Segment(self.path)
        self.reg = CollectorRegistry(segment=self.seg)

    def tearDown(self):
        self.dir.cleanup()

    def test_registry_duplicates_raise_value_error(self):
        Counter("c_total", "h", registry=self.reg)
        for cls, name in ((Counter, "c_total"), (Gauge, "c_total"), (Gauge, "c_created")):
            with self.assertRaises(ValueError):
                cls(name, "h", registry=self.reg)
        h = Histogram("h", "h", registry=self.reg)
        for name in ("h", "h_bucket", "h_count", "h_sum"):
            with self.assertRaises(ValueError):
                Gauge(name, "h", registry=self.reg)
        self.reg.unregister(h)
        Gauge("h_count", "h", registry=self.reg)
        Gauge("kind", "h", registry=self.reg)
        self.reg.unregister(REGISTRY_OF(self.reg, "kind"))
        with self.assertRaises(ValueError):  # one name, one type per segment, even deleted
            Histogram("kind", "h", registry=self.reg)
        self.assertNotIn("kind", self.reg._names_to_collectors)  # a refused metric is not kept
        with self.assertRaises(KeyError):
            self.reg.unregister(h)
        self.assertIsInstance(REGISTRY, CollectorRegistry)

    def test_get_sample_value_reads_the_segment(self):
        c = Counter("reqs", "h", ["code"], registry=self.reg)
        c.labels("200").inc(3)
        typ, w = read_words(self.path, "reqs_total", (("code", "200"),))
        self.assertEqual((typ, w[0]), (4, 3))
        # A write into the segment from elsewhere (another process) is what get_sample_value sees.
        other = _microview.Segment(self.path)
        h = other.register("counter_f", "reqs_total", "h", None, (("code", "200"),))
        h.inc(0.5)
        self.assertEqual(self.reg.get_sample_value("reqs_total", {"code": "200"}), 3.5)
        self.assertIsNone(self.reg.get_sample_value("reqs_total", {"code": "500"}))

    def test_fractional_counter_is_exact(self):
        c = Counter("work_seconds", "h", registry=self.reg)
        for _ in range(6):
            c.inc(0.25)
        self.assertEqual(self.reg.get_sample_value("work_seconds_total"), 1.5)
        c.inc(2)
        typ, w = read_words(self.path, "work_seconds_total")
        self.assertEqual((typ, w[0], f64(w[1])), (4, 2, 1.5))
        for bad in (-1, -0.5, float("nan"), float("-inf")):
            with self.assertRaises(ValueError):
                c.inc(bad)
        c.inc(amount=1, exemplar={"trace_id": "abc"})
        with self.assertRaises(ValueError):
            c.inc(1, exemplar={":bad": "x"})
        with self.assertRaises(ValueError):
            c.inc(1, exemplar={"k": "v" * 200})
        self.assertEqual(self.reg.get_sample_value("work_seconds_total"), 4.5)

    def test_labelled_metric_errors_are_prometheus_clients(self):
        c = Counter("lab", "h", ["a"], registry=self.reg)
        g = Gauge("labg", "h", ["a"], registry=self.reg)
        h = Histogram("labh", "h", ["a"], registry=self.reg)
        for f, args in ((c.inc, ()), (g.set, (1,)), (g.inc, ()), (g.dec, ()), (h.observe, (1,)),
                        (c.count_exceptions, ()), (g.track_inprogress, ()),
                        (g.set_function, (lambda: 1,))):
            with self.assertRaisesRegex(ValueError, "missing label values"):
                f(*args)
        with self.assertRaises(ValueError):
            c.labels("x").labels("y")
        with self.assertRaises(ValueError):
            c.labels("x", "y")
        with self.assertRaises(ValueError):
            c.labels(b="x")
        with self.assertRaises(ValueError):
            Counter("nolab", "h", registry=self.reg).labels("x")
        self.assertIs(c.labels("1"), c.labels(1))
        self.assertIs(c.labels(a="1"), c.labels("1"))

    def test_remove_and_clear_delete_series(self):
        c = Counter("del", "h", ["k"], registry=self.reg)
        c.labels("a").inc(5)
        c.labels("b").inc(1)
        old = c.labels("a")
        c.remove("a")
        self.assertIsNone(self.reg.get_sample_value("del_total", {"k": "a"}))
        self.assertEqual(self.reg.get_sample_value("del_total", {"k": "b"}), 1)
        self.assertEqual(types_of(self.path, "del_total"), [4, 4, 5])  # a tombstone
        old.inc()  # a removed child's handle stays usable; nobody sees it
        c.labels("a").inc()  # created anew from zero: a counter reset
        self.assertEqual(self.reg.get_sample_value("del_total", {"k": "a"}), 1)
        with self.assertRaises(KeyError):
            c.remove("zz")
        with self.assertRaises(ValueError):
            c.remove()
        c.clear()
        self.assertIsNone(self.reg.get_sample_value("del_total", {"k": "b"}))
        self.assertEqual(types_of(self.path, "del_total"), [4, 4, 5, 4, 5, 5])
        i = Info("ver", "h", registry=self.reg)
        i.info({"v": "1"})
        i.info({"v": "2"})
        self.assertEqual(types_of(self.path, "ver_info"), [2, 2, 5, 2, 5])
        g = Gauge("gone", "h", registry=self.reg)
        self.reg.unregister(g)
        self.assertEqual(types_of(self.path, "gone"), [2, 5])

    def test_nan(self):
        h = Histogram("nanh", "h", buckets=(1, 2), registry=self.reg)
        h.observe(1.5)
        h.observe(float("nan"))
        self.assertEqual(self.reg.get_sample_value("nanh_count"), 2)
        self.assertTrue(math.isnan(self.reg.get_sample_value("nanh_sum")))
        self.assertEqual(self.reg.get_sample_value("nanh_bucket", {"le": "2.0"}), 1)
        self.assertEqual(self.reg.get_sample_value("nanh_bucket", {"le": "+Inf"}), 2)
        g = Gauge("nang", "h", registry=self.reg)
        g.set(float("nan"))
        self.assertTrue(math.isnan(f64(read_words(self.path, "nang")[1][0])))
        n = self.seg.register("histogram", "native_h", None, None, (), (1.0,))
        n.observe(float("nan"))  # the native handle counts NaN too (spec section 9.5)
        self.assertEqual(n.read()[0], 1)

    def test_summary_enum_info(self):
        s = Summary("lat_seconds", "h", registry=self.reg)
        s.observe(0.5)
        s.observe(1.5)
        self.assertEqual(self.reg.get_sample_value("lat_seconds_count"), 2)
        self.assertEqual(self.reg.get_sample_value("lat_seconds_sum"), 2.0)
        typ, w = read_words(self.path, "lat_seconds")
        self.assertEqual((typ, w[0]), (3, 2))  # a histogram for the collector's quantiles
        e = Enum("phase", "h", states=["a", "b"], registry=self.reg)
        e.state("b")
        self.assertEqual(self.reg.get_sample_value("phase", {"phase": "a"}), 0)
        self.assertEqual(self.reg.get_sample_value("phase", {"phase": "b"}), 1)
        with self.assertRaises(ValueError):
            e.state("c")
        i = Info("build", "h", registry=self.reg)
        i.info({"version": "1.2"})
        self.assertEqual(self.reg.get_sample_value("build_info", {"version": "1.2"}), 1)
        self.assertEqual(f64(read_words(self.path, "build_info", (("version", "1.2"),))[1][0]), 1)

    def test_set_function_and_decorators(self):
        g = Gauge("queue", "h", registry=self.reg)
        q = []
        g.set_function(lambda: len(q))
        q.append(1)
        g.inc(10)  # a no-op once set_function is in use, as in prometheus_client
        self.assertEqual(self.reg.get_sample_value("queue"), 1)
        self.assertEqual(f64(read_words(self.path, "queue")[1][0]), 1)
        h = Histogram("t", "h", registry=self.reg)

        @h.time()
        def f(a, b=2, *args, c, **kw):
            return a + b + c

        self.assertEqual(f(1, c=3), 6)
        self.assertEqual(inspect.getfullargspec(f)[:4], (["a", "b"], "args", "kw", (2,)))
        self.assertEqual(self.reg.get_sample_value("t_count"), 1)
        gl = Gauge("tl", "h", ["x"], registry=self.reg)
        with gl.time() as t:
            t.labels("y")
        self.assertGreaterEqual(self.reg.get_sample_value("tl", {"x": "y"}), 0)

    def test_full_segment_names_the_size_to_ask_for(self):
        u0 = microview.segment_usage(self.seg)
        self.assertEqual(u0["segment_size"], 65536)
        self.assertLess(u0["fullness"], 0.1)
        c = Counter("fill", "h", ["i"], registry=self.reg)
        microview._warned.clear()  # warnings are given once per process
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for i in range(3000):
                c.labels(str(i)).inc()
        msgs = [str(x.message) for x in w]
        self.assertTrue(any("segment full" in m and "microview.io/metrics-memory: 128Ki" in m
                            for m in msgs), msgs)
        u = microview.segment_usage(self.seg)
        self.assertGreater(u["fullness"], 0.9)
        self.assertGreater(u["records"], u0["records"])

    def test_exposition_is_delegated_to_prometheus_client(self):
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            self.skipTest("SKIPPED: prometheus_client (python3-prometheus-client) not installed")
        c = Counter("exp", "Help.", ["k"], registry=self.reg)
        c.labels("v").inc(0.5)
        text = microview.generate_latest(self.reg).decode()
        self.assertIn("# TYPE exp_total counter\n", text)
        self.assertIn('exp_total{k="v"} 0.5\n', text)
        REGISTRY.unregister(microview.PROCESS_COLLECTOR)  # the usual "no default collectors"
        REGISTRY.register(microview.PROCESS_COLLECTOR)

    def test_registry_none_and_private_registries_are_independent(self):
        a, b = CollectorRegistry(), CollectorRegistry()
        Counter("same", "h", registry=a).inc()
        Counter("same", "h", registry=b).inc(2)
        Histogram("same_h", "h", registry=None, buckets=[0, 1])
        Histogram("same_h", "h", registry=None, buckets=[5, 6])
        self.assertEqual((a.get_sample_value("same_total"), b.get_sample_value("same_total")),
                         (1, 2))


if __name__ == "__main__":
    unittest.main()
