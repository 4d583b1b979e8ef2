package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// fake is a member that only starts a network endpoint through its Spec's
// knobs (so that the harness's faults sit on its path) and answers
// keepalives.
type fake struct {
	spec Spec
	nw   transport.Network
}

func (f *fake) Leader() uint64     { return 1 }
func (f *fake) GossipAddr() string { return fmt.Sprintf("gossip-%d-%d", f.spec.ID, f.spec.Incarnation) }

// closing is a member without Crash: the harness stops it by Close, which
// returns once released is closed (or its ctx ends).
type closing struct {
	began    chan struct{} // closed when Close begins
	released <-chan struct{}
}

func (*closing) Leader() uint64 { return 1 }

func (f *closing) Close(ctx context.Context) error {
	close(f.began)
	select {
	case <-f.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keepaliveHandler answers keepalives; nothing else reaches it here.
type keepaliveHandler struct{ transport.Handler }

func (keepaliveHandler) Keepalive(context.Context, uint64, *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	return &transportpb.KeepaliveResponse{}, nil
}

func startFake(s Spec, network bool) (*fake, error) {
	f := &fake{spec: s}
	if !network {
		return f, nil
	}
	nw, err := s.Knobs.Network(transport.Config{ClusterID: "harness", LocalID: s.ID,
		SnapshotDir: s.Dir + "/snap", Handler: keepaliveHandler{}})
	if err != nil {
		return nil, err
	}
	for _, p := range s.Peers {
		nw.AddPeer(p.ID, p.Addr)
	}
	f.nw = nw
	return f, nil
}

func (f *fake) Crash() {
	if f.nw != nil {
		f.nw.Close()
	}
}

// reaches reports whether a keepalive from a gets an answer from b.
func reaches(t *testing.T, c *Cluster[*fake], a, b uint64) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Member(a).nw.Keepalive(ctx, b, &transportpb.KeepaliveRequest{})
	return err == nil
}

// CutOff composes: members cut off one after another are each alone, and
// Unisolate gives one back to all but the member it keeps away from.
// Isolate, by contrast, replaces every earlier cut.
func TestCutOffKeepsOtherCuts(t *testing.T) {
	c, err := Start(Options[*fake]{Size: 4, Dir: t.TempDir(), Sim: true, Seed: 1,
		Start: func(s Spec) (*fake, error) { return startFake(s, true) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := func(what string, a, b uint64, ok bool) {
		t.Helper()
		if got := reaches(t, c, a, b); got != ok {
			t.Fatalf("%s: %d → %d gets through: %v, want %v", what, a, b, got, ok)
		}
	}
	want("no cut", 1, 3, true)
	c.CutOff(1)
	c.CutOff(2)
	for _, p := range [][2]uint64{{1, 2}, {2, 1}, {1, 3}, {3, 1}, {2, 4}, {4, 2}} {
		want("1 and 2 cut off", p[0], p[1], false)
	}
	want("1 and 2 cut off", 3, 4, true)
	c.Unisolate(1, 2)
	want("1 back but for 2", 1, 3, true)
	want("1 back but for 2", 4, 1, true)
	want("1 back but for 2", 1, 2, false)
	want("2 still cut off", 2, 3, false)
	c.Isolate(3)
	want("Isolate(3) replaces the cuts", 1, 2, true)
	want("Isolate(3) replaces the cuts", 2, 4, true)
	want("Isolate(3)", 1, 3, false)
	want("Isolate(3)", 3, 4, false)
	c.Heal()
	want("healed", 3, 2, true)
}

// With Initial negative nothing starts; StartVia hands a gossip-mode member
// exactly the seeds it is given, StartMember the running members'. Member
// and All see the running members only, Node the last incarnation too.
func TestStartViaAndRunningMembers(t *testing.T) {
	var mu sync.Mutex
	specs := map[uint64]Spec{}
	c, err := Start(Options[*fake]{Size: 3, Dir: t.TempDir(), Gossip: true, Initial: -1,
		Start: func(s Spec) (*fake, error) {
			mu.Lock()
			specs[s.ID] = s
			mu.Unlock()
			return startFake(s, false)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r := c.Running(); len(r) != 0 {
		t.Fatalf("Initial -1 started %v", r)
	}
	seedsOf := func(id uint64) []string {
		mu.Lock()
		defer mu.Unlock()
		return specs[id].Seeds
	}
	if err := c.StartVia(2, "elsewhere:1"); err != nil {
		t.Fatal(err)
	}
	if got := seedsOf(2); !slices.Equal(got, []string{"elsewhere:1"}) {
		t.Fatalf("StartVia seeds %v", got)
	}
	if err := c.StartVia(3); err != nil {
		t.Fatal(err)
	}
	if got := seedsOf(3); len(got) != 0 {
		t.Fatalf("StartVia without seeds gave %v", got)
	}
	if err := c.StartMember(1); err != nil {
		t.Fatal(err)
	}
	if got := seedsOf(1); !slices.Equal(got, []string{"gossip-2-1", "gossip-3-1"}) {
		t.Fatalf("StartMember seeds %v, want the running members' addresses", got)
	}

	var ids []uint64
	for id, m := range c.All() {
		if m.spec.ID != id {
			t.Fatalf("All yielded member %d as %d", m.spec.ID, id)
		}
		ids = append(ids, id)
		c.Crash(3) // a member stopped in the loop is still yielded: All reads a snapshot
	}
	if !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Fatalf("All yielded %v", ids)
	}
	if m := c.Member(3); m != nil {
		t.Fatal("Member of a crashed member is not nil")
	}
	if m, ok := c.Node(3); ok || m == nil || m.spec.Incarnation != 1 {
		t.Fatalf("Node of a crashed member: %v, %v; want its last incarnation, false", m, ok)
	}
	if err := c.StartVia(3, "x"); err != nil {
		t.Fatal(err)
	}
	if m := c.Member(3); m == nil || m.spec.Incarnation != 2 {
		t.Fatalf("restarted member 3: %+v", m)
	}
	if err := c.StartVia(3, "y"); err != nil || !slices.Equal(seedsOf(3), []string{"x"}) {
		t.Fatalf("StartVia of a running member started it again (%v, seeds %v)", err, seedsOf(3))
	}
}

// Members without Crash are closed all at once: each Close here returns
// only once every member's Close has begun (a Close that needs a quorum).
func TestStopClosesInParallel(t *testing.T) {
	var all sync.WaitGroup
	all.Add(3)
	released := make(chan struct{})
	go func() { all.Wait(); close(released) }()
	c, err := Start(Options[*closing]{Size: 3, Dir: t.TempDir(),
		Start: func(s Spec) (*closing, error) {
			s.Listener.Close()
			f := &closing{began: make(chan struct{}), released: released}
			go func() { <-f.began; all.Done() }()
			return f, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Close()
	select {
	case <-released:
	default:
		t.Fatal("Stop returned before every member's Close began")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Stop took %v: the members were closed one after another, each until its timeout", took)
	}
	if r := c.Running(); len(r) != 0 {
		t.Fatalf("running after Stop: %v", r)
	}
}
