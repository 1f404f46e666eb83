// The adapter keeps client_golang user code unchanged and writes to the segment.

package prometheus_test

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	cg "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	microview "microview.io/writers/go"
	"microview.io/writers/go/prometheus"
	"microview.io/writers/go/prometheus/promauto"
)

// Compile-time: the returned values are client_golang's interfaces and the Vecs are
// client_golang Collectors, so they fit wherever user code passes them.
var (
	_ cg.Counter   = prometheus.NewCounter(prometheus.CounterOpts{Name: "compile_total"})
	_ cg.Collector = (*prometheus.CounterVec)(nil)
	_ cg.Collector = (*prometheus.HistogramVec)(nil)
)

// TestMain runs the tests in a child process that starts with $MICROVIEW_SEGMENT set, as a
// service does, so that package-level metrics (created before any test) use the segment.
func TestMain(m *testing.M) {
	if os.Getenv(microview.EnvSegment) != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "mvprom")
	if err != nil {
		panic(err)
	}
	p := filepath.Join(dir, "segment")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
		panic(err)
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), microview.EnvSegment+"="+p)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	code := 0
	if err := cmd.Run(); err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// userCode is written exactly as against client_golang (only the import path differs).
var (
	reqs = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: "shop", Name: "http_requests_total", Help: "Requests served.",
		ConstLabels: prometheus.Labels{"service": "checkout"},
	}, []string{"route", "code"})
	inflight = promauto.NewGauge(prometheus.GaugeOpts{Name: "inflight_requests", Help: "In flight."})
	latency  = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "request_duration_seconds", Help: "Latency.", Buckets: prometheus.ExponentialBuckets(0.001, 10, 4),
	}, []string{"route"})
	cpu = prometheus.NewCounter(prometheus.CounterOpts{Name: "cpu_seconds_total", Help: "CPU."})
)

func init() { prometheus.MustRegister(cpu) }

func TestUserCodeWritesTheSegment(t *testing.T) {
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				reqs.WithLabelValues("/cart", "200").Inc()
				reqs.With(prometheus.Labels{"route": "/pay", "code": "500"}).Add(2)
				inflight.Inc()
				inflight.Dec()
				latency.WithLabelValues("/cart").Observe(0.05)
				cpu.Add(0.25)
			}
		}()
	}
	wg.Wait()
	inflight.Set(3)
	timer := prometheus.NewTimer(latency.WithLabelValues("/pay"))
	timer.ObserveDuration()

	if v := testutil.ToFloat64(reqs.WithLabelValues("/cart", "200")); v != 4000 {
		t.Errorf("cart = %g", v)
	}
	if v := testutil.ToFloat64(reqs.WithLabelValues("/pay", "500")); v != 8000 {
		t.Errorf("pay = %g", v)
	}
	if v := testutil.ToFloat64(cpu); v != 1000 {
		t.Errorf("cpu = %g (fractions exact)", v)
	}
	if v := testutil.ToFloat64(inflight); v != 3 {
		t.Errorf("inflight = %g", v)
	}

	// The same values are in the segment, read back by the MicroView writer itself.
	s, err := microview.OpenFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.NewCounterF(microview.Opts{Name: "shop_http_requests_total", Help: "Requests served.",
		Labels: []microview.Label{{Key: "service", Value: "checkout"}, {Key: "route", Value: "/cart"}, {Key: "code", Value: "200"}}})
	if err != nil || c.Value() != 4000 {
		t.Errorf("segment counter %g, %v", c.Value(), err)
	}
	f, err := s.NewCounterF(microview.Opts{Name: "cpu_seconds_total", Help: "CPU."})
	if err != nil || f.Value() != 1000 {
		t.Errorf("segment fractional counter %g, %v", f.Value(), err)
	}
	h, err := s.NewHistogram(microview.Opts{Name: "request_duration_seconds", Help: "Latency.",
		Labels: []microview.Label{{Key: "route", Value: "/cart"}}}, []float64{0.001, 0.01, 0.1, 1})
	if err != nil {
		t.Fatal(err)
	}
	count, sum, buckets := h.Snapshot()
	if count != 4000 || math.Abs(sum-200) > 1e-6 || buckets[2] != 4000 {
		t.Errorf("segment histogram count %d sum %g buckets %v", count, sum, buckets)
	}
}

func TestGatherThroughAClientGolangRegistry(t *testing.T) {
	reg := cg.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "queue_depth", Help: "Depth."}, []string{"q"})
	reg.MustRegister(g)
	g.WithLabelValues("a").Set(7)
	want := "# HELP queue_depth Depth.\n# TYPE queue_depth gauge\nqueue_depth{q=\"a\"} 7\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "queue_depth"); err != nil {
		t.Error(err)
	}
}

func TestErrorsLikeClientGolang(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	mustPanic("bad name", func() { prometheus.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "bad name"})) })
	mustPanic("negative add", func() { cpu.Add(-1) })
	mustPanic("NaN add", func() { cpu.Add(math.NaN()) })
	mustPanic("label count", func() { reqs.WithLabelValues("/x") })
	mustPanic("type conflict", func() {
		prometheus.NewRegistry().MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "cpu_seconds_total", Help: "CPU."}))
	})
	if _, err := reqs.GetMetricWithLabelValues("a"); err == nil {
		t.Error("cardinality error expected")
	}
	foreign := cg.NewCounter(cg.CounterOpts{Name: "foreign_total"})
	if err := prometheus.Register(foreign); err != nil {
		t.Errorf("a client_golang collector is served in process: %v", err)
	}
	prometheus.Unregister(foreign)
}
