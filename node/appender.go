package node

import (
	"runtime"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/raftlog"
	"github.com/lockraft/lockraft/transport"
)

// appender is raft's LocalAppendThread (raft.Config.AsyncStorageWrites): a
// goroutine that makes MsgStorageAppend messages durable and then delivers
// their responses. It takes the raft log write (one write + one fdatasync
// with the WAL engine) off the loop, so the loop keeps stepping messages,
// proposing and applying while the disk syncs, and it groups every append
// queued during one sync into the next one: one fdatasync covers many
// Readys (group commit).
//
// Durability (S3) is unchanged: a response (the MsgAppResp that counts this
// node towards a commit, a vote, the leader's own MsgStorageAppendResp) is
// delivered only after everything before and in its message has been
// written and synced, and messages are processed strictly in order.
type appender struct {
	mu    sync.Mutex
	queue []*raftpb.Message
	wake  chan struct{} // capacity 1: "the queue is not empty"

	// Set once, at start.
	id       uint64
	storage  raftlog.Log
	net      transport.Network // responses for other nodes go out here
	k        *knobs.Node
	fsync    func(time.Duration) // MetricsHooks.Fsync, or nil
	stop     <-chan struct{}     // the node is stopping
	loopDone <-chan struct{}     // the loop has exited
	// local carries the responses of durable writes meant for this node's
	// raft to the loop; failed, the write error that stops the node.
	local  chan []*raftpb.Message
	failed chan error

	// Owned by the appender goroutine.
	pendingHS  *raftpb.HardState // a commit-only HardState not yet written
	term, vote uint64            // of the last HardState written
}

// enqueue hands one MsgStorageAppend to the appender; it never blocks.
func (a *appender) enqueue(m *raftpb.Message) {
	a.mu.Lock()
	a.queue = append(a.queue, m)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// take removes the next group of messages from the queue: everything queued,
// except that a message carrying a snapshot starts a group of its own (the
// snapshot is written before the group's entries).
func (a *appender) take() []*raftpb.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.queue)
	for i := 1; i < n; i++ {
		if hasSnap(a.queue[i]) {
			n = i
			break
		}
	}
	batch := a.queue[:n:n]
	if n == len(a.queue) {
		a.queue = nil
	} else {
		a.queue = a.queue[n:]
	}
	return batch
}

func hasSnap(m *raftpb.Message) bool {
	return m.Snapshot != nil && !raft.IsEmptySnap(m.Snapshot)
}

// run is the appender goroutine; it runs until the node stops. A write error is handed to the loop,
// which stops serving; nothing after it is acknowledged.
func (a *appender) run() {
	for {
		select {
		case <-a.wake:
		case <-a.stop:
			return
		case <-a.loopDone:
			return
		}
		for {
			// A paused process (fault injection) does not write either.
			a.k.Pause(a.stop)
			batch := a.take()
			if len(batch) == 0 {
				break
			}
			// Let the goroutines the last batch woke (the stream writer
			// carrying its acknowledgements, the loop taking its responses)
			// run before this P blocks in the next fdatasync: Go hands a P
			// in a system call to other work only when sysmon notices, so
			// what waits in its run queue would otherwise wait out the sync.
			runtime.Gosched()
			local, err := a.persist(batch)
			if err != nil {
				select {
				case a.failed <- err:
				default:
				}
				return
			}
			if len(local) == 0 {
				continue
			}
			select {
			case a.local <- local:
			case <-a.stop:
				return
			case <-a.loopDone:
				return
			}
		}
	}
}

// persist writes a group of MsgStorageAppend with one Save, sends the
// responses meant for other nodes and returns those meant for this node's
// raft. A group that only moves the commit index is not written (the commit
// index is volatile in Raft and re-learnt after a restart); it rides along
// with the next synced write, exactly as the synchronous loop did.
func (a *appender) persist(batch []*raftpb.Message) ([]*raftpb.Message, error) {
	var snap *raftpb.Snapshot
	var ents []*raftpb.Entry
	hs := a.pendingHS
	merged := false
	nresp := 0
	for i, m := range batch {
		if i == 0 && hasSnap(m) {
			snap = m.Snapshot
		}
		if es := m.GetEntries(); len(es) > 0 {
			if len(ents) == 0 {
				ents = es
			} else {
				// A later append replaces the suffix from its first index.
				first := es[0].GetIndex()
				keep := 0
				for keep < len(ents) && ents[keep].GetIndex() < first {
					keep++
				}
				if !merged {
					ents = append(make([]*raftpb.Entry, 0, keep+len(es)), ents[:keep]...)
					merged = true
				} else {
					ents = ents[:keep]
				}
				ents = append(ents, es...)
			}
		}
		if m.Term != nil {
			hs = &raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
		}
		nresp += len(m.GetResponses())
	}
	var local, remote []*raftpb.Message
	if nresp > 0 {
		local = make([]*raftpb.Message, 0, nresp)
		for _, m := range batch {
			for _, r := range m.GetResponses() {
				if r.GetTo() == a.id {
					local = append(local, r)
				} else {
					remote = append(remote, r)
				}
			}
		}
	}
	if a.k.AckBeforeFsync {
		// Planted bug (tests only): acknowledge before the entries are durable.
		a.net.Send(remote)
		remote = nil
	}
	mustSync := snap != nil || len(ents) > 0 ||
		(hs != nil && (hs.GetTerm() != a.term || hs.GetVote() != a.vote))
	if !mustSync {
		a.pendingHS = hs
	} else {
		var t0 time.Time
		if a.fsync != nil {
			t0 = time.Now()
		}
		if err := a.storage.Save(snap, hs, ents); err != nil {
			return nil, err
		}
		if !t0.IsZero() {
			a.fsync(time.Since(t0))
		}
		a.pendingHS = nil
		if p := a.k.Stages; p != nil {
			now := time.Now()
			for _, e := range ents {
				p.Stamp(a.id, e.GetIndex(), knobs.StageDurable, now)
			}
		}
		if hs != nil {
			a.term, a.vote = hs.GetTerm(), hs.GetVote()
		}
	}
	if len(remote) > 0 {
		a.net.Send(coalesceAppResps(remote))
	}
	return local, nil
}

// coalesceAppResps drops an acknowledgement (a non-reject MsgAppResp) that a
// later one in msgs to the same node, of the same term and for at least the
// same index, makes redundant: the later one acknowledges everything the
// earlier one did. A group commit covering several appends thus answers the
// leader once, and the leader steps (and broadcasts a commit) once.
func coalesceAppResps(msgs []*raftpb.Message) []*raftpb.Message {
	isAck := func(m *raftpb.Message) bool {
		return m.GetType() == raftpb.MessageType_MsgAppResp && !m.GetReject()
	}
	out := msgs[:0]
	for i, m := range msgs {
		if isAck(m) {
			redundant := false
			for _, later := range msgs[i+1:] {
				if isAck(later) && later.GetTo() == m.GetTo() && later.GetTerm() == m.GetTerm() &&
					later.GetIndex() >= m.GetIndex() {
					redundant = true
					break
				}
			}
			if redundant {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}
