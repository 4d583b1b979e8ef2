package transport

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Metadata headers carried by every RPC.
const (
	mdCluster = "lockraft-cluster"
	mdFrom    = "lockraft-from"
	// mdFormation (formation.go) carries the sender's formation id.
)

// Reconnect backoff of a peer's message stream after a failure.
const (
	minRedial = 50 * time.Millisecond
	maxRedial = 2 * time.Second
)

// snapshotQueueSize bounds the MsgSnap waiting per peer; raft sends at most
// one snapshot per follower at a time, so more means the node is confused.
const snapshotQueueSize = 4

// Send delivers msgs to their peers, grouped by To. It never blocks on the
// network: each peer's messages are marshalled here and enqueued as one batch
// on that peer's bounded queue, and the peer's writer goroutine sends them in
// order. Send does not retain or mutate msgs after it returns, so the caller
// may reuse them.
//
// A message to an unknown peer, to a peer whose queue is full, or that cannot
// be marshalled is dropped and Handler.ReportUnreachable(to) is called
// (once per peer per Send). A dropped MsgSnap is also reported with
// ReportSnapshot(to, true). MsgSnap go to the peer's snapshot sender, which
// streams the file SnapshotPath(SnapshotDir, index) and reports the outcome
// with ReportSnapshot. After Close, Send drops everything silently.
//
// Send is safe for concurrent use, but the order between concurrent Sends is
// unspecified; raft's single loop calls it from one goroutine.
func (t *Transport) Send(msgs []*raftpb.Message) {
	if len(msgs) == 0 {
		return
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return
	}
	h := t.cfg.Handler
	// Group by destination, keeping per-peer order. Small slices: a Ready has
	// a handful of peers.
	var order []uint64
	groups := make(map[uint64][]wireMsg, 4)
	unreachable := make(map[uint64]bool)
	for _, m := range msgs {
		to := m.GetTo()
		p := t.peers[to]
		if m.GetType() == raftpb.MessageType_MsgSnap {
			if p == nil || !p.enqueueSnapshot(m) {
				t.log.Warn("transport: snapshot dropped", "peer", views.MemberID(to), "known", p != nil)
				unreachable[to] = true
				h.ReportSnapshot(to, true)
			}
			continue
		}
		if p == nil {
			unreachable[to] = true
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.log.Error("transport: marshal", "peer", views.MemberID(to), "type", m.GetType(), "err", err)
			unreachable[to] = true
			continue
		}
		if _, ok := groups[to]; !ok {
			order = append(order, to)
		}
		groups[to] = append(groups[to], wireMsg{b: b, ents: len(m.GetEntries())})
	}
	for _, to := range order {
		if !t.peers[to].enqueue(groups[to]) {
			unreachable[to] = true
		}
	}
	for to := range unreachable {
		h.ReportUnreachable(to)
	}
}

// wireMsg is one marshalled raft message and its entry count, so that the
// writer keeps each gRPC batch within the receiver's limits (limits.go).
type wireMsg struct {
	b    []byte
	ents int
}

// peer is one remote node: a gRPC connection for calls and, from the first
// raft message sent to it, a writer goroutine owning the long-lived message
// stream and a snapshot sender goroutine.
//
// The raft side starts on first use (raftSide) because most peers of a
// fleet's leader never get a raft message: a light member is only called
// (pushes, answers), yet each peer's queue takes QueueSize slots (96 KiB by
// default) and its two goroutines their stacks — 4.9 MB of a fleet of 50's
// leader's 10 MB live heap and a hundred of its goroutines.
type peer struct {
	t    *Transport
	id   uint64
	addr string
	conn *grpc.ClientConn
	rpc  transportpb.RaftClient

	// raftOn is set, under raftMu, once queue and snaps exist and their
	// goroutines run; they never change after. stopped (under raftMu):
	// stop has begun, nothing more starts.
	raftOn  atomic.Bool
	raftMu  sync.Mutex
	stopped bool

	queue   chan []wireMsg // batches of marshalled messages
	pending atomic.Int64   // messages in queue, bounded by QueueSize
	// backingOff is set while writeLoop waits to redial; heard wakes it
	// (heardFrom: the peer reached this node, so it is up again).
	backingOff atomic.Bool
	heard      chan struct{}
	foreign    atomic.Bool     // a formation mismatch was logged
	ka         keepaliveClient // this member's keepalive stream to the peer (keepalives.go)
	snaps      chan *raftpb.Message

	ctx    context.Context // cancelled by stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newPeer(t *Transport, id uint64, addr string) (*peer, error) {
	cfg := &t.cfg
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(t.clientTLS(id))
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithInitialWindowSize(cfg.streamWindow()),
		grpc.WithInitialConnWindowSize(connWindows*cfg.streamWindow()),
		grpc.WithMaxHeaderListSize(maxHeaderList),
		grpc.WithIdleTimeout(cfg.IdleTimeout),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                10 * time.Second,
			Timeout:             5 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  50 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   cfg.maxRedial(),
			},
			MinConnectTimeout: cfg.DialTimeout,
		}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallSendMsgSize(cfg.MaxMsgSize+grpcSlack),
			grpc.MaxCallRecvMsgSize(cfg.MaxMsgSize+grpcSlack),
			grpc.ForceCodecV2(t.codec),
		),
	)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{
		t:      t,
		id:     id,
		addr:   addr,
		conn:   conn,
		rpc:    transportpb.NewRaftClient(conn),
		heard:  make(chan struct{}, 1),
		ctx:    ctx,
		cancel: cancel,
	}
	return p, nil
}

// raftSide makes the queue, the snapshot channel and their goroutines on
// first use; false once the peer is stopping. Safe for concurrent use.
func (p *peer) raftSide() bool {
	if p.raftOn.Load() {
		return true
	}
	p.raftMu.Lock()
	defer p.raftMu.Unlock()
	if p.stopped {
		return false
	}
	if !p.raftOn.Load() {
		p.queue = make(chan []wireMsg, p.t.cfg.QueueSize)
		p.snaps = make(chan *raftpb.Message, snapshotQueueSize)
		p.wg.Add(2)
		go p.writeLoop()
		go p.snapshotLoop()
		p.raftOn.Store(true)
	}
	return true
}

// noReplay keeps gRPC from holding on to what a raft stream sends. Until a
// stream is "committed" gRPC keeps every message sent on it, for a
// transparent retry, and commits only once a response arrives or 256 KiB of
// messages are held; a raft stream gets no response until it ends, and an
// idle one sends heartbeats of a few dozen bytes, so it kept each of them —
// the bytes and a replay entry, about 300 bytes of heap apiece — for the
// first half hour or more of the stream: MiBs per follower (a fleet's leader
// grew from 33 to 45 MiB RSS in its first six idle minutes), and every
// reconnect started over. With a zero buffer the stream commits at its
// first message: a failure to open it is still retried, a broken stream is
// reopened by writeLoop as before.
var noReplay = grpc.MaxRetryRPCBufferSize(0)

// outgoing adds the cluster, sender and formation headers to ctx. The
// formation id is read now: a stream opened before the node got one carries
// none, and writeLoop reopens it.
func (p *peer) outgoing(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx,
		mdCluster, p.t.cfg.ClusterID,
		mdFrom, strconv.FormatUint(p.t.cfg.LocalID, 10),
		mdFormation, p.t.Formation(),
		mdVersion, p.t.cfg.Version)
}

// stop cancels the peer's streams, waits for its goroutines and closes the
// connection. Queued messages are discarded without reports.
func (p *peer) stop() {
	p.raftMu.Lock()
	p.stopped = true // no goroutine starts after this, so Wait below sees them all
	p.raftMu.Unlock()
	p.cancel()
	p.wg.Wait()
	_ = p.conn.Close()
}

// enqueue adds one batch without blocking; false means the queue is full
// or the peer is stopping.
func (p *peer) enqueue(batch []wireMsg) bool {
	if !p.raftSide() {
		return false
	}
	n := int64(len(batch))
	if p.pending.Add(n) > int64(p.t.cfg.QueueSize) {
		p.pending.Add(-n)
		return false
	}
	select {
	case p.queue <- batch:
		return true
	default: // unreachable while pending is accurate; stay non-blocking anyway
		p.pending.Add(-n)
		return false
	}
}

// enqueueSnapshot hands a MsgSnap to the snapshot sender without blocking.
// The message is cloned so the caller keeps ownership of m.
func (p *peer) enqueueSnapshot(m *raftpb.Message) bool {
	if !p.raftSide() {
		return false
	}
	select {
	case p.snaps <- proto.Clone(m).(*raftpb.Message):
		return true
	default:
		return false
	}
}

// maxKeptBatchMsgs is the most messages' room the writer keeps in its
// reused batch between sends (24 B each).
const maxKeptBatchMsgs = 1024

// writeLoop owns the peer's message stream. It waits for queued batches,
// coalesces everything queued into gRPC messages below MaxMsgSize and sends
// them. On a stream error it reports the peer unreachable, drops what it was
// sending and redials with backoff on the next batch.
func (p *peer) writeLoop() {
	defer p.wg.Done()
	var (
		stream  transportpb.Raft_StreamClient
		cancel  context.CancelFunc = func() {}
		carry   []wireMsg          // messages taken from the queue but not yet sent
		backoff = p.t.cfg.minRedial()
		// streamGen: the formation generation the stream was opened in.
		streamGen uint64
	)
	defer func() { cancel() }()
	// Open the stream at once, before there is anything to send: the peer
	// hears this member (heardFrom), so a leader backing off from redialling
	// a member that was down redials it now, and its heartbeats reach a
	// restarted or new member within a heartbeat instead of after the
	// member's first election timeout. A failure here is what a failure on
	// the first batch would be, without the wait: the first batch redials.
	if s, sc, gen, err := p.openStream(); err != nil {
		p.streamFailed(err, 0)
	} else {
		stream, cancel, streamGen = s, sc, gen
	}
	limit := p.t.cfg.MaxMsgSize
	// A batch fills one receive window of the peer's stream (it reads on
	// while the next arrives); a message larger than that goes alone.
	target := min(limit, serverStreamWindow-grpcSlack)
	// batch is reused from one send to the next: gRPC encodes it inside
	// Send (the codec's Marshal), and nothing reads it after Send returns
	// (the transport installs no stats handler, which could).
	batch := &transportpb.Batch{}
	for {
		// Let the sent messages' bytes go before waiting; a batch grown
		// large by a burst is not kept.
		clear(batch.Msgs)
		batch.Msgs = batch.Msgs[:0]
		if cap(batch.Msgs) > maxKeptBatchMsgs {
			batch.Msgs = nil
		}
		if len(carry) == 0 {
			select {
			case <-p.ctx.Done():
				return
			case b := <-p.queue:
				p.pending.Add(-int64(len(b)))
				carry = b
			}
		}
		// Coalesce: fill one gRPC message from carry and the queue, within
		// the target size and the receiver's message, entry and decoding
		// limits (limits.go).
		size, wire, ents := 0, 0, 0
		for {
			for len(carry) > 0 && (len(batch.Msgs) == 0 || (size+len(carry[0].b) <= target &&
				len(batch.Msgs) < maxBatchMsgs && ents+carry[0].ents <= maxBatchEntries &&
				!decodeAmplified(wire+len(carry[0].b), len(batch.Msgs)+1, ents+carry[0].ents))) {
				if len(carry[0].b) > limit || carry[0].ents > maxMsgEntries {
					p.t.log.Error("transport: message over MaxMsgSize or the entry limit dropped",
						"peer", views.MemberID(p.id), "size", len(carry[0].b), "max", limit, "entries", carry[0].ents)
					carry = carry[1:]
					continue
				}
				batch.Msgs = append(batch.Msgs, carry[0].b)
				size += len(carry[0].b) + 8 // rough framing overhead
				wire += len(carry[0].b)
				ents += carry[0].ents
				carry = carry[1:]
			}
			if len(carry) > 0 {
				break
			}
			select {
			case b := <-p.queue:
				p.pending.Add(-int64(len(b)))
				carry = b
				continue
			default:
			}
			break
		}
		if len(batch.Msgs) == 0 {
			continue
		}
		if stream != nil && streamGen != p.t.form.Gen() {
			// The node got its formation id: reopen so the header says so.
			_ = stream.CloseSend()
			cancel()
			stream = nil
		}
		if stream == nil {
			s, sc, gen, err := p.openStream()
			if err != nil {
				p.streamFailed(err, len(batch.Msgs))
				carry = nil
				if !p.sleep(&backoff) {
					return
				}
				continue
			}
			stream, cancel, streamGen = s, sc, gen
			p.opened()
		}
		if err := stream.Send(batch); err != nil {
			if errors.Is(err, io.EOF) {
				// The server ended the stream; its status says why.
				_, err = stream.CloseAndRecv()
			}
			cancel()
			stream = nil
			p.streamFailed(err, len(batch.Msgs))
			carry = nil
			if !p.sleep(&backoff) {
				return
			}
			continue
		}
		backoff = p.t.cfg.minRedial()
	}
}

// openStream opens the peer's message stream in the current formation
// generation; cancel ends it.
func (p *peer) openStream() (stream transportpb.Raft_StreamClient, cancel context.CancelFunc, gen uint64, err error) {
	gen = p.t.form.Gen()
	sctx, sc := context.WithCancel(p.ctx)
	octx := p.outgoing(sctx)
	if d := p.t.cfg.FormationDetail; d != "" {
		// Streams are opened rarely: they carry what the formation id
		// stands for, so a refusing receiver can say what differs.
		octx = metadata.AppendToOutgoingContext(octx, mdFormationDetail, d)
	}
	s, err := p.rpc.Stream(octx, noReplay)
	if err != nil {
		sc()
		return nil, nil, 0, err
	}
	return s, sc, gen, nil
}

// streamFailed logs a failed stream and reports the peer unreachable.
func (p *peer) streamFailed(err error, dropped int) {
	if p.ctx.Err() != nil {
		return // stopping; not the peer's fault
	}
	if detail, foreign := netrules.ForeignRefusal(err); foreign {
		// A member of another formed cluster: it stays foreign, so say it once.
		if !p.foreign.Swap(true) {
			if f := p.t.cfg.OnForeignPeer; f != nil {
				f(p.id, detail, true) // the node says it, with what it knows
			} else {
				p.t.log.Warn("transport: peer belongs to another formed cluster; not sending to it", "peer", views.MemberID(p.id), "addr", p.addr, "err", err)
			}
		}
	} else if status.Code(err) == codes.PermissionDenied {
		p.t.log.Warn("transport: peer rejected stream", "peer", views.MemberID(p.id), "addr", p.addr, "err", err)
	} else {
		p.t.log.Debug("transport: stream to peer failed", "peer", views.MemberID(p.id), "addr", p.addr,
			"dropped", dropped, "err", err)
	}
	// Backing off from here on, not only once sleep starts: a peer that
	// reaches this node in between (the raft layer hears of the failure
	// first, and a restarted follower may answer at once) must still wake
	// the writer, or it waits out the whole backoff.
	p.backingOff.Store(true)
	p.t.cfg.Handler.ReportUnreachable(p.id)
}

// sleep waits for the current backoff (doubling it up to maxRedial), or
// until the peer is heard from (then the backoff starts over), or returns
// false when the peer is stopped.
func (p *peer) sleep(d *time.Duration) bool {
	timer := time.NewTimer(*d)
	defer timer.Stop()
	*d = min(*d*2, p.t.cfg.maxRedial())
	p.backingOff.Store(true) // until a stream opens (opened), not only while asleep
	select {
	case <-p.ctx.Done():
		return false
	case <-timer.C:
		return true
	case <-p.heard:
		*d = p.t.cfg.minRedial()
		p.awaitConnected()
		return true
	}
}

// awaitConnected waits, up to DialTimeout, for the connection that
// heardFrom woke to come up (or to fail again): a stream opened while gRPC
// is still reconnecting fails at once (the RPC is fail-fast), and the writer
// would back off again, 50, 100, 200, 400 ms — the 0.77 s a new member
// waited for its leader's first heartbeat.
func (p *peer) awaitConnected() {
	ctx, cancel := context.WithTimeout(p.ctx, p.t.cfg.DialTimeout)
	defer cancel()
	p.conn.Connect()
	connecting := false
	for {
		switch s := p.conn.GetState(); s {
		case connectivity.Ready, connectivity.Shutdown:
			return
		case connectivity.TransientFailure:
			if connecting {
				return // tried since the wake, and failed: back off as before
			}
			fallthrough
		default:
			connecting = connecting || s == connectivity.Connecting
			if !p.conn.WaitForStateChange(ctx, s) {
				return
			}
		}
	}
}

// opened ends a backoff once a stream to the peer is open again. Until then
// the writer counts as backing off, asleep or not: the peer may reach this
// node while the writer waits for the next batch to redial, and that must
// reset gRPC's connection backoff and cut the next sleep short as it would
// mid-sleep (a restarted member greets its peers once, right after its
// start, and says nothing more until its first election timeout).
func (p *peer) opened() {
	p.backingOff.Store(false)
	select {
	case <-p.heard: // a wake that came while the stream was opening
	default:
	}
}

// heardFrom tells a peer's writer, if it is waiting to redial, that the peer
// just reached this node: a member that restarted is up again, so the
// stream is redialled now, and gRPC's own connection backoff is reset,
// instead of after a backoff that grew while the peer was down (up to
// maxRedial on each layer). The leader's heartbeats then reach a restarted
// follower as soon as it says anything, not seconds later.
func (t *Transport) heardFrom(id uint64) {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	if p == nil || !p.backingOff.Load() {
		return
	}
	p.conn.ResetConnectBackoff()
	select {
	case p.heard <- struct{}{}:
	default:
	}
}
