package raftlog

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// This file holds the raft.Storage read side. Reads of the in-memory tail take only the
// mutex; reads of older entries open one read transaction.

// InitialState returns the saved HardState (nil if none was ever saved) and the latest
// ConfState: the one given to SetConfState if it was called after the last snapshot was
// installed by Save, else the snapshot's (empty if none). Both are copies.
func (s *Storage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errClosed
	}
	hs, cs := s.initialState()
	return hs, cs, nil
}

// ConfIndex is [Log.ConfIndex].
func (s *Storage) ConfIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return confIndex(s.confState, s.confIndex, s.snap)
}

// HasState reports whether a HardState, an entry or a snapshot was ever saved (also
// through Bootstrap). A node with state must restart, never bootstrap again.
func (s *Storage) HasState() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hasState()
}

// FirstIndex returns the index of the first entry Entries may return.
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed
	}
	return s.dummyIndex + 1, nil
}

// LastIndex returns the index of the last entry (FirstIndex()-1 if there is none).
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed
	}
	return s.last, nil
}

// Snapshot returns a copy of the latest snapshot (metadata and Data). It never returns
// raft.ErrSnapshotTemporarilyUnavailable.
func (s *Storage) Snapshot() (*raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	return proto.Clone(s.snap).(*raftpb.Snapshot), nil
}

// Term returns the term of entry i for i in [FirstIndex()-1, LastIndex()]; below that
// raft.ErrCompacted, above raft.ErrUnavailable.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errClosed
	}
	return s.term(i)
}

func (s *Storage) term(i uint64) (uint64, error) {
	if t, stored, err := s.termBound(i); !stored {
		return t, err
	}
	if start := s.tailStart(); i >= start {
		return s.tail[i-start].GetTerm(), nil
	}
	ents, err := s.readRange(i, i+1, 0)
	if err != nil {
		return 0, err
	}
	return ents[0].GetTerm(), nil
}

// tailStart is the index of tail[0] (last+1 when the tail is empty).
func (s *Storage) tailStart() uint64 {
	return s.last - uint64(len(s.tail)) + 1
}

// Entries returns the entries [lo, hi) in a freshly allocated slice the caller owns,
// cut to at most maxSize bytes of proto encoding but never empty (raft's limitSize).
// It returns raft.ErrCompacted if lo <= FirstIndex()-1 and raft.ErrUnavailable if the log
// holds no entries or hi > LastIndex()+1 (where MemoryStorage panics).
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if err := s.checkEntries(lo, hi); err != nil {
		return nil, err
	}
	start := s.tailStart()
	var out []*raftpb.Entry
	var size uint64
	if lo < start {
		var err error
		if out, err = s.readRange(lo, min(hi, start), maxSize); err != nil {
			return nil, err
		}
		if uint64(len(out)) < min(hi, start)-lo {
			return out, nil // size limit reached on disk
		}
		for _, e := range out {
			size += uint64(proto.Size(e))
		}
		lo = start
	}
	if lo >= hi {
		return out, nil
	}
	if out == nil {
		out = make([]*raftpb.Entry, 0, hi-lo)
	}
	for _, e := range s.tail[lo-start : hi-start] {
		if size = size + uint64(proto.Size(e)); len(out) > 0 && size > maxSize {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

// readRange reads entries [lo, hi) from the file in one read transaction, stopping
// before maxSize bytes are exceeded (after at least one entry). The caller holds the
// mutex and has checked that the range exists.
func (s *Storage) readRange(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	var out []*raftpb.Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLog).Cursor()
		var size uint64
		want := lo
		for k, v := c.Seek(key(lo)); want < hi; k, v = c.Next() {
			if k == nil {
				return fmt.Errorf("entry %d missing", want)
			}
			if size += uint64(len(v)); len(out) > 0 && size > maxSize {
				return nil
			}
			e, err := decodeEntry(k, v, want)
			if err != nil {
				return err
			}
			out = append(out, e)
			want++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCorrupt, s.path, err)
	}
	return out, nil
}
