package raftlog

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// This file holds the write side. Every method validates against memory, runs exactly
// one bbolt read-write transaction, and only after a successful commit updates memory.

// Save persists one Ready: the snapshot (if non-empty), then the entries, then the
// HardState (if non-nil), in ONE transaction, i.e. one commit and one fsync pair
// whatever len(ents) is. When there is nothing new to write no transaction is run.
//
// Installing a snapshot replaces the log, as MemoryStorage.ApplySnapshot does: every
// stored entry is dropped and FirstIndex becomes snapshot index+1. A snapshot not newer
// than the current one gives raft.ErrSnapOutOfDate. The entries must be contiguous; those
// at or before FirstIndex()-1 are ignored, stored entries at or above ents[0].Index are
// replaced (the conflicting suffix), and a gap after LastIndex is an error.
//
// Save does not retain snap or hs; it retains the entries (which raft never mutates).
// A returned error wrapping errWrite is fatal: nothing of this call is visible, but the
// node must stop.
func (s *Storage) Save(snap *raftpb.Snapshot, hs *raftpb.HardState, ents []*raftpb.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	c, err := s.planSave(snap, hs, ents)
	if err != nil {
		return err
	}
	if c.empty() {
		return nil
	}
	newSnap, ents, hsCopy := c.snap, c.ents, c.hs
	err = s.update(func(meta, logb *bolt.Bucket) error {
		if newSnap != nil {
			// Drop the whole log (all of it is at or before, or conflicts with, the snapshot).
			for i := s.dummyIndex + 1; i <= s.last; i++ {
				if err := logb.Delete(key(i)); err != nil {
					return err
				}
			}
			if err := putProto(meta, keySnapshot, newSnap); err != nil {
				return err
			}
			if err := meta.Put(keyCompacted, compactedValue(c.dummyIndex, c.dummyTerm)); err != nil {
				return err
			}
			if err := meta.Delete(keyConfState); err != nil {
				return err
			}
		}
		if len(ents) > 0 {
			for i := ents[0].GetIndex(); i <= c.last; i++ {
				if err := logb.Delete(key(i)); err != nil {
					return err
				}
			}
			for _, e := range ents {
				if err := putProto(logb, key(e.GetIndex()), e); err != nil {
					return err
				}
			}
		}
		if hsCopy != nil {
			return putProto(meta, keyHardState, hsCopy)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if newSnap != nil {
		s.snap, s.confState, s.confIndex, s.tail = newSnap, nil, 0, nil
		s.dummyIndex, s.dummyTerm, s.last = c.dummyIndex, c.dummyTerm, c.last
	}
	if len(ents) > 0 {
		s.appendTail(ents)
	}
	if hsCopy != nil {
		s.hardState = hsCopy
	}
	return nil
}

// appendTail replaces the cached suffix from ents[0].Index with ents and trims the cache.
// Called after a successful commit; s.last may be above the new end (truncation).
func (s *Storage) appendTail(ents []*raftpb.Entry) {
	start, lo := s.tailStart(), ents[0].GetIndex()
	keep := s.tail
	if lo <= start {
		keep = nil
	} else {
		keep = keep[:lo-start]
	}
	n := min(len(keep)+len(ents), s.cacheMax)
	tail := make([]*raftpb.Entry, 0, n)
	if drop := len(keep) + len(ents) - n; drop < len(keep) {
		tail = append(tail, keep[drop:]...)
		tail = append(tail, ents...)
	} else {
		tail = append(tail, ents[drop-len(keep):]...)
	}
	s.tail = tail
	s.last = ents[len(ents)-1].GetIndex()
}

// CreateSnapshot records a snapshot at index i (which must be in
// [FirstIndex()-1, LastIndex()] and newer than the current snapshot, else
// raft.ErrSnapOutOfDate / raft.ErrCompacted / an error) with the ConfState cs (kept from
// the previous snapshot if nil) and data, which is copied. It does not compact the log;
// call Compact for that. One transaction. Returns a copy of the new snapshot.
func (s *Storage) CreateSnapshot(i uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	snap, err := nextSnapshot(s.snap, s.last, i, s.term, cs, data)
	if err != nil {
		return nil, err
	}
	if err := s.update(func(meta, _ *bolt.Bucket) error {
		return putProto(meta, keySnapshot, snap)
	}); err != nil {
		return nil, err
	}
	s.snap = snap
	return proto.Clone(snap).(*raftpb.Snapshot), nil
}

// Compact discards the entries up to and including index (MemoryStorage semantics:
// afterwards FirstIndex is index+1 and Term(index) still answers). It returns
// raft.ErrCompacted if index <= FirstIndex()-1 and an error if index > LastIndex().
// The caller must not compact past what it has applied. One transaction.
func (s *Storage) Compact(index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if err := s.checkCompact(index); err != nil {
		return err
	}
	term, err := s.term(index)
	if err != nil {
		return err
	}
	if err := s.update(func(meta, logb *bolt.Bucket) error {
		for i := s.dummyIndex + 1; i <= index; i++ {
			if err := logb.Delete(key(i)); err != nil {
				return err
			}
		}
		return meta.Put(keyCompacted, compactedValue(index, term))
	}); err != nil {
		return err
	}
	if start := s.tailStart(); index >= start {
		s.tail = append([]*raftpb.Entry(nil), s.tail[index-start+1:]...)
	}
	s.dummyIndex, s.dummyTerm = index, term
	return nil
}

// SetConfState records cs as the latest ConfState, the configuration after applying the
// entry at index (call it after every ApplyConfChange); InitialState returns it until a
// snapshot is installed through Save, and ConfIndex returns index. One transaction.
//
// On restart raft re-delivers the committed entries after the snapshot index; the
// caller must not apply a conf change at or below ConfIndex again (see [Log]).
func (s *Storage) SetConfState(cs *raftpb.ConfState, index uint64) error {
	if cs == nil {
		return fmt.Errorf("raftlog: nil ConfState")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	c, v, err := encodeConfState(cs, index)
	if err != nil {
		return err
	}
	if err := s.update(func(meta, _ *bolt.Bucket) error {
		return meta.Put(keyConfState, v)
	}); err != nil {
		return err
	}
	s.confState, s.confIndex = c, index
	return nil
}

// Bootstrap seeds a fresh log with the founding configuration cs, the way raft's
// bootstrap.go recommends ("a Storage that has a first index > 1 and which stores the
// desired ConfState as its InitialState"): it stores a snapshot at index 1, term 1 with
// ConfState cs and no Data, and the HardState {Term: 1, Commit: 1}. raft.RestartNode or
// raft.NewRawNode then start as followers of a cluster with exactly these voters, and the
// first election happens at term 2. Every founding member must bootstrap with the same
// cs. The snapshot's empty Data means "empty state machine": a member added later that
// receives this snapshot starts from nothing. Applied starts at 1. errNotEmpty if
// HasState. One transaction.
func (s *Storage) Bootstrap(cs *raftpb.ConfState) error {
	if err := checkBootstrap(cs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if s.hasState() {
		return fmt.Errorf("%w: %s", errNotEmpty, s.path)
	}
	snap, hs := bootstrapState(cs)
	if err := s.update(func(meta, _ *bolt.Bucket) error {
		if err := putProto(meta, keySnapshot, snap); err != nil {
			return err
		}
		if err := putProto(meta, keyHardState, hs); err != nil {
			return err
		}
		return meta.Put(keyCompacted, compactedValue(1, 1))
	}); err != nil {
		return err
	}
	s.snap, s.hardState, s.confState, s.confIndex = snap, hs, nil, 0
	s.dummyIndex, s.dummyTerm, s.last, s.tail = 1, 1, 1, nil
	return nil
}

// update runs fn in one read-write transaction and commits. Any failure is wrapped in
// errWrite and logged. The caller holds the mutex.
func (s *Storage) update(fn func(meta, logb *bolt.Bucket) error) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := fn(tx.Bucket(bucketMeta), tx.Bucket(bucketLog)); err != nil {
			return err
		}
		if s.beforeCommit != nil {
			return s.beforeCommit()
		}
		return nil
	})
	if err != nil {
		s.log.Error("raftlog write failed", "err", err)
		return fmt.Errorf("%w: %s: %v", errWrite, s.path, err)
	}
	return nil
}

func putProto(b *bolt.Bucket, k []byte, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return b.Put(k, v)
}
