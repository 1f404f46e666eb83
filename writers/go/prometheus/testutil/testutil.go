// Package testutil is client_golang's testutil under the MicroView import path: it
// collects this module's metrics through their Write, which reads the values the segment
// holds (or process memory before registration).
package testutil

import (
	cgt "github.com/prometheus/client_golang/prometheus/testutil"
)

var (
	ToFloat64                     = cgt.ToFloat64
	CollectAndCount               = cgt.CollectAndCount
	GatherAndCount                = cgt.GatherAndCount
	ScrapeAndCompare              = cgt.ScrapeAndCompare
	CollectAndCompare             = cgt.CollectAndCompare
	GatherAndCompare              = cgt.GatherAndCompare
	TransactionalGatherAndCompare = cgt.TransactionalGatherAndCompare
	CollectAndLint                = cgt.CollectAndLint
	GatherAndLint                 = cgt.GatherAndLint
)
