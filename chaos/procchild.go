package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node"
)

// ChildFlag is the hidden first argument with which a binary re-executes
// itself as one node process of the multi-process mode. Call MaybeChild
// first thing in main (and in TestMain).
const ChildFlag = "-chaos-child"

// MaybeChild runs the node-process side and exits if os.Args asks for it.
func MaybeChild() {
	if len(os.Args) < 2 || os.Args[1] != ChildFlag {
		return
	}
	if err := childMain(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %v\n", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// event is one line a node process writes on stdout for the parent.
type event struct {
	T      string    `json:"t"` // begin, end, apply, idle
	K      int       `json:"k,omitempty"`
	Client int       `json:"c,omitempty"`
	Kind   OpKind    `json:"kind,omitempty"`
	Name   string    `json:"name,omitempty"`
	Owner  string    `json:"owner,omitempty"`
	Time   int64     `json:"time,omitempty"`
	Held   int64     `json:"held,omitempty"`
	Out    Outcome   `json:"out,omitempty"`
	Token  uint64    `json:"tok,omitempty"`
	Err    string    `json:"err,omitempty"`
	Index  uint64    `json:"i,omitempty"`
	Digest string    `json:"d,omitempty"`
	Grants []grant   `json:"g,omitempty"`
	Life   []lifeRec `json:"l,omitempty"`
}

type fenceReq struct {
	Op    string `json:"op"` // enter, write, exit, lost
	Sec   string `json:"sec"`
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Token uint64 `json:"token"`
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 64,
	}}
}

type child struct {
	id, inc  uint64
	epoch    int64
	out      sync.Mutex
	enc      *json.Encoder
	store    *http.Client
	n        *node.Node
	opts     WorkloadOptions
	seed     uint64
	nextK    int
	kmu      sync.Mutex
	stopOnce sync.Once
}

func (c *child) now() int64 { return time.Now().UnixNano() - c.epoch }

func (c *child) emit(e event) {
	c.out.Lock()
	c.enc.Encode(e) // one write on an unbuffered pipe
	c.out.Unlock()
}

func (c *child) fence(r fenceReq) bool {
	b, _ := json.Marshal(r)
	for {
		resp, err := c.store.Post("http://parent/fence", "application/json", bytes.NewReader(b))
		if err != nil {
			time.Sleep(10 * time.Millisecond) // the parent is always there
			continue
		}
		var ok bool
		json.NewDecoder(resp.Body).Decode(&ok)
		resp.Body.Close()
		return ok
	}
}

func childMain(args []string) error {
	fs := flag.NewFlagSet("chaos-child", flag.ContinueOnError)
	id := fs.Uint64("id", 0, "")
	inc := fs.Uint64("inc", 1, "")
	members := fs.String("members", "", "id=addr,...")
	dir := fs.String("dir", "", "")
	parent := fs.String("parent", "", "parent unix socket")
	ctl := fs.String("ctl", "", "own control unix socket")
	clients := fs.Int("clients", 3, "")
	names := fs.String("names", "a,b,c", "")
	seed := fs.Uint64("seed", 1, "")
	epoch := fs.Int64("epoch", 0, "")
	noClients := fs.Bool("noclients", false, "")
	gossipAddr := fs.String("gossip", "", "gossip mode: this member's gossip host:port (-members then names its gRPC address)")
	gossipSeeds := fs.String("seeds", "", "gossip mode: seeds host:port,...")
	gname := fs.String("gname", "", "gossip mode: this member's gossip name")
	founders := fs.String("founders", "", "gossip mode: the founders' gossip names, name,...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ms []node.Member
	var self string
	for _, kv := range strings.Split(*members, ",") {
		k, v, _ := strings.Cut(kv, "=")
		mid, _ := strconv.ParseUint(k, 10, 64)
		ms = append(ms, node.Member{ID: mid, Addr: v})
		if mid == *id {
			self = v
		}
	}
	c := &child{id: *id, inc: *inc, epoch: *epoch, enc: json.NewEncoder(os.Stdout), store: unixClient(*parent),
		opts: DefaultWorkload(), seed: *seed}
	c.opts.ClientsPerNode = *clients
	c.opts.Names = strings.Split(*names, ",")
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", self); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	// Insecure: with netns partitions the nodes listen on the lab's veth
	// addresses (10.77.0.x), which only the lab's namespaces can reach.
	cfg := node.Config{ID: *id, ClusterID: "chaos-procs", DataDir: *dir, Members: ms, Listener: ln, Insecure: true,
		Observer: func(r node.ApplyRecord) {
			c.emit(event{T: "apply", Index: r.Index, Digest: digest(r), Grants: grantsOf(r), Life: lifeOf(r)})
		}}
	if *gossipAddr != "" {
		// Gossip mode (rolling restarts, procroll.go): the raft id is the one
		// in the data directory, the gossip and gRPC ports are fixed.
		host, port, _ := net.SplitHostPort(*gossipAddr)
		p, _ := strconv.Atoi(port)
		var seeds []string
		if *gossipSeeds != "" {
			seeds = strings.Split(*gossipSeeds, ",")
		}
		cfg.ID, cfg.Members = 0, nil
		cfg.Gossip = &node.GossipConfig{Seeds: seeds, BindAddr: host, BindPort: p, Name: *gname,
			Founders: strings.Split(*founders, ","),
			Timing:   membership.FastTiming(), ReconcileEvery: 100 * time.Millisecond,
			Thresholds: membership.Thresholds{StabilizeFor: 300 * time.Millisecond, DeadVoterAfter: 30 * time.Second,
				DeadLearnerAfter: 30 * time.Second}}
	}
	if d := os.Getenv("LOCKRAFT_CHAOS_NODELOG"); d != "" {
		// Diagnostics: this process's node log, one file per incarnation.
		if f, err := os.Create(filepath.Join(d, fmt.Sprintf("n%d-%d.log", *id, *inc))); err == nil {
			cfg.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
	}
	FastConfig(&cfg)
	n, err := node.Start(cfg)
	if err != nil {
		return err
	}
	c.n = n

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if !*noClients {
		for k := 0; k < *clients; k++ {
			wg.Add(1)
			go func() { defer wg.Done(); c.client(ctx, k) }()
		}
	}
	stop := func() {
		c.stopOnce.Do(func() {
			cancel()
			wg.Wait()
			c.emit(event{T: "idle"})
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/leader", func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(n.Leader()) })
	mux.HandleFunc("/stop", func(w http.ResponseWriter, r *http.Request) { stop(); w.Write([]byte("true")) })
	// answer serves path with get's answer as JSON (503 and the error if it
	// fails); get has timeout and the request's query.
	answer := func(path string, timeout time.Duration, get func(ctx context.Context, q url.Values) (any, error)) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			qctx, qc := context.WithTimeout(r.Context(), timeout)
			defer qc()
			v, err := get(qctx, r.URL.Query())
			if err != nil {
				http.Error(w, err.Error(), 503)
				return
			}
			json.NewEncoder(w).Encode(v)
		})
	}
	answer("/leftovers", time.Second, func(ctx context.Context, _ url.Values) (any, error) { return Leftovers(ctx, n) })
	answer("/snapshot", time.Second, func(ctx context.Context, _ url.Values) (any, error) {
		b, idx, err := n.TableSnapshot(ctx)
		return snapResp{b, idx}, err
	})
	// Leader-churn probes (procs.go): hold a lock until killed, wait for
	// one in the background, and tell when the last keepalive left and when
	// the holder's own deadline is (UnixNano, wall clock shared by every
	// process on the host).
	answer("/probe-hold", 5*time.Second, func(ctx context.Context, q url.Values) (any, error) {
		h, err := n.Acquire(ctx, q.Get("name"), q.Get("owner"), true, 0)
		if err != nil {
			return nil, err
		}
		return h.Token(), nil
	})
	mux.HandleFunc("/probe-wait", func(w http.ResponseWriter, r *http.Request) {
		name, owner := r.URL.Query().Get("name"), r.URL.Query().Get("owner")
		go func() {
			wctx, wc := context.WithTimeout(context.Background(), time.Minute)
			defer wc()
			h, err := n.Acquire(wctx, name, owner, true, 0)
			if err != nil {
				c.emit(event{T: "probe-failed", Owner: owner, Err: err.Error()})
				return
			}
			rctx, rc := context.WithTimeout(context.Background(), 5*time.Second)
			_ = h.Release(rctx)
			rc()
		}()
		w.Write([]byte("true"))
	})
	// Rolling restarts (procroll.go): the configuration as this member sees
	// it, its raft id and whether it can serve; and a graceful Close.
	answer("/conf", time.Second, func(ctx context.Context, _ url.Values) (any, error) {
		voters, _, err := n.ConfState(ctx)
		if err != nil {
			return nil, err
		}
		rctx, rc := context.WithTimeout(ctx, 10*time.Millisecond)
		ready := n.Ready(rctx) == nil
		rc()
		return confResp{ID: n.ID(), Voters: voters, Ready: ready}, nil
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		stop()
		qctx, qc := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.Close(qctx)
		qc()
		if err != nil {
			http.Error(w, err.Error(), 503)
		} else {
			w.Write([]byte("true"))
		}
		go func() { time.Sleep(50 * time.Millisecond); os.Exit(0) }()
	})
	mux.HandleFunc("/keepalive", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode([2]int64{n.LastKeepaliveSent().UnixNano(), n.SessionDeadline().UnixNano()})
	})
	os.Remove(*ctl)
	cln, err := net.Listen("unix", *ctl)
	if err != nil {
		return err
	}
	go http.Serve(cln, mux)
	c.emit(event{T: "hello"})
	// Until the parent kills us.
	select {}
}

type confResp struct {
	ID     uint64   `json:"id"`
	Voters []uint64 `json:"voters"`
	Ready  bool     `json:"ready"`
}

type snapResp struct {
	B   []byte `json:"b"`
	Idx uint64 `json:"idx"`
}

func grantsOf(r node.ApplyRecord) []grant {
	var gs []grant
	for _, e := range r.Events {
		if e.Kind == lockfsm.EventGranted {
			gs = append(gs, grant{Name: e.Name, Owner: e.Owner, Token: e.Token})
		}
	}
	return gs
}

func (c *child) begin(client int, kind OpKind, name, owner string, held int64) int {
	c.kmu.Lock()
	c.nextK++
	k := c.nextK
	c.kmu.Unlock()
	c.emit(event{T: "begin", K: k, Client: client, Kind: kind, Name: name, Owner: owner, Time: c.now(), Held: held})
	return k
}

func (c *child) end(k int, out Outcome, token uint64, err error) int64 {
	t := c.now()
	e := event{T: "end", K: k, Out: out, Token: token, Time: t}
	if err != nil {
		e.Err = err.Error()
	}
	c.emit(e)
	return t
}

// client is Workload.client for one node process: the fencing store is the
// parent's, reached over its unix socket.
func (c *child) client(ctx context.Context, k int) {
	client := int(c.id)*100 + k
	rng := rand.New(rand.NewPCG(c.seed^(c.inc<<32), uint64(client)+1))
	for seq := 0; ctx.Err() == nil; seq++ {
		name := c.opts.Names[rng.IntN(len(c.opts.Names))]
		owner := fmt.Sprintf("c%d-%d-%d", client, c.inc, seq)
		wait := rng.Float64() >= c.opts.TryLockShare
		timeout := time.Duration(float64(c.opts.MaxWait) * (0.05 + 0.95*rng.Float64()))
		hold := time.Duration(float64(c.opts.MaxHold) * rng.Float64())
		kind := OpTryLock
		if wait {
			kind = OpLock
		}
		op := c.begin(client, kind, name, owner, 0)
		actx, cancel := context.WithTimeout(context.Background(), timeout)
		h, err := c.n.Acquire(actx, name, owner, wait, 0)
		cancel()
		var granted int64
		switch {
		case err == nil:
			granted = c.end(op, OK, h.Token(), nil)
		case !wait && errors.Is(err, lockerr.ErrLocked):
			c.end(op, Locked, 0, err)
		default:
			c.end(op, Unknown, 0, err)
		}
		if err != nil {
			if !errors.Is(err, lockerr.ErrLocked) {
				sleepCtx(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
			}
			continue
		}
		sec := fmt.Sprintf("%d/%d/%d/%d", c.id, c.inc, k, seq)
		c.fence(fenceReq{Op: "enter", Sec: sec, Name: name, Owner: owner, Token: h.Token()})
		watchDone := make(chan struct{})
		go func() {
			select {
			case <-h.Context().Done():
				c.fence(fenceReq{Op: "lost", Sec: sec})
			case <-watchDone:
			}
		}()
		for i := 0; i < 3 && h.Context().Err() == nil; i++ {
			c.fence(fenceReq{Op: "write", Sec: sec})
			if i < 2 {
				sleepCtx(h.Context(), hold/2)
			}
		}
		close(watchDone)
		c.fence(fenceReq{Op: "exit", Sec: sec})
		uop := c.begin(client, OpUnlock, name, owner, granted)
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = h.Release(rctx)
		rcancel()
		if err == nil {
			c.end(uop, OK, h.Token(), nil)
		} else {
			c.end(uop, Unknown, h.Token(), err)
		}
	}
}
