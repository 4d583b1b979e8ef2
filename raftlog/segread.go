package raftlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
)

// Reading segments at open: a segment is streamed record by record through
// one reusable buffer, so opening a log costs memory for what it keeps, not
// for the bytes of its files (a tail segment can hold up to its size of
// history that compaction has already passed).

// recordReader streams the records of one segment file.
type recordReader struct {
	r    *bufio.Reader
	off  int64 // where the next record starts
	size int64 // the file's size: no record can end past it
	buf  []byte
	h    [recHeaderSize]byte // here, not on next's stack: io.ReadFull would move it to the heap per record
}

func newRecordReader(f *os.File) (*recordReader, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return &recordReader{r: bufio.NewReaderSize(f, 1<<20), size: st.Size()}, nil
}

// next returns the next record's type and payload (valid until the next
// call). io.EOF at a clean end of the file; errTorn where the bytes end inside
// a record or its checksum fails (the offset is then where the bad record
// starts). With keep, the payloads of records keep refuses are passed over
// unread and unchecked (the floor scan).
func (rr *recordReader) next(keep func(typ byte) bool) (typ byte, payload []byte, err error) {
	h := rr.h[:]
	if _, err := io.ReadFull(rr.r, h); err != nil {
		return 0, nil, readErr(err)
	}
	l := binary.LittleEndian.Uint32(h[:])
	if l > maxRecord || rr.off+recHeaderSize+int64(l) > rr.size {
		return 0, nil, errTorn
	}
	typ = h[8]
	if keep != nil && !keep(typ) {
		if _, err := rr.r.Discard(int(l)); err != nil {
			if err == io.EOF {
				return 0, nil, errTorn
			}
			return 0, nil, readErr(err)
		}
		rr.off += recHeaderSize + int64(l)
		return typ, nil, nil
	}
	if cap(rr.buf) < int(l) {
		rr.buf = make([]byte, l)
	}
	payload = rr.buf[:l]
	if _, err := io.ReadFull(rr.r, payload); err != nil {
		if err == io.EOF {
			return 0, nil, errTorn // a header with no payload after it
		}
		return 0, nil, readErr(err)
	}
	c := typeCRCs[typ]
	if crc32.Update(c, crcTable, payload) != binary.LittleEndian.Uint32(h[4:]) {
		return 0, nil, errTorn
	}
	rr.off += recHeaderSize + int64(l)
	return typ, payload, nil
}

// readErr sorts a read's error: the file ends (io.EOF, clean only between
// records), ends inside a record (errTorn), or could not be read.
func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errTorn
	}
	return err
}

// scanSegmentFile replays the records of seg's file into st, as scanSegment
// does for bytes in memory: it returns the offset where the valid records end
// and whether a torn or corrupt record was met there; bad is a record that
// contradicts the log (corruption), err a failure to read the file.
func scanSegmentFile(st *walState, seg *segment) (valid int64, torn bool, bad, err error) {
	f, err := os.Open(seg.path)
	if err != nil {
		return 0, false, nil, err
	}
	defer f.Close()
	rr, err := newRecordReader(f)
	if err != nil {
		return 0, false, nil, err
	}
	for {
		off := rr.off
		typ, payload, rerr := rr.next(nil)
		switch {
		case rerr == io.EOF:
			return off, false, nil, nil
		case rerr == errTorn:
			return off, true, nil, nil
		case rerr != nil:
			return off, false, nil, rerr
		}
		if bad := checkRecord(st, seg, off, typ, payload); bad != nil {
			return off, false, bad, nil
		}
	}
}

// replayFloor reads only the compaction records of segs (their state records'
// compaction points and recCompact's index, each checked): the highest is a
// point every entry at or below which replay will compact away, so replay
// need not decode them. A read problem ends the scan early: the floor is only
// ever lower than it could be, and replay checks it (walState.floor).
func replayFloor(segs []*segment) uint64 {
	var floor uint64
	keep := func(typ byte) bool { return typ == recState || typ == recCompact }
	for _, seg := range segs {
		f, err := os.Open(seg.path)
		if err != nil {
			return floor
		}
		rr, err := newRecordReader(f)
		for err == nil {
			var typ byte
			var payload []byte
			typ, payload, err = rr.next(keep)
			switch {
			case err != nil:
			case typ == recCompact && len(payload) == 16:
				floor = max(floor, binary.LittleEndian.Uint64(payload))
			case typ == recState && len(payload) >= 8:
				floor = max(floor, binary.LittleEndian.Uint64(payload))
			}
		}
		_ = f.Close()
		if !errors.Is(err, io.EOF) {
			return floor
		}
	}
	return floor
}

// readFrom returns the bytes of path from off to its end (a torn segment's
// tail, read only to judge it).
func readFrom(path string, off int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}
