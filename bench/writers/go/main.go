// Command writers measures the MicroView Go writer's update cost (ns/op) with the operations,
// thread placements and iteration counts of bench/writer_bench.c and the client_golang peer
// (bench/peers/go/writer), for two front ends:
//
//	impl=microview_go       the native API (microview.io/writers/go)
//	impl=microview_go_prom  the client_golang drop-in (microview.io/writers/go/prometheus),
//	                        called through client_golang's Counter/Gauge/Observer interfaces
//	impl=client_golang_same_run  client_golang v1.14.0 itself, built by the same code in the
//	                        same process, the peer of every drop-in row (also the ops the
//	                        native API has no equivalent for: fractional Add, WithLabelValues
//	                        on every call, Summary)
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	cg "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	// client_golang-shaped front ends only (nil for the native API):
	addFrac, wlvInc, wlvObserve, summary [3]func(n int)
	value                                func() uint64 // counter slot 0
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

// front is one client_golang-shaped front end: client_golang itself or the drop-in, whose
// vector types are client_golang's (aliases), so one builder measures both.
type front struct {
	reg      cg.Registerer
	counterV func(cg.CounterOpts, []string) (*cg.CounterVec, func(string) cg.Counter)
	gaugeV   func(cg.GaugeOpts, []string) *cg.GaugeVec
	// histV also returns the front end's own WithLabelValues, called directly (not through
	// an interface, which would make every variadic slice escape in both front ends)
	histV     func(cg.HistogramOpts, []string) (*cg.HistogramVec, func(string) cg.Observer)
	summaryV  func(cg.SummaryOpts, []string) *cg.SummaryVec
	counter   func(cg.CounterOpts) cg.Counter
	readFirst func(cv *cg.CounterVec) func() uint64
}

func promOps(f front) *ops {
	o := &ops{}
	cv, cwlv := f.counterV(cg.CounterOpts{Name: "bench_prom_counter_total", Help: "bench"}, []string{"id"})
	gv := f.gaugeV(cg.GaugeOpts{Name: "bench_prom_gauge", Help: "bench"}, []string{"id"})
	hv, hwlv := f.histV(cg.HistogramOpts{Name: "bench_prom_seconds", Help: "bench",
		Buckets: cg.ExponentialBuckets(1, 2, 16)}, []string{"id"})
	sv := f.summaryV(cg.SummaryOpts{Name: "bench_prom_summary_seconds", Help: "bench",
		Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}}, []string{"id"})
	f.reg.MustRegister(cv, gv, hv, sv)
	var cs [3]cg.Counter
	var gs [3]cg.Gauge
	var hs, ss [3]cg.Observer
	for i := 0; i < 3; i++ {
		if i == 2 {
			for k := 0; k < 7; k++ {
				f.reg.MustRegister(f.counter(cg.CounterOpts{Name: fmt.Sprintf("bench_prom_pad_%d", k), Help: "pad"}))
			}
		}
		cs[i] = cv.WithLabelValues(fmt.Sprint(i))
	}
	for i := 0; i < 3; i++ {
		if i == 2 {
			for k := 7; k < 14; k++ {
				f.reg.MustRegister(f.counter(cg.CounterOpts{Name: fmt.Sprintf("bench_prom_pad_%d", k), Help: "pad"}))
			}
		}
		gs[i] = gv.WithLabelValues(fmt.Sprint(i))
	}
	for i := 0; i < 3; i++ {
		hs[i] = hv.WithLabelValues(fmt.Sprint(i))
		ss[i] = sv.WithLabelValues(fmt.Sprint(i))
	}
	for i := 0; i < 3; i++ {
		c, g, h, sm, id := cs[i], gs[i], hs[i], ss[i], fmt.Sprint(i)
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
		o.addFrac[i] = func(n int) {
			for j := 0; j < n; j++ {
				c.Add(0.25)
			}
		}
		o.wlvInc[i] = func(n int) {
			for j := 0; j < n; j++ {
				cwlv(id).Inc()
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
		o.wlvObserve[i] = func(n int) {
			for j := 0; j < n; j++ {
				hwlv(id).Observe(values[j&(valuesLen-1)])
			}
		}
		o.summary[i] = func(n int) {
			for j := 0; j < n; j++ {
				sm.Observe(values[j&(valuesLen-1)])
			}
		}
	}
	o.value = f.readFirst(cv)
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
	case "counter_add_frac":
		return o.addFrac
	case "counter_wlv_inc":
		return o.wlvInc
	case "histogram_wlv_observe":
		return o.wlvObserve
	case "summary_observe":
		return o.summary
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

// allocsPerOp is the heap allocations of one call of f's operation (one goroutine).
func allocsPerOp(f func(int)) float64 {
	const n = 10000
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f(n)
	runtime.ReadMemStats(&b)
	return float64(b.Mallocs-a.Mallocs) / n
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
	prometheus.SetSegment(s)
	// The drop-in's vectors embed client_golang's: the builder takes the embedded vector
	// for registration and the rest, and the drop-in's own WithLabelValues.
	dropin := front{reg: prometheus.NewRegistry(),
		counterV: func(o cg.CounterOpts, l []string) (*cg.CounterVec, func(string) cg.Counter) {
			v := prometheus.NewCounterVec(o, l)
			return v.CounterVec, func(id string) cg.Counter { return v.WithLabelValues(id) }
		},
		gaugeV: func(o cg.GaugeOpts, l []string) *cg.GaugeVec { return prometheus.NewGaugeVec(o, l).GaugeVec },
		histV: func(o cg.HistogramOpts, l []string) (*cg.HistogramVec, func(string) cg.Observer) {
			v := prometheus.NewHistogramVec(o, l)
			return v.HistogramVec, func(id string) cg.Observer { return v.WithLabelValues(id) }
		},
		summaryV: func(o cg.SummaryOpts, l []string) *cg.SummaryVec { return prometheus.NewSummaryVec(o, l).SummaryVec },
		counter:  prometheus.NewCounter,
		readFirst: func(*cg.CounterVec) func() uint64 {
			c, err := s.NewCounterF(microview.Opts{Name: "bench_prom_counter_total", Help: "bench", Labels: []microview.Label{{Key: "id", Value: "0"}}})
			if err != nil {
				panic(err)
			}
			return func() uint64 { return uint64(c.Value()) }
		}}
	peer := front{reg: cg.NewRegistry(),
		counterV: func(o cg.CounterOpts, l []string) (*cg.CounterVec, func(string) cg.Counter) {
			v := cg.NewCounterVec(o, l)
			return v, func(id string) cg.Counter { return v.WithLabelValues(id) }
		},
		gaugeV: cg.NewGaugeVec,
		histV: func(o cg.HistogramOpts, l []string) (*cg.HistogramVec, func(string) cg.Observer) {
			v := cg.NewHistogramVec(o, l)
			return v, func(id string) cg.Observer { return v.WithLabelValues(id) }
		},
		summaryV: cg.NewSummaryVec, counter: cg.NewCounter,
		readFirst: func(cv *cg.CounterVec) func() uint64 {
			c := cv.WithLabelValues("0")
			return func() uint64 { return uint64(testutil.ToFloat64(c)) }
		}}
	impls := []struct {
		name string
		o    *ops
	}{{"microview_go", nativeOps(s)}, {"microview_go_prom", promOps(dropin)}, {"client_golang_same_run", promOps(peer)}}

	fmt.Printf("# microview Go writer GOMAXPROCS=%d iters=%d hist_iters=%d runs=%d\n",
		runtime.GOMAXPROCS(0), *iters, *histIters, *runs)
	failed := false
	for _, op := range []string{"counter_inc", "counter_add", "counter_add_local", "gauge_set", "gauge_add", "histogram_observe",
		"counter_add_frac", "counter_wlv_inc", "histogram_wlv_observe", "summary_observe"} {
		if *onlyOp != "" && *onlyOp != op {
			continue
		}
		// The front ends' rounds alternate (run r of each, then run r+1 of each), so a
		// machine whose load changes during the benchmark weighs on all of them alike.
		for _, mode := range []string{"1t", "2t_same", "2t_diff", "2t_diff_padded"} {
			type job struct {
				name string
				o    *ops
				fs   [3]func(int)
				res  []float64
			}
			var jobs []*job
			for _, im := range impls {
				if *onlyImpl != "" && *onlyImpl != im.name {
					continue
				}
				fs := loops(im.o, op)
				if op == "counter_add_local" || fs[0] == nil {
					fmt.Printf("impl=%s op=%s mode=%s skipped=1 reason=no_equivalent\n", im.name, op, mode)
					continue
				}
				jobs = append(jobs, &job{name: im.name, o: im.o, fs: fs})
			}
			n := *iters
			if strings.HasPrefix(op, "histogram") || strings.HasPrefix(op, "summary") || strings.Contains(op, "wlv") {
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
			for _, j := range jobs {
				round(j.fs, mode, w)
			}
			for r := 0; r < *runs; r++ {
				for _, j := range jobs {
					before := j.o.value()
					d := round(j.fs, mode, n)
					j.res = append(j.res, float64(d.Nanoseconds())/float64(n))
					if op == "counter_inc" || op == "counter_add" || op == "counter_wlv_inc" {
						want := uint64(n)
						if op == "counter_add" {
							want *= 3
						}
						if mode == "2t_same" {
							want *= 2
						}
						if got := j.o.value() - before; got != want {
							fmt.Fprintf(os.Stderr, "writers bench: %s %s %s lost updates: %d != %d\n", j.name, op, mode, got, want)
							failed = true
						}
					}
				}
			}
			for _, j := range jobs {
				res := j.res
				sort.Float64s(res)
				med := res[len(res)/2]
				if len(res)%2 == 0 {
					med = (res[len(res)/2-1] + res[len(res)/2]) / 2
				}
				fmt.Printf("impl=%s op=%s mode=%s threads=%d iters=%d runs=%d ns_per_op=%.2f min=%.2f max=%.2f mops_total=%.1f allocs_per_op=%.2f\n",
					j.name, op, mode, threads, n, *runs, med, res[0], res[len(res)-1], float64(threads)*1e3/med, allocsPerOp(j.fs[0]))
			}
		}
	}
	if failed {
		os.Exit(1)
	}
}
