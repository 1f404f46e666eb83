// Package promhttp is client_golang's promhttp under the MicroView import path. The
// Instrument* middleware takes this module's vectors (they are client_golang's types), so
// it counts and times requests into the segment; Handler and HandlerFor serve a registry
// in process, as before (MicroView's collector does not need them). The handler's own
// metrics (promhttp_metric_handler_*) are MicroView metrics too: they are registered here
// first, and client_golang's handler adopts them through AlreadyRegisteredError, as it
// does for any handler created twice.
package promhttp

import (
	"net/http"

	cgh "github.com/prometheus/client_golang/prometheus/promhttp"

	"microview.io/writers/go/prometheus"
)

// HandlerFor is client_golang's HandlerFor; with opts.Registry set, its error counter is
// a MicroView metric.
func HandlerFor(reg prometheus.Gatherer, opts HandlerOpts) http.Handler {
	preregisterErrors(opts.Registry)
	return cgh.HandlerFor(reg, opts)
}

// HandlerForTransactional is client_golang's HandlerForTransactional, like HandlerFor.
func HandlerForTransactional(reg prometheus.TransactionalGatherer, opts HandlerOpts) http.Handler {
	preregisterErrors(opts.Registry)
	return cgh.HandlerForTransactional(reg, opts)
}

// Handler serves prometheus.DefaultGatherer (client_golang's default registry, which
// holds this module's metrics too), instrumented as client_golang's Handler.
func Handler() http.Handler {
	return InstrumentMetricHandler(prometheus.DefaultRegisterer,
		HandlerFor(prometheus.DefaultGatherer, HandlerOpts{}))
}

// InstrumentMetricHandler is client_golang's, with its scrape counter and in-flight gauge
// as MicroView metrics.
func InstrumentMetricHandler(reg prometheus.Registerer, handler http.Handler) http.Handler {
	cnt := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promhttp_metric_handler_requests_total",
		Help: "Total number of scrapes by HTTP status code.",
	}, []string{"code"})
	cnt.WithLabelValues("200")
	cnt.WithLabelValues("500")
	cnt.WithLabelValues("503")
	// Registered as client_golang's type: client_golang's handler adopts the existing
	// collector through AlreadyRegisteredError with a type assertion to its CounterVec.
	_ = reg.Register(cnt.CounterVec)
	_ = reg.Register(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "promhttp_metric_handler_requests_in_flight",
		Help: "Current number of scrapes being served.",
	}))
	return cgh.InstrumentMetricHandler(reg, handler)
}

func preregisterErrors(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promhttp_metric_handler_errors_total",
		Help: "Total number of internal errors encountered by the promhttp metric handler.",
	}, []string{"cause"})
	c.WithLabelValues("gathering")
	c.WithLabelValues("encoding")
	_ = reg.Register(c.CounterVec)
}

type (
	HandlerOpts          = cgh.HandlerOpts
	HandlerErrorHandling = cgh.HandlerErrorHandling
	InstrumentTrace      = cgh.InstrumentTrace
	Logger               = cgh.Logger
	Option               = cgh.Option
	RoundTripperFunc     = cgh.RoundTripperFunc
)

const (
	HTTPErrorOnError = cgh.HTTPErrorOnError
	ContinueOnError  = cgh.ContinueOnError
	PanicOnError     = cgh.PanicOnError
)

var (
	InstrumentHandlerDuration          = cgh.InstrumentHandlerDuration
	InstrumentHandlerInFlight          = cgh.InstrumentHandlerInFlight
	InstrumentHandlerRequestSize       = cgh.InstrumentHandlerRequestSize
	InstrumentHandlerResponseSize      = cgh.InstrumentHandlerResponseSize
	InstrumentHandlerTimeToWriteHeader = cgh.InstrumentHandlerTimeToWriteHeader
	InstrumentRoundTripperDuration     = cgh.InstrumentRoundTripperDuration
	InstrumentRoundTripperInFlight     = cgh.InstrumentRoundTripperInFlight
	InstrumentRoundTripperTrace        = cgh.InstrumentRoundTripperTrace
	WithExemplarFromContext            = cgh.WithExemplarFromContext
	WithExtraMethods                   = cgh.WithExtraMethods
)

// InstrumentHandlerCounter is client_golang's, for this module's CounterVec.
func InstrumentHandlerCounter(counter *prometheus.CounterVec, next http.Handler, opts ...Option) http.HandlerFunc {
	return cgh.InstrumentHandlerCounter(counter.CounterVec, next, opts...)
}

// InstrumentRoundTripperCounter is client_golang's, for this module's CounterVec.
func InstrumentRoundTripperCounter(counter *prometheus.CounterVec, next http.RoundTripper, opts ...Option) RoundTripperFunc {
	return cgh.InstrumentRoundTripperCounter(counter.CounterVec, next, opts...)
}
