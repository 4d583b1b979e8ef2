package raftlog

import (
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// openTemp opens a fresh log in t.TempDir and closes it at cleanup.
func openTemp(t testing.TB, opts Options) (*Storage, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

// reopen closes s and opens path again.
func reopen(t testing.TB, s *Storage, path string, opts Options) *Storage {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	return s2
}

// mkEnts makes entries lo..hi inclusive with the given term and a payload naming them.
func mkEnts(lo, hi, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := lo; i <= hi; i++ {
		out = append(out, &raftpb.Entry{
			Index: new(i), Term: new(term), Type: raftpb.EntryNormal.Enum(),
			Data: []byte{byte(i), byte(term), 'x', 'y'},
		})
	}
	return out
}
