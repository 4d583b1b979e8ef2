package node

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/lockraft/lockraft/raftlog"
)

// Raft log engines for Config.LogEngine.
const (
	// logEngineWAL is raftlog's append-only segmented WAL in DataDir/wal/: one write
	// and one fdatasync per group of Readys. The default for a new data directory.
	logEngineWAL = "wal"
	// logEngineBbolt is raftlog's bbolt file DataDir/raft.db: one transaction (two
	// fsyncs) per group of Readys. Chosen automatically for a directory that already has raft.db.
	logEngineBbolt = "bbolt"
)

const (
	boltLogName = "raft.db"
	walLogName  = "wal"
)

// openLog opens the raft log in dir with the configured engine. With engine "" it picks
// the engine whose data is already there (bbolt for an existing raft.db), else the WAL.
// An explicit engine that would ignore the other engine's existing data, or a directory
// holding both, is refused: never silently start from an empty log over real data.
func openLog(dir, engine string, lg *slog.Logger) (raftlog.Log, string, error) {
	boltPath, walPath := filepath.Join(dir, boltLogName), filepath.Join(dir, walLogName)
	hasBolt, err := exists(boltPath)
	if err != nil {
		return nil, "", err
	}
	hasWAL, err := exists(walPath)
	if err != nil {
		return nil, "", err
	}
	switch {
	case hasBolt && hasWAL:
		return nil, "", fmt.Errorf("%s holds both %s and %s/: which raft log is the real one is unknown", dir, boltLogName, walLogName)
	case engine == "" && hasBolt:
		engine = logEngineBbolt
	case engine == "":
		engine = logEngineWAL
	case engine == logEngineWAL && hasBolt:
		return nil, "", fmt.Errorf("LogEngine %q but %s holds a bbolt raft log (%s); use %q or leave LogEngine empty", engine, dir, boltLogName, logEngineBbolt)
	case engine == logEngineBbolt && hasWAL:
		return nil, "", fmt.Errorf("LogEngine %q but %s holds a WAL raft log (%s/); use %q or leave LogEngine empty", engine, dir, walLogName, logEngineWAL)
	}
	// The WAL zero-fills its tail a MiB at a time, so a write's fdatasync
	// flushes data only, without a filesystem journal commit for the new size.
	opts := raftlog.Options{Logger: lg, Preallocate: 1 << 20}
	switch engine {
	case logEngineWAL:
		w, err := raftlog.OpenWAL(walPath, opts)
		if err != nil {
			return nil, "", err
		}
		return w, engine, nil
	case logEngineBbolt:
		s, err := raftlog.Open(boltPath, opts)
		if err != nil {
			return nil, "", err
		}
		return s, engine, nil
	}
	return nil, "", fmt.Errorf("unknown LogEngine %q", engine)
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}
