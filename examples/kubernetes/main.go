// Command kubernetes is the member binary of the Kubernetes example: one
// lockraft replica per pod, embedded in a tiny HTTP service, as a real
// service would embed it. See README.md beside it and lockraft.yaml.
//
// It serves, on -http:
//
//	/metrics        Prometheus metrics (WithMetrics on its own registry)
//	/work?name=N    takes lock N, holds it -hold, and answers with the fencing token
//
// and on -admin-http, a port no Service exposes:
//
//	/lockraft/...   the admin handler (probes: /lockraft/healthz, /lockraft/readyz;
//	                lockraftctl -endpoint http://POD:8081/lockraft ...)
//
// Each pod's TLS identity is its own (identity.go), and a member the
// cluster removed forgets its data and rejoins as a new one
// (-rejoin-when-removed).
//
// The gossip seed is the headless Service's DNS name: it resolves to every
// pod (publishNotReadyAddresses), and lockraft re-resolves it while the
// cluster forms. Raft and gossip listen on the pod IP (-pod-ip, from the
// downward API), so that the address each member advertises is one the others
// can dial. SIGTERM closes the node gracefully: its locks go to their next
// waiters at once and leadership moves before the pod goes.
//
// This is its own small main rather than a mode of examples/cluster: that one
// is a self-contained demonstration that starts its own nodes, runs a job and
// exits with a verdict; a pod is a long-running service with one node, probes,
// metrics and a SIGTERM shutdown.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockraft/lockraft"
)

// Defaults, which the manifests must agree with (manifest_test.go checks).
const (
	defaultHTTPPort   = 8080
	defaultAdminPort  = 8081
	defaultRaftPort   = 7400
	defaultGossipPort = 7946
	defaultDataDir    = "/var/lib/lockraft/data"
	adminPrefix       = "/lockraft"
)

// config is the member's flags.
type config struct {
	podIP      string
	httpAddr   string
	raftPort   int
	gossipPort int
	dataDir    string
	seeds      string
	expect     int
	name       string
	founders   string
	tlsDir     string
	insecure   bool
	cluster    string
	hold       time.Duration
	operator   bool
	logLevel   string
	adminAddr  string
	// Per-pod identity (identity.go).
	identity  string // "cert-manager", or "" for -tls-dir's files
	issuer    string
	role      string
	certDir   string
	idFile    string
	certTTL   time.Duration
	gossipKey string
	rejoin    bool
	api       *kubeAPI // tests; nil: the pod's own
}

// newFlags binds the flags to c; the manifest test parses the container's
// args with it.
func newFlags(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("lockraft-member", flag.ContinueOnError)
	fs.StringVar(&c.podIP, "pod-ip", os.Getenv("POD_IP"), "address raft and gossip listen on and advertise (the pod IP; default $POD_IP)")
	fs.StringVar(&c.httpAddr, "http", fmt.Sprintf(":%d", defaultHTTPPort), "HTTP address: admin handler under "+adminPrefix+", /metrics, /work")
	fs.IntVar(&c.raftPort, "raft-port", defaultRaftPort, "raft gRPC port")
	fs.IntVar(&c.gossipPort, "gossip-port", defaultGossipPort, "gossip port (TCP and UDP)")
	fs.StringVar(&c.dataDir, "data", defaultDataDir, "data directory (a persistent volume)")
	fs.StringVar(&c.seeds, "seeds", "", "comma-separated gossip seeds, host:port; a DNS name may stand for many pods")
	fs.IntVar(&c.expect, "expect", 3, "members to see before forming the cluster (the StatefulSet's replicas)")
	fs.StringVar(&c.name, "name", os.Getenv("POD_NAME"), "this member's gossip name (the pod name; default $POD_NAME)")
	fs.StringVar(&c.founders, "founders", "", "comma-separated gossip names of the members that form the cluster (the StatefulSet's pods name-0..name-(replicas-1)); the same list on every member")
	fs.StringVar(&c.tlsDir, "tls-dir", "", "directory with ca.pem, <name>.pem, <name>-key.pem (mutual TLS between members) and gossip.key (the gossip key, base64)")
	fs.BoolVar(&c.insecure, "insecure", false, "serve without TLS and gossip without a key off loopback (not for production)")
	fs.StringVar(&c.cluster, "cluster", "lockraft-example", "cluster id")
	fs.DurationVar(&c.hold, "hold", 100*time.Millisecond, "how long /work holds its lock")
	fs.BoolVar(&c.operator, "operator-actions", false, "let the admin handler transfer leadership and remove members")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.adminAddr, "admin-http", fmt.Sprintf(":%d", defaultAdminPort), "HTTP address of the admin handler (under "+adminPrefix+") and the probes: its own port, on no Service")
	fs.StringVar(&c.identity, "identity", "", `"cert-manager": make a key in memory and have cert-manager's -issuer sign this member's certificate (-role, the id in -id-file), renewed before it ends; "": the files of -tls-dir`)
	fs.StringVar(&c.issuer, "issuer", "lockraft-example-ca", "the cert-manager Issuer (in the pod's namespace) that signs member certificates")
	fs.StringVar(&c.role, "role", "", "this member's role in its certificate: voter or light")
	fs.StringVar(&c.certDir, "cert-dir", "/run/lockraft/tls", "a memory-backed directory for this pod's own key and certificate")
	fs.StringVar(&c.idFile, "id-file", "", "the file keeping this member's raft id (on the pod's volume for a voter; made at random the first time)")
	fs.DurationVar(&c.certTTL, "cert-ttl", 7*24*time.Hour, "the member certificate's lifetime (renewed in its last third)")
	fs.StringVar(&c.gossipKey, "gossip-key", "", "file with the gossip key, base64 (with -identity)")
	fs.BoolVar(&c.rejoin, "rejoin-when-removed", false, "once the cluster has removed this member (ErrRemoved), delete its data directory and -id-file and exit, so that the restarted container joins as a new member")
	return fs
}

func main() {
	var c config
	if err := newFlags(&c).Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, c, nil); err != nil {
		fmt.Fprintln(os.Stderr, "lockraft-member:", err)
		os.Exit(1)
	}
}

// run starts the member and serves until ctx ends, then closes the node.
// ready, if not nil, receives the HTTP address once serving (tests).
func run(ctx context.Context, c config, ready chan<- string) error {
	if c.podIP == "" {
		return errors.New("-pod-ip (or $POD_IP) is required: raft and gossip must advertise an address the other pods can dial")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return fmt.Errorf("-log-level: %v", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var seeds []string
	for _, s := range strings.Split(c.seeds, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	var founders []string
	for _, f := range strings.Split(c.founders, ",") {
		if f = strings.TrimSpace(f); f != "" {
			founders = append(founders, f)
		}
	}
	opts := []lockraft.Option{
		lockraft.WithDataDir(c.dataDir),
		lockraft.WithClusterID(c.cluster),
		lockraft.WithListenAddr(net.JoinHostPort(c.podIP, strconv.Itoa(c.raftPort))),
		lockraft.WithGossip(lockraft.Gossip{BindAddr: c.podIP, BindPort: c.gossipPort, Name: c.name,
			Founders: founders, BootstrapExpect: c.expect}),
		lockraft.WithLogger(log),
		lockraft.WithMetrics(reg),
	}
	switch {
	case c.identity == "cert-manager":
		ident, err := c.newIdentity()
		if err != nil {
			return err
		}
		ictx, icancel := context.WithTimeout(ctx, 2*time.Minute)
		notAfter, err := ident.issue(ictx)
		icancel()
		if err != nil {
			return err
		}
		log.Info("member certificate issued", "id", lockraft.MemberID(ident.id), "role", ident.role, "not_after", notAfter)
		go ident.renew(ctx, notAfter, log.Warn)
		key, err := readGossipKey(c.gossipKey)
		if err != nil {
			return fmt.Errorf("-gossip-key: %w", err)
		}
		ca, cert, keyFile := ident.files()
		opts = append(opts, lockraft.WithTLSFiles(ca, cert, keyFile), lockraft.WithGossipKeys(key))
	case c.identity != "":
		return fmt.Errorf("-identity %q: want cert-manager or nothing", c.identity)
	case c.tlsDir != "":
		key, err := readGossipKey(filepath.Join(c.tlsDir, "gossip.key"))
		if err != nil {
			return fmt.Errorf("-tls-dir: %w", err)
		}
		opts = append(opts,
			lockraft.WithTLSFiles(filepath.Join(c.tlsDir, "ca.pem"), filepath.Join(c.tlsDir, c.name+".pem"),
				filepath.Join(c.tlsDir, c.name+"-key.pem")),
			lockraft.WithGossipKeys(key))
	case c.insecure:
		opts = append(opts, lockraft.WithInsecure())
	}
	n, err := lockraft.Join(seeds, opts...)
	if err != nil {
		if errors.Is(err, lockraft.ErrRemoved) && c.rejoin {
			return c.forget(err)
		}
		return err
	}
	var adminOpts []lockraft.AdminOption
	if c.operator {
		adminOpts = append(adminOpts, lockraft.WithOperatorActions())
	}
	// The admin handler and the probes on their own port, which no Service
	// exposes: its views name lock owners. Authorisation is still this
	// service's job: in a real service, wrap it in its authentication.
	amux := http.NewServeMux()
	amux.Handle(adminPrefix+"/", http.StripPrefix(adminPrefix, n.AdminHandler(adminOpts...)))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if name == "" {
			name = "example/work"
		}
		wctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		l, err := n.Lock(wctx, name)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer l.Unlock(context.Background())
		select {
		case <-time.After(c.hold):
		case <-l.Context().Done():
			http.Error(w, "lock lost: "+context.Cause(l.Context()).Error(), http.StatusConflict)
			return
		}
		fmt.Fprintf(w, "did %s with token %d on member %s\n", name, l.Token(), n.ID())
	})
	ln, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		n.Close(context.Background())
		return err
	}
	aln, err := net.Listen("tcp", c.adminAddr)
	if err != nil {
		ln.Close()
		n.Close(context.Background())
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	asrv := &http.Server{Handler: amux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go asrv.Serve(aln)
	log.Info("member serving", "http", ln.Addr().String(), "admin", aln.Addr().String(), "raft", n.Addr(), "gossip", n.GossipAddr(), "seeds", seeds)
	if ready != nil {
		ready <- ln.Addr().String() + " " + aln.Addr().String()
	}
	removed := make(chan error, 1)
	if c.rejoin {
		go watchRemoved(ctx, n, removed)
	}
	var gone error
	select {
	case <-ctx.Done():
	case gone = <-removed:
		log.Warn("this member was removed from the cluster; forgetting its data to rejoin as a new member", "err", gone)
	}
	// Graceful: locks to their next waiters, leadership handed over; bounded
	// well inside the pod's terminationGracePeriodSeconds.
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = n.Close(cctx)
	if errors.Is(err, lockraft.ErrUnavailable) {
		// No quorum to close the session with: the rest of the fleet is
		// stopping too (a StatefulSet scaled to zero, a rollout of every
		// pod at once). The node has stopped all the same and its locks
		// are released when the session expires; not a failed shutdown.
		log.Info("stopped without closing the session; its locks expire with it", "reason", err)
		err = nil
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	asrv.Shutdown(sctx)
	if gone != nil {
		return c.forget(gone)
	}
	return err
}

// watchRemoved reports ErrRemoved once the node says it was removed.
func watchRemoved(ctx context.Context, n *lockraft.Node, removed chan<- error) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := n.Ready(rctx)
		cancel()
		if errors.Is(err, lockraft.ErrRemoved) {
			removed <- err
			return
		}
	}
}

// forget deletes a removed member's data directory and id file, and
// returns why (the process exits non-zero; Kubernetes restarts the
// container, which joins as a new member with a new id and certificate).
// Safe because removal is final and was decided by the cluster: a removed
// id is never a member again, so its log and lock table serve no one, it
// holds no lock (its session ended with it), and a quorum never counted on
// its data once the configuration without it committed. Nothing the
// cluster acknowledged is lost.
func (c config) forget(why error) error {
	if err := os.RemoveAll(c.dataDir); err != nil {
		return errors.Join(why, err)
	}
	if c.idFile != "" {
		if err := os.Remove(c.idFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return errors.Join(why, err)
		}
	}
	return fmt.Errorf("removed from the cluster, data forgotten; restart to join as a new member: %w", why)
}

// newIdentity is -identity cert-manager's identity for this pod.
func (c config) newIdentity() (*identity, error) {
	if c.role != "voter" && c.role != "light" {
		return nil, fmt.Errorf("-role %q: want voter or light", c.role)
	}
	if c.idFile == "" {
		return nil, errors.New("-identity cert-manager needs -id-file")
	}
	api := c.api
	if api == nil {
		var err error
		if api, err = inClusterAPI(); err != nil {
			return nil, err
		}
	}
	id, err := memberID(c.idFile)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.certDir, 0o700); err != nil {
		return nil, err
	}
	return &identity{api: api, issuer: c.issuer, cluster: c.cluster, id: id, role: c.role, pod: c.name,
		dir: c.certDir, ttl: c.certTTL}, nil
}

func readGossipKey(path string) ([]byte, error) {
	b64, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b64)))
	if err != nil {
		return nil, fmt.Errorf("%s must hold a base64 key (openssl rand -base64 32): %w", path, err)
	}
	return key, nil
}
