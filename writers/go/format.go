// Segment format v1 (docs/segment-format.md): constants, the formatter, record encoding,
// description checks and the validating catalog parser the registration protocol needs.

package microview

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"
)

const (
	headerSize   = 128
	minSize      = 1024
	maxSize      = 1 << 30
	recordHead   = 24
	recSharded   = 0x01 // record flag: the slot holds shard_count shards (section 5.2)
	shardsMax    = 64
	recordMin    = 40
	lineSize     = 64 // cache line: slots start on one (section 5.1)
	nameMax      = 255
	helpMax      = 1024
	unitMax      = 63
	labelsMax    = 16
	labelKeyMax  = 127
	labelValMax  = 255
	bucketsMax   = 160
	metricsMax   = 65535
	typeCounter  = 1
	typeGauge    = 2
	typeHist     = 3
	typeCounterF = 4 // counter_f: u64 integral part + binary64 fractional accumulator
	typeTomb     = 5 // tombstone: deletes an earlier record (section 6.6)
	fnvOffset    = 0xcbf29ce484222325
	fnvPrime     = 0x100000001b3
	goldenGamma  = 0x9E3779B97F4A7C15
	offVersion   = 8
	offHdrSize   = 10
	offFlags     = 12
	offSegSize   = 16
	offValOff    = 24
	offValSize   = 28
	offCatOff    = 32
	offCatSize   = 36
	offInstance  = 40
	offGen       = 48
	offCount     = 56
	offValUsed   = 60
	offCatUsed   = 64
	offLock      = 68
	offHeartbeat = 72
	offCreated   = 80
	offWriterPid = 88
	offReserved0 = 92
)

var le = binary.LittleEndian

// magic is "MVIEWSEG" as the little-endian u64 stored at offset 0.
var magic = le.Uint64([]byte("MVIEWSEG"))

func align8(n int) int { return (n + 7) &^ 7 }

// fnv1a64 is the catalog record checksum (section 6.3).
func fnv1a64(b []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// histWeight is W(i) of the histogram checksum (section 9.3).
func histWeight(i int) uint64 {
	z := uint64(i+1) * goldenGamma
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return (z ^ (z >> 31)) | 1
}

func word64(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
func word32(mem []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }

// defaultLayout is section 3.1's split.
func defaultLayout(size uint64) (values, catalog uint32, ok bool) {
	if size < minSize || size > maxSize || size%8 != 0 {
		return 0, 0, false
	}
	rest := size - headerSize
	v := (rest / 4) &^ 63
	if v < 512 {
		v = 512
	}
	return uint32(v), uint32(rest - v), true
}

// formatSegment writes a fresh v1 header into an all-zero mapping (section 7 steps 3-4);
// valuesSize 0 selects the default layout. The magic is stored last.
func formatSegment(mem []byte, valuesSize uint32, instance, createdNs uint64) error {
	size := uint64(len(mem))
	vdef, _, ok := defaultLayout(size)
	if !ok {
		return fail(ErrFormat, fmt.Sprintf("segment size %d is not a multiple of 8 in [%d, %d] bytes", size, minSize, maxSize))
	}
	if instance == 0 {
		return fail(ErrInvalid, "instance id must be nonzero")
	}
	if valuesSize == 0 {
		valuesSize = vdef
	}
	if valuesSize%64 != 0 || valuesSize < 64 || uint64(valuesSize)+headerSize+256 > size {
		return fail(ErrFormat, fmt.Sprintf("value area of %d bytes does not fit a %d-byte segment", valuesSize, size))
	}
	for i := 8; i < headerSize; i++ {
		mem[i] = 0
	}
	le.PutUint16(mem[offVersion:], 1)
	le.PutUint16(mem[offHdrSize:], headerSize)
	le.PutUint64(mem[offSegSize:], size)
	le.PutUint32(mem[offValOff:], headerSize)
	le.PutUint32(mem[offValSize:], valuesSize)
	le.PutUint32(mem[offCatOff:], headerSize+valuesSize)
	le.PutUint32(mem[offCatSize:], uint32(size)-headerSize-valuesSize)
	le.PutUint64(mem[offInstance:], instance)
	le.PutUint64(mem[offCreated:], createdNs)
	atomic.StoreUint64(word64(mem, 0), magic) // release: a reader that sees it sees the header
	return nil
}

// ---- Metric descriptions --------------------------------------------------------

type desc struct {
	typ    uint8
	name   string
	help   string
	unit   string
	labels []Label
	bounds []float64
	tombOf uint32 // a tombstone: the value_offset of the record it deletes
}

func validName(s string, colon bool) bool {
	if len(s) == 0 || (len(s) >= 2 && s[0] == '_' && s[1] == '_') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case colon && c == ':':
		case i > 0 && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}

// validText is well-formed UTF-8 without NUL (section 6.2).
func validText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return false
		}
	}
	return utf8.ValidString(s)
}

// check validates d as libmicroview's mv_seg_desc_check does; the kinds follow libmicroview
// (a bad name, label key or `le` is ErrName, everything else ErrInvalid).
func (d *desc) check() error {
	if len(d.name) > nameMax || !validName(d.name, true) {
		return fail(ErrName, fmt.Sprintf("metric name %.64q is not [a-zA-Z_:][a-zA-Z0-9_:]* of at most %d bytes (and may not start with __)", d.name, nameMax))
	}
	if len(d.help) > helpMax || !validText(d.help) {
		return fail(ErrInvalid, fmt.Sprintf("metric %s: help is not UTF-8 of at most %d bytes", d.name, helpMax))
	}
	if len(d.unit) > unitMax || (d.unit != "" && !validName(d.unit, false)) {
		return fail(ErrInvalid, fmt.Sprintf("metric %s: unit must be [a-zA-Z_][a-zA-Z0-9_]* of at most %d bytes", d.name, unitMax))
	}
	if len(d.labels) > labelsMax {
		return fail(ErrInvalid, fmt.Sprintf("metric %s: %d labels (at most %d)", d.name, len(d.labels), labelsMax))
	}
	for i, l := range d.labels {
		if len(l.Key) > labelKeyMax || !validName(l.Key, false) {
			return fail(ErrName, fmt.Sprintf("metric %s: label name %.64q is not [a-zA-Z_][a-zA-Z0-9_]* of at most %d bytes (and may not start with __)", d.name, l.Key, labelKeyMax))
		}
		if d.typ == typeHist && l.Key == "le" {
			return fail(ErrName, fmt.Sprintf("metric %s: histograms may not have a label 'le'", d.name))
		}
		if len(l.Value) > labelValMax || !validText(l.Value) {
			return fail(ErrInvalid, fmt.Sprintf("metric %s: value of label %s is not UTF-8 of at most %d bytes", d.name, l.Key, labelValMax))
		}
		for _, p := range d.labels[:i] {
			if p.Key == l.Key {
				return fail(ErrInvalid, fmt.Sprintf("metric %s: label %s given twice", d.name, l.Key))
			}
		}
	}
	if d.typ == typeHist {
		if len(d.bounds) == 0 || len(d.bounds) > bucketsMax {
			return fail(ErrInvalid, fmt.Sprintf("histogram %s: %d bucket bounds (1 to %d)", d.name, len(d.bounds), bucketsMax))
		}
		for i, b := range d.bounds {
			if math.IsInf(b, 0) || math.IsNaN(b) || (i > 0 && !(b > d.bounds[i-1])) {
				return fail(ErrInvalid, fmt.Sprintf("histogram %s: bucket bounds must be finite and strictly increasing (bound %d is %g)", d.name, i, b))
			}
		}
	} else if len(d.bounds) != 0 {
		return fail(ErrInvalid, fmt.Sprintf("metric %s: only histograms have buckets", d.name))
	}
	return nil
}

// placeSlot is libmicroview's slot placement (section 5.1, mv_seg_place_slot): the next
// 64-byte line of the value area, as long as that leaves 8 value bytes for every further
// record of this size the catalog area could still take; otherwise packed at valuesUsed.
// The caller checks that the slot fits.
func placeSlot(valuesUsed, valuesSize, catalogUsed, catalogSize uint32, recordSize, valueSize int) int {
	line := (uint64(valuesUsed) + lineSize - 1) &^ (lineSize - 1)
	catEnd, more := uint64(catalogUsed)+uint64(recordSize), uint64(0)
	if recordSize > 0 && catEnd < uint64(catalogSize) {
		more = (uint64(catalogSize) - catEnd) / uint64(recordSize)
	}
	if line+uint64(valueSize)+8*more <= uint64(valuesSize) {
		return int(line)
	}
	return int(valuesUsed)
}

// validShards: a sharded record's shard count is a power of two from 2 to 64.
func validShards(n int) bool { return n >= 2 && n <= shardsMax && n&(n-1) == 0 }

// shardStride: the bytes from one shard of a sharded record to the next, its value's size
// rounded up to whole 64-byte lines.
func shardStride(size uint32) uint32 { return (size + 63) &^ 63 }

func (d *desc) valueSize() int {
	switch d.typ {
	case typeHist:
		return 8 * (len(d.bounds) + 4)
	case typeCounterF:
		return 16
	case typeTomb:
		return 0
	}
	return 8
}

func (d *desc) recordSize() int {
	n := recordHead + 9 + len(d.name) + len(d.help) + len(d.unit)
	for _, l := range d.labels {
		n += 6 + len(l.Key) + len(l.Value)
	}
	return align8(n) + 8*len(d.bounds) + 8
}

// encode writes the record (section 6.1) into out, which has recordSize() bytes.
func (d *desc) encode(out []byte, valueOffset uint32) {
	for i := range out {
		out[i] = 0
	}
	le.PutUint32(out[0:], uint32(len(out)))
	out[4] = d.typ
	le.PutUint16(out[6:], uint16(len(d.labels)))
	le.PutUint32(out[8:], valueOffset)
	le.PutUint32(out[12:], uint32(d.valueSize()))
	le.PutUint16(out[16:], uint16(len(d.bounds)))
	p := recordHead
	put := func(s string) {
		le.PutUint16(out[p:], uint16(len(s)))
		copy(out[p+2:], s)
		p += 3 + len(s)
	}
	put(d.name)
	put(d.help)
	put(d.unit)
	for _, l := range d.labels {
		put(l.Key)
		put(l.Value)
	}
	p = align8(p)
	for _, b := range d.bounds {
		le.PutUint64(out[p:], math.Float64bits(b))
		p += 8
	}
	le.PutUint64(out[len(out)-8:], fnv1a64(out[:len(out)-8]))
}

// ---- The validating catalog parser -----------------------------------------------

type record struct {
	typ         uint8
	name        string
	labels      []Label
	bounds      []float64
	valueOffset uint32
	valueSize   uint32
	shards      int  // 1, or a sharded record's shard count (section 5.2)
	deleted     bool // a later tombstone deletes it (section 6.6)
}

type catalog struct {
	generation   uint64
	valuesOffset uint32
	valuesSize   uint32
	valuesUsed   uint32
	catalogOff   uint32
	catalogSize  uint32
	catalogUsed  uint32
	count        uint32
	records      []record
}

// reasonError is a rejection with the spec's reason name (section 13).
type reasonError struct {
	reason, detail string
}

func (e *reasonError) Error() string { return e.detail + " (" + e.reason + ")" }

func reject(reason, format string, a ...interface{}) error {
	return &reasonError{reason, fmt.Sprintf(format, a...)}
}

// parseCatalog validates the header and every published record of seg (section 11.4).
// It reads the bytes with plain loads: callers hold the registration lock, or retry when
// the generation moved (an append raced the parse).
func parseCatalog(seg []byte) (*catalog, error) {
	if len(seg) < headerSize {
		return nil, reject("truncated", "segment shorter than the header")
	}
	if le.Uint64(seg) != magic {
		if le.Uint64(seg) == 0 {
			return nil, reject("bad_magic", "segment is not formatted yet (magic is zero)")
		}
		return nil, reject("bad_magic", "magic is not MVIEWSEG")
	}
	if v := le.Uint16(seg[offVersion:]); v != 1 {
		return nil, reject("bad_version", "format version %d is not supported (this writer: 1)", v)
	}
	if le.Uint16(seg[offHdrSize:]) != headerSize || le.Uint32(seg[offFlags:]) != 0 || le.Uint32(seg[offReserved0:]) != 0 {
		return nil, reject("bad_header", "header_size / flags / reserved not as in v1")
	}
	for i := 96; i < headerSize; i++ {
		if seg[i] != 0 {
			return nil, reject("bad_header", "reserved header byte %d is not zero", i)
		}
	}
	size := le.Uint64(seg[offSegSize:])
	if size < minSize || size > maxSize || size%8 != 0 || size != uint64(len(seg)) {
		return nil, reject("bad_size", "segment_size %d but the segment is %d bytes", size, len(seg))
	}
	c := &catalog{
		generation:   le.Uint64(seg[offGen:]),
		valuesOffset: le.Uint32(seg[offValOff:]),
		valuesSize:   le.Uint32(seg[offValSize:]),
		catalogOff:   le.Uint32(seg[offCatOff:]),
		catalogSize:  le.Uint32(seg[offCatSize:]),
		count:        le.Uint32(seg[offCount:]),
		valuesUsed:   le.Uint32(seg[offValUsed:]),
		catalogUsed:  le.Uint32(seg[offCatUsed:]),
	}
	vo, vs, co, cs := uint64(c.valuesOffset), uint64(c.valuesSize), uint64(c.catalogOff), uint64(c.catalogSize)
	if vo%8 != 0 || vs%8 != 0 || co%8 != 0 || cs%8 != 0 {
		return nil, reject("bad_layout", "areas are not 8-byte aligned")
	}
	if vo < headerSize || co < headerSize {
		return nil, reject("overlap", "an area overlaps the header")
	}
	if vo+vs > size || co+cs > size {
		return nil, reject("bad_layout", "areas exceed the segment")
	}
	if vo < co+cs && co < vo+vs {
		return nil, reject("overlap", "value area and catalog area overlap")
	}
	if uint64(c.valuesUsed) > vs || c.valuesUsed%8 != 0 {
		return nil, reject("bad_count", "values_used %d exceeds the %d-byte value area", c.valuesUsed, vs)
	}
	if uint64(c.catalogUsed) > cs || c.catalogUsed%8 != 0 {
		return nil, reject("bad_count", "catalog_used %d exceeds the %d-byte catalog area", c.catalogUsed, cs)
	}
	if c.count > metricsMax || uint64(c.count)*recordMin > uint64(c.catalogUsed) {
		return nil, reject("bad_count", "metric_count %d cannot fit in %d catalog bytes", c.count, c.catalogUsed)
	}
	if le.Uint64(seg[offInstance:]) == 0 {
		return nil, reject("bad_header", "instance is zero")
	}
	if c.generation&1 != 0 {
		return nil, reject("busy", "catalog append in progress (generation %d)", c.generation)
	}
	cat := seg[co : co+uint64(c.catalogUsed)]
	pos := 0
	valueEnd := uint32(0)
	c.records = make([]record, 0, c.count)
	for i := 0; i < int(c.count); i++ {
		r, n, err := parseRecord(cat[pos:], i, c.valuesUsed, &valueEnd)
		if err != nil {
			return nil, err
		}
		c.records = append(c.records, r)
		pos += n
	}
	if pos != len(cat) {
		return nil, reject("bad_count", "%d records use %d bytes but catalog_used is %d", c.count, pos, len(cat))
	}
	return c, checkFamilies(c.records)
}

func parseRecord(rec []byte, idx int, valuesUsed uint32, valueEnd *uint32) (record, int, error) {
	var r record
	if len(rec) < recordHead {
		return r, 0, reject("bad_record", "record %d: header runs past catalog_used", idx)
	}
	size := int(le.Uint32(rec))
	if size < recordMin || size%8 != 0 || size > len(rec) {
		return r, 0, reject("bad_record", "record %d: size %d is not a multiple of 8 in [%d, %d]", idx, size, recordMin, len(rec))
	}
	rec = rec[:size]
	if le.Uint64(rec[size-8:]) != fnv1a64(rec[:size-8]) {
		return r, 0, reject("bad_checksum", "record %d: checksum mismatch", idx)
	}
	flags, shards := rec[5], int(le.Uint16(rec[18:]))
	if flags&^recSharded != 0 || le.Uint32(rec[20:]) != 0 {
		return r, 0, reject("bad_record", "record %d: unknown flags or reserved fields not zero", idx)
	}
	if flags&recSharded != 0 && !validShards(shards) || flags&recSharded == 0 && shards != 0 {
		return r, 0, reject("bad_record", "record %d: shard_count %d (sharded: a power of two from 2 to %d, else 0)", idx, shards, shardsMax)
	}
	r.typ = rec[4]
	if r.typ < typeCounter || r.typ > typeTomb {
		return r, 0, reject("bad_type", "record %d: unknown type %d", idx, r.typ)
	}
	nl := int(le.Uint16(rec[6:]))
	nb := int(le.Uint16(rec[16:]))
	if nl > labelsMax {
		return r, 0, reject("bad_count", "record %d: %d labels", idx, nl)
	}
	if (r.typ == typeHist && (nb == 0 || nb > bucketsMax)) || (r.typ != typeHist && nb != 0) {
		return r, 0, reject("bad_count", "record %d: bucket_count %d invalid for type %d", idx, nb, r.typ)
	}
	want := uint32(8)
	switch r.typ {
	case typeHist:
		want = uint32(8 * (nb + 4))
	case typeCounterF:
		want = 16
	case typeTomb:
		want = 0
		if flags != 0 {
			return r, 0, reject("bad_record", "record %d: a tombstone has no flags", idx)
		}
	}
	r.shards = 1
	if shards > 1 {
		r.shards = shards
		want = uint32(shards) * shardStride(want)
	}
	r.valueOffset, r.valueSize = le.Uint32(rec[8:]), le.Uint32(rec[12:])
	if r.valueSize != want {
		return r, 0, reject("bad_record", "record %d: value_size %d, expected %d", idx, r.valueSize, want)
	}
	if r.typ != typeTomb { // a tombstone has no slot: no part in the slot rules
		if r.valueOffset%8 != 0 {
			return r, 0, reject("bad_value_range", "record %d: value_offset %d is not 8-aligned", idx, r.valueOffset)
		}
		if r.valueOffset < *valueEnd {
			return r, 0, reject("overlap", "record %d: value slot overlaps the previous one", idx)
		}
		if uint64(r.valueOffset)+uint64(r.valueSize) > uint64(valuesUsed) {
			return r, 0, reject("bad_value_range", "record %d: value slot outside the used value area", idx)
		}
		*valueEnd = r.valueOffset + r.valueSize
	}
	end, pos := size-8, recordHead
	str := func(max int, what string) (string, error) {
		if pos+3 > end {
			return "", reject("bad_record", "record %d: %s runs past the record", idx, what)
		}
		n := int(le.Uint16(rec[pos:]))
		if n > max {
			return "", reject("bad_string", "record %d: %s is %d bytes (at most %d)", idx, what, n, max)
		}
		if pos+3+n > end {
			return "", reject("bad_record", "record %d: %s runs past the record", idx, what)
		}
		if rec[pos+2+n] != 0 {
			return "", reject("bad_string", "record %d: %s is not NUL-terminated", idx, what)
		}
		s := string(rec[pos+2 : pos+2+n])
		if !validText(s) {
			return "", reject("bad_string", "record %d: %s is not valid UTF-8 (or has NUL)", idx, what)
		}
		pos += 3 + n
		return s, nil
	}
	var err error
	if r.name, err = str(nameMax, "name"); err != nil {
		return r, 0, err
	}
	if !validName(r.name, true) {
		return r, 0, reject("bad_name", "record %d: invalid metric name", idx)
	}
	help, err := str(helpMax, "help")
	if err != nil {
		return r, 0, err
	}
	unit, err := str(unitMax, "unit")
	if err != nil {
		return r, 0, err
	}
	if r.typ == typeTomb && (help != "" || unit != "") {
		return r, 0, reject("bad_record", "record %d: a tombstone has empty help and unit", idx)
	}
	if unit != "" && !validName(unit, false) {
		return r, 0, reject("bad_name", "record %d: invalid unit", idx)
	}
	for i := 0; i < nl; i++ {
		k, err := str(labelKeyMax, "label name")
		if err != nil {
			return r, 0, err
		}
		if !validName(k, false) || (r.typ == typeHist && k == "le") {
			return r, 0, reject("bad_name", "record %d: invalid label name", idx)
		}
		v, err := str(labelValMax, "label value")
		if err != nil {
			return r, 0, err
		}
		for _, p := range r.labels {
			if p.Key == k {
				return r, 0, reject("duplicate", "record %d: label %s given twice", idx, k)
			}
		}
		r.labels = append(r.labels, Label{k, v})
	}
	pos = align8(pos)
	if pos+8*nb != end {
		return r, 0, reject("bad_record", "record %d: bytes left do not match %d bounds", idx, nb)
	}
	for i := 0; i < nb; i++ {
		b := math.Float64frombits(le.Uint64(rec[pos+8*i:]))
		if math.IsInf(b, 0) || math.IsNaN(b) || (i > 0 && !(b > r.bounds[i-1])) {
			return r, 0, reject("bad_buckets", "record %d: bound %d is not finite and above the previous", idx, i)
		}
		r.bounds = append(r.bounds, b)
	}
	return r, size, nil
}

func sameLabels(a, b []Label) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkFamilies: one type per name (deleted records included), no live name+labels twice
// (section 6.4); each tombstone deletes an earlier live record with its value_offset, name
// and labels (section 6.6), which it marks deleted.
func checkFamilies(recs []record) error {
	types := make(map[string]uint8, len(recs))
	series := make(map[string]int, len(recs))
	var key []byte
	for i, r := range recs {
		key = append(key[:0], r.name...)
		for _, l := range r.labels { // strings cannot hold NUL, so NUL separates them
			key = append(append(append(append(key, 0), l.Key...), 0), l.Value...)
		}
		if r.typ == typeTomb {
			j, ok := series[string(key)]
			if !ok || recs[j].valueOffset != r.valueOffset {
				return reject("bad_record", "record %d: tombstone of %s deletes no earlier live record", i, r.name)
			}
			recs[j].deleted = true
			delete(series, string(key))
			continue
		}
		if t, ok := types[r.name]; ok && t != r.typ {
			return reject("bad_type", "metric %s is registered with two types", r.name)
		}
		types[r.name] = r.typ
		if _, dup := series[string(key)]; dup {
			return reject("duplicate", "metric %s has the same labels twice", r.name)
		}
		series[string(key)] = i
	}
	return nil
}

// recount recomputes metric_count, catalog_used and values_used from the records (section
// 8, step 2): it walks the catalog area while a record's size is a multiple of 8 in
// [40, remaining], its checksum matches and its value slot is 8-aligned, starts at or after
// the previous slot's end and lies inside the value area. Callers hold the registration lock.
func recount(seg []byte) (count, catalogUsed, valuesUsed uint32) {
	if len(seg) < headerSize {
		return 0, 0, 0
	}
	catOff := uint64(le.Uint32(seg[offCatOff:]))
	capacity := uint64(le.Uint32(seg[offCatSize:]))
	valSize := uint64(le.Uint32(seg[offValSize:]))
	if catOff+capacity > uint64(len(seg)) || uint64(le.Uint32(seg[offValOff:])) > uint64(len(seg)) {
		capacity = 0 // a header that lies about its areas: nothing to trust
	}
	var pos, vend uint64
	for count < metricsMax && capacity-pos >= recordMin {
		rec := seg[catOff+pos : catOff+capacity]
		size := uint64(le.Uint32(rec))
		if size < recordMin || size%8 != 0 || size > capacity-pos {
			break
		}
		if le.Uint64(rec[size-8:]) != fnv1a64(rec[:size-8]) {
			break
		}
		voff, vsize := uint64(le.Uint32(rec[8:])), uint64(le.Uint32(rec[12:]))
		if rec[4] != typeTomb { // a tombstone has no slot and passes whatever its offset
			if voff%8 != 0 || voff < vend || vsize == 0 || voff+vsize > valSize {
				break
			}
			vend = voff + vsize
		}
		pos += size
		count++
	}
	return count, uint32(pos), uint32(vend)
}
