// The catalog parser reads bytes any process of the pod can scribble on: it must reject
// garbage with an error and never panic; so must the repair's recount. Seeds: every shared test vector, then mutations.
// Run longer with: go test -run '^$' -fuzz FuzzParseCatalog -fuzztime 30s

package microview

import (
	"os"
	"path/filepath"
	"testing"
)

func FuzzParseCatalog(f *testing.F) {
	hexes, _ := filepath.Glob(filepath.Join("..", "..", "tests", "vectors", "*.hex"))
	for _, p := range hexes {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		b, err := parseHex(string(data))
		if err != nil {
			f.Fatalf("%s: %v", p, err)
		}
		if len(b) <= 1<<16 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The repair's recount walks the same bytes: no panic, counts inside the areas.
		if n, cu, vu := recount(b); len(b) >= headerSize &&
			(uint64(cu) > uint64(le.Uint32(b[offCatSize:])) || uint64(vu) > uint64(le.Uint32(b[offValSize:])) || uint64(n)*recordMin > uint64(cu)) {
			t.Fatalf("recount %d records, %d catalog bytes, %d value bytes outside the areas", n, cu, vu)
		}
		c, err := parseCatalog(b)
		if err == nil {
			// Whatever was accepted must be self-consistent.
			end := uint32(0)
			for _, r := range c.records {
				if r.typ == typeTomb { // no slot: names the deleted record's
					continue
				}
				if r.valueOffset < end || uint64(r.valueOffset)+uint64(r.valueSize) > uint64(c.valuesUsed) {
					t.Fatalf("accepted overlapping or out-of-range slot %+v", r)
				}
				end = r.valueOffset + r.valueSize
			}
		}
	})
}
