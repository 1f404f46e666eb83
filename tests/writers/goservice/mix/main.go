// Command mix registers and updates series through the Go writer while libmicroview
// processes do the same in the same segment (tests/writers/mixed.py).
//
// Usage: mix SEGMENT N TAG   (registers mix_total{writer=TAG,i=0..N-1}, adds i+1 to each,
// and increments mix_shared_total once)
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
	for i := 0; i < n; i++ {
		c, err := s.NewCounter(microview.Opts{Name: "mix_total", Help: "Mixed writers.",
			Labels: []microview.Label{{Key: "writer", Value: os.Args[3]}, {Key: "i", Value: strconv.Itoa(i)}}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "mix:", err)
			os.Exit(1)
		}
		c.Add(uint64(i + 1))
	}
	c, err := s.NewCounter(microview.Opts{Name: "mix_shared_total", Help: "Shared."})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mix:", err)
		os.Exit(1)
	}
	c.Inc()
}
