// Command goservice is a Go service instrumented exactly as with client_golang (only the
// import paths name MicroView); the cross-language test (tests/writers/e2e.py) starts it
// with the environment and mount an Allocate gives and checks what the collector serves.
//
// Usage: goservice READY_FILE   (writes the values, creates READY_FILE, waits for SIGTERM)
package main

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"microview.io/writers/go/prometheus"
	"microview.io/writers/go/prometheus/promauto"
)

var (
	requests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_requests_total", Help: "Requests served.",
	}, []string{"route"})
	inflight = promauto.NewGauge(prometheus.GaugeOpts{Name: "svc_inflight", Help: "Requests in flight."})
	latency  = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: "svc_latency_seconds", Help: "Request latency.", Buckets: []float64{0.1, 1},
	})
)

func main() {
	if len(os.Args) != 2 {
		os.Stderr.WriteString("usage: goservice READY_FILE\n")
		os.Exit(2)
	}
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 7; i++ {
				requests.WithLabelValues("/cart").Inc()
			}
		}()
	}
	wg.Wait()
	inflight.Set(7.5)
	for _, v := range []float64{0.05, 0.05, 0.05, 0.5, 0.5, 5} {
		latency.Observe(v)
	}
	if err := os.WriteFile(os.Args[1], []byte("ready\n"), 0o644); err != nil {
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
