package node

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// Static member lists that differ between replicas.
//
// With static members every replica bootstraps raft from its own list, and
// a replica's raft id is its position in Join's peers. Two lists that differ
// in order or content are not a slow start but two different clusters under
// one ClusterID: with [a b c] here and [a c b] there, both b and c believe
// they are member 2 and could each cast member 2's vote. So the list is part
// of the cluster's identity: a static cluster's formation id (the identity
// every RPC carries and every receiver checks, transport/formation.go) is a
// hash of ClusterID and the sorted (id, address) list, written to the
// identity file when the data directory is created, and kept for good.
// Replicas given different lists have different ids and refuse each other's
// raft traffic from the first message: no vote of a misnumbered member is
// ever counted.
//
// Why the formation id rather than a separate check: the id is already on
// every stream, snapshot and call, so the check costs nothing more and
// cannot be skipped by any path; and it is durable, so the list a directory
// was created with is the one it is held to (a restart with an edited list
// keeps the original identity; a directory created before this check keeps
// none, and adopts its own list's hash when a peer carries it).
//
// Saying what differs: a refusal carries the refusing node's list
// (transport.Config.FormationDetail), so the refused node logs the
// difference at ERROR ("id 2 is 127.0.0.1:7401 here, 127.0.0.1:7402 there;
// the same addresses in another order: ..."). A node that finds a majority
// of the other members on another list can never reach a quorum: it stops
// serving with ErrInvalidConfig and that message, so its Lock calls fail at
// once instead of timing out. The members on the majority's list go on
// serving and log the odd one out.

// staticFormation is the formation id of a static cluster with members.
func staticFormation(cluster string, members []Member) string {
	h := sha256.New()
	h.Write([]byte("lockraft static formation v1\x00" + cluster + "\x00"))
	for _, m := range sortedMembers(members) {
		fmt.Fprintf(h, "%d=%s\n", m.ID, m.Addr)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// staticDetail describes a static member list for FormationDetail.
func staticDetail(members []Member) string {
	var b strings.Builder
	b.WriteString("static members [")
	for i, m := range sortedMembers(members) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d=%s", m.ID, m.Addr)
	}
	b.WriteByte(']')
	if b.Len() > 4096 {
		return "static members (list too long to show)"
	}
	return b.String()
}

// parseStaticDetail reads what staticDetail wrote.
func parseStaticDetail(s string) ([]Member, bool) {
	body, ok := strings.CutPrefix(s, "static members [")
	if !ok {
		return nil, false
	}
	body, ok = strings.CutSuffix(body, "]")
	if !ok {
		return nil, false
	}
	var out []Member
	for _, f := range strings.Fields(body) {
		ids, addr, ok := strings.Cut(f, "=")
		id, err := strconv.ParseUint(ids, 10, 64)
		if !ok || err != nil {
			return nil, false
		}
		out = append(out, Member{ID: id, Addr: addr})
	}
	return out, true
}

func sortedMembers(members []Member) []Member {
	s := slices.Clone(members)
	slices.SortFunc(s, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return s
}

// diffStatic says how remote's list differs from local's.
func diffStatic(local, remote []Member) string {
	l, r := map[uint64]string{}, map[uint64]string{}
	for _, m := range local {
		l[m.ID] = m.Addr
	}
	for _, m := range remote {
		r[m.ID] = m.Addr
	}
	var parts []string
	for _, m := range sortedMembers(local) {
		switch a, ok := r[m.ID]; {
		case !ok:
			parts = append(parts, fmt.Sprintf("id %d (%s) only here", m.ID, m.Addr))
		case a != m.Addr:
			parts = append(parts, fmt.Sprintf("id %d is %s here, %s there", m.ID, m.Addr, a))
		}
	}
	for _, m := range sortedMembers(remote) {
		if _, ok := l[m.ID]; !ok {
			parts = append(parts, fmt.Sprintf("id %d (%s) only there", m.ID, m.Addr))
		}
	}
	if len(parts) == 0 {
		return "the same list (another ClusterID or a directory created with another list)"
	}
	la, ra := addrs(local), addrs(remote)
	if slices.Equal(la, ra) {
		parts = append(parts, "the same addresses in another order: list the peers in the same order on every replica")
	}
	return strings.Join(parts, "; ")
}

func addrs(ms []Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Addr)
	}
	slices.Sort(out)
	return out
}

// staticCheck is the node's record of members found on another list: peer
// id -> what differs.
type staticCheck struct {
	mu      sync.Mutex
	foreign map[uint64]staticMismatch
}

type staticMismatch struct {
	msg      string
	detailed bool // msg says what differs (the peer sent its list)
}

// mismatch returns what this node knows of members on another list ("" if
// nothing), preferring a message that says what differs.
func (s *staticCheck) mismatch() (msg string, peers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	detailed := false
	for _, id := range slices.Sorted(maps.Keys(s.foreign)) {
		if m := s.foreign[id]; msg == "" || m.detailed && !detailed {
			msg, detailed = m.msg, m.detailed
		}
	}
	return msg, len(s.foreign)
}

// staticUnavailable adds what this node knows of a static list mismatch to
// the error of a call that found no leader in time (ctx's cause), so that
// the caller learns why: errors.Is then matches ErrInvalidConfig too.
func (n *Node) staticUnavailable(err error) error {
	if n.cfg.Gossip != nil || n.lead.Load() != 0 {
		return err
	}
	if msg, _ := n.static.mismatch(); msg != "" {
		return fmt.Errorf("%w (%w: %s)", err, lockerr.ErrInvalidConfig, msg)
	}
	return err
}

// initStaticFormation sets a static node's formation id (see the top of
// this file): the stored one, else, for a new directory, the hash of its
// list, written before raft is bootstrapped. It returns the id ("" for a
// directory from before this check).
func (n *Node) initStaticFormation(stored string, hasState bool) (string, error) {
	if stored != "" || hasState {
		return stored, nil
	}
	id := staticFormation(n.cfg.ClusterID, n.cfg.Members)
	if err := writeIdentity(n.cfg.DataDir, identity{id: n.id, cluster: n.cfg.ClusterID, formation: id}); err != nil {
		return "", err
	}
	return id, nil
}

// adoptStaticFormation lets a directory from before this check take its own
// list's id when a peer carries it, and nothing else.
func (n *Node) adoptStaticFormation(id string) error {
	if own := staticFormation(n.cfg.ClusterID, n.cfg.Members); id != own {
		return fmt.Errorf("static member lists differ: %s", staticDetail(n.cfg.Members))
	}
	n.formMu.Lock()
	defer n.formMu.Unlock()
	if n.formationID == id {
		return nil
	}
	if err := writeIdentity(n.cfg.DataDir, identity{id: n.id, cluster: n.cfg.ClusterID, formation: id}); err != nil {
		return err
	}
	n.formationID = id
	return nil
}

// onForeignStaticPeer is the transport's OnForeignPeer in static mode.
func (n *Node) onForeignStaticPeer(peer uint64, detail string, dialed bool) {
	addr, listed := "an id not in this list", false
	for _, m := range n.cfg.Members {
		if m.ID == peer && peer != n.id {
			addr, listed = m.Addr, true
		}
	}
	if peer == n.id {
		addr = "this member's own id"
	}
	var msg string
	remote, detailed := parseStaticDetail(detail)
	if detailed {
		msg = fmt.Sprintf("static member list differs from that of member %d (%s): %s (here %s, there %s)",
			peer, addr, diffStatic(n.cfg.Members, remote), staticDetail(n.cfg.Members), detail)
	} else {
		msg = fmt.Sprintf("member %d (%s) belongs to another cluster formation: its static member list (or the one its "+
			"data directory was created with) differs from this one, %s", peer, addr, staticDetail(n.cfg.Members))
	}
	if !listed || !dialed {
		// A sender's id is only a claim: with [a b c] here and [a c b] at
		// c, c claims id 2, which is b's. Proof of a mismatch, said, but
		// counted only for the address this member dialed, whose refusal
		// says for sure that the member it needs there is on another list.
		n.log.Error("refusing a member configured with another static member list", "peer", peer, "reason", msg)
		return
	}
	n.static.mu.Lock()
	if n.static.foreign == nil {
		n.static.foreign = map[uint64]staticMismatch{}
	}
	prev, seen := n.static.foreign[peer]
	if !seen || detailed && !prev.detailed {
		n.static.foreign[peer] = staticMismatch{msg, detailed}
	}
	n.static.mu.Unlock()
	if !seen || detailed && !prev.detailed {
		n.log.Error("refusing a member configured with another static member list", "peer", peer, "reason", msg)
	}
	msg, bad := n.static.mismatch()
	total := len(n.cfg.Members)
	if bad > total-(total/2+1) {
		err := fmt.Errorf("%w: %d of the other %d members are on another static member list, so this member can "+
			"never reach a quorum; give every replica the same peers in the same order: %s", lockerr.ErrInvalidConfig, bad, total-1, msg)
		go func() {
			// Not on the transport's goroutine: the loop may be busy.
			_ = n.do(context.Background(), func() {
				if n.loop.stopWith == nil {
					n.loop.stopWith = err
				}
			})
		}()
	}
}
