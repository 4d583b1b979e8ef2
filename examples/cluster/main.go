// Command cluster runs lockraft's classic job on a real 3-node cluster on
// loopback (real gRPC between nodes, real bbolt files in a temp dir).
//
// Workers spread over the nodes sell the stock of a few SKUs kept in a
// SQL database. Each sale is Lock("stock/<sku>") → read → a little work →
// write stock-1 with the lock's fencing token → Unlock. Every read and write
// is a transaction fenced by the token (fence.Guard), so the database
// rejects any token lower than the highest it has accepted; it also counts
// overlapping critical sections and logs every sale. At the end it checks,
// from the database: final stock = initial − sold, no oversell, no overlap,
// no stale token accepted; otherwise it exits 1.
//
// Along the way it shows TryLock (a "report" lock that never queues),
// reentrancy with WithOwner (same owner, same token), a paused ex-holder's
// late write rejected by fencing, and Close of a node releasing its locks.
//
//	go run ./examples/cluster                # three nodes in this process
//	go run ./examples/cluster -procs         # each node its own OS process
//	go run ./examples/cluster -procs -kill   # ... and kill -9 one midway, then restart it
//	go run ./examples/cluster -db 'postgres://user@127.0.0.1:5432/db?sslmode=disable'
//	go run ./examples/cluster -tls           # with mutual TLS (also with -procs): a CA and
//	                                         # member certificates made for the run (tls.go)
//
// The store is a SQL database, fenced with package fence: a SQLite file
// (pure Go, nothing to install) unless -db names a PostgreSQL or
// MySQL/MariaDB database (its cluster_* tables are replaced).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lockraft/lockraft"
)

var (
	flagProcs   = flag.Bool("procs", false, "run each node as its own OS process")
	flagKill    = flag.Bool("kill", false, "kill -9 the leader's process midway and restart it from its data dir (implies -procs)")
	flagSKUs    = flag.Int("skus", 3, "number of products")
	flagStock   = flag.Int("stock", 1000, "initial units per product")
	flagWorkers = flag.Int("workers", 4, "workers per node")
	flagDB      = flag.String("db", "", "the stock's database: postgres://… or mysql://… (default: a SQLite file in the temp dir)")
	flagTLS     = flag.Bool("tls", false, "mutual TLS between the nodes, with certificates made for this run")
	flagNodes   = 3

	// Set by the parent when it runs a node as its own process (-procs).
	flagNodeID    = flag.Uint64("node-id", 0, "internal (-procs): run as this node's process, `id` 1 to 3")
	flagPeers     = flag.String("peers", "", "internal (-procs): every node's raft address, comma-separated, in id order")
	flagData      = flag.String("data", "", "internal (-procs): this node's data `directory`")
	flagStore     = flag.String("store", "", "internal (-procs): the stock's database `URL` (the parent's -db or SQLite file)")
	flagRestarted = flag.Bool("restarted", false, "internal (-procs): this process restarts a killed node on its data directory")
	flagCerts     = flag.String("certs", "", "internal (-procs -tls): the `directory` of the certificates the parent made")
)

func main() {
	flag.Parse()
	var err error
	switch {
	case *flagNodeID != 0:
		err = runChild(*flagNodeID, strings.Split(*flagPeers, ","), *flagData, *flagStore)
	case *flagProcs || *flagKill:
		err = inWorkDir(runProcs)
	default:
		err = inWorkDir(runInProcess)
	}
	if err != nil {
		fmt.Println("FAIL:", err)
		os.Exit(1)
	}
}

// inWorkDir runs run with a fresh temporary directory, removed afterwards,
// and, with -tls, the directory of the certificates made in it (maybeCerts).
func inWorkDir(run func(tmp, certs string) error) error {
	tmp, err := os.MkdirTemp("", "lockraft-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	certs, err := maybeCerts(tmp)
	if err != nil {
		return err
	}
	return run(tmp, certs)
}

func skuNames() []string {
	var s []string
	for i := range *flagSKUs {
		s = append(s, fmt.Sprintf("sku-%c", 'a'+i))
	}
	return s
}

// nodeOptions: faster timings than the defaults so the demo (and a crashed
// node's release) takes seconds: 50 ms ticks, elections after 0.5–1 s,
// sessions kept 3 s after the last keepalive. Library logs at Warn to stderr.
// With certs (a directory made by makeCerts) the node uses mutual TLS.
func nodeOptions(id uint64, dir, certs string) []lockraft.Option {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := []lockraft.Option{
		lockraft.WithDataDir(dir),
		lockraft.WithLogger(log),
		lockraft.WithClusterID(clusterID),
		lockraft.WithTimings(50*time.Millisecond, 10),
		lockraft.WithSessionTTL(3 * time.Second),
	}
	if certs != "" {
		opts = append(opts, tlsOption(certs, id))
	}
	return opts
}

const clusterID = "examples-cluster"

func verdict(bad []string) error {
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	fmt.Println("OK: final stock = initial − sold, no oversell, no stale token accepted")
	return nil
}
