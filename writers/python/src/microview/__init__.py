"""microview: prometheus_client's instrumentation API, written into a MicroView segment.

A service moves from prometheus_client by changing its imports:

    from microview import Counter, Gauge, Histogram, Summary, Enum, Info, REGISTRY

Values go into the shared-memory segment named by $MICROVIEW_SEGMENT through libmicroview
(a C extension): one atomic operation per update, safe from any number of threads, and
nothing to serve or render in the process: the MicroView collector reads the segment.
Every item of prometheus_client's API, and how this package supports it, is listed in
docs/writers.md (the Python section); the main differences:

- Metrics on REGISTRY (the default) go to the pod's segment. A CollectorRegistry() you
  create keeps its metrics in a private in-process segment (as prometheus_client keeps a
  registry's values to itself until you serve it); CollectorRegistry(segment=...) writes
  into that segment instead.
- Counters are stored as fractional counters (segment type 4): inc(0.25) is exact.
- Summary is stored as a histogram with log-spaced buckets; the collector derives its
  quantiles (NAME_window{quantile=...}, docs/analytics.md). get_sample_value answers
  _count and _sum as prometheus_client does.
- Exemplars are validated like prometheus_client validates them, then dropped.
- Gauge.set_function is evaluated every FUNCTION_INTERVAL seconds (and on every collect()),
  and its value stored in the segment.
- Exposition (generate_latest, start_http_server, push_to_gateway, make_wsgi_app) is
  delegated to prometheus_client when it is installed: the MicroView collector serves
  /metrics, so a pod needs none of them.
"""

import functools
import inspect
import math
import os
import re
import tempfile
import threading
import time
import warnings
from collections import namedtuple
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple,
                    Type, TypeVar, Union)

from . import _microview
from ._microview import Error, Segment

__all__ = [
    "CollectorRegistry", "REGISTRY", "Counter", "Gauge", "Histogram", "Summary", "Enum", "Info",
    "Metric", "Sample", "Exemplar", "Error", "Segment", "open_segment", "segment_usage",
    "exponential_buckets", "linear_buckets", "INF", "DEFAULT_BUCKETS", "SUMMARY_BUCKETS",
    "generate_latest", "start_http_server", "start_wsgi_server", "make_wsgi_app",
    "push_to_gateway", "pushadd_to_gateway", "delete_from_gateway", "CONTENT_TYPE_LATEST",
    "write_to_textfile", "make_asgi_app", "instance_ip_grouping_key", "MetricsHandler",
    "PROCESS_COLLECTOR", "PLATFORM_COLLECTOR", "GC_COLLECTOR", "ProcessCollector",
    "PlatformCollector", "GCCollector", "Timestamp",
]

INF = float("inf")
MINUS_INF = float("-inf")
DEFAULT_BUCKETS = (.005, .01, .025, .05, .075, .1, .25, .5, .75, 1.0, 2.5, 5.0, 7.5, 10.0, INF)
# A Summary's buckets: 80 bounds from 100 us growing by 1.25 (to ~4,500): the collector's
# window quantiles are then within (1.25 - 1) / (1.25 + 1) = 11 % of the true value.
SUMMARY_BUCKETS = tuple(1e-4 * 1.25 ** i for i in range(80))
FUNCTION_INTERVAL = 1.0  # seconds between two evaluations of Gauge.set_function callbacks
CONTENT_TYPE_LATEST = "text/plain; version=0.0.4; charset=utf-8"

METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
METRIC_LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RESERVED_METRIC_LABEL_NAME_RE = re.compile(r"^__.*$")
METRIC_TYPES = ("counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info",
                "stateset")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T", bound="MetricWrapperBase")

_lock = threading.Lock()
_default: Optional[Segment] = None   # the pod's segment (open_segment or $MICROVIEW_SEGMENT)
_fallback: Optional[Segment] = None  # process-private segment used when the real one is unusable
_warned = set()


# ---- Samples and metric families (prometheus_client.samples / metrics_core) ---------------

class Timestamp:
    """A nanosecond-resolution timestamp (prometheus_client.samples.Timestamp)."""

    def __init__(self, sec: float, nsec: float) -> None:
        if nsec < 0 or nsec >= 1e9:
            raise ValueError("Invalid value for nanoseconds in Timestamp: %s" % nsec)
        if sec < 0:
            nsec = -nsec
        self.sec = int(sec)
        self.nsec = int(nsec)

    def __str__(self) -> str:
        return "%d.%09d" % (self.sec, self.nsec)

    def __repr__(self) -> str:
        return "Timestamp(%d, %d)" % (self.sec, self.nsec)

    def __float__(self) -> float:
        return float(self.sec) + float(self.nsec) / 1e9

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Timestamp) and (self.sec, self.nsec) == (other.sec, other.nsec)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __gt__(self, other: "Timestamp") -> bool:
        return (self.sec, self.nsec) > (other.sec, other.nsec)

    def __lt__(self, other: "Timestamp") -> bool:
        return (self.sec, self.nsec) < (other.sec, other.nsec)


Exemplar = namedtuple("Exemplar", ["labels", "value", "timestamp"])
Exemplar.__new__.__defaults__ = (None,)
Sample = namedtuple("Sample", ["name", "labels", "value", "timestamp", "exemplar"])
Sample.__new__.__defaults__ = (None, None)


class Metric:
    """One metric family and its samples, as prometheus_client.metrics_core.Metric (what
    CollectorRegistry.collect() yields; prometheus_client's exposition functions accept it)."""

    def __init__(self, name: str, documentation: str, typ: str, unit: str = "") -> None:
        if unit and not name.endswith("_" + unit):
            name += "_" + unit
        if not METRIC_NAME_RE.match(name):
            raise ValueError("Invalid metric name: " + name)
        self.name = name
        self.documentation = documentation
        self.unit = unit
        if typ == "untyped":
            typ = "unknown"
        if typ not in METRIC_TYPES:
            raise ValueError("Invalid metric type: " + typ)
        self.type = typ
        self.samples: List[Sample] = []

    def add_sample(self, name: str, labels: Dict[str, str], value: float,
                   timestamp: Optional[Union[Timestamp, float]] = None,
                   exemplar: Optional[Exemplar] = None) -> None:
        self.samples.append(Sample(name, labels, value, timestamp, exemplar))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Metric) and self.name == other.name
                and self.documentation == other.documentation and self.type == other.type
                and self.unit == other.unit and self.samples == other.samples)

    def __repr__(self) -> str:
        return "Metric(%s, %s, %s, %s, %s)" % (self.name, self.documentation, self.type,
                                                self.unit, self.samples)

    def _restricted_metric(self, names):
        samples = [s for s in self.samples if s[0] in names]
        if samples:
            m = Metric(self.name, self.documentation, self.type)
            m.samples = samples
            return m
        return None


def floatToGoString(d: Union[float, str]) -> str:  # noqa: N802 (prometheus_client's name)
    """Formats a float as Go does (the `le` and `quantile` label values)."""
    d = float(d)
    if d == INF:
        return "+Inf"
    if d == MINUS_INF:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = ("%s.%s%s" % (s[0], s[1:dot], s[dot + 1:])).rstrip("0.")
        return "%se+0%d" % (mantissa, dot - 1)
    return s


# ---- Segments -------------------------------------------------------------------------

def _warn_once(key, msg):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


def open_segment(path: Optional[str] = None) -> Segment:
    """Opens the segment at `path` ($MICROVIEW_SEGMENT if None) and makes it the default for
    metrics created afterwards (REGISTRY's). Raises microview.Error if it cannot be opened."""
    global _default
    seg = Segment(path)
    with _lock:
        _default = seg
    return seg


def _new_private_segment(size=1 << 20):
    """A segment in an unlinked temp file: metrics work, no collector reads them."""
    fd, path = tempfile.mkstemp(prefix="microview-private-")
    try:
        os.ftruncate(fd, size)
        return Segment(path)
    finally:
        os.close(fd)
        os.unlink(path)


def _private_segment():
    global _fallback
    with _lock:
        if _fallback is None:
            _fallback = _new_private_segment()
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


def segment_usage(segment: Optional[Segment] = None) -> Dict[str, Any]:
    """How full the segment is (the pod's unless `segment` is given): a dict with
    segment_size, values_used, values_size, catalog_used, catalog_size, records and fullness
    (the larger used/size ratio, 0..1). A registration that does not fit warns with the
    segment size to ask for (the pod annotation), and its series stay in process memory."""
    return (segment if segment is not None else _default_segment()).usage()


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


def _delete_series(segment, name, labels):
    try:
        if not segment.delete(name, labels) and _fallback is not None:
            _fallback.delete(name, labels)  # its registration had fallen back
    except Error as e:
        _warn_once(("del", e.args[1]), "microview: deleting %s: %s" % (name, e.args[2]))


# ---- Registries ---------------------------------------------------------------------------

class _EmptyCollector:
    def collect(self):
        return []


_TYPE_SUFFIXES = {
    "counter": ["_total", "_created"],
    "summary": ["_sum", "_count", "_created"],
    "histogram": ["_bucket", "_sum", "_count", "_created"],
    "gaugehistogram": ["_bucket", "_gsum", "_gcount"],
    "info": ["_info"],
}


class CollectorRegistry:
    """prometheus_client's CollectorRegistry: register()/unregister() with the same
    ValueError on duplicated series names, collect(), get_sample_value(),
    restricted_registry(), target_info.

    Where its metrics' values live: REGISTRY's in the pod's segment; another registry's in a
    private in-process segment (values readable with get_sample_value and collect, not by the
    MicroView collector), unless `segment=` names one (microview.open_segment(path)).
    Collectors that are not microview metrics (custom collectors) are collected in process
    only: the MicroView collector reads the segment."""

    def __init__(self, auto_describe: bool = False, target_info: Optional[Dict[str, str]] = None,
                 segment: Optional[Segment] = None) -> None:
        self._collector_to_names: Dict[Any, List[str]] = {}
        self._names_to_collectors: Dict[str, Any] = {}
        self._auto_describe = auto_describe
        self._lock = threading.Lock()
        self._target_info: Optional[Dict[str, str]] = {}
        self._segment = segment
        self._pod = False  # REGISTRY: the pod's segment, resolved when first needed
        self.set_target_info(target_info)

    def _seg(self) -> Segment:
        if self._segment is None:
            if self._pod:
                return _default_segment()
            with self._lock:
                if self._segment is None:
                    self._segment = _new_private_segment()
        return self._segment

    def register(self, collector: Any) -> None:
        """Adds a collector; raises ValueError if one of its series names is taken."""
        with self._lock:
            names = self._get_names(collector)
            duplicates = set(self._names_to_collectors).intersection(names)
            if duplicates:
                raise ValueError("Duplicated timeseries in CollectorRegistry: {}".format(
                    duplicates))
            for name in names:
                self._names_to_collectors[name] = collector
            self._collector_to_names[collector] = names

    def unregister(self, collector: Any) -> None:
        """Removes a collector (KeyError if it is not registered). A microview metric's
        series stay in the segment (see docs/writers.md)."""
        with self._lock:
            for name in self._collector_to_names[collector]:
                del self._names_to_collectors[name]
            del self._collector_to_names[collector]
        gone = getattr(collector, "_unregistered", None)
        if gone is not None:
            gone()

    def _get_names(self, collector):
        desc_func = getattr(collector, "describe", None)
        if not desc_func and self._auto_describe:
            desc_func = collector.collect
        if not desc_func:
            return []
        result = []
        for metric in desc_func():
            result.append(metric.name)
            for suffix in _TYPE_SUFFIXES.get(metric.type, []):
                result.append(metric.name + suffix)
        return result

    def collect(self) -> Iterable[Metric]:
        """Yields the metric families of every registered collector; a microview metric's
        values are read from the segment."""
        with self._lock:
            collectors = list(self._collector_to_names)
            ti = self._target_info_metric() if self._target_info else None
        _refresh_functions()
        if ti:
            yield ti
        for collector in collectors:
            yield from collector.collect()

    def restricted_registry(self, names: Iterable[str]) -> "RestrictedRegistry":
        return RestrictedRegistry(names, self)

    def set_target_info(self, labels: Optional[Dict[str, str]]) -> None:
        with self._lock:
            if labels:
                if not self._target_info and "target_info" in self._names_to_collectors:
                    raise ValueError("CollectorRegistry already contains a target_info metric")
                self._names_to_collectors["target_info"] = _EmptyCollector()
            elif self._target_info:
                self._names_to_collectors.pop("target_info", None)
            self._target_info = labels

    def get_target_info(self) -> Optional[Dict[str, str]]:
        with self._lock:
            return self._target_info

    def _target_info_metric(self):
        m = Metric("target", "Target metadata", "info")
        m.add_sample("target_info", self._target_info, 1)
        return m

    def get_sample_value(self, name: str,
                         labels: Optional[Dict[str, str]] = None) -> Optional[float]:
        """The value of one sample (None if there is none), read from the segment. Meant for
        unit tests, as in prometheus_client."""
        if labels is None:
            labels = {}
        for metric in self.collect():
            for s in metric.samples:
                if s.name == name and s.labels == labels:
                    return s.value
        return None


class RestrictedRegistry:
    def __init__(self, names: Iterable[str], registry: CollectorRegistry) -> None:
        self._name_set = set(names)
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        collectors = set()
        target_info_metric = None
        with self._registry._lock:
            if "target_info" in self._name_set and self._registry._target_info:
                target_info_metric = self._registry._target_info_metric()
            for name in self._name_set:
                if name != "target_info" and name in self._registry._names_to_collectors:
                    collectors.add(self._registry._names_to_collectors[name])
        if target_info_metric:
            yield target_info_metric
        for collector in collectors:
            for metric in collector.collect():
                m = metric._restricted_metric(self._name_set)
                if m:
                    yield m


REGISTRY = CollectorRegistry(auto_describe=True)
REGISTRY._pod = True
_segment_registries: Dict[int, Tuple[Segment, CollectorRegistry]] = {}


def _registry_of(segment):
    """The registry of metrics created with segment=S and no registry: one per segment."""
    with _lock:
        entry = _segment_registries.get(id(segment))
        if entry is None or entry[0] is not segment:
            entry = (segment, CollectorRegistry(auto_describe=True, segment=segment))
            _segment_registries[id(segment)] = entry
        return entry[1]


# ---- Decorators and context managers (prometheus_client.context_managers) -----------------

def _decorate(f, make_ctx):
    """Wraps f so that every call runs inside make_ctx(); the wrapper keeps f's signature
    (inspect.getfullargspec sees f's arguments, as with prometheus_client's decorator)."""
    sig = inspect.signature(f)
    ps = list(sig.parameters.values())
    last_posonly = max([i for i, p in enumerate(ps) if p.kind is p.POSITIONAL_ONLY], default=-1)
    params, call, seen_star = [], [], False
    for i, p in enumerate(ps):
        if p.kind is p.VAR_POSITIONAL:
            params.append("*" + p.name)
            call.append("*" + p.name)
            seen_star = True
        elif p.kind is p.VAR_KEYWORD:
            params.append("**" + p.name)
            call.append("**" + p.name)
        elif p.kind is p.KEYWORD_ONLY:
            if not seen_star:
                params.append("*")
                seen_star = True
            params.append(p.name)
            call.append("%s=%s" % (p.name, p.name))
        else:
            params.append(p.name)
            call.append(p.name)
        if i == last_posonly:
            params.append("/")
    names = {"_f_", "_ctx_"}
    if names & set(sig.parameters):
        @functools.wraps(f)
        def plain(*args, **kwargs):
            with make_ctx():
                return f(*args, **kwargs)
        return plain
    src = "def %s(%s):\n    with _ctx_():\n        return _f_(%s)\n" % (
        f.__name__ if f.__name__.isidentifier() else "wrapped", ", ".join(params),
        ", ".join(call))
    env = {"_f_": f, "_ctx_": make_ctx}
    exec(compile(src, "<microview-decorator>", "exec"), env)  # noqa: S102 (signature copy)
    w = env[f.__name__ if f.__name__.isidentifier() else "wrapped"]
    w.__defaults__ = f.__defaults__
    w.__kwdefaults__ = f.__kwdefaults__
    functools.update_wrapper(w, f)
    del w.__wrapped__  # getfullargspec must read the copied signature, not follow the chain
    w.__wrapped__ = f
    return w


class Timer:
    """Times a block or function and passes the seconds to the metric's observe/set."""

    def __init__(self, metric: Any, callback_name: str) -> None:
        self._metric = metric
        self._callback_name = callback_name

    def _new_timer(self):
        return self.__class__(self._metric, self._callback_name)

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, typ, value, traceback):
        duration = max(time.perf_counter() - self._start, 0)  # time can go backwards
        getattr(self._metric, self._callback_name)(duration)

    def labels(self, *args, **kw):
        self._metric = self._metric.labels(*args, **kw)

    def __call__(self, f: F) -> F:
        return _decorate(f, self._new_timer)


class ExceptionCounter:
    def __init__(self, counter: Any, exception: Any) -> None:
        self._counter = counter
        self._exception = exception

    def __enter__(self) -> None:
        pass

    def __exit__(self, typ, value, traceback):
        if isinstance(value, self._exception):
            self._counter.inc()
        return False

    def __call__(self, f: F) -> F:
        return _decorate(f, lambda: self)


class InprogressTracker:
    def __init__(self, gauge: Any) -> None:
        self._gauge = gauge

    def __enter__(self):
        self._gauge.inc()

    def __exit__(self, typ, value, traceback):
        self._gauge.dec()

    def __call__(self, f: F) -> F:
        return _decorate(f, lambda: self)


# ---- Gauge.set_function: callbacks evaluated into the segment ------------------------------

_functions: Dict[int, Tuple[Any, Callable[[], float]]] = {}
_functions_lock = threading.Lock()
_functions_thread: Optional[threading.Thread] = None


def _refresh_functions():
    with _functions_lock:
        items = list(_functions.values())
    for handle, f in items:
        try:
            v = float(f())
        except Exception as e:  # noqa: BLE001 (a failing callback must not stop the others)
            _warn_once(("fn", id(f)), "microview: Gauge.set_function callback failed: %r" % e)
            continue
        _microview.GaugeHandle.set(handle, v)


def _functions_loop():
    while True:
        time.sleep(FUNCTION_INTERVAL)
        _refresh_functions()


def _add_function(handle, f):
    global _functions_thread
    with _functions_lock:
        _functions[id(handle)] = (handle, f)
        if _functions_thread is None:
            _functions_thread = threading.Thread(target=_functions_loop, daemon=True,
                                                 name="microview-set-function")
            _functions_thread.start()
    _refresh_functions()


def _noop(*args, **kwargs):
    return None


# ---- Children: one series each (C handles with prometheus_client's helper methods) ---------

def _validate_exemplar(exemplar):
    runes = 0
    for k, v in exemplar.items():
        _validate_labelname(k)
        runes += len(k)
        runes += len(v)
    if runes > 128:
        raise ValueError("Exemplar labels have %d UTF-8 characters, exceeding the limit of 128"
                         % runes)


_microview.set_exemplar_check(_validate_exemplar)


class _ChildMixin:
    __slots__ = ()

    def labels(self, *labelvalues, **labelkwargs):
        raise ValueError("%s already has labels set; can not chain calls to .labels()" % self)

    def remove(self, *labelvalues):
        raise ValueError("No label names were set when constructing %s" % self)


class CounterChild(_microview.FCounterHandle):
    """One counter series (segment type 4): inc(amount=1) is a single C call."""
    __slots__ = ()
    labels = _ChildMixin.labels

    def count_exceptions(self, exception=Exception):
        return ExceptionCounter(self, exception)


class GaugeChild(_microview.GaugeHandle):
    """One gauge series: set/inc/dec are single C calls. (Has a __dict__: set_function
    replaces its update methods.)"""
    labels = _ChildMixin.labels

    def set_to_current_time(self):
        self.set(time.time())

    def track_inprogress(self):
        return InprogressTracker(self)

    def time(self):
        return Timer(self, "set")

    def set_function(self, f):
        self.set = self.inc = self.dec = _noop
        _add_function(self, f)


class HistogramChild(_microview.HistogramHandle):
    """One histogram (or summary) series: observe(v) is a single C call."""
    __slots__ = ()
    labels = _ChildMixin.labels

    def time(self):
        return Timer(self, "observe")


class EnumChild:
    """One Enum series set: a gauge per state, 1 for the current state and 0 for the others."""
    __slots__ = ("_states", "_gauges", "_value", "_lock")
    labels = _ChildMixin.labels

    def __init__(self, states, gauges):
        self._states = states
        self._gauges = gauges
        self._value = 0
        self._lock = threading.Lock()
        gauges[0].set(1)

    def state(self, state: str) -> None:
        i = self._states.index(state)
        with self._lock:
            if i != self._value:
                self._gauges[self._value].set(0)
                self._gauges[i].set(1)
                self._value = i


class InfoChild:
    """One Info series: a gauge NAME_info{labels..., info keys...} = 1. A new info() stores 1
    into the new series and deletes the previous one from the segment."""
    __slots__ = ("_metric", "_labelvalues", "_handle", "_value", "_lock")
    labels = _ChildMixin.labels

    def __init__(self, metric, labelvalues):
        self._metric = metric
        self._labelvalues = labelvalues
        self._value: Dict[str, str] = {}
        self._lock = threading.Lock()
        self._handle = metric._make_info(labelvalues, {})
        self._handle.set(1)

    def info(self, val: Dict[str, str]) -> None:
        names = self._metric._labelnames
        if any(v is None for v in val.values()):
            raise ValueError('Label value cannot be None')
        if set(names).intersection(val.keys()):
            raise ValueError("Overlapping labels for Info metric, metric: {} child: {}".format(
                names, val))
        val = dict(val)
        with self._lock:
            if val == self._value:
                return
            handle = self._metric._make_info(self._labelvalues, val)
            handle.set(1)
            _delete_series(self._metric._segment,
                           *self._metric._info_series(self._labelvalues, self._value))
            self._handle, self._value = handle, val


# ---- Metrics ------------------------------------------------------------------------------

def _validate_labelname(name):
    if not METRIC_LABEL_NAME_RE.match(name):
        raise ValueError("Invalid label metric name: " + name)
    if RESERVED_METRIC_LABEL_NAME_RE.match(name):
        raise ValueError("Reserved label metric name: " + name)


def _build_full_name(metric_type, name, namespace, subsystem, unit):
    full_name = ""
    if namespace:
        full_name += namespace + "_"
    if subsystem:
        full_name += subsystem + "_"
    full_name += name
    if metric_type == "counter" and full_name.endswith("_total"):
        full_name = full_name[:-6]  # as prometheus_client: OpenMetrics names
    if unit and not full_name.endswith("_" + unit):
        full_name += "_" + unit
    if unit and metric_type in ("info", "stateset"):
        raise ValueError("Metric name is of a type that cannot have a unit: " + full_name)
    return full_name


class _Default:
    def __repr__(self):
        return "REGISTRY"


_DEFAULT_REGISTRY: Any = _Default()


class MetricWrapperBase:
    """What Counter, Gauge, Histogram, Summary, Info and Enum share: naming, label
    validation, labels(), registration and collect(). The series are registered in the
    segment when they are first used (at construction without labels, at labels(...) with)."""
    _type = ""
    _kind = ""
    _reserved_labelnames: Sequence[str] = ()
    _child_cls: Any = None

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (),
                 namespace: str = "", subsystem: str = "", unit: str = "",
                 registry: Optional[CollectorRegistry] = _DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None,
                 segment: Optional[Segment] = None) -> None:
        if _labelvalues:
            raise ValueError("_labelvalues is not supported: use labels()")
        self._name = _build_full_name(self._type, name, namespace, subsystem, unit)
        if isinstance(labelnames, str):
            labelnames = (labelnames,)
        self._labelnames = tuple(labelnames)
        for ln in self._labelnames:
            _validate_labelname(ln)
            if ln in self._reserved_labelnames:
                raise ValueError("Reserved label metric name: " + ln)
        self._documentation = documentation
        self._unit = unit
        if not METRIC_NAME_RE.match(self._name):
            raise ValueError("Invalid metric name: " + self._name)
        if len(set(self._labelnames)) != len(self._labelnames):
            raise ValueError("Duplicate label names in %s" % self._name)
        self._check()
        if registry is _DEFAULT_REGISTRY:
            registry = REGISTRY if segment is None else _registry_of(segment)
        if segment is None:
            segment = registry._seg() if registry is not None else _new_private_segment(256 << 10)
        self._segment = segment
        self._lock = threading.Lock()
        self._metrics: Dict[Tuple[str, ...], Any] = {}
        if registry is not None:
            registry.register(self)  # names first: a duplicate raises before any series exists
        self._solo = None  # the one series of a metric without labels
        try:
            if isinstance(self, _HANDLES):
                # Counter, Gauge, Histogram and Summary are C handles themselves: without
                # labels the metric is attached to its series (an update is one C method
                # call); with labels it stays detached (updates raise prometheus_client's
                # ValueError) and its C labels() finds existing children in self._metrics.
                if not self._labelnames:
                    self._attach(self._new_child(()))
                    self._solo = self
                else:
                    self._family(self._metrics, self._labelnames)
            elif not self._labelnames:
                self._solo = self._new_child(())
        except BaseException:
            if registry is not None:  # the segment refused it (a type conflict): not registered
                with registry._lock:
                    for name in registry._collector_to_names.pop(self, ()):
                        registry._names_to_collectors.pop(name, None)
            raise

    def _check(self):
        pass

    def _new_child(self, labelvalues):
        return self._make(labelvalues)

    def _make(self, labelvalues, extra=(), name=None, kind=None):
        return _register(self._segment, kind or self._kind, name or self._name,
                         self._documentation, self._unit or None,
                         tuple(zip(self._labelnames, labelvalues)) + tuple(extra),
                         self._bounds(), self._child_cls)

    def _bounds(self):
        return None

    def _raise_not_observable(self, *args, **kwargs):
        raise ValueError("%s metric is missing label values" % str(self._type))

    def _labels_slow(self, *labelvalues: Any, **labelkwargs: Any) -> Any:
        """labels(): the child series for these label values (created on first use). The C
        handles' labels() returns existing children itself and calls this for the rest."""
        if not labelkwargs:
            try:
                child = self._metrics.get(labelvalues)  # the values as strings: found at once
            except TypeError:  # unhashable values: str() of them below
                child = None
            if child is not None:
                return child
        if not self._labelnames:
            raise ValueError("No label names were set when constructing %s" % self)
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
        with self._lock:
            child = self._metrics.get(labelvalues)
            if child is None:
                child = self._new_child(labelvalues)
                self._metrics[labelvalues] = child
        return child

    def remove(self, *labelvalues: Any) -> None:
        """Removes one child: its series is deleted from the segment (a tombstone, spec
        section 6.6), so the collector stops showing it; labels(...) with the same values
        later creates it anew from zero (a counter reset)."""
        if not self._labelnames:
            raise ValueError("No label names were set when constructing %s" % self)
        if len(labelvalues) != len(self._labelnames):
            raise ValueError("Incorrect label count (expected %d, got %s)"
                             % (len(self._labelnames), labelvalues))
        labelvalues = tuple(str(v) for v in labelvalues)
        with self._lock:
            child = self._metrics.pop(labelvalues)  # KeyError, as in prometheus_client
        self._delete(labelvalues, child)

    def clear(self) -> None:
        """Removes every child (see remove)."""
        with self._lock:
            children = dict(self._metrics)
            self._metrics.clear()  # the same dict: the C labels() looks children up in it
        for labelvalues, child in children.items():
            self._delete(labelvalues, child)

    def _series(self, labelvalues, child):
        """The (name, labels) of the segment series behind one child."""
        return [(self._name, tuple(zip(self._labelnames, labelvalues)))]

    def _delete(self, labelvalues, child):
        for name, labels in self._series(labelvalues, child):
            _delete_series(self._segment, name, labels)

    def _unregistered(self):
        """The registry dropped this metric: its series leave the segment, as they leave
        prometheus_client's exposition."""
        if self._solo is not None:
            self._delete((), self._solo)
        else:
            self.clear()

    def describe(self) -> Iterable[Metric]:
        return [Metric(self._name, self._documentation, self._type, self._unit)]

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self._name, self._documentation, self._type, self._unit)
        with self._lock:
            children = [((), self._solo)] if self._solo is not None else list(
                self._metrics.items())
        for labelvalues, child in children:
            base = dict(zip(self._labelnames, labelvalues))
            for suffix, labels, value in self._child_samples(child):
                lb = dict(base)
                lb.update(labels)
                metric.add_sample(self._name + suffix, lb, value)
        return [metric]

    labels = _labels_slow

    def _child_samples(self, child):
        raise NotImplementedError

    def __str__(self) -> str:
        return "%s:%s" % (self._type, self._name)

    def __repr__(self) -> str:
        t = type(self)
        return "%s.%s(%s)" % (t.__module__, t.__name__, self._name)


_HANDLES = (_microview.FCounterHandle, _microview.GaugeHandle, _microview.HistogramHandle)


class Counter(_microview.FCounterHandle, MetricWrapperBase):
    """prometheus_client.Counter. The series is NAME_total, stored as a fractional counter
    (segment type 4): inc(amount=1) takes a non-negative finite amount, exactly."""
    _type = "counter"
    _kind = "counter_f"
    _child_cls = CounterChild
    labels = _microview.FCounterHandle.labels

    def count_exceptions(self, exception: Union[Type[BaseException], Tuple[Type[BaseException],
                                                                           ...]] = Exception
                         ) -> ExceptionCounter:
        if self._labelnames:
            self._raise_not_observable()
        return ExceptionCounter(self, exception)

    def _make(self, labelvalues, extra=(), name=None, kind=None):
        return super()._make(labelvalues, extra, self._name + "_total", kind)

    def _series(self, labelvalues, child):
        return [(self._name + "_total", tuple(zip(self._labelnames, labelvalues)))]

    def _child_samples(self, child):
        return (("_total", {}, child.get()),)


class Gauge(_microview.GaugeHandle, MetricWrapperBase):
    """prometheus_client.Gauge: set, inc, dec, set_to_current_time, track_inprogress, time,
    set_function. NaN is stored as NaN."""
    _type = "gauge"
    _kind = "gauge"
    _child_cls = GaugeChild
    labels = _microview.GaugeHandle.labels
    _MULTIPROC_MODES = frozenset(("all", "liveall", "min", "livemin", "max", "livemax", "sum",
                                  "livesum"))

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (),
                 namespace: str = "", subsystem: str = "", unit: str = "",
                 registry: Optional[CollectorRegistry] = _DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None, multiprocess_mode: str = "all",
                 segment: Optional[Segment] = None) -> None:
        if multiprocess_mode not in self._MULTIPROC_MODES:
            raise ValueError("Invalid multiprocess mode: " + multiprocess_mode)
        self._multiprocess_mode = multiprocess_mode
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry,
                         _labelvalues, segment)

    def _observable(self):
        if self._labelnames:
            self._raise_not_observable()
        return self._solo

    def set_to_current_time(self) -> None:
        self._observable().set(time.time())

    def track_inprogress(self) -> InprogressTracker:
        return InprogressTracker(self._observable())

    def time(self) -> Timer:
        return Timer(self, "set")

    def set_function(self, f: Callable[[], float]) -> None:
        """The gauge's value is f(), evaluated into the segment every FUNCTION_INTERVAL
        seconds and on every collect(); set/inc/dec become no-ops, as in prometheus_client."""
        self._observable()
        self.set = self.inc = self.dec = _noop
        _add_function(self, f)

    def _child_samples(self, child):
        return (("", {}, child.get()),)


class Histogram(_microview.HistogramHandle, MetricWrapperBase):
    """prometheus_client.Histogram: observe(amount), time(). `buckets` as in
    prometheus_client (sorted upper bounds, +Inf appended); at most 160 finite bounds.
    observe(NaN) counts: count + 1, the sum becomes NaN, the +Inf bucket + 1."""
    _type = "histogram"
    _kind = "histogram"
    _reserved_labelnames = ["le"]
    _child_cls = HistogramChild
    labels = _microview.HistogramHandle.labels
    DEFAULT_BUCKETS = DEFAULT_BUCKETS

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (),
                 namespace: str = "", subsystem: str = "", unit: str = "",
                 registry: Optional[CollectorRegistry] = _DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None,
                 buckets: Sequence[Union[float, str]] = DEFAULT_BUCKETS,
                 segment: Optional[Segment] = None) -> None:
        self._prepare_buckets(buckets)
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry,
                         _labelvalues, segment)

    def _prepare_buckets(self, source_buckets):
        buckets = [float(b) for b in source_buckets]
        if buckets != sorted(buckets):
            raise ValueError("Buckets not in sorted order")
        if buckets and buckets[-1] != INF:
            buckets.append(INF)
        if len(buckets) < 2:
            raise ValueError("Must have at least two buckets")
        self._upper_bounds = buckets

    def _bounds(self):
        return tuple(self._upper_bounds[:-1])

    def time(self) -> Timer:
        return Timer(self, "observe")

    def _child_samples(self, child):
        count, total, buckets, _ = child.read()
        out, acc = [], 0.0
        for bound, n in zip(self._upper_bounds, buckets):
            acc += n
            out.append(("_bucket", {"le": floatToGoString(bound)}, acc))
        out.append(("_count", {}, acc))
        if self._upper_bounds[0] >= 0:
            out.append(("_sum", {}, total))
        return out


class Summary(_microview.HistogramHandle, MetricWrapperBase):
    """prometheus_client.Summary: observe(amount), time(); get_sample_value answers _count
    and _sum. In the segment it is a histogram with SUMMARY_BUCKETS (or buckets=...), from
    which the MicroView collector derives quantiles (NAME_window{quantile=...})."""
    _type = "summary"
    _kind = "histogram"
    _reserved_labelnames = ["quantile", "le"]
    _child_cls = HistogramChild
    labels = _microview.HistogramHandle.labels

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = (),
                 namespace: str = "", subsystem: str = "", unit: str = "",
                 registry: Optional[CollectorRegistry] = _DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None,
                 segment: Optional[Segment] = None,
                 buckets: Sequence[float] = SUMMARY_BUCKETS) -> None:
        self._summary_bounds = tuple(float(b) for b in buckets if float(b) != INF)
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry,
                         _labelvalues, segment)

    def _bounds(self):
        return self._summary_bounds

    def time(self) -> Timer:
        return Timer(self, "observe")

    def _child_samples(self, child):
        count, total, _, _ = child.read()
        return (("_count", {}, float(count)), ("_sum", {}, total))


class Info(MetricWrapperBase):
    """prometheus_client.Info: info({key: value}) -> NAME_info{key=value} 1, a gauge in the
    segment. Before info() is called NAME_info{} is 1, as in prometheus_client; info() with
    other values deletes the previous series."""
    _type = "info"
    _kind = "gauge"
    _child_cls = GaugeChild
    info = MetricWrapperBase._raise_not_observable
    labels = MetricWrapperBase._labels_slow

    def _new_child(self, labelvalues):
        return InfoChild(self, labelvalues)

    def _make_info(self, labelvalues, val):
        return self._make(labelvalues, tuple((str(k), str(v)) for k, v in val.items()),
                          self._name + "_info")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self._labelnames:
            self.info = self._solo.info

    def _child_samples(self, child):
        with child._lock:
            return (("_info", dict(child._value), child._handle.get()),)

    def _info_series(self, labelvalues, val):
        return (self._name + "_info", tuple(zip(self._labelnames, labelvalues)) + tuple(
            (str(k), str(v)) for k, v in val.items()))

    def _series(self, labelvalues, child):
        with child._lock:
            return [self._info_series(labelvalues, child._value)]


class Enum(MetricWrapperBase):
    """prometheus_client.Enum: state(s) -> NAME{NAME=s} 1, the other states 0 (one gauge
    per state in the segment)."""
    _type = "stateset"
    _kind = "gauge"
    _child_cls = GaugeChild
    state = MetricWrapperBase._raise_not_observable
    labels = MetricWrapperBase._labels_slow

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 namespace: str = "", subsystem: str = "", unit: str = "",
                 registry: Optional[CollectorRegistry] = _DEFAULT_REGISTRY,
                 _labelvalues: Optional[Sequence[str]] = None,
                 states: Optional[Sequence[str]] = None,
                 segment: Optional[Segment] = None) -> None:
        if name in labelnames:
            raise ValueError("Overlapping labels for Enum metric: %s" % name)
        if not states:
            raise ValueError("No states provided for Enum metric: %s" % name)
        self._states = list(states)
        super().__init__(name, documentation, labelnames, namespace, subsystem, unit, registry,
                         _labelvalues, segment)
        if not self._labelnames:
            self.state = self._solo.state

    def _new_child(self, labelvalues):
        gauges = [self._make(labelvalues, ((self._name, s),)) for s in self._states]
        return EnumChild(self._states, gauges)

    def _child_samples(self, child):
        return [("", {self._name: s}, g.get()) for s, g in zip(self._states, child._gauges)]

    def _series(self, labelvalues, child):
        base = tuple(zip(self._labelnames, labelvalues))
        return [(self._name, base + ((self._name, s),)) for s in self._states]


# ---- Buckets -------------------------------------------------------------------------------

def exponential_buckets(start: float, factor: float, count: int) -> Tuple[float, ...]:
    """count bounds start, start*factor, ... (plus the implied +Inf)."""
    if not (start > 0 and factor > 1 and 1 <= count <= 160):
        raise ValueError("need start > 0, factor > 1 and 1..160 buckets")
    return tuple(start * factor ** i for i in range(count)) + (INF,)


def linear_buckets(start: float, width: float, count: int) -> Tuple[float, ...]:
    """count bounds start, start+width, ... (plus the implied +Inf)."""
    if not (width > 0 and 1 <= count <= 160):
        raise ValueError("need width > 0 and 1..160 buckets")
    return tuple(start + width * i for i in range(count)) + (INF,)


# ---- Exposition: delegated to prometheus_client --------------------------------------------

def _prometheus_client_exposition():
    try:
        from prometheus_client import exposition
    except ImportError as e:
        raise ImportError(
            "microview: the MicroView collector serves /metrics, so a pod needs no exposition; "
            "for generate_latest/start_http_server/push_to_gateway install prometheus_client, "
            "to which microview delegates them") from e
    return exposition


def generate_latest(registry: Any = REGISTRY) -> bytes:
    """prometheus_client.generate_latest on a microview registry (needs prometheus_client)."""
    return _prometheus_client_exposition().generate_latest(registry)


def start_http_server(port: int, addr: str = "0.0.0.0", registry: Any = REGISTRY,
                      **kwargs: Any) -> Any:
    """Delegated to prometheus_client (needs it). A pod does not need it: the MicroView
    collector serves the segment's metrics."""
    return _prometheus_client_exposition().start_http_server(port, addr, registry, **kwargs)


start_wsgi_server = start_http_server


def make_wsgi_app(registry: Any = REGISTRY, **kwargs: Any) -> Any:
    return _prometheus_client_exposition().make_wsgi_app(registry, **kwargs)


def push_to_gateway(gateway: str, job: str, registry: Any, **kwargs: Any) -> None:
    """prometheus_client.push_to_gateway with a microview registry (needs prometheus_client)."""
    _prometheus_client_exposition().push_to_gateway(gateway, job, registry, **kwargs)


def pushadd_to_gateway(gateway: str, job: str, registry: Any, **kwargs: Any) -> None:
    _prometheus_client_exposition().pushadd_to_gateway(gateway, job, registry, **kwargs)


def delete_from_gateway(gateway: str, job: str, **kwargs: Any) -> None:
    _prometheus_client_exposition().delete_from_gateway(gateway, job, **kwargs)


def write_to_textfile(path: str, registry: Any) -> None:
    """prometheus_client.write_to_textfile on a microview registry (needs prometheus_client)."""
    _prometheus_client_exposition().write_to_textfile(path, registry)


def make_asgi_app(registry: Any = REGISTRY, **kwargs: Any) -> Any:
    try:
        from prometheus_client import asgi
    except ImportError:
        _prometheus_client_exposition()
        raise
    return asgi.make_asgi_app(registry, **kwargs)


def instance_ip_grouping_key() -> Dict[str, Any]:
    return _prometheus_client_exposition().instance_ip_grouping_key()


def __getattr__(name: str) -> Any:
    if name == "MetricsHandler":  # an http.server handler class: prometheus_client's
        return _prometheus_client_exposition().MetricsHandler
    raise AttributeError("module 'microview' has no attribute %r" % name)


# ---- The default collectors: placeholders ------------------------------------------------

class _DefaultCollector:
    """prometheus_client registers process, platform and GC collectors on REGISTRY. Their
    series are not written to the segment (the MicroView collector and the node's own
    exporters measure processes from outside); these stand-ins keep code that unregisters
    them (REGISTRY.unregister(PROCESS_COLLECTOR)) working."""

    def __init__(self, name: str, registry: Optional[CollectorRegistry] = None, **_: Any) -> None:
        self._name = name
        if registry is not None:
            registry.register(self)

    def describe(self):
        return []

    def collect(self):
        return []

    def __repr__(self):
        return "microview.%s (no series: see docs/writers.md)" % self._name


def ProcessCollector(namespace: str = "", pid: Any = None, proc: str = "/proc",  # noqa: N802
                     registry: Optional[CollectorRegistry] = REGISTRY) -> Any:
    return _DefaultCollector("ProcessCollector", registry)


def PlatformCollector(registry: Optional[CollectorRegistry] = REGISTRY,  # noqa: N802
                      platform: Any = None) -> Any:
    return _DefaultCollector("PlatformCollector", registry)


def GCCollector(registry: Optional[CollectorRegistry] = REGISTRY) -> Any:  # noqa: N802
    return _DefaultCollector("GCCollector", registry)


PROCESS_COLLECTOR = ProcessCollector()
PLATFORM_COLLECTOR = PlatformCollector()
GC_COLLECTOR = GCCollector()
