"""microview: metrics for Python services written into a MicroView segment.

The API follows prometheus_client (Counter, Gauge, Histogram, .labels(), .inc(), .set(),
.observe(), .time()), so moving a service over changes its imports, not its code. Values go
into the shared-memory segment named by $MICROVIEW_SEGMENT through libmicroview (a C
extension): one atomic operation per update, safe from any number of threads, and nothing
to serve or render in the process: the MicroView collector reads the segment.

Differences from prometheus_client are listed in docs/writers.md; the main ones: segment
counters are integers (fractional increments are carried until they make whole units),
series cannot be removed, there is no Summary/Info/Enum, and registry= is ignored.
"""

import functools
import os
import re
import tempfile
import threading
import time
import warnings

from . import _microview
from ._microview import Error, Segment

__all__ = ["Counter", "Gauge", "Histogram", "Error", "Segment", "open_segment",
           "exponential_buckets", "linear_buckets", "INF", "DEFAULT_BUCKETS"]

INF = float("inf")
DEFAULT_BUCKETS = (.005, .01, .025, .05, .075, .1, .25, .5, .75, 1.0, 2.5, 5.0, 7.5, 10.0, INF)

_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_lock = threading.Lock()
_default = None      # the segment metrics go to unless given segment=
_fallback = None     # process-private segment used when the real one is unusable
_warned = set()


def _warn_once(key, msg):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


def open_segment(path=None):
    """Opens the segment at `path` ($MICROVIEW_SEGMENT if None) and makes it the default for
    metrics created afterwards. Raises microview.Error if it cannot be opened."""
    global _default
    seg = Segment(path)
    with _lock:
        _default = seg
    return seg


def _private_segment():
    """A 1 MiB segment in an unlinked temp file: metrics still work, nobody reads them."""
    global _fallback
    with _lock:
        if _fallback is None:
            fd, path = tempfile.mkstemp(prefix="microview-private-")
            try:
                os.ftruncate(fd, 1 << 20)
                _fallback = Segment(path)
            finally:
                os.close(fd)
                os.unlink(path)
        return _fallback


def _default_segment():
    global _default
    with _lock:
        if _default is not None:
            return _default
        try:
            _default = Segment(None)
            return _default
        except Error as e:
            err = e
    _warn_once("open", "microview: %s; metrics are kept in process memory only" % err.args[2])
    return _private_segment()


def _register(segment, kind, name, help_, unit, labels, bounds, cls):
    try:
        return segment.register(kind, name, help_, unit, labels, bounds, cls)
    except Error as e:
        if e.args[1] in ("name", "invalid", "conflict"):
            raise ValueError("microview: " + e.args[2]) from e
        if segment is _fallback:
            raise
        # full, busy, I/O: keep the service running, as libmicroview's handles do.
        _warn_once(("reg", e.args[1]), "microview: %s; %s and later failures like it are "
                   "kept in process memory only" % (e.args[2], name))
        return _private_segment().register(kind, name, help_, unit, labels, bounds, cls)


class _Timer:
    """Context manager and decorator that observes the elapsed seconds."""
    __slots__ = ("_observe", "_start")

    def __init__(self, observe):
        self._observe = observe
        self._start = None

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self._observe(max(time.perf_counter() - self._start, 0))

    def __call__(self, f):
        observe = self._observe

        @functools.wraps(f)
        def wrapped(*args, **kwargs):
            with _Timer(observe):
                return f(*args, **kwargs)
        return wrapped


class _InProgress:
    __slots__ = ("_gauge",)

    def __init__(self, gauge):
        self._gauge = gauge

    def __enter__(self):
        self._gauge.inc()

    def __exit__(self, *exc):
        self._gauge.dec()

    def __call__(self, f):
        gauge = self._gauge

        @functools.wraps(f)
        def wrapped(*args, **kwargs):
            with _InProgress(gauge):
                return f(*args, **kwargs)
        return wrapped


class _ExceptionCounter:
    __slots__ = ("_counter", "_exception")

    def __init__(self, counter, exception):
        self._counter = counter
        self._exception = exception

    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        if isinstance(value, self._exception):
            self._counter.inc()
        return False

    def __call__(self, f):
        counter, exception = self._counter, self._exception

        @functools.wraps(f)
        def wrapped(*args, **kwargs):
            with _ExceptionCounter(counter, exception):
                return f(*args, **kwargs)
        return wrapped


class CounterChild(_microview.CounterHandle):
    """One counter series: inc(amount=1) is a single C call (an atomic add)."""
    __slots__ = ()

    def count_exceptions(self, exception=Exception):
        return _ExceptionCounter(self, exception)


class GaugeChild(_microview.GaugeHandle):
    """One gauge series: set/inc/dec are single C calls."""
    __slots__ = ()

    def set_to_current_time(self):
        self.set(time.time())

    def track_inprogress(self):
        return _InProgress(self)

    def time(self):
        return _Timer(self.set)


class HistogramChild(_microview.HistogramHandle):
    """One histogram series: observe(v) is a single C call."""
    __slots__ = ()

    def time(self):
        return _Timer(self.observe)


def _full_name(kind, name, namespace, subsystem, unit):
    full = "_".join(p for p in (namespace, subsystem, name) if p)
    if kind == "counter" and full.endswith("_total"):
        full = full[:-6]
    if unit and not full.endswith("_" + unit):
        full += "_" + unit
    return full + "_total" if kind == "counter" else full


class _Metric:
    _kind = ""
    _child_cls = None
    _child_methods = ()

    def __init__(self, name, documentation, labelnames=(), namespace="", subsystem="",
                 unit="", registry=None, segment=None, _bounds=None):
        self._name = _full_name(self._kind, name, namespace, subsystem, unit)
        self._documentation = documentation
        self._unit = unit
        if isinstance(labelnames, str):
            labelnames = (labelnames,)
        self._labelnames = tuple(labelnames)
        for ln in self._labelnames:
            if not _LABEL_RE.match(ln) or ln.startswith("__"):
                raise ValueError("Invalid label metric name: " + ln)
            if self._kind == "histogram" and ln == "le":
                raise ValueError("Invalid label name for a histogram: le")
        if len(set(self._labelnames)) != len(self._labelnames):
            raise ValueError("Duplicate label names in %s" % self._name)
        self._segment = segment if segment is not None else _default_segment()
        self._bounds = _bounds
        self._children = {}
        self._children_lock = threading.Lock()
        if not self._labelnames:
            child = self._make(())
            self._children[()] = child
            for m in self._child_methods:  # bind the C methods: one call per update
                setattr(self, m, getattr(child, m))

    def _make(self, values):
        return _register(self._segment, self._kind, self._name, self._documentation,
                         self._unit or None, tuple(zip(self._labelnames, values)),
                         self._bounds, self._child_cls)

    def labels(self, *labelvalues, **labelkwargs):
        """Returns the child series for these label values (created on first use)."""
        if not self._labelnames:
            raise ValueError("No label names were set when constructing %s" % self._name)
        if labelvalues and labelkwargs:
            raise ValueError("Can't pass both *args and **kwargs")
        if labelkwargs:
            if sorted(labelkwargs) != sorted(self._labelnames):
                raise ValueError("Incorrect label names")
            labelvalues = tuple(str(labelkwargs[ln]) for ln in self._labelnames)
        else:
            if len(labelvalues) != len(self._labelnames):
                raise ValueError("Incorrect label count")
            labelvalues = tuple(str(v) for v in labelvalues)
        child = self._children.get(labelvalues)
        if child is None:
            with self._children_lock:
                child = self._children.get(labelvalues)
                if child is None:
                    child = self._make(labelvalues)
                    self._children[labelvalues] = child
        return child

    def remove(self, *labelvalues):
        raise NotImplementedError("MicroView series are append-only: a registered series "
                                  "stays in the segment until the pod's segment is released")

    def clear(self):
        self.remove()

    def _child(self):
        if self._labelnames:
            raise ValueError("%s has labels: call .labels(...) first" % self._name)
        return self._children[()]

    def __repr__(self):
        return "%s.%s(%s)" % (self.__class__.__module__, self.__class__.__name__, self._name)


class Counter(_Metric):
    """A counter: Counter(name, documentation, labelnames=(), namespace, subsystem, unit).
    As in prometheus_client the series is named NAME_total. inc(amount=1) takes a
    non-negative amount; fractions are carried until they make whole units."""
    _kind = "counter"
    _child_cls = CounterChild
    _child_methods = ("inc",)

    def count_exceptions(self, exception=Exception):
        return _ExceptionCounter(self._child(), exception)


class Gauge(_Metric):
    """A gauge: set(v), inc(amount=1), dec(amount=1), set_to_current_time(),
    track_inprogress(), time()."""
    _kind = "gauge"
    _child_cls = GaugeChild
    _child_methods = ("set", "inc", "dec")

    def __init__(self, name, documentation, labelnames=(), namespace="", subsystem="",
                 unit="", registry=None, segment=None, multiprocess_mode="all"):
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit,
                         registry, segment)

    def set_to_current_time(self):
        self._child().set(time.time())

    def track_inprogress(self):
        return _InProgress(self._child())

    def time(self):
        return _Timer(self._child().set)


class Histogram(_Metric):
    """A histogram: observe(v), time(). buckets are upper bounds; a trailing +Inf is
    implied (and accepted); at most 160 finite bounds."""
    _kind = "histogram"
    _child_cls = HistogramChild
    _child_methods = ("observe",)

    def __init__(self, name, documentation, labelnames=(), namespace="", subsystem="",
                 unit="", registry=None, segment=None, buckets=DEFAULT_BUCKETS):
        bounds = [float(b) for b in buckets]
        if bounds and bounds[-1] == INF:
            bounds.pop()
        if not bounds:
            raise ValueError("Must have at least one finite bucket bound")
        if any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise ValueError("Buckets not in sorted order")
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit,
                         registry, segment, _bounds=tuple(bounds))

    def time(self):
        return _Timer(self._child().observe)


def exponential_buckets(start, factor, count):
    """count bounds start, start*factor, ... (plus the implied +Inf)."""
    if not (start > 0 and factor > 1 and 1 <= count <= 160):
        raise ValueError("need start > 0, factor > 1 and 1..160 buckets")
    return tuple(start * factor ** i for i in range(count)) + (INF,)


def linear_buckets(start, width, count):
    """count bounds start, start+width, ... (plus the implied +Inf)."""
    if not (width > 0 and 1 <= count <= 160):
        raise ValueError("need width > 0 and 1..160 buckets")
    return tuple(start + width * i for i in range(count)) + (INF,)
