package node

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The data directory's own durability: a file or directory that was just
// created survives a crash only once the directory holding its entry is
// fsynced. The raft log's WAL and the snapshot and identity files sync their
// directories themselves; bbolt (locks.db, raft.db) never does, and neither
// does os.MkdirAll.

// mkdirAllSync creates dir and any missing parents, fsyncing each parent
// after a directory was created in it.
func mkdirAllSync(dir string) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: errors.New("not a directory")}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAllSync(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

// cleanSnapDir removes this node's own leftover "<index>.snap.tmp" files (a
// crash while writing a snapshot) and fsyncs the directory if it removed
// any. The transport's "*.snap.tmp-*" files are its own business.
func cleanSnapDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	removed := false
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".snap.tmp") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
			removed = true
		}
	}
	if removed {
		return syncDir(dir)
	}
	return nil
}
