// Registries: client_golang's Registry, which also moves the MicroView metrics registered
// with it into the segment.

package prometheus

import (
	cg "github.com/prometheus/client_golang/prometheus"
)

// Registry is client_golang's Registry (embedded: Gather, the registration rules and their
// errors are client_golang's). Registering a MicroView metric or vector also moves its
// value into the segment, under the name and labels the registerers between (Wrap*) give
// it; any other Collector is served only in process (promhttp on this Registry).
type Registry struct {
	*cg.Registry
}

// NewRegistry creates a Registry, as client_golang's NewRegistry.
func NewRegistry() *Registry { return &Registry{cg.NewRegistry()} }

// NewPedanticRegistry creates a Registry that checks every collected metric against its
// descriptors, as client_golang's NewPedanticRegistry.
func NewPedanticRegistry() *Registry { return &Registry{cg.NewPedanticRegistry()} }

// The default registry is client_golang's own (with its Go and process collectors), so a
// process that still uses client_golang somewhere has one registry, and
// promhttp.Handler() from either package serves all of it.
var defaultRegistry = &Registry{cg.DefaultRegisterer.(*cg.Registry)}

var (
	DefaultRegisterer Registerer = defaultRegistry
	DefaultGatherer   Gatherer   = defaultRegistry
)

// Register registers c with client_golang's rules (AlreadyRegisteredError, inconsistent
// descriptors, ...) and then binds the MicroView metrics in it to the segment. An error
// from the segment (invalid name, a type or bucket conflict with a series of the segment)
// unregisters c again and is returned.
func (r *Registry) Register(c Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	if err := bindCollector(c, binding{}); err != nil {
		r.Registry.Unregister(c)
		return err
	}
	return nil
}

// MustRegister registers each collector and panics at the first error.
func (r *Registry) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister removes c from the registry and deletes its series from the segment
// (tombstones, docs/segment-format.md section 6.6). The metric keeps its value in
// process; registering it again creates its series anew.
func (r *Registry) Unregister(c Collector) bool {
	if !r.Registry.Unregister(c) {
		return false
	}
	releaseCollector(c)
	return true
}

// bindCollector binds c (a MicroView metric, vector, or one wrapped by Wrap*) under b.
func bindCollector(c Collector, b binding) error {
	switch v := c.(type) {
	case *wrapped:
		return bindCollector(v.inner, v.b.then(b))
	case segmentMetric:
		return v.bind(b)
	}
	if mv := metricVecOf(c); mv != nil {
		if o, ok := vecs.Load(mv); ok {
			return o.(*vecOpts).bindVec(b)
		}
	}
	return nil
}

func releaseCollector(c Collector) {
	switch v := c.(type) {
	case *wrapped:
		releaseCollector(v.inner)
		return
	case segmentMetric:
		v.tombstone()
		return
	}
	if mv := metricVecOf(c); mv != nil {
		if o, ok := vecs.Load(mv); ok {
			o.(*vecOpts).releaseVec()
		}
	}
}

func metricVecOf(c Collector) *MetricVec {
	switch v := c.(type) {
	case *CounterVec:
		return v.MetricVec
	case *GaugeVec:
		return v.MetricVec
	case *HistogramVec:
		return v.MetricVec
	case *SummaryVec:
		return v.MetricVec
	case *cg.CounterVec:
		return v.MetricVec
	case *cg.GaugeVec:
		return v.MetricVec
	case *cg.HistogramVec:
		return v.MetricVec
	case *cg.SummaryVec:
		return v.MetricVec
	case *MetricVec:
		return v
	}
	return nil
}

// Register registers c with DefaultRegisterer.
func Register(c Collector) error { return DefaultRegisterer.Register(c) }

// MustRegister registers cs with DefaultRegisterer and panics at the first error.
func MustRegister(cs ...Collector) { DefaultRegisterer.MustRegister(cs...) }

// Unregister removes c from DefaultRegisterer.
func Unregister(c Collector) bool { return DefaultRegisterer.Unregister(c) }

// ---- Wrap* ------------------------------------------------------------------------

// wrapped is a collector registered through a wrapping registerer: in process it is
// client_golang's wrapping collector; for the segment it is inner renamed by b.
type wrapped struct {
	Collector // client_golang's wrapped collector: Describe and Collect
	inner     Collector
	b         binding
}

type wrappingRegisterer struct {
	inner Registerer
	b     binding
}

// capture is the Registerer client_golang's Wrap* functions hand their wrapped collector
// to.
type capture struct{ c Collector }

func (k *capture) Register(c Collector) error { k.c = c; return nil }
func (k *capture) MustRegister(cs ...Collector) {
	for _, c := range cs {
		k.c = c
	}
}
func (k *capture) Unregister(c Collector) bool { k.c = c; return true }

func (w *wrappingRegisterer) wrap(c Collector) *wrapped {
	k := &capture{}
	if w.b.prefix != "" {
		cg.WrapRegistererWithPrefix(w.b.prefix, k).Register(c)
	} else {
		cg.WrapRegistererWith(w.b.labels, k).Register(c)
	}
	return &wrapped{Collector: k.c, inner: c, b: w.b}
}

func (w *wrappingRegisterer) Register(c Collector) error {
	if w.inner == nil {
		return nil
	}
	err := w.inner.Register(w.wrap(c))
	if are, ok := err.(AlreadyRegisteredError); ok {
		are.ExistingCollector = unwrap(are.ExistingCollector)
		are.NewCollector = c
		return are
	}
	return err
}

func unwrap(c Collector) Collector {
	for {
		w, ok := c.(*wrapped)
		if !ok {
			return c
		}
		c = w.inner
	}
}

func (w *wrappingRegisterer) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := w.Register(c); err != nil {
			panic(err)
		}
	}
}

func (w *wrappingRegisterer) Unregister(c Collector) bool {
	if w.inner == nil {
		return false
	}
	return w.inner.Unregister(w.wrap(c))
}

// WrapRegistererWith returns a Registerer that adds labels to every metric registered
// through it, as client_golang's: in process and in the segment.
func WrapRegistererWith(labels Labels, reg Registerer) Registerer {
	ls := Labels{}
	for k, v := range labels {
		ls[k] = v
	}
	return &wrappingRegisterer{inner: reg, b: binding{labels: ls}}
}

// WrapRegistererWithPrefix returns a Registerer that prefixes the name of every metric
// registered through it, as client_golang's: in process and in the segment.
func WrapRegistererWithPrefix(prefix string, reg Registerer) Registerer {
	return &wrappingRegisterer{inner: reg, b: binding{prefix: prefix}}
}
