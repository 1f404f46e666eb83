// Package prometheus is a drop-in replacement for github.com/prometheus/client_golang/prometheus
// whose metrics live in a MicroView segment.
//
// Change the import paths (github.com/prometheus/client_golang/prometheus/... becomes
// microview.io/writers/go/prometheus/...) and the code compiles and runs unchanged:
//
//	reg := prometheus.NewRegistry()
//	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "http_requests_total"}, []string{"route"})
//	reg.MustRegister(reqs)
//	reqs.WithLabelValues("/checkout").Inc()
//
// The registries, vectors, descriptors, errors and interfaces are client_golang's own
// (type aliases, or client_golang's Registry embedded), so registration follows
// client_golang's rules and Gather, promhttp and testutil work as before. What changes is
// where the values of Counter, Gauge, Histogram and Summary live: a metric is kept in
// process memory until it is registered, and from its registration on its value is a slot
// of the segment that $MICROVIEW_SEGMENT names, updated with one or a few atomic operations
// and read by the MicroView collector. Collectors that are not MicroView metrics (custom
// Collectors, const metrics, *Func metrics, the Go and process collectors) are served only
// in process, by promhttp on the registry they are registered with.
//
// docs/writers.md lists every client_golang API item: supported, differs (how) or missing
// (why).
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

// client_golang's own types, so user code keeps compiling and the values fit wherever
// client_golang's types are expected.
type (
	Opts                   = cg.Opts
	CounterOpts            = cg.CounterOpts
	GaugeOpts              = cg.GaugeOpts
	HistogramOpts          = cg.HistogramOpts
	SummaryOpts            = cg.SummaryOpts
	UntypedOpts            = cg.UntypedOpts
	ProcessCollectorOpts   = cg.ProcessCollectorOpts
	Labels                 = cg.Labels
	Counter                = cg.Counter
	CounterFunc            = cg.CounterFunc
	Gauge                  = cg.Gauge
	GaugeFunc              = cg.GaugeFunc
	UntypedFunc            = cg.UntypedFunc
	Histogram              = cg.Histogram
	Summary                = cg.Summary
	Observer               = cg.Observer
	ObserverFunc           = cg.ObserverFunc
	ObserverVec            = cg.ObserverVec
	ExemplarAdder          = cg.ExemplarAdder
	ExemplarObserver       = cg.ExemplarObserver
	Exemplar               = cg.Exemplar
	MetricVec              = cg.MetricVec
	Collector              = cg.Collector
	Metric                 = cg.Metric
	Desc                   = cg.Desc
	ValueType              = cg.ValueType
	Registerer             = cg.Registerer
	Gatherer               = cg.Gatherer
	GathererFunc           = cg.GathererFunc
	Gatherers              = cg.Gatherers
	TransactionalGatherer  = cg.TransactionalGatherer
	MultiTRegistry         = cg.MultiTRegistry
	MultiError             = cg.MultiError
	AlreadyRegisteredError = cg.AlreadyRegisteredError
	Timer                  = cg.Timer
)

// client_golang's constants, variables and helpers.
const (
	CounterValue                     = cg.CounterValue
	GaugeValue                       = cg.GaugeValue
	UntypedValue                     = cg.UntypedValue
	DefMaxAge                        = cg.DefMaxAge
	DefAgeBuckets                    = cg.DefAgeBuckets
	DefBufCap                        = cg.DefBufCap
	ExemplarMaxRunes                 = cg.ExemplarMaxRunes
	DefNativeHistogramZeroThreshold  = cg.DefNativeHistogramZeroThreshold
	NativeHistogramZeroThresholdZero = cg.NativeHistogramZeroThresholdZero
)

var (
	DefBuckets                 = cg.DefBuckets
	CounterMetricTypePtr       = cg.CounterMetricTypePtr
	GaugeMetricTypePtr         = cg.GaugeMetricTypePtr
	UntypedMetricTypePtr       = cg.UntypedMetricTypePtr
	LinearBuckets              = cg.LinearBuckets
	ExponentialBuckets         = cg.ExponentialBuckets
	ExponentialBucketsRange    = cg.ExponentialBucketsRange
	BuildFQName                = cg.BuildFQName
	NewTimer                   = cg.NewTimer
	NewDesc                    = cg.NewDesc
	NewInvalidDesc             = cg.NewInvalidDesc
	NewInvalidMetric           = cg.NewInvalidMetric
	NewConstMetric             = cg.NewConstMetric
	MustNewConstMetric         = cg.MustNewConstMetric
	NewConstHistogram          = cg.NewConstHistogram
	MustNewConstHistogram      = cg.MustNewConstHistogram
	NewConstSummary            = cg.NewConstSummary
	MustNewConstSummary        = cg.MustNewConstSummary
	NewMetricWithTimestamp     = cg.NewMetricWithTimestamp
	NewMetricWithExemplars     = cg.NewMetricWithExemplars
	MustNewMetricWithExemplars = cg.MustNewMetricWithExemplars
	MakeLabelPairs             = cg.MakeLabelPairs
	DescribeByCollect          = cg.DescribeByCollect
	NewMetricVec               = cg.NewMetricVec
	NewCounterFunc             = cg.NewCounterFunc
	NewGaugeFunc               = cg.NewGaugeFunc
	NewUntypedFunc             = cg.NewUntypedFunc
	NewExpvarCollector         = cg.NewExpvarCollector
	NewBuildInfoCollector      = cg.NewBuildInfoCollector
	NewGoCollector             = cg.NewGoCollector
	NewProcessCollector        = cg.NewProcessCollector
	NewPidFileFn               = cg.NewPidFileFn
	NewMultiTRegistry          = cg.NewMultiTRegistry
	ToTransactionalGatherer    = cg.ToTransactionalGatherer
	WriteToTextfile            = cg.WriteToTextfile
)

// ---- The segment ------------------------------------------------------------------

var (
	segOnce  sync.Once
	segMu    sync.Mutex
	seg      *microview.Segment
	warnOnce sync.Map
)

// SetSegment makes s the segment for metrics registered afterwards (default: the one named
// by $MICROVIEW_SEGMENT, opened on first registration).
func SetSegment(s *microview.Segment) {
	segOnce.Do(func() {})
	segMu.Lock()
	seg = s
	segMu.Unlock()
}

// SegmentUsage reports how full the segment is (docs/segment-format.md section 8.1); zero
// before the segment is opened (at the first registration) or without one. The same
// numbers are served in process as microview_writer_segment_used_ratio{area="values"|
// "catalog"} by client_golang's default registry (promhttp.Handler()).
func SegmentUsage() microview.Usage {
	segMu.Lock()
	defer segMu.Unlock()
	return seg.Usage()
}

var usageDesc = cg.NewDesc("microview_writer_segment_used_ratio",
	"Share of the MicroView segment's value and catalog areas in use (Go writer).", []string{"area"}, nil)

type usageCollector struct{}

func (usageCollector) Describe(ch chan<- *Desc) { ch <- usageDesc }
func (usageCollector) Collect(ch chan<- Metric) {
	u := SegmentUsage()
	ratio := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	ch <- cg.MustNewConstMetric(usageDesc, cg.GaugeValue, ratio(u.ValuesUsed, u.ValuesSize), "values")
	ch <- cg.MustNewConstMetric(usageDesc, cg.GaugeValue, ratio(u.CatalogUsed, u.CatalogSize), "catalog")
}

func warn(key, msg string) {
	if _, done := warnOnce.LoadOrStore(key, true); !done {
		fmt.Fprintf(os.Stderr, "level=warn event=microview.fallback msg=%q\n", msg)
	}
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
		_ = cg.DefaultRegisterer.Register(usageCollector{})
	})
	segMu.Lock()
	defer segMu.Unlock()
	return seg
}

// owners maps a segment series (name and labels) to the metric of this process that
// writes it; a second metric registering the same series (the same metric built again in
// a fresh Registry) deletes the first one's series and starts a new one.
var owners sync.Map

// ---- What every MicroView metric shares ---------------------------------------------

// core is a metric's identity: its Desc, its own labels and its binding to the segment.
type core struct {
	desc   *Desc
	fq     string
	help   string
	consts []microview.Label // constant labels, sorted by name
	vars   []microview.Label // variable labels, in their declared order
	pairs  []*dto.LabelPair  // all of them sorted by name, for Write
	mu     sync.Mutex
	key    string            // segment series once bound, "" before
	name   string            // the bound series' name and labels, for its tombstone
	labels []microview.Label //
}

func (c *core) init(desc *Desc, fq, help string, constLabels Labels, names, values []string) {
	c.desc, c.fq, c.help = desc, fq, help
	for k, v := range constLabels {
		c.consts = append(c.consts, microview.Label{Key: k, Value: v})
	}
	sort.Slice(c.consts, func(i, j int) bool { return c.consts[i].Key < c.consts[j].Key })
	for i, n := range names {
		c.vars = append(c.vars, microview.Label{Key: n, Value: values[i]})
	}
	all := append(append([]microview.Label(nil), c.consts...), c.vars...)
	sort.Slice(all, func(i, j int) bool { return all[i].Key < all[j].Key })
	for _, l := range all {
		c.pairs = append(c.pairs, &dto.LabelPair{Name: proto.String(l.Key), Value: proto.String(l.Value)})
	}
}

func (c *core) Desc() *Desc { return c.desc }

// binding is how the registerers between a metric and its Registry rename it
// (WrapRegistererWithPrefix, WrapRegistererWith).
type binding struct {
	prefix string
	labels Labels
}

func (b binding) then(outer binding) binding {
	ls := Labels{}
	for k, v := range b.labels {
		ls[k] = v
	}
	for k, v := range outer.labels {
		ls[k] = v
	}
	return binding{prefix: outer.prefix + b.prefix, labels: ls}
}

// series is the name and labels of c in the segment under b: the constant labels and
// those Wrap* adds, sorted by name, then the variable labels in their declared order
// (docs/segment-format.md section 6.4).
func (c *core) series(b binding) (string, []microview.Label) {
	ls := append([]microview.Label(nil), c.consts...)
	for k, v := range b.labels {
		ls = append(ls, microview.Label{Key: k, Value: v})
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].Key < ls[j].Key })
	return b.prefix + c.fq, append(ls, c.vars...)
}

func seriesKey(name string, ls []microview.Label) string {
	var sb strings.Builder
	sb.WriteString(name)
	for _, l := range ls {
		sb.WriteString("\xff" + l.Key + "\xfe" + l.Value)
	}
	return sb.String()
}

// segmentMetric is a MicroView metric: bind moves its value into the segment, tombstone
// deletes its series there.
type segmentMetric interface {
	Metric
	bind(b binding) error
	tombstone()
}

// bindWith registers the series in the segment through reg (which returns the new handle's
// installer), unless already bound. Argument errors (invalid names, type conflicts) are
// returned; a missing or full segment keeps the metric in process memory with a warning.
func (c *core) bindWith(self segmentMetric, b binding, reg func(s *microview.Segment, name string, ls []microview.Label) (install func(), err error)) error {
	name, ls := c.series(b)
	key := seriesKey(name, ls)
	// Another metric of this process holds the series (the same metric built again, e.g.
	// in a fresh Registry per test): its series is deleted first, so this one starts from
	// zero in a new record, as a re-created series does (section 6.6).
	if prev, ok := owners.Load(key); ok && prev != self {
		prev.(segmentMetric).tombstone()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key != "" {
		return nil
	}
	s := currentSegment()
	if s == nil {
		return nil
	}
	install, err := reg(s, name, ls)
	if err != nil {
		if errors.Is(err, microview.ErrName) || errors.Is(err, microview.ErrInvalid) || errors.Is(err, microview.ErrConflict) {
			return err
		}
		warn("reg:"+err.Error(), err.Error()+"; "+name+" is kept in process memory only")
		return nil
	}
	owners.Store(key, self)
	install()
	c.key, c.name, c.labels = key, name, ls
	return nil
}

// release deletes c's series from the segment (a tombstone, section 6.6) unless another
// metric took it over; c keeps its value and handle, which nobody reads any more, and a
// later registration binds it to a new series.
func (c *core) release(self segmentMetric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key == "" {
		return
	}
	if owners.CompareAndDelete(c.key, self) {
		if s := currentSegment(); s != nil {
			if _, err := s.Delete(microview.Opts{Name: c.name, Labels: c.labels}); err != nil {
				warn("del:"+err.Error(), err.Error()+"; "+c.name+" stays in the segment")
			}
		}
	}
	c.key = ""
}

// ---- Counter (segment type 4, counter_f) ---------------------------------------------

type counter struct {
	core
	w atomic.Pointer[uint64] // the integral word: Inc and whole Adds, one load then one add
	f atomic.Pointer[uint64] // the fractional word: other Adds, one load then a CAS loop
	h atomic.Pointer[microview.CounterF]
}

func (o *vecOpts) newCounter(values []string) *counter {
	m := &counter{}
	m.init(o.desc, o.fq, o.help, o.constLabels, o.names, values)
	h := microview.NewLocalCounterF()
	m.h.Store(&h)
	m.f.Store(h.FracWord())
	m.w.Store(h.Word())
	return m
}

// NewCounter creates a Counter; it lives in the segment once registered. Add takes any
// finite non-negative amount, exactly (record type 4).
func NewCounter(opts CounterOpts) Counter {
	o := newVecOpts(Opts(opts), nil)
	return o.newCounter(nil)
}

func (m *counter) bind(b binding) error {
	return m.bindWith(m, b, func(s *microview.Segment, name string, ls []microview.Label) (func(), error) {
		h, err := s.NewCounterF(microview.Opts{Name: name, Help: m.help, Labels: ls})
		if err != nil {
			return nil, err
		}
		return func() {
			old := m.h.Swap(&h)
			m.f.Store(h.FracWord())
			m.w.Store(h.Word())
			_ = h.Add(old.Value())
		}, nil
	})
}

func (m *counter) Inc() { atomic.AddUint64(m.w.Load(), 1) }

// Add adds v exactly (type 4). A negative amount panics as in client_golang; NaN panics
// too (the segment's counters only grow); +Inf is kept, as client_golang keeps it.
func (m *counter) Add(v float64) {
	if v < 0 {
		panic(errors.New("counter cannot decrease in value"))
	}
	if iv := uint64(v); float64(iv) == v && v < 1<<64 {
		atomic.AddUint64(m.w.Load(), iv)
		return
	}
	if v != v {
		panic(errors.New("microview: a counter cannot add NaN"))
	}
	microview.AddFrac(m.f.Load(), v)
}

func (m *counter) AddWithExemplar(v float64, e Labels) {
	checkExemplar(e)
	m.Add(v)
}

func (m *counter) Write(out *dto.Metric) error {
	out.Label = m.pairs
	out.Counter = &dto.Counter{Value: proto.Float64(m.h.Load().Value())}
	return nil
}

func (m *counter) tombstone()               { m.release(m) }
func (m *counter) Describe(ch chan<- *Desc) { ch <- m.desc }
func (m *counter) Collect(ch chan<- Metric) { ch <- m }

// checkExemplar applies client_golang's exemplar rules (the exemplar itself is not kept:
// the segment format has no place for it).
func checkExemplar(e Labels) {
	runes := 0
	for k, v := range e {
		if !validLabelName(k) {
			panic(fmt.Errorf("exemplar label name %q is invalid", k))
		}
		runes += len([]rune(k)) + len([]rune(v))
	}
	if runes > ExemplarMaxRunes {
		panic(fmt.Errorf("exemplar labels have %d runes, exceeding the limit of %d", runes, ExemplarMaxRunes))
	}
}

func validLabelName(s string) bool {
	if s == "" || strings.HasPrefix(s, "__") {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// ---- Gauge ------------------------------------------------------------------------

type gauge struct {
	core
	w atomic.Pointer[uint64] // the value word, nil when the series is sharded
	h atomic.Pointer[microview.Gauge]
}

func (o *vecOpts) newGauge(values []string) *gauge {
	m := &gauge{}
	m.init(o.desc, o.fq, o.help, o.constLabels, o.names, values)
	h := microview.NewLocalGauge()
	m.h.Store(&h)
	m.w.Store(h.Word())
	return m
}

// NewGauge creates a Gauge; it lives in the segment once registered.
func NewGauge(opts GaugeOpts) Gauge { return newVecOpts(Opts(opts), nil).newGauge(nil) }

func (m *gauge) bind(b binding) error {
	return m.bindWith(m, b, func(s *microview.Segment, name string, ls []microview.Label) (func(), error) {
		h, err := s.NewGauge(microview.Opts{Name: name, Help: m.help, Labels: ls})
		if err != nil {
			return nil, err
		}
		return func() {
			old := m.h.Swap(&h)
			m.w.Store(h.Word())
			h.Set(old.Value())
		}, nil
	})
}

func (m *gauge) Set(v float64) {
	if w := m.w.Load(); w != nil {
		atomic.StoreUint64(w, math.Float64bits(v))
		return
	}
	m.h.Load().Set(v)
}

func (m *gauge) Add(v float64) {
	if w := m.w.Load(); w != nil {
		for {
			old := atomic.LoadUint64(w)
			if atomic.CompareAndSwapUint64(w, old, math.Float64bits(math.Float64frombits(old)+v)) {
				return
			}
		}
	}
	m.h.Load().Add(v)
}

func (m *gauge) Inc()              { m.Add(1) }
func (m *gauge) Dec()              { m.Add(-1) }
func (m *gauge) Sub(v float64)     { m.Add(-v) }
func (m *gauge) SetToCurrentTime() { m.Set(float64(time.Now().UnixNano()) / 1e9) }

func (m *gauge) Write(out *dto.Metric) error {
	out.Label = m.pairs
	out.Gauge = &dto.Gauge{Value: proto.Float64(m.h.Load().Value())}
	return nil
}

func (m *gauge) tombstone()               { m.release(m) }
func (m *gauge) Describe(ch chan<- *Desc) { ch <- m.desc }
func (m *gauge) Collect(ch chan<- Metric) { ch <- m }

// ---- Histogram and Summary ----------------------------------------------------------

type histogram struct {
	core
	bounds     []float64
	h          atomic.Pointer[microview.Histogram]
	objectives []float64 // a Summary: the quantiles Write reports
}

func (o *vecOpts) newHistogram(values []string) *histogram {
	m := &histogram{bounds: o.bounds, objectives: o.objectives}
	m.init(o.desc, o.fq, o.help, o.constLabels, o.names, values)
	m.h.Store(microview.NewLocalHistogram(o.bounds))
	return m
}

// histBounds: DefBuckets when nil; a trailing +Inf is implied and accepted. Bounds must
// increase strictly, as client_golang requires (it panics otherwise).
func histBounds(b []float64) []float64 {
	if b == nil {
		b = DefBuckets
	}
	if n := len(b); n > 0 && math.IsInf(b[n-1], 1) {
		b = b[:n-1]
	}
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) {
			panic(fmt.Errorf("histogram buckets must be in increasing order: %f >= %f", b[i-1], b[i]))
		}
	}
	return append([]float64(nil), b...)
}

// NewHistogram creates a Histogram with classic buckets (DefBuckets when opts.Buckets is
// nil, at most 160); it lives in the segment once registered. Native-histogram options
// are ignored.
func NewHistogram(opts HistogramOpts) Histogram {
	return histOpts(opts, nil).newHistogram(nil)
}

func histOpts(opts HistogramOpts, names []string) *vecOpts {
	for _, n := range names {
		if n == "le" {
			panic(errors.New("\"le\" is not allowed as label name in histograms"))
		}
	}
	for n := range opts.ConstLabels {
		if n == "le" {
			panic(errors.New("\"le\" is not allowed as label name in histograms"))
		}
	}
	o := newVecOpts(Opts{Namespace: opts.Namespace, Subsystem: opts.Subsystem, Name: opts.Name,
		Help: opts.Help, ConstLabels: opts.ConstLabels}, names)
	o.bounds = histBounds(opts.Buckets)
	return o
}

// SummaryBuckets are the bounds a Summary is kept in: 160 buckets growing by a factor of
// 1.156 from 1e-6 to 1e4, so a quantile taken from them (the representative 2·lo·hi/(lo+hi)
// of the bucket holding its rank) is within 7.3 % of the true value for values in that
// range. The collector's H_window{quantile} series and Write both use them.
var SummaryBuckets = cg.ExponentialBucketsRange(1e-6, 1e4, 160)

// NewSummary creates a Summary kept as a histogram of SummaryBuckets: sum and count are
// exact, quantiles come from the buckets (see SummaryBuckets). The collector serves it as
// a histogram plus NAME_window{quantile=...} computed from its sketch of each export
// window; Write (promhttp, testutil) reports opts.Objectives' quantiles over the whole
// lifetime instead of client_golang's MaxAge window.
func NewSummary(opts SummaryOpts) Summary { return sumOpts(opts, nil).newHistogram(nil) }

func sumOpts(opts SummaryOpts, names []string) *vecOpts {
	for _, n := range names {
		if n == "quantile" {
			panic(errors.New("\"quantile\" is not allowed as label name in summaries"))
		}
	}
	for n := range opts.ConstLabels {
		if n == "quantile" {
			panic(errors.New("\"quantile\" is not allowed as label name in summaries"))
		}
	}
	o := newVecOpts(Opts{Namespace: opts.Namespace, Subsystem: opts.Subsystem, Name: opts.Name,
		Help: opts.Help, ConstLabels: opts.ConstLabels}, names)
	o.bounds = SummaryBuckets
	o.objectives = []float64{}
	for q := range opts.Objectives {
		o.objectives = append(o.objectives, q)
	}
	sort.Float64s(o.objectives)
	return o
}

func (m *histogram) bind(b binding) error {
	return m.bindWith(m, b, func(s *microview.Segment, name string, ls []microview.Label) (func(), error) {
		h, err := s.NewHistogram(microview.Opts{Name: name, Help: m.help, Labels: ls}, m.bounds)
		if err != nil {
			return nil, err
		}
		return func() {
			old := m.h.Swap(h)
			_, sum, buckets := old.Snapshot()
			h.Merge(buckets, sum)
		}, nil
	})
}

// Observe counts v; NaN counts as in client_golang (count + 1, +Inf bucket, sum NaN).
func (m *histogram) Observe(v float64) { m.h.Load().Observe(v) }

func (m *histogram) ObserveWithExemplar(v float64, e Labels) {
	checkExemplar(e)
	m.Observe(v)
}

func (m *histogram) Write(out *dto.Metric) error {
	count, sum, buckets := m.h.Load().Snapshot()
	out.Label = m.pairs
	if m.objectives != nil {
		ds := &dto.Summary{SampleCount: proto.Uint64(count), SampleSum: proto.Float64(sum)}
		for _, q := range m.objectives {
			ds.Quantile = append(ds.Quantile, &dto.Quantile{Quantile: proto.Float64(q), Value: proto.Float64(bucketQuantile(q, m.bounds, buckets, count))})
		}
		out.Summary = ds
		return nil
	}
	dh := &dto.Histogram{SampleCount: proto.Uint64(count), SampleSum: proto.Float64(sum)}
	cum := uint64(0)
	for i, b := range m.bounds {
		cum += buckets[i]
		dh.Bucket = append(dh.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(cum)})
	}
	out.Histogram = dh
	return nil
}

// bucketQuantile is the representative 2·lo·hi/(lo+hi) of the bucket holding rank
// floor(q·(count-1)), as the collector attributes a bucket; NaN without observations.
func bucketQuantile(q float64, bounds []float64, buckets []uint64, count uint64) float64 {
	if count == 0 {
		return math.NaN()
	}
	rank := uint64(q * float64(count-1))
	cum := uint64(0)
	for i, n := range buckets {
		cum += n
		if cum > rank {
			if i >= len(bounds) {
				return bounds[len(bounds)-1]
			}
			hi := bounds[i]
			lo := hi / (bounds[1] / bounds[0])
			if i > 0 {
				lo = bounds[i-1]
			}
			return 2 * lo * hi / (lo + hi)
		}
	}
	return bounds[len(bounds)-1]
}

func (m *histogram) tombstone()               { m.release(m) }
func (m *histogram) Describe(ch chan<- *Desc) { ch <- m.desc }
func (m *histogram) Collect(ch chan<- Metric) { ch <- m }

// ---- Vectors: client_golang's own MetricVec with MicroView children ------------------

// vecOpts is what a metric or vector's children share.
type vecOpts struct {
	desc        *Desc
	fq, help    string
	constLabels Labels
	names       []string
	bounds      []float64
	objectives  []float64

	mu    sync.Mutex
	bound *binding
	kids  map[string]segmentMetric // by label values, for Delete
	// fast maps a hash of the label values to the children with them, copied on write:
	// WithLabelValues reads it with one atomic load, no lock and no allocation.
	fast atomic.Pointer[map[uint64][]fastKid]
}

type fastKid struct {
	values []string
	m      segmentMetric
}

// hashValues is FNV-1a over the values, each followed by a 0xff byte (which UTF-8 text
// never holds).
func hashValues(lvs []string) uint64 {
	h := uint64(14695981039346656037)
	for _, v := range lvs {
		for i := 0; i < len(v); i++ {
			h = (h ^ uint64(v[i])) * 1099511628211
		}
		h = (h ^ 0xff) * 1099511628211
	}
	return h
}

// lookup finds the child with exactly these label values (all of them, uncurried).
func (o *vecOpts) lookup(lvs []string) segmentMetric {
	mp := o.fast.Load()
	if mp == nil {
		return nil
	}
next:
	for _, k := range (*mp)[hashValues(lvs)] {
		if len(k.values) != len(lvs) {
			continue
		}
		for i, v := range lvs {
			if k.values[i] != v {
				continue next
			}
		}
		return k.m
	}
	return nil
}

// reindex rebuilds the fast map from kids; callers hold mu.
func (o *vecOpts) reindex() {
	mp := make(map[uint64][]fastKid, len(o.kids))
	for k, m := range o.kids {
		vals := strings.Split(k, "\xff")
		if len(o.names) == 0 {
			vals = nil
		}
		h := hashValues(vals)
		mp[h] = append(mp[h], fastKid{vals, m})
	}
	o.fast.Store(&mp)
}

// addFast adds one child to the fast map (copy on write); callers hold mu.
func (o *vecOpts) addFast(vals []string, m segmentMetric) {
	old := o.fast.Load()
	mp := make(map[uint64][]fastKid, len(o.kids)+1)
	if old != nil {
		for h, ks := range *old {
			mp[h] = ks
		}
	}
	h := hashValues(vals)
	mp[h] = append(append([]fastKid(nil), mp[h]...), fastKid{vals, m})
	o.fast.Store(&mp)
}

func newVecOpts(o Opts, names []string) *vecOpts {
	fq := BuildFQName(o.Namespace, o.Subsystem, o.Name)
	return &vecOpts{desc: cg.NewDesc(fq, o.Help, names, o.ConstLabels), fq: fq, help: o.Help,
		constLabels: o.ConstLabels, names: append([]string(nil), names...), kids: map[string]segmentMetric{}}
}

// vecs maps each vector's *MetricVec to its options, so Registry.Register can bind the
// vector and its children.
var vecs sync.Map

func kidKey(values []string) string { return strings.Join(values, "\xff") }

// child is called by MetricVec for each new label-value tuple.
func (o *vecOpts) child(values []string, m segmentMetric) Metric {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kids[kidKey(values)] = m
	o.addFast(values, m)
	if o.bound != nil {
		if err := m.bind(*o.bound); err != nil {
			panic(err)
		}
	}
	return m
}

func (o *vecOpts) bindVec(b binding) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bound != nil {
		return nil
	}
	o.bound = &b
	for _, m := range o.kids {
		if err := m.bind(b); err != nil {
			return err
		}
	}
	return nil
}

// releaseVec deletes every child's series (Unregister): the children stay in the vector,
// in process memory only, until it is registered again.
func (o *vecOpts) releaseVec() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bound = nil
	for _, m := range o.kids {
		m.tombstone()
	}
}

func newMetricVec(o *vecOpts, mk func(values []string) segmentMetric) *MetricVec {
	mv := cg.NewMetricVec(o.desc, func(lvs ...string) Metric {
		vals := append([]string(nil), lvs...)
		return o.child(vals, mk(vals))
	})
	vecs.Store(mv, o)
	return mv
}

// deleter gives a vector (possibly curried) Delete, DeleteLabelValues,
// DeletePartialMatch and Reset with their effect on the segment: client_golang's removes
// the child, then the child's series gets its tombstone (docs/segment-format.md 6.6).
type deleter struct {
	o     *vecOpts
	mv    *MetricVec
	curry Labels
}

// values completes the values of the uncurried labels (in order) with the curried ones.
func (d deleter) values(lvs []string) ([]string, bool) {
	out := make([]string, 0, len(d.o.names))
	for _, n := range d.o.names {
		if v, ok := d.curry[n]; ok {
			out = append(out, v)
			continue
		}
		if len(lvs) == 0 {
			return nil, false
		}
		out, lvs = append(out, lvs[0]), lvs[1:]
	}
	return out, len(lvs) == 0
}

func (d deleter) take(vals []string) segmentMetric {
	d.o.mu.Lock()
	defer d.o.mu.Unlock()
	k := kidKey(vals)
	m := d.o.kids[k]
	delete(d.o.kids, k)
	d.o.reindex()
	return m
}

// DeleteLabelValues removes the child with these label values (the uncurried ones, in
// order) and deletes its series from the segment.
func (d deleter) DeleteLabelValues(lvs ...string) bool {
	if !d.mv.DeleteLabelValues(lvs...) {
		return false
	}
	if vals, ok := d.values(lvs); ok {
		if m := d.take(vals); m != nil {
			m.tombstone()
		}
	}
	return true
}

// Delete removes the child with these labels and deletes its series from the segment.
func (d deleter) Delete(labels Labels) bool {
	if !d.mv.Delete(labels) {
		return false
	}
	vals := make([]string, len(d.o.names))
	for i, n := range d.o.names {
		if v, ok := d.curry[n]; ok {
			vals[i] = v
		} else {
			vals[i] = labels[n]
		}
	}
	if m := d.take(vals); m != nil {
		m.tombstone()
	}
	return true
}

// DeletePartialMatch removes every child whose labels include these and deletes their
// series from the segment; it returns how many.
func (d deleter) DeletePartialMatch(labels Labels) int {
	n := d.mv.DeletePartialMatch(labels)
	if n == 0 {
		return 0
	}
	want := Labels{}
	for k, v := range d.curry {
		want[k] = v
	}
	for k, v := range labels {
		want[k] = v
	}
	d.o.mu.Lock()
	var gone []segmentMetric
	for k, m := range d.o.kids {
		vals := strings.Split(k, "\xff")
		match := true
		for i, name := range d.o.names {
			if v, ok := want[name]; ok && (i >= len(vals) || vals[i] != v) {
				match = false
				break
			}
		}
		if match {
			gone = append(gone, m)
			delete(d.o.kids, k)
		}
	}
	d.o.reindex()
	d.o.mu.Unlock()
	for _, m := range gone {
		m.tombstone()
	}
	return n
}

// Reset removes every child and deletes their series from the segment.
func (d deleter) Reset() {
	d.mv.Reset()
	d.o.mu.Lock()
	kids := d.o.kids
	d.o.kids = map[string]segmentMetric{}
	d.o.reindex()
	d.o.mu.Unlock()
	for _, m := range kids {
		m.tombstone()
	}
}

func curried(d deleter, mv *MetricVec, l Labels) deleter {
	vecs.Store(mv, d.o)
	c := Labels{}
	for k, v := range d.curry {
		c[k] = v
	}
	for k, v := range l {
		c[k] = v
	}
	return deleter{o: d.o, mv: mv, curry: c}
}

// CounterVec is client_golang's CounterVec (embedded, so every method is client_golang's)
// whose children are MicroView counters; its Delete* and Reset also delete the series
// from the segment.
type CounterVec struct {
	*cg.CounterVec
	deleter
}

// NewCounterVec creates a CounterVec with the given variable label names.
func NewCounterVec(opts CounterOpts, labelNames []string) *CounterVec {
	o := newVecOpts(Opts(opts), labelNames)
	mv := newMetricVec(o, func(v []string) segmentMetric { return o.newCounter(v) })
	return &CounterVec{&cg.CounterVec{MetricVec: mv}, deleter{o: o, mv: mv}}
}

func (v *CounterVec) CurryWith(l Labels) (*CounterVec, error) {
	c, err := v.CounterVec.CurryWith(l)
	if err != nil {
		return nil, err
	}
	return &CounterVec{c, curried(v.deleter, c.MetricVec, l)}, nil
}

func (v *CounterVec) MustCurryWith(l Labels) *CounterVec {
	c, err := v.CurryWith(l)
	if err != nil {
		panic(err)
	}
	return c
}

// WithLabelValues is client_golang's, with a lock-free lookup of existing children that
// allocates nothing (client_golang's takes a read lock and allocates the variadic slice).
func (v *CounterVec) WithLabelValues(lvs ...string) Counter {
	if v.curry == nil {
		if m, ok := v.o.lookup(lvs).(*counter); ok {
			return m
		}
	}
	return v.CounterVec.WithLabelValues(append([]string(nil), lvs...)...)
}

func (v *CounterVec) Delete(l Labels) bool { return v.deleter.Delete(l) }
func (v *CounterVec) DeleteLabelValues(lvs ...string) bool {
	return v.deleter.DeleteLabelValues(lvs...)
}
func (v *CounterVec) DeletePartialMatch(l Labels) int { return v.deleter.DeletePartialMatch(l) }
func (v *CounterVec) Reset()                          { v.deleter.Reset() }

// GaugeVec is client_golang's GaugeVec whose children are MicroView gauges.
type GaugeVec struct {
	*cg.GaugeVec
	deleter
}

// NewGaugeVec creates a GaugeVec with the given variable label names.
func NewGaugeVec(opts GaugeOpts, labelNames []string) *GaugeVec {
	o := newVecOpts(Opts(opts), labelNames)
	mv := newMetricVec(o, func(v []string) segmentMetric { return o.newGauge(v) })
	return &GaugeVec{&cg.GaugeVec{MetricVec: mv}, deleter{o: o, mv: mv}}
}

func (v *GaugeVec) CurryWith(l Labels) (*GaugeVec, error) {
	c, err := v.GaugeVec.CurryWith(l)
	if err != nil {
		return nil, err
	}
	return &GaugeVec{c, curried(v.deleter, c.MetricVec, l)}, nil
}

func (v *GaugeVec) MustCurryWith(l Labels) *GaugeVec {
	c, err := v.CurryWith(l)
	if err != nil {
		panic(err)
	}
	return c
}

// WithLabelValues is client_golang's, with a lock-free lookup of existing children that
// allocates nothing (client_golang's takes a read lock and allocates the variadic slice).
func (v *GaugeVec) WithLabelValues(lvs ...string) Gauge {
	if v.curry == nil {
		if m, ok := v.o.lookup(lvs).(*gauge); ok {
			return m
		}
	}
	return v.GaugeVec.WithLabelValues(append([]string(nil), lvs...)...)
}

func (v *GaugeVec) Delete(l Labels) bool                 { return v.deleter.Delete(l) }
func (v *GaugeVec) DeleteLabelValues(lvs ...string) bool { return v.deleter.DeleteLabelValues(lvs...) }
func (v *GaugeVec) DeletePartialMatch(l Labels) int      { return v.deleter.DeletePartialMatch(l) }
func (v *GaugeVec) Reset()                               { v.deleter.Reset() }

// HistogramVec is client_golang's HistogramVec whose children are MicroView histograms;
// it is an ObserverVec, and CurryWith returns one of these.
type HistogramVec struct {
	*cg.HistogramVec
	deleter
}

// NewHistogramVec creates a HistogramVec with the given variable label names.
func NewHistogramVec(opts HistogramOpts, labelNames []string) *HistogramVec {
	o := histOpts(opts, labelNames)
	mv := newMetricVec(o, func(v []string) segmentMetric { return o.newHistogram(v) })
	return &HistogramVec{&cg.HistogramVec{MetricVec: mv}, deleter{o: o, mv: mv}}
}

func (v *HistogramVec) CurryWith(l Labels) (ObserverVec, error) {
	c, err := v.HistogramVec.CurryWith(l)
	if err != nil {
		return nil, err
	}
	h := c.(*cg.HistogramVec)
	return &HistogramVec{h, curried(v.deleter, h.MetricVec, l)}, nil
}

func (v *HistogramVec) MustCurryWith(l Labels) ObserverVec {
	c, err := v.CurryWith(l)
	if err != nil {
		panic(err)
	}
	return c
}

// WithLabelValues is client_golang's, with a lock-free lookup of existing children that
// allocates nothing (client_golang's takes a read lock and allocates the variadic slice).
func (v *HistogramVec) WithLabelValues(lvs ...string) Observer {
	if v.curry == nil {
		if m, ok := v.o.lookup(lvs).(*histogram); ok {
			return m
		}
	}
	return v.HistogramVec.WithLabelValues(append([]string(nil), lvs...)...)
}

func (v *HistogramVec) Delete(l Labels) bool { return v.deleter.Delete(l) }
func (v *HistogramVec) DeleteLabelValues(lvs ...string) bool {
	return v.deleter.DeleteLabelValues(lvs...)
}
func (v *HistogramVec) DeletePartialMatch(l Labels) int { return v.deleter.DeletePartialMatch(l) }
func (v *HistogramVec) Reset()                          { v.deleter.Reset() }

// SummaryVec is client_golang's SummaryVec whose children are MicroView summaries (see
// NewSummary); it is an ObserverVec.
type SummaryVec struct {
	*cg.SummaryVec
	deleter
}

// NewSummaryVec creates a SummaryVec with the given variable label names.
func NewSummaryVec(opts SummaryOpts, labelNames []string) *SummaryVec {
	o := sumOpts(opts, labelNames)
	mv := newMetricVec(o, func(v []string) segmentMetric { return o.newHistogram(v) })
	return &SummaryVec{&cg.SummaryVec{MetricVec: mv}, deleter{o: o, mv: mv}}
}

func (v *SummaryVec) CurryWith(l Labels) (ObserverVec, error) {
	c, err := v.SummaryVec.CurryWith(l)
	if err != nil {
		return nil, err
	}
	sv := c.(*cg.SummaryVec)
	return &SummaryVec{sv, curried(v.deleter, sv.MetricVec, l)}, nil
}

func (v *SummaryVec) MustCurryWith(l Labels) ObserverVec {
	c, err := v.CurryWith(l)
	if err != nil {
		panic(err)
	}
	return c
}

// WithLabelValues is client_golang's, with a lock-free lookup of existing children that
// allocates nothing (client_golang's takes a read lock and allocates the variadic slice).
func (v *SummaryVec) WithLabelValues(lvs ...string) Observer {
	if v.curry == nil {
		if m, ok := v.o.lookup(lvs).(*histogram); ok {
			return m
		}
	}
	return v.SummaryVec.WithLabelValues(append([]string(nil), lvs...)...)
}

func (v *SummaryVec) Delete(l Labels) bool { return v.deleter.Delete(l) }
func (v *SummaryVec) DeleteLabelValues(lvs ...string) bool {
	return v.deleter.DeleteLabelValues(lvs...)
}
func (v *SummaryVec) DeletePartialMatch(l Labels) int { return v.deleter.DeletePartialMatch(l) }
func (v *SummaryVec) Reset()                          { v.deleter.Reset() }
