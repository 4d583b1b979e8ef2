package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// A member that restarts from its data directory ends the sessions of its
// earlier incarnations before it opens its own: their CloseSession entries
// go to the leader in the same batch as its OpenSession, ahead of it, so the
// locks those sessions held (for callers that died with the process) pass to
// their next waiters within one commit of the restart (L3), not at their TTL.
//
// A raft member finds them in its lock table (every session records its
// node). A light member has no lock table: it keeps the id of the session it
// last opened in sessionFile, and ends that one. Sessions the member does not
// know about yet (its own OpenSession committed by the others but not in its
// log when it died) are still found when its new session opens
// (onSessionOpenedEvent).

// sessionFile records a light member's current session id.
const sessionFile = "session"

// loadEarlierSession reads the session a light member had when it stopped
// (0: none recorded).
func loadEarlierSession(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, sessionFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "session=")
	id, err := strconv.ParseUint(v, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("%w: %s: malformed %q", lockerr.ErrDataDir, filepath.Join(dir, sessionFile), b)
	}
	return id, nil
}

// recordSession notes a light member's new session id (0: none) in its data
// directory dir, durably: the next incarnation ends it.
func recordSession(dir string, id uint64) error {
	path := filepath.Join(dir, sessionFile)
	tmp := path + ".tmp"
	err := writeFileSync(tmp, []byte(fmt.Sprintf("session=%d\n", id)))
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

// closeEarlierSessions proposes, ahead of this node's OpenSession, the end
// of every session of its earlier incarnations it knows of.
func (n *Node) closeEarlierSessions() {
	s := &n.loop.own
	var ids []uint64
	for _, si := range n.fsm.Sessions() {
		if si.Node == n.id && si.Session != s.id {
			ids = append(ids, si.Session)
		}
	}
	if s.earlier != 0 {
		ids = append(ids, s.earlier)
		s.earlier = 0
	}
	now := n.clock.Now()
	for _, id := range ids {
		if _, ok := s.toClose[id]; ok {
			continue
		}
		n.log.Info("ending a session of an earlier incarnation of this node", "session", id)
		s.toClose[id] = now
		n.proposeSessionless(lockfsm.Command{Kind: lockfsm.KindCloseSession, Session: id})
	}
}
