package raftlog

import (
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The WAL's raft.Storage read side: everything is answered from memory.

// ConfIndex is [Log.ConfIndex] on the WAL.
func (w *WAL) ConfIndex() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return confIndex(w.st.confState, w.st.confIndex, w.st.snap)
}

// InitialState is [Storage.InitialState] on the WAL.
func (w *WAL) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, nil, errClosed
	}
	hs, cs := w.st.initialState()
	return hs, cs, nil
}

// HasState is [Storage.HasState] on the WAL.
func (w *WAL) HasState() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st.hasState()
}

// FirstIndex returns the index of the first entry Entries may return.
func (w *WAL) FirstIndex() (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, errClosed
	}
	return w.st.dummyIndex + 1, nil
}

// LastIndex returns the index of the last entry (FirstIndex()-1 if there is none).
func (w *WAL) LastIndex() (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, errClosed
	}
	return w.st.last, nil
}

// Snapshot returns a copy of the latest snapshot.
func (w *WAL) Snapshot() (*raftpb.Snapshot, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errClosed
	}
	return proto.Clone(w.st.snap).(*raftpb.Snapshot), nil
}

// Term is [Storage.Term] on the WAL.
func (w *WAL) Term(i uint64) (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, errClosed
	}
	return w.term(i)
}

func (w *WAL) term(i uint64) (uint64, error) {
	if t, stored, err := w.st.termBound(i); !stored {
		return t, err
	}
	return w.st.entry(i).GetTerm(), nil
}

// Entries is [Storage.Entries] on the WAL.
func (w *WAL) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errClosed
	}
	st := w.st
	if err := st.checkEntries(lo, hi); err != nil {
		return nil, err
	}
	out := make([]*raftpb.Entry, 0, hi-lo)
	var size uint64
	for i := lo; i < hi; i++ {
		e := st.entry(i)
		if size += uint64(proto.Size(e)); len(out) > 0 && size > maxSize {
			break
		}
		out = append(out, e)
	}
	return out, nil
}
