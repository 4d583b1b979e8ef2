package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockraft/lockraft/membership"
)

// StartGossip starts this node's gossip member, which advertises addr (the
// node's gRPC address) and advertiseHost as its gossip host ("": the bound
// one). The node then runs Run on a goroutine of its own. Errors are
// membership.Start's.
func (f *Fleet) StartGossip(addr, advertiseHost string) (*membership.Membership, error) {
	f.addr = addr
	f.events = make(chan membership.Event, 1024)
	mc := *f.gossip
	mc.Name = f.name
	mc.AdvertiseAddr = advertiseHost
	mc.Meta = f.localMeta()
	mc.Logger = f.log
	mc.Events = f.events
	m, err := membership.Start(mc)
	if err != nil {
		return nil, err
	}
	f.ml = m
	f.list = m.Members
	return m, nil
}

func (f *Fleet) localMeta() membership.Meta {
	return membership.Meta{RaftID: f.cfg.ID, RaftAddr: f.addr, ClusterID: f.cfg.ClusterID, Version: f.cfg.Version,
		HasData: f.host.HasData(), Formation: f.Formation()}
}

// LeaveGossip announces a departure for good to gossip (Leave, even when
// the graceful raft part failed).
func (f *Fleet) LeaveGossip() {
	if err := f.ml.Leave(f.gossip.Timing.TCPTimeout); err != nil {
		f.log.Info("leave gossip: not confirmed; the others will see this member fail instead", "err", err)
	}
}

// settledSlowdown: how much slower a settled member's gossip goroutine
// ticks (Run).
const settledSlowdown = 5

// Run is the gossip goroutine, until stop is closed: it forwards membership
// to the transport, forms the cluster, announces this member's metadata
// (raft data, a formation id) and wakes the leader's reconcile step.
func (f *Fleet) Run(stop <-chan struct{}) {
	// Two tickers, aligned with the node's others: tick drives formation
	// and metadata announcements, recon the leader's reconcile step (and a
	// periodic re-sync of the transport's peers). Once this member is
	// settled (bound to a formation, no longer seeding) its metadata
	// changes only if it gets raft data (a light member made a learner),
	// which nothing waits for, and only a leader reconciles: both then slow
	// down to settledSlowdown times their period, so a settled member's
	// gossip goroutine wakes every 5 s instead of every second.
	var tickP, reconP time.Duration
	var tick, recon <-chan time.Time
	stopTick, stopRecon := func() {}, func() {}
	defer func() { stopTick(); stopRecon() }()
	retime := func(settled bool) {
		t, r := f.gossip.Timing.ProbeInterval, f.gossip.ReconcileEvery
		if settled {
			t *= settledSlowdown
		}
		if settled && f.host.Leader() != f.cfg.ID {
			r *= settledSlowdown
		}
		if t != tickP {
			stopTick()
			tick, stopTick = f.cfg.Ticker(t)
			tickP = t
		}
		if r != reconP {
			stopRecon()
			recon, stopRecon = f.cfg.Ticker(r)
			reconP = r
		}
	}
	retime(false)
	announced := f.localMeta()
	seeding := true // membership re-resolves the seeds until the cluster is formed with this member in it
	var view, waitLogged string
	viewSince := time.Now()
	f.syncPeers()
	for {
		epoch := f.host.LeaderChanged() // a new leader retimes recon at once
		select {
		case <-stop:
			return
		case <-epoch:
		case <-f.events:
			// Events are only a wake-up: Members() is the truth.
			for drained := false; !drained; {
				select {
				case <-f.events:
				default:
					drained = true
				}
			}
			f.syncPeers()
			f.wake()
		case <-recon:
			f.syncPeers()
			if f.host.Leader() == f.cfg.ID {
				// Only a leader reconciles: elsewhere the hop into the loop
				// would be a wake-up a second for nothing.
				f.wake()
			}
		case <-tick:
		}
		// A closing node stops here, whichever other case was also ready:
		// select picks among ready cases at random, and each further turn
		// could start a metadata broadcast that nothing will send.
		select {
		case <-stop:
			return
		default:
		}
		meta := f.localMeta()
		if meta != announced {
			// Raft data or a formation id: tell the others.
			if err := f.ml.UpdateMeta(meta); err != nil && f.host.Closing() {
				f.log.Debug("gossip: could not announce metadata while closing", "err", err)
			} else if err != nil {
				f.log.Warn("gossip: could not announce metadata", "err", err)
			} else {
				announced = meta
			}
		}
		if seeding && (announced.HasData || slices.ContainsFunc(f.ml.Members(), func(m membership.Member) bool {
			return m.State == membership.StateAlive && m.Meta.HasData && m.Meta.RaftID != f.cfg.ID
		})) {
			f.ml.StopSeeding()
			seeding = false
		}
		retime(!seeding && announced.Formation != "" && meta == announced)
		if announced.HasData {
			continue
		}
		members := f.ml.Members()
		f.adoptLeadersFormation(members)
		if len(f.founders) == 0 || f.founders[0] != f.name {
			// Only the first founder forms the cluster (PlanFormation): for
			// every other member the view is not worth keeping. In a fleet of
			// hundreds that is most members, each woken by every other's
			// joins and metadata, and writing out the whole view each time.
			continue
		}
		if v := viewKey(members); v != view {
			view, viewSince = v, time.Now()
			continue
		}
		if time.Since(viewSince) < f.gossip.SettleFor {
			continue
		}
		plan := membership.PlanFormation(f.name, f.localMeta(), f.founders, members)
		if !plan.Candidate {
			continue
		}
		var err error
		if plan.Ready {
			err = f.formCluster(plan, stop)
		} else {
			err = errors.New(plan.Wait)
		}
		if err == nil {
			f.log.Info("formed the cluster", "formation", f.Formation(), "founders", f.founders)
		} else if msg := err.Error(); msg != waitLogged {
			// Once per reason: waiting for founders is normal at first.
			waitLogged = msg
			f.log.Info("formation: waiting", "reason", msg)
		}
	}
}

// adoptLeadersFormation binds a light member (no raft data, a session
// opened by a leader) to the formed cluster of that leader, as a learner is
// bound by its first raft traffic: from then on it only talks to that
// cluster. Runs on the gossip goroutine.
func (f *Fleet) adoptLeadersFormation(members []membership.Member) {
	if f.Formation() != "" || !f.host.SessionOpen() || f.host.HasData() {
		return
	}
	lead := f.host.Leader()
	for _, m := range members {
		if m.Meta.RaftID == lead && lead != 0 && m.Meta.Formation != "" {
			if err := f.joinFormation(m.Meta.Formation); err != nil {
				f.log.Debug("formation: light member not bound", "err", err)
			}
			return
		}
	}
}

func viewKey(members []membership.Member) string {
	var b strings.Builder
	for _, m := range members {
		fmt.Fprintf(&b, "%x/%d/%t/%s;", m.Meta.RaftID, m.State, m.Meta.HasData, m.Meta.Formation)
	}
	return b.String()
}

// syncPeers makes every alive member's gRPC address known to the transport,
// and the members with raft data allowed to send raft messages (members.go).
func (f *Fleet) syncPeers() {
	net := f.host.Net()
	var withData []uint64
	for _, m := range f.ml.Members() {
		if m.State == membership.StateAlive && m.Meta.RaftID != f.cfg.ID {
			net.AddPeer(m.Meta.RaftID, m.Meta.RaftAddr)
		}
		if m.Meta.HasData && m.Meta.RaftID != f.cfg.ID {
			withData = append(withData, m.Meta.RaftID)
		}
	}
	f.members.SetGossip(withData)
}
