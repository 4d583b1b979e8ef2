package node

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/lease"
)

// handleReady processes one Ready. The node runs raft with
// AsyncStorageWrites: the raft log write is a MsgStorageAppend handed to the
// appender goroutine (appender.go), which delivers the message's responses
// (acknowledgements, votes, the leader's own vote for its entries) only once
// the write is durable. Everything else in Messages goes out at once — a
// leader's appends before its own fsync (thesis §10.2.1), a follower's
// forwarded proposals — and the committed entries (a MsgStorageApply, which
// raft fills only with entries already durable on this node) are applied
// here, in the loop, before their responses are stepped back in.
func (n *Node) handleReady() error {
	rd := n.rn.Ready()
	n.loop.guard.appStepped = false // raft's last index is exact again (noteAppend below)
	if rd.SoftState != nil {
		n.onSoftState(rd.SoftState)
	}
	out := n.loop.out[:0]
	var applies []*raftpb.Message
	var hbExt []byte // the leader's heartbeat extension this turn (lease.go)
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			n.loop.guard.noteAppend(m)
			noteGrantedPreVotes(&n.loop.yield, n.rn, n.id, m, n.clock.Now(), n.log)
			if m.Term != nil {
				n.termSeen.Store(m.GetTerm())
			}
			snap := hasSnap(m) && len(m.Snapshot.GetData()) > 0
			if snap {
				// raft accepted a received snapshot: its file becomes the
				// snapshot of that index now (snapshotin.go), before the
				// end of the turn drops the files raft did not take.
				if err := n.loop.snapIn.adopt(m.Snapshot.GetMetadata().GetIndex()); err != nil {
					return err
				}
			}
			if n.loop.jobs.restore != nil || snap {
				// A snapshot from the leader: the lock table is restored from
				// it on the committer (snapshot.go), and this write and every
				// later one wait for that, in order.
				n.loop.jobs.hold(m)
				continue
			}
			n.appendToLog(m)
		case raft.LocalApplyThread:
			applies = append(applies, m)
		default:
			if isCommitHint(m) {
				continue // the answer to a heartbeat this node built from a hint
			}
			switch m.GetType() {
			case raftpb.MessageType_MsgSnap:
				if !snapshotIncludes(m) {
					n.snapshotForNewMember(m.GetTo(), m.GetSnapshot().GetMetadata().GetIndex())
					continue
				}
			case raftpb.MessageType_MsgHeartbeat:
				if hbExt == nil && n.loop.isLeader {
					hbExt = n.loop.confirm.heartbeatExt()
				}
				lease.ExtendHeartbeat(m, hbExt)
			case raftpb.MessageType_MsgHeartbeatResp:
				n.loop.lease.AnswerHeartbeat(m, n.clock.Now())
			}
			out = append(out, m)
		}
	}
	out = n.loop.hints.rideAlong(out)
	for _, m := range out {
		if k := len(m.GetEntries()); k > 0 && m.GetType() == raftpb.MessageType_MsgApp {
			n.loop.appendsSent++
			n.loop.entriesSent += uint64(k)
			n.k.StampEntries(n.id, knobs.StageSent, m)
		}
	}
	n.tr.Send(out)
	clear(out) // the messages are the transport's now
	n.loop.out = out[:0]
	for _, m := range applies {
		if err := n.apply(m.GetEntries()); err != nil {
			return err
		}
		n.step(m.GetResponses())
	}
	n.fwd.FlushReplies()
	if len(rd.ReadStates) > 0 {
		n.loop.confirm.answer(rd.ReadStates, n.loop.isLeader)
		n.proposeAll(n.loop.lease.FlushRevives(n.clock.Now()))
		n.loop.confirm.issue(n.loop.term, n.clock.Now(), false)
		n.fleet.ReadStates(rd.ReadStates)
	}
	n.loop.reads.answer(rd.ReadStates, n.loop.lastApplied) // inspection reads (readindex.go)
	n.loop.reads.issue(n.clock.Now())
	return n.loop.jobs.maybeSnapshot(n.loop.confState)
}

// appendToLog hands a raft log write to the appender.
func (n *Node) appendToLog(m *raftpb.Message) {
	n.k.StampEntries(n.id, knobs.StageAppended, m)
	n.loop.hints.noteAppended(m)
	n.app.enqueue(m)
}

func (n *Node) onSoftState(ss *raft.SoftState) {
	wasLeader := n.loop.isLeader
	prev := n.loop.leader
	n.loop.leader = ss.Lead
	n.loop.isLeader = ss.RaftState == raft.StateLeader
	n.lead.set(ss.Lead)
	if prev != ss.Lead {
		if ss.Lead != 0 {
			n.loop.stats.leaderChanges++
		}
		n.log.Info("leader changed", "leader", views.MemberID(ss.Lead), "state", ss.RaftState.String())
		// Proposals forwarded to the old leader may be lost without notice:
		// propose them again now rather than after RetryInterval.
		n.reproposeAll()
	}
	if wasLeader && !n.loop.isLeader {
		n.loop.hints.pending = nil
		n.loop.lease.StepDown()
		for _, c := range n.loop.demote {
			close(c)
		}
		n.loop.demote = nil
		n.fwd.StepDown()
		n.loop.confirm.failAll()
	}
	if !wasLeader && n.loop.isLeader {
		n.loop.term = n.rn.BasicStatus().GetTerm()
		n.loop.lease.BecomeLeader(n.loop.term, n.loop.confState)
		n.fwd.BecomeLeader()
	}
}

// apply hands committed entries to lockfsm and routes results and events.
func (n *Node) apply(ents []*raftpb.Entry) error {
	if len(ents) > 0 {
		// A loop that was slow (a long fsync, a pause) may reach these
		// entries after the holder-side deadline passed without a tick
		// noticing. Check first, so no grant in this batch is handed to a
		// caller after the moment the cluster may have expired the session
		// and granted the lock elsewhere (S5).
		n.checkOwnSession(n.clock.Now())
		n.loop.times.note(ents[0].GetIndex(), n.clock.Now())
	}
	for _, e := range ents {
		idx := e.GetIndex()
		switch e.GetType() {
		case raftpb.EntryNormal:
			if len(e.GetData()) == 0 {
				// The empty entry a new leader appends in its term.
				if n.loop.isLeader && e.GetTerm() == n.loop.term {
					n.leaseReady()
				}
				if idx > n.loop.lastApplied {
					n.loop.lastApplied = idx
				}
				continue
			}
			if s := n.k.Stages; s != nil {
				s.Stamp(n.id, idx, knobs.StageApplied, time.Now())
			}
			if idx <= n.fsm.AppliedIndex() {
				continue // replayed after a restart; already in the table
			}
			// The command's strings point into the entry's bytes, which
			// nothing changes once the entry exists (raft keeps them in its
			// log as they are); the lock table copies what it keeps. Its
			// name and checkpoint lists reuse the last entry's (nothing
			// keeps them past the entry), so a multi-name entry allocates
			// none.
			cmd := &n.loop.applied
			err := lockfsm.DecodeCommandView(e.GetData(), cmd)
			n.loop.events = n.loop.events[:0]
			var res lockfsm.Result
			if errors.Is(err, lockfsm.ErrNewerFormat) {
				// Skipping it would make this table differ from the replicas
				// that understood it (S7): stop here until upgraded.
				return fmt.Errorf("%w: entry %d: %v", lockerr.ErrNewerVersion, idx, err)
			}
			if err != nil {
				res, n.loop.events = n.fsm.Apply(idx, e.GetData(), n.loop.events)
				n.log.Warn("undecodable entry applied as no-op", "index", idx, "err", err)
			} else {
				res, n.loop.events = n.fsm.ApplyCommand(idx, cmd, n.loop.events)
				if n.cfg.Observer != nil {
					// Before any caller hears of the entry (its own, a
					// forwarded one's, a granted waiter's): a call that
					// returned was observed. The observer may keep it: a
					// copy of its own, whose strings do not hold the
					// entry's bytes.
					c, _ := lockfsm.DecodeCommand(e.GetData())
					n.cfg.Observer(ApplyRecord{Index: idx, Command: &c, Result: res, Events: n.loop.events})
				}
				n.onResult(idx, cmd, res)
				n.fwd.OnResult(cmd, res)
			}
			for i := range n.loop.events {
				n.onEvent(idx, &n.loop.events[i])
			}
			if err == nil {
				// Counters and latencies for metrics (metricsnode.go).
				if cmd.Kind == lockfsm.KindExpireSession || cmd.Kind == lockfsm.KindExpireLease {
					n.loop.stats.noteExpiry(cmd, res)
				}
				if m := n.cfg.Metrics; m != nil && m.QueueHead != nil && !n.light() {
					n.loop.heads.onApply(cmd, res, n.loop.events, n.loop.own.id, n.fsm, n.clock, m.QueueHead)
				}
			}
			cmd.Reset() // nothing of the entry's bytes is kept past it
			if cap(n.loop.events) > maxKeptEvents {
				// A session's end can make millions of events (144 bytes
				// each, and they hold the names they released): not kept.
				n.loop.events = nil
			}
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return fmt.Errorf("conf change at %d: %v", idx, err)
			}
			if err := n.applyConfChange(idx, &cc); err != nil {
				return err
			}
		case raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeV2
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return fmt.Errorf("conf change at %d: %v", idx, err)
			}
			if err := n.applyConfChange(idx, &cc); err != nil {
				return err
			}
		}
		if idx > n.loop.lastApplied {
			n.loop.jobs.sinceSnap += idx - n.loop.lastApplied
			n.loop.lastApplied = idx
		}
	}
	return n.loop.jobs.maybeCommit()
}

// applyConfChange applies the configuration change at idx and persists the
// resulting configuration with its index. An error stops the node: a
// storage failure (a configuration it could not persist may be missing
// after a restart), or lockerr.ErrInternal for a committed change raft cannot apply.
//
// A change at or below loop.confIndex is already in the configuration raft
// restarted with (raftlog's ConfIndex): raft re-delivers committed entries
// after a restart, and applying one of them again on top of the newer
// configuration would move it back to an older one (review finding 9,
// TestS1RestartKeepsLatestConfiguration).
func (n *Node) applyConfChange(idx uint64, cc raftpb.ConfChangeI) error {
	if idx <= n.loop.confIndex {
		n.fleet.OnConfChange(cc)
		return nil
	}
	// raft panics on a change it cannot apply (removing every voter, a
	// second joint change). Only the leader's own reconcile proposes changes
	// (guard.go), so a committed bad one means a broken invariant: stop the
	// node cleanly rather than panic (guard.go, checkConfChange).
	if err := checkConfChange(n.loop.confState, cc, n.loop.guard.lastIndex); err != nil {
		return fmt.Errorf("%w: committed configuration change raft cannot apply: %v", lockerr.ErrInternal, err)
	}
	n.loop.confState = n.rn.ApplyConfChange(cc)
	n.members.SetConf(n.loop.confState)
	if err := n.storage.SetConfState(n.loop.confState, idx); err != nil {
		return fmt.Errorf("persist the configuration applied at %d: %w", idx, err)
	}
	n.fleet.OnConfChange(cc)
	return nil
}

// onTick runs once per raft tick inside the loop. An error is a storage
// failure: the loop must stop.
func (n *Node) onTick() error {
	now := n.clock.Now()
	n.retryProposals(now)
	n.loop.confirm.expire(now, n.cfg.SessionTTL)
	n.loop.confirm.issue(n.loop.term, n.clock.Now(), true)
	n.loop.reads.retry(now)
	n.loop.reads.issue(n.clock.Now())
	n.checkOwnSession(now)
	if n.loop.isLeader {
		n.leaderSeen.Advance(now) // a leader counts as seen while this node leads
	}
	n.loop.noLead.check(now, n.leaderless(), n.loop.leader, n.closing.Load())
	campaignAfterYield(&n.loop.yield, n.rn, n.loop.leader, n.promotable(), now, n.log)
	return n.loop.jobs.maybeCommit()
}

// maxKeptEvents is the most events' room the loop keeps from one entry to
// the next.
const maxKeptEvents = 1024
