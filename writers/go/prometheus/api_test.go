// client_golang's API surface over the segment: registries and their errors, Wrap*,
// CurryWith and the promhttp middleware, Delete, Summary, NaN, fractional counters.

package prometheus_test

import (
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cg "github.com/prometheus/client_golang/prometheus"

	microview "microview.io/writers/go"
	"microview.io/writers/go/prometheus"
	"microview.io/writers/go/prometheus/promhttp"
	"microview.io/writers/go/prometheus/testutil"
)

func segment(t *testing.T) *microview.Segment {
	t.Helper()
	s, err := microview.OpenFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func segCounter(t *testing.T, name, help string, ls ...microview.Label) float64 {
	t.Helper()
	c, err := segment(t).NewCounterF(microview.Opts{Name: name, Help: help, Labels: ls})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c.Value()
}

// gone reports whether the segment has no live series of that name and labels (a
// Delete that finds nothing appends nothing).
func gone(t *testing.T, name string, ls ...microview.Label) bool {
	t.Helper()
	found, err := segment(t).Delete(microview.Opts{Name: name, Labels: ls})
	if err != nil {
		t.Fatal(err)
	}
	return !found
}

func TestRegistryRulesAreClientGolangs(t *testing.T) {
	reg := prometheus.NewRegistry()
	var _ *prometheus.Registry = reg
	var _ prometheus.Gatherer = reg
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "rules_total", Help: "h"})
	b := prometheus.NewCounter(prometheus.CounterOpts{Name: "rules_total", Help: "h"})
	reg.MustRegister(a)
	err := reg.Register(b)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) || are.ExistingCollector != a || are.NewCollector != b {
		t.Fatalf("second registration: %v, want AlreadyRegisteredError naming both", err)
	}
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "rules_total", Help: "other help"})
	if err := reg.Register(other); err == nil || !strings.Contains(err.Error(), "different help") {
		t.Fatalf("other help: %v", err)
	}
	lbl := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rules_total", Help: "h"}, []string{"x"})
	if err := reg.Register(lbl); err == nil || !strings.Contains(err.Error(), "label names") {
		t.Fatalf("other labels: %v", err)
	}
	if !reg.Unregister(a) || reg.Unregister(a) {
		t.Fatal("Unregister: true once, then false")
	}
	if gone(t, "rules_total") == false {
		t.Fatal("Unregister left the series in the segment")
	}
	if err := prometheus.NewPedanticRegistry().Register(a); err != nil {
		t.Fatal(err)
	}
	if (prometheus.Gatherers{reg, prometheus.DefaultGatherer}) == nil {
		t.Fatal("Gatherers")
	}
}

// Each test that builds its metrics in a fresh Registry sees only its own counts, as with
// client_golang: the second metric takes the series over and resets it.
func TestFreshRegistryPerTest(t *testing.T) {
	for round := 1; round <= 2; round++ {
		reg := prometheus.NewRegistry()
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "fresh_total", Help: "h"})
		c.Add(3) // before registration: process memory, carried into the segment
		reg.MustRegister(c)
		c.Inc()
		if v := testutil.ToFloat64(c); v != 4 {
			t.Fatalf("round %d: %g, want 4", round, v)
		}
		if v := segCounter(t, "fresh_total", "h"); v != 4 {
			t.Fatalf("round %d: segment %g, want 4", round, v)
		}
	}
}

func TestWrapRenamesInTheSegmentToo(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := prometheus.WrapRegistererWithPrefix("app_", prometheus.WrapRegistererWith(prometheus.Labels{"shard": "7"}, reg))
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wrapped_total", Help: "h"}, []string{"k"})
	w.MustRegister(c)
	c.WithLabelValues("v").Add(5)
	want := "# HELP app_wrapped_total h\n# TYPE app_wrapped_total counter\napp_wrapped_total{k=\"v\",shard=\"7\"} 5\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "app_wrapped_total"); err != nil {
		t.Error(err)
	}
	if v := segCounter(t, "app_wrapped_total", "h", microview.Label{Key: "shard", Value: "7"}, microview.Label{Key: "k", Value: "v"}); v != 5 {
		t.Errorf("segment %g, want 5", v)
	}
	err := w.Register(c)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) || are.ExistingCollector != c {
		t.Errorf("wrapped re-registration: %v", err)
	}
	if !w.Unregister(c) {
		t.Error("wrapped Unregister")
	}
}

// client_golang's promhttp middleware, with this module's vectors (CurryWith, ObserverVec).
func TestPromhttpMiddlewareAndCurry(t *testing.T) {
	reg := prometheus.NewRegistry()
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mw_duration_seconds", Help: "h", Buckets: []float64{1}}, []string{"handler", "code", "method"})
	cnt := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mw_requests_total", Help: "h"}, []string{"code", "method"})
	inflight := prometheus.NewGauge(prometheus.GaugeOpts{Name: "mw_in_flight", Help: "h"})
	reg.MustRegister(dur, cnt, inflight)
	var obs prometheus.ObserverVec = dur.MustCurryWith(prometheus.Labels{"handler": "pay"})
	h := promhttp.InstrumentHandlerInFlight(inflight, promhttp.InstrumentHandlerDuration(obs,
		promhttp.InstrumentHandlerCounter(cnt, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTeapot)
		}))))
	for i := 0; i < 3; i++ {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	if v := testutil.ToFloat64(cnt.WithLabelValues("418", "get")); v != 3 {
		t.Errorf("counter %g", v)
	}
	if n := testutil.CollectAndCount(dur); n != 1 {
		t.Errorf("%d duration series", n)
	}
	hs, err := segment(t).NewHistogram(microview.Opts{Name: "mw_duration_seconds", Help: "h",
		Labels: []microview.Label{{Key: "handler", Value: "pay"}, {Key: "code", Value: "418"}, {Key: "method", Value: "get"}}}, []float64{1})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := hs.Snapshot(); n != 3 {
		t.Errorf("segment histogram count %d", n)
	}
	if _, err := dur.CurryWith(prometheus.Labels{"nope": "x"}); err == nil {
		t.Error("CurryWith of an unknown label must fail")
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader("# HELP mw_in_flight h\n# TYPE mw_in_flight gauge\nmw_in_flight 0\n"), "mw_in_flight"); err != nil {
		t.Error(err)
	}
}

// Delete removes the child in process; a child re-created with the same labels takes the
// segment series over and reads as a counter reset.
func TestDeleteAndRecreate(t *testing.T) {
	reg := prometheus.NewRegistry()
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "del_total", Help: "h"}, []string{"a", "b"})
	reg.MustRegister(v)
	v.WithLabelValues("1", "x").Add(7)
	v.WithLabelValues("2", "x").Add(1)
	v.WithLabelValues("2", "y").Add(1)
	if !v.DeleteLabelValues("1", "x") || v.DeleteLabelValues("1", "x") {
		t.Fatal("DeleteLabelValues: true once")
	}
	if !gone(t, "del_total", microview.Label{Key: "a", Value: "1"}, microview.Label{Key: "b", Value: "x"}) {
		t.Fatal("DeleteLabelValues left the series in the segment")
	}
	if n := v.DeletePartialMatch(prometheus.Labels{"a": "2"}); n != 2 {
		t.Fatalf("DeletePartialMatch removed %d, want 2", n)
	}
	if !gone(t, "del_total", microview.Label{Key: "a", Value: "2"}, microview.Label{Key: "b", Value: "y"}) {
		t.Fatal("DeletePartialMatch left a series in the segment")
	}
	cur := v.MustCurryWith(prometheus.Labels{"b": "z"})
	cur.WithLabelValues("3").Inc()
	if !cur.DeleteLabelValues("3") || !gone(t, "del_total", microview.Label{Key: "a", Value: "3"}, microview.Label{Key: "b", Value: "z"}) {
		t.Fatal("a curried vector's DeleteLabelValues")
	}
	if n := testutil.CollectAndCount(v); n != 0 {
		t.Fatalf("%d children after deletes", n)
	}
	v.WithLabelValues("1", "x").Inc()
	if got := segCounter(t, "del_total", "h", microview.Label{Key: "a", Value: "1"}, microview.Label{Key: "b", Value: "x"}); got != 1 {
		t.Fatalf("re-created series %g, want 1 (reset)", got)
	}
	v.Reset()
	if n := testutil.CollectAndCount(v); n != 0 {
		t.Fatalf("%d children after Reset", n)
	}
	if !gone(t, "del_total", microview.Label{Key: "a", Value: "1"}, microview.Label{Key: "b", Value: "x"}) {
		t.Fatal("Reset left a series in the segment")
	}
}

func TestFractionsNaNAndSummary(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "busy_seconds_total", Help: "h"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nan_seconds", Help: "h", Buckets: []float64{1}})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "nan_gauge", Help: "h"})
	s := prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "rpc_seconds", Help: "h",
		Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01}}, []string{"svc"})
	reg.MustRegister(c, h, g, s)
	for i := 0; i < 6; i++ {
		c.Add(0.25)
	}
	if v := segCounter(t, "busy_seconds_total", "h"); v != 1.5 {
		t.Errorf("six Add(0.25): segment %g, want 1.5", v)
	}
	h.Observe(0.5)
	h.Observe(math.NaN())
	g.Set(math.NaN())
	if v := testutil.ToFloat64(g); !math.IsNaN(v) {
		t.Errorf("gauge %g, want NaN", v)
	}
	hs, _ := segment(t).NewHistogram(microview.Opts{Name: "nan_seconds", Help: "h"}, []float64{1})
	if n, sum, b := hs.Snapshot(); n != 2 || !math.IsNaN(sum) || b[1] != 1 {
		t.Errorf("NaN observation: count %d sum %g buckets %v", n, sum, b)
	}
	for i := 1; i <= 1000; i++ {
		s.WithLabelValues("a").Observe(float64(i) / 1000)
	}
	m, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m {
		if f.GetName() != "rpc_seconds" {
			continue
		}
		sm := f.GetMetric()[0].GetSummary()
		if sm.GetSampleCount() != 1000 || math.Abs(sm.GetSampleSum()-500.5) > 1e-9 {
			t.Errorf("summary count %d sum %g", sm.GetSampleCount(), sm.GetSampleSum())
		}
		for _, q := range sm.GetQuantile() {
			if want := q.GetQuantile(); math.Abs(q.GetValue()-want)/want > 0.08 {
				t.Errorf("quantile %g = %g, more than 8 %% off", want, q.GetValue())
			}
		}
		return
	}
	t.Error("no rpc_seconds family gathered")
}

func TestExemplarsAreCheckedAndDropped(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ex_total", Help: "h"})
	c.(prometheus.ExemplarAdder).AddWithExemplar(1, prometheus.Labels{"trace_id": "abc"})
	if testutil.ToFloat64(c) != 1 {
		t.Error("AddWithExemplar did not add")
	}
	defer func() {
		if recover() == nil {
			t.Error("an invalid exemplar label must panic as in client_golang")
		}
	}()
	c.(prometheus.ExemplarAdder).AddWithExemplar(1, prometheus.Labels{"bad-name": "x"})
}

// The default registry is client_golang's: one registry for the process.
func TestDefaultRegistryIsClientGolangs(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "coexist_total", Help: "h"})
	prometheus.MustRegister(c)
	defer prometheus.Unregister(c)
	c.Inc()
	n, err := testutil.GatherAndCount(cg.DefaultGatherer, "coexist_total", "go_goroutines")
	if err != nil || n != 2 {
		t.Errorf("client_golang's default gatherer: %d series, %v", n, err)
	}
}

// WithLabelValues of an existing child allocates nothing (client_golang's allocates its
// variadic slice), and still finds children re-created after Delete.
func TestWithLabelValuesAllocatesNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "alloc_total", Help: "h"}, []string{"a", "b"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "alloc_seconds", Help: "h"}, []string{"a"})
	reg.MustRegister(v, h)
	v.WithLabelValues("x", "y").Inc()
	h.WithLabelValues("x").Observe(1)
	if n := testing.AllocsPerRun(1000, func() {
		v.WithLabelValues("x", "y").Inc()
		h.WithLabelValues("x").Observe(1)
	}); n != 0 {
		t.Errorf("%g allocations per WithLabelValues pair", n)
	}
	v.DeleteLabelValues("x", "y")
	v.WithLabelValues("x", "y").Add(2)
	if got := testutil.ToFloat64(v.WithLabelValues("x", "y")); got != 2 {
		t.Errorf("re-created child reads %g, want 2", got)
	}
}
