// Package prometheus is a drop-in replacement for the metric constructors of
// github.com/prometheus/client_golang/prometheus whose metrics live in a MicroView segment.
//
// Change the import path (keeping the package name prometheus) and code such as
//
//	var reqs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "http_requests_total"}, []string{"route"})
//	reqs.WithLabelValues("/checkout").Inc()
//
// compiles and runs unchanged: Counter, Gauge, Histogram, Observer, the *Opts types, Labels
// and the bucket helpers are client_golang's own types (aliases); the constructors return
// MicroView-backed metrics that implement client_golang's interfaces, so every update is one
// or a few atomic operations on the segment that $MICROVIEW_SEGMENT names, and the MicroView
// collector reads them. There is nothing to serve: drop the promhttp handler.
//
// What does not carry over (see docs/writers.md): Summaries, *Func metrics, custom
// Collectors, native histograms, exemplars, Delete/Reset of series (segments are
// append-only), and Gather from a registry other than for these metrics' own Write.
package prometheus

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cg "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	microview "microview.io/writers/go"
)

// client_golang's own types and helpers, so user code keeps compiling.
type (
	Opts                   = cg.Opts
	CounterOpts            = cg.CounterOpts
	GaugeOpts              = cg.GaugeOpts
	HistogramOpts          = cg.HistogramOpts
	Labels                 = cg.Labels
	Counter                = cg.Counter
	Gauge                  = cg.Gauge
	Histogram              = cg.Histogram
	Observer               = cg.Observer
	ObserverFunc           = cg.ObserverFunc
	Collector              = cg.Collector
	Metric                 = cg.Metric
	Desc                   = cg.Desc
	Registerer             = cg.Registerer
	Timer                  = cg.Timer
	AlreadyRegisteredError = cg.AlreadyRegisteredError
)

var (
	DefBuckets         = cg.DefBuckets
	LinearBuckets      = cg.LinearBuckets
	ExponentialBuckets = cg.ExponentialBuckets
	BuildFQName        = cg.BuildFQName
	NewTimer           = cg.NewTimer
)

// ---- The segment ------------------------------------------------------------------

var (
	segOnce  sync.Once
	segMu    sync.Mutex
	seg      *microview.Segment
	private  *microview.Segment
	warnOnce sync.Map
)

// SetSegment makes s the segment for metrics created afterwards (default: the one named by
// $MICROVIEW_SEGMENT, opened on first use).
func SetSegment(s *microview.Segment) {
	segOnce.Do(func() {})
	segMu.Lock()
	seg = s
	segMu.Unlock()
}

func warn(key, msg string) {
	if _, done := warnOnce.LoadOrStore(key, true); !done {
		fmt.Fprintf(os.Stderr, "level=warn event=microview.fallback msg=%q\n", msg)
	}
}

// privateSegment is a 1 MiB segment in an unlinked temp file: metrics keep working and
// nobody reads them. Used when the real segment cannot be opened or is full.
func privateSegment() *microview.Segment {
	segMu.Lock()
	defer segMu.Unlock()
	if private == nil {
		f, err := os.CreateTemp("", "microview-private-")
		if err == nil {
			defer os.Remove(f.Name())
			defer f.Close()
			if err = f.Truncate(1 << 20); err == nil {
				private, err = microview.Open(f.Name())
			}
		}
		if err != nil {
			panic("microview: cannot create process-private metric memory: " + err.Error())
		}
	}
	return private
}

func currentSegment() *microview.Segment {
	segOnce.Do(func() {
		s, err := microview.OpenFromEnv()
		if err != nil {
			warn("open", err.Error()+"; metrics are kept in process memory only")
			return
		}
		segMu.Lock()
		seg = s
		segMu.Unlock()
	})
	segMu.Lock()
	s := seg
	segMu.Unlock()
	if s == nil {
		return privateSegment()
	}
	return s
}

// register runs reg on the current segment; argument errors panic (as client_golang's
// MustRegister does), running out of room or a busy lock falls back to private memory.
func register(name string, reg func(*microview.Segment) error) {
	s := currentSegment()
	err := reg(s)
	if err == nil {
		return
	}
	if errors.Is(err, microview.ErrName) || errors.Is(err, microview.ErrInvalid) || errors.Is(err, microview.ErrConflict) {
		panic(err)
	}
	warn("reg:"+err.Error(), err.Error()+"; "+name+" is kept in process memory only")
	if err := reg(privateSegment()); err != nil {
		panic(err)
	}
}

// series labels: constant labels sorted by name, then the variable labels in order.
func seriesLabels(constLabels Labels, names, values []string) []microview.Label {
	keys := make([]string, 0, len(constLabels))
	for k := range constLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]microview.Label, 0, len(keys)+len(names))
	for _, k := range keys {
		out = append(out, microview.Label{Key: k, Value: constLabels[k]})
	}
	for i, n := range names {
		out = append(out, microview.Label{Key: n, Value: values[i]})
	}
	return out
}

func toPromLabels(ls []microview.Label) Labels {
	m := make(Labels, len(ls))
	for _, l := range ls {
		m[l.Key] = l.Value
	}
	return m
}

// base carries what Metric and Collector need.
type base struct {
	desc   *Desc
	labels []*dto.LabelPair
}

func newBase(fq, help string, ls []microview.Label) base {
	b := base{desc: cg.NewDesc(fq, help, nil, toPromLabels(ls))}
	for _, l := range ls {
		b.labels = append(b.labels, &dto.LabelPair{Name: proto.String(l.Key), Value: proto.String(l.Value)})
	}
	sort.Slice(b.labels, func(i, j int) bool { return b.labels[i].GetName() < b.labels[j].GetName() })
	return b
}

func (b *base) Desc() *Desc { return b.desc }

// ---- Counter ----------------------------------------------------------------------

type counter struct {
	base
	c    microview.Counter
	frac uint64 // float64 bits: fractional increments not yet carried into the segment
}

// NewCounter creates a MicroView-backed Counter. Add takes any non-negative value; the
// segment counts whole units, and fractions are carried in process until they add up.
func NewCounter(opts CounterOpts) Counter {
	return newCounter(cg.Opts(opts), nil, nil)
}

func newCounter(o Opts, names, values []string) *counter {
	fq := BuildFQName(o.Namespace, o.Subsystem, o.Name)
	ls := seriesLabels(o.ConstLabels, names, values)
	m := &counter{base: newBase(fq, o.Help, ls)}
	register(fq, func(s *microview.Segment) (err error) {
		m.c, err = s.NewCounter(microview.Opts{Name: fq, Help: o.Help, Labels: ls})
		return
	})
	return m
}

func (m *counter) Inc() { m.c.Inc() }

func (m *counter) Add(v float64) {
	if v < 0 {
		panic(errors.New("counter cannot decrease in value"))
	}
	if iv := uint64(v); float64(iv) == v { // whole amounts: one atomic add
		m.c.Add(iv)
		return
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		panic(errors.New("microview: a counter can only add finite amounts (segment counters are integers)"))
	}
	for {
		old := atomic.LoadUint64(&m.frac)
		f := math.Float64frombits(old) + v
		whole := math.Floor(f)
		if atomic.CompareAndSwapUint64(&m.frac, old, math.Float64bits(f-whole)) {
			if whole > 0 {
				m.c.Add(uint64(whole))
			}
			return
		}
	}
}

func (m *counter) Write(out *dto.Metric) error {
	out.Label = m.labels
	v := float64(m.c.Value()) + math.Float64frombits(atomic.LoadUint64(&m.frac))
	out.Counter = &dto.Counter{Value: proto.Float64(v)}
	return nil
}

func (m *counter) Describe(ch chan<- *Desc) { ch <- m.desc }
func (m *counter) Collect(ch chan<- Metric) { ch <- m }

// ---- Gauge ------------------------------------------------------------------------

type gauge struct {
	base
	g microview.Gauge
}

// NewGauge creates a MicroView-backed Gauge.
func NewGauge(opts GaugeOpts) Gauge { return newGauge(cg.Opts(opts), nil, nil) }

func newGauge(o Opts, names, values []string) *gauge {
	fq := BuildFQName(o.Namespace, o.Subsystem, o.Name)
	ls := seriesLabels(o.ConstLabels, names, values)
	m := &gauge{base: newBase(fq, o.Help, ls)}
	register(fq, func(s *microview.Segment) (err error) {
		m.g, err = s.NewGauge(microview.Opts{Name: fq, Help: o.Help, Labels: ls})
		return
	})
	return m
}

func (m *gauge) Set(v float64)     { m.g.Set(v) }
func (m *gauge) Inc()              { m.g.Add(1) }
func (m *gauge) Dec()              { m.g.Add(-1) }
func (m *gauge) Add(v float64)     { m.g.Add(v) }
func (m *gauge) Sub(v float64)     { m.g.Add(-v) }
func (m *gauge) SetToCurrentTime() { m.g.Set(float64(time.Now().UnixNano()) / 1e9) }

func (m *gauge) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Gauge = &dto.Gauge{Value: proto.Float64(m.g.Value())}
	return nil
}

func (m *gauge) Describe(ch chan<- *Desc) { ch <- m.desc }
func (m *gauge) Collect(ch chan<- Metric) { ch <- m }

// ---- Histogram --------------------------------------------------------------------

type histogram struct {
	base
	h *microview.Histogram
}

// NewHistogram creates a MicroView-backed Histogram (classic buckets; DefBuckets when
// opts.Buckets is nil; a trailing +Inf is implied and accepted).
func NewHistogram(opts HistogramOpts) Histogram { return newHistogram(opts, nil, nil) }

func histBounds(b []float64) []float64 {
	if b == nil {
		b = DefBuckets
	}
	if n := len(b); n > 0 && math.IsInf(b[n-1], 1) {
		b = b[:n-1]
	}
	return b
}

func newHistogram(o HistogramOpts, names, values []string) *histogram {
	fq := BuildFQName(o.Namespace, o.Subsystem, o.Name)
	ls := seriesLabels(o.ConstLabels, names, values)
	m := &histogram{base: newBase(fq, o.Help, ls)}
	register(fq, func(s *microview.Segment) (err error) {
		m.h, err = s.NewHistogram(microview.Opts{Name: fq, Help: o.Help, Labels: ls}, histBounds(o.Buckets))
		return
	})
	return m
}

func (m *histogram) Observe(v float64) { m.h.Observe(v) }

func (m *histogram) Write(out *dto.Metric) error {
	count, sum, buckets := m.h.Snapshot()
	bounds := m.h.Bounds()
	dh := &dto.Histogram{SampleCount: proto.Uint64(count), SampleSum: proto.Float64(sum)}
	cum := uint64(0)
	for i, b := range bounds {
		cum += buckets[i]
		dh.Bucket = append(dh.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(cum)})
	}
	out.Label = m.labels
	out.Histogram = dh
	return nil
}

func (m *histogram) Describe(ch chan<- *Desc) { ch <- m.desc }
func (m *histogram) Collect(ch chan<- Metric) { ch <- m }

// ---- Vectors ----------------------------------------------------------------------

// vec caches one child per label-value tuple.
type vec struct {
	names    []string
	desc     *Desc
	mu       sync.RWMutex
	children map[string]Metric
	make     func(values []string) Metric
}

func newVec(o Opts, names []string, mk func(values []string) Metric) *vec {
	fq := BuildFQName(o.Namespace, o.Subsystem, o.Name)
	return &vec{names: append([]string(nil), names...), children: map[string]Metric{}, make: mk,
		desc: cg.NewDesc(fq, o.Help, names, o.ConstLabels)}
}

func (v *vec) get(values []string) (Metric, error) {
	if len(values) != len(v.names) {
		return nil, fmt.Errorf("inconsistent label cardinality: expected %d label values but got %d in %q", len(v.names), len(values), values)
	}
	key := strings.Join(values, "\xff")
	v.mu.RLock()
	m, ok := v.children[key]
	v.mu.RUnlock()
	if ok {
		return m, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if m, ok = v.children[key]; !ok {
		m = v.make(append([]string(nil), values...))
		v.children[key] = m
	}
	return m, nil
}

func (v *vec) values(l Labels) ([]string, error) {
	if len(l) != len(v.names) {
		return nil, fmt.Errorf("inconsistent label cardinality: expected %d label values but got %d in %v", len(v.names), len(l), l)
	}
	out := make([]string, len(v.names))
	for i, n := range v.names {
		val, ok := l[n]
		if !ok {
			return nil, fmt.Errorf("label name %q missing in label map", n)
		}
		out[i] = val
	}
	return out, nil
}

func (v *vec) with(l Labels) (Metric, error) {
	vals, err := v.values(l)
	if err != nil {
		return nil, err
	}
	return v.get(vals)
}

func (v *vec) Describe(ch chan<- *Desc) { ch <- v.desc }

func (v *vec) Collect(ch chan<- Metric) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, m := range v.children {
		ch <- m
	}
}

// Delete and Reset cannot remove series from an append-only segment; they report nothing
// deleted.
func (v *vec) DeleteLabelValues(...string) bool { return false }
func (v *vec) Delete(Labels) bool               { return false }
func (v *vec) Reset()                           {}

func must(m Metric, err error) Metric {
	if err != nil {
		panic(err)
	}
	return m
}

// CounterVec is client_golang's CounterVec, MicroView-backed.
type CounterVec struct{ *vec }

// NewCounterVec creates a CounterVec with the given variable label names.
func NewCounterVec(opts CounterOpts, labelNames []string) *CounterVec {
	o := cg.Opts(opts)
	return &CounterVec{newVec(o, labelNames, func(vals []string) Metric { return newCounter(o, labelNames, vals) })}
}

func (v *CounterVec) GetMetricWithLabelValues(vals ...string) (Counter, error) {
	m, err := v.get(vals)
	if err != nil {
		return nil, err
	}
	return m.(Counter), nil
}

func (v *CounterVec) GetMetricWith(l Labels) (Counter, error) {
	m, err := v.with(l)
	if err != nil {
		return nil, err
	}
	return m.(Counter), nil
}

func (v *CounterVec) WithLabelValues(vals ...string) Counter { return must(v.get(vals)).(Counter) }
func (v *CounterVec) With(l Labels) Counter                  { return must(v.with(l)).(Counter) }

// GaugeVec is client_golang's GaugeVec, MicroView-backed.
type GaugeVec struct{ *vec }

// NewGaugeVec creates a GaugeVec with the given variable label names.
func NewGaugeVec(opts GaugeOpts, labelNames []string) *GaugeVec {
	o := cg.Opts(opts)
	return &GaugeVec{newVec(o, labelNames, func(vals []string) Metric { return newGauge(o, labelNames, vals) })}
}

func (v *GaugeVec) GetMetricWithLabelValues(vals ...string) (Gauge, error) {
	m, err := v.get(vals)
	if err != nil {
		return nil, err
	}
	return m.(Gauge), nil
}

func (v *GaugeVec) GetMetricWith(l Labels) (Gauge, error) {
	m, err := v.with(l)
	if err != nil {
		return nil, err
	}
	return m.(Gauge), nil
}

func (v *GaugeVec) WithLabelValues(vals ...string) Gauge { return must(v.get(vals)).(Gauge) }
func (v *GaugeVec) With(l Labels) Gauge                  { return must(v.with(l)).(Gauge) }

// HistogramVec is client_golang's HistogramVec, MicroView-backed.
type HistogramVec struct{ *vec }

// NewHistogramVec creates a HistogramVec with the given variable label names.
func NewHistogramVec(opts HistogramOpts, labelNames []string) *HistogramVec {
	o := cg.Opts{Namespace: opts.Namespace, Subsystem: opts.Subsystem, Name: opts.Name, Help: opts.Help, ConstLabels: opts.ConstLabels}
	return &HistogramVec{newVec(o, labelNames, func(vals []string) Metric { return newHistogram(opts, labelNames, vals) })}
}

func (v *HistogramVec) GetMetricWithLabelValues(vals ...string) (Observer, error) {
	m, err := v.get(vals)
	if err != nil {
		return nil, err
	}
	return m.(Observer), nil
}

func (v *HistogramVec) GetMetricWith(l Labels) (Observer, error) {
	m, err := v.with(l)
	if err != nil {
		return nil, err
	}
	return m.(Observer), nil
}

func (v *HistogramVec) WithLabelValues(vals ...string) Observer {
	return must(v.get(vals)).(Observer)
}
func (v *HistogramVec) With(l Labels) Observer { return must(v.with(l)).(Observer) }

// ---- Registration -----------------------------------------------------------------

// registry accepts this package's metrics (they are in the segment from creation on) and
// refuses other Collectors, whose values MicroView cannot see.
type registry struct{}

// DefaultRegisterer stands in for client_golang's default registry.
var DefaultRegisterer Registerer = registry{}

func ours(c Collector) bool {
	switch c.(type) {
	case *counter, *gauge, *histogram, *CounterVec, *GaugeVec, *HistogramVec:
		return true
	}
	return false
}

func (registry) Register(c Collector) error {
	if ours(c) {
		return nil
	}
	return fmt.Errorf("microview: collector %T is not a MicroView metric; its values would not reach the segment (create it with this package's constructors)", c)
}

func (r registry) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (registry) Unregister(Collector) bool { return false }

// Register and MustRegister use DefaultRegisterer, as in client_golang.
func Register(c Collector) error   { return DefaultRegisterer.Register(c) }
func MustRegister(cs ...Collector) { DefaultRegisterer.MustRegister(cs...) }
func Unregister(c Collector) bool  { return DefaultRegisterer.Unregister(c) }
