// Replays the shared test vectors (tests/vectors/*.ops) through this writer and compares the
// resulting segment byte for byte with what libmicroview wrote (tests/vectors/*.hex).

package microview

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func vectorsDir(t *testing.T) string {
	if d := os.Getenv("MV_VECTORS_DIR"); d != "" {
		return d
	}
	d, err := filepath.Abs(filepath.Join("..", "..", "tests", "vectors"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("bad escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", err
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

func parseFloat(s string) (float64, error) {
	switch strings.ToLower(s) {
	case "nan", "-nan", "+nan":
		return math.NaN(), nil
	case "inf", "+inf":
		return math.Inf(1), nil
	case "-inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

var errKinds = map[string]error{"name": ErrName, "invalid": ErrInvalid, "conflict": ErrConflict,
	"full": ErrFull, "busy": ErrBusy, "format": ErrFormat, "nosegment": ErrNoSegment}

type replayer struct {
	path   string
	size   int
	seg    *Segment
	c      map[string]Counter
	f      map[string]CounterF
	opts   map[string]Opts // what each id registered, for delete
	g      map[string]Gauge
	h      map[string]*Histogram
	stamps []func([]byte)
}

func (r *replayer) register(kind string, args []string) (string, error) {
	if len(args) < 1 {
		return "", fmt.Errorf("registration needs an id")
	}
	var o Opts
	var bounds []float64
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return "", fmt.Errorf("argument %s is not key=value", a)
		}
		switch k {
		case "label":
			lk, lv, ok := strings.Cut(v, "=")
			if !ok {
				return "", fmt.Errorf("label needs key=value")
			}
			var err1, err2 error
			var l Label
			l.Key, err1 = unescape(lk)
			l.Value, err2 = unescape(lv)
			if err1 != nil || err2 != nil {
				return "", fmt.Errorf("bad escape")
			}
			o.Labels = append(o.Labels, l)
		case "bounds":
			for _, b := range strings.Split(v, ",") {
				f, err := parseFloat(b)
				if err != nil {
					return "", err
				}
				bounds = append(bounds, f)
			}
		case "name", "help", "unit":
			u, err := unescape(v)
			if err != nil {
				return "", err
			}
			switch k {
			case "name":
				o.Name = u
			case "help":
				o.Help = u
			default:
				o.Unit = u
			}
		default:
			return "", fmt.Errorf("unknown argument %s", k)
		}
	}
	id := args[0]
	var err error
	switch kind {
	case "counter":
		var c Counter
		if c, err = r.seg.NewCounter(o); err == nil {
			r.c[id] = c
		}
	case "counter_f":
		var c CounterF
		if c, err = r.seg.NewCounterF(o); err == nil {
			r.f[id] = c
		}
	case "gauge":
		var g Gauge
		if g, err = r.seg.NewGauge(o); err == nil {
			r.g[id] = g
		}
	case "histogram":
		var h *Histogram
		if h, err = r.seg.NewHistogram(o, bounds); err == nil {
			r.h[id] = h
		}
	default:
		return "", fmt.Errorf("unknown kind %s", kind)
	}
	if err == nil {
		r.opts[id] = o
	}
	return o.Name, err
}

func (r *replayer) line(tok []string) error {
	op := tok[0]
	switch op {
	case "size":
		n, err := strconv.Atoi(tok[1])
		if err != nil {
			return err
		}
		r.size = n
		return os.WriteFile(r.path, make([]byte, n), 0o600)
	case "format":
		var inst, created, vsize uint64
		for _, a := range tok[1:] {
			k, v, _ := strings.Cut(a, "=")
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return err
			}
			switch k {
			case "instance":
				inst = n
			case "created_ns":
				created = n
			case "values_size":
				vsize = n
			default:
				return fmt.Errorf("unknown format argument %s", k)
			}
		}
		f, err := os.OpenFile(r.path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		mem, err := syscall.Mmap(int(f.Fd()), 0, r.size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			return err
		}
		defer syscall.Munmap(mem)
		return formatSegment(mem, uint32(vsize), inst, created)
	case "open":
		s, err := Open(r.path)
		r.seg = s
		return err
	case "stamp":
		for _, a := range tok[1:] {
			k, v, _ := strings.Cut(a, "=")
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return err
			}
			off, width := map[string]int{"instance": offInstance, "heartbeat_ns": offHeartbeat,
				"created_ns": offCreated, "writer_pid": offWriterPid}[k], 8
			if k == "writer_pid" {
				width = 4
			}
			if off == 0 {
				return fmt.Errorf("unknown stamp field %s", k)
			}
			r.stamps = append(r.stamps, func(b []byte) {
				for i := 0; i < width; i++ {
					b[off+i] = byte(n >> (8 * i))
				}
			})
		}
		return nil
	case "usage":
		u := r.seg.Usage()
		want := fmt.Sprintf("values_used=%d catalog_used=%d", u.ValuesUsed, u.CatalogUsed)
		if strings.Join(tok[1:], " ") != want {
			return fmt.Errorf("usage: %s, want %s", want, strings.Join(tok[1:], " "))
		}
		if f := u.Fullness(); f <= 0 || f > 1 {
			return fmt.Errorf("fullness %g", f)
		}
		return nil
	case "refuse":
		if len(tok) != 4 || tok[1] != "fadd" {
			return fmt.Errorf("refuse takes fadd ID F")
		}
		f, err := parseFloat(tok[3])
		if err != nil {
			return err
		}
		if err := r.f[tok[2]].Add(f); !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("fadd %v: got %v, want ErrInvalid", f, err)
		}
		return nil
	case "delete":
		o, ok := r.opts[tok[1]]
		if !ok {
			return fmt.Errorf("delete of unknown id %s", tok[1])
		}
		if done, err := r.seg.Delete(o); err != nil || !done {
			return fmt.Errorf("delete %s: %v, %v", o.Name, done, err)
		}
		delete(r.opts, tok[1])
		return nil
	case "counter", "counter_f", "gauge", "histogram":
		name, err := r.register(op, tok[1:])
		if err != nil {
			return fmt.Errorf("registering %s: %v", name, err)
		}
		return nil
	case "fail":
		want := errKinds[tok[1]]
		name, err := r.register(tok[2], tok[3:])
		if !errors.Is(err, want) {
			return fmt.Errorf("registering %s: got %v, want %v", name, err, want)
		}
		return nil
	}
	id := tok[1]
	var v string
	if len(tok) > 2 {
		v = tok[2]
	}
	switch op {
	case "inc":
		if c, ok := r.f[id]; ok {
			c.Inc()
		} else {
			r.c[id].Inc()
		}
	case "fadd":
		f, err := parseFloat(v)
		if err != nil {
			return err
		}
		if err := r.f[id].Add(f); err != nil {
			return err
		}
	case "add":
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return err
		}
		r.c[id].Add(n)
	case "set", "gadd", "observe":
		f, err := parseFloat(v)
		if err != nil {
			return err
		}
		switch op {
		case "set":
			r.g[id].Set(f)
		case "gadd":
			r.g[id].Add(f)
		default:
			r.h[id].Observe(f)
		}
	default:
		return fmt.Errorf("unknown operation %s", op)
	}
	return nil
}

func replayOps(t *testing.T, opsPath string) []byte {
	f, err := os.Open(opsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := &replayer{path: filepath.Join(t.TempDir(), "segment"), c: map[string]Counter{},
		f: map[string]CounterF{}, opts: map[string]Opts{},
		g: map[string]Gauge{}, h: map[string]*Histogram{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		tok := strings.Fields(line)
		if len(tok) == 0 {
			continue
		}
		if err := r.line(tok); err != nil {
			t.Fatalf("%s:%d: %v", opsPath, n, err)
		}
	}
	if r.seg != nil {
		if err := r.seg.Close(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.stamps {
		s(b)
	}
	return b
}

func readHex(t *testing.T, path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseHex(string(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// parseHex reads a NAME.hex vector: "size N", then "OFFSET: 16 bytes" lines.
func parseHex(data string) ([]byte, error) {
	var out []byte
	for _, line := range strings.Split(data, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if strings.HasPrefix(line, "size ") {
			n, err := strconv.Atoi(line[5:])
			if err != nil || n < 0 || n > 1<<24 {
				return nil, fmt.Errorf("bad size line %q", line)
			}
			out = make([]byte, n)
			continue
		}
		off, rest, ok := strings.Cut(line, ":")
		o, err := strconv.ParseUint(off, 16, 32)
		f := strings.Fields(rest)
		if !ok || err != nil || len(f) != 16 || int(o)+16 > len(out) {
			return nil, fmt.Errorf("bad line %q", line)
		}
		for i, x := range f {
			v, err := strconv.ParseUint(x, 16, 8)
			if err != nil {
				return nil, fmt.Errorf("bad byte %q", x)
			}
			out[int(o)+i] = byte(v)
		}
	}
	return out, nil
}

func TestVectors(t *testing.T) {
	t.Setenv(EnvPlacement, "") // the vectors pin the default slot placement
	ops, _ := filepath.Glob(filepath.Join(vectorsDir(t), "*.ops"))
	if len(ops) == 0 {
		t.Fatalf("no vectors in %s", vectorsDir(t))
	}
	for _, p := range ops {
		p := p
		t.Run(strings.TrimSuffix(filepath.Base(p), ".ops"), func(t *testing.T) {
			got := replayOps(t, p)
			want := readHex(t, strings.TrimSuffix(p, ".ops")+".hex")
			if len(got) != len(want) {
				t.Fatalf("segment is %d bytes, vector %d", len(got), len(want))
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("first difference at byte 0x%x: Go writer wrote %02x, libmicroview %02x\n got: % x\nwant: % x",
					i, got[i], want[i], got[i&^15:min16(i&^15+16, len(got))], want[i&^15:min16(i&^15+16, len(want))])
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func min16(a, b int) int {
	if a < b {
		return a
	}
	return b
}
