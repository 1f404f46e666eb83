#!/usr/bin/python3
"""A second segment writer, written from docs/segment-format.md alone (stdlib only).

Usage: pywriter.py <segment-file>

Formats the file if it is still all zeros, registers a counter, a gauge and a
histogram with labels, writes their values and prints on stdout, as JSON, what
a reader must decode (same shape as `microviewctl dump --json`, metrics only).

Limitation: Python has no compare-and-swap on shared memory, so the
registration lock is taken with check-then-store and 8-byte stores go through
mmap slice assignment. That is only safe while no other process registers or
reads concurrently, which holds in tests/compat/test_compat.sh.
"""
import fcntl
import json
import math
import mmap
import os
import struct
import sys
import time

MAGIC = b"MVIEWSEG"
VERSION = 1
HEADER_SIZE = 128
MIN_SIZE, MAX_SIZE = 1024, 1 << 30
COUNTER, GAUGE, HISTOGRAM = 1, 2, 3
TYPE_NAMES = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}
MASK64 = (1 << 64) - 1

# Header field offsets (spec section "Header").
OFF = dict(magic=0, version=8, header_size=10, flags=12, segment_size=16,
           values_offset=24, values_size=28, catalog_offset=32, catalog_size=36,
           instance=40, generation=48, metric_count=56, values_used=60,
           catalog_used=64, lock=68, heartbeat_ns=72, created_ns=80, writer_pid=88)
FMT = dict(version="<H", header_size="<H", flags="<I", segment_size="<Q",
           values_offset="<I", values_size="<I", catalog_offset="<I",
           catalog_size="<I", instance="<Q", generation="<Q", metric_count="<I",
           values_used="<I", catalog_used="<I", lock="<I", heartbeat_ns="<Q",
           created_ns="<Q", writer_pid="<I")


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & MASK64
    return h


def hist_weight(i):
    """Weight of histogram word i: SplitMix64 finaliser of (i+1)*golden, forced odd."""
    z = ((i + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return (z ^ (z >> 31)) | 1


def f64_bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


class Segment:
    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR)
        self.size = os.fstat(self.fd).st_size
        if not (MIN_SIZE <= self.size <= MAX_SIZE) or self.size % 8:
            sys.exit(f"pywriter: {path}: size {self.size} is not a multiple of 8 in [1 KiB, 1 GiB]")
        self.m = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.path = path

    def get(self, field):
        return struct.unpack_from(FMT[field], self.m, OFF[field])[0]

    def put(self, field, value):
        struct.pack_into(FMT[field], self.m, OFF[field], value)

    def format_if_zero(self):
        if self.m[0:8] != bytes(8):
            return
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            if self.m[0:8] != bytes(8):
                return
            if self.m[0:HEADER_SIZE] != bytes(HEADER_SIZE):
                sys.exit(f"pywriter: {self.path}: magic is zero but the header is not")
            rest = self.size - HEADER_SIZE
            values_size = max(512, (rest // 4) & ~63)
            self.put("version", VERSION)
            self.put("header_size", HEADER_SIZE)
            self.put("flags", 0)
            self.put("segment_size", self.size)
            self.put("values_offset", HEADER_SIZE)
            self.put("values_size", values_size)
            self.put("catalog_offset", HEADER_SIZE + values_size)
            self.put("catalog_size", self.size - HEADER_SIZE - values_size)
            self.put("instance", int.from_bytes(os.urandom(8), "little") or 1)
            self.put("generation", 0)
            self.put("created_ns", time.time_ns())
            self.m[0:8] = MAGIC  # last: a reader never trusts a header without it
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def check_header(self):
        if self.m[0:8] != MAGIC or self.get("version") != VERSION:
            sys.exit(f"pywriter: {self.path}: not a v1 segment")
        if self.get("header_size") != HEADER_SIZE or self.get("segment_size") != self.size:
            sys.exit(f"pywriter: {self.path}: header does not match the file")

    # ---- records ---------------------------------------------------------

    @staticmethod
    def encode_str(s):
        b = s.encode("utf-8")
        return struct.pack("<H", len(b)) + b + b"\0"

    def encode_record(self, mtype, name, help_, unit, labels, bounds, value_offset):
        value_size = 8 * (len(bounds) + 4) if mtype == HISTOGRAM else 8
        body = b"".join(self.encode_str(s) for s in (name, help_, unit))
        for k, v in labels:
            body += self.encode_str(k) + self.encode_str(v)
        size = 24 + len(body)
        pad = (-size) % 8
        size += pad + 8 * len(bounds) + 8
        head = struct.pack("<IBBHIIHHI", size, mtype, 0, len(labels), value_offset,
                           value_size, len(bounds), 0, 0)
        rec = head + body + bytes(pad) + b"".join(struct.pack("<d", b) for b in bounds)
        assert len(rec) == size - 8
        return rec + struct.pack("<Q", fnv1a64(rec)), value_size

    def records(self):
        """Yields (name, type, labels, bounds, value_offset) of published records."""
        pos = self.get("catalog_offset")
        for _ in range(self.get("metric_count")):
            size, mtype, _f, nlabels, voff, _vs, nb = struct.unpack_from("<IBBHIIH", self.m, pos)
            p = pos + 24
            strs = []
            for _ in range(3 + 2 * nlabels):
                (n,) = struct.unpack_from("<H", self.m, p)
                strs.append(self.m[p + 2:p + 2 + n].decode("utf-8"))
                p += 3 + n
            p = pos + ((p - pos + 7) & ~7)
            bounds = list(struct.unpack_from(f"<{nb}d", self.m, p)) if nb else []
            labels = list(zip(strs[3::2], strs[4::2]))
            yield strs[0], mtype, labels, bounds, voff
            pos += size

    def lock(self):
        pid = os.getpid()
        for _ in range(4000):
            if self.get("lock") == 0:
                self.put("lock", pid)
                return
            time.sleep(0.0005)
        sys.exit(f"pywriter: {self.path}: registration lock held by pid {self.get('lock')}")

    def unlock(self):
        self.put("lock", 0)

    def register(self, mtype, name, help_="", unit="", labels=(), bounds=()):
        """Returns the byte offset (from the segment start) of the metric's value slot."""
        labels, bounds = list(labels), list(bounds)
        self.lock()
        try:
            gen = self.get("generation")
            if gen & 1:  # an appender died half-way; its record was never published
                gen += 1
                self.put("generation", gen)
            for rname, rtype, rlabels, rbounds, voff in self.records():
                if rname != name:
                    continue
                if rtype != mtype:
                    sys.exit(f"pywriter: {name} already registered with type {rtype}")
                if rlabels == labels:
                    if rbounds != bounds:
                        sys.exit(f"pywriter: {name} already registered with other buckets")
                    return self.get("values_offset") + voff
            voff = self.get("values_used")
            coff = self.get("catalog_used")
            rec, vsize = self.encode_record(mtype, name, help_, unit, labels, bounds, voff)
            if voff + vsize > self.get("values_size") or coff + len(rec) > self.get("catalog_size"):
                sys.exit(f"pywriter: {self.path}: segment full")
            self.put("generation", gen + 1)  # odd: append in progress
            slot = self.get("values_offset") + voff
            self.m[slot:slot + vsize] = bytes(vsize)
            cpos = self.get("catalog_offset") + coff
            self.m[cpos:cpos + len(rec)] = rec
            self.put("values_used", voff + vsize)
            self.put("catalog_used", coff + len(rec))
            self.put("metric_count", self.get("metric_count") + 1)
            self.put("generation", gen + 2)  # even: published
            return slot
        finally:
            self.unlock()

    def store_u64(self, off, v):
        struct.pack_into("<Q", self.m, off, v & MASK64)

    def load_u64(self, off):
        return struct.unpack_from("<Q", self.m, off)[0]

    def observe(self, slot, bounds, v):
        """One histogram observation, keeping checksum == sum(word[i] * weight(i))."""
        if math.isnan(v):
            return
        n = len(bounds)
        b = next((i for i, ub in enumerate(bounds) if v <= ub), n)
        words = [self.load_u64(slot + 8 * i) for i in range(n + 4)]
        new = list(words)
        new[2 + b] += 1
        new[0] += 1
        new[1] = f64_bits(struct.unpack("<d", struct.pack("<Q", words[1]))[0] + v)
        delta = sum(((new[i] - words[i]) * hist_weight(i)) for i in range(n + 3))
        new[n + 3] = (words[n + 3] + delta) & MASK64
        for i in (2 + b, 0, 1, n + 3):
            self.store_u64(slot + 8 * i, new[i])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: pywriter.py <segment-file>")
    seg = Segment(sys.argv[1])
    seg.format_if_zero()
    seg.check_header()

    c_labels = [("method", "GET"), ("path", "/caf\u00e9")]
    counter = seg.register(COUNTER, "compat_requests_total", "Requests seen by the Python writer.",
                           "", c_labels)
    gauge = seg.register(GAUGE, "compat_temperature", "Temp\u00e9rature \u00b0C \u2603", "celsius")
    h_labels = [("route", "/api")]
    bounds = [0.005, 0.05, 0.5, 5.0]
    hist = seg.register(HISTOGRAM, "compat_latency_seconds", "Request latency.", "seconds",
                        h_labels, bounds)
    # Registering again must find the same slot.
    assert seg.register(COUNTER, "compat_requests_total", "", "", c_labels) == counter

    seg.store_u64(counter, 41)
    seg.store_u64(counter, seg.load_u64(counter) + 1)
    seg.store_u64(gauge, f64_bits(-21.75))
    obs = [0.001, 0.01, 0.3, 0.3, 7.5]
    for v in obs:
        seg.observe(hist, bounds, v)
    seg.put("writer_pid", os.getpid())
    seg.put("heartbeat_ns", time.time_ns())
    seg.m.flush()

    buckets = [0] * (len(bounds) + 1)
    for v in obs:
        buckets[next((i for i, ub in enumerate(bounds) if v <= ub), len(bounds))] += 1
    total = 0.0
    for v in obs:
        total += v
    expected = {"metrics": [
        {"name": "compat_requests_total", "type": "counter",
         "help": "Requests seen by the Python writer.", "unit": "", "labels": dict(c_labels),
         "value": 42},
        {"name": "compat_temperature", "type": "gauge", "help": "Temp\u00e9rature \u00b0C \u2603",
         "unit": "celsius", "labels": {}, "value": -21.75},
        {"name": "compat_latency_seconds", "type": "histogram", "help": "Request latency.",
         "unit": "seconds", "labels": dict(h_labels), "count": len(obs), "sum": total,
         "bounds": bounds, "buckets": buckets},
    ]}
    json.dump(expected, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
