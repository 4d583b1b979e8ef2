package fleet

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/lockraft/lockraft/internal/views"
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

// Member is one founding voter of a statically configured cluster.
type Member struct {
	ID   uint64 // raft id
	Addr string // gRPC address
}

// staticFormation is the formation id of a static cluster with members. The
// ids are hashed in decimal, as when the first data directories recorded
// it: another spelling would change every static cluster's formation id.
func staticFormation(cluster string, members []Member) string {
	h := sha256.New()
	h.Write([]byte("lockraft static formation v1\x00" + cluster + "\x00"))
	for _, m := range sortedMembers(members) {
		fmt.Fprintf(h, "%d=%s\n", m.ID, m.Addr)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// staticDetail describes a static member list for the transport's
// FormationDetail (parseStaticDetail reads it). The ids are decimal, as
// members of earlier versions write and read them; showStatic is the list
// as messages show it.
func staticDetail(members []Member) string {
	return listStatic(members, "%d=%s")
}

// showStatic is a static member list as log lines and errors show it, ids
// in hex as everywhere else.
func showStatic(members []Member) string {
	return listStatic(members, "%016x=%s")
}

func listStatic(members []Member, entry string) string {
	var b strings.Builder
	b.WriteString("static members [")
	for i, m := range sortedMembers(members) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, entry, m.ID, m.Addr)
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
			parts = append(parts, fmt.Sprintf("id %016x (%s) only here", m.ID, m.Addr))
		case a != m.Addr:
			parts = append(parts, fmt.Sprintf("id %016x is %s here, %s there", m.ID, m.Addr, a))
		}
	}
	for _, m := range sortedMembers(remote) {
		if _, ok := l[m.ID]; !ok {
			parts = append(parts, fmt.Sprintf("id %016x (%s) only there", m.ID, m.Addr))
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

// StaticDetail describes this node's static member list, for the
// transport's FormationDetail: a peer it refuses learns what differs.
func (f *Fleet) StaticDetail() string { return staticDetail(f.cfg.Static) }

// StaticMismatch is what this node knows of members on another static
// list ("" if nothing): a call that found no leader in time says it.
func (f *Fleet) StaticMismatch() string {
	msg, _ := f.static.mismatch()
	return msg
}

// InitStaticFormation sets a static node's formation id (see the top of
// this file): the stored one, else, for a new directory, the hash of its
// list, written before raft is bootstrapped. It returns the id ("" for a
// directory from before this check).
func (f *Fleet) InitStaticFormation(hasState bool) (string, error) {
	stored := f.Formation()
	if stored != "" || hasState {
		return stored, nil
	}
	id := staticFormation(f.cfg.ClusterID, f.cfg.Static)
	if err := f.host.PersistFormation(id); err != nil {
		return "", err
	}
	f.formMu.Lock()
	f.formation = id
	f.formMu.Unlock()
	return id, nil
}

// AdoptStaticFormation lets a directory from before this check take its own
// list's id when a peer carries it, and nothing else (the transport's
// AdoptFormation in static mode).
func (f *Fleet) AdoptStaticFormation(id string) error {
	if own := staticFormation(f.cfg.ClusterID, f.cfg.Static); id != own {
		return fmt.Errorf("static member lists differ: %s", showStatic(f.cfg.Static))
	}
	f.formMu.Lock()
	defer f.formMu.Unlock()
	if f.formation == id {
		return nil
	}
	if err := f.host.PersistFormation(id); err != nil {
		return err
	}
	f.formation = id
	return nil
}

// OnForeignStaticPeer is the transport's OnForeignPeer in static mode. It
// returns an error when a majority of the other members is on another list:
// this member can never reach a quorum, and the node stops serving with it
// (wrapped in its ErrInvalidConfig).
func (f *Fleet) OnForeignStaticPeer(peer uint64, detail string, dialed bool) error {
	members := f.cfg.Static
	addr, listed := "an id not in this list", false
	for _, m := range members {
		if m.ID == peer && peer != f.cfg.ID {
			addr, listed = m.Addr, true
		}
	}
	if peer == f.cfg.ID {
		addr = "this member's own id"
	}
	var msg string
	remote, detailed := parseStaticDetail(detail)
	if detailed {
		msg = fmt.Sprintf("static member list differs from that of member %016x (%s): %s (here %s, there %s)",
			peer, addr, diffStatic(members, remote), showStatic(members), showStatic(remote))
	} else {
		msg = fmt.Sprintf("member %016x (%s) belongs to another cluster formation: its static member list (or the one its "+
			"data directory was created with) differs from this one, %s", peer, addr, showStatic(members))
	}
	if !listed || !dialed {
		// A sender's id is only a claim: with [a b c] here and [a c b] at
		// c, c claims id 2, which is b's. Proof of a mismatch, said, but
		// counted only for the address this member dialed, whose refusal
		// says for sure that the member it needs there is on another list.
		f.log.Error("refusing a member configured with another static member list", "peer", views.MemberID(peer), "reason", msg)
		return nil
	}
	s := &f.static
	s.mu.Lock()
	if s.foreign == nil {
		s.foreign = map[uint64]staticMismatch{}
	}
	prev, seen := s.foreign[peer]
	if !seen || detailed && !prev.detailed {
		s.foreign[peer] = staticMismatch{msg, detailed}
	}
	s.mu.Unlock()
	if !seen || detailed && !prev.detailed {
		f.log.Error("refusing a member configured with another static member list", "peer", views.MemberID(peer), "reason", msg)
	}
	msg, bad := s.mismatch()
	total := len(members)
	if bad > total-(total/2+1) {
		return fmt.Errorf("%d of the other %d members are on another static member list, so this member can "+
			"never reach a quorum; give every replica the same peers in the same order: %s", bad, total-1, msg)
	}
	return nil
}
