package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/raftlog"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// TestLogEngineSelection: a new directory gets the WAL (or what is asked for); an
// existing directory keeps its engine; a mismatch or both logs at once is refused.
func TestLogEngineSelection(t *testing.T) {
	open := func(dir, engine string) (string, error) {
		l, got, err := openLog(dir, engine, nil)
		if err == nil {
			require.NoError(t, l.Close())
		}
		return got, err
	}
	fresh := t.TempDir()
	got, err := open(fresh, "")
	require.NoError(t, err)
	require.Equal(t, logEngineWAL, got)
	require.DirExists(t, filepath.Join(fresh, "wal"))
	got, err = open(fresh, logEngineWAL)
	require.NoError(t, err)
	require.Equal(t, logEngineWAL, got)
	_, err = open(fresh, logEngineBbolt)
	require.Error(t, err)

	// An existing bbolt directory keeps bbolt, with its data.
	old := t.TempDir()
	s, err := raftlog.Open(filepath.Join(old, "raft.db"), raftlog.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Bootstrap(&raftpb.ConfState{Voters: []uint64{1}}))
	require.NoError(t, s.Close())
	l, got, err := openLog(old, "", nil)
	require.NoError(t, err)
	require.Equal(t, logEngineBbolt, got)
	require.True(t, l.HasState())
	require.NoError(t, l.Close())
	require.NoDirExists(t, filepath.Join(old, "wal"))
	_, err = open(old, logEngineWAL)
	require.Error(t, err)
	require.NoDirExists(t, filepath.Join(old, "wal"))

	// Both: refuse.
	both := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(both, "wal"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(both, "raft.db"), nil, 0o600))
	_, err = open(both, "")
	require.Error(t, err)

	// Through Start and Config validation.
	cfg := Config{ID: 1, DataDir: old, LogEngine: logEngineWAL, Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}}}
	_, err = Start(cfg)
	require.ErrorIs(t, err, lockerr.ErrDataDir)
	require.Contains(t, err.Error(), "bbolt raft log")
	cfg.LogEngine = "rocks"
	require.ErrorIs(t, cfg.Validate(), lockerr.ErrInvalidConfig)
}
