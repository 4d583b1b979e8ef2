package node

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// identityFile records which node and cluster a data directory belongs to, so
// that a directory is never reused by another node id or another cluster.
const identityFile = "node.id"

// checkIdentity creates the identity file on first start and verifies it on
// every later one.
func checkIdentity(dir string, id uint64, cluster string) error {
	path := filepath.Join(dir, identityFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		tmp := path + ".tmp"
		body := fmt.Sprintf("id=%d\ncluster=%s\n", id, cluster)
		if err := writeFileSync(tmp, []byte(body)); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrDataDir, path, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrDataDir, path, err)
		}
		return syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDataDir, path, err)
	}
	defer f.Close()
	var gotID uint64
	var gotCluster string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			return fmt.Errorf("%w: %s: malformed line %q", ErrDataDir, path, sc.Text())
		}
		switch k {
		case "id":
			gotID, err = strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: %s: bad id %q", ErrDataDir, path, v)
			}
		case "cluster":
			gotCluster = v
		}
	}
	if gotID != id {
		return fmt.Errorf("%w: %s belongs to node %d, not %d", ErrDataDir, dir, gotID, id)
	}
	if gotCluster != cluster {
		return fmt.Errorf("%w: %s belongs to cluster %q, not %q", ErrDataDir, dir, gotCluster, cluster)
	}
	return nil
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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
