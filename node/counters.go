package node

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/lockraft/lockraft/lockfsm"
)

// What the loop counts and times as it goes, for Status, metrics and the
// members' health: plain counters, the leader's memory of its peers'
// activity, and the QueueHead timing of this node's waiters. Each costs an
// increment or a map write on the events it follows, scraped or not.

// loopCounters are cumulative counts kept by the loop for Status and
// metrics. Plain integers: only the loop touches them.
type loopCounters struct {
	leaderChanges   uint64 // times this node saw a new leader (not counting "none")
	sessionsExpired uint64 // sessions the cluster expired (applied here)
	leasesExpired   uint64 // per-lock leases that ran out (applied here)
	pushesReceived  uint64 // results and events pushed to this light member
	tickWakes       uint64 // loop wake-ups by the raft ticker or a quiet follower's timer (node/internal/tick)
}

// noteExpiry counts an applied expiry (loop).
func (c *loopCounters) noteExpiry(cmd *lockfsm.Command, res lockfsm.Result) {
	switch {
	case cmd.Kind == lockfsm.KindExpireSession && res.Status == lockfsm.SessionClosed:
		c.sessionsExpired++
	case cmd.Kind == lockfsm.KindExpireLease && res.Status == lockfsm.LeaseExpired:
		c.leasesExpired++
	}
}

// peerWatch is the leader's memory of when each voter or learner last
// showed raft's RecentActive (noted every tick). raft resets RecentActive
// every election timeout, so on its own it reads "inactive" for a moment
// after each reset; health is "seen within an election timeout". Loop.
type peerWatch struct {
	seen   map[uint64]time.Time
	since  time.Time // the first tick this node led at (zero: not leading)
	self   uint64
	within time.Duration // an election timeout and a tick
}

// note records which peers raft saw recently (each tick; forgotten when
// this node does not lead).
func (w *peerWatch) note(rn *raft.RawNode, leading bool, now time.Time) {
	if !leading {
		w.seen, w.since = nil, time.Time{}
		return
	}
	if w.seen == nil {
		w.seen, w.since = map[uint64]time.Time{}, now
	}
	rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.RecentActive {
			w.seen[id] = now
		}
	})
}

// active reports whether the leader heard from peer id within the last
// election timeout (and a tick).
func (w *peerWatch) active(id uint64, now time.Time) bool {
	if id == w.self {
		return true
	}
	at, ok := w.seen[id]
	return ok && now.Sub(at) <= w.within
}

// young reports whether this node has led for less than an election
// timeout: a peer it has not heard from yet may be healthy all the same.
func (w *peerWatch) young(now time.Time) bool {
	return w.since.IsZero() || now.Sub(w.since) < w.within
}

// queueHeads times this node's queued Acquires from reaching the head of
// their queue to their grant, for MetricsHooks.QueueHead. Loop; only with
// that hook, on a raft member.
type queueHeads struct {
	// since: this node's queued Acquires at the head of their queue, by
	// seq, since when.
	since map[uint64]time.Time
	// watch: names where this node has queued Acquires not yet at the head,
	// with their seqs.
	watch map[string][]uint64
}

// onApply follows one applied command of session own (0: none) and its
// events, reading the lock table where a queue's head moved and the clock
// at most once.
func (q *queueHeads) onApply(cmd *lockfsm.Command, res lockfsm.Result, events []lockfsm.Event, own uint64,
	fsm *lockfsm.FSM, clk Clock, hook func(time.Duration)) {
	if q.since == nil {
		q.since, q.watch = map[uint64]time.Time{}, map[string][]uint64{}
	}
	var now time.Time
	clock := func() time.Time {
		if now.IsZero() {
			now = clk.Now()
		}
		return now
	}
	if own != 0 && cmd.Kind == lockfsm.KindAcquire && cmd.Session == own && res.Status == lockfsm.Queued && !res.Duplicate {
		if res.Position == 1 {
			q.since[cmd.Seq] = clock()
		} else {
			q.watch[cmd.Name] = append(q.watch[cmd.Name], cmd.Seq)
		}
	}
	for i := range events {
		ev := &events[i]
		if ev.Session == own && own != 0 {
			switch ev.Kind {
			case lockfsm.EventGranted:
				if ev.FromQueue {
					since, ok := q.since[ev.Seq]
					if !ok {
						since = clock() // became the head in this very entry
					}
					hook(clock().Sub(since))
					delete(q.since, ev.Seq)
					q.unwatch(ev.Name, ev.Seq)
				}
			case lockfsm.EventWaitEnded:
				delete(q.since, ev.Seq)
				q.unwatch(ev.Name, ev.Seq)
			}
		}
		if (ev.Kind == lockfsm.EventGranted && ev.FromQueue) || ev.Kind == lockfsm.EventWaitEnded {
			if seqs := q.watch[ev.Name]; len(seqs) > 0 {
				if li, ok := fsm.Lock(ev.Name); ok && len(li.Waiters) > 0 && li.Waiters[0].Session == own {
					if head := li.Waiters[0].Seq; q.unwatch(ev.Name, head) {
						q.since[head] = clock()
					}
				}
			}
		}
	}
}

// unwatch removes seq from name's watch list; true if it was there.
func (q *queueHeads) unwatch(name string, seq uint64) bool {
	seqs := q.watch[name]
	for i, s := range seqs {
		if s == seq {
			seqs = append(seqs[:i], seqs[i+1:]...)
			if len(seqs) == 0 {
				delete(q.watch, name)
			} else {
				q.watch[name] = seqs
			}
			return true
		}
	}
	return false
}
