package node

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestS3DataDirEntriesSynced (S3; review finding 11): every file and
// directory a node creates in a new data directory has its directory entry
// fsynced after it exists — the data directory and its missing parents, snap/,
// locks.db and the raft log (bbolt's raft.db or the WAL's directory) — so a
// crash right after Start cannot lose a file that later holds acknowledged
// state. Leftover snapshot temporaries of a crash are removed on start.
func TestS3DataDirEntriesSynced(t *testing.T) {
	for _, engine := range []string{logEngineWAL, logEngineBbolt} {
		t.Run(engine, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "a", "data")
			type syncSeen struct {
				dir                string
				locks, log, snap   bool
				childOfRootPresent bool
			}
			var mu sync.Mutex
			var seen []syncSeen
			syncDirObserved = func(d string) {
				exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, syncSeen{
					dir:                filepath.Clean(d),
					locks:              exists(filepath.Join(dir, "locks.db")),
					log:                exists(filepath.Join(dir, "raft.db")) || exists(filepath.Join(dir, "wal")),
					snap:               exists(filepath.Join(dir, "snap")),
					childOfRootPresent: exists(filepath.Join(root, "a")),
				})
			}
			t.Cleanup(func() { syncDirObserved = nil })
			cfg := Config{ID: 1, DataDir: dir, LogEngine: engine, Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}},
				Logger: testLogger(t, 1)}
			fastConfig(&cfg)
			n, err := Start(cfg)
			require.NoError(t, err)
			n.Crash()
			syncDirObserved = nil
			has := func(what string, ok func(s syncSeen) bool) {
				t.Helper()
				mu.Lock()
				defer mu.Unlock()
				for _, s := range seen {
					if ok(s) {
						return
					}
				}
				t.Errorf("no directory fsync %s (saw %+v)", what, seen)
			}
			has("of the root after a/ was created", func(s syncSeen) bool { return s.dir == root && s.childOfRootPresent })
			has("of a/ after data/ was created", func(s syncSeen) bool { return s.dir == filepath.Join(root, "a") })
			has("of the data directory after snap/ was created", func(s syncSeen) bool { return s.dir == dir && s.snap })
			has("of the data directory after locks.db and the raft log were created", func(s syncSeen) bool {
				return s.dir == dir && s.locks && s.log
			})

			// A crash left the temporary of a snapshot being written.
			tmp := filepath.Join(dir, "snap", "0000000000000064.snap.tmp")
			require.NoError(t, os.WriteFile(tmp, []byte("partial"), 0o600))
			n, err = Start(cfg)
			require.NoError(t, err)
			n.Crash()
			_, err = os.Stat(tmp)
			require.ErrorIs(t, err, os.ErrNotExist, "the leftover snapshot temporary is removed on start")
		})
	}
}
