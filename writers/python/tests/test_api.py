"""The prometheus_client-like API: names, labels, values in the segment, threads, timers,
errors, and the fallback when no segment is available."""

import os
import struct
import tempfile
import threading
import time
import unittest
import warnings

import microview
from microview import Counter, Gauge, Histogram, _microview


def hist_weight(i):
    m = (1 << 64) - 1
    z = ((i + 1) * 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return (z ^ (z >> 31)) | 1


def read_segment(path):
    """A small reader (spec sections 4-6) returning {(name, labels): value words}."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"MVIEWSEG"
    voff, _, coff = struct.unpack_from("<III", b, 24)
    count = struct.unpack_from("<I", b, 56)[0]
    out, pos = {}, coff
    for _ in range(count):
        size, typ, _, nl, vo, vs, nb = struct.unpack_from("<IBBHIIH", b, pos)
        p = pos + 24
        strs = []
        for _ in range(3 + 2 * nl):
            n = struct.unpack_from("<H", b, p)[0]
            strs.append(b[p + 2:p + 2 + n].decode())
            p += 3 + n
        labels = tuple(zip(strs[3::2], strs[4::2]))
        words = struct.unpack_from("<%dQ" % (vs // 8), b, voff + vo)
        out[(strs[0], labels)] = (typ, strs[1], strs[2], words)
        pos += size
    return out


def f64(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


class Api(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "segment")
        with open(self.path, "wb") as f:
            f.write(bytes(65536))
        self.seg = _microview.Segment(self.path)

    def tearDown(self):
        self.dir.cleanup()

    def test_names_labels_and_values(self):
        c = Counter("http_requests", "Requests.", ["route", "code"], segment=self.seg)
        c.labels("/a", 200).inc()
        c.labels(route="/a", code="200").inc(2)
        c.labels("/b", "500").inc(True + 0)
        g = Gauge("temperature", "Temp.", unit="celsius", namespace="room", segment=self.seg)
        g.set(21.5)
        g.inc()
        g.dec(0.25)
        h = Histogram("latency", "Lat.", ["route"], unit="seconds", buckets=(0.1, 1, float("inf")),
                      segment=self.seg)
        h.labels("/a").observe(0.05)
        h.labels("/a").observe(5)
        s = read_segment(self.path)
        typ, help_, unit, words = s[("http_requests_total", (("route", "/a"), ("code", "200")))]
        self.assertEqual((typ, help_, unit, words), (4, "Requests.", "", (3, 0)))  # counter_f
        self.assertEqual(s[("http_requests_total", (("route", "/b"), ("code", "500")))][3], (1, 0))
        typ, _, unit, words = s[("room_temperature_celsius", ())]
        self.assertEqual((typ, unit, f64(words[0])), (2, "celsius", 22.25))
        typ, _, _, w = s[("latency_seconds", (("route", "/a"),))]
        self.assertEqual(typ, 3)
        self.assertEqual((w[0], f64(w[1]), w[2:5]), (2, 5.05, (1, 0, 1)))
        self.assertEqual(w[5], sum(w[i] * hist_weight(i) for i in range(5)) % (1 << 64))
        self.assertIs(c.labels("/a", "200"), c.labels("/a", "200"))

    def test_counter_suffix_like_prometheus_client(self):
        Counter("jobs_total", "x", segment=self.seg).inc()
        Counter("jobs2", "x", segment=self.seg).inc()
        names = {k[0] for k in read_segment(self.path)}
        self.assertEqual(names, {"jobs_total", "jobs2_total"})

    def test_argument_errors_raise_value_error(self):
        with self.assertRaises(ValueError):
            Counter("bad name", "x", segment=self.seg)
        with self.assertRaises(ValueError):
            Counter("ok", "x", ["bad-label"], segment=self.seg)
        with self.assertRaises(ValueError):
            Histogram("h", "x", ["le"], segment=self.seg)
        with self.assertRaises(ValueError):
            Histogram("h", "x", buckets=[2, 1], segment=self.seg)
        Gauge("shared", "x", segment=self.seg)
        with self.assertRaises(ValueError):  # conflict: same name, another type
            Counter("shared", "x", segment=self.seg).inc()
            Histogram("shared", "x", segment=self.seg)
        c = Counter("c", "x", ["a"], segment=self.seg)
        with self.assertRaises(ValueError):
            c.labels("1", "2")
        with self.assertRaises(ValueError):
            c.labels(b="1")
        with self.assertRaises(ValueError):
            c.labels("1").inc(-1)
        with self.assertRaises(ValueError):
            c.labels("1").inc(float("nan"))
        c.labels("1").inc(float("inf"))  # stored, as prometheus_client stores it (spec 9.5)
        self.assertEqual(c.labels("1").get(), float("inf"))
        with self.assertRaises(KeyError):
            c.remove("never-created")

    def test_fractional_counter_increments_are_exact(self):
        """Counters are type 4: whole amounts in word 0, fractions in the f64 word 1."""
        c = Counter("cpu_seconds", "x", segment=self.seg)
        c.inc(2.0)
        for _ in range(10):
            c.inc(0.25)
        w = read_segment(self.path)[("cpu_seconds_total", ())]
        self.assertEqual((w[0], w[3][0], f64(w[3][1])), (4, 2, 2.5))
        self.assertEqual(c._solo.get(), 4.5)
        ts = [threading.Thread(target=lambda: [c.inc(0.25) for _ in range(1000)]) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        w = read_segment(self.path)[("cpu_seconds_total", ())][3]
        self.assertEqual((w[0], f64(w[1])), (2, 1002.5))
        self.assertEqual(c._solo.get(), 1004.5)

    def test_threads(self):
        c = Counter("t", "x", ["k"], segment=self.seg)
        g = Gauge("tg", "x", segment=self.seg)
        h = Histogram("th", "x", buckets=(1, 2), segment=self.seg)
        n, threads = 20000, 8

        def work(i):
            child = c.labels(str(i % 2))
            for j in range(n):
                child.inc()
                g.inc(0.5)
                h.observe(j % 3)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(c.labels("0").get() + c.labels("1").get(), n * threads)
        self.assertEqual(g._solo.get(), n * threads * 0.5)
        w = read_segment(self.path)[("th", ())][3]
        self.assertEqual(w[0], n * threads)
        self.assertEqual(sum(w[2:5]), n * threads)
        self.assertEqual(w[5], sum(w[i] * hist_weight(i) for i in range(5)) % (1 << 64))

    def test_sharded_threads(self):
        """set_shards: threads update copies of their own; the values read are the sums."""
        self.assertRaises(_microview.Error, self.seg.set_shards, 3)
        self.seg.set_shards(4)
        c = Counter("sc", "x", segment=self.seg)
        g = Gauge("sg", "x", segment=self.seg)
        self.seg.set_shards(1)
        n, threads = 20000, 4

        def work():
            for _ in range(n):
                c.inc()
                g.inc(0.5)

        ts = [threading.Thread(target=work) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(c._solo.get(), n * threads)
        self.assertEqual(g._solo.get(), n * threads * 0.5)
        w = read_segment(self.path)[("sc_total", ())][3]
        shards = [w[8 * k] for k in range(4)]  # one 64-byte line each
        self.assertEqual(len(w), 32)
        self.assertEqual(sum(shards), n * threads)
        self.assertGreater(sum(1 for x in shards if x), 1)

    def test_time_and_helpers(self):
        h = Histogram("tm", "x", buckets=(0.5, 10), segment=self.seg)
        with h.time():
            time.sleep(0.01)

        @h.time()
        def f():
            return 7
        self.assertEqual(f(), 7)
        w = read_segment(self.path)[("tm", ())][3]
        self.assertEqual(w[0], 2)
        self.assertGreaterEqual(f64(w[1]), 0.01)
        g = Gauge("inprog", "x", segment=self.seg)
        with g.track_inprogress():
            self.assertEqual(g._solo.get(), 1)
        self.assertEqual(g._solo.get(), 0)
        g.set_to_current_time()
        self.assertAlmostEqual(g._solo.get(), time.time(), delta=5)
        c = Counter("exc", "x", segment=self.seg)
        with self.assertRaises(KeyError):
            with c.count_exceptions(KeyError):
                raise KeyError("k")
        self.assertEqual(read_segment(self.path)[("exc_total", ())][3], (1, 0))

    def test_full_segment_keeps_running(self):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            c = Counter("many", "x", ["i"], segment=self.seg)
            for i in range(3000):  # the 64 KiB segment fills up long before
                c.labels(str(i)).inc()
        self.assertTrue(any("kept in process memory" in str(x.message) for x in w))
        self.assertEqual(c.labels("2999").get(), 1)

    def test_no_segment_falls_back_with_a_warning(self):
        saved = microview._default
        old = os.environ.pop("MICROVIEW_SEGMENT", None)
        microview._default = None
        microview._warned.discard("open")
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                c = Counter("fallback", "x")
                c.inc()
            self.assertTrue(any("MICROVIEW_SEGMENT" in str(x.message) for x in w))
            self.assertEqual(c._solo.get(), 1)
        finally:
            microview._default = saved
            if old is not None:
                os.environ["MICROVIEW_SEGMENT"] = old

    def test_env_segment(self):
        saved = microview._default
        microview._default = None
        os.environ["MICROVIEW_SEGMENT"] = self.path
        try:
            Gauge("from_env", "x").set(4)
            self.assertEqual(f64(read_segment(self.path)[("from_env", ())][3][0]), 4)
        finally:
            microview._default = saved
            del os.environ["MICROVIEW_SEGMENT"]

    def test_open_errors(self):
        with self.assertRaises(microview.Error) as e:
            _microview.Segment(os.path.join(self.dir.name, "missing"))
        self.assertEqual(e.exception.args[1], "nosegment")
        bad = os.path.join(self.dir.name, "bad")
        with open(bad, "wb") as f:
            f.write(b"NOTASEGMENT" + bytes(4085))
        with self.assertRaises(microview.Error) as e:
            _microview.Segment(bad)
        self.assertEqual(e.exception.args[1], "format")


if __name__ == "__main__":
    unittest.main()
