// Updates: single-word atomic operations on the mapped value slots (section 9).

package microview

import (
	"math"
	"sync/atomic"
	"unsafe"
)

func wordSlice(mem []byte, off, n int) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off])), n)
}

// Counter is a handle to one counter's value word. The zero Counter must not be used.
// A series another writer registered sharded (section 5.2) is updated in its shard 0.
type Counter struct {
	w      *uint64
	shards int
}

// shardSum adds up the first word of each of n shards, a 64-byte line apart, from w on.
func shardSum(w *uint64, n int, add func(acc, word uint64) uint64) uint64 {
	acc := atomic.LoadUint64(w)
	for k := 1; k < n; k++ {
		acc = add(acc, atomic.LoadUint64((*uint64)(unsafe.Add(unsafe.Pointer(w), 64*k))))
	}
	return acc
}

func addU64(acc, w uint64) uint64 { return acc + w }

func addF64(acc, w uint64) uint64 {
	return math.Float64bits(math.Float64frombits(acc) + math.Float64frombits(w))
}

// Inc adds 1: one atomic add, safe from many goroutines.
func (c Counter) Inc() { atomic.AddUint64(c.w, 1) }

// Add adds n: one atomic add, safe from many goroutines.
func (c Counter) Add(n uint64) { atomic.AddUint64(c.w, n) }

// Value reads the counter (the sum of its shards).
func (c Counter) Value() uint64 { return shardSum(c.w, c.shards, addU64) }

// Gauge is a handle to one gauge's value word (IEEE-754 bits).
type Gauge struct {
	w      *uint64
	shards int
}

// Set stores v: one 8-byte store, last store wins. On a sharded gauge it zeroes shards 1..
// first and stores v in shard 0, where every writer's set goes (section 9.2).
func (g Gauge) Set(v float64) {
	for k := 1; k < g.shards; k++ { // a load first: a shard already zero keeps its line
		if w := (*uint64)(unsafe.Add(unsafe.Pointer(g.w), 64*k)); atomic.LoadUint64(w) != 0 {
			atomic.StoreUint64(w, 0)
		}
	}
	atomic.StoreUint64(g.w, math.Float64bits(canon(v)))
}

// Add adds delta with a compare-and-swap loop; safe from many goroutines.
func (g Gauge) Add(delta float64) {
	delta = canon(delta)
	for {
		old := atomic.LoadUint64(g.w)
		if atomic.CompareAndSwapUint64(g.w, old, math.Float64bits(math.Float64frombits(old)+delta)) {
			return
		}
	}
}

// Value reads the gauge (the sum of its shards).
func (g Gauge) Value() float64 { return math.Float64frombits(shardSum(g.w, g.shards, addF64)) }

// Histogram is a handle to one histogram's value words: count, sum, buckets, checksum (of
// shard 0 when another writer registered it sharded; all holds every shard's words).
type Histogram struct {
	w        []uint64
	all      []uint64
	shards   int
	bounds   []float64
	bucketWt []uint64 // W(2+i) + W(0) per bucket
	sumWt    uint64   // W(1)
	check    int      // n + 3
}

func newHistogram(all []uint64, bounds []float64, shards int) *Histogram {
	h := &Histogram{w: all[:len(bounds)+4], all: all, shards: shards, bounds: bounds,
		bucketWt: make([]uint64, len(bounds)+1), sumWt: histWeight(1), check: len(bounds) + 3}
	for i := range h.bucketWt {
		h.bucketWt[i] = histWeight(2+i) + histWeight(0)
	}
	return h
}

// quietNaN is the one NaN every writer stores (section 9.5).
const quietNaN = 0x7ff8000000000000

// canon replaces any NaN by the quiet NaN 0x7ff8000000000000 (Go's math.NaN() is
// 0x7ff8000000000001), so that every writer stores the same bytes.
func canon(v float64) float64 {
	if v != v {
		return math.Float64frombits(quietNaN)
	}
	return v
}

// Observe records one observation. Safe from many goroutines without a lock: each step is
// one atomic read-modify-write and the checksum word receives exactly the linear delta of
// this observation, so a reader can detect a copy caught half-way. NaN counts as the
// Prometheus clients count it (section 9.5): count + 1, the +Inf bucket + 1, sum NaN.
func (h *Histogram) Observe(v float64) {
	lo, hi := 0, len(h.bounds)
	if v != v {
		lo, v = hi, canon(v)
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if v <= h.bounds[mid] {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	w := h.w
	atomic.AddUint64(&w[2+lo], 1)
	atomic.AddUint64(&w[0], 1)
	for {
		old := atomic.LoadUint64(&w[1])
		nw := math.Float64bits(math.Float64frombits(old) + v)
		if atomic.CompareAndSwapUint64(&w[1], old, nw) {
			atomic.AddUint64(&w[h.check], h.bucketWt[lo]+(nw-old)*h.sumWt)
			return
		}
	}
}

// Snapshot reads count, sum and the non-cumulative bucket counts (len(bounds)+1 of them).
// It is not atomic across words; use it in tests and quiescent states.
// A sharded histogram reads as the sum of its shards.
func (h *Histogram) Snapshot() (count uint64, sum float64, buckets []uint64) {
	buckets = make([]uint64, len(h.bounds)+1)
	stride := 0
	if h.shards > 1 {
		stride = (len(h.all) - len(h.w)) / (h.shards - 1)
	}
	for k := 0; k < h.shards; k++ {
		w := h.all[k*stride:]
		for i := range buckets {
			buckets[i] += atomic.LoadUint64(&w[2+i])
		}
		count += atomic.LoadUint64(&w[0])
		sum += math.Float64frombits(atomic.LoadUint64(&w[1]))
	}
	return count, sum, buckets
}

// Bounds returns a copy of the histogram's finite upper bounds.
func (h *Histogram) Bounds() []float64 { return append([]float64(nil), h.bounds...) }

// CounterF is a handle to one fractional counter (record type 4, section 5): word 0 counts
// whole units, word 1 accumulates the non-integral amounts as IEEE-754 bits; the value is
// their sum. Both only grow.
type CounterF struct {
	w      *uint64
	shards int
}

// Inc adds 1: one atomic add on the integral word.
func (c CounterF) Inc() { atomic.AddUint64(c.w, 1) }

// Add adds v exactly (section 5.3): an integral amount below 2^64 is one atomic add on
// the integral word, any other (a fraction, a larger amount, +Inf) a compare-and-swap loop
// on the fractional word. NaN and negative amounts are refused with ErrInvalid and store
// nothing.
func (c CounterF) Add(v float64) error {
	if iv := uint64(v); float64(iv) == v && v >= 0 && v < 1<<64 {
		atomic.AddUint64(c.w, iv)
		return nil
	}
	return c.addFrac(v)
}

func (c CounterF) addFrac(v float64) error {
	if !(v >= 0) {
		return errRefusedAdd
	}
	AddFrac(c.FracWord(), v)
	return nil
}

var errRefusedAdd = fail(ErrInvalid, "a counter adds only non-negative amounts (not NaN)")

// Value reads the counter: the integral and fractional words of every shard, summed.
func (c CounterF) Value() float64 {
	whole := shardSum(c.w, c.shards, addU64)
	frac := shardSum((*uint64)(unsafe.Add(unsafe.Pointer(c.w), 8)), c.shards, addF64)
	return float64(whole) + math.Float64frombits(frac)
}

// Merge adds counts (non-cumulative, len(bounds)+1 of them, NaN observations in the last),
// their total and their sum, keeping the checksum consistent like Observe does.
func (h *Histogram) Merge(buckets []uint64, sum float64) {
	w := h.w
	var n, ck uint64
	for i, b := range buckets {
		if i > len(h.bounds) || b == 0 {
			continue
		}
		atomic.AddUint64(&w[2+i], b)
		n += b
		ck += b * histWeight(2+i)
	}
	atomic.AddUint64(&w[0], n)
	for {
		old := atomic.LoadUint64(&w[1])
		nw := math.Float64bits(math.Float64frombits(old) + sum)
		if atomic.CompareAndSwapUint64(&w[1], old, nw) {
			atomic.AddUint64(&w[h.check], ck+n*histWeight(0)+(nw-old)*h.sumWt)
			return
		}
	}
}

// Word is the counter's integral word (shard 0), for a caller that keeps its own pointer
// to it on a hot path: only atomic adds may go to it.
func (c CounterF) Word() *uint64 { return c.w }

// FracWord is the counter's fractional word (shard 0), for a caller that keeps its own
// pointer to it on a hot path: only AddFrac may change it.
func (c CounterF) FracWord() *uint64 { return (*uint64)(unsafe.Add(unsafe.Pointer(c.w), 8)) }

// AddFrac adds v to the IEEE-754 value of a fractional word (FracWord) with a compare-and-swap
// loop. The caller has checked v: non-negative, not NaN.
func AddFrac(f *uint64, v float64) {
	for {
		old := atomic.LoadUint64(f)
		if atomic.CompareAndSwapUint64(f, old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Word is the gauge's value word for a caller that keeps its own pointer to it on a hot
// path (atomic stores and compare-and-swap of IEEE-754 bits), or nil when the series is
// sharded and a Set must go through the handle.
func (g Gauge) Word() *uint64 {
	if g.shards > 1 {
		return nil
	}
	return g.w
}
