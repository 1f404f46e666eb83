// Command writer measures client_golang update cost (ns/op) with the same
// operations, thread placements and iteration counts as bench/writer_bench.c.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

const valuesLen = 1024

var values [valuesLen]float64

type metrics struct {
	c [2]prometheus.Counter
	g [2]prometheus.Gauge
	h [2]prometheus.Observer
}

func loop(op string, m *metrics, k int, n int) {
	switch op {
	case "counter_inc":
		c := m.c[k]
		for i := 0; i < n; i++ {
			c.Inc()
		}
	case "counter_add":
		c := m.c[k]
		for i := 0; i < n; i++ {
			c.Add(3)
		}
	case "gauge_set":
		g := m.g[k]
		for i := 0; i < n; i++ {
			g.Set(float64(i))
		}
	case "gauge_add":
		g := m.g[k]
		for i := 0; i < n; i++ {
			g.Add(1)
		}
	case "histogram_observe":
		h := m.h[k]
		for i := 0; i < n; i++ {
			h.Observe(values[i&(valuesLen-1)])
		}
	}
}

// round runs n iterations on each of `threads` goroutines (each locked to an
// OS thread) and returns the slowest goroutine's elapsed time.
func round(op string, m *metrics, mode string, n int) time.Duration {
	threads := 1
	if mode != "1t" {
		threads = 2
	}
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	elapsed := make([]time.Duration, threads)
	for t := 0; t < threads; t++ {
		k := 0
		if t == 1 && mode == "2t_diff" {
			k = 1
		}
		ready.Add(1)
		done.Add(1)
		go func(t, k int) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer done.Done()
			ready.Done()
			<-start
			t0 := time.Now()
			loop(op, m, k, n)
			elapsed[t] = time.Since(t0)
		}(t, k)
	}
	ready.Wait()
	close(start)
	done.Wait()
	worst := elapsed[0]
	for _, e := range elapsed {
		if e > worst {
			worst = e
		}
	}
	return worst
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return math.NaN()
	}
	return d.GetCounter().GetValue()
}

func main() {
	iters := flag.Int("iters", 50000000, "iterations per thread for counters and gauges")
	histIters := flag.Int("hist-iters", 20000000, "iterations per thread for histograms")
	runs := flag.Int("runs", 5, "measured rounds; the median is printed")
	quick := flag.Bool("quick", false, "5M/2M iterations, 3 runs")
	onlyOp := flag.String("op", "", "run only this operation")
	flag.Parse()
	if *quick {
		*iters, *histIters, *runs = 5000000, 2000000, 3
	}
	for j := range values {
		values[j] = math.Exp2(float64(j%64) * 17.0 / 64.0)
	}

	reg := prometheus.NewRegistry()
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_counter_total", Help: "bench"}, []string{"id"})
	gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bench_gauge", Help: "bench"}, []string{"id"})
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bench_seconds", Help: "bench",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16)}, []string{"id"})
	reg.MustRegister(cv, gv, hv)
	var m metrics
	for k, id := range []string{"0", "1"} {
		m.c[k] = cv.WithLabelValues(id)
		m.g[k] = gv.WithLabelValues(id)
		m.h[k] = hv.WithLabelValues(id)
	}

	fmt.Printf("# client_golang writer GOMAXPROCS=%d iters=%d hist_iters=%d runs=%d\n",
		runtime.GOMAXPROCS(0), *iters, *histIters, *runs)
	failed := false
	ops := []string{"counter_inc", "counter_add", "counter_add_local", "gauge_set", "gauge_add", "histogram_observe"}
	for _, op := range ops {
		if *onlyOp != "" && *onlyOp != op {
			continue
		}
		for _, mode := range []string{"1t", "2t_same", "2t_diff"} {
			if op == "counter_add_local" {
				fmt.Printf("impl=client_golang op=%s mode=%s skipped=1 reason=no_equivalent\n", op, mode)
				continue
			}
			n := *iters
			if op == "histogram_observe" {
				n = *histIters
			}
			threads := 1
			if mode != "1t" {
				threads = 2
			}
			w := n / 10
			if w < 1 {
				w = 1
			}
			round(op, &m, mode, w)
			res := make([]float64, *runs)
			for r := 0; r < *runs; r++ {
				before := counterValue(m.c[0])
				d := round(op, &m, mode, n)
				res[r] = float64(d.Nanoseconds()) / float64(n)
				if op == "counter_inc" || op == "counter_add" {
					step := 1.0
					if op == "counter_add" {
						step = 3
					}
					want := float64(n) * step
					if mode == "2t_same" {
						want *= 2
					}
					if got := counterValue(m.c[0]) - before; got != want {
						fmt.Fprintf(os.Stderr, "writer: %s %s lost updates: %v != %v\n", op, mode, got, want)
						failed = true
					}
				}
			}
			sort.Float64s(res)
			med := res[len(res)/2]
			if len(res)%2 == 0 {
				med = (res[len(res)/2-1] + res[len(res)/2]) / 2
			}
			fmt.Printf("impl=client_golang op=%s mode=%s threads=%d iters=%d runs=%d ns_per_op=%.2f min=%.2f max=%.2f mops_total=%.1f\n",
				op, mode, threads, n, *runs, med, res[0], res[len(res)-1], float64(threads)*1e3/med)
		}
	}
	if failed {
		os.Exit(1)
	}
}
