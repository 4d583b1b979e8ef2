package node

// The insider suite: what a certificate the cluster's CA issued may do,
// by its role. Each attack runs over real gRPC with mutual TLS against the
// three-voter cluster of newAttackSetup (a holds "stock", b waits for it),
// from an attacker's own transport holding one of these certificates:
//
//   - light: a member certificate with the light role (id 77, no member of
//     the configuration);
//   - non-member: a certificate with the voter role naming id 77, which is
//     in no configuration; for the raft attacks the node lets it send raft
//     messages (as it does a learner, or a member gossip reports:
//     admitRaftSender), so that what stops it is the guard;
//   - voter: the certificate of b, a voter of the configuration — the most a
//     compromised member can hold.
//
// docs/security.md names each test beside the claim it proves.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// certKind is one row of the insider tables.
type certKind struct {
	name string
	id   func(s *attackSetup) uint64
	role string
}

var insiderKinds = []certKind{
	{"light", func(*attackSetup) uint64 { return outsider }, "light"},
	{"non-member", func(*attackSetup) uint64 { return outsider }, "voter"},
	{"voter", func(s *attackSetup) uint64 { return s.b }, "voter"},
}

// roleTLS returns a certificate of member id of cluster with role.
func (p *testPKI) roleTLS(cluster string, id uint64, role string) *transport.TLS {
	p.t.Helper()
	cert, key, err := p.ca.MemberRole(cluster, id, role, nil, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	require.NoError(p.t, err)
	roots, c, err := p.ca.Material(cert, key)
	require.NoError(p.t, err)
	return &transport.TLS{Roots: roots, Certificate: c}
}

// insider returns the attacker's transport for kind k, speaking to every
// node of s, and its id. A non-member is let send raft messages on every
// node first (admitRaftSender), so that what stops it is the node's guard
// (it is then a member of sorts: one the node hears raft from).
func (s *attackSetup) insider(t *testing.T, k certKind) (*transport.Transport, uint64) {
	t.Helper()
	id := k.id(s)
	peers := map[uint64]string{}
	for n := range s.tc.All() {
		peers[n] = s.tc.Addr(n)
	}
	if k.name == "non-member" {
		for _, n := range s.tc.All() {
			admitRaftSender(n, id)
		}
	}
	return attacker(t, "test", s.pki.roleTLS("test", id, k.role), id, peers), id
}

// admitRaftSender lets id through the member set's filter, as a learner or a
// member gossip reports with raft data would be.
func admitRaftSender(n *Node, id uint64) { n.members.AddFounders([]uint64{id}) }

// logEnd returns n's last log index and its term.
func logEnd(t *testing.T, n *Node) (uint64, uint64) {
	t.Helper()
	type end struct{ i, t uint64 }
	ch := make(chan end, 1)
	require.NoError(t, n.do(context.Background(), func() {
		li, err := n.storage.LastIndex()
		require.NoError(t, err)
		lt, err := n.storage.Term(li)
		require.NoError(t, err)
		ch <- end{li, lt}
	}))
	e := <-ch
	return e.i, e.t
}

// forgedAppend is an append of term that continues n's log with ents and
// commits them: what a leader elected in term would send.
func forgedAppend(t *testing.T, n *Node, from, to, term uint64, ents ...*raftpb.Entry) *raftpb.Message {
	li, lt := logEnd(t, n)
	for i, e := range ents {
		e.Index, e.Term = new(li+1+uint64(i)), new(term)
	}
	return &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), From: new(from), To: new(to), Term: new(term),
		Index: new(li), LogTerm: new(lt), Commit: new(li + uint64(len(ents))), Entries: ents}
}

// A member that is no voter cannot make itself leader: an append of a
// higher term carrying the expiry of a's session, a heartbeat of a higher
// term followed by a Removed notice, both refused; nothing moves. A voter of
// the configuration can (raft trusts its voters): its append of a higher
// term is applied, and a's session expires on the node it was sent to.
// (S1, L3; privilege.LeaderRule.)
func TestAttackInsiderForgedLeadership(t *testing.T) {
	for _, k := range insiderKinds {
		t.Run(k.name, func(t *testing.T) {
			s := newAttackSetup(t)
			tr, as := s.insider(t, k)
			target := s.tc.Member(s.a)
			term := raftTerm(t, target) + 1
			expire := lockfsm.Command{Kind: lockfsm.KindExpireSession, Session: s.sessA}
			tr.Send([]*raftpb.Message{forgedAppend(t, target, as, s.a, term, &raftpb.Entry{Data: expire.AppendEncode(nil)})})
			if k.name == "voter" {
				require.Eventually(t, func() bool {
					sess, _, _ := lockState(t, target, "stock")
					return sess != s.sessA
				}, 10*time.Second, 5*time.Millisecond, "a voter's append of a higher term is raft's to take")
				return
			}
			tr.Send([]*raftpb.Message{{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: new(as), To: new(s.a),
				Term: new(term + 1)}})
			if k.name == "non-member" {
				s.loggedOnce(t, s.a, "raft message", "refused raft message", as, 2)
			}
			ctx := ctxT(t, 5*time.Second)
			_, err := tr.Removed(ctx, s.a, &transportpb.RemovedRequest{Term: term + 1, Applied: 1 << 40,
				Voters: []uint64{s.lead, s.b, as}})
			require.ErrorIs(t, err, transport.ErrPermissionDenied)
			require.Less(t, raftTerm(t, target), term, "the forged term was not taken")
			s.untouched(t)
		})
	}
}

// confChangeEntry is a ConfChangeV2 entry removing ids.
func confChangeEntry(t *testing.T, ids ...uint64) *raftpb.Entry {
	cc := &raftpb.ConfChangeV2{}
	for _, id := range ids {
		cc.Changes = append(cc.Changes, &raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)})
	}
	b, err := proto.Marshal(cc)
	require.NoError(t, err)
	return &raftpb.Entry{Type: raftpb.EntryType_EntryConfChangeV2.Enum(), Data: b}
}

// Even a voter that makes itself leader cannot append a configuration change
// no leader proposes: one removing every voter (which raft cannot apply, so
// every replica that committed it stopped, and again on every restart), a v1
// change other than the bootstrap's, an update. The append is cut before it,
// the node keeps serving and its configuration is unchanged. (L1;
// privilege.ConfLedger.)
func TestAttackInsiderConfChangeAppendCut(t *testing.T) {
	s := newAttackSetup(t)
	k := insiderKinds[2] // a voter: the others cannot lead at all
	tr, as := s.insider(t, k)
	target := s.tc.Member(s.a)
	v1, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(s.lead)})
	require.NoError(t, err)
	update := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: new(s.lead)}}}
	upd, err := proto.Marshal(update)
	require.NoError(t, err)
	bad := []*raftpb.Entry{
		confChangeEntry(t, 1, 2, 3),
		{Type: raftpb.EntryType_EntryConfChange.Enum(), Data: v1},
		{Type: raftpb.EntryType_EntryConfChangeV2.Enum(), Data: upd},
	}
	for _, e := range bad {
		term := raftTerm(t, target) + 1
		tr.Send([]*raftpb.Message{forgedAppend(t, target, as, s.a, term, e)})
		require.Eventually(t, func() bool { return raftTerm(t, target) >= term }, 10*time.Second, 5*time.Millisecond)
	}
	s.loggedOnce(t, s.a, "raft message", "refused raft message", as, uint64(len(bad)))
	require.NoError(t, target.err(), "a stopped")
	v, _, err := target.ConfState(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, v)
	serving(t, s.tc, "after")
}

// In gossip mode the leader adds as a learner only a member whose
// certificate has the voter role: a newcomer with a light certificate stays
// a light member (it locks through the leader) however long it is alive,
// while one with a voter certificate is added. Before roles every
// certificate of the cluster's CA and the gossip key made a learner, and from
// there a raft participant. (fleet.mayParticipate; MemberSet admits a
// member gossip reports only with a voter certificate: TestMemberSet.)
func TestAttackInsiderGossipLightNeverLearner(t *testing.T) {
	pki := newTestPKI(t)
	ids := map[uint64]uint64{1: certRandomID(), 2: certRandomID(), 3: certRandomID(), 4: certRandomID(), 5: certRandomID()}
	f := newGossipCluster(t, "roles", 5, 3, func(c *Config) {
		slot := uint64(0)
		for s := uint64(1); s <= 5; s++ {
			if c.Gossip.Name == fmt.Sprintf("roles-%d", s) {
				slot = s
			}
		}
		role := "voter"
		if slot == 4 {
			role = "light"
		}
		c.TLS = pki.roleTLS(c.ClusterID, ids[slot], role)
		c.Gossip.Keys = [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	})
	n1 := startSlot(t, f, 1)
	for i := uint64(2); i <= 3; i++ {
		startSlot(t, f, i, n1.GossipAddr())
	}
	waitConf(t, f, 30*time.Second, "3 voters", func(v, l []uint64) bool { return len(v) == 3 })
	light := startSlot(t, f, 4, n1.GossipAddr())
	ctx := ctxT(t, 30*time.Second)
	h, err := light.Acquire(ctx, "light-locks", "l", true, 0)
	require.NoError(t, err, "a light member locks through the leader")
	require.NoError(t, h.Release(ctx))
	startSlot(t, f, 5, n1.GossipAddr())
	_, learners := waitConf(t, f, 30*time.Second, "the voter newcomer a learner", func(v, l []uint64) bool {
		return slices.Contains(l, ids[5])
	})
	require.NotContains(t, learners, ids[4])
	// Long past StabilizeFor, with room for learners: still not added.
	time.Sleep(time.Second)
	v, l := waitConf(t, f, 5*time.Second, "any", func(v, l []uint64) bool { return true })
	require.NotContains(t, append(v, l...), ids[4], "the light member was added to the configuration")
	require.True(t, light.light())
}

func certRandomID() uint64 { return certgen.RandomID() }

// Operator actions on the peer port need the operator role: the Inspect
// call's leadership transfer and member removal are refused to every member
// certificate without it (the leader stays, the members too), and the views
// (members, locks) are answered only to
// a member of the cluster. A member certificate with ",operator" may
// transfer. (privilege.InspectAllowed.)
func TestAttackInsiderInspectNeedsRoles(t *testing.T) {
	s := newAttackSetup(t)
	ctx := ctxT(t, 20*time.Second)
	for _, k := range insiderKinds {
		// Not let through as a raft sender: a certificate of no member.
		tr := attacker(t, "test", s.pki.roleTLS("test", k.id(s), k.role), k.id(s), map[uint64]string{s.lead: s.tc.Addr(s.lead)})
		for range 3 {
			_, err := tr.Inspect(ctx, s.lead, &transportpb.InspectRequest{Op: transportpb.InspectOp_INSPECT_OP_TRANSFER})
			require.ErrorIs(t, err, transport.ErrPermissionDenied, "%s: transfer", k.name)
			_, err = tr.Inspect(ctx, s.lead, &transportpb.InspectRequest{Op: transportpb.InspectOp_INSPECT_OP_REMOVE, Member: s.a})
			require.ErrorIs(t, err, transport.ErrPermissionDenied, "%s: remove", k.name)
		}
		for _, op := range []transportpb.InspectOp{transportpb.InspectOp_INSPECT_OP_MEMBERS, transportpb.InspectOp_INSPECT_OP_LOCKS} {
			_, err := tr.Inspect(ctx, s.lead, &transportpb.InspectRequest{Op: op, Stale: true})
			if k.name == "voter" {
				require.NoError(t, err, "%s: %v", k.name, op)
			} else {
				require.ErrorIs(t, err, transport.ErrPermissionDenied, "%s: %v", k.name, op)
			}
		}
		require.Equal(t, s.lead, leader(t, s.tc), "%s moved the leadership", k.name)
	}
	s.loggedOnce(t, s.lead, "call", "refused call", outsider, 10)
	s.untouched(t)
	// An operator member (b's certificate with the operator role) may.
	op := attacker(t, "test", s.pki.roleTLS("test", s.b, "voter,operator"), s.b, map[uint64]string{s.lead: s.tc.Addr(s.lead)})
	_, err := op.Inspect(ctx, s.lead, &transportpb.InspectRequest{Op: transportpb.InspectOp_INSPECT_OP_TRANSFER, To: s.a})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return leader(t, s.tc) == s.a }, 10*time.Second, 10*time.Millisecond)
}

// Formation with TLS: a founder adopts a formation id only from the
// candidate itself — the gossip member the request names as candidate has
// the raft id of the caller's certificate. A certificate of the CA that is
// not the first founder's, asking founders 2 and 3 (founder 1 not up yet) to
// adopt its id in founder 1's name, is refused; before, they adopted it
// durably and the cluster could not form until their data was wiped.
// (fleet.Answer.)
func TestAttackInsiderFormationNeedsCandidate(t *testing.T) {
	pki := newTestPKI(t)
	ids := map[string]uint64{"hj-1": certRandomID(), "hj-2": certRandomID(), "hj-3": certRandomID()}
	f := newGossipCluster(t, "hj", 3, 3, func(c *Config) {
		c.TLS = pki.roleTLS(c.ClusterID, ids[c.Gossip.Name], "voter")
		c.Gossip.Keys = [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	})
	n2 := startSlot(t, f, 2)
	n3 := startSlot(t, f, 3, n2.GossipAddr())
	require.Eventually(t, func() bool { return len(n2.Members()) == 2 && len(n3.Members()) == 2 }, 10*time.Second, 10*time.Millisecond)
	for _, k := range insiderKinds {
		as := uint64(outsider)
		if k.name == "voter" {
			as = ids["hj-3"] // a founder, but not the candidate it names
		}
		tr := attacker(t, "hj", pki.roleTLS("hj", as, k.role), as, map[uint64]string{n2.ID(): n2.Addr()})
		out, err := tr.Form(ctxT(t, 5*time.Second), n2.ID(), &transportpb.FormRequest{Formation: fmt.Sprintf("%032x", len(k.name)),
			Candidate: "hj-1", Founders: []string{"hj-1", "hj-2", "hj-3"}, Target: "hj-2", TargetId: n2.ID()})
		require.NoError(t, err, k.name)
		require.False(t, out.GetAdopted(), "%s: adopted", k.name)
		require.Empty(t, n2.fleet.Formation(), "%s: founder 2 adopted a formation id", k.name)
	}
	// Founder 1 comes up and forms the cluster with them.
	startSlot(t, f, 1, n2.GossipAddr())
	waitConf(t, f, 30*time.Second, "3 voters", func(v, l []uint64) bool { return len(v) == 3 })
}

// A member removed from the cluster is refused from then on, whatever its
// certificate: after a leaves, a's own certificate is refused at admission
// on every node that applied the removal, even for a call any member may
// make. (fleet.OnConfChange revokes it; transport.Revoke.)
func TestAttackInsiderRemovedMemberRefused(t *testing.T) {
	s := newAttackSetup(t)
	ctx := ctxT(t, 20*time.Second)
	old := attacker(t, "test", s.pki.member("test", s.b), s.b, map[uint64]string{s.lead: s.tc.Addr(s.lead), s.a: s.tc.Addr(s.a)})
	_, err := old.VersionGate(ctx, s.lead, &transportpb.VersionGateRequest{})
	require.NoError(t, err, "a member may ask")
	require.NoError(t, s.tc.Member(s.b).Leave(ctx))
	s.tc.Stopped(s.b)
	for _, id := range []uint64{s.lead, s.a} {
		require.Eventually(t, func() bool {
			v, _, err := s.tc.Member(id).ConfState(ctx)
			return err == nil && !slices.Contains(v, s.b)
		}, 10*time.Second, 10*time.Millisecond)
		// (The leader answers the Leave first: a second's grace.)
		require.Eventually(t, func() bool {
			_, err = old.VersionGate(ctx, id, &transportpb.VersionGateRequest{})
			return err != nil // refused at the handshake (or, mid-connection, at admission)
		}, 5*time.Second, 50*time.Millisecond, "node %d still admits the removed member", id)
		for range 3 {
			_, err = old.VersionGate(ctx, id, &transportpb.VersionGateRequest{})
			require.Error(t, err, "node %d admitted the removed member again", id)
		}
	}
}

// A loopback bind advertised at another host's address is reachable from
// there (through a proxy or a port forward), so it counts as exposed: no
// plaintext without Insecure, and an explicit cluster id. Only a node that
// is both bound and advertised on loopback runs without TLS. (checkSecurity.)
func TestAttackLoopbackBindAdvertisedElsewhereIsExposed(t *testing.T) {
	for _, adv := range []string{"192.0.2.1:7400", "orders-0.orders:7400"} {
		cfg := Config{ID: 1, DataDir: t.TempDir(), ClusterID: "test", ListenAddr: "127.0.0.1:0", AdvertiseAddr: adv,
			Members: []Member{{ID: 1, Addr: adv}}}
		_, err := Start(cfg)
		require.ErrorIs(t, err, lockerr.ErrInvalidConfig, adv)
		require.ErrorContains(t, err, "without TLS", adv)
		cfg.ClusterID = ""
		_, err = Start(cfg)
		require.ErrorContains(t, err, "explicit ClusterID", adv)
	}
	cfg := Config{ID: 1, DataDir: t.TempDir(), ClusterID: "test", ListenAddr: "127.0.0.1:0", AdvertiseAddr: "127.0.0.1:7400",
		Members: []Member{{ID: 1, Addr: "127.0.0.1:7400"}}}
	n, err := Start(cfg)
	require.NoError(t, err, "loopback bound and advertised")
	n.Crash()
}

// Quotas: in a static cluster only a listed member opens a session (a light
// or voter certificate naming another id is refused, where before a
// stranger opened 500 one-hour sessions in seconds); a member opens at most
// MaxSessionsPerMember sessions, and one session holds or waits for at most
// MaxLocksPerSession names. Nothing beyond is applied. The voter row speaks
// as member 3 (crashed, so its node does not end sessions it did not open).
// (privilege.Quotas.)
func TestAttackInsiderQuotas(t *testing.T) {
	const sessions, locks = 3, 4
	pki := newTestPKI(t)
	tc := newCluster(t, 3, pki.tune, func(c *Config) { c.MaxSessionsPerMember, c.MaxLocksPerSession = sessions, locks })
	lid := leader(t, tc)
	victim := otherThan(tc, lid)
	tc.Crash(victim)
	ctx := ctxT(t, 30*time.Second)
	lead := tc.Member(lid)
	inLoop := func(f func() int) int {
		ch := make(chan int, 1)
		require.NoError(t, lead.do(ctx, func() { ch <- f() }))
		return <-ch
	}
	for _, k := range insiderKinds {
		id := uint64(outsider)
		if k.name == "voter" {
			id = victim
		}
		tr := attacker(t, "test", pki.roleTLS("test", id, k.role), id, map[uint64]string{lid: tc.Addr(lid)})
		var opened []uint64
		for i := range 2 * sessions {
			out, err := tr.FwdOpen(ctx, lid, &transportpb.FwdOpenRequest{Nonce: uint64(100 + i), TtlMillis: 3_600_000})
			if err == nil {
				opened = append(opened, out.GetSession())
			} else {
				require.ErrorIs(t, err, transport.ErrPermissionDenied)
			}
		}
		count := func() int { return inLoop(func() int { return lead.fsm.SessionsOf(id) }) }
		if k.name != "voter" {
			require.Empty(t, opened, "%s opened sessions in a static cluster", k.name)
			require.Zero(t, count())
			continue
		}
		// Its crashed node's session, if it opened one before the crash,
		// and those opened: up to the quota, never beyond.
		require.Equal(t, sessions, count())
		require.GreaterOrEqual(t, len(opened), sessions-1)
		// Locks of one session, up to the quota.
		sess := opened[0]
		holds := func() int { return inLoop(func() int { info, _ := lead.fsm.Session(sess); return info.Holds }) }
		var granted int
		for i := range 2 * locks {
			c := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: sess, Seq: uint64(1 + i), Name: fmt.Sprintf("q%d", i), Owner: "o"}
			_, err := tr.FwdPropose(ctx, lid, &transportpb.FwdProposeRequest{Commands: [][]byte{c.AppendEncode(nil)}})
			if err != nil {
				require.ErrorIs(t, err, lockerr.ErrQuotaExceeded)
				continue
			}
			granted++
			// Applied before the next: the quota counts what is applied.
			require.Eventually(t, func() bool { return holds() == granted }, 5*time.Second, 5*time.Millisecond)
		}
		require.Equal(t, locks, granted)
		require.Equal(t, locks, holds())
	}
	serving(t, tc, "after")
}

// Quotas out of range are a configuration error.
func TestQuotaConfigValidated(t *testing.T) {
	for _, q := range [][2]int{{-1, 0}, {0, -1}, {1<<16 + 1, 0}, {0, 1<<24 + 1}} {
		cfg := Config{ID: 1, DataDir: t.TempDir(), Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}},
			MaxSessionsPerMember: q[0], MaxLocksPerSession: q[1]}
		require.ErrorIs(t, cfg.Validate(), lockerr.ErrInvalidConfig, "%v", q)
	}
	cfg := Config{ID: 1, DataDir: t.TempDir(), Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}}}
	require.NoError(t, cfg.Validate())
}
