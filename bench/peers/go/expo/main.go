// Command expo times client_golang rendering N labelled gauges to the
// Prometheus text format (Gather + text encoding, what a scrape does).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

var labelNames = []string{"namespace", "pod", "container", "node", "zone", "cluster", "job",
	"instance", "app", "version"}

// labelValues gives series i its 10 label values; the pod makes it unique.
// bench/peers/python/expo_bench.py uses the same scheme.
func labelValues(i int) []string {
	return []string{
		"ns-" + strconv.Itoa(i%50),
		fmt.Sprintf("pod-%07d", i),
		"c-" + strconv.Itoa(i%4),
		fmt.Sprintf("node-%03d", i%200),
		"zone-" + string(rune('a'+i%3)),
		"cluster-1",
		"kubernetes-pods",
		fmt.Sprintf("10.%d.%d.%d:9100", i>>16&255, i>>8&255, i&255),
		"app-" + strconv.Itoa(i%100),
		"v1." + strconv.Itoa(i%10),
	}
}

func render(reg *prometheus.Registry, buf *bytes.Buffer) error {
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(buf, expfmt.FmtText)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	sizes := flag.String("sizes", "10000,100000,1000000", "comma-separated series counts")
	families := flag.Int("families", 10, "metric families the series are spread over")
	runs := flag.Int("runs", 3, "timed renders per size; the median is printed")
	quick := flag.Bool("quick", false, "sizes 10000,100000")
	flag.Parse()
	if *quick {
		*sizes = "10000,100000"
	}
	fmt.Printf("# client_golang expo GOMAXPROCS=%d families=%d labels=%d runs=%d\n",
		runtime.GOMAXPROCS(0), *families, len(labelNames), *runs)
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "expo: bad size %q\n", s)
			os.Exit(2)
		}
		t0 := time.Now()
		reg := prometheus.NewRegistry()
		vecs := make([]*prometheus.GaugeVec, *families)
		for f := range vecs {
			vecs[f] = prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: fmt.Sprintf("bench_gauge_%d", f), Help: "Benchmark gauge."}, labelNames)
			reg.MustRegister(vecs[f])
		}
		for i := 0; i < n; i++ {
			vecs[i%*families].WithLabelValues(labelValues(i)...).Set(float64(i) * 0.5)
		}
		setup := time.Since(t0).Seconds()

		var buf bytes.Buffer
		if err := render(reg, &buf); err != nil { // warm-up, sizes the buffer
			fmt.Fprintf(os.Stderr, "expo: %v\n", err)
			os.Exit(1)
		}
		secs := make([]float64, *runs)
		for r := range secs {
			buf.Reset()
			t := time.Now()
			if err := render(reg, &buf); err != nil {
				fmt.Fprintf(os.Stderr, "expo: %v\n", err)
				os.Exit(1)
			}
			secs[r] = time.Since(t).Seconds()
		}
		sort.Float64s(secs)
		lines := bytes.Count(buf.Bytes(), []byte{'\n'})
		fmt.Printf("peer=client_golang series=%d families=%d seconds=%.4f bytes=%d lines=%d "+
			"ns_per_series=%.0f setup_seconds=%.2f runs=%d\n",
			n, *families, secs[len(secs)/2], buf.Len(), lines, secs[len(secs)/2]*1e9/float64(n),
			setup, *runs)
		reg, vecs = nil, nil
		runtime.GC()
	}
}
