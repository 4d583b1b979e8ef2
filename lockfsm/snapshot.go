package lockfsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
)

// Snapshot format (canonical: the same state always gives the same bytes):
//
//	magic "LKFSNAP\x00", version byte 3, uvarint applied index
//	per session, ascending id:   'S', uvarint id, uvarint len, session record
//	per lock, ascending name:    'L', uvarint len, name, uvarint len, lock record
//	'E', then a big-endian CRC-32C of every byte before it.
//
// Records are those of records.go. Version 3 carries lock records of version 3 (the catalogue); version 2,
// still restored, carries lock records of version 2 (mutexes, with grantSeq). Both carry session records
// of version 2 or 3 (3 adds the checkpoint mark). Writing holds one record at a time (plus the sorted key lists).
var snapMagic = []byte("LKFSNAP\x00")

const (
	snapVersion   = 3
	snapVersionV2 = 2
	maxSnapRecord = 64 << 20
	tagSession    = 'S'
	tagLock       = 'L'
	tagEnd        = 'E'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteSnapshot streams the whole in-memory state, including AppliedIndex, to w. Memory use is bounded by
// one record plus the sorted list of keys; nothing else is buffered.
func (f *FSM) WriteSnapshot(w io.Writer) error {
	sw := newSnapWriter(w, f.applied)
	ids := make([]uint64, 0, len(f.sessions))
	for id := range f.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var rec []byte
	for _, id := range ids {
		rec = appendSession(rec[:0], f.sessions[id])
		sw.session(id, rec)
	}
	for _, name := range f.locks.sortedNames(nil) {
		rec = appendLock(rec[:0], f.locks.get(name), &f.k)
		sw.lock(name, rec)
	}
	return sw.end()
}

// WriteDurableSnapshot streams a snapshot of the state as of DurableIndex — what the bbolt file holds, not
// the in-memory state — to w and returns its applied index. The bytes are those WriteSnapshot writes at
// that index (same canonical format; each record is decoded and encoded again, so a damaged one fails the
// snapshot instead of being copied into it). It reads in one bbolt read transaction and touches no
// in-memory state, so it may run on any goroutine while Apply, PrepareCommit and WriteCommit go on (it sees
// the file as of one commit); it must not overlap Close. This is how the node writes snapshots without
// stopping its loop: the committer writes a batch and then the snapshot of exactly that batch.
func (f *FSM) WriteDurableSnapshot(w io.Writer) (uint64, error) {
	if f.db == nil {
		return 0, fmt.Errorf("lockfsm: snapshot %s: closed", f.path)
	}
	var applied uint64
	err := f.db.View(func(tx *bolt.Tx) error {
		meta, sb, lb := tx.Bucket(bucketMeta), tx.Bucket(bucketSessions), tx.Bucket(bucketLocks)
		if meta == nil || sb == nil || lb == nil || len(meta.Get(keyApplied)) != 8 {
			return fmt.Errorf("%w: not a lockfsm state file", errCorrupt)
		}
		applied = binary.BigEndian.Uint64(meta.Get(keyApplied))
		sw := newSnapWriter(w, applied)
		var rec []byte
		if err := sb.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("%w: bad session key %x", errCorrupt, k)
			}
			id := binary.BigEndian.Uint64(k)
			s, err := decodeSession(id, v)
			if err != nil {
				return err
			}
			rec = appendSession(rec[:0], s)
			sw.session(id, rec)
			return sw.err
		}); err != nil {
			return err
		}
		if err := lb.ForEach(func(k, v []byte) error {
			name := string(k)
			l, err := decodeLock(name, v, 0)
			if err != nil {
				return err
			}
			rec = appendLock(rec[:0], l, &f.k)
			sw.lock(name, rec)
			return sw.err
		}); err != nil {
			return err
		}
		return sw.end()
	})
	if err != nil {
		return 0, fmt.Errorf("lockfsm: snapshot %s: %w", f.path, err)
	}
	return applied, nil
}

// snapWriter writes the snapshot format: the header, then records in key order, then the end tag and the
// checksum. The first error sticks; end returns it.
type snapWriter struct {
	w   io.Writer
	h   hash.Hash32
	bw  *bufio.Writer
	b   []byte
	err error
}

func newSnapWriter(w io.Writer, applied uint64) *snapWriter {
	h := crc32.New(castagnoli)
	sw := &snapWriter{w: w, h: h, bw: bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)}
	sw.b = append(sw.b, snapMagic...)
	sw.b = append(sw.b, snapVersion)
	sw.b = protowire.AppendVarint(sw.b, applied)
	sw.write()
	return sw
}

func (sw *snapWriter) write() {
	if sw.err == nil {
		if _, err := sw.bw.Write(sw.b); err != nil {
			sw.err = fmt.Errorf("lockfsm: write snapshot: %w", err)
		}
	}
}

func (sw *snapWriter) session(id uint64, rec []byte) {
	sw.b = append(sw.b[:0], tagSession)
	sw.b = protowire.AppendVarint(sw.b, id)
	sw.b = protowire.AppendVarint(sw.b, uint64(len(rec)))
	sw.b = append(sw.b, rec...)
	sw.write()
}

func (sw *snapWriter) lock(name string, rec []byte) {
	sw.b = append(sw.b[:0], tagLock)
	sw.b = appendString(sw.b, name)
	sw.b = protowire.AppendVarint(sw.b, uint64(len(rec)))
	sw.b = append(sw.b, rec...)
	sw.write()
}

func (sw *snapWriter) end() error {
	sw.b = append(sw.b[:0], tagEnd)
	sw.write()
	if sw.err != nil {
		return sw.err
	}
	if err := sw.bw.Flush(); err != nil {
		return fmt.Errorf("lockfsm: write snapshot: %w", err)
	}
	if _, err := sw.w.Write(binary.BigEndian.AppendUint32(nil, sw.h.Sum32())); err != nil {
		return fmt.Errorf("lockfsm: write snapshot: %w", err)
	}
	return nil
}

// snapReader reads the snapshot body, hashing every byte it hands out.
type snapReader struct {
	r   *bufio.Reader
	h   hash.Hash32
	one [1]byte
}

func (s *snapReader) ReadByte() (byte, error) {
	c, err := s.r.ReadByte()
	if err == nil {
		s.one[0] = c
		s.h.Write(s.one[:])
	}
	return c, err
}

func (s *snapReader) uvarint() (uint64, error) { return binary.ReadUvarint(s) }

// bytes reads a length-prefixed field into buf's backing array (grown as needed) and returns it: valid
// until the next call with the same buf.
func (s *snapReader) bytes(buf []byte, max uint64) ([]byte, error) {
	n, err := s.uvarint()
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("record of %d bytes", n)
	}
	b := slices.Grow(buf[:0], int(n))[:n]
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, err
	}
	s.h.Write(b)
	return b, nil
}

// readSnapshot reads a whole snapshot into t (records, checksum) and returns its applied index; t.build
// then checks the records against each other. Each record read is also copied to tee.
func readSnapshot(r io.Reader, t *tableLoader, tee *restoreTee) (uint64, error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 64<<10), h: crc32.New(castagnoli)}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: snapshot: %s", errCorrupt, fmt.Sprintf(format, args...))
	}
	head := make([]byte, len(snapMagic)+1)
	if _, err := io.ReadFull(sr.r, head); err != nil {
		return 0, bad("header: %v", err)
	}
	sr.h.Write(head)
	if string(head[:len(snapMagic)]) != string(snapMagic) {
		return 0, bad("not a lockfsm snapshot")
	}
	version := head[len(snapMagic)]
	var lockRecord byte
	switch version {
	case snapVersion:
		lockRecord = lockRecordVersion
	case snapVersionV2:
		lockRecord = lockRecordV2
	default:
		return 0, bad("unknown version %d", version)
	}
	applied, err := sr.uvarint()
	if err != nil {
		return 0, bad("applied index: %v", err)
	}
	var lastID uint64
	var nb, rec []byte // reused: records are decoded into strings of their own
	var lastName string
	for {
		tag, err := sr.ReadByte()
		if err != nil {
			return 0, bad("truncated: %v", err)
		}
		switch tag {
		case tagSession:
			id, err := sr.uvarint()
			if err != nil {
				return 0, bad("session id: %v", err)
			}
			if id == 0 || id <= lastID || len(t.locks) > 0 {
				return 0, bad("session %d out of order", id)
			}
			lastID = id
			rec, err = sr.bytes(rec, maxSnapRecord)
			if err != nil {
				return 0, bad("session %d: %v", id, err)
			}
			s, err := decodeSession(id, rec)
			if err != nil {
				return 0, fmt.Errorf("snapshot: %w", err)
			}
			t.sessions[id] = s
			tee.session(id, rec)
		case tagLock:
			nb, err = sr.bytes(nb, MaxNameLen)
			if err != nil {
				return 0, bad("lock name: %v", err)
			}
			name := string(nb)
			if len(t.locks) > 0 && name <= lastName {
				return 0, bad("lock %q out of order", name)
			}
			lastName = name
			rec, err = sr.bytes(rec, maxSnapRecord)
			if err != nil {
				return 0, bad("lock %q: %v", name, err)
			}
			if err := t.lock(name, rec, lockRecord); err != nil {
				return 0, fmt.Errorf("snapshot: %w", err)
			}
			tee.add(true, nb, rec)
		case tagEnd:
			sum := sr.h.Sum32()
			var tail [5]byte
			n, err := io.ReadFull(sr.r, tail[:])
			if n != 4 || !errors.Is(err, io.ErrUnexpectedEOF) {
				return 0, bad("bad trailer (%d bytes, %v)", n, err)
			}
			if binary.BigEndian.Uint32(tail[:4]) != sum {
				return 0, bad("checksum mismatch")
			}
			return applied, nil
		default:
			return 0, bad("unknown record tag %#x", tag)
		}
	}
}
