// Behaviour of the Go writer beyond the shared vectors: concurrency, the registration lock,
// crash repair, open errors, and the spec's checksum and weight values.

package microview

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

func newSegFile(t *testing.T, size int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "segment")
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustOpen(t *testing.T, p string) *Segment {
	t.Helper()
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSpecValues(t *testing.T) {
	for in, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "foobar": 0x85944171f73967e8} {
		if got := fnv1a64([]byte(in)); got != want {
			t.Errorf("fnv1a64(%q) = %#x, want %#x", in, got, want)
		}
	}
	for i, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f5, 0x06c45d188009454f, 0xf88bb8a8724c81ed} {
		if got := histWeight(i); got != want {
			t.Errorf("W(%d) = %#x, want %#x", i, got, want)
		}
	}
	for size, want := range map[uint64][2]uint32{1024: {512, 384}, 4096: {960, 3008}, 65536: {16320, 49088}} {
		v, c, ok := defaultLayout(size)
		if !ok || v != want[0] || c != want[1] {
			t.Errorf("defaultLayout(%d) = %d, %d; want %v", size, v, c, want)
		}
	}
}

// quiescentOK checks the histogram invariants of section 5.
func quiescentOK(t *testing.T, h *Histogram) {
	t.Helper()
	var sum, check uint64
	for i := 0; i < h.check; i++ {
		check += h.w[i] * histWeight(i)
	}
	for i := 2; i < h.check; i++ {
		sum += h.w[i]
	}
	if sum != h.w[0] {
		t.Errorf("count %d != sum of buckets %d", h.w[0], sum)
	}
	if check != h.w[h.check] {
		t.Errorf("checksum %#x, want %#x", h.w[h.check], check)
	}
}

// slotOf is a handle's value offset from the start of the value area.
func slotOf(s *Segment, w *uint64) int {
	return int(uintptr(unsafe.Pointer(w))-uintptr(unsafe.Pointer(&s.mem[0]))) - headerSize
}

// TestPlacement: each slot on its own 64-byte line (section 5.1), as libmicroview places
// them; packed once the value area cannot spare lines, and with MICROVIEW_PLACEMENT=packed.
func TestPlacement(t *testing.T) {
	s := mustOpen(t, newSegFile(t, 65536))
	a, _ := s.NewCounter(Opts{Name: "a_total"})
	h, _ := s.NewHistogram(Opts{Name: "h_seconds"}, []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512})
	g, _ := s.NewGauge(Opts{Name: "g"})
	b, err := s.NewCounter(Opts{Name: "b_total"})
	if err != nil {
		t.Fatal(err)
	}
	if got := []int{slotOf(s, a.w), slotOf(s, &h.w[0]), slotOf(s, g.w), slotOf(s, b.w)}; got[0] != 0 || got[1] != 64 || got[2] != 192 || got[3] != 256 {
		t.Errorf("slots at %v, want [0 64 192 256]", got)
	}

	// 4 KiB: 960 value bytes, 3008 catalog bytes. Lines first, then packed: as many
	// metrics fit as with packed slots.
	fill := func() []int {
		s := mustOpen(t, newSegFile(t, 4096))
		var offs []int
		for i := 0; ; i++ {
			c, err := s.NewCounter(Opts{Name: "counter_" + strconv.Itoa(1000 + i)[1:] + "_total"})
			if err != nil {
				if !errors.Is(err, ErrFull) {
					t.Fatalf("registration %d: %v, want a full segment", i, err)
				}
				return offs
			}
			offs = append(offs, slotOf(s, c.w))
		}
	}
	offs := fill()
	t.Setenv(EnvPlacement, "packed")
	packed := fill()
	n := len(offs)
	if n != len(packed) || n < 40 || offs[1] != 64 || offs[n-1] != offs[n-2]+8 || packed[1] != 8 {
		t.Errorf("%d slots at %v (packed: %d): want lines first, then packed, as many as packed", n, offs, len(packed))
	}

	s = mustOpen(t, newSegFile(t, 65536))
	a, _ = s.NewCounter(Opts{Name: "a_total"})
	g, _ = s.NewGauge(Opts{Name: "g"})
	if slotOf(s, a.w) != 0 || slotOf(s, g.w) != 8 {
		t.Errorf("packed: slots at %d, %d, want 0, 8", slotOf(s, a.w), slotOf(s, g.w))
	}
}

func TestConcurrentUpdates(t *testing.T) {
	s := mustOpen(t, newSegFile(t, 65536))
	c, err := s.NewCounter(Opts{Name: "ops_total", Labels: []Label{{"k", "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := s.NewGauge(Opts{Name: "level"})
	h, err := s.NewHistogram(Opts{Name: "lat_seconds"}, []float64{0.25, 0.5, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	const workers, n = 8, 20000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				c.Inc()
				c.Add(2)
				g.Add(0.5)
				h.Observe(float64(i%5) * 0.5)
			}
		}(w)
	}
	wg.Wait()
	if got := c.Value(); got != workers*n*3 {
		t.Errorf("counter %d, want %d", got, workers*n*3)
	}
	if got := g.Value(); got != workers*n*0.5 {
		t.Errorf("gauge %g, want %g", got, float64(workers*n)*0.5)
	}
	count, sum, buckets := h.Snapshot()
	if count != workers*n || sum != float64(workers)*float64(n/5)*(0+0.5+1+1.5+2) {
		t.Errorf("histogram count %d sum %g", count, sum)
	}
	per := uint64(workers * n / 5) // values 0, .5, 1, 1.5, 2 -> buckets 0, 1, 2, 3, 3
	want := []uint64{per, per, per, 2 * per, 0}
	for i := range want {
		if buckets[i] != want[i] {
			t.Errorf("bucket %d = %d, want %d", i, buckets[i], want[i])
		}
	}
	quiescentOK(t, h)
}

func TestConcurrentRegistration(t *testing.T) {
	s := mustOpen(t, newSegFile(t, 1<<20))
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				c, err := s.NewCounter(Opts{Name: "reg_total", Labels: []Label{{"i", strconv.Itoa(i)}}})
				if err != nil {
					t.Error(err)
					return
				}
				c.Inc()
			}
		}(w)
	}
	wg.Wait()
	cat, err := parseCatalog(s.mem)
	if err != nil || len(cat.records) != 50 {
		t.Fatalf("catalog: %v, %d records", err, len(cat.records))
	}
	for i := 0; i < 50; i++ {
		c, _ := s.NewCounter(Opts{Name: "reg_total", Labels: []Label{{"i", strconv.Itoa(i)}}})
		if c.Value() != 8 {
			t.Errorf("series %d = %d, want 8", i, c.Value())
		}
	}
	if g := atomic.LoadUint64(word64(s.mem, offGen)); g != 100 {
		t.Errorf("generation %d, want 100 (2 per record)", g)
	}
}

// TestMultiProcess registers the same series from several processes at once (the test
// binary re-executed); each adds to every series, and the totals must add up.
func TestMultiProcess(t *testing.T) {
	if p := os.Getenv("MV_TEST_CHILD_SEGMENT"); p != "" {
		s, err := Open(p)
		if err != nil {
			os.Exit(3)
		}
		for i := 0; i < 20; i++ {
			c, err := s.NewCounter(Opts{Name: "mp_total", Labels: []Label{{"i", strconv.Itoa(i)}}})
			if err != nil {
				os.Exit(4)
			}
			c.Add(10)
		}
		os.Exit(0)
	}
	p := newSegFile(t, 1<<16) // all zero: the children race to format it too
	var cmds []*exec.Cmd
	for i := 0; i < 4; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcess$")
		cmd.Env = append(os.Environ(), "MV_TEST_CHILD_SEGMENT="+p)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	s := mustOpen(t, p)
	cat, err := parseCatalog(s.mem)
	if err != nil || len(cat.records) != 20 {
		t.Fatalf("catalog: %v", err)
	}
	for i := 0; i < 20; i++ {
		c, _ := s.NewCounter(Opts{Name: "mp_total", Labels: []Label{{"i", strconv.Itoa(i)}}})
		if c.Value() != 40 {
			t.Errorf("series %d = %d, want 40", i, c.Value())
		}
	}
}

func TestStaleLockAndCrashRepair(t *testing.T) {
	s := mustOpen(t, newSegFile(t, 4096))
	if _, err := s.NewCounter(Opts{Name: "a_total"}); err != nil {
		t.Fatal(err)
	}
	// A process that died holding the lock, half-way through an append (odd generation).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true: ", err)
	}
	dead := uint32(cmd.Process.Pid)
	atomic.StoreUint32(word32(s.mem, offLock), dead)
	atomic.AddUint64(word64(s.mem, offGen), 1)
	start := time.Now()
	if _, err := s.NewCounter(Opts{Name: "b_total"}); err != nil {
		t.Fatalf("after a dead holder: %v", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("takeover took %v", time.Since(start))
	}
	if g := atomic.LoadUint64(word64(s.mem, offGen)); g != 6 {
		t.Errorf("generation %d, want 6 (2, repaired to 4, +2)", g)
	}
	if l := atomic.LoadUint32(word32(s.mem, offLock)); l != 0 {
		t.Errorf("lock left at %d", l)
	}
}

// TestLiveLockIsBusy: a live holder that maps the segment (a re-executed test binary that
// opened it) keeps its lock; registration gives up with ErrBusy.
func TestLiveLockIsBusy(t *testing.T) {
	if p := os.Getenv("MV_TEST_HOLD_SEGMENT"); p != "" {
		if _, err := Open(p); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("ready\n")
		_, _ = io.Copy(io.Discard, os.Stdin) // hold the mapping until the parent closes stdin
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("waits 2 s")
	}
	p := newSegFile(t, 4096)
	s := mustOpen(t, p)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLiveLockIsBusy$")
	cmd.Env = append(os.Environ(), "MV_TEST_HOLD_SEGMENT="+p)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Skip("cannot re-execute the test binary: ", err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("holder did not map the segment: %q %v", line, err)
	}
	atomic.StoreUint32(word32(s.mem, offLock), uint32(cmd.Process.Pid))
	c, err := s.NewCounter(Opts{Name: "x_total"})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("got %v, want ErrBusy", err)
	}
	c.Inc() // the scratch handle is harmless
	atomic.StoreUint32(word32(s.mem, offLock), 0)
	if _, err := s.NewCounter(Opts{Name: "x_total"}); err != nil {
		t.Fatal(err)
	}
}

// TestLockOfLiveNonMappingPidTakenOver: the lock names a live process that does not map the
// segment (its pid was reused after the holder died); it is taken over at once, not after
// the 2 s give-up.
func TestLockOfLiveNonMappingPidTakenOver(t *testing.T) {
	s := mustOpen(t, newSegFile(t, 4096))
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("cannot run sleep: ", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	atomic.StoreUint32(word32(s.mem, offLock), uint32(cmd.Process.Pid))
	start := time.Now()
	if _, err := s.NewCounter(Opts{Name: "x_total"}); err != nil {
		t.Fatalf("lock of a pid that does not map the segment: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("takeover took %v", d)
	}
	if l := atomic.LoadUint32(word32(s.mem, offLock)); l != 0 {
		t.Errorf("lock left at %d", l)
	}
}

// TestDeadAppenderInsideStep9: an appender stored values_used and catalog_used of a complete
// record, then died before metric_count, holding the lock. A new writer opens the segment
// (busy for 200 ms: it repairs it) and registers; the dead appender's record counts, and
// the C reader (MV_SEG_DECODE, when set) accepts the catalog.
func TestDeadAppenderInsideStep9(t *testing.T) {
	p := newSegFile(t, 4096)
	s := mustOpen(t, p)
	if _, err := s.NewCounter(Opts{Name: "a_total"}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true: ", err)
	}
	mem := s.mem
	atomic.StoreUint32(word32(mem, offLock), uint32(cmd.Process.Pid))
	c, err := parseCatalog(mem)
	if err != nil {
		t.Fatal(err)
	}
	atomic.AddUint64(word64(mem, offGen), 1) // step 6
	d := &desc{typ: typeCounter, name: "b_total"}
	voff, coff := int(c.valuesUsed), int(c.catalogUsed)
	at := int(c.catalogOff) + coff
	d.encode(mem[at:at+d.recordSize()], uint32(voff)) // step 8
	le.PutUint64(mem[int(c.valuesOffset)+voff:], 7)
	atomic.StoreUint32(word32(mem, offValUsed), uint32(voff+d.valueSize())) // step 9, part
	atomic.StoreUint32(word32(mem, offCatUsed), uint32(coff+d.recordSize()))

	start := time.Now()
	s2, err := Open(p)
	if err != nil {
		t.Fatalf("open after a dead appender: %v", err)
	}
	defer s2.Close()
	if _, err := s2.NewCounter(Opts{Name: "c_total"}); err != nil {
		t.Fatalf("register after a dead appender: %v", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("open and register took %v", d)
	}
	c, err = parseCatalog(mem)
	if err != nil {
		t.Fatalf("catalog after repair: %v", err)
	}
	var names []string
	for _, r := range c.records {
		names = append(names, r.name)
	}
	if strings.Join(names, ",") != "a_total,b_total,c_total" || c.count != 3 {
		t.Errorf("records %v (count %d), want a_total,b_total,c_total", names, c.count)
	}
	if g := c.generation; g != 6 {
		t.Errorf("generation %d, want 6 (2, odd 3, repaired to 4, +2)", g)
	}
	if l := atomic.LoadUint32(word32(mem, offLock)); l != 0 {
		t.Errorf("lock left at %d", l)
	}
	dec := os.Getenv("MV_SEG_DECODE")
	if dec == "" {
		t.Log("MV_SEG_DECODE not set: C reader check not run")
		return
	}
	out, err := exec.Command(dec, p).Output()
	if err != nil {
		t.Fatalf("the C reader rejected the repaired segment: %v", err)
	}
	var doc struct {
		Metrics []struct {
			Name  string  `json:"name"`
			Value float64 `json:"value"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("C reader output: %v", err)
	}
	got := map[string]float64{}
	for _, m := range doc.Metrics {
		got[m.Name] = m.Value
	}
	if len(doc.Metrics) != 3 || got["b_total"] != 7 {
		t.Errorf("C reader saw %v, want a_total, b_total=7, c_total", got)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Setenv(EnvSegment, "")
	if _, err := OpenFromEnv(); !errors.Is(err, ErrNoEnv) {
		t.Errorf("no env: %v", err)
	}
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoSegment) {
		t.Errorf("missing: %v", err)
	}
	small := filepath.Join(dir, "small")
	os.WriteFile(small, make([]byte, 512), 0o600)
	if _, err := Open(small); !errors.Is(err, ErrFormat) {
		t.Errorf("small: %v", err)
	}
	junk := filepath.Join(dir, "junk")
	b := make([]byte, 4096)
	copy(b, "NOTASEGMENT")
	os.WriteFile(junk, b, 0o600)
	if _, err := Open(junk); !errors.Is(err, ErrFormat) {
		t.Errorf("junk: %v", err)
	}
	half := filepath.Join(dir, "half") // magic zero but header not: refuse to format
	b = make([]byte, 4096)
	b[20] = 1
	os.WriteFile(half, b, 0o600)
	if _, err := Open(half); !errors.Is(err, ErrFormat) {
		t.Errorf("half: %v", err)
	}
	// A scribbled catalog record is found at open.
	p := newSegFile(t, 4096)
	s := mustOpen(t, p)
	s.NewCounter(Opts{Name: "ok_total"})
	cat, _ := parseCatalog(s.mem)
	s.mem[int(cat.catalogOff)+30] ^= 0xff
	if _, err := Open(p); !errors.Is(err, ErrFormat) {
		t.Errorf("bad checksum: %v", err)
	}
	t.Setenv(EnvSegment, p)
	if _, err := OpenFromEnv(); !errors.Is(err, ErrFormat) {
		t.Errorf("env: %v", err)
	}
}

func TestRegistrationErrorsGiveHarmlessHandles(t *testing.T) {
	s := mustOpen(t, newSegFile(t, 4096))
	h, err := s.NewHistogram(Opts{Name: "bad name"}, []float64{1})
	if !errors.Is(err, ErrName) || h == nil {
		t.Fatalf("got %v", err)
	}
	h.Observe(3)
	c, err := s.NewCounter(Opts{Name: "ok_total", Help: "bad\x00help"})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v", err)
	}
	c.Inc()
	if _, err := ExponentialBuckets(1, 2, 2000); !errors.Is(err, ErrInvalid) {
		t.Errorf("buckets: %v", err)
	}
	b, err := ExponentialBuckets(0.001, 10, 4)
	if err != nil || len(b) != 4 || math.Abs(b[3]-1) > 1e-12 {
		t.Errorf("buckets %v %v", b, err)
	}
}

// Type 4: whole amounts in word 0, fractions in word 1, the value their sum; NaN counted
// by ObserveAll; a full segment names the size to ask for.
func TestCounterFAndNaNAndFull(t *testing.T) {
	s := mustOpen(t, newSegFile(t, 4096))
	c, err := s.NewCounterF(Opts{Name: "cpu_seconds_total"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				c.Add(0.25)
				c.Inc()
			}
		}()
	}
	wg.Wait()
	if v := c.Value(); v != 8*1000*1.25 {
		t.Fatalf("counter_f value %v, want 10000", v)
	}
	if w0 := atomic.LoadUint64(c.w); w0 != 8000 {
		t.Fatalf("integral word %d, want 8000", w0)
	}
	again, err := s.NewCounterF(Opts{Name: "cpu_seconds_total"})
	if err != nil || again.w != c.w {
		t.Fatalf("re-registration did not find the series: %v", err)
	}
	if _, err := s.NewCounter(Opts{Name: "cpu_seconds_total", Labels: []Label{{"a", "b"}}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("type 1 on a type 4 name: %v, want ErrConflict", err)
	}
	h, _ := s.NewHistogram(Opts{Name: "lat"}, []float64{1})
	h.Observe(math.NaN())
	n, sum, b := h.Snapshot()
	if n != 1 || !math.IsNaN(sum) || b[1] != 1 {
		t.Fatalf("NaN observation: count %d sum %v buckets %v", n, sum, b)
	}
	quiescentOK(t, h)
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		_, full = s.NewGauge(Opts{Name: fmt.Sprintf("g%d", i)})
	}
	if !errors.Is(full, ErrFull) || !strings.Contains(full.Error(), "this segment is 4Ki: ask for a larger one with the pod annotation microview.io/metrics-memory: 8Ki") {
		t.Fatalf("full segment error: %v", full)
	}
	if f := s.Usage().Fullness(); f < 0.5 || f > 1 {
		t.Fatalf("fullness %g", f)
	}
	if err := c.Add(-1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative add: %v", err)
	}
}
