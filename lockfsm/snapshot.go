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
//	magic "LKFSNAP\x00", version byte 2, uvarint applied index
//	per session, ascending id:   'S', uvarint id, uvarint len, session record
//	per lock, ascending name:    'L', uvarint len, name, uvarint len, lock record
//	'E', then a big-endian CRC-32C of every byte before it.
//
// Records are those of records.go (version 2 carries lock records of lockRecordVersion 2, with grantSeq, and
// session records of version 2 or 3, with the checkpoint mark).
// Writing holds one record at a time (plus the sorted key lists).
var snapMagic = []byte("LKFSNAP\x00")

const (
	snapVersion   = 2
	maxSnapRecord = 64 << 20
	tagSession    = 'S'
	tagLock       = 'L'
	tagEnd        = 'E'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteSnapshot streams the whole in-memory state, including AppliedIndex, to w. Memory use is bounded by
// one record plus the sorted list of keys; nothing else is buffered.
func (f *FSM) WriteSnapshot(w io.Writer) error {
	h := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	var b []byte
	b = append(b, snapMagic...)
	b = append(b, snapVersion)
	b = protowire.AppendVarint(b, f.applied)
	if _, err := bw.Write(b); err != nil {
		return fmt.Errorf("lockfsm: write snapshot: %w", err)
	}
	ids := make([]uint64, 0, len(f.sessions))
	for id := range f.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b = append(b[:0], tagSession)
		b = protowire.AppendVarint(b, id)
		rec := appendSession(nil, f.sessions[id])
		b = protowire.AppendVarint(b, uint64(len(rec)))
		b = append(b, rec...)
		if _, err := bw.Write(b); err != nil {
			return fmt.Errorf("lockfsm: write snapshot: %w", err)
		}
	}
	names := sortedKeys(nil, f.locks)
	var rec []byte
	for _, name := range names {
		b = append(b[:0], tagLock)
		b = appendString(b, name)
		rec = appendLock(rec[:0], f.locks[name])
		b = protowire.AppendVarint(b, uint64(len(rec)))
		b = append(b, rec...)
		if _, err := bw.Write(b); err != nil {
			return fmt.Errorf("lockfsm: write snapshot: %w", err)
		}
	}
	if err := bw.WriteByte(tagEnd); err != nil {
		return fmt.Errorf("lockfsm: write snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("lockfsm: write snapshot: %w", err)
	}
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, h.Sum32())); err != nil {
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

func (s *snapReader) bytes(max uint64) ([]byte, error) {
	n, err := s.uvarint()
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("record of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, err
	}
	s.h.Write(b)
	return b, nil
}

// Restore replaces the whole state with the snapshot read from r. It reads and verifies all of r (format,
// records, checksum, consistency) before touching anything, then rewrites the bbolt file in one transaction
// and only then swaps the in-memory state; on any error the FSM is unchanged. Bad input wraps ErrCorrupt.
func (f *FSM) Restore(r io.Reader) error {
	sessions, locks, applied, err := readSnapshot(r)
	if err != nil {
		return fmt.Errorf("lockfsm: restore: %w", err)
	}
	if f.db == nil {
		return fmt.Errorf("lockfsm: restore %s: closed", f.path)
	}
	err = f.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketSessions, bucketLocks} {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		sb, err := tx.CreateBucket(bucketSessions)
		if err != nil {
			return err
		}
		lb, err := tx.CreateBucket(bucketLocks)
		if err != nil {
			return err
		}
		for id, s := range sessions {
			if err := sb.Put(binary.BigEndian.AppendUint64(nil, id), appendSession(nil, s)); err != nil {
				return err
			}
		}
		for name, l := range locks {
			if err := lb.Put([]byte(name), appendLock(nil, l)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyApplied, binary.BigEndian.AppendUint64(nil, applied))
	})
	if err != nil {
		return fmt.Errorf("lockfsm: restore %s: %w", f.path, err)
	}
	f.sessions, f.locks = sessions, locks
	f.applied = applied
	f.durable.Store(applied)
	clear(f.dirtySessions)
	clear(f.dirtyLocks)
	return nil
}

func readSnapshot(r io.Reader) (map[uint64]*session, map[string]*lock, uint64, error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 64<<10), h: crc32.New(castagnoli)}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	head := make([]byte, len(snapMagic)+1)
	if _, err := io.ReadFull(sr.r, head); err != nil {
		return nil, nil, 0, bad("header: %v", err)
	}
	sr.h.Write(head)
	if string(head[:len(snapMagic)]) != string(snapMagic) {
		return nil, nil, 0, bad("not a lockfsm snapshot")
	}
	if head[len(snapMagic)] != snapVersion {
		return nil, nil, 0, bad("unknown version %d", head[len(snapMagic)])
	}
	applied, err := sr.uvarint()
	if err != nil {
		return nil, nil, 0, bad("applied index: %v", err)
	}
	sessions, locks := newState()
	var lastID uint64
	var lastName string
	for {
		tag, err := sr.ReadByte()
		if err != nil {
			return nil, nil, 0, bad("truncated: %v", err)
		}
		switch tag {
		case tagSession:
			id, err := sr.uvarint()
			if err != nil {
				return nil, nil, 0, bad("session id: %v", err)
			}
			if id == 0 || id <= lastID || len(locks) > 0 {
				return nil, nil, 0, bad("session %d out of order", id)
			}
			lastID = id
			rec, err := sr.bytes(maxSnapRecord)
			if err != nil {
				return nil, nil, 0, bad("session %d: %v", id, err)
			}
			s, err := decodeSession(id, rec)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("snapshot: %w", err)
			}
			sessions[id] = s
		case tagLock:
			nb, err := sr.bytes(MaxNameLen)
			if err != nil {
				return nil, nil, 0, bad("lock name: %v", err)
			}
			name := string(nb)
			if len(locks) > 0 && name <= lastName {
				return nil, nil, 0, bad("lock %q out of order", name)
			}
			lastName = name
			rec, err := sr.bytes(maxSnapRecord)
			if err != nil {
				return nil, nil, 0, bad("lock %q: %v", name, err)
			}
			l, err := decodeLock(name, rec)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("snapshot: %w", err)
			}
			locks[name] = l
		case tagEnd:
			sum := sr.h.Sum32()
			var tail [5]byte
			n, err := io.ReadFull(sr.r, tail[:])
			if n != 4 || !errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, nil, 0, bad("bad trailer (%d bytes, %v)", n, err)
			}
			if binary.BigEndian.Uint32(tail[:4]) != sum {
				return nil, nil, 0, bad("checksum mismatch")
			}
			if err := linkState(sessions, locks); err != nil {
				return nil, nil, 0, fmt.Errorf("snapshot: %w", err)
			}
			return sessions, locks, applied, nil
		default:
			return nil, nil, 0, bad("unknown record tag %#x", tag)
		}
	}
}
