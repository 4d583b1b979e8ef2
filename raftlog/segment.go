package raftlog

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A segment is one file of the WAL, named "<seq>-<first>.wal" (16 hex digits each):
// seq orders the segments, first is the index the log's next entry had when the segment
// was created. Every segment starts with a recState record, so the segments before any
// segment can be deleted once the compaction point has passed that segment's state.
type segment struct {
	seq, first uint64
	path       string
	// last is the state record's last index (the log's end when the segment began).
	last uint64
}

const segSuffix = ".wal"

func segmentName(seq, first uint64) string {
	return fmt.Sprintf("%016x-%016x%s", seq, first, segSuffix)
}

func parseSegmentName(name string) (seq, first uint64, ok bool) {
	if !strings.HasSuffix(name, segSuffix) {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(strings.TrimSuffix(name, segSuffix), "%016x-%016x", &seq, &first); err != nil {
		return 0, 0, false
	}
	return seq, first, segmentName(seq, first) == name
}

// listSegments returns dir's segments in seq order.
func listSegments(dir string) ([]*segment, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []*segment
	for _, de := range des {
		if seq, first, ok := parseSegmentName(de.Name()); ok {
			segs = append(segs, &segment{seq: seq, first: first, path: filepath.Join(dir, de.Name())})
		}
	}
	slices.SortFunc(segs, func(a, b *segment) int { return cmp.Compare(a.seq, b.seq) })
	return segs, nil
}

// scanSegment replays the records of data into st. It returns the offset where the
// valid records end and whether a torn/corrupt record was met there (at valid <
// len(data)). A record that fails to apply is corruption (err).
func scanSegment(data []byte, st *walState, seg *segment) (valid int, torn bool, err error) {
	off := 0
	for off < len(data) {
		typ, payload, n, rerr := readRecord(data[off:])
		if rerr != nil {
			return off, true, nil
		}
		if err := checkRecord(st, seg, int64(off), typ, payload); err != nil {
			return off, false, err
		}
		off += n
	}
	return off, false, nil
}

// checkRecord applies the record at offset off of seg to st, after checking
// that it may stand there: a segment starts with its state record, and only
// there; records other than top-level ones live inside a batch.
func checkRecord(st *walState, seg *segment, off int64, typ byte, payload []byte) error {
	if !topLevel(typ) {
		return fmt.Errorf("offset %d: record type %d outside a batch", off, typ)
	}
	if (off == 0) != (typ == recState) {
		return fmt.Errorf("offset %d: record type %d (a segment starts with its state record, and only there)", off, typ)
	}
	if typ == recState {
		var r stateRecord
		if err := r.unmarshal(payload); err != nil {
			return fmt.Errorf("offset %d: %v", off, err)
		}
		seg.last = r.last
	}
	if err := st.apply(typ, payload); err != nil {
		return fmt.Errorf("offset %d: %v", off, err)
	}
	return nil
}

// syncDir fsyncs a directory so that file creations and removals in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
