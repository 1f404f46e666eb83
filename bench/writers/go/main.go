// Command writers measures the MicroView Go writer's update cost (ns/op) with the operations,
// thread placements and iteration counts of bench/writer_bench.c and the client_golang peer
// (bench/peers/go/writer), for two front ends:
//
//	impl=microview_go       the native API (microview.io/writers/go)
//	impl=microview_go_prom  the client_golang drop-in (microview.io/writers/go/prometheus),
//	                        called through client_golang's Counter/Gauge/Observer interfaces
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"

	microview "microview.io/writers/go"
	"microview.io/writers/go/prometheus"
)

const valuesLen = 1024

var values [valuesLen]float64

// ops is one front end's three slots per kind: [0] shared, [1] neighbour slot, [2] 64 bytes on.
type ops struct {
	inc, add [3]func(n int)
	gset     [3]func(n int)
	gadd     [3]func(n int)
	observe  [3]func(n int)
	value    func() uint64 // counter slot 0
}

func nativeOps(s *microview.Segment) *ops {
	o := &ops{}
	var cs [3]microview.Counter
	var gs [3]microview.Gauge
	var hs [3]*microview.Histogram
	bounds, _ := microview.ExponentialBuckets(1, 2, 16)
	mustc := func(name string, ls ...microview.Label) microview.Counter {
		c, err := s.NewCounter(microview.Opts{Name: name, Help: "bench", Labels: ls})
		if err != nil {
			panic(err)
		}
		return c
	}
	for i := 0; i < 3; i++ {
		if i == 2 {
			for f := 0; f < 7; f++ {
				mustc(fmt.Sprintf("bench_pad_%d", f))
			}
		}
		cs[i] = mustc("bench_counter_total", microview.Label{Key: "id", Value: fmt.Sprint(i)})
	}
	for i := 0; i < 3; i++ {
		if i == 2 {
			for f := 7; f < 14; f++ {
				mustc(fmt.Sprintf("bench_pad_%d", f))
			}
		}
		g, err := s.NewGauge(microview.Opts{Name: "bench_gauge", Help: "bench", Labels: []microview.Label{{Key: "id", Value: fmt.Sprint(i)}}})
		if err != nil {
			panic(err)
		}
		gs[i] = g
	}
	for i := 0; i < 3; i++ {
		h, err := s.NewHistogram(microview.Opts{Name: "bench_seconds", Help: "bench", Labels: []microview.Label{{Key: "id", Value: fmt.Sprint(i)}}}, bounds)
		if err != nil {
			panic(err)
		}
		hs[i] = h
	}
	for i := 0; i < 3; i++ {
		c, g, h := cs[i], gs[i], hs[i]
		o.inc[i] = func(n int) {
			for j := 0; j < n; j++ {
				c.Inc()
			}
		}
		o.add[i] = func(n int) {
			for j := 0; j < n; j++ {
				c.Add(3)
			}
		}
		o.gset[i] = func(n int) {
			for j := 0; j < n; j++ {
				g.Set(float64(j))
			}
		}
		o.gadd[i] = func(n int) {
			for j := 0; j < n; j++ {
				g.Add(1)
			}
		}
		o.observe[i] = func(n int) {
			for j := 0; j < n; j++ {
				h.Observe(values[j&(valuesLen-1)])
			}
		}
	}
	o.value = cs[0].Value
	return o
}

func promOps(s *microview.Segment) *ops {
	prometheus.SetSegment(s)
	o := &ops{}
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_prom_counter_total", Help: "bench"}, []string{"id"})
	gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bench_prom_gauge", Help: "bench"}, []string{"id"})
	hv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bench_prom_seconds", Help: "bench",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16)}, []string{"id"})
	var cs [3]prometheus.Counter
	var gs [3]prometheus.Gauge
	var hs [3]prometheus.Observer
	for i := 0; i < 3; i++ {
		if i == 2 {
			for f := 0; f < 7; f++ {
				prometheus.NewCounter(prometheus.CounterOpts{Name: fmt.Sprintf("bench_prom_pad_%d", f)})
			}
		}
		cs[i] = cv.WithLabelValues(fmt.Sprint(i))
	}
	for i := 0; i < 3; i++ {
		if i == 2 {
			for f := 7; f < 14; f++ {
				prometheus.NewCounter(prometheus.CounterOpts{Name: fmt.Sprintf("bench_prom_pad_%d", f)})
			}
		}
		gs[i] = gv.WithLabelValues(fmt.Sprint(i))
	}
	for i := 0; i < 3; i++ {
		hs[i] = hv.WithLabelValues(fmt.Sprint(i))
	}
	for i := 0; i < 3; i++ {
		c, g, h := cs[i], gs[i], hs[i]
		o.inc[i] = func(n int) {
			for j := 0; j < n; j++ {
				c.Inc()
			}
		}
		o.add[i] = func(n int) {
			for j := 0; j < n; j++ {
				c.Add(3)
			}
		}
		o.gset[i] = func(n int) {
			for j := 0; j < n; j++ {
				g.Set(float64(j))
			}
		}
		o.gadd[i] = func(n int) {
			for j := 0; j < n; j++ {
				g.Add(1)
			}
		}
		o.observe[i] = func(n int) {
			for j := 0; j < n; j++ {
				h.Observe(values[j&(valuesLen-1)])
			}
		}
	}
	c0, err := s.NewCounter(microview.Opts{Name: "bench_prom_counter_total", Help: "bench", Labels: []microview.Label{{Key: "id", Value: "0"}}})
	if err != nil {
		panic(err)
	}
	o.value = c0.Value
	return o
}

func loops(o *ops, op string) [3]func(int) {
	switch op {
	case "counter_inc":
		return o.inc
	case "counter_add":
		return o.add
	case "gauge_set":
		return o.gset
	case "gauge_add":
		return o.gadd
	}
	return o.observe
}

// round runs n iterations on each of the mode's goroutines (each locked to an OS thread)
// and returns the slowest one's elapsed time.
func round(fs [3]func(int), mode string, n int) time.Duration {
	slots := map[string][]int{"1t": {0}, "2t_same": {0, 0}, "2t_diff": {0, 1}, "2t_diff_padded": {0, 2}}[mode]
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	elapsed := make([]time.Duration, len(slots))
	for t, k := range slots {
		ready.Add(1)
		done.Add(1)
		go func(t int, f func(int)) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer done.Done()
			ready.Done()
			<-start
			t0 := time.Now()
			f(n)
			elapsed[t] = time.Since(t0)
		}(t, fs[k])
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

func main() {
	iters := flag.Int("iters", 50000000, "iterations per thread for counters and gauges")
	histIters := flag.Int("hist-iters", 20000000, "iterations per thread for histograms")
	runs := flag.Int("runs", 5, "measured rounds; the median is printed")
	quick := flag.Bool("quick", false, "5M/2M iterations, 3 runs")
	onlyOp := flag.String("op", "", "run only this operation")
	onlyImpl := flag.String("impl", "", "run only this front end (microview_go or microview_go_prom)")
	flag.Parse()
	if *quick {
		*iters, *histIters, *runs = 5000000, 2000000, 3
	}
	for j := range values {
		values[j] = math.Exp2(float64(j%64) * 17.0 / 64.0)
	}
	dir, err := os.MkdirTemp("", "mvbench-go")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "segment")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		panic(err)
	}
	s, err := microview.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writers bench:", err)
		os.Exit(1)
	}
	impls := []struct {
		name string
		o    *ops
	}{{"microview_go", nativeOps(s)}, {"microview_go_prom", promOps(s)}}

	fmt.Printf("# microview Go writer GOMAXPROCS=%d iters=%d hist_iters=%d runs=%d\n",
		runtime.GOMAXPROCS(0), *iters, *histIters, *runs)
	failed := false
	for _, op := range []string{"counter_inc", "counter_add", "counter_add_local", "gauge_set", "gauge_add", "histogram_observe"} {
		if *onlyOp != "" && *onlyOp != op {
			continue
		}
		for _, im := range impls {
			if *onlyImpl != "" && *onlyImpl != im.name {
				continue
			}
			for _, mode := range []string{"1t", "2t_same", "2t_diff", "2t_diff_padded"} {
				if op == "counter_add_local" {
					fmt.Printf("impl=%s op=%s mode=%s skipped=1 reason=no_equivalent\n", im.name, op, mode)
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
				fs := loops(im.o, op)
				w := n / 10
				if w < 1 {
					w = 1
				}
				round(fs, mode, w)
				res := make([]float64, *runs)
				for r := 0; r < *runs; r++ {
					before := im.o.value()
					d := round(fs, mode, n)
					res[r] = float64(d.Nanoseconds()) / float64(n)
					if op == "counter_inc" || op == "counter_add" {
						want := uint64(n)
						if op == "counter_add" {
							want *= 3
						}
						if mode == "2t_same" {
							want *= 2
						}
						if got := im.o.value() - before; got != want {
							fmt.Fprintf(os.Stderr, "writers bench: %s %s %s lost updates: %d != %d\n", im.name, op, mode, got, want)
							failed = true
						}
					}
				}
				sort.Float64s(res)
				med := res[len(res)/2]
				if len(res)%2 == 0 {
					med = (res[len(res)/2-1] + res[len(res)/2]) / 2
				}
				fmt.Printf("impl=%s op=%s mode=%s threads=%d iters=%d runs=%d ns_per_op=%.2f min=%.2f max=%.2f mops_total=%.1f\n",
					im.name, op, mode, threads, n, *runs, med, res[0], res[len(res)-1], float64(threads)*1e3/med)
			}
		}
	}
	if failed {
		os.Exit(1)
	}
}
