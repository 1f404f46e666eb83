// Command mix registers and updates series through the Go writer while libmicroview
// processes do the same in the same segment (tests/writers/mixed.py).
//
// Usage: mix SEGMENT N TAG   (registers mix_total{writer=TAG,i=0..N-1}, adds i+1 to each,
// increments mix_shared_total and mix_sharded_total once, and adds 5 to mix_level;
// mix SEGMENT 0 set: sets mix_level to 3, which must drop what the other shards held)
package main

import (
	"fmt"
	"os"
	"strconv"

	microview "microview.io/writers/go"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: mix SEGMENT N TAG")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mix: N:", err)
		os.Exit(2)
	}
	s, err := microview.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mix:", err)
		os.Exit(1)
	}
	if os.Args[3] == "set" {
		g, err := s.NewGauge(microview.Opts{Name: "mix_level", Help: "Sharded gauge."})
		if err != nil {
			fmt.Fprintln(os.Stderr, "mix:", err)
			os.Exit(1)
		}
		g.Set(3)
		if g.Value() != 3 {
			fmt.Fprintln(os.Stderr, "mix: mix_level reads", g.Value(), "after Set(3)")
			os.Exit(1)
		}
		return
	}
	for i := 0; i < n; i++ {
		c, err := s.NewCounter(microview.Opts{Name: "mix_total", Help: "Mixed writers.",
			Labels: []microview.Label{{Key: "writer", Value: os.Args[3]}, {Key: "i", Value: strconv.Itoa(i)}}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "mix:", err)
			os.Exit(1)
		}
		c.Add(uint64(i + 1))
	}
	for _, name := range []string{"mix_shared_total", "mix_sharded_total"} {
		help := map[string]string{"mix_shared_total": "Shared.", "mix_sharded_total": "Sharded first."}[name]
		c, err := s.NewCounter(microview.Opts{Name: name, Help: help})
		if err != nil {
			fmt.Fprintln(os.Stderr, "mix:", err)
			os.Exit(1)
		}
		c.Inc()
	}
	g, err := s.NewGauge(microview.Opts{Name: "mix_level", Help: "Sharded gauge."})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mix:", err)
		os.Exit(1)
	}
	g.Add(5)
}
