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

// engine opens one of the two Log implementations for engine-parameterized tests.
type engine struct {
	name string
	open func(path string, opts Options) (Log, error)
	file string // name of the file or directory inside the temp dir
}

var engines = []engine{
	{"bbolt", func(p string, o Options) (Log, error) { return Open(p, o) }, "raft.db"},
	{"wal", func(p string, o Options) (Log, error) { return OpenWAL(p, o) }, "wal"},
}

func (e engine) openTemp(t testing.TB, opts Options) (Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), e.file)
	s, err := e.open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func (e engine) reopen(t testing.TB, s Log, path string, opts Options) Log {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := e.open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	return s2
}
