package node

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport"
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
	if rd.SoftState != nil {
		n.onSoftState(rd.SoftState)
	}
	out := rd.Messages[:0:0]
	var applies []*raftpb.Message
	var hbExt []byte // the leader's heartbeat extension this turn (silence.go)
	for _, m := range rd.Messages {
		switch m.GetTo() {
		case raft.LocalAppendThread:
			if hasSnap(m) && len(m.Snapshot.GetData()) > 0 {
				// The transport stored the snapshot file before stepping
				// MsgSnap in. Entries before the snapshot were applied by
				// earlier Readys (apply runs in this loop, in order).
				if err := n.waitFSMCommit(); err != nil {
					return err
				}
				md := m.Snapshot.GetMetadata()
				if err := n.restoreFSM(md.GetIndex()); err != nil {
					return err
				}
				n.loop.confState = md.GetConfState()
				n.loop.lastApplied = md.GetIndex()
				n.snapshotsRestored.Add(1)
				n.noteLoadedMarks()
				n.onRestored()
			}
			n.cfg.TestHooks.Stages.entries(n.id, stageAppended, m)
			n.loop.hints.noteAppended(m)
			n.app.enqueue(m)
		case raft.LocalApplyThread:
			applies = append(applies, m)
		default:
			if isCommitHint(m) {
				continue // the answer to a heartbeat this node built from a hint
			}
			switch m.GetType() {
			case raftpb.MessageType_MsgHeartbeat:
				if hbExt == nil && n.loop.isLeader {
					hbExt = n.heartbeatExt()
				}
				extendHeartbeat(m, hbExt)
			case raftpb.MessageType_MsgHeartbeatResp:
				n.answerHeartbeat(m)
			}
			out = append(out, m)
		}
	}
	out = n.loop.hints.rideAlong(out)
	for _, m := range out {
		if k := len(m.GetEntries()); k > 0 && m.GetType() == raftpb.MessageType_MsgApp {
			n.loop.appendsSent++
			n.loop.entriesSent += uint64(k)
		}
	}
	n.tr.Send(n.cfg.Faults.filterOut(out, n.tr.Send))
	for _, m := range applies {
		if err := n.apply(m.GetEntries()); err != nil {
			return err
		}
		n.step(m.GetResponses())
	}
	n.fwdFlushComplete()
	if len(rd.ReadStates) > 0 {
		n.onReadStates(rd.ReadStates)
	}
	return n.maybeSnapshot()
}

func (n *Node) onSoftState(ss *raft.SoftState) {
	wasLeader := n.loop.isLeader
	prev := n.loop.leader
	n.loop.leader = ss.Lead
	n.loop.isLeader = ss.RaftState == raft.StateLeader
	n.setLeader(ss.Lead)
	if prev != ss.Lead {
		n.log.Info("leader changed", "leader", ss.Lead, "state", ss.RaftState.String())
		// Proposals forwarded to the old leader may be lost without notice:
		// propose them again now rather than after RetryInterval.
		n.reproposeAll()
	}
	if wasLeader && !n.loop.isLeader {
		n.loop.hints.pending = nil
		n.loop.lead.stepDown()
		n.fwdStepDown()
		n.failConfirmRounds()
	}
	if !wasLeader && n.loop.isLeader {
		n.loop.electedIn = n.loop.confState
		n.loop.term = n.rn.BasicStatus().GetTerm()
		n.loop.lead.becomeLeader(n.loop.term)
		n.fwdBecomeLeader()
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
	}
	for _, e := range ents {
		idx := e.GetIndex()
		switch e.GetType() {
		case raftpb.EntryNormal:
			if len(e.GetData()) == 0 {
				// The empty entry a new leader appends in its term.
				if n.loop.isLeader && e.GetTerm() == n.loop.term {
					n.loop.lead.ready(n)
				}
				if idx > n.loop.lastApplied {
					n.loop.lastApplied = idx
				}
				continue
			}
			if n.cfg.TestHooks.Stages != nil {
				n.cfg.TestHooks.Stages.stamp(n.id, idx, stageApplied, time.Now())
			}
			if idx <= n.fsm.AppliedIndex() {
				continue // replayed after a restart; already in the table
			}
			cmd, err := lockfsm.DecodeCommand(e.GetData())
			n.loop.events = n.loop.events[:0]
			var res lockfsm.Result
			if err != nil {
				res, n.loop.events = n.fsm.Apply(idx, e.GetData(), n.loop.events)
				n.log.Warn("undecodable entry applied as no-op", "index", idx, "err", err)
			} else {
				res, n.loop.events = n.fsm.ApplyCommand(idx, &cmd, n.loop.events)
				n.onResult(idx, &cmd, res)
				n.fwdOnResult(&cmd, res)
			}
			for i := range n.loop.events {
				n.onEvent(idx, &n.loop.events[i])
			}
			if n.cfg.Observer != nil && err == nil {
				c := cmd // the observer may keep it; cmd itself stays on the stack
				n.cfg.Observer(ApplyRecord{Index: idx, Command: &c, Result: res, Events: n.loop.events})
			}
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return fmt.Errorf("conf change at %d: %v", idx, err)
			}
			n.applyConfChange(&cc)
		case raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeV2
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return fmt.Errorf("conf change at %d: %v", idx, err)
			}
			n.applyConfChange(&cc)
		}
		if idx > n.loop.lastApplied {
			n.loop.sinceSnap += idx - n.loop.lastApplied
			n.loop.lastApplied = idx
		}
	}
	return n.maybeCommitFSM(false)
}

func (n *Node) applyConfChange(cc raftpb.ConfChangeI) {
	n.loop.confState = n.rn.ApplyConfChange(cc)
	if err := n.storage.SetConfState(n.loop.confState); err != nil {
		n.log.Error("persist conf state", "err", err)
	}
	n.onConfChangeApplied(cc)
}

// maybeCommitFSM writes the lock table's dirty records to its bbolt file
// every CommitInterval (or when forced). The raft log is the durability
// source, so this only bounds how much a restart replays. The records are
// encoded here and written (one bbolt transaction, two fdatasyncs) by the
// committer goroutine, so the loop does not stop for the disk; one batch is
// in flight at a time, and a forced commit waits for it and then writes
// synchronously.
func (n *Node) maybeCommitFSM(force bool) error {
	now := n.clock.Now()
	if !force && now.Sub(n.loop.lastCommit) < n.cfg.CommitInterval {
		return nil
	}
	if n.loop.fsmBusy {
		if !force {
			return nil // still writing the last batch: try again next time
		}
		if err := n.waitFSMCommit(); err != nil {
			return err
		}
	}
	n.loop.lastCommit = now
	if n.fsm.DurableIndex() == n.fsm.AppliedIndex() {
		return nil
	}
	if err := n.cfg.Faults.commitError(); err != nil {
		return err
	}
	if force {
		return n.fsm.Commit()
	}
	n.loop.fsmBusy = true
	n.fsmc <- n.fsm.PrepareCommit() // capacity 1 and nothing in flight: never blocks
	return nil
}

// waitFSMCommit waits until the committer has written the batch in flight,
// if any (before a restore, a forced commit).
func (n *Node) waitFSMCommit() error {
	if !n.loop.fsmBusy {
		return nil
	}
	select {
	case err := <-n.fsmDone:
		n.loop.fsmBusy = false
		return err
	case <-n.stopc:
		return ErrClosed
	}
}

// commitLoop is the committer: it writes the lock-table batches the loop
// prepares, one at a time, and reports each outcome back to the loop.
func (n *Node) commitLoop() {
	defer n.bgwg.Done()
	for {
		select {
		case b := <-n.fsmc:
			err := n.fsm.WriteCommit(b)
			select {
			case n.fsmDone <- err:
			case <-n.stopc:
				return
			}
		case <-n.stopc:
			return
		case <-n.donec:
			return
		}
	}
}

// maybeSnapshot writes a lock-table snapshot file and compacts the raft log
// every SnapshotEvery applied entries.
func (n *Node) maybeSnapshot() error {
	if n.loop.sinceSnap < n.cfg.SnapshotEvery {
		return nil
	}
	return n.snapshotNow()
}

func (n *Node) snapshotNow() error {
	idx := n.fsm.AppliedIndex()
	if idx == 0 {
		return nil
	}
	if err := n.maybeCommitFSM(true); err != nil {
		return err
	}
	path := transport.SnapshotPath(n.snapDir, idx)
	if err := writeSnapshotFile(path, n.fsm); err != nil {
		return err
	}
	var desc [8]byte
	binary.BigEndian.PutUint64(desc[:], idx)
	if _, err := n.storage.CreateSnapshot(idx, n.loop.confState, desc[:]); err != nil {
		if err == raft.ErrSnapOutOfDate {
			return nil
		}
		return err
	}
	n.loop.sinceSnap = 0
	if idx > n.cfg.CompactKeep {
		if err := n.storage.Compact(idx - n.cfg.CompactKeep); err != nil && err != raft.ErrCompacted {
			return err
		}
	}
	n.removeOldSnapshots(idx)
	n.log.Debug("snapshot taken", "index", idx)
	return nil
}

func writeSnapshotFile(path string, fsm *lockfsm.FSM) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 256<<10)
	err = fsm.WriteSnapshot(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeOldSnapshots keeps the newest two snapshot files: one may be
// streaming to a follower while the next is written.
func (n *Node) removeOldSnapshots(newest uint64) {
	entries, err := os.ReadDir(n.snapDir)
	if err != nil {
		return
	}
	var keep uint64
	for _, e := range entries {
		var idx uint64
		if _, err := fmt.Sscanf(e.Name(), "%016x.snap", &idx); err != nil || !strings.HasSuffix(e.Name(), ".snap") {
			continue
		}
		if idx < newest && idx > keep {
			keep = idx
		}
	}
	for _, e := range entries {
		var idx uint64
		if _, err := fmt.Sscanf(e.Name(), "%016x.snap", &idx); err != nil || !strings.HasSuffix(e.Name(), ".snap") {
			continue
		}
		if idx != newest && idx != keep {
			os.Remove(filepath.Join(n.snapDir, e.Name()))
		}
	}
}

// onTick runs once per raft tick inside the loop. An error is a storage
// failure: the loop must stop.
func (n *Node) onTick() error {
	now := n.clock.Now()
	n.retryProposals(now)
	n.expireConfirmRounds(now)
	n.checkOwnSession(now)
	n.watchLeader(now)
	return n.maybeCommitFSM(false)
}

// transferLeadership hands leadership to the most caught-up voter and closes
// done when this node no longer leads (or there is no one to hand it to).
func (n *Node) transferLeadership(done chan struct{}) {
	if !n.loop.isLeader {
		close(done)
		return
	}
	st := n.rn.Status()
	// The most caught-up voter, preferring those heard from lately: a
	// transfer to a crashed or cut-off voter only times out after two
	// election timeouts. (RecentActive is reset every election timeout, so
	// right after that reset no one may look active: then take any.)
	var best uint64
	var bestMatch uint64
	var bestActive bool
	for id, pr := range st.Progress {
		if id == n.id || pr.IsLearner {
			continue
		}
		switch {
		case pr.RecentActive && !bestActive:
		case pr.RecentActive == bestActive && pr.Match >= bestMatch:
		default:
			continue
		}
		best, bestMatch, bestActive = id, pr.Match, pr.RecentActive
	}
	if best == 0 {
		close(done)
		return
	}
	n.flushProposals() // raft drops proposals while a transfer is in progress
	n.rn.TransferLeader(best)
	n.loop.lead.onStepDown(done)
}
