package transport

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Deny-list
//
// Config.DenyListFile names a text file of what this member refuses from
// now on, one entry a line ('#' starts a comment, blank lines are ignored):
//
//	serial 5f3a9c...        a certificate, by its serial number in hex
//	                        (colons and case are ignored: openssl's
//	                        "5F:3A:9C..." and its "serial=5F3A9C..." too)
//	member 000000000000002a every certificate naming that member: its id
//	                        as lockraftctl shows it, 16 hex digits (case
//	                        is ignored); a decimal id, as lists written
//	                        for earlier versions have it, is read as a
//	                        certificate's is (see identity.go)
//
// A serial revokes one certificate (a leaked key, a demoted member whose
// voter certificate was reissued as light); a member id revokes an identity
// whatever certificate names it (a member removed for good). Serials are
// matched whatever CA issued them (certgen's are random 127-bit numbers).
//
// The list is checked on every handshake, both ways: a peer presenting a
// denied certificate is refused, and so is a server this member dials. The
// file is read at start (an unreadable or malformed file is a config error)
// and again when its size or modification time changes, checked at most
// once a second and by a watcher every second; a change closes the
// connections it now denies. A replacement that cannot be parsed is ignored
// (and logged) until it can; the last good list stays in force.

// denyCheck is how often the deny-list file is looked at.
const denyCheck = time.Second

// SerialString is how a certificate's serial is written in a deny-list
// (and printed by lockraft-certs show): lower-case hex, no colons.
func SerialString(n *big.Int) string { return n.Text(16) }

// denySet is one parsed deny-list.
type denySet struct {
	serials map[string]bool // SerialString
	members map[uint64]bool
}

// denies says why the set refuses cert (and member id), "" if it does not.
func (s *denySet) denies(cert *x509.Certificate, id uint64) string {
	if s == nil {
		return ""
	}
	if cert != nil && s.serials[SerialString(cert.SerialNumber)] {
		return "certificate serial on the deny-list"
	}
	if id != 0 && s.members[id] {
		return "member id on the deny-list"
	}
	return ""
}

// parseDenyList reads the file format above.
func parseDenyList(b []byte) (*denySet, error) {
	s := &denySet{serials: map[string]bool{}, members: map[uint64]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(strings.ReplaceAll(line, "=", " "))
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"serial HEX\" or \"member ID\"", n)
		}
		switch strings.ToLower(fields[0]) {
		case "serial":
			v, ok := new(big.Int).SetString(strings.ReplaceAll(fields[1], ":", ""), 16)
			if !ok || v.Sign() < 0 {
				return nil, fmt.Errorf("line %d: serial %q is not hex", n, fields[1])
			}
			s.serials[SerialString(v)] = true
		case "member":
			id, err := parseMemberIDText(strings.ToLower(fields[1]))
			if err != nil || ReservedID(id) {
				return nil, fmt.Errorf("line %d: member %q is not a member id", n, fields[1])
			}
			s.members[id] = true
		default:
			return nil, fmt.Errorf("line %d: unknown entry %q (serial or member)", n, fields[0])
		}
	}
	return s, sc.Err()
}

// denyList is the deny-list of one Transport: the file's last good content.
type denyList struct {
	path string
	set  atomic.Pointer[denySet]

	mu      sync.Mutex
	checked time.Time
	stamp   string // size and mtime at the last load
}

// loadDenyList reads path now; "" means no deny-list.
func loadDenyList(path string) (*denyList, error) {
	d := &denyList{path: path}
	if path == "" {
		return d, nil
	}
	if _, err := d.reload(); err != nil {
		return nil, fmt.Errorf("deny-list %s: %w", path, err)
	}
	return d, nil
}

// current returns the list in force, reading the file again first if it is
// due (at most once per denyCheck).
func (d *denyList) current() *denySet {
	if d.path != "" {
		d.mu.Lock()
		due := time.Since(d.checked) >= denyCheck
		d.mu.Unlock()
		if due {
			_, _ = d.reload()
		}
	}
	return d.set.Load()
}

// reload reads the file if it changed; changed reports a new list in force.
func (d *denyList) reload() (changed bool, err error) {
	if d.path == "" {
		return false, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checked = time.Now()
	fi, err := os.Stat(d.path)
	if err != nil {
		return false, err
	}
	stamp := fmt.Sprintf("%d/%d", fi.Size(), fi.ModTime().UnixNano())
	if stamp == d.stamp {
		return false, nil
	}
	b, err := os.ReadFile(d.path)
	if err != nil {
		return false, err
	}
	s, err := parseDenyList(b)
	if err != nil {
		return false, err
	}
	d.stamp = stamp
	d.set.Store(s)
	return true, nil
}

// errDenied is the cause of a refused certificate on the deny-list or of a
// revoked member.
var errDenied = errors.New("transport: refused")

// watchDenyList reads the deny-list file again every denyCheck while the
// Transport runs, and closes the connections a changed list refuses.
func (t *Transport) watchDenyList() {
	defer t.bg.Done()
	tick := time.NewTicker(denyCheck)
	defer tick.Stop()
	for {
		select {
		case <-t.stopc:
			return
		case <-tick.C:
		}
		if err := t.reloadDenyList(); err != nil {
			t.refused.Refuse(refusedDenyList, t.deny.path, "reason", "unusable deny-list; the last good one stays in force", "err", err)
		}
	}
}

// refusedDenyList is the refuse.Log kind of an unusable deny-list file.
const refusedDenyList = "deny-list"

// reloadDenyList reads the deny-list file now if it changed and closes the
// connections the new list refuses. An unusable file is an error, and the
// last good list stays in force. Without a deny-list it does nothing.
func (t *Transport) reloadDenyList() error {
	changed, err := t.deny.reload()
	if err != nil {
		return fmt.Errorf("transport: deny-list %s: %w", t.deny.path, err)
	}
	if changed {
		s := t.deny.set.Load()
		t.log.Info("transport: deny-list loaded", "path", t.deny.path, "serials", len(s.serials), "members", len(s.members))
		t.closeDenied(s)
	}
	return nil
}
