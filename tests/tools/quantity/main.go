// quantity-check reads the quantity table of the webhook tests and checks every line against
// ParseQuantity and Quantity.Value() of k8s.io/apimachinery (pinned in go.mod), so that the
// table — and the C parser that the table checks — agree with what the API server accepts.
//
// Usage: quantity-check tests/data/webhook/quantity.txt
// A line is EXPECT|TEXT. EXPECT "invalid" = ParseQuantity fails or the value is <= 0; "range" =
// above 2^63-1 (apimachinery silently caps binary SI at 2^63-1, so a capped value counts as
// "range" too); otherwise the byte count Value() returns.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

func classify(text string) string {
	q, err := resource.ParseQuantity(text)
	if err != nil || q.Sign() <= 0 {
		return "invalid"
	}
	// Huge exponents: the exact comparison below would expand 10^n.
	if f := q.AsApproximateFloat64(); f > 1e19 {
		return "range"
	}
	if q.Cmp(resource.MustParse("9223372036854775807")) >= 0 {
		if q.Cmp(resource.MustParse("9223372036854775807")) == 0 && q.Format != resource.BinarySI {
			return "9223372036854775807"
		}
		return "range"
	}
	return fmt.Sprint(q.Value())
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: quantity-check QUANTITY_TABLE")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines, failed := 0, 0
	for sc.Scan() {
		l := sc.Text()
		i := strings.IndexByte(l, '|')
		if strings.HasPrefix(l, "#") || i < 0 {
			continue
		}
		want, text := l[:i], l[i+1:]
		got := classify(text)
		lines++
		if got != want {
			failed++
			fmt.Printf("FAIL %q: table says %s, apimachinery says %s\n", text, want, got)
		}
	}
	fmt.Printf("%d quantities checked against apimachinery, %d differ\n", lines, failed)
	if failed > 0 || lines == 0 {
		os.Exit(1)
	}
}
