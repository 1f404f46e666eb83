#!/usr/bin/python3
"""Runs prometheus_client's tests/test_core.py against the microview package.

Usage: prom_client_tests.py TEST_CORE_PY WORKDIR

Only the imports change: the metric types, registries and Metric/Sample come from microview;
the custom-collector data classes (*MetricFamily), which microview does not provide, and
`metrics._get_use_created` (TestDisableCreated flips prometheus_client's own switch) stay
prometheus_client's; `getargspec`, a test helper in prometheus_client.decorator, which
Debian's package does not ship (it uses python3-decorator), becomes inspect's. Every test
that cannot apply is listed in NOT_APPLICABLE with its reason and deselected; the rest must
pass. Prints the pass/fail counts and each exclusion.
"""

import os
import re
import subprocess
import sys

ORIGINAL_IMPORTS = """from prometheus_client import metrics
from prometheus_client.core import (
    CollectorRegistry, Counter, CounterMetricFamily, Enum, Gauge,
    GaugeHistogramMetricFamily, GaugeMetricFamily, Histogram,
    HistogramMetricFamily, Info, InfoMetricFamily, Metric, Sample,
    StateSetMetricFamily, Summary, SummaryMetricFamily, UntypedMetricFamily,
)
from prometheus_client.decorator import getargspec
from prometheus_client.metrics import _get_use_created
"""

MICROVIEW_IMPORTS = """from prometheus_client import metrics
from microview import (
    CollectorRegistry, Counter, Enum, Gauge, Histogram, Info, Metric, Sample, Summary,
)
from prometheus_client.core import (
    CounterMetricFamily, GaugeHistogramMetricFamily, GaugeMetricFamily,
    HistogramMetricFamily, InfoMetricFamily, StateSetMetricFamily, SummaryMetricFamily,
    UntypedMetricFamily,
)
%s
from prometheus_client.metrics import _get_use_created
"""

GETARGSPEC = ("from inspect import getfullargspec as _gfa\n"
              "def getargspec(f): return tuple(_gfa(f)[:4])")

REPR = ("repr() names the class's module: microview.Counter(c), not "
        "prometheus_client.metrics.Counter(c)")
NOT_APPLICABLE = {
    "TestCounter::test_repr": REPR,
    "TestGauge::test_repr": REPR,
    "TestSummary::test_repr": REPR,
    "TestHistogram::test_repr": REPR,
    "TestInfo::test_repr": REPR,
}
# Tests of prometheus_client releases newer than the 0.16 API the package follows (the tests
# of Debian's next suite are run when the installed version's source is gone from the
# mirror): deselected when present, with their reason.
NEWER_THAN_016 = {
    "TestCounter::test_reset": "Counter.reset() (prometheus_client 0.17) and the _created "
                               "series it moves are not offered: a segment's counter is reset "
                               "only by deleting its series (remove/clear)",
}


def main():
    src, work = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    if ORIGINAL_IMPORTS not in text:
        print("prom_client_tests: the import block of %s is not the one this adapter knows; "
              "update ORIGINAL_IMPORTS" % src, file=sys.stderr)
        return 1
    try:
        import prometheus_client.decorator  # noqa: F401 (upstream's own helper, if shipped)
        helper = "from prometheus_client.decorator import getargspec"
    except ImportError:
        helper = GETARGSPEC
    os.makedirs(work, exist_ok=True)
    test = os.path.join(work, "test_core.py")
    with open(test, "w") as f:
        f.write(text.replace(ORIGINAL_IMPORTS, MICROVIEW_IMPORTS % helper))
    # Every exclusion must name a test that exists, or the list has rotted.
    names = set(re.findall(r"^class (\w+)\(", text, re.M))
    for t in NOT_APPLICABLE:
        cls, fn = t.split("::")
        if cls not in names or not re.search(r"def %s\(" % fn, text):
            print("prom_client_tests: excluded test %s is not in %s" % (t, src), file=sys.stderr)
            return 1
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE",
            "-o", "junit_family=xunit2", "--junitxml", os.path.join(work, "junit.xml"), test]
    for t, why in NEWER_THAN_016.items():
        cls, fn = t.split("::")
        if cls in names and re.search(r"def %s\(" % fn, text):
            NOT_APPLICABLE[t] = why
    for t in NOT_APPLICABLE:
        args += ["--deselect", "test_core.py::" + t]
    r = subprocess.run(args, cwd=work)
    with open(os.path.join(work, "junit.xml")) as f:
        junit = f.read()
    m = re.search(r'<testsuite [^>]*errors="(\d+)" failures="(\d+)" skipped="(\d+)" '
                  r'tests="(\d+)"', junit)
    if not m:
        print("prom_client_tests: no totals in pytest's junit report", file=sys.stderr)
        return 1
    errors, failures, skipped, tests = (int(x) for x in m.groups())
    failed = errors + failures
    passed = tests - failed - skipped
    print()
    print("Not applicable (deselected, %d):" % len(NOT_APPLICABLE))
    for t, why in NOT_APPLICABLE.items():
        print("  %s: %s" % (t, why))
    print("prometheus_client: %d passed, %d failed, %d skipped" % (
        passed, failed, len(NOT_APPLICABLE) + skipped))
    return 0 if r.returncode == 0 and failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
