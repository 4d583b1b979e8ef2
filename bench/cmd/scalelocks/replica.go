package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/bench/internal/childproc"
	"github.com/prometheus/client_golang/prometheus"
)

// serving is a replica's /serving answer: when, counted from the start of
// its process (main), Join returned, Ready returned (a leader known, its
// session open) and its first Lock+Unlock through it succeeded; 0 while
// not yet. Err is the probe's error, if it failed.
type serving struct {
	JoinUS  int64  `json:"join_us"`
	ReadyUS int64  `json:"ready_us"`
	LockUS  int64  `json:"lock_us"`
	Err     string `json:"err,omitempty"`
}

// pairsReply is a replica's /pairs answer: each sequential Lock+Unlock's
// duration, in µs, and the pairs that failed.
type pairsReply struct {
	US     []int64 `json:"us"`
	Errors int     `json:"errors"`
	Err    string  `json:"err,omitempty"`
}

// replica is one voter: it joins the static cluster, prints "READY <url>"
// once its control endpoint listens, probes with one Lock+Unlock, and
// serves until its stdin closes; then it Closes its node.
func replica(start time.Time) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts := memberOptions(*flagDir, *flagListen, *flagQuota, logger)
	var reg *prometheus.Registry
	if *flagMetrics {
		// Only to count the lock-table restores from a leader's snapshot
		// (a scrape is a pass over the table: read once, at the end).
		reg = prometheus.NewRegistry()
		opts = append(opts, lockraft.WithMetrics(reg))
	}
	n, err := lockraft.Join(strings.Split(*flagPeers, ","), opts...)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	sv := serving{JoinUS: time.Since(start).Microseconds()}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		err := n.Ready(ctx)
		mu.Lock()
		sv.ReadyUS = time.Since(start).Microseconds()
		mu.Unlock()
		var l *lockraft.Lock
		if err == nil {
			l, err = n.Lock(ctx, fmt.Sprintf("probe/%d/%d", n.ID(), os.Getpid()))
		}
		if err == nil {
			err = l.Unlock(ctx)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			sv.Err = err.Error()
			return
		}
		sv.LockUS = time.Since(start).Microseconds()
	}()

	mux := http.NewServeMux()
	mux.Handle("/lockraft/", http.StripPrefix("/lockraft", n.AdminHandler(lockraft.WithOperatorActions())))
	mux.HandleFunc("/stats", childproc.StatsHandler)
	mux.Handle("/debug/pprof/heap", pprof.Handler("heap")) // diagnosis: where a replica's bytes go (-heapprofile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)      // diagnosis: what holds the loop while the table is released (-releasetrace)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)  // … with CPU samples in that trace
	mux.HandleFunc("/serving", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		json.NewEncoder(w).Encode(sv)
	})
	mux.HandleFunc("/pairs", func(w http.ResponseWriter, r *http.Request) {
		count, _ := strconv.Atoi(r.URL.Query().Get("n"))
		ds, errs, err := pairs(r.Context(), n, r.URL.Query().Get("prefix"), count)
		rep := pairsReply{Errors: errs}
		if err != nil {
			rep.Err = err.Error()
		}
		for _, d := range ds {
			rep.US = append(rep.US, d.Microseconds())
		}
		json.NewEncoder(w).Encode(rep)
	})
	mux.HandleFunc("/restored", func(w http.ResponseWriter, _ *http.Request) {
		if reg == nil {
			http.Error(w, "started without -metrics", http.StatusNotFound)
			return
		}
		mfs, err := reg.Gather()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for _, mf := range mfs {
			if mf.GetName() == "lockraft_snapshots_restored_total" && len(mf.GetMetric()) > 0 {
				fmt.Fprintf(w, "%.0f\n", mf.GetMetric()[0].GetCounter().GetValue())
				return
			}
		}
		http.Error(w, "no lockraft_snapshots_restored_total", http.StatusNotFound)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, mux)
	fmt.Printf("READY http://%s\n", ln.Addr())

	// The parent closes stdin to stop the replica.
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.Close(ctx)
}

// memberOptions are every member's Join options: a data directory, the
// gRPC address, the cluster's name, the per-session lock quota (the load
// process's one session holds the whole table and its waiters) and a
// logger; the timings are lockraft's defaults (production), and so is the
// run in which a session's end releases its names unless -endrun sets it.
func memberOptions(dir, listen string, quota int, logger *slog.Logger) []lockraft.Option {
	opts := []lockraft.Option{lockraft.WithDataDir(dir), lockraft.WithListenAddr(listen),
		lockraft.WithClusterID("scalelocks"), lockraft.WithQuotas(0, quota), lockraft.WithLogger(logger)}
	if *flagEndRun > 0 {
		opts = append(opts, lockraft.WithTuning(lockraft.Tuning{SessionEndRun: *flagEndRun}))
	}
	return opts
}

// pairs takes and releases count names prefix/i, one after the other, and
// returns each pair's duration and how many failed. It stops at the first
// error once ctx is done.
func pairs(ctx context.Context, n *lockraft.Node, prefix string, count int) ([]time.Duration, int, error) {
	var ds []time.Duration
	errs := 0
	var last error
	for i := range count {
		if ctx.Err() != nil {
			return ds, errs, context.Cause(ctx)
		}
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		l, err := n.Lock(cctx, fmt.Sprintf("%s/%d", prefix, i))
		if err == nil {
			err = l.Unlock(cctx)
		}
		cancel()
		if err != nil {
			errs++
			last = err
			continue
		}
		ds = append(ds, time.Since(t0))
	}
	if errs > 0 {
		return ds, errs, last
	}
	return ds, 0, nil
}
