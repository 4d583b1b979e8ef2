package lockraft_test

import (
	"context"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockraft/lockraft"
)

// BenchmarkLockUnlockMetrics is the cost of WithMetrics on the Lock path:
// sequential Lock+Unlock pairs on a single-member cluster (real WAL fsyncs)
// without and with the option. Compare allocs/op and ns/op: without the
// option the metrics code is one nil check per call.
//
//	go test -run '^$' -bench LockUnlockMetrics -benchtime 3000x -count 3 .
func BenchmarkLockUnlockMetrics(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "metrics=off"
		if on {
			name = "metrics=on"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			addr := ln.Addr().String()
			opts := []lockraft.Option{lockraft.WithDataDir(b.TempDir()), lockraft.WithListener(ln), lockraft.WithListenAddr(addr), fast()}
			if on {
				opts = append(opts, lockraft.WithMetrics(prometheus.NewRegistry()))
			}
			n, err := lockraft.Join([]string{addr}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close(context.Background())
			ctx := context.Background()
			l, err := n.Lock(ctx, "warm") // wait for the session
			if err != nil {
				b.Fatal(err)
			}
			l.Unlock(ctx)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				l, err := n.Lock(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
