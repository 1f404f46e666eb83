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
	"strings"
	"sync"
	"syscall"
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

// chunk is one timed piece of a thread's loop (ns since the round's base), as in
// bench/writer_bench.c: clean when the thread's context-switch counts did not move across it.
type chunk struct {
	t0, t1 int64
	ops    int
	clean  bool
}

func chunkOps(op string) int {
	if op == "histogram_observe" {
		return 1 << 11
	}
	return 1 << 14
}

// switches is the calling OS thread's context-switch count (RUSAGE_THREAD), or -1.
func switches() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru) != nil {
		return -1
	}
	return ru.Nvcsw + ru.Nivcsw
}

// covered reports whether o's clean chunks cover [t0, t1] with gaps of at most slack ns.
// *from is the first of o's chunks that may overlap; calls must come with increasing t0.
func covered(o []chunk, from *int, t0, t1, slack int64) bool {
	for *from < len(o) && o[*from].t1 <= t0 {
		*from++
	}
	reach := t0
	for _, c := range o[*from:] {
		if reach >= t1 {
			break
		}
		if c.t0 > reach+slack || !c.clean {
			return false
		}
		reach = c.t1
	}
	return reach >= t1
}

// cleanChunks appends ns/op of the chunks that ran uncontested by the scheduler: with one
// thread its clean chunks, with two the clean chunks during which the other thread ran too.
func cleanChunks(cs [][]chunk, out []float64, ops *int) []float64 {
	for t := range cs {
		from := 0
		for _, c := range cs[t] {
			if !c.clean || (len(cs) == 2 && !covered(cs[1-t], &from, c.t0, c.t1, 20000)) {
				continue
			}
			out = append(out, float64(c.t1-c.t0)/float64(c.ops))
			*ops += c.ops
		}
	}
	return out
}

// round runs n iterations on each of `threads` goroutines (each locked to an
// OS thread) in chunks and returns the slowest goroutine's elapsed time and the chunks.
func round(op string, m *metrics, mode string, n int) (time.Duration, [][]chunk) {
	threads := 1
	if mode != "1t" {
		threads = 2
	}
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	elapsed := make([]time.Duration, threads)
	chunks := make([][]chunk, threads)
	base := time.Now()
	cops := chunkOps(op)
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
			cs := make([]chunk, 0, (n+cops-1)/cops)
			ready.Done()
			<-start
			t0 := time.Now()
			for d := 0; d < n; {
				c := cops
				if n-d < c {
					c = n - d
				}
				s0 := switches()
				a := time.Since(base)
				loop(op, m, k, c)
				b := time.Since(base)
				s1 := switches()
				cs = append(cs, chunk{int64(a), int64(b), c, s0 >= 0 && s0 == s1})
				d += c
			}
			elapsed[t] = time.Since(t0)
			chunks[t] = cs
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
	return worst, chunks
}

func inList(list, name string) bool {
	for _, s := range strings.Split(list, ",") {
		if s == name {
			return true
		}
	}
	return false
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
	onlyOp := flag.String("op", "", "run only these operations (comma-separated)")
	onlyMode := flag.String("mode", "", "run only these modes (comma-separated: 1t,2t_same,2t_diff)")
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
		if *onlyOp != "" && !inList(*onlyOp, op) {
			continue
		}
		for _, mode := range []string{"1t", "2t_same", "2t_diff"} {
			if *onlyMode != "" && !inList(*onlyMode, mode) {
				continue
			}
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
			var clean []float64
			cleanOps := 0
			for r := 0; r < *runs; r++ {
				before := counterValue(m.c[0])
				d, cs := round(op, &m, mode, n)
				res[r] = float64(d.Nanoseconds()) / float64(n)
				clean = cleanChunks(cs, clean, &cleanOps)
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
			cmed := 0.0
			if len(clean) > 0 {
				sort.Float64s(clean)
				cmed = clean[len(clean)/2]
				if len(clean)%2 == 0 {
					cmed = (clean[len(clean)/2-1] + clean[len(clean)/2]) / 2
				}
			}
			fmt.Printf("impl=client_golang op=%s mode=%s threads=%d iters=%d runs=%d ns_per_op=%.2f min=%.2f max=%.2f mops_total=%.1f clean_ns_per_op=%.2f clean_frac=%.2f clean_chunks=%d\n",
				op, mode, threads, n, *runs, med, res[0], res[len(res)-1], float64(threads)*1e3/med,
				cmed, float64(cleanOps)/(float64(n)*float64(threads)*float64(*runs)), len(clean))
		}
	}
	if failed {
		os.Exit(1)
	}
}
