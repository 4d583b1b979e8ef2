package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/bench/internal/childproc"
)

// runChild runs the members named by -names (one, or several light
// members sharing this process) in this process: each joins by gossip (the
// founders m0..m4 form the cluster; everyone else seeds from m0) with its
// own data directory under -dir, prints "READY <name> <control URL>
// <gossip address>" and serves its control endpoints on a port of its own
// until the parent closes stdin.
func runChild() error {
	names := strings.Split(*flagNames, ",")
	nodes := make([]*lockraft.Node, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	var out sync.Mutex
	for i, name := range names {
		wg.Go(func() {
			n, line, err := startMember(name, len(names))
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", name, err)
				return
			}
			nodes[i] = n
			out.Lock()
			fmt.Println(line)
			out.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// The parent closes stdin to have the child close its nodes and exit.
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, n := range nodes {
		wg.Go(func() { n.Close(ctx) })
	}
	wg.Wait()
	return nil
}

// startMember joins the member name and serves its control endpoints; it
// returns its node and its READY line. members is how many share the
// process (/stats reports it, for the parent to divide the process's
// figures by).
func startMember(name string, members int) (*lockraft.Node, string, error) {
	var founders []string
	for i := range founderCount {
		founders = append(founders, fmt.Sprintf("m%d", i))
	}
	var seeds []string
	if *flagSeed != "" {
		seeds = []string{*flagSeed}
	}
	reg := prometheus.NewRegistry()
	n, err := lockraft.Join(seeds,
		lockraft.WithDataDir(filepath.Join(*flagDir, name)),
		lockraft.WithClusterID("fleet"),
		lockraft.WithListenAddr("127.0.0.1:0"),
		lockraft.WithMetrics(reg),
		lockraft.WithGossip(lockraft.Gossip{
			Name:     name,
			Founders: founders,
			Timing:   lockraft.LANGossipTiming(),
			Voters: lockraft.VoterPolicy{
				MaxVoters:      founderCount,
				MaxLearners:    maxLearners(*flagLearners),
				DeadVoterAfter: *flagDeadVoter,
			},
		}))
	if err != nil {
		return nil, "", err
	}
	c := &control{n: n}
	mux := http.NewServeMux()
	mux.Handle("/lockraft/", http.StripPrefix("/lockraft", n.AdminHandler()))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) { serveStats(w, r, members) })
	mux.HandleFunc("/load", childproc.LoadHandler(n))
	mux.HandleFunc("/seq", c.seq)
	mux.HandleFunc("/hold", c.hold)
	mux.HandleFunc("/acquire", c.acquire)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		n.Close(context.Background())
		return nil, "", err
	}
	go http.Serve(ln, mux)
	return n, fmt.Sprintf("READY %s http://%s %s", name, ln.Addr(), n.GossipAddr()), nil
}

// maxLearners maps -learners to VoterPolicy.MaxLearners, whose zero is the
// default (2) and whose negative is none.
func maxLearners(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// control is a child's lock endpoints: what the parent asks a member to do
// with its node.
type control struct {
	n    *lockraft.Node
	mu   sync.Mutex
	held []*lockraft.Lock // /hold's locks, kept until the process ends
}

// seqReply is /seq's answer.
type seqReply struct {
	Pairs  int     `json:"pairs"`
	Errors int     `json:"errors"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	Error  string  `json:"error,omitempty"` // the first failure
}

// seq serves /seq?pairs=N&prefix=X: N Lock+Unlock pairs one after the
// other on the names X/0 … X/N-1, each pair timed; the reply gives the
// median and 99th percentile of the successful pairs in microseconds.
func (c *control) seq(w http.ResponseWriter, r *http.Request) {
	pairs, _ := strconv.Atoi(r.URL.Query().Get("pairs"))
	prefix := r.URL.Query().Get("prefix")
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	var rep seqReply
	took := make([]time.Duration, 0, pairs)
	for i := range pairs {
		t0 := time.Now()
		l, err := c.n.Lock(ctx, fmt.Sprintf("%s/%d", prefix, i))
		if err == nil {
			err = l.Unlock(ctx)
		}
		if err != nil {
			rep.Errors++
			if rep.Error == "" {
				rep.Error = err.Error()
			}
			continue
		}
		took = append(took, time.Since(t0))
	}
	rep.Pairs = len(took)
	if len(took) > 0 {
		slices.Sort(took)
		rep.P50us = float64(quantile(took, 0.5).Nanoseconds()) / 1e3
		rep.P99us = float64(quantile(took, 0.99).Nanoseconds()) / 1e3
	}
	json.NewEncoder(w).Encode(rep)
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// lockReply is /hold's and /acquire's answer.
type lockReply struct {
	Error     string `json:"error,omitempty"`
	ElapsedUs int64  `json:"elapsed_us"`
	// GrantedUnixNano is this process's wall clock when Lock returned the
	// grant (the parent runs on the same machine and clock).
	GrantedUnixNano int64  `json:"granted_unix_ns,omitempty"`
	Token           uint64 `json:"token,omitempty"`
}

// hold serves /hold?name=X: Lock(X), kept until the process ends (or
// crashes); the reply comes once it is granted.
func (c *control) hold(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	rep, l := c.lock(ctx, r.URL.Query().Get("name"))
	if l != nil {
		c.mu.Lock()
		c.held = append(c.held, l)
		c.mu.Unlock()
	}
	json.NewEncoder(w).Encode(rep)
}

// acquire serves /acquire?name=X&timeout=D: Lock(X), blocking until it is
// granted or D (default 2 minutes) has passed; the reply says when it was
// granted, and the lock is released once the reply is written.
func (c *control) acquire(w http.ResponseWriter, r *http.Request) {
	timeout := 2 * time.Minute
	if s := r.URL.Query().Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rep, l := c.lock(ctx, r.URL.Query().Get("name"))
	json.NewEncoder(w).Encode(rep)
	if l != nil {
		l.Unlock(ctx)
	}
}

// lock takes name and says how it went.
func (c *control) lock(ctx context.Context, name string) (lockReply, *lockraft.Lock) {
	t0 := time.Now()
	l, err := c.n.Lock(ctx, name)
	now := time.Now()
	rep := lockReply{ElapsedUs: now.Sub(t0).Microseconds()}
	if err != nil {
		rep.Error = err.Error()
		return rep, nil
	}
	rep.GrantedUnixNano = now.UnixNano()
	rep.Token = l.Token()
	return rep, l
}

// serveStats is a child's /stats: its goroutines and its CPU time so far
// (user and system, from getrusage).
func serveStats(w http.ResponseWriter, _ *http.Request, members int) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	json.NewEncoder(w).Encode(map[string]int64{"goroutines": int64(runtime.NumGoroutine()), "cpu_us": cpu.Microseconds(),
		"members": int64(members)})
}
