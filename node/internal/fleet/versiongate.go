package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// The version gate of the lock catalogue (rolling upgrades).
//
// A version of lockfsm older than the catalogue's applies a version-2
// command (a read-write, semaphore, election or multi-name request, a
// Proclaim, a lease expiry naming its holder) as a malformed no-op, while
// this version applies it: replicas of a mixed cluster would diverge (S7).
// So no node proposes one until every member of the raft configuration is
// known to run a version with the catalogue:
//
//   - Members carry their Version (node's version): in gossip metadata
//     (gossip mode), and in a header of every transport RPC (static mode; a
//     node older than the header sends none, which reads as older).
//   - The leader decides, from the configuration and what it knows of each
//     member: open (every member runs the catalogue), older (some member
//     is known to run an older version: ErrOlderMembers), or unknown (some
//     member has not been heard from yet: asked again, for at most two
//     election timeouts, then ErrOlderMembers naming it).
//   - A follower asks the leader (the VersionGate call) before its first
//     catalogue request; a light member's forwarded catalogue commands are
//     checked by the leader, which answers a refused one with the
//     ErrOlderMembers result instead of proposing it.
//   - Once open, the gate stays open for the life of the process, as etcd's
//     cluster version only goes up: downgrading below the catalogue is not
//     supported. A member of an older version added afterwards meets the
//     first catalogue entry, stops there with ErrNewerVersion (lockfsm
//     refuses entries of a newer format and never skips one) and waits to be
//     upgraded; no replica diverges.
//   - The leader also never proposes an entry it could not apply itself
//     (of a newer format than it knows), nor, forwarded by a follower, a
//     catalogue entry while a member is known to be older.
//
// The plain mutex stays version 1, byte for byte, and needs no gate.

// Gate states.
const (
	gateUnknown byte = iota
	gateOpen
	gateOlder
)

// knowsCatalogue reports whether a member of version v has the lock
// catalogue: "lockraft/X.Y" with X.Y at least 0.2.
func knowsCatalogue(v string) bool { return atLeast(v, 2) }

// atLeast reports whether v is "lockraft/X.Y" with X.Y at least 0.minor.
func atLeast(v string, minor int) bool {
	rest, ok := strings.CutPrefix(v, "lockraft/")
	if !ok {
		return false
	}
	maj, min, ok := strings.Cut(rest, ".")
	if !ok {
		return false
	}
	if i := strings.IndexFunc(min, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		min = min[:i]
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	return err1 == nil && err2 == nil && (a > 0 || b >= minor)
}

// memberVersion is what this node knows of member id's version: its gossip
// metadata, else the header of its last transport RPC.
func (f *Fleet) memberVersion(id uint64) (string, bool) {
	if f.list != nil {
		for _, m := range f.list() {
			if m.Meta.RaftID == id {
				return m.Meta.Version, true
			}
		}
	}
	return f.host.Net().PeerVersion(id)
}

// localGate decides the gate from this node's knowledge (loop): open, older
// (and which member) or unknown (and which member).
func (f *Fleet) localGate() (byte, uint64, string) {
	if f.gateOpen.Load() {
		return gateOpen, 0, ""
	}
	state, who, ver := f.membersGate(knowsCatalogue)
	if state == gateOpen {
		f.openGate()
	}
	return state, who, ver
}

// membersGate decides a gate from what this node knows of every other
// member's version (loop): open when knows holds for each, older (and which
// member) when it is known not to for one, else unknown (and which member).
func (f *Fleet) membersGate(knows func(string) bool) (byte, uint64, string) {
	cs := f.host.ConfState()
	state, who, ver := gateOpen, uint64(0), ""
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range ids {
			if id == f.cfg.ID {
				continue
			}
			v, seen := f.memberVersion(id)
			switch {
			case seen && !knows(v):
				return gateOlder, id, v
			case !seen && state == gateOpen:
				state, who = gateUnknown, id
			}
		}
	}
	return state, who, ver
}

// leaderGate is the gate as the leader decides it (loop); gateUnknown on a
// non-leader.
func (f *Fleet) leaderGate() (byte, uint64, string) {
	if !f.host.Leadership().Leading {
		return gateUnknown, 0, ""
	}
	return f.localGate()
}

// AnswerGate answers a follower's question (the VersionGate call).
func (f *Fleet) AnswerGate(ctx context.Context) (*transportpb.VersionGateResponse, error) {
	reply := make(chan byte, 1)
	if err := f.host.Do(ctx, func() {
		st, _, _ := f.leaderGate()
		reply <- st
	}); err != nil {
		return nil, err
	}
	select {
	case st := <-reply:
		return &transportpb.VersionGateResponse{State: gateStates[st]}, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// gateStates are the wire values of the gate states.
var gateStates = [...]transportpb.GateState{
	gateUnknown: transportpb.GateState_GATE_STATE_UNKNOWN,
	gateOpen:    transportpb.GateState_GATE_STATE_OPEN,
	gateOlder:   transportpb.GateState_GATE_STATE_OLDER,
}

// AwaitGate returns nil once every member of the configuration is known to
// run the catalogue; ErrOlderMembers if one is known to run an older
// version, or has not been heard from within two election timeouts. Light
// members (gossip, no raft data) leave the check to the leader, which
// checks what they forward (AdmitForwarded).
func (f *Fleet) AwaitGate(ctx context.Context) error {
	if f.gateOpen.Load() || f.ml != nil && !f.host.HasData() {
		return nil
	}
	errOlder := f.cfg.ErrOlderMembers
	start := f.cfg.Now()
	for {
		type answer struct {
			st      byte
			who     uint64
			ver     string
			leader  uint64
			leading bool
		}
		got := make(chan answer, 1)
		if err := f.host.Do(ctx, func() {
			st, who, ver := f.localGate()
			l := f.host.Leadership()
			got <- answer{st, who, ver, l.Leader, l.Leading}
		}); err != nil {
			return err
		}
		var a answer
		select {
		case a = <-got:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if a.st == gateOpen {
			return nil
		}
		if a.st == gateOlder && a.leading {
			return fmt.Errorf("%w: member %016x runs %q", errOlder, a.who, a.ver)
		}
		if !a.leading && a.leader != 0 {
			// The leader hears from every member all the time; a follower
			// may not have heard from another follower since it restarted.
			// Ask the leader.
			cctx, cancel := context.WithTimeout(ctx, f.cfg.RetryInterval)
			resp, err := f.host.Net().VersionGate(cctx, a.leader, &transportpb.VersionGateRequest{})
			cancel()
			if err == nil {
				switch resp.GetState() {
				case transportpb.GateState_GATE_STATE_OPEN:
					f.openGate()
					return nil
				case transportpb.GateState_GATE_STATE_OLDER:
					return fmt.Errorf("%w: the leader (%016x) knows of a member without the catalogue", errOlder, a.leader)
				}
			}
		}
		if f.cfg.Now().Sub(start) > 2*f.cfg.ElectionTimeout {
			if a.who != 0 {
				return fmt.Errorf("%w: the version of member %016x is not known (not heard from)", errOlder, a.who)
			}
			return fmt.Errorf("%w: the cluster's versions could not be learned (no leader answered)", errOlder)
		}
		t := time.NewTimer(f.cfg.TickInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
}

// AdmitForwarded decides whether the leader proposes one entry a follower
// or light member forwarded (loop): never one of a newer format than this
// node knows (it would stop this node's own apply), and a catalogue entry
// only while no member is known to run an older version (fwd: only while
// the gate is open). The error is what a light member's caller gets.
func (f *Fleet) AdmitForwarded(data []byte, fwd bool) error {
	if len(data) == 0 || data[0] == 1 {
		return nil // version 1: the mutex, as every version knows it
	}
	// Read here only: its strings point into data, and its name list is
	// the last call's, reused (a multi-name entry allocates none).
	c := &f.forwarded
	err := lockfsm.DecodeCommandView(data, c)
	defer c.Reset()
	switch {
	case err != nil:
		return err
	case c.Version < 2:
		return nil
	case c.Version >= 3 && !f.RunsOpen():
		return f.cfg.ErrOlderMembers
	}
	st, _, _ := f.localGate()
	if st == gateOlder || (fwd && st != gateOpen) {
		return f.cfg.ErrOlderMembers
	}
	return nil
}

// AdmitProposals drops from a follower's forwarded proposals the entries
// AdmitForwarded refuses (the follower retries them, and its caller's
// context bounds that). Allocates only when one is dropped. (loop)
func (f *Fleet) AdmitProposals(ents []*raftpb.Entry) []*raftpb.Entry {
	for i, e := range ents {
		if e.GetType() != raftpb.EntryNormal || f.AdmitForwarded(e.GetData(), false) == nil {
			continue
		}
		kept := slices.Clone(ents[:i])
		for _, e := range ents[i+1:] {
			if e.GetType() != raftpb.EntryNormal || f.AdmitForwarded(e.GetData(), false) == nil {
				kept = append(kept, e)
			}
		}
		f.log.Info("forwarded entries refused by the version gate", "refused", len(ents)-len(kept))
		return kept
	}
	return ents
}

// GateFile in the data directory records that the gate opened: once every
// member ran a version with the catalogue (and session checkpoints), the
// cluster does not go back (downgrades below it are not supported), so a
// restarted node need not wait to hear from every member again before it
// proposes checkpoints (a leader restarted during a run of failovers would
// otherwise restart every deadline from its own ready: L3).
const GateFile = "version-gate"

// loadGate opens the gate if the data directory says it was open (New).
func (f *Fleet) loadGate() {
	if f.cfg.DataDir == "" {
		return
	}
	if b, err := os.ReadFile(filepath.Join(f.cfg.DataDir, GateFile)); err == nil && strings.TrimSpace(string(b)) == "open" {
		f.gateOpen.Store(true)
	}
}

// GateOpen reports whether the gate is open.
func (f *Fleet) GateOpen() bool { return f.gateOpen.Load() }

// openGate opens the gate and records it durably (once per process; a
// failed write only costs the wait after a restart).
func (f *Fleet) openGate() {
	if !f.gateOpen.CompareAndSwap(false, true) || f.cfg.DataDir == "" {
		return
	}
	if err := f.host.WriteFile(GateFile, []byte("open\n")); err != nil {
		f.log.Debug("version gate: not recorded", "err", err)
	}
}

// OlderMemberKnown reports whether a member of the configuration is known to
// run a build before the catalogue and session checkpoints (loop). Unlike
// the catalogue's gate it does not wait to hear from every member: a leader
// restarted while another member is down would otherwise checkpoint nothing
// and restart every deadline from its ready under a run of failovers (L3).
// An older build that was down through a whole upgrade and comes back stops
// at the first checkpoint with ErrNewerVersion (README: rolling upgrades).
func (f *Fleet) OlderMemberKnown() bool {
	st, _, _ := f.localGate()
	return st == gateOlder
}
