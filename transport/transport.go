// Package transport carries raft messages, snapshot files and typed
// node-to-node calls between lockraft nodes over gRPC.
//
// Each node runs one Transport. For every peer it keeps one long-lived
// client stream fed by a writer goroutine from a bounded queue, so a slow or
// dead peer never blocks the caller: Send drops and reports the peer
// unreachable instead. Snapshots (MsgSnap) travel on their own RPC together
// with the snapshot file, so a multi-MiB transfer never delays heartbeats.
//
// Security (see docs/security.md): with Config.TLS every connection is
// mutual TLS and the sender of everything that arrives is the member id its
// verified certificate names, with the role the certificate gives it
// (identity.go: voter, light, operator); without it (loopback quick start,
// or an explicit insecure mode) the sender is a self-declared header and
// every peer a voter. Every stream, snapshot and call carries the cluster
// id and is rejected by a node of another cluster. A peer is identified and
// admitted before anything it sends is decoded, with caps on connections and
// streams and budgets for decoding (admission.go, budget.go); raft traffic
// comes only from voters; a deny-list and Revoke refuse certificates and
// members (denylist.go). What a message announces is bounded before it is
// decoded (limits.go), raft messages a remote peer may never send are
// dropped here, and refusals are logged once per source and interval.
//
// The transport knows nothing about raft's state: it delivers what arrives to
// a Handler, which judges it against that state, and reports failures back
// through it. It holds no lock semantics.
//
// Fuzzing: every decoder reachable from the network has a fuzz target with a
// seed corpus under testdata/fuzz, run as ordinary tests by go test. To
// search longer, one target at a time:
//
//	go test -run '^$' -fuzz '^FuzzDecodeMessage$' -fuzztime 5m ./transport/
//
// (likewise FuzzStreamBatch, FuzzSnapshotHeader, FuzzSnapshotChunks and the
// typed requests' FuzzCall* here; FuzzRaftMessageGuard, FuzzFwd* and
// FuzzRemovedRequest in ./node/, FuzzDecodeMeta in ./membership/,
// lockfsm's FuzzApply for lock commands).
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/refuse"
	"github.com/lockraft/lockraft/internal/views"
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
	ErrClusterMismatch = netrules.ErrClusterMismatch
	// ErrInvalidConfig is returned by New when the Config is unusable.
	ErrInvalidConfig = errors.New("transport: invalid config")
	// errSnapshotChecksum is the cause of a rejected snapshot transfer whose
	// size or SHA-256 did not match what the sender announced.
	errSnapshotChecksum = errors.New("transport: snapshot checksum mismatch")
	// ErrPermissionDenied: a Calls method returns an error wrapping it when
	// the caller may not do what it asked (another member's session, a push
	// from a node that does not lead); the caller gets codes.PermissionDenied
	// and an error wrapping it.
	ErrPermissionDenied = netrules.ErrPermissionDenied
	// ErrInvalidRequest: a Calls method returns an error wrapping it for a
	// malformed request; the caller gets codes.InvalidArgument and an error
	// wrapping it.
	ErrInvalidRequest = netrules.ErrInvalidRequest
	// ErrUnauthenticated wraps a call rejected because the caller's identity
	// could not be established (no or an unusable certificate).
	ErrUnauthenticated = netrules.ErrUnauthenticated
)

// Defaults for the zero values in Config.
const (
	defaultQueueSize   = 4096
	defaultMaxMsgSize  = 4 << 20
	defaultDialTimeout = 5 * time.Second
	// defaultIdleTimeout: a connection to a peer that carried no call and no
	// stream for a minute is closed (and dialled again on the next call).
	// An idle connection still woke both ends every 10 s for gRPC's
	// keepalive ping: a light member keeps a few of them from its formation
	// and a fleet's leader one per member it ever called.
	defaultIdleTimeout = time.Minute
	// DefaultMaxSnapshotSize bounds a received snapshot file (1 GiB, about
	// ten million held locks).
	DefaultMaxSnapshotSize = 1 << 30
	// defaultMaxConns bounds the connections a transport accepts at once:
	// one from each peer (two while one reconnects), for a fleet of
	// hundreds.
	defaultMaxConns = 1024

	// maxStreams caps the concurrent RPCs of one connection (HTTP/2's
	// SETTINGS_MAX_CONCURRENT_STREAMS: a peer's further RPCs wait for a
	// slot): the message stream, a snapshot, the keepalive stream and the
	// calls of one peer (forwarded commands, pushes, status; renewals
	// queue) fit.
	maxStreams = 16
	// serverStreamWindow is the receive window of each incoming stream: what
	// a peer may send on a stream beyond what this node has read. gRPC opens
	// a stream's window to a whole message when its reader starts reading a
	// larger one, so it does not bound a message's size; it bounds what a
	// peer can park unread (a call waiting for its turn: callserve.go):
	// connsPerPeer × maxStreams × 256 KiB = 8 MiB per peer. A sender keeps
	// its batches within it (writeLoop), and at most this much of a raft
	// stream is in flight per round trip (5 MB/s of small messages at 50 ms).
	serverStreamWindow = 256 << 10

	// snapshotChunkSize is the file bytes carried per snapshot chunk.
	snapshotChunkSize = 512 << 10
	// connWindows is how many stream windows one connection's window holds:
	// the message stream and, beside it, a snapshot or a call.
	connWindows = 2
	// maxHeaderList caps a stream's header list (HTTP/2's
	// SETTINGS_MAX_HEADER_LIST_SIZE, as HPACK counts it: each field's name
	// and value and 32), in both directions: what a peer sends with a
	// stream, and the headers and trailers (an error's message) a call
	// receives. Ours are a few fields, the longest a formation detail
	// (netrules.MaxFormationDetail, 4 KiB). gRPC's default, 16 MiB, let a
	// peer make this node decode and keep about 12 MiB per open stream
	// from a few KiB on the wire, since HPACK names a repeated field in one
	// byte (TestAttackMemoryBounded): 16 calls of a light member held 150
	// MiB for as long as it kept them open.
	maxHeaderList = 64 << 10
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
	// id and From == the stream's authenticated peer id, and is of a type a
	// remote peer may send (never one of raft's local messages, never
	// MsgSnap, which comes through ReceiveSnapshot); others are dropped
	// before. The transport does not touch msgs after the call; the handler
	// owns them. The handler judges them against raft's state.
	Receive(msgs []*raftpb.Message)
	// AcceptSnapshot is asked before a snapshot's file is received: m is the
	// MsgSnap (To == local, From == the authenticated sender). A non-nil
	// error refuses the transfer before any byte is written (the sender
	// reports a failed snapshot).
	AcceptSnapshot(from uint64, m *raftpb.Message) error
	// ReceiveSnapshot hands over an accepted MsgSnap whose file, complete
	// and checked, is at file (a temporary name in SnapshotDir). On nil the
	// handler owns the file: it renames it to SnapshotPath once raft accepts
	// the snapshot, or removes it. On an error (the node could not take it:
	// busy, stopping; ctx is the transfer's) the transport removes the file
	// and the sender is told the snapshot failed, never that it arrived.
	ReceiveSnapshot(ctx context.Context, m *raftpb.Message, file string) error
	// ReportUnreachable tells the node that messages to id were dropped (queue
	// full, unknown peer, broken stream). Forward to RawNode.ReportUnreachable.
	ReportUnreachable(id uint64)
	// ReportSnapshot tells the node how a MsgSnap to id ended. Forward to
	// RawNode.ReportSnapshot; failed maps to raft.SnapshotFailure.
	ReportSnapshot(id uint64, failed bool)
	// Calls serves the typed node-to-node calls.
	Calls
}

// Calls serves the typed node-to-node calls. from is the caller's
// authenticated member id; ctx carries the caller's deadline. An error
// wrapping ErrPermissionDenied or ErrInvalidRequest reaches the caller as
// that code; one carrying a gRPC status keeps its code; context errors map
// to theirs; anything else becomes codes.Unknown with its text.
type Calls interface {
	Keepalive(ctx context.Context, from uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error)
	Renew(ctx context.Context, from uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error)
	Removed(ctx context.Context, from uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error)
	Leave(ctx context.Context, from uint64, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error)
	FwdOpen(ctx context.Context, from uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error)
	FwdPropose(ctx context.Context, from uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error)
	FwdPush(ctx context.Context, from uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error)
	FwdStatus(ctx context.Context, from uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error)
	// Inspect serves a member's read of the leader's lock table or
	// membership view (read-only), or relays an operator's leadership
	// transfer.
	Inspect(ctx context.Context, from uint64, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error)
	// Form serves a formation candidate's request to adopt its formation
	// id (a founder answers once its answer is durable).
	Form(ctx context.Context, from uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error)
	// VersionGate answers whether every member of the configuration is
	// known to run the lock catalogue (read-only; the leader answers).
	VersionGate(ctx context.Context, from uint64, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error)
	// Observe subscribes the calling light member to elections and returns
	// the changes it missed (read-only; the leader answers).
	Observe(ctx context.Context, from uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error)
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
	// coalesced up to 256 KiB or this size, whichever is smaller (one receive
	// window of the peer's stream: serverStreamWindow). A single raft message
	// larger than this is dropped; keep raft's MaxSizePerMsg well below it. It
	// also sizes the windows of this node's outgoing streams (their answers):
	// at least 1 MiB per stream, one batch per stream and two per connection.
	MaxMsgSize int
	// TLS turns on mutual TLS with member identities (tls.go). nil means
	// plaintext: every sender id is then a claim nobody checks, which is
	// safe only where nobody else can connect (loopback). The node refuses
	// to start that way on other addresses unless told to (WithInsecure).
	TLS *TLS
	// MaxSnapshotSize bounds a received snapshot file (default
	// DefaultMaxSnapshotSize). One snapshot is received at a time.
	MaxSnapshotSize int64
	// RefuseEvery is how long a refusal from one source stays quiet in the
	// log after it was logged (default refuse.DefaultInterval).
	RefuseEvery time.Duration
	// DialTimeout bounds connection establishment to a peer (default 5 s).
	DialTimeout time.Duration
	// IdleTimeout closes a peer connection after this long without a call
	// or a stream (default defaultIdleTimeout); the next call dials again.
	// Raft's message streams keep a raft peer's connection open.
	IdleTimeout time.Duration
	// Formation is this node's formation id: the identity of the formed
	// cluster it belongs to, "" if none yet (see formation.go). Carried by
	// every RPC and checked on every incoming one.
	Formation string
	// AdoptFormation, if set, is called when this node, with no formation
	// id, accepts raft traffic (a stream or a snapshot) from a node that has
	// one: that cluster is adding it. It must persist id before returning
	// (the transport then sets it); an error rejects the RPC. nil: a node
	// without an id accepts everyone and never adopts one.
	AdoptFormation func(id string) error
	// FormationDetail, if set, says what this node's formation id stands
	// for (a static cluster: its member list). It is appended to the
	// PermissionDenied status of a formation mismatch, so that the rejected
	// side can say what differs. At most 4 KiB; plain text.
	FormationDetail string
	// OnForeignPeer, if set, is called once per peer found to be of another
	// formation: when it refuses this node's stream and when this node
	// refuses its raft traffic carrying another formation id. detail is the
	// peer's FormationDetail ("" if it sent none); dialed is true when this
	// node dialed the peer's address (so the address is known to be on
	// another formation; an incoming id is only a claim). The transport
	// then leaves the logging to it. It runs on a transport goroutine and
	// must not block.
	OnForeignPeer func(id uint64, detail string, dialed bool)
	// Version is this node's software version, sent with every stream,
	// snapshot and call so that peers learn it (PeerVersion). Optional.
	Version string
	// Role is this node's role where no certificate says it: a simulated
	// network (internal/simnet) shows it to the node's peers (zero:
	// PlaintextRole). The gRPC transport ignores it: with TLS the
	// certificate says it, without TLS every peer is PlaintextRole.
	Role Role
	// AdmitRaft, if set, is asked when a peer whose certificate allows raft
	// traffic opens a raft stream or a snapshot transfer; false refuses it
	// before anything of it is read (the node: only members). It runs on the
	// connection's reading goroutine for every such RPC (not per message),
	// so it must be fast and must not block.
	AdmitRaft func(from uint64) bool
	// DenyListFile, if set, names the deny-list: certificate serials and
	// member ids refused on every handshake (denylist.go for the format).
	// It is read at start and again when it changes.
	DenyListFile string
	// MaxConns bounds the connections accepted at once, handshakes
	// included (default defaultMaxConns). Beyond it new ones are closed.
	MaxConns int

	// limits, if set, replaces the admission caps and decode budgets
	// (tests).
	limits *admissionLimits
	// redialMin and redialMax, if set, replace minRedial and maxRedial
	// (tests).
	redialMin, redialMax time.Duration
}

// minRedial and maxRedial are the shortest and longest a peer's stream
// waits to redial (the latter bounds gRPC's connection backoff too).
func (c *Config) minRedial() time.Duration {
	if c.redialMin > 0 {
		return c.redialMin
	}
	return minRedial
}

func (c *Config) maxRedial() time.Duration {
	if c.redialMax > 0 {
		return c.redialMax
	}
	return maxRedial
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
func SnapshotPath(dir string, index uint64) string { return netrules.SnapshotPath(dir, index) }

func (c *Config) validate() error {
	switch {
	case c.ClusterID == "":
		return fmt.Errorf("%w: ClusterID is empty", ErrInvalidConfig)
	case c.LocalID == 0:
		return fmt.Errorf("%w: LocalID is 0", ErrInvalidConfig)
	case len(c.FormationDetail) > netrules.MaxFormationDetail:
		return fmt.Errorf("%w: FormationDetail longer than %d bytes", ErrInvalidConfig, netrules.MaxFormationDetail)
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
	case c.IdleTimeout < 0:
		return fmt.Errorf("%w: IdleTimeout %v < 0", ErrInvalidConfig, c.IdleTimeout)
	case c.MaxSnapshotSize < 0:
		return fmt.Errorf("%w: MaxSnapshotSize %d < 0", ErrInvalidConfig, c.MaxSnapshotSize)
	case c.MaxConns < 0:
		return fmt.Errorf("%w: MaxConns %d < 0", ErrInvalidConfig, c.MaxConns)
	case ReservedID(c.LocalID):
		return fmt.Errorf("%w: LocalID %016x is reserved", ErrInvalidConfig, c.LocalID)
	}
	if c.TLS != nil {
		if err := c.TLS.validate(c.ClusterID, c.LocalID); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
	}
	if c.MaxSnapshotSize == 0 {
		c.MaxSnapshotSize = DefaultMaxSnapshotSize
	}
	if c.QueueSize == 0 {
		c.QueueSize = defaultQueueSize
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = defaultMaxMsgSize
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = defaultIdleTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = defaultMaxConns
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// Transport connects one raft node to its peers. All methods are safe for
// concurrent use.
type Transport struct {
	cfg     Config
	log     *slog.Logger
	refused *refuse.Log
	codec   codec
	lis     net.Listener
	server  *grpc.Server
	snapSem chan struct{} // one snapshot received at a time

	mu     sync.RWMutex
	peers  map[uint64]*peer
	closed bool

	serveDone chan struct{}
	closeOnce sync.Once
	stopc     chan struct{} // closed by Close: background goroutines stop
	bg        sync.WaitGroup

	recv     netrules.Receiver  // the checks of every RPC's sender (admission.go)
	form     netrules.Formation // the formation check (formation.go)
	versions sync.Map           // peer id -> the Version its last authenticated RPC carried (version.go)
	adm      *admission         // who may connect and send, and how much (admission.go)
	deny     *denyList          // Config.DenyListFile (denylist.go)

	kaMu   sync.Mutex
	kaPeer *peer // where this member's keepalives last went (keepalives.go)

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
	if err := netrules.RemoveSnapshotTemps(cfg.SnapshotDir); err != nil {
		return nil, fmt.Errorf("transport: snapshot dir: %w", err)
	}
	deny, err := loadDenyList(cfg.DenyListFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	lim := defaultLimits(cfg.MaxConns)
	if cfg.limits != nil {
		lim = *cfg.limits
	}
	lis := cfg.Listener
	if lis == nil {
		var err error
		lis, err = net.Listen("tcp", cfg.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("transport: listen: %w", err)
		}
	}
	log := cfg.Logger // the node adds its id (lockraft_node)
	t := &Transport{
		cfg:       cfg,
		log:       log,
		refused:   refuse.New(log, cfg.RefuseEvery),
		lis:       lis,
		peers:     make(map[uint64]*peer),
		serveDone: make(chan struct{}),
		snapSem:   make(chan struct{}, 1),
		adm:       newAdmission(lim),
		deny:      deny,
		stopc:     make(chan struct{}),
		form: netrules.Formation{
			Adopt:     cfg.AdoptFormation,
			Detail:    cfg.FormationDetail,
			OnForeign: cfg.OnForeignPeer,
			Log:       log,
			Name:      "transport",
		},
	}
	t.recv = netrules.Receiver{ClusterID: cfg.ClusterID, Revoked: t.adm.isRevoked, AdmitRaft: cfg.AdmitRaft, Refused: t.refused}
	t.codec = newCodec(t.refused)
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(t.serverTLS())
	}
	t.form.Init(cfg.Formation)
	opts := []grpc.ServerOption{
		grpc.Creds(guardCreds{TransportCredentials: creds, t: t}),
		grpc.ForceServerCodecV2(t.codec),
		grpc.InTapHandle(t.admitStream),
		grpc.StreamInterceptor(refuseStreams),
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.MaxHeaderListSize(maxHeaderList),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.MaxRecvMsgSize(cfg.MaxMsgSize + grpcSlack),
		// Close waits for handlers, so no Handler method runs after it.
		grpc.WaitForHandlers(true),
		// Fixed windows (which also turn gRPC's bandwidth estimator off:
		// Config.streamWindow). The connection's window is returned as data
		// arrives, so it does not bound memory; the streams' do.
		grpc.InitialWindowSize(serverStreamWindow),
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
	t.server = grpc.NewServer(opts...)
	t.server.RegisterService(&raftService, &server{t: t})
	go func() {
		defer close(t.serveDone)
		if err := t.server.Serve(admissionListener{Listener: lis, t: t}); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.log.Error("transport: serve", "err", err)
		}
	}()
	if cfg.DenyListFile != "" {
		t.bg.Add(1)
		go t.watchDenyList()
	}
	return t, nil
}

// Refusals returns how many inputs of kind were refused: "connection",
// "rpc", "raft message", "snapshot", "oversize message" (for tests and
// metrics; each kind is logged once per source and interval).
func (t *Transport) Refusals(kind string) uint64 { return t.refused.Count(kind) }

// Refuse records a refusal of the node's own (a raft message, a call it
// will not serve) in the transport's refusal log, so that one source's
// refusals share one rate limit.
func (t *Transport) Refuse(kind, source string, attrs ...any) {
	t.refused.Refuse(kind, source, attrs...)
}

// Note is Refuse at Info level, for refusals correct peers also cause now and
// then.
func (t *Transport) Note(kind, source string, attrs ...any) {
	t.refused.Note(kind, source, attrs...)
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
		t.log.Error("transport: add peer", "peer", views.MemberID(id), "addr", addr, "err", err)
	} else {
		t.peers[id] = p
	}
	t.mu.Unlock()
	if old != nil {
		old.stop()
	}
}

// Greet starts peer id's raft side (Network.Greet): its writer opens the
// stream at once.
func (t *Transport) Greet(id uint64) {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	if p != nil {
		p.raftSide()
	}
}

// removePeer forgets peer id and stops its goroutines; messages to it are
// then reported unreachable. Unknown ids are ignored.
func (t *Transport) removePeer(id uint64) {
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
		close(t.stopc)
		t.bg.Wait()
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
		return nil, fmt.Errorf("%w: %016x", ErrUnknownPeer, id)
	}
	return p, nil
}
