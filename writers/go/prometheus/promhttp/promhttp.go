// Package promhttp is client_golang's promhttp under the MicroView import path. The
// Instrument* middleware takes this module's vectors (they are client_golang's types), so
// it counts and times requests into the segment; Handler and HandlerFor serve a registry
// in process, as before (MicroView's collector does not need them).
package promhttp

import (
	cgh "github.com/prometheus/client_golang/prometheus/promhttp"
)

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
	Handler                            = cgh.Handler
	HandlerFor                         = cgh.HandlerFor
	HandlerForTransactional            = cgh.HandlerForTransactional
	InstrumentMetricHandler            = cgh.InstrumentMetricHandler
	InstrumentHandlerCounter           = cgh.InstrumentHandlerCounter
	InstrumentHandlerDuration          = cgh.InstrumentHandlerDuration
	InstrumentHandlerInFlight          = cgh.InstrumentHandlerInFlight
	InstrumentHandlerRequestSize       = cgh.InstrumentHandlerRequestSize
	InstrumentHandlerResponseSize      = cgh.InstrumentHandlerResponseSize
	InstrumentHandlerTimeToWriteHeader = cgh.InstrumentHandlerTimeToWriteHeader
	InstrumentRoundTripperCounter      = cgh.InstrumentRoundTripperCounter
	InstrumentRoundTripperDuration     = cgh.InstrumentRoundTripperDuration
	InstrumentRoundTripperInFlight     = cgh.InstrumentRoundTripperInFlight
	InstrumentRoundTripperTrace        = cgh.InstrumentRoundTripperTrace
	WithExemplarFromContext            = cgh.WithExemplarFromContext
	WithExtraMethods                   = cgh.WithExtraMethods
)
