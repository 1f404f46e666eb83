// Package promauto is client_golang's promauto over MicroView metrics: each constructor
// creates the metric and registers it with DefaultRegisterer (or the Factory's Registerer),
// which puts it in the segment; a nil Registerer leaves it unregistered, in process memory.
package promauto

import (
	prometheus "microview.io/writers/go/prometheus"
)

// Factory creates metrics registered with its Registerer (none when nil).
type Factory struct{ r prometheus.Registerer }

// With returns a Factory registering with r.
func With(r prometheus.Registerer) Factory { return Factory{r} }

var def = Factory{prometheus.DefaultRegisterer}

func (f Factory) reg(c prometheus.Collector) {
	if f.r != nil {
		f.r.MustRegister(c)
	}
}

// NewCounter creates and registers a Counter.
func NewCounter(o prometheus.CounterOpts) prometheus.Counter { return def.NewCounter(o) }

// NewCounterVec creates and registers a CounterVec.
func NewCounterVec(o prometheus.CounterOpts, l []string) *prometheus.CounterVec {
	return def.NewCounterVec(o, l)
}

// NewCounterFunc creates and registers a CounterFunc (served in process only).
func NewCounterFunc(o prometheus.CounterOpts, f func() float64) prometheus.CounterFunc {
	return def.NewCounterFunc(o, f)
}

// NewGauge creates and registers a Gauge.
func NewGauge(o prometheus.GaugeOpts) prometheus.Gauge { return def.NewGauge(o) }

// NewGaugeVec creates and registers a GaugeVec.
func NewGaugeVec(o prometheus.GaugeOpts, l []string) *prometheus.GaugeVec {
	return def.NewGaugeVec(o, l)
}

// NewGaugeFunc creates and registers a GaugeFunc (served in process only).
func NewGaugeFunc(o prometheus.GaugeOpts, f func() float64) prometheus.GaugeFunc {
	return def.NewGaugeFunc(o, f)
}

// NewUntypedFunc creates and registers an UntypedFunc (served in process only).
func NewUntypedFunc(o prometheus.UntypedOpts, f func() float64) prometheus.UntypedFunc {
	return def.NewUntypedFunc(o, f)
}

// NewHistogram creates and registers a Histogram.
func NewHistogram(o prometheus.HistogramOpts) prometheus.Histogram { return def.NewHistogram(o) }

// NewHistogramVec creates and registers a HistogramVec.
func NewHistogramVec(o prometheus.HistogramOpts, l []string) *prometheus.HistogramVec {
	return def.NewHistogramVec(o, l)
}

// NewSummary creates and registers a Summary.
func NewSummary(o prometheus.SummaryOpts) prometheus.Summary { return def.NewSummary(o) }

// NewSummaryVec creates and registers a SummaryVec.
func NewSummaryVec(o prometheus.SummaryOpts, l []string) *prometheus.SummaryVec {
	return def.NewSummaryVec(o, l)
}

func (f Factory) NewCounter(o prometheus.CounterOpts) prometheus.Counter {
	c := prometheus.NewCounter(o)
	f.reg(c)
	return c
}

func (f Factory) NewCounterVec(o prometheus.CounterOpts, l []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(o, l)
	f.reg(c)
	return c
}

func (f Factory) NewCounterFunc(o prometheus.CounterOpts, fn func() float64) prometheus.CounterFunc {
	c := prometheus.NewCounterFunc(o, fn)
	f.reg(c)
	return c
}

func (f Factory) NewGauge(o prometheus.GaugeOpts) prometheus.Gauge {
	c := prometheus.NewGauge(o)
	f.reg(c)
	return c
}

func (f Factory) NewGaugeVec(o prometheus.GaugeOpts, l []string) *prometheus.GaugeVec {
	c := prometheus.NewGaugeVec(o, l)
	f.reg(c)
	return c
}

func (f Factory) NewGaugeFunc(o prometheus.GaugeOpts, fn func() float64) prometheus.GaugeFunc {
	c := prometheus.NewGaugeFunc(o, fn)
	f.reg(c)
	return c
}

func (f Factory) NewUntypedFunc(o prometheus.UntypedOpts, fn func() float64) prometheus.UntypedFunc {
	c := prometheus.NewUntypedFunc(o, fn)
	f.reg(c)
	return c
}

func (f Factory) NewHistogram(o prometheus.HistogramOpts) prometheus.Histogram {
	c := prometheus.NewHistogram(o)
	f.reg(c)
	return c
}

func (f Factory) NewHistogramVec(o prometheus.HistogramOpts, l []string) *prometheus.HistogramVec {
	c := prometheus.NewHistogramVec(o, l)
	f.reg(c)
	return c
}

func (f Factory) NewSummary(o prometheus.SummaryOpts) prometheus.Summary {
	c := prometheus.NewSummary(o)
	f.reg(c)
	return c
}

func (f Factory) NewSummaryVec(o prometheus.SummaryOpts, l []string) *prometheus.SummaryVec {
	c := prometheus.NewSummaryVec(o, l)
	f.reg(c)
	return c
}
