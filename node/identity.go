package node

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/node/internal/fleet"
)

// identityFile records which node and cluster a data directory belongs to, so
// that a directory is never reused by another node id or another cluster.
// It also holds the node's formation id once it has one
// (node/internal/fleet/formation.go, staticlist.go): the formed cluster it
// belongs to, for good.
const identityFile = "node.id"

// identity is the content of the identity file: lines "key=value". Readers
// ignore keys they do not know, so a newer file stays readable.
type identity struct {
	id        uint64
	cluster   string
	formation string // "" until the node forms or joins a formed cluster
}

// readIdentity reads dir's identity file; ok is false if there is none.
func readIdentity(dir string) (ident identity, ok bool, err error) {
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, fmt.Errorf("%w: %s: %v", lockerr.ErrDataDir, path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, found := strings.Cut(sc.Text(), "=")
		if !found {
			return identity{}, false, fmt.Errorf("%w: %s: malformed line %q", lockerr.ErrDataDir, path, sc.Text())
		}
		switch k {
		case "id":
			ident.id, err = strconv.ParseUint(v, 10, 64)
			if err != nil || ident.id == 0 {
				return identity{}, false, fmt.Errorf("%w: %s: bad id %q", lockerr.ErrDataDir, path, v)
			}
		case "cluster":
			ident.cluster = v
		case "formation":
			if !fleet.ValidFormationID(v) {
				return identity{}, false, fmt.Errorf("%w: %s: bad formation id %q", lockerr.ErrDataDir, path, v)
			}
			ident.formation = v
		}
	}
	if ident.id == 0 {
		return identity{}, false, fmt.Errorf("%w: %s: identity file has no id", lockerr.ErrDataDir, path)
	}
	return ident, true, nil
}

// writeIdentity replaces dir's identity file atomically and durably: a
// temporary file, fsynced, renamed over it, and the directory fsynced. A
// crash leaves the old file or the new one.
func writeIdentity(dir string, ident identity) error {
	path := filepath.Join(dir, identityFile)
	body := fmt.Sprintf("id=%d\ncluster=%s\n", ident.id, ident.cluster)
	if ident.formation != "" {
		body += "formation=" + ident.formation + "\n"
	}
	tmp := path + ".tmp"
	if err := writeFileSync(tmp, []byte(body)); err != nil {
		return fmt.Errorf("%w: %s: %v", lockerr.ErrDataDir, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: %s: %v", lockerr.ErrDataDir, path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%w: %s: %v", lockerr.ErrDataDir, dir, err)
	}
	return nil
}

// checkIdentity creates the identity file on first start and verifies it on
// every later one. It returns what the file holds.
func checkIdentity(dir string, id uint64, cluster string) (identity, error) {
	ident, ok, err := readIdentity(dir)
	if err != nil {
		return identity{}, err
	}
	if !ok {
		ident = identity{id: id, cluster: cluster}
		return ident, writeIdentity(dir, ident)
	}
	if ident.id != id {
		return identity{}, fmt.Errorf("%w: %s belongs to node %016x, not %016x", lockerr.ErrDataDir, dir, ident.id, id)
	}
	if ident.cluster != cluster {
		return identity{}, fmt.Errorf("%w: %s belongs to cluster %q, not %q", lockerr.ErrDataDir, dir, ident.cluster, cluster)
	}
	return ident, nil
}

// resolveID returns the raft id recorded in dir's identity file, or a new
// random non-zero one for a directory without one (gossip mode). The
// caller records it (checkIdentity).
func resolveID(dir string) (uint64, error) {
	ident, ok, err := readIdentity(dir)
	if err != nil || ok {
		return ident.id, err
	}
	var buf [8]byte
	for {
		if _, err := rand.Read(buf[:]); err != nil {
			return 0, err
		}
		if id := binary.BigEndian.Uint64(buf[:]); id != 0 {
			return id, nil
		}
	}
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDirObserved, if set (tests only), is told of every directory fsync.
var syncDirObserved func(dir string)

func syncDir(dir string) error {
	if syncDirObserved != nil {
		syncDirObserved(dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
