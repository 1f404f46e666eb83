// Package microview writes metrics into a MicroView shared-memory segment, byte for byte as
// libmicroview does (docs/segment-format.md): open the segment named by MICROVIEW_SEGMENT,
// register counters, gauges and histograms once, then update them with single atomic
// operations on the mapped memory. No syscalls, locks or allocation on the update path; a
// collector reads the segment from outside the process.
//
// Updates are safe from any number of goroutines. A failed registration returns an error
// together with a usable handle that writes to private memory, so a service keeps running
// when its metrics cannot be set up.
package microview

import (
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// EnvSegment names the environment variable holding the segment's path.
const EnvSegment = "MICROVIEW_SEGMENT"

// EnvPlacement names the environment variable choosing where Open's segment places new value
// slots, as libmicroview does: unset or "lines" starts each on its own 64-byte cache line
// (while the value area has room to spare, section 5.1), so that goroutines updating
// different metrics never contend for a line; "packed" places them back to back, which
// makes the collector's per-tick copy of counters and gauges 8 times smaller.
const EnvPlacement = "MICROVIEW_PLACEMENT"

// Label is one constant label of a series.
type Label struct {
	Key, Value string
}

// Opts describes a metric: Name is required, Help and Unit may be empty.
type Opts struct {
	Name   string
	Help   string
	Unit   string
	Labels []Label
}

// Segment is one mapped segment. Handles from it must not be used after Close.
type Segment struct {
	path string
	mem  []byte
	dev  uint64 // device and inode of the file: a lock holder must map them (section 8)
	ino  uint64
	mu   sync.Mutex // serialises registration within this process
	// packed: MICROVIEW_PLACEMENT=packed, slots back to back instead of on their own lines
	packed bool
}

// Hooks for reproducible formatting in tests (test vectors).
var (
	newInstance = randomInstance
	nowNs       = func() uint64 { return uint64(time.Now().UnixNano()) }
)

func randomInstance() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	x := le.Uint64(b[:]) ^ nowNs() ^ uint64(os.Getpid())<<32
	if x == 0 {
		x = 1
	}
	return x
}

// OpenFromEnv opens the segment named by $MICROVIEW_SEGMENT.
func OpenFromEnv() (*Segment, error) {
	p := os.Getenv(EnvSegment)
	if p == "" {
		return nil, fail(ErrNoEnv, "request the microview.io/metrics resource (or set it to a segment path)")
	}
	return Open(p)
}

// Open maps the segment file at path (its size is the segment's size) and formats it if it
// is still all zeros.
func Open(path string) (*Segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fail(ErrNoSegment, err.Error())
		}
		return nil, fail(ErrIO, err.Error())
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fail(ErrIO, err.Error())
	}
	size := st.Size()
	if !st.Mode().IsRegular() || size < minSize || size > maxSize || size%8 != 0 {
		return nil, fail(ErrFormat, fmt.Sprintf("%s: a segment is a regular file of 1 KiB..1 GiB, a multiple of 8 bytes (size %d)", path, size))
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fail(ErrIO, fmt.Sprintf("mmap %s: %v", path, err))
	}
	s := &Segment{path: path, mem: mem, packed: os.Getenv(EnvPlacement) == "packed"}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(sys.Dev), uint64(sys.Ino)
	}
	if err := s.formatIfZero(int(f.Fd())); err != nil {
		_ = syscall.Munmap(mem)
		return nil, err
	}
	// Validate without the registration lock: only a rejection from a parse whose
	// generation did not move is real; a racing append makes any result meaningless.
	for tries := 0; ; tries++ {
		if tries >= 40 && busyFor(mem) { // busy for 200 ms: its appender died (section 8, step 2)
			if s.lock() == nil {
				s.repair()
				atomic.StoreUint32(word32(mem, offLock), 0)
				if _, perr := parseCatalog(mem); perr != nil {
					_ = syscall.Munmap(mem)
					return nil, fail(ErrFormat, fmt.Sprintf("%s: %v", path, perr))
				}
			}
			break
		}
		g0 := atomic.LoadUint64(word64(mem, offGen))
		_, perr := parseCatalog(mem)
		g1 := atomic.LoadUint64(word64(mem, offGen))
		racing := g0&1 != 0 || g0 != g1
		if re, ok := perr.(*reasonError); ok && re.reason == "busy" {
			racing = true
		}
		if perr == nil || !racing {
			if perr != nil {
				_ = syscall.Munmap(mem)
				return nil, fail(ErrFormat, fmt.Sprintf("%s: %v", path, perr))
			}
			break
		}
		if tries >= 200 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	atomic.StoreUint32(word32(mem, offWriterPid), uint32(os.Getpid()))
	s.Heartbeat()
	return s, nil
}

// formatIfZero formats an all-zero segment under an exclusive flock, so that two processes
// opening a fresh file at once format it exactly once (section 7).
func (s *Segment) formatIfZero(fd int) error {
	if atomic.LoadUint64(word64(s.mem, 0)) != 0 {
		return nil
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		return fail(ErrIO, fmt.Sprintf("flock %s: %v", s.path, err))
	}
	defer syscall.Flock(fd, syscall.LOCK_UN)
	if atomic.LoadUint64(word64(s.mem, 0)) != 0 {
		return nil
	}
	for i := 0; i < headerSize; i++ {
		if s.mem[i] != 0 {
			return fail(ErrFormat, s.path+": magic is zero but the header is not")
		}
	}
	if err := formatSegment(s.mem, 0, newInstance(), nowNs()); err != nil {
		return fail(ErrFormat, fmt.Sprintf("%s: cannot format: %v", s.path, err))
	}
	return nil
}

// Close unmaps the segment. Values already written stay in it. Handles registered on s
// must not be used afterwards.
func (s *Segment) Close() error {
	if s == nil || s.mem == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := syscall.Munmap(s.mem)
	s.mem = nil
	return err
}

// Heartbeat stores the current time as the writer heartbeat (one store).
func (s *Segment) Heartbeat() {
	if s == nil || len(s.mem) == 0 {
		return
	}
	atomic.StoreUint64(word64(s.mem, offHeartbeat), nowNs())
}

// Path is the segment file's path; Size its size in bytes.
func (s *Segment) Path() string { return s.path }
func (s *Segment) Size() int    { return len(s.mem) }

// ---- Registration (section 8) -----------------------------------------------------

// busyFor reports whether the generation is odd (an append in progress or abandoned).
func busyFor(mem []byte) bool { return atomic.LoadUint64(word64(mem, offGen))&1 != 0 }

// devMajor and devMinor split a Linux dev_t as glibc's major() and minor() do.
func devMajor(d uint64) uint64 { return (d>>8)&0xfff | (d>>32)&^uint64(0xfff) }
func devMinor(d uint64) uint64 { return d&0xff | (d>>12)&^uint64(0xff) }

// holderAlive reports whether pid may still be appending to the segment: the process
// exists and maps the segment file (a line of /proc/PID/maps names its device and inode).
// A process that does not map it has a pid reused after the holder died. Unreadable maps
// count as alive.
func (s *Segment) holderAlive(pid uint32) bool {
	if syscall.Kill(int(pid), 0) == syscall.ESRCH {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return true
	}
	want := fmt.Sprintf("%02x:%02x", devMajor(s.dev), devMinor(s.dev))
	ino := strconv.FormatUint(s.ino, 10)
	for _, line := range strings.Split(string(b), "\n") {
		// address perms offset dev inode [path]
		f := strings.Fields(line)
		if len(f) >= 5 && f[4] == ino && sameDev(f[3], want) {
			return true
		}
	}
	return false
}

// sameDev compares two "major:minor" hex strings by value (widths may differ).
func sameDev(a, b string) bool {
	pa, pb := strings.SplitN(a, ":", 2), strings.SplitN(b, ":", 2)
	if len(pa) != 2 || len(pb) != 2 {
		return false
	}
	for i := range pa {
		x, e1 := strconv.ParseUint(pa[i], 16, 64)
		y, e2 := strconv.ParseUint(pb[i], 16, 64)
		if e1 != nil || e2 != nil || x != y {
			return false
		}
	}
	return true
}

// repair runs under the registration lock (section 8, step 2): an odd generation means an
// appender died between steps 6 and 10, possibly inside step 9 with only some of its counts
// stored, so the counts are recomputed from the records before the generation is made even.
func (s *Segment) repair() {
	genw := word64(s.mem, offGen)
	gen := atomic.LoadUint64(genw)
	if gen&1 == 0 {
		return
	}
	count, cused, vused := recount(s.mem)
	atomic.StoreUint32(word32(s.mem, offValUsed), vused)
	atomic.StoreUint32(word32(s.mem, offCatUsed), cused)
	atomic.StoreUint32(word32(s.mem, offCount), count)
	atomic.StoreUint64(genw, gen+1)
}

// lock takes the cross-process registration lock (header word = owner pid); a lock whose
// holder is gone (no such process, or one that does not map the segment) is taken over.
// Gives up after about 2 s.
func (s *Segment) lock() error {
	self := uint32(os.Getpid())
	w := word32(s.mem, offLock)
	for i := 0; i < 4000; i++ {
		if atomic.CompareAndSwapUint32(w, 0, self) {
			return nil
		}
		holder := atomic.LoadUint32(w)
		if holder == self {
			return fail(ErrBusy, "registration lock already held by this process (another Segment on the same file is registering)")
		}
		if i > 10 && holder != 0 && !s.holderAlive(holder) &&
			atomic.CompareAndSwapUint32(w, holder, self) {
			return nil
		}
		time.Sleep(500 * time.Microsecond)
	}
	return fail(ErrBusy, fmt.Sprintf("%s: registration lock held by pid %d for over 2 s", s.path, atomic.LoadUint32(w)))
}

// register appends (or finds) the record for d and returns its value slot offset from the
// start of the segment and its shard count (1 unless another writer registered the series
// sharded: this writer then updates shard 0, section 5.2).
func (s *Segment) register(d *desc) (int, int, error) {
	if s == nil {
		return 0, 1, fail(ErrInvalid, "segment is nil")
	}
	if err := d.check(); err != nil {
		return 0, 1, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem == nil {
		return 0, 1, fail(ErrInvalid, "segment is closed")
	}
	if err := s.lock(); err != nil {
		return 0, 1, err
	}
	off, shards, err := s.appendLocked(d)
	atomic.StoreUint32(word32(s.mem, offLock), 0)
	if err == nil {
		s.Heartbeat()
	}
	return off, shards, err
}

func (s *Segment) appendLocked(d *desc) (int, int, error) {
	mem := s.mem
	genw := word64(mem, offGen)
	s.repair() // an appender died half-way: recount what it left
	gen := atomic.LoadUint64(genw)
	c, err := parseCatalog(mem)
	if err != nil {
		return 0, 1, fail(ErrFormat, fmt.Sprintf("%s: %v", s.path, err))
	}
	var live *record // the live record of d's series, if any
	for i := range c.records {
		r := &c.records[i]
		if r.name != d.name || r.typ == typeTomb {
			continue
		}
		if r.typ != d.typ && d.typ != typeTomb {
			return 0, 1, fail(ErrConflict, fmt.Sprintf("metric %s is already registered with type %d", d.name, r.typ))
		}
		if !r.deleted && sameLabels(r.labels, d.labels) {
			live = r
		}
	}
	if d.typ == typeTomb {
		if live == nil {
			return 0, 0, nil // nothing to delete
		}
		d.tombOf = live.valueOffset
	} else if live != nil {
		if len(live.bounds) != len(d.bounds) {
			return 0, 1, fail(ErrConflict, fmt.Sprintf("histogram %s is already registered with other buckets", d.name))
		}
		for i := range live.bounds {
			if live.bounds[i] != d.bounds[i] {
				return 0, 1, fail(ErrConflict, fmt.Sprintf("histogram %s is already registered with other buckets", d.name))
			}
		}
		return int(c.valuesOffset + live.valueOffset), live.shards, nil
	}
	rsize, vsize := d.recordSize(), d.valueSize()
	coff := int(c.catalogUsed)
	// Each slot on its own cache line(s) while the value area has room to spare, as
	// libmicroview does (section 5.1): goroutines updating neighbouring metrics then do not
	// contend for one line. A tombstone has no slot.
	voff := int(c.valuesUsed)
	if !s.packed && vsize > 0 {
		voff = placeSlot(c.valuesUsed, c.valuesSize, c.catalogUsed, c.catalogSize, rsize, vsize)
	}
	if vsize > 0 && voff+vsize > int(c.valuesSize) {
		return 0, 1, s.full(d, "value", int(c.valuesUsed), int(c.valuesSize), vsize)
	}
	if coff+rsize > int(c.catalogSize) || c.count >= metricsMax {
		return 0, 1, s.full(d, "catalog", coff, int(c.catalogSize), rsize)
	}
	atomic.StoreUint64(genw, gen+1) // sequentially consistent: also the full fence of step 6
	slot := int(c.valuesOffset) + voff
	for i := 0; i < vsize; i += 8 {
		atomic.StoreUint64(word64(mem, slot+i), 0)
	}
	at := int(c.catalogOff) + coff
	if d.typ == typeTomb {
		d.encode(mem[at:at+rsize], d.tombOf)
	} else {
		d.encode(mem[at:at+rsize], uint32(voff))
		atomic.StoreUint32(word32(mem, offValUsed), uint32(voff+vsize))
	}
	atomic.StoreUint32(word32(mem, offCatUsed), uint32(coff+rsize))
	atomic.StoreUint32(word32(mem, offCount), c.count+1)
	atomic.StoreUint64(genw, gen+2)
	return slot, 1, nil
}

// quantity writes a size as a Kubernetes quantity (128Ki, 1Mi, or bytes), as libmicroview.
func quantity(n uint64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dGi", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMi", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dKi", n>>10)
	}
	return fmt.Sprint(n)
}

// full is the full-segment error of section 8.1, worded as libmicroview's: the area, its
// use, the series that did not fit and its size, and the size to ask for (twice this one).
func (s *Segment) full(d *desc, area string, used, size, need int) error {
	what := map[uint8]string{typeCounter: "counter", typeCounterF: "counter", typeGauge: "gauge",
		typeHist: "histogram"}[d.typ]
	if what == "" {
		what = "tombstone of"
	}
	return fail(ErrFull, fmt.Sprintf("%s area has %d of %d bytes used, %s %s needs %d; this segment is %s: ask for a larger one with the pod annotation microview.io/metrics-memory: %s (%s)",
		area, used, size, what, d.name, need, quantity(uint64(len(s.mem))), quantity(2*uint64(len(s.mem))), s.path))
}

// Delete deletes the live series with o's name and labels (in the order it was registered
// with) by appending its tombstone (section 6.6), and reports whether there was one.
// Handles to it keep working but nobody reads them; registering the series again creates
// it anew from zero, which readers see as a counter reset.
func (s *Segment) Delete(o Opts) (bool, error) {
	off, _, err := s.register(&desc{typ: typeTomb, name: o.Name, labels: o.Labels})
	return err == nil && off != 0, err
}

// Usage is how full a segment is (section 8.1): the header's used and total bytes of the
// value and catalog areas.
type Usage struct {
	ValuesUsed, ValuesSize, CatalogUsed, CatalogSize int
}

// Fullness is the larger of the two areas' used ratios.
func (u Usage) Fullness() float64 {
	v, c := 0.0, 0.0
	if u.ValuesSize > 0 {
		v = float64(u.ValuesUsed) / float64(u.ValuesSize)
	}
	if u.CatalogSize > 0 {
		c = float64(u.CatalogUsed) / float64(u.CatalogSize)
	}
	return math.Max(v, c)
}

// Usage reads the segment's fullness from its header.
func (s *Segment) Usage() Usage {
	if s == nil || len(s.mem) == 0 {
		return Usage{}
	}
	return Usage{
		ValuesUsed:  int(atomic.LoadUint32(word32(s.mem, offValUsed))),
		ValuesSize:  int(le.Uint32(s.mem[offValSize:])),
		CatalogUsed: int(atomic.LoadUint32(word32(s.mem, offCatUsed))),
		CatalogSize: int(le.Uint32(s.mem[offCatSize:])),
	}
}

var scratch [8]uint64 // target of scalar handles whose registration failed

// NewCounter registers (or finds) a counter series.
func (s *Segment) NewCounter(o Opts) (Counter, error) {
	off, n, err := s.register(&desc{typ: typeCounter, name: o.Name, help: o.Help, unit: o.Unit, labels: o.Labels})
	if err != nil {
		return Counter{w: &scratch[0]}, err
	}
	return Counter{w: word64(s.mem, off), shards: n}, nil
}

// NewCounterF registers (or finds) a fractional counter series (record type 4), the type a
// counter needs when Add takes non-integral amounts. Readers that predate type 4 refuse a
// segment holding one (section 5).
func (s *Segment) NewCounterF(o Opts) (CounterF, error) {
	off, n, err := s.register(&desc{typ: typeCounterF, name: o.Name, help: o.Help, unit: o.Unit, labels: o.Labels})
	if err != nil {
		return CounterF{w: &scratch[2]}, err
	}
	return CounterF{w: word64(s.mem, off), shards: n}, nil
}

// NewLocalCounterF returns a fractional counter in process memory, read by nobody else.
func NewLocalCounterF() CounterF { return CounterF{w: &make([]uint64, 2)[0], shards: 1} }

// NewLocalGauge returns a gauge in process memory, read by nobody else.
func NewLocalGauge() Gauge { return Gauge{w: new(uint64), shards: 1} }

// NewLocalHistogram returns a histogram in process memory, read by nobody else.
func NewLocalHistogram(bounds []float64) *Histogram {
	b := append([]float64(nil), bounds...)
	return newHistogram(make([]uint64, len(b)+4), b, 1)
}

// NewGauge registers (or finds) a gauge series.
func (s *Segment) NewGauge(o Opts) (Gauge, error) {
	off, n, err := s.register(&desc{typ: typeGauge, name: o.Name, help: o.Help, unit: o.Unit, labels: o.Labels})
	if err != nil {
		return Gauge{w: &scratch[1]}, err
	}
	return Gauge{w: word64(s.mem, off), shards: n}, nil
}

// NewHistogram registers (or finds) a histogram series; bounds are the finite upper bounds
// (le) of its buckets, strictly increasing, 1 to 160 of them; a +Inf bucket is implied.
func (s *Segment) NewHistogram(o Opts, bounds []float64) (*Histogram, error) {
	b := append([]float64(nil), bounds...)
	off, n, err := s.register(&desc{typ: typeHist, name: o.Name, help: o.Help, unit: o.Unit, labels: o.Labels, bounds: b})
	if err != nil {
		return newHistogram(make([]uint64, len(b)+4), b, 1), err
	}
	stride := int(shardStride(uint32(8*(len(b)+4)))) / 8
	return newHistogram(wordSlice(s.mem, off, (n-1)*stride+len(b)+4), b, n), nil
}

// ExponentialBuckets returns count bounds start, start*factor, start*factor^2, ...
func ExponentialBuckets(start, factor float64, count int) ([]float64, error) {
	if !(start > 0) || !(factor > 1) || math.IsInf(start, 0) || math.IsInf(factor, 0) || count < 1 || count > bucketsMax {
		return nil, fail(ErrInvalid, fmt.Sprintf("exponential buckets need start > 0, factor > 1, 1..%d buckets", bucketsMax))
	}
	out := make([]float64, count)
	for i, b := 0, start; i < count; i, b = i+1, b*factor {
		if math.IsInf(b, 0) {
			return nil, fail(ErrInvalid, fmt.Sprintf("bucket %d overflows", i))
		}
		out[i] = b
	}
	return out, nil
}
