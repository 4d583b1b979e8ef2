// Package transport carries raft messages, snapshot files and opaque
// node-to-node calls between lockraft nodes over gRPC.
//
// Each node runs one Transport. For every peer it keeps one long-lived
// client stream fed by a writer goroutine from a bounded queue, so a slow or
// dead peer never blocks the caller: Send drops and reports the peer
// unreachable instead. Snapshots (MsgSnap) travel on their own RPC together
// with the snapshot file, so a multi-MiB transfer never delays heartbeats.
// Every stream, snapshot and call carries the cluster id and is rejected by a
// node of another cluster.
//
// The transport knows nothing about raft's state: it delivers what arrives to
// a Handler and reports failures back through it. It holds no lock semantics.
package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// Errors returned by the transport. Match them with errors.Is; most are wrapped
// with detail.
var (
	// ErrClosed is returned by Call after Close.
	ErrClosed = errors.New("transport: closed")
	// ErrUnknownPeer is returned by Call for an id that was never added with
	// AddPeer, or was removed.
	ErrUnknownPeer = errors.New("transport: unknown peer")
	// ErrClusterMismatch is returned by Call when the remote node belongs to
	// another cluster (or, seen from the server, when a peer of another cluster
	// connects; the server answers with codes.PermissionDenied).
	ErrClusterMismatch = errors.New("transport: cluster id mismatch")
	// ErrInvalidConfig is returned by New when the Config is unusable.
	ErrInvalidConfig = errors.New("transport: invalid config")
	// ErrSnapshotChecksum is the cause of a rejected snapshot transfer whose
	// size or SHA-256 did not match what the sender announced.
	ErrSnapshotChecksum = errors.New("transport: snapshot checksum mismatch")
)

// Defaults for the zero values in Config.
const (
	DefaultQueueSize   = 4096
	DefaultMaxMsgSize  = 4 << 20
	DefaultDialTimeout = 5 * time.Second

	// snapshotChunkSize is the file bytes carried per snapshot chunk.
	snapshotChunkSize = 512 << 10
	// connWindows is how many stream windows one connection's window holds:
	// the message stream and, beside it, a snapshot or a call.
	connWindows = 2
	// grpcSlack is added to MaxMsgSize for gRPC's send/receive limits: the
	// batch framing and a single message that nearly fills MaxMsgSize must fit.
	grpcSlack = 64 << 10
)

// Handler is implemented by the node. No method may block for long: the node
// is expected to forward into its own loop. Methods are called from transport
// goroutines, concurrently for different peers.
type Handler interface {
	// Receive is called with a batch of raft messages that arrived from one
	// peer, in the order that peer sent them. Every message has To == the local
	// id and From == the stream's authenticated peer id; others are dropped
	// before. The transport does not touch msgs after the call; the handler owns them.
	Receive(msgs []*raftpb.Message)
	// ReportUnreachable tells the node that messages to id were dropped (queue
	// full, unknown peer, broken stream). Forward to RawNode.ReportUnreachable.
	ReportUnreachable(id uint64)
	// ReportSnapshot tells the node how a MsgSnap to id ended. Forward to
	// RawNode.ReportSnapshot; failed maps to raft.SnapshotFailure.
	ReportSnapshot(id uint64, failed bool)
	// HandleCall serves an opaque request sent with Transport.Call by peer
	// from. ctx carries the caller's deadline. A returned error that carries a
	// gRPC status keeps its code; any other error reaches the caller as
	// codes.Unknown with its text.
	HandleCall(ctx context.Context, from uint64, method string, req []byte) ([]byte, error)
}

// Config configures a Transport. Zero values take the documented defaults.
type Config struct {
	// ClusterID is carried by every stream, snapshot and call. A peer with
	// another id is rejected with codes.PermissionDenied and a Warn log naming
	// both ids. Required.
	ClusterID string
	// LocalID is this node's raft id. Required, non-zero.
	LocalID uint64
	// ListenAddr is the address to listen on, e.g. "127.0.0.1:0". Ignored
	// when Listener is set.
	ListenAddr string
	// Listener, if set, is used instead of ListenAddr. The Transport owns it
	// and closes it on Close.
	Listener net.Listener
	// SnapshotDir holds snapshot files named by SnapshotPath. Outgoing MsgSnap
	// read their file from here, incoming ones are stored here. Created if
	// missing. Required.
	SnapshotDir string
	// Handler receives messages and reports. Required.
	Handler Handler
	// Logger gets warnings (rejected peers, broken streams). nil discards.
	Logger *slog.Logger
	// QueueSize bounds the messages waiting per peer (default 4096). Beyond it
	// Send drops and reports the peer unreachable; raft retries on its own,
	// so a small queue costs retransmissions, a large one memory and latency.
	QueueSize int
	// MaxMsgSize bounds one gRPC message (default 4 MiB). Queued batches are
	// coalesced up to this size. A single raft message larger than this is
	// dropped; keep raft's MaxSizePerMsg well below it. It also sizes the
	// gRPC flow-control windows: at least 1 MiB per stream, one batch per
	// stream and two per connection.
	MaxMsgSize int
	// ServerTLS and ClientTLS enable (mutual) TLS. nil means plaintext, meant
	// for the loopback quick start only.
	ServerTLS, ClientTLS *tls.Config
	// VerifyPeer, if set and ServerTLS is set, is called for every stream,
	// snapshot and call with the id the peer claims and its verified TLS
	// state; a non-nil error rejects the peer with codes.PermissionDenied.
	// Use it to check that the certificate names node id.
	VerifyPeer func(id uint64, state tls.ConnectionState) error
	// DialTimeout bounds connection establishment to a peer (default 5 s).
	DialTimeout time.Duration
	// Version is this node's software version, sent with every stream,
	// snapshot and call so that peers learn it (PeerVersion). Optional.
	Version string
}

// streamWindow is the gRPC flow-control window of each stream, in both
// directions: one full batch (MaxMsgSize) fits without waiting for a window
// update. A fixed window also turns off gRPC's bandwidth estimator, which
// otherwise answers nearly every received batch with a PING (and the sender
// with a PING ack): on a stream of small raft batches that doubled the
// write syscalls per message, each a loopback TCP send and receive
// (TestStreamReceiverDoesNotPing).
func (c *Config) streamWindow() int32 {
	return int32(min(max(c.MaxMsgSize+grpcSlack, 1<<20), math.MaxInt32/connWindows))
}

// SnapshotPath is where the snapshot file for raft index index lives in dir.
func SnapshotPath(dir string, index uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%016x.snap", index))
}

func (c *Config) validate() error {
	switch {
	case c.ClusterID == "":
		return fmt.Errorf("%w: ClusterID is empty", ErrInvalidConfig)
	case c.LocalID == 0:
		return fmt.Errorf("%w: LocalID is 0", ErrInvalidConfig)
	case c.Listener == nil && c.ListenAddr == "":
		return fmt.Errorf("%w: neither ListenAddr nor Listener is set", ErrInvalidConfig)
	case c.SnapshotDir == "":
		return fmt.Errorf("%w: SnapshotDir is empty", ErrInvalidConfig)
	case c.Handler == nil:
		return fmt.Errorf("%w: Handler is nil", ErrInvalidConfig)
	case c.QueueSize < 0:
		return fmt.Errorf("%w: QueueSize %d < 0", ErrInvalidConfig, c.QueueSize)
	case c.MaxMsgSize < 0:
		return fmt.Errorf("%w: MaxMsgSize %d < 0", ErrInvalidConfig, c.MaxMsgSize)
	case c.DialTimeout < 0:
		return fmt.Errorf("%w: DialTimeout %v < 0", ErrInvalidConfig, c.DialTimeout)
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = DefaultMaxMsgSize
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// Transport connects one raft node to its peers. All methods are safe for
// concurrent use.
type Transport struct {
	cfg    Config
	log    *slog.Logger
	lis    net.Listener
	server *grpc.Server

	mu     sync.RWMutex
	peers  map[uint64]*peer
	closed bool

	serveDone chan struct{}
	closeOnce sync.Once

	versions sync.Map // peer id -> the Version its last authenticated RPC carried (version.go)

	// snapshotChunkHook, set only by tests, sees each outgoing snapshot
	// chunk's data before it is sent and may modify it.
	snapshotChunkHook func(data []byte)
}

// New validates cfg, starts listening and serving, and returns the
// Transport. Peers are added with AddPeer.
func New(cfg Config) (*Transport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.SnapshotDir, 0o700); err != nil {
		return nil, fmt.Errorf("transport: snapshot dir: %w", err)
	}
	lis := cfg.Listener
	if lis == nil {
		var err error
		lis, err = net.Listen("tcp", cfg.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("transport: listen: %w", err)
		}
	}
	t := &Transport{
		cfg:       cfg,
		log:       cfg.Logger.With("local", cfg.LocalID),
		lis:       lis,
		peers:     make(map[uint64]*peer),
		serveDone: make(chan struct{}),
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMsgSize + grpcSlack),
		// Close waits for handlers, so no Handler method runs after it.
		grpc.WaitForHandlers(true),
		grpc.InitialWindowSize(cfg.streamWindow()),
		grpc.InitialConnWindowSize(connWindows * cfg.streamWindow()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             5 * time.Second, // below the clients' Time (10 s)
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    10 * time.Second,
			Timeout: 5 * time.Second,
		}),
	}
	if cfg.ServerTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.ServerTLS)))
	}
	t.server = grpc.NewServer(opts...)
	transportpb.RegisterRaftServer(t.server, &server{t: t})
	go func() {
		defer close(t.serveDone)
		if err := t.server.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.log.Error("transport: serve", "err", err)
		}
	}()
	return t, nil
}

// Addr returns the address the Transport actually listens on.
func (t *Transport) Addr() string { return t.lis.Addr().String() }

// AddPeer makes peer id reachable at addr. It is idempotent; calling it with
// a different addr closes the old connection and connects to the new one.
// It does not block on the network: connections are made lazily.
func (t *Transport) AddPeer(id uint64, addr string) {
	t.mu.Lock()
	if t.closed || id == t.cfg.LocalID {
		t.mu.Unlock()
		return
	}
	old := t.peers[id]
	if old != nil && old.addr == addr {
		t.mu.Unlock()
		return
	}
	p, err := newPeer(t, id, addr)
	if err != nil {
		delete(t.peers, id)
		t.log.Error("transport: add peer", "peer", id, "addr", addr, "err", err)
	} else {
		t.peers[id] = p
	}
	t.mu.Unlock()
	if old != nil {
		old.stop()
	}
}

// RemovePeer forgets peer id and stops its goroutines; messages to it are
// then reported unreachable. Unknown ids are ignored.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

// Close stops the server and every peer and waits for the transport's
// goroutines, including running server handlers, to exit: once it returns no
// Handler method is called again. A HandleCall that ignores its ctx delays
// Close. Queued messages are discarded without reports. Close is idempotent
// and returns nil. After Close, Send drops silently and Call returns
// ErrClosed.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		peers := t.peers
		t.peers = make(map[uint64]*peer)
		t.mu.Unlock()
		for _, p := range peers {
			p.stop()
		}
		t.server.Stop() // also closes the listener
		<-t.serveDone
	})
	return nil
}

func (t *Transport) peer(id uint64) (*peer, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return nil, ErrClosed
	}
	p := t.peers[id]
	if p == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownPeer, id)
	}
	return p, nil
}
