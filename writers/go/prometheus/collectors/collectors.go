// Package collectors is client_golang's collectors under the MicroView import path. These
// collectors compute their values when gathered, so they are served in process only (by
// promhttp on the registry they are registered with), not through the segment.
package collectors

import (
	cgc "github.com/prometheus/client_golang/prometheus/collectors"
)

type (
	GoRuntimeMetricsRule = cgc.GoRuntimeMetricsRule
	GoCollectionOption   = cgc.GoCollectionOption
	ProcessCollectorOpts = cgc.ProcessCollectorOpts
)

const (
	GoRuntimeMemStatsCollection = cgc.GoRuntimeMemStatsCollection
	GoRuntimeMetricsCollection  = cgc.GoRuntimeMetricsCollection
)

var (
	MetricsAll       = cgc.MetricsAll
	MetricsGC        = cgc.MetricsGC
	MetricsMemory    = cgc.MetricsMemory
	MetricsScheduler = cgc.MetricsScheduler
)

var (
	NewBuildInfoCollector                  = cgc.NewBuildInfoCollector
	NewDBStatsCollector                    = cgc.NewDBStatsCollector
	NewExpvarCollector                     = cgc.NewExpvarCollector
	NewGoCollector                         = cgc.NewGoCollector
	NewProcessCollector                    = cgc.NewProcessCollector
	WithGoCollections                      = cgc.WithGoCollections
	WithGoCollectorMemStatsMetricsDisabled = cgc.WithGoCollectorMemStatsMetricsDisabled
	WithGoCollectorRuntimeMetrics          = cgc.WithGoCollectorRuntimeMetrics
	WithoutGoCollectorRuntimeMetrics       = cgc.WithoutGoCollectorRuntimeMetrics
)
