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
type Counter struct {
	w *uint64
}

// Inc adds 1: one atomic add, safe from many goroutines.
func (c Counter) Inc() { atomic.AddUint64(c.w, 1) }

// Add adds n: one atomic add, safe from many goroutines.
func (c Counter) Add(n uint64) { atomic.AddUint64(c.w, n) }

// Value reads the counter.
func (c Counter) Value() uint64 { return atomic.LoadUint64(c.w) }

// Gauge is a handle to one gauge's value word (IEEE-754 bits).
type Gauge struct {
	w *uint64
}

// Set stores v: one 8-byte store, last store wins.
func (g Gauge) Set(v float64) { atomic.StoreUint64(g.w, math.Float64bits(v)) }

// Add adds delta with a compare-and-swap loop; safe from many goroutines.
func (g Gauge) Add(delta float64) {
	for {
		old := atomic.LoadUint64(g.w)
		if atomic.CompareAndSwapUint64(g.w, old, math.Float64bits(math.Float64frombits(old)+delta)) {
			return
		}
	}
}

// Value reads the gauge.
func (g Gauge) Value() float64 { return math.Float64frombits(atomic.LoadUint64(g.w)) }

// Histogram is a handle to one histogram's value words: count, sum, buckets, checksum.
type Histogram struct {
	w        []uint64
	bounds   []float64
	bucketWt []uint64 // W(2+i) + W(0) per bucket
	sumWt    uint64   // W(1)
	check    int      // n + 3
}

func newHistogram(w []uint64, bounds []float64) *Histogram {
	h := &Histogram{w: w, bounds: bounds, bucketWt: make([]uint64, len(bounds)+1),
		sumWt: histWeight(1), check: len(bounds) + 3}
	for i := range h.bucketWt {
		h.bucketWt[i] = histWeight(2+i) + histWeight(0)
	}
	return h
}

// Observe records one observation; NaN is ignored. Safe from many goroutines without a
// lock: each step is one atomic read-modify-write and the checksum word receives exactly
// the linear delta of this observation, so a reader can detect a copy caught half-way.
func (h *Histogram) Observe(v float64) {
	if v != v {
		return
	}
	lo, hi := 0, len(h.bounds)
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
func (h *Histogram) Snapshot() (count uint64, sum float64, buckets []uint64) {
	buckets = make([]uint64, len(h.bounds)+1)
	for i := range buckets {
		buckets[i] = atomic.LoadUint64(&h.w[2+i])
	}
	return atomic.LoadUint64(&h.w[0]), math.Float64frombits(atomic.LoadUint64(&h.w[1])), buckets
}

// Bounds returns a copy of the histogram's finite upper bounds.
func (h *Histogram) Bounds() []float64 { return append([]float64(nil), h.bounds...) }
