package raftlog

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func TestOpenRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	random := filepath.Join(dir, "random.db")
	rnd := make([]byte, 64<<10)
	for i := range rnd {
		rnd[i] = byte(rand.N(256))
	}
	require.NoError(t, os.WriteFile(random, rnd, 0o600))

	// A real log, truncated to various lengths.
	full := filepath.Join(dir, "full.db")
	s, err := Open(full, Options{NoSync: true})
	require.NoError(t, err)
	for i := uint64(1); i <= 2000; i += 100 {
		require.NoError(t, s.Save(nil, nil, mkEnts(i, i+99, 1)))
	}
	require.NoError(t, s.Close())
	data, err := os.ReadFile(full)
	require.NoError(t, err)

	foreign := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("magic"), []byte("somebody else"))
	}))
	require.NoError(t, db.Close())

	cases := map[string]string{"random bytes": random, "foreign bbolt file": foreign}
	for _, n := range []int{100, 4096, 3 * 4096, len(data) / 4, len(data) / 2} {
		p := filepath.Join(dir, "truncated"+strconv.Itoa(n)+".db")
		require.NoError(t, os.WriteFile(p, data[:n], 0o600))
		cases["truncated to "+strconv.Itoa(n)] = p
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := Open(p, Options{})
			if err == nil {
				_ = s.Close()
			}
			require.ErrorIs(t, err, errCorrupt)
			require.ErrorContains(t, err, p)
		})
	}
}

func TestOpenEmptyFileIsFresh(t *testing.T) {
	p := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	s, err := Open(p, Options{})
	require.NoError(t, err)
	require.False(t, s.HasState())
	require.NoError(t, s.Close())
}

func TestOpenMissingDirectory(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir.db"), Options{})
	require.Error(t, err)
	require.NotErrorIs(t, err, errCorrupt)
}

// TestOpenLocked relies on flock locks belonging to the open file description, so a
// second open in the same process conflicts just as another process would.
func TestOpenLocked(t *testing.T) {
	s, p := openTemp(t, Options{})
	_, err := Open(p, Options{LockTimeout: 50 * time.Millisecond})
	require.ErrorIs(t, err, errLocked)
	require.ErrorContains(t, err, p)
	require.NoError(t, s.Close())
	s2, err := Open(p, Options{LockTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
}
