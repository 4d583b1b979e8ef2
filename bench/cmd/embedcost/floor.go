package main

// Floors: what an idle replica costs before lockraft adds anything.
//
// Fleet "50m" runs 50 processes of lockraft's gossip layer alone (the
// membership package: memberlist on lockraft's transport, LANGossipTiming),
// without raft, gRPC, a session or keepalives: the floor under a light
// member, whose own work on top of it is one keepalive every 2.5 s. Fleet
// "7" is a gossip cluster of 5 voters and 2 learners and no light members:
// its leader's idle cost is raft's heartbeats to its six followers (and
// their six sessions), the floor under a fleet's leader before any light
// member's keepalive reaches it.

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/membership"
)

// bareChild runs one member of the gossip layer alone until stdin closes.
func bareChild() error {
	timing := membership.LANTiming()
	if *flagGI > 0 {
		timing.GossipInterval = *flagGI
	}
	if *flagPI > 0 {
		timing.ProbeInterval = *flagPI
	}
	id := uint64(time.Now().UnixNano())<<8 | uint64(os.Getpid()&0xff) | 1
	var seeds []string // membership retries them in the background until one answers
	if *flagSeeds != "" {
		seeds = strings.Split(*flagSeeds, ",")
	}
	m, err := membership.Start(membership.Config{
		Name:     *flagName,
		BindAddr: "127.0.0.1",
		Seeds:    seeds,
		Meta:     membership.Meta{RaftID: id, RaftAddr: "127.0.0.1:1", ClusterID: "embedcost"},
		Timing:   timing,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer m.Shutdown()
	mux := http.NewServeMux()
	// The parent's readiness: every member of the fleet seen alive.
	mux.HandleFunc("/lockraft/readyz", func(w http.ResponseWriter, r *http.Request) {
		alive := 0
		for _, mem := range m.Members() {
			if mem.State == membership.StateAlive {
				alive++
			}
		}
		if alive < *flagExpect {
			http.Error(w, fmt.Sprintf("%d of %d alive", alive, *flagExpect), http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/lockraft/status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(lockraft.StatusView{Role: "gossip-only"})
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/stats", serveStats)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("READY http://%s %s\n", ln.Addr(), m.Local().Addr)
	go http.Serve(ln, mux)
	io.Copy(io.Discard, os.Stdin)
	return nil
}
