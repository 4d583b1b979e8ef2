package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/nettest"
	"github.com/lockraft/lockraft/transport/transportpb"
)

func TestNewRejectsInvalidConfig(t *testing.T) {
	h := &recorder{}
	ok := Config{ClusterID: "c", LocalID: 1, ListenAddr: "127.0.0.1:0", SnapshotDir: t.TempDir(), Handler: h}
	for name, mutate := range map[string]func(*Config){
		"no cluster":     func(c *Config) { c.ClusterID = "" },
		"zero id":        func(c *Config) { c.LocalID = 0 },
		"no address":     func(c *Config) { c.ListenAddr = "" },
		"no snapshotdir": func(c *Config) { c.SnapshotDir = "" },
		"no handler":     func(c *Config) { c.Handler = nil },
		"negative queue": func(c *Config) { c.QueueSize = -1 },
		"negative max":   func(c *Config) { c.MaxMsgSize = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := ok
			mutate(&cfg)
			_, err := New(cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	tr, err := New(ok)
	require.NoError(t, err)
	require.NoError(t, tr.Close())
}

// One Send of N messages to an up peer arrives as one Receive call, in
// order; later single-message Sends keep the order; misaddressed messages
// are dropped; an unknown peer is reported unreachable.
func TestSendBatchesInOrder(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)

	var first []*raftpb.Message
	for i := uint64(1); i <= 10; i++ {
		first = append(first, msgApp(1, 2, i))
	}
	first = append(first, msgApp(1, 3, 99)) // unknown peer 3
	first = append(first, msgApp(7, 2, 98)) // From is not the stream's peer
	a.t.Send(first)
	require.Equal(t, 1, a.rec.UnreachableCount(3))

	require.Eventually(t, func() bool { _, n := b.rec.received(); return n >= 1 }, waitFor, tick)
	got, calls := b.rec.received()
	require.Equal(t, 1, calls, "one Send to an up peer must arrive as one Receive")
	require.Equal(t, seq(1, 10), indexes(got))

	for i := uint64(11); i <= 200; i++ {
		a.t.Send([]*raftpb.Message{msgApp(1, 2, i)})
	}
	require.Eventually(t, func() bool { got, _ := b.rec.received(); return len(got) >= 200 }, waitFor, tick)
	got, _ = b.rec.received()
	require.Equal(t, seq(1, 200), indexes(got))
	for _, m := range got {
		require.Equal(t, uint64(1), m.GetFrom())
		require.Equal(t, uint64(2), m.GetTo())
	}
	require.Zero(t, a.rec.UnreachableCount(2))
}

func TestThreeTransportsDeliverPerPeerOrder(t *testing.T) {
	nodes := []*node{newNode(t, "c1", 1), newNode(t, "c1", 2), newNode(t, "c1", 3)}
	connect(nodes...)
	const perPeer = 100
	for i := uint64(1); i <= perPeer; i++ {
		for _, n := range nodes {
			from := n.t.cfg.LocalID
			var batch []*raftpb.Message
			for _, to := range []uint64{1, 2, 3} {
				if to != from {
					batch = append(batch, msgApp(from, to, i))
				}
			}
			n.t.Send(batch)
		}
	}
	for _, n := range nodes {
		require.Eventually(t, func() bool { got, _ := n.rec.received(); return len(got) == 2*perPeer }, waitFor, tick)
		got, _ := n.rec.received()
		byFrom := map[uint64][]*raftpb.Message{}
		for _, m := range got {
			require.Equal(t, n.t.cfg.LocalID, m.GetTo())
			byFrom[m.GetFrom()] = append(byFrom[m.GetFrom()], m)
		}
		require.Len(t, byFrom, 2)
		for from, msgs := range byFrom {
			require.Equal(t, seq(1, perPeer), indexes(msgs), "from %d to %d", from, n.t.cfg.LocalID)
		}
	}
}

func TestOtherClusterIsRejected(t *testing.T) {
	a, b := newNode(t, "cluster-a", 1), newNode(t, "cluster-b", 2)
	connect(a, b)

	// The stream is rejected; the sender notices on a later Send.
	require.Eventually(t, func() bool {
		a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
		return a.rec.UnreachableCount(2) > 0
	}, waitFor, 10*time.Millisecond)
	got, _ := b.rec.received()
	require.Empty(t, got)
	require.Contains(t, b.log.String(), "level=WARN msg=\"refused rpc\" source=0000000000000001 rpc=Stream reason=\"another cluster\" local_cluster=cluster-b remote_cluster=cluster-a")
	require.Contains(t, a.log.String(), "peer rejected stream")

	_, err := a.t.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{})
	require.ErrorIs(t, err, ErrClusterMismatch)
	require.EqualValues(t, 2, b.t.Refusals("rpc"), "the stream and the call were refused")
}

// A peer that never answers: the writer cannot open a stream, so its queue
// fills and Send reports the peer unreachable without blocking. The port
// is held by a listener that accepts nothing (the connection waits in its
// backlog, and the stream's open with it): a port closed instead could be
// taken by another test's listener meanwhile, whose refusal the writer
// would report too.
func TestFullQueueReportsUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { lis.Close() })
	dead := lis.Addr().String()

	a := newNode(t, "c1", 1, func(c *Config) { c.QueueSize = 4 })
	a.t.AddPeer(2, dead)

	// A batch larger than the queue never fits.
	var big []*raftpb.Message
	for i := uint64(1); i <= 5; i++ {
		big = append(big, msgApp(1, 2, i))
	}
	a.t.Send(big)
	require.Equal(t, 1, a.rec.UnreachableCount(2))

	// Many small Sends overrun the queue while the writer backs off; Send
	// must return at once each time.
	start := time.Now()
	for i := uint64(1); i <= 100; i++ {
		a.t.Send([]*raftpb.Message{msgApp(1, 2, i)})
	}
	require.Less(t, time.Since(start), time.Second)
	require.Greater(t, a.rec.UnreachableCount(2), 50)
}

func TestReconnectAfterRestart(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)
	addr := b.t.Addr()

	a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
	require.Eventually(t, func() bool { got, _ := b.rec.received(); return len(got) == 1 }, waitFor, tick)

	require.NoError(t, b.t.Close())
	require.Eventually(t, func() bool {
		a.t.Send([]*raftpb.Message{msgApp(1, 2, 2)})
		return a.rec.UnreachableCount(2) > 0
	}, waitFor, 10*time.Millisecond)

	b2 := newNode(t, "c1", 2, func(c *Config) { c.ListenAddr = addr })
	i := uint64(100)
	require.Eventually(t, func() bool {
		i++
		a.t.Send([]*raftpb.Message{msgApp(1, 2, i)})
		got, _ := b2.rec.received()
		return len(got) > 0
	}, waitFor, 10*time.Millisecond)

	// Once reconnected, order holds again.
	for j := uint64(1001); j <= 1050; j++ {
		a.t.Send([]*raftpb.Message{msgApp(1, 2, j)})
	}
	require.Eventually(t, func() bool {
		got, _ := b2.rec.received()
		return got[len(got)-1].GetIndex() == 1050
	}, waitFor, tick)
	got, _ := b2.rec.received()
	for k := 1; k < len(got); k++ {
		require.Less(t, got[k-1].GetIndex(), got[k].GetIndex())
	}
}

// backingOffFromDownPeer starts a (id 1) and b (id 2) with a minute's
// redial backoff, stops b, and returns once a's writer for b waits that
// minute to redial it: a, b's address, and the option that sets the backoff.
func backingOffFromDownPeer(t *testing.T) (a *node, addr string, slow func(*Config)) {
	slow = func(c *Config) { c.redialMin, c.redialMax = time.Minute, time.Minute }
	a, b := newNode(t, "c1", 1, slow), newNode(t, "c1", 2, slow)
	connect(a, b)
	addr = b.t.Addr()
	require.NoError(t, b.t.Close())
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
	require.Eventually(t, func() bool { return a.rec.UnreachableCount(2) > 0 }, waitFor, tick)
	return a, addr, slow
}

// TestRedialWhenPeerHeard (L1 under churn: a leader reaches a restarted
// follower as soon as it says anything): a peer's writer that is waiting to
// redial a peer that was down redials at once when that peer reaches this
// node, instead of after its backoff. Both backoffs are a minute here, so
// without the wake the message would wait a minute.
func TestRedialWhenPeerHeard(t *testing.T) {
	a, addr, slow := backingOffFromDownPeer(t)
	b2 := newNode(t, "c1", 2, slow, func(c *Config) { c.ListenAddr = addr })
	b2.t.AddPeer(1, a.t.Addr())
	b2.t.Send([]*raftpb.Message{msgApp(2, 1, 1)}) // b2 says something to a
	require.Eventually(t, func() bool { got, _ := a.rec.received(); return len(got) == 1 }, waitFor, tick)
	// The wake also reset gRPC's own backoff: a's connection to b comes up
	// by itself (a redial before it is up would fail at once, and wait out
	// the minute again).
	require.NoError(t, awaitReady(a.t.peers[2].conn, waitFor, false))

	a.t.Send([]*raftpb.Message{msgApp(1, 2, 2)})
	require.Eventually(t, func() bool { got, _ := b2.rec.received(); return len(got) == 1 }, waitFor, tick,
		"a did not redial b once b reached it")
}

// TestGreetMakesPeerRedial (L1 under churn: a restarted or new member hears
// its leader within a heartbeat): a member that starts greets its peers
// before it has anything to send them, and a peer waiting out a minute's
// backoff to redial it redials at once.
func TestGreetMakesPeerRedial(t *testing.T) {
	a, addr, slow := backingOffFromDownPeer(t)
	b2 := newNode(t, "c1", 2, slow, func(c *Config) { c.ListenAddr = addr })
	b2.t.AddPeer(1, a.t.Addr())
	b2.t.Greet(1) // b2 sends a nothing
	b2.t.Greet(9) // unknown: ignored
	// No waiting for a's connection to b to come up: a's writer, woken by
	// the greeting, must get its next message through although gRPC is
	// still reconnecting when it wakes (a stream opened then fails at once,
	// and the writer backed off again: a new member heard its leader
	// 0.77 s after it started instead of within a heartbeat).
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 2)})
	require.Eventually(t, func() bool { got, _ := b2.rec.received(); return len(got) == 1 }, waitFor, tick,
		"a did not redial b once b greeted it")
	got, _ := a.rec.received()
	require.Empty(t, got, "a greeting is not a message")
}

// TestBackingOffUntilStreamOpens (L1 under churn: a restarted member's
// greeting is not lost): once a stream to a peer fails, the writer counts as
// backing off until a stream opens again, not only while it sleeps. A peer
// heard between two sleeps (the writer waiting for the next batch) must
// still reset the redial; before, a restarted member's one greeting landed
// in that gap now and then, and it heard its leader only after its own
// election timeout (the soak's restarted-waiter fault, about 1 s).
func TestBackingOffUntilStreamOpens(t *testing.T) {
	quick := func(c *Config) { c.redialMin, c.redialMax = 5*time.Millisecond, 5*time.Millisecond }
	a, b := newNode(t, "c1", 1, quick), newNode(t, "c1", 2, quick)
	connect(a, b)
	addr := b.t.Addr()
	require.NoError(t, b.t.Close())
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
	require.Eventually(t, func() bool { return a.rec.UnreachableCount(2) > 0 }, waitFor, tick)
	p := a.t.peers[2]
	// The writer slept 5 ms and now waits for a batch, with no stream open.
	require.Never(t, func() bool { return !p.backingOff.Load() }, 200*time.Millisecond, time.Millisecond,
		"the writer stopped counting as backing off with no stream open")

	b2 := newNode(t, "c1", 2, quick, func(c *Config) { c.ListenAddr = addr })
	require.Eventually(t, func() bool {
		a.t.Send([]*raftpb.Message{msgApp(1, 2, 2)})
		got, _ := b2.rec.received()
		return len(got) > 0
	}, waitFor, 10*time.Millisecond)
	require.Eventually(t, func() bool { return !p.backingOff.Load() }, waitFor, tick, "a stream is open again")
}

// TestRedialWhenPeerHeardAsItFails (L1 under churn): the peer reaches this
// node in the very instant the stream to it fails, after the raft layer is
// told it is unreachable and before the writer starts its backoff. The wake
// must not be lost: with it lost, the writer waited out its whole backoff (a
// minute here; a flake of TestRedialWhenPeerHeard on a loaded machine).
func TestRedialWhenPeerHeardAsItFails(t *testing.T) {
	slow := func(c *Config) { c.redialMin, c.redialMax = time.Minute, time.Minute }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there until the hook starts b

	var a *node
	b := &node{rec: &recorder{}, log: &nettest.LogBuffer{}, dir: t.TempDir()}
	started := make(chan error, 1)
	hook := func(c *Config) {
		rec := c.Handler.(*recorder)
		c.Handler = unreachableHook{recorder: rec, onUnreachable: func(id uint64) {
			if id != 2 || len(started) > 0 || len(rec.Unreachable()) > 0 {
				return
			}
			// b comes up and reaches a now, before a's writer sleeps.
			tr, err := New(Config{ClusterID: "c1", LocalID: 2, ListenAddr: addr, SnapshotDir: b.dir, Handler: b.rec,
				Logger: slog.New(slog.NewTextHandler(b.log, nil))})
			b.t = tr
			if err == nil {
				// Its connection to b is up, as it is when b's message arrives.
				err = awaitReady(a.t.peers[2].conn, waitFor, true)
			}
			started <- err
			a.t.heardFrom(2)
		}}
	}
	a = newNode(t, "c1", 1, slow, hook)
	a.t.AddPeer(2, addr)
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
	select {
	case err := <-started:
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.t.Close() })
	case <-time.After(waitFor):
		t.Fatal("a never found b unreachable")
	}
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 2)})
	if !assert.Eventually(t, func() bool { got, _ := b.rec.received(); return len(got) >= 1 }, waitFor, tick,
		"a did not redial b, which reached it as the stream failed") {
		t.Log(a.log.String())
	}
}

// awaitReady waits until cc is ready; with connect, it resets cc's
// backoff and connects it first, as heardFrom does.
func awaitReady(cc *grpc.ClientConn, d time.Duration, connect bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if connect {
		cc.ResetConnectBackoff()
	}
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if connect {
			cc.Connect()
		}
		if !cc.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connection to b: %v", s)
		}
	}
}

// unreachableHook is a recorder whose ReportUnreachable runs onUnreachable
// first, on the transport's goroutine that reports it.
type unreachableHook struct {
	*recorder
	onUnreachable func(id uint64)
}

func (h unreachableHook) ReportUnreachable(id uint64) {
	h.onUnreachable(id)
	h.recorder.ReportUnreachable(id)
}

// A typed call reaches the handler with the caller's id and its request;
// the handler's answer and errors (a deadline, a permission refusal, an
// invalid request) come back as such.
func TestTypedCalls(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)
	var gotFrom atomic.Uint64
	b.rec.Call = func(ctx context.Context, from uint64, method string, req proto.Message) (proto.Message, error) {
		gotFrom.Store(from)
		switch r := req.(type) {
		case *transportpb.KeepaliveRequest:
			if r.GetSession() == 99 {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			if r.GetSession() == 66 {
				return nil, fmt.Errorf("%w: not yours", ErrPermissionDenied)
			}
			return &transportpb.KeepaliveResponse{Status: transportpb.KeepaliveStatus_KEEPALIVE_STATUS_OK}, nil
		case *transportpb.RenewRequest:
			return nil, fmt.Errorf("%w: bad name %q", ErrInvalidRequest, r.GetName())
		}
		return nil, errors.New("no such method")
	}

	out, err := a.t.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{Session: 7})
	require.NoError(t, err)
	require.Equal(t, transportpb.KeepaliveStatus_KEEPALIVE_STATUS_OK, out.GetStatus())
	require.Equal(t, uint64(1), gotFrom.Load())

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = a.t.Keepalive(ctx, 2, &transportpb.KeepaliveRequest{Session: 99})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second)

	_, err = a.t.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{Session: 66})
	require.ErrorIs(t, err, ErrPermissionDenied)
	_, err = a.t.Renew(context.Background(), 2, &transportpb.RenewRequest{Name: "x"})
	require.ErrorIs(t, err, ErrInvalidRequest)
	_, err = a.t.Leave(context.Background(), 2, &transportpb.LeaveRequest{})
	require.ErrorContains(t, err, "no such method")

	_, err = a.t.Keepalive(context.Background(), 9, &transportpb.KeepaliveRequest{})
	require.ErrorIs(t, err, ErrUnknownPeer)
}

func TestCloseIsIdempotentAndLeaksNothing(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
		connect(a, b)
		a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
		b.t.Send([]*raftpb.Message{msgApp(2, 1, 1)})
		require.Eventually(t, func() bool {
			ga, _ := a.rec.received()
			gb, _ := b.rec.received()
			return len(ga) == 1 && len(gb) == 1
		}, waitFor, tick)
		_, err := a.t.Leave(context.Background(), 2, &transportpb.LeaveRequest{})
		require.NoError(t, err)

		require.NoError(t, a.t.Close())
		require.NoError(t, a.t.Close())
		require.NoError(t, b.t.Close())
		a.t.Send([]*raftpb.Message{msgApp(1, 2, 2)}) // must not panic
		a.t.AddPeer(3, "127.0.0.1:1")
		_, err = a.t.Leave(context.Background(), 2, &transportpb.LeaveRequest{})
		require.ErrorIs(t, err, ErrClosed)
	}()
	// Polled here, not with require.Eventually: that runs the condition on a
	// goroutine of its own, which would count.
	deadline := time.Now().Add(waitFor)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines did not return to %d:\n%s", base, goroutines())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func goroutines() string {
	buf := make([]byte, 1<<16)
	return string(buf[:runtime.Stack(buf, true)])
}

// Batches above MaxMsgSize are split into several gRPC messages, still in
// order; a single message above it is dropped with an error log.
func TestSendSplitsBelowMaxMsgSize(t *testing.T) {
	small := func(c *Config) { c.MaxMsgSize = 2048 }
	a, b := newNode(t, "c1", 1, small), newNode(t, "c1", 2, small)
	connect(a, b)
	var msgs []*raftpb.Message
	for i := uint64(1); i <= 20; i++ {
		m := msgApp(1, 2, i)
		m.Entries = []*raftpb.Entry{{Data: make([]byte, 300)}}
		msgs = append(msgs, m)
	}
	huge := msgApp(1, 2, 21)
	huge.Entries = []*raftpb.Entry{{Data: make([]byte, 4096)}}
	msgs = append(msgs, huge, msgApp(1, 2, 22))
	a.t.Send(msgs)
	require.Eventually(t, func() bool { got, _ := b.rec.received(); return len(got) == 21 }, waitFor, tick)
	got, calls := b.rec.received()
	require.Equal(t, append(seq(1, 20), 22), indexes(got))
	require.GreaterOrEqual(t, calls, 4, "20×~320 bytes must not fit one 2 KiB message")
	require.Contains(t, a.log.String(), "message over MaxMsgSize or the entry limit dropped")
}
