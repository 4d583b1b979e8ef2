package membership

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/lockraft/lockraft/internal/refuse"
	"github.com/lockraft/lockraft/internal/views"
)

// Membership is one running gossip member. All methods are safe for
// concurrent use. It never changes raft configuration itself: it only
// reports who is there and what they say about themselves.
type Membership struct {
	cfg       Config
	timing    Timing
	name      string
	log       *slog.Logger
	events    chan<- Event
	ml        *memberlist.Memberlist
	transport *netTransport
	// localAddr is this member's gossip address, read from memberlist once
	// it has bound: memberlist never changes it, and its LocalNode
	// dereferences its own entry in its node map, which it does not promise
	// to keep (a nil dereference seen once in a rolling restart's test).
	localAddr string
	// keyring is memberlist's (nil: gossip in plaintext); safe for
	// concurrent use, changed by AddKey, UseKey, RemoveKey.
	keyring *memberlist.Keyring

	dropped atomic.Uint64
	refused *refuse.Log // gossip input memberlist refused (logger.go)

	mu       sync.Mutex
	meta     Meta
	leaving  bool
	members  map[string]*Member // by gossip name
	rejected map[string]string  // gossip name -> reason already logged at Warn
	// byRaftID: the names of the alive members with each raft id (one,
	// unless two claim it), so that check need not pass over every member
	// for each alive message: in a fleet of hundreds it runs for every one
	// of the others' gossip about each other.
	byRaftID map[uint64][]string
	// sorted is Members' answer, kept until a member changes (stale) or
	// until sortedUntil, when a member that is not alive is forgotten: a
	// fleet of hundreds asks for the list far more often than it changes.
	sorted      []Member
	stale       bool
	sortedUntil time.Time

	stop     chan struct{}
	wg       sync.WaitGroup
	shutdown sync.Once

	resolver seedResolver  // seeds.go
	seedStop chan struct{} // closed by StopSeeding
	seedOnce sync.Once
}

// Start validates cfg, starts gossip and joins cfg.Seeds. If no seed answers,
// Start still returns the running member (alone) and keeps retrying the seeds
// in the background, with doubling delays, until one answers or Shutdown;
// call Join to try other addresses. It blocks up to one probe interval (for
// intervals up to 2 s) to start probing on the phase every member keeps
// (phase.go). Errors: wrapping errInvalidConfig, or a failure to bind or
// create the memberlist.
func Start(cfg Config) (*Membership, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Seeds = slices.Clone(cfg.Seeds)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	m := &Membership{
		cfg:      cfg,
		timing:   cfg.timing(),
		name:     cfg.nodeName(),
		events:   cfg.Events,
		meta:     cfg.Meta,
		members:  make(map[string]*Member),
		rejected: make(map[string]string),
		byRaftID: make(map[uint64][]string),
		stop:     make(chan struct{}),
		seedStop: make(chan struct{}),
		resolver: seedResolver{lookup: cfg.LookupHost},
	}
	if m.resolver.lookup == nil {
		m.resolver.lookup = net.DefaultResolver.LookupHost
	}
	// The node's logger already names the member (lockraft_node).
	m.log = logger.With("lockraft_component", "membership")
	m.refused = refuse.New(logger.With("lockraft_component", "memberlist"), 0)
	mc := cfg.memberlistConfig(logger, m.refused)
	d := &delegate{m: m}
	mc.Delegate = d
	mc.Events = d
	mc.Alive = d
	mc.Merge = d
	tr, err := newNetTransport(mc.BindAddr, mc.BindPort, m.log)
	if err != nil {
		return nil, fmt.Errorf("membership: start gossip on %s:%d: %w", mc.BindAddr, mc.BindPort, err)
	}
	tr.refused = m.refused
	m.transport = tr
	mc.Transport = tr
	if mc.BindPort == 0 { // memberlist completes port-less seeds with it
		mc.BindPort = tr.port
	}
	// memberlist's probe and gossip tickers start in Create: start them on
	// the phase the node's tickers keep (phase.go).
	time.Sleep(untilPhase(time.Now(), m.timing.ProbeInterval))
	ml, err := memberlist.Create(mc)
	if err != nil {
		tr.Shutdown()
		return nil, fmt.Errorf("membership: start gossip on %s:%d: %w", mc.BindAddr, mc.BindPort, err)
	}
	m.ml = ml
	m.localAddr = m.addr(ml.LocalNode())
	m.keyring = mc.Keyring
	m.log.Info("gossip started", "addr", m.localAddr, "raft_id", views.MemberID(cfg.Meta.RaftID), "cluster", cfg.Meta.ClusterID,
		"encrypted", mc.Keyring != nil, "label", mc.Label)
	if len(cfg.Seeds) > 0 {
		// Seeds are resolved (DNS names too), this member's own address is
		// skipped, and they are resolved and joined again while the
		// cluster forms (seeds.go).
		if n, tried, err := m.joinSeeds(); n == 0 {
			m.log.Info("no seed answered yet; retrying in the background", "seeds", cfg.Seeds, "tried", tried, "err", err)
		}
		m.wg.Add(1)
		go m.seedLoop()
	}
	return m, nil
}

// Join contacts the given gossip addresses ("host:port") and merges state
// with each that answers. It returns how many answered; the error is non-nil
// when none did, and then says why (wrong key, other cluster label, refused
// merge with another ClusterID, unreachable).
func (m *Membership) Join(seeds []string) (int, error) {
	n, err := m.ml.Join(seeds)
	if n > 0 {
		return n, nil
	}
	if err == nil {
		err = errors.New("no seeds given")
	}
	return 0, fmt.Errorf("membership: join %v: %w", seeds, err)
}

// Members returns every member this one knows of, itself included, sorted by
// RaftID (then name). Failed and Left members stay listed for
// Timing.ForgetAfter. Members with undecodable metadata or another ClusterID
// are never listed. The slice is the caller's.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.sorted != nil && !m.stale && now.Before(m.sortedUntil) {
		return slices.Clone(m.sorted)
	}
	out := make([]Member, 0, len(m.members))
	until := now.Add(time.Hour)
	for name, mem := range m.members {
		if mem.State != StateAlive {
			forget := mem.LastChange.Add(m.timing.ForgetAfter)
			if !now.Before(forget) {
				delete(m.members, name) // not alive: not in byRaftID
				continue
			}
			until = minTime(until, forget)
		}
		out = append(out, *mem)
	}
	slices.SortFunc(out, func(a, b Member) int {
		if a.Meta.RaftID != b.Meta.RaftID {
			if a.Meta.RaftID < b.Meta.RaftID {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	m.sorted, m.stale, m.sortedUntil = out, false, until
	return slices.Clone(out)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Local returns this member as the others see it.
func (m *Membership) Local() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mem, ok := m.members[m.name]; ok {
		return *mem
	}
	return Member{Name: m.name, Addr: m.localAddr, Meta: m.meta, State: StateAlive}
}

// refusals returns how many packets or streams of kind memberlist refused
// ("gossip: Decrypt packet failed", "gossip: discarding packet with
// unacceptable", ...: the first four words of memberlist's message), for
// tests and metrics.
func (m *Membership) refusals(kind string) uint64 { return m.refused.Count(kind) }

// Dropped returns how many events were dropped because Config.Events was full.
func (m *Membership) Dropped() uint64 { return m.dropped.Load() }

// errShutdown: the member has been shut down.
var errShutdown = errors.New("membership: shut down")

// UpdateMeta replaces this member's metadata and gossips it, waiting up to
// Timing.TCPTimeout for the broadcast to go out, or until Shutdown: after
// Shutdown it returns errShutdown at once (a stopped member gossips
// nothing, so the wait could only time out). RaftID and ClusterID cannot
// change (errInvalidMeta); a Meta over maxMetaSize fails with errMetaTooLarge.
// Typical use: set HasData once raft state exists.
func (m *Membership) UpdateMeta(meta Meta) error {
	if err := meta.validate(); err != nil {
		return err
	}
	if _, err := meta.encode(true); err != nil {
		return err
	}
	m.mu.Lock()
	if meta.RaftID != m.meta.RaftID || meta.ClusterID != m.meta.ClusterID {
		old := m.meta
		m.mu.Unlock()
		return fmt.Errorf("%w: RaftID/ClusterID are fixed (%016x/%q), got %016x/%q", errInvalidMeta, old.RaftID, old.ClusterID, meta.RaftID, meta.ClusterID)
	}
	m.meta = meta
	m.mu.Unlock()
	select {
	case <-m.stop:
		return fmt.Errorf("membership: update metadata: %w", errShutdown)
	default:
	}
	// memberlist waits for the broadcast with no way to cut the wait short,
	// and a shut-down memberlist never sends it: wait beside it, so that a
	// Shutdown meanwhile ends the call (the goroutine ends with memberlist's
	// timeout). Node.Close used to wait out TCPTimeout here, and again for
	// each further metadata change its gossip goroutine tried while closing.
	res := make(chan error, 1)
	go func() { res <- m.ml.UpdateNode(m.timing.TCPTimeout) }()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("membership: update metadata: %w", err)
		}
		return nil
	case <-m.stop:
		return fmt.Errorf("membership: update metadata: %w", errShutdown)
	}
}

// errNoKeyring is returned by the key methods of a member started without
// keys: encryption cannot be switched on at run time.
var errNoKeyring = errors.New("membership: gossip is not encrypted (no keys at start)")

// AddKey adds key to this member's keyring: it decrypts gossip with it from
// now on, but keeps encrypting with the primary key. Step 1 of a rotation,
// done on every member before step 2 (UseKey).
func (m *Membership) AddKey(key []byte) error {
	if m.keyring == nil {
		return errNoKeyring
	}
	if err := memberlist.ValidateKey(key); err != nil {
		return &KeyLengthError{Len: len(key)}
	}
	return m.keyring.AddKey(key)
}

// UseKey makes key (already added) the primary: what this member sends is
// encrypted with it. Step 2 of a rotation, once every member has the key.
func (m *Membership) UseKey(key []byte) error {
	if m.keyring == nil {
		return errNoKeyring
	}
	return m.keyring.UseKey(key)
}

// RemoveKey drops a key that is not the primary. Step 3 of a rotation, once
// every member uses the new key: gossip encrypted with the old key is then
// refused.
func (m *Membership) RemoveKey(key []byte) error {
	if m.keyring == nil {
		return errNoKeyring
	}
	return m.keyring.RemoveKey(key)
}

// keys returns this member's keys, the primary first (copies).
func (m *Membership) keys() [][]byte {
	if m.keyring == nil {
		return nil
	}
	var out [][]byte
	for _, k := range m.keyring.GetKeys() {
		out = append(out, append([]byte(nil), k...))
	}
	return out
}

// Leave announces a graceful departure (others then see this member as Left,
// not Failed) and waits up to timeout for the announcement to be gossiped.
// Gossip keeps running until Shutdown, which should follow. Leave does not
// touch raft: remove the node from the raft configuration before calling it.
func (m *Membership) Leave(timeout time.Duration) error {
	m.mu.Lock()
	m.leaving = true
	m.mu.Unlock()
	// The leaving flag rides in the metadata so that receivers can tell a
	// graceful leave from a failure (memberlist's own leave notice does not
	// reach the EventDelegate distinguishably). Best effort: if it is lost,
	// others report Failed, which is the weaker claim.
	if err := m.ml.UpdateNode(timeout); err != nil {
		m.log.Info("leave: metadata broadcast not confirmed", "err", err) // best effort, see above
	}
	if err := m.ml.Leave(timeout); err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	m.log.Info("left gossip")
	return nil
}

// Shutdown stops gossip without announcing anything (others will declare
// this member Failed unless Leave came first). It is idempotent and safe to
// call concurrently; later calls return nil.
func (m *Membership) Shutdown() error {
	var err error
	m.shutdown.Do(func() {
		close(m.stop)
		m.wg.Wait()
		if e := m.ml.Shutdown(); e != nil {
			err = fmt.Errorf("membership: shutdown: %w", e)
		}
		m.log.Info("gossip stopped")
	})
	return err
}

func (m *Membership) addr(n *memberlist.Node) string {
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// emit sends ev without blocking; a full channel drops it.
func (m *Membership) emit(ev Event) {
	if m.events == nil {
		return
	}
	select {
	case m.events <- ev:
	default:
		total := m.dropped.Add(1)
		m.log.Warn("event channel full; event dropped, consumer must re-sync with Members()",
			"kind", ev.Kind.String(), "member", ev.Member.Name, "dropped_total", total)
	}
}

// delegate implements memberlist's delegate interfaces. memberlist calls
// EventDelegate methods one at a time with its node lock held: nothing here
// may call back into the memberlist.
type delegate struct{ m *Membership }

// NodeMeta implements memberlist.Delegate.
func (d *delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	meta, leaving := d.m.meta, d.m.leaving
	d.m.mu.Unlock()
	b, err := meta.encode(leaving)
	if err != nil || len(b) > limit { // excluded by validate/UpdateMeta
		d.m.log.Error("local metadata does not fit", "err", err, "limit", limit)
		return nil
	}
	return b
}

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// check decides whether a peer may be a member: decodable metadata of our
// cluster with a RaftID no other live member uses. Each distinct refusal is
// logged once at Warn.
func (d *delegate) check(n *memberlist.Node) (Meta, bool, error) {
	meta, leaving, err := decodeMeta(n.Meta)
	var reason string
	switch {
	case err != nil:
		reason = fmt.Sprintf("undecodable metadata: %v", err)
	case meta.ClusterID != d.m.cfg.Meta.ClusterID:
		reason = fmt.Sprintf("member of cluster %q, this is cluster %q", meta.ClusterID, d.m.cfg.Meta.ClusterID)
	default:
		d.m.mu.Lock()
		for _, name := range d.m.byRaftID[meta.RaftID] {
			if name != n.Name {
				reason = fmt.Sprintf("raft id %016x already used by live member %q", meta.RaftID, name)
			}
		}
		d.m.mu.Unlock()
	}
	if reason == "" {
		return meta, leaving, nil
	}
	d.m.mu.Lock()
	logged := d.m.rejected[n.Name] == reason
	d.m.rejected[n.Name] = reason
	d.m.mu.Unlock()
	if !logged {
		attrs := []any{"member", n.Name, "addr", d.m.addr(n), "reason", reason}
		if err == nil {
			attrs = append(attrs, "their_cluster", meta.ClusterID, "our_cluster", d.m.cfg.Meta.ClusterID)
		}
		d.m.log.Warn("ignoring member", attrs...)
	}
	return Meta{}, false, errors.New(reason)
}

// NotifyAlive implements memberlist.AliveDelegate: refused peers never enter
// memberlist's member list.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	_, _, err := d.check(n)
	return err
}

// NotifyMerge implements memberlist.MergeDelegate: a join or push/pull with a
// member of another cluster is cancelled outright.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		meta, _, err := decodeMeta(n.Meta)
		if err == nil && meta.ClusterID != d.m.cfg.Meta.ClusterID {
			_, _, err = d.check(n) // logs once
			return fmt.Errorf("refusing to merge with cluster %q (this is %q): %w", meta.ClusterID, d.m.cfg.Meta.ClusterID, err)
		}
	}
	return nil
}

// reindex moves the member name's entry in byRaftID from what it was (raft
// id was, alive wasAlive) to what it is now (mem; nil: none). With m.mu
// held.
func (m *Membership) reindex(name string, was uint64, wasAlive bool, mem *Member) {
	m.stale = true // and Members' list is out of date
	if wasAlive {
		names := slices.DeleteFunc(m.byRaftID[was], func(n string) bool { return n == name })
		if len(names) == 0 {
			delete(m.byRaftID, was)
		} else {
			m.byRaftID[was] = names
		}
	}
	if mem != nil && mem.State == StateAlive {
		m.byRaftID[mem.Meta.RaftID] = append(m.byRaftID[mem.Meta.RaftID], name)
	}
}

func (mem *Member) raftID() uint64 {
	if mem == nil {
		return 0
	}
	return mem.Meta.RaftID
}

// NotifyJoin implements memberlist.EventDelegate.
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	meta, _, err := d.check(n)
	if err != nil {
		return
	}
	mem := Member{Name: n.Name, Addr: d.m.addr(n), Meta: meta, State: StateAlive, LastChange: time.Now()}
	d.m.mu.Lock()
	old, ok := d.m.members[n.Name]
	d.m.reindex(n.Name, old.raftID(), ok && old.State == StateAlive, &mem)
	d.m.members[n.Name] = &mem
	delete(d.m.rejected, n.Name)
	d.m.mu.Unlock()
	d.m.log.Debug("member joined", "member", n.Name, "raft_id", views.MemberID(meta.RaftID), "addr", mem.Addr)
	d.m.emit(Event{Kind: EventJoin, Member: mem})
}

// NotifyUpdate implements memberlist.EventDelegate.
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	meta, _, err := d.check(n)
	if err != nil {
		return
	}
	d.m.mu.Lock()
	mem, ok := d.m.members[n.Name]
	if !ok {
		mem = &Member{Name: n.Name, State: StateAlive}
		d.m.members[n.Name] = mem
	}
	changed := !ok || mem.Meta != meta
	was, wasAlive := mem.Meta.RaftID, ok && mem.State == StateAlive
	mem.Addr, mem.Meta = d.m.addr(n), meta
	d.m.reindex(n.Name, was, wasAlive, mem)
	if changed {
		mem.LastChange = time.Now()
	}
	out := *mem
	d.m.mu.Unlock()
	if changed {
		d.m.emit(Event{Kind: EventUpdate, Member: out})
	}
}

// NotifyLeave implements memberlist.EventDelegate. memberlist calls it for
// both a graceful leave and a failure; the leaving flag in the last metadata
// tells them apart.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	meta, leaving, err := decodeMeta(n.Meta)
	d.m.mu.Lock()
	mem, ok := d.m.members[n.Name]
	if !ok || err != nil || meta.ClusterID != d.m.cfg.Meta.ClusterID {
		d.m.mu.Unlock()
		return // never admitted
	}
	kind, state := EventFailed, StateFailed
	if leaving {
		kind, state = EventLeave, StateLeft
	}
	was, wasAlive := mem.Meta.RaftID, mem.State == StateAlive
	mem.State, mem.Meta, mem.LastChange = state, meta, time.Now()
	d.m.reindex(n.Name, was, wasAlive, mem)
	out := *mem
	d.m.mu.Unlock()
	if kind == EventFailed {
		d.m.log.Info("member failed (gossip); a hint, not proof of a crash", "member", n.Name, "raft_id", views.MemberID(meta.RaftID))
	} else {
		d.m.log.Info("member left", "member", n.Name, "raft_id", views.MemberID(meta.RaftID))
	}
	d.m.emit(Event{Kind: kind, Member: out})
}
