// Sharded records (spec section 5.2), which the Go writer does not create but must honour
// when libmicroview registered a series first: the parser's rules, updates of shard 0, sums,
// and a gauge Set that clears the other shards.

package microview

import (
	"math"
	"sync/atomic"
	"testing"
	"unsafe"
)

// appendSharded appends the record of d with n shards the way libmicroview does after
// mv_set_shards(n): the slot on a line of its own, n strides of whole lines, the flag and
// the shard count in the record. It returns the slot's offset in the segment.
func appendSharded(t *testing.T, s *Segment, d *desc, n int) int {
	t.Helper()
	mem := s.mem
	c, err := parseCatalog(mem)
	if err != nil {
		t.Fatal(err)
	}
	stride := int(shardStride(uint32(d.valueSize())))
	rsize, vsize := d.recordSize(), n*stride
	voff := (int(c.valuesUsed) + 63) &^ 63
	coff := int(c.catalogUsed)
	rec := mem[int(c.catalogOff)+coff : int(c.catalogOff)+coff+rsize]
	d.encode(rec, uint32(voff))
	rec[5] = recSharded
	le.PutUint16(rec[18:], uint16(n))
	le.PutUint32(rec[12:], uint32(vsize))
	le.PutUint64(rec[rsize-8:], fnv1a64(rec[:rsize-8]))
	le.PutUint32(mem[offValUsed:], uint32(voff+vsize))
	le.PutUint32(mem[offCatUsed:], uint32(coff+rsize))
	le.PutUint32(mem[offCount:], c.count+1)
	le.PutUint64(mem[offGen:], c.generation+2)
	return int(c.valuesOffset) + voff
}

// word is the uint64 at byte offset off of the segment.
func word(s *Segment, off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }

func TestShardedSeriesRegisteredElsewhere(t *testing.T) {
	s := mustOpen(t, newSegFile(t, 65536))
	bounds := []float64{1, 10}
	cOff := appendSharded(t, s, &desc{typ: typeCounter, name: "c_total"}, 4)
	gOff := appendSharded(t, s, &desc{typ: typeGauge, name: "g"}, 2)
	hOff := appendSharded(t, s, &desc{typ: typeHist, name: "h", bounds: bounds}, 2)

	cat, err := parseCatalog(s.mem)
	if err != nil {
		t.Fatalf("the parser refuses sharded records: %v", err)
	}
	if got := []int{cat.records[0].shards, cat.records[1].shards, cat.records[2].shards}; got[0] != 4 || got[1] != 2 || got[2] != 2 {
		t.Fatalf("shards parsed as %v, want [4 2 2]", got)
	}

	c, err := s.NewCounter(Opts{Name: "c_total"})
	if err != nil {
		t.Fatal(err)
	}
	c.Add(3)
	atomic.AddUint64(word(s, cOff+3*64), 5) // another writer's shard
	if v := atomic.LoadUint64(word(s, cOff)); v != 3 {
		t.Errorf("the Go writer's adds went elsewhere than shard 0: shard 0 = %d", v)
	}
	if c.Value() != 8 {
		t.Errorf("counter value %d, want the sum of the shards 8", c.Value())
	}

	g, err := s.NewGauge(Opts{Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint64(word(s, gOff+64), math.Float64bits(2.0)) // another writer's add
	g.Add(0.5)
	if g.Value() != 2.5 {
		t.Errorf("gauge value %g, want 2.5", g.Value())
	}
	g.Set(1.5)
	if v := atomic.LoadUint64(word(s, gOff+64)); v != 0 {
		t.Errorf("Set left shard 1 at %g", math.Float64frombits(v))
	}
	if g.Value() != 1.5 {
		t.Errorf("gauge value %g after Set(1.5)", g.Value())
	}

	h, err := s.NewHistogram(Opts{Name: "h"}, bounds)
	if err != nil {
		t.Fatal(err)
	}
	h.Observe(0.5)
	h.Observe(20)
	// Another writer's observation of 5 in shard 1 (stride: 7 words rounded up to 64 bytes).
	other := wordSlice(s.mem, hOff+64, len(bounds)+4)
	other[0], other[1], other[3] = 1, math.Float64bits(5), 1
	other[5] = histWeight(0) + other[1]*histWeight(1) + histWeight(3)
	count, sum, buckets := h.Snapshot()
	if count != 3 || sum != 25.5 || buckets[0] != 1 || buckets[1] != 1 || buckets[2] != 1 {
		t.Errorf("histogram snapshot %d %g %v, want 3 25.5 [1 1 1]", count, sum, buckets)
	}

	// What the parser refuses: a shard count that is not a power of two from 2 to 64, a
	// count without the flag, another flag bit.
	rec := s.mem[int(cat.catalogOff):]
	rsize := int(le.Uint32(rec))
	reseal := func() { le.PutUint64(rec[rsize-8:], fnv1a64(rec[:rsize-8])) }
	for _, bad := range []func(){
		func() { le.PutUint16(rec[18:], 3) },
		func() { le.PutUint16(rec[18:], 128) },
		func() { rec[5] = 0 },
		func() { rec[5] = 3 },
	} {
		saved := append([]byte(nil), rec[:rsize]...)
		bad()
		reseal()
		if _, err := parseCatalog(s.mem); err == nil {
			t.Errorf("a bad sharded record was accepted: flags %d shard_count %d", rec[5], le.Uint16(rec[18:]))
		}
		copy(rec, saved)
	}
	if _, err := parseCatalog(s.mem); err != nil {
		t.Fatalf("the restored segment: %v", err)
	}
}
