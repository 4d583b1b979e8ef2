package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/lockraft/lockraft/internal/lockerr"
	"os"
	"path/filepath"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/fleet"
)

// Cluster management (who is in the raft configuration, formation, the
// version gate, static lists, admission) is package fleet's; this file is
// the node's side of it: the Host the Fleet talks to, and the node's own
// API over it.

// version is gossiped in each member's metadata and sent with every
// transport RPC. Versions from 0.2 on have the lock catalogue (the version
// gate: node/internal/fleet/versiongate.go); from 0.3 on they end a session
// with many names in runs (node/internal/fleet/sessionruns.go).
const version = "lockraft/0.3"

// version is the version this node tells its peers.
func (c *Config) version() string {
	claim := knobsOf(c).ClaimVersion
	switch claim {
	case "":
		return version
	case "-":
		return ""
	}
	return claim
}

// newFleet makes n's cluster management (start), with the formation id its
// identity file holds.
func newFleet(n *Node, formation string) *fleet.Fleet {
	cfg := n.cfg
	fc := fleet.Config{
		ID:              n.id,
		ClusterID:       cfg.ClusterID,
		Version:         cfg.version(),
		DataDir:         cfg.DataDir,
		Authenticated:   cfg.TLS != nil,
		Gossip:          cfg.Gossip,
		Formation:       formation,
		ElectionTimeout: cfg.electionTimeout(),
		TickInterval:    cfg.TickInterval,
		RetryInterval:   cfg.RetryInterval,
		ErrOlderMembers: lockerr.ErrOlderMembers,
		ErrUnavailable:  lockerr.ErrUnavailable,
		Now:             n.clock.Now,
		Ticker:          n.clock.NewTicker,
		Log:             n.log,
		Host:            (*fleetHost)(n),
	}
	for _, m := range cfg.Members {
		fc.Static = append(fc.Static, fleet.Member{ID: m.ID, Addr: m.Addr})
	}
	return fleet.New(fc)
}

// startGossip starts the membership member and its goroutine. Called by
// Start before the loop runs.
func (n *Node) startGossip() error {
	m, err := n.fleet.StartGossip(n.addr, n.cfg.gossipAdvertiseHost(fleet.WithDefaults(*n.cfg.Gossip)))
	if err != nil {
		return fmt.Errorf("%w: %v", lockerr.ErrInvalidConfig, err)
	}
	n.ml = m
	n.bgwg.Add(1)
	go func() {
		defer n.bgwg.Done()
		n.fleet.Run(n.stopc)
	}()
	return nil
}

// fleetHost is the node as its Fleet's Host (fleet.Host documents each
// method and the goroutine it runs on).
type fleetHost Node

func (h *fleetHost) Leadership() fleet.Leadership {
	n := (*Node)(h)
	return fleet.Leadership{Leader: n.loop.leader, Leading: n.loop.isLeader,
		Active: n.loop.isLeader && n.loop.lease.Active() && n.err() == nil, Term: n.loop.lease.Term()}
}

func (h *fleetHost) ConfState() *raftpb.ConfState { return h.loop.confState }
func (h *fleetHost) Status() raft.Status          { return h.rn.Status() }
func (h *fleetHost) Applied() uint64              { return h.loop.lastApplied }

func (h *fleetHost) ProposeConfChange(cc *raftpb.ConfChangeV2) error {
	h.loop.props.flush() // commands of this turn keep their place before the change
	return h.rn.ProposeConfChange(cc)
}

func (h *fleetHost) ReadIndex(rctx []byte)             { h.rn.ReadIndex(rctx) }
func (h *fleetHost) Bootstrap(peers []raft.Peer) error { return h.rn.Bootstrap(peers) }

func (h *fleetHost) Do(ctx context.Context, f func()) error { return (*Node)(h).do(ctx, f) }
func (h *fleetHost) TryDo(f func())                         { (*Node)(h).tryDo(f) }
func (h *fleetHost) Leader() uint64                         { return h.lead.Load() }
func (h *fleetHost) LeaderChanged() <-chan struct{}         { return h.lead.changed() }
func (h *fleetHost) Closing() bool                          { return h.closing.Load() }
func (h *fleetHost) HasData() bool                          { return h.storage.HasState() }
func (h *fleetHost) SessionOpen() bool                      { return h.sess.Load() != 0 }
func (h *fleetHost) Net() fleet.Network                     { return h.tr }

func (h *fleetHost) PersistFormation(id string) error {
	return writeIdentity(h.cfg.DataDir, identity{id: h.id, cluster: h.cfg.ClusterID, formation: id})
}

func (h *fleetHost) WriteFile(name string, data []byte) error {
	path := filepath.Join(h.cfg.DataDir, name)
	tmp := path + ".tmp"
	err := writeFileSync(tmp, data)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(h.cfg.DataDir)
	}
	return err
}

// staticUnavailable adds what this node knows of a static list mismatch to
// the error of a call that found no leader in time (ctx's cause), so that
// the caller learns why: errors.Is then matches lockerr.ErrInvalidConfig too.
func (n *Node) staticUnavailable(err error) error {
	if n.cfg.Gossip != nil || n.lead.Load() != 0 {
		return err
	}
	if msg := n.fleet.StaticMismatch(); msg != "" {
		return fmt.Errorf("%w (%w: %s)", err, lockerr.ErrInvalidConfig, msg)
	}
	return err
}

// onForeignStaticPeer is the transport's OnForeignPeer in static mode: a
// member that finds a majority of the others on another list stops serving.
func (n *Node) onForeignStaticPeer(peer uint64, detail string, dialed bool) {
	hopeless := n.fleet.OnForeignStaticPeer(peer, detail, dialed)
	if hopeless == nil {
		return
	}
	err := fmt.Errorf("%w: %w", lockerr.ErrInvalidConfig, hopeless)
	go func() {
		// Not on the transport's goroutine: the loop may be busy.
		_ = n.do(context.Background(), func() {
			if n.loop.stopWith == nil {
				n.loop.stopWith = err
			}
		})
	}()
}

// GossipAddr is the address other members use as a seed ("" without gossip).
func (n *Node) GossipAddr() string {
	if n.ml == nil {
		return ""
	}
	return n.ml.Local().Addr
}

// Members is the gossip view of the cluster (nil without gossip).
func (n *Node) Members() []membership.Member {
	if n.ml == nil {
		return nil
	}
	return n.ml.Members()
}

// ConfState returns the node's current raft configuration (voters and
// learners), as last applied.
func (n *Node) ConfState(ctx context.Context) (voters, learners []uint64, err error) {
	// The loop answers on a channel: if ctx ends first, it must not write
	// into this call's results after it returned.
	done := make(chan [2][]uint64, 1)
	if err := n.do(ctx, func() {
		var out [2][]uint64
		if cs := n.loop.confState; cs != nil {
			out = [2][]uint64{slices.Clone(cs.GetVoters()), slices.Clone(cs.GetLearners())}
		}
		done <- out
	}); err != nil {
		return nil, nil, err
	}
	select {
	case out := <-done:
		voters, learners = out[0], out[1]
	case <-ctx.Done():
		return nil, nil, context.Cause(ctx)
	case <-n.donec:
		return nil, nil, lockerr.ErrClosed
	}
	slices.Sort(voters)
	slices.Sort(learners)
	return voters, learners, nil
}

// ErrNoGossip is returned by the gossip key methods of a node without gossip.
var ErrNoGossip = errors.New("lockraft: gossip is not configured")

// AddGossipKey, UseGossipKey and RemoveGossipKey rotate this member's gossip
// keys at run time (membership.Membership.AddKey, UseKey, RemoveKey): add the
// new key on every member, then make it the primary on every member, then
// remove the old one everywhere. A member started without keys cannot start
// encrypting at run time.
func (n *Node) AddGossipKey(key []byte) error {
	return gossipKey(n.ml, key, (*membership.Membership).AddKey)
}

// UseGossipKey: see AddGossipKey.
func (n *Node) UseGossipKey(key []byte) error {
	return gossipKey(n.ml, key, (*membership.Membership).UseKey)
}

// RemoveGossipKey: see AddGossipKey.
func (n *Node) RemoveGossipKey(key []byte) error {
	return gossipKey(n.ml, key, (*membership.Membership).RemoveKey)
}

// gossipKey applies a key change f to ml (nil: no gossip).
func gossipKey(ml *membership.Membership, key []byte, f func(*membership.Membership, []byte) error) error {
	if ml == nil {
		return ErrNoGossip
	}
	if err := f(ml, key); err != nil {
		return fmt.Errorf("%w: %v", lockerr.ErrInvalidConfig, err)
	}
	return nil
}
