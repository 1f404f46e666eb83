// Package promauto mirrors client_golang's promauto with MicroView-backed metrics: the
// constructors create the metric in the segment (there is no separate registration step).
package promauto

import (
	prometheus "microview.io/writers/go/prometheus"
)

// NewCounter creates a MicroView-backed Counter.
func NewCounter(opts prometheus.CounterOpts) prometheus.Counter { return prometheus.NewCounter(opts) }

// NewCounterVec creates a MicroView-backed CounterVec.
func NewCounterVec(opts prometheus.CounterOpts, labelNames []string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(opts, labelNames)
}

// NewGauge creates a MicroView-backed Gauge.
func NewGauge(opts prometheus.GaugeOpts) prometheus.Gauge { return prometheus.NewGauge(opts) }

// NewGaugeVec creates a MicroView-backed GaugeVec.
func NewGaugeVec(opts prometheus.GaugeOpts, labelNames []string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(opts, labelNames)
}

// NewHistogram creates a MicroView-backed Histogram.
func NewHistogram(opts prometheus.HistogramOpts) prometheus.Histogram {
	return prometheus.NewHistogram(opts)
}

// NewHistogramVec creates a MicroView-backed HistogramVec.
func NewHistogramVec(opts prometheus.HistogramOpts, labelNames []string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(opts, labelNames)
}

// Factory mirrors promauto.Factory; the Registerer is accepted and not used.
type Factory struct{}

// With returns a Factory (the registerer does not matter: metrics live in the segment).
func With(prometheus.Registerer) Factory { return Factory{} }

func (Factory) NewCounter(o prometheus.CounterOpts) prometheus.Counter { return NewCounter(o) }
func (Factory) NewCounterVec(o prometheus.CounterOpts, l []string) *prometheus.CounterVec {
	return NewCounterVec(o, l)
}
func (Factory) NewGauge(o prometheus.GaugeOpts) prometheus.Gauge { return NewGauge(o) }
func (Factory) NewGaugeVec(o prometheus.GaugeOpts, l []string) *prometheus.GaugeVec {
	return NewGaugeVec(o, l)
}
func (Factory) NewHistogram(o prometheus.HistogramOpts) prometheus.Histogram { return NewHistogram(o) }
func (Factory) NewHistogramVec(o prometheus.HistogramOpts, l []string) *prometheus.HistogramVec {
	return NewHistogramVec(o, l)
}
