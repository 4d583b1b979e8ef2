package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/lockraft/lockraft/internal/refuse"
)

// errInvalidConfig is wrapped by every error Config.validate returns.
var errInvalidConfig = errors.New("membership: invalid config")

// KeyLengthError reports a SecretKey, or a key of Keys, whose length is not
// 16, 24 or 32 bytes. It wraps errInvalidConfig.
type KeyLengthError struct {
	Len int
	Key string // which key: "Keys[i]" ("" for SecretKey or a key added at run time)
}

func (e *KeyLengthError) Error() string {
	key := e.Key
	if key == "" {
		key = "secret key"
	}
	return fmt.Sprintf("membership: invalid config: %s is %d bytes, want 16, 24 or 32 (AES-128/192/256-GCM)", key, e.Len)
}

// Unwrap makes errors.Is(err, errInvalidConfig) true.
func (e *KeyLengthError) Unwrap() error { return errInvalidConfig }

// Config configures one gossip member, and a lockraft node's gossip mode
// (node.Config.Gossip is this type; the node fills in Meta, Logger and
// Events and reads the formation and policy fields at the end). The zero
// value is not usable by Start: Meta (RaftID, RaftAddr, ClusterID) must be
// set. Fields left zero take the documented defaults.
type Config struct {
	// Name is the gossip name, unique in the fleet and stable across
	// restarts (on Kubernetes, the pod name of a StatefulSet). Default
	// "lockraft-<RaftID as 16 hex digits>", which is unique because raft IDs are
	// random and never reused, and stable across restarts because the ID is
	// persisted (so a restarted member reclaims its own name). A founder
	// must set it.
	Name string

	// BindAddr and BindPort are where gossip listens (UDP and TCP on the same
	// port). BindAddr is an IP address; Start binds 0.0.0.0 when it is empty,
	// a lockraft node defaults it to 127.0.0.1. BindPort 0 picks a free port
	// (tests); deployments should set one (memberlist's conventional port is
	// 7946).
	BindAddr string
	BindPort int

	// AdvertiseAddr and AdvertisePort are what other members dial. Default: the
	// bound address and port.
	AdvertiseAddr string
	AdvertisePort int

	// Seeds are "host:port" gossip addresses of existing members; host may be
	// a DNS name with several addresses (a headless Service). Start joins
	// them, skipping its own address, and keeps resolving and joining new
	// addresses in the background until StopSeeding or Shutdown (a fleet
	// started all at once has no first member, and DNS answers grow as pods
	// start).
	Seeds []string

	// LookupHost resolves a seed's host name to addresses (default
	// net.DefaultResolver.LookupHost). Tests inject a fake DNS.
	LookupHost func(ctx context.Context, host string) ([]string, error)

	// Meta is this member's metadata, gossiped to everyone.
	Meta Meta

	// SecretKey, if set, enables AES-GCM encryption and authentication of all
	// gossip; it must be 16, 24 or 32 bytes. Members with another key cannot
	// talk to this one. It does not protect the raft gRPC traffic.
	SecretKey []byte

	// Keys is a keyring (instead of SecretKey): the first key encrypts what
	// this member sends, every key is tried on what it receives. Rotation:
	// add the new key on every member (Membership.AddKey), make it primary
	// on every member (UseKey), remove the old one everywhere (RemoveKey).
	// Incoming gossip must be encrypted and outgoing gossip is (memberlist's
	// GossipVerifyIncoming and GossipVerifyOutgoing).
	Keys [][]byte

	// Label is prepended to every gossip packet and stream; packets with
	// another label are dropped. Default Meta.ClusterID. It keeps clusters
	// apart cheaply; the ClusterID check on metadata is the second line.
	Label string

	// Timing is the failure-detector and gossip timing. The zero value means
	// LANTiming().
	Timing Timing

	// Logger receives this package's logs and memberlist's own, at matching
	// levels. Default slog.Default().
	Logger *slog.Logger

	// Events, if non-nil, receives membership changes. Sends never block: when
	// the channel is full the event is dropped, counted (Membership.Dropped)
	// and logged; the consumer must then re-sync from Members(). Give it a
	// buffer (e.g. 256). The package never closes it.
	Events chan<- Event

	// The fields below are a lockraft node's (node/internal/fleet): Start
	// does not read them.

	// Founders are the gossip names of the members that form the cluster,
	// the same list on every member of the fleet (members not in it only
	// ever join). The cluster is formed once, with all of them as its first
	// voters, when the founder whose name sorts first sees them all and each
	// has agreed to it; a fleet configured with one list never forms two
	// clusters, whatever partitions or restarts happen during formation
	// (PlanFormation; node/internal/fleet/formation.go says why). On
	// Kubernetes: the first BootstrapExpect pod names of the StatefulSet,
	// e.g. orders-0, orders-1, orders-2. A node requires it, except in the
	// development mode (BootstrapExpect 1).
	Founders []string

	// BootstrapExpect is the number of founders (default len(Founders)); if
	// set it must equal len(Founders). 1 without Founders is the explicit
	// single-node development mode: this member founds a cluster of its own.
	BootstrapExpect int

	// Thresholds tune the leader's voter policy (PlanVoters).
	Thresholds Thresholds

	// SettleFor: the gossip view must be unchanged this long before a
	// formation decision (default 3 probe intervals).
	SettleFor time.Duration

	// ReconcileEvery: how often the leader reconsiders the configuration
	// (default 1 s; also on every membership event).
	ReconcileEvery time.Duration
}

// Timing holds the failure-detector and gossip knobs of memberlist.
//
// A member that stops answering is declared failed after roughly
// ProbeInterval + SuspicionMult*log10(N+1)*ProbeInterval. Shorter intervals
// detect failures sooner but cost more traffic and give more false positives
// under GC pauses or CPU starvation.
type Timing struct {
	ProbeInterval       time.Duration // one random member probed per interval
	ProbeTimeout        time.Duration // ack deadline for a direct probe (an RTT bound)
	SuspicionMult       int           // suspicion timeout multiplier (see above)
	GossipInterval      time.Duration // how often queued broadcasts are gossiped
	GossipNodes         int           // members gossiped to per GossipInterval
	RetransmitMult      int           // a broadcast is retransmitted RetransmitMult*log(N+1) times
	PushPullInterval    time.Duration // full state sync (anti-entropy) period
	TCPTimeout          time.Duration // stream connect/IO deadline (join, push/pull); also UpdateMeta's wait
	GossipToTheDeadTime time.Duration // keep gossiping to a dead member this long (lets it refute)
	DeadNodeReclaimTime time.Duration // a dead member's name may be reclaimed from a new address after this
	RetryJoinInterval   time.Duration // first retry delay for seeds; doubles up to 16x
	ForgetAfter         time.Duration // Failed/Left members drop out of Members() after this
}

// LANTiming is memberlist.DefaultLANConfig's timing (probe 1 s / 500 ms,
// suspicion ×4, push/pull 30 s), but for gossip every second to 3
// (memberlist's LAN gossips every 200 ms, its WAN every 500 ms: each gossip
// tick wakes an idle embedding process, lockraft.LANGossipTiming says what
// it costs), plus this package's defaults: dead names reclaimable after
// 30 s, seeds retried from 1 s, failed and left members forgotten after 72 h.
func LANTiming() Timing {
	c := memberlist.DefaultLANConfig()
	return Timing{
		ProbeInterval:       c.ProbeInterval,
		ProbeTimeout:        c.ProbeTimeout,
		SuspicionMult:       c.SuspicionMult,
		GossipInterval:      time.Second,
		GossipNodes:         c.GossipNodes,
		RetransmitMult:      c.RetransmitMult,
		PushPullInterval:    c.PushPullInterval,
		TCPTimeout:          c.TCPTimeout,
		GossipToTheDeadTime: c.GossipToTheDeadTime,
		DeadNodeReclaimTime: 30 * time.Second,
		RetryJoinInterval:   time.Second,
		ForgetAfter:         72 * time.Hour,
	}
}

// FastTiming is for tests on loopback: failures are detected in well under a
// second and state converges within a few hundred milliseconds. Never use it
// across a real network.
func FastTiming() Timing {
	return Timing{
		ProbeInterval:       200 * time.Millisecond,
		ProbeTimeout:        100 * time.Millisecond,
		SuspicionMult:       3,
		GossipInterval:      30 * time.Millisecond,
		GossipNodes:         3,
		RetransmitMult:      4,
		PushPullInterval:    time.Second,
		TCPTimeout:          time.Second,
		GossipToTheDeadTime: 2 * time.Second,
		DeadNodeReclaimTime: 500 * time.Millisecond,
		RetryJoinInterval:   50 * time.Millisecond,
		ForgetAfter:         time.Minute,
	}
}

// validate reports the first problem with c; every error wraps
// errInvalidConfig. It does not modify c. Start calls it.
func (c *Config) validate() error {
	if err := c.Meta.validate(); err != nil {
		return invalid("%v", err)
	}
	if _, err := c.Meta.encode(false); err != nil {
		return invalid("%v", err)
	}
	return c.ValidateSettings()
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalidConfig}, a...)...)
}

// ValidateSettings is validate without Meta, which a node fills in only
// when it starts gossip: it checks what a user sets (a node validates its
// configuration with it before it starts). The formation fields are the
// node's to check (node/internal/fleet).
func (c *Config) ValidateSettings() error {
	bad := invalid
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return &KeyLengthError{Len: len(c.SecretKey)}
	}
	if len(c.SecretKey) > 0 && len(c.Keys) > 0 {
		return bad("SecretKey and Keys are mutually exclusive")
	}
	for i, k := range c.Keys {
		switch len(k) {
		case 16, 24, 32:
		default:
			return &KeyLengthError{Len: len(k), Key: fmt.Sprintf("Keys[%d]", i)}
		}
	}
	if c.BindAddr != "" && net.ParseIP(c.BindAddr) == nil {
		// memberlist's own transport bound every interface for a name it
		// could not parse; this package's binds what it is told or refuses.
		return bad("bind address %q is not an IP address", c.BindAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return bad("bind port %d out of range", c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return bad("advertise port %d out of range", c.AdvertisePort)
	}
	if len(c.label()) > 255 {
		return bad("label is %d bytes, at most 255", len(c.label()))
	}
	if c.Timing != (Timing{}) {
		t := c.Timing
		if t.ProbeInterval <= 0 || t.ProbeTimeout <= 0 || t.ProbeTimeout > t.ProbeInterval ||
			t.GossipInterval <= 0 || t.PushPullInterval <= 0 || t.TCPTimeout <= 0 ||
			t.SuspicionMult < 1 || t.GossipNodes < 1 || t.RetransmitMult < 1 ||
			t.RetryJoinInterval <= 0 || t.ForgetAfter <= 0 {
			return bad("timing: intervals, multipliers and counts must be positive and ProbeTimeout <= ProbeInterval: %+v", t)
		}
	}
	for _, s := range c.Seeds {
		if s == "" {
			return bad("empty seed address")
		}
	}
	return nil
}

func (c *Config) nodeName() string {
	if c.Name != "" {
		return c.Name
	}
	return "lockraft-" + fmt.Sprintf("%016x", c.Meta.RaftID)
}

func (c *Config) label() string {
	if c.Label != "" {
		return c.Label
	}
	return c.Meta.ClusterID
}

// keys is the keyring: Keys, or SecretKey alone (copies).
func (c *Config) keys() [][]byte {
	src := c.Keys
	if len(c.SecretKey) > 0 {
		src = [][]byte{c.SecretKey}
	}
	out := make([][]byte, 0, len(src))
	for _, k := range src {
		out = append(out, append([]byte(nil), k...))
	}
	return out
}

func (c *Config) timing() Timing {
	if c.Timing == (Timing{}) {
		return LANTiming()
	}
	return c.Timing
}

// memberlistConfig builds the memberlist configuration; delegates are set by
// Start.
func (c *Config) memberlistConfig(logger *slog.Logger, refused *refuse.Log) *memberlist.Config {
	t := c.timing()
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.nodeName()
	mc.BindAddr = "0.0.0.0"
	if c.BindAddr != "" {
		mc.BindAddr = c.BindAddr
	}
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if c.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort
	}
	mc.Label = c.label()
	if keys := c.keys(); len(keys) > 0 {
		// validate checked the lengths, so NewKeyring cannot fail.
		kr, _ := memberlist.NewKeyring(keys, keys[0])
		mc.Keyring = kr
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	mc.ProbeInterval = t.ProbeInterval
	mc.ProbeTimeout = t.ProbeTimeout
	mc.SuspicionMult = t.SuspicionMult
	mc.GossipInterval = t.GossipInterval
	mc.GossipNodes = t.GossipNodes
	mc.RetransmitMult = t.RetransmitMult
	mc.PushPullInterval = t.PushPullInterval
	mc.TCPTimeout = t.TCPTimeout
	mc.GossipToTheDeadTime = t.GossipToTheDeadTime
	mc.DeadNodeReclaimTime = t.DeadNodeReclaimTime
	// No compression: every message memberlist sends (a probe, an ack, a
	// gossip packet of a few hundred bytes) was LZW-compressed through a
	// freshly allocated writer, most of an idle member's allocations and so
	// of its garbage collections (bench/cmd/embedcost). Members that
	// compress still interoperate: a receiver decodes either form.
	mc.EnableCompression = false
	mc.Logger = newStdLogger(logger, refused)
	mc.LogOutput = nil
	return mc
}
