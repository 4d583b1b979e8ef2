package fence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The fenced servers (promise S2 at a gRPC or HTTP service): the same
// concurrent fresh/stale writers as the SQL tests, each write a call to a
// real server on loopback whose handler appends the call's token to a
// ledger: in memory (MemoryStore), or in the admitting SQL transaction
// (SQLStore, on every database). A planted store that admits everything
// must be caught by the same verdict.

// ledger is the handler's resource for the memory store: tokens in the
// order the handler ran.
type ledger struct {
	mu     sync.Mutex
	tokens []uint64
}

func (l *ledger) append(tok uint64) {
	l.mu.Lock()
	l.tokens = append(l.tokens, tok)
	l.mu.Unlock()
}

// passThrough is the planted bug: a store that admits every token.
type passThrough struct{}

func (passThrough) Admit(ctx context.Context, _ string, _ uint64) (context.Context, func(error) error, error) {
	return ctx, func(error) error { return nil }, nil
}

// A backend is a store plus the handler's write and the final read-back.
type backend struct {
	name   string
	store  Store
	write  func(ctx context.Context, tok uint64) error // the handler's write
	result func() (applied []uint64, count int64, bad []string)
}

func memoryBackend(planted bool) backend {
	l := &ledger{}
	var st Store = NewMemoryStore()
	if planted {
		st = passThrough{}
	}
	return backend{name: "memory", store: st,
		write: func(_ context.Context, tok uint64) error { l.append(tok); return nil },
		result: func() ([]uint64, int64, []string) {
			l.mu.Lock()
			defer l.mu.Unlock()
			return append([]uint64(nil), l.tokens...), int64(len(l.tokens)), nil
		}}
}

func sqlBackend(t *testing.T, d testDB, planted bool) backend {
	db := d.fresh(t)()
	g, err := NewGuard(db, d.dialect, WithRetries(50))
	if err != nil {
		t.Fatal(err)
	}
	g.unguarded = planted
	if err := g.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	setupLedger(t, db)
	return backend{name: "sql-" + d.name, store: NewSQLStore(g),
		write: func(ctx context.Context, tok uint64) error {
			tx, ok := TxFromContext(ctx)
			if !ok {
				return errors.New("handler: no admitting transaction in the context")
			}
			return ledgerAppend(ctx, tx, d.dialect.Rebind, tok)
		},
		result: func() ([]uint64, int64, []string) { return readLedger(t, db) }}
}

// --- gRPC: a hand-written service over the proto codec ---

const appendMethod = "/fencetest.Ledger/Append"

type appendFunc func(ctx context.Context, tok uint64) error

var ledgerService = grpc.ServiceDesc{
	ServiceName: "fencetest.Ledger",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Append",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := &wrapperspb.UInt64Value{}
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, r any) (any, error) {
				return &wrapperspb.UInt64Value{}, srv.(appendFunc)(ctx, r.(*wrapperspb.UInt64Value).GetValue())
			}
			if icpt == nil {
				return h(ctx, req)
			}
			return icpt(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: appendMethod}, h)
		}}},
	Streams: []grpc.StreamDesc{{StreamName: "AppendStream", ServerStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			req := &wrapperspb.UInt64Value{}
			if err := ss.RecvMsg(req); err != nil {
				return err
			}
			if err := srv.(appendFunc)(ss.Context(), req.GetValue()); err != nil {
				return err
			}
			return ss.SendMsg(&wrapperspb.UInt64Value{Value: req.GetValue()})
		}}},
}

// startGRPC serves the ledger on loopback behind the fencing interceptors
// and returns a client connection with the client interceptors.
func startGRPC(t *testing.T, store Store, write appendFunc, opts ...ServerOption) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(UnaryServerInterceptor(store, opts...)),
		grpc.StreamInterceptor(StreamServerInterceptor(store, opts...)))
	srv.RegisterService(&ledgerService, write)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(UnaryClientInterceptor()), grpc.WithStreamInterceptor(StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func grpcAppend(ctx context.Context, cc *grpc.ClientConn, tok uint64) error {
	return cc.Invoke(WithToken(ctx, "ledger", tok), appendMethod, &wrapperspb.UInt64Value{Value: tok}, &wrapperspb.UInt64Value{})
}

func grpcWorkload(t *testing.T, b backend) ([]string, string) {
	ccs := []*grpc.ClientConn{startGRPC(t, b.store, b.write), nil}
	ccs[1] = ccs[0]
	outs := runWriters(t, defaultLoad, func(ctx context.Context, pool int, tok uint64) error {
		err := grpcAppend(ctx, ccs[pool], tok)
		if errors.Is(err, ErrStaleToken) && status.Code(err) != codes.Aborted {
			return fmt.Errorf("stale error with status %v, want Aborted: %w", status.Code(err), err)
		}
		return err
	})
	applied, count, bad := b.result()
	if bad != nil {
		return bad, ""
	}
	return verdict(outs, applied, count)
}

func rpcBackends(t *testing.T, planted bool) []func(*testing.T) backend {
	fs := []func(*testing.T) backend{func(*testing.T) backend { return memoryBackend(planted) }}
	for _, d := range allDBs() {
		fs = append(fs, func(t *testing.T) backend { return sqlBackend(t, d, planted) })
	}
	return fs
}

func backendName(i int) string {
	if i == 0 {
		return "memory"
	}
	return "sql-" + allDBs()[i-1].name
}

func TestS2GRPCConcurrentStaleWriters(t *testing.T) { onEveryBackend(t, grpcWorkload) }
func TestS2HTTPConcurrentStaleWriters(t *testing.T) { onEveryBackend(t, httpWorkload) }

// onEveryBackend runs the workload against every guarded backend, each a
// subtest that logs its summary and fails with every violation it found.
func onEveryBackend(t *testing.T, workload func(*testing.T, backend) ([]string, string)) {
	for i, mk := range rpcBackends(t, false) {
		t.Run(backendName(i), func(t *testing.T) {
			bad, summary := workload(t, mk(t))
			t.Log(summary)
			for _, b := range bad {
				t.Error(b)
			}
		})
	}
}

// TestS2PlantedServerIsCaught: the same workloads behind a store that
// admits every token (memory) or a guard without its condition (SQL).
func TestS2PlantedServerIsCaught(t *testing.T) {
	for i, mk := range rpcBackends(t, true) {
		for _, w := range []struct {
			name string
			run  func(*testing.T, backend) ([]string, string)
		}{{"grpc", grpcWorkload}, {"http", httpWorkload}} {
			t.Run(w.name+"/"+backendName(i), func(t *testing.T) {
				bad, _ := w.run(t, mk(t))
				if len(bad) == 0 {
					t.Fatal("the unfenced server passed the verdict")
				}
				t.Logf("caught %d violations, first: %s", len(bad), bad[0])
			})
		}
	}
}

func TestGRPCStatusesAndStream(t *testing.T) {
	l := &ledger{}
	write := appendFunc(func(_ context.Context, tok uint64) error { l.append(tok); return nil })
	cc := startGRPC(t, NewMemoryStore(), write)
	ctx := context.Background()
	if err := grpcAppend(ctx, cc, 7); err != nil {
		t.Fatal(err)
	}
	err := grpcAppend(ctx, cc, 6)
	var se *StaleError
	if !errors.As(err, &se) || se.Token != 6 || se.Highest != 7 || se.Resource != "ledger" || status.Code(err) != codes.Aborted {
		t.Fatalf("stale unary call: %v (code %v), want StaleError{ledger, 6, 7} with Aborted", err, status.Code(err))
	}
	// No token: InvalidArgument, the handler does not run.
	err = cc.Invoke(ctx, appendMethod, &wrapperspb.UInt64Value{Value: 1}, &wrapperspb.UInt64Value{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("call without a token: %v, want InvalidArgument", err)
	}
	// Streams: admitted at the start; a stale one fails at its first Recv.
	stream := func(tok uint64) error {
		s, err := cc.NewStream(WithToken(ctx, "ledger", tok), &ledgerService.Streams[0], "/fencetest.Ledger/AppendStream")
		if err != nil {
			return err
		}
		if err := s.SendMsg(&wrapperspb.UInt64Value{Value: tok}); err != nil {
			return err
		}
		s.CloseSend()
		return s.RecvMsg(&wrapperspb.UInt64Value{})
	}
	if err := stream(8); err != nil {
		t.Fatalf("fresh stream: %v", err)
	}
	if err := stream(7); !errors.Is(err, ErrStaleToken) || status.Code(err) != codes.Aborted {
		t.Fatalf("stale stream: %v, want ErrStaleToken / Aborted", err)
	}
	if got := fmt.Sprint(l.tokens); got != "[7 8]" {
		t.Fatalf("ledger %s, want [7 8]: a refused call's handler ran", got)
	}
	// OptionalToken lets a call without a token through.
	cc2 := startGRPC(t, NewMemoryStore(), write, OptionalToken())
	if err := cc2.Invoke(ctx, appendMethod, &wrapperspb.UInt64Value{Value: 1}, &wrapperspb.UInt64Value{}); err != nil {
		t.Fatalf("OptionalToken, no token: %v", err)
	}
}

// --- HTTP ---

func startHTTP(t *testing.T, store Store, write appendFunc, opts ...ServerOption) (*http.Client, string) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strconv.ParseUint(r.Header.Get(HeaderToken), 10, 64)
		if err := write(r.Context(), tok); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})
	srv := httptest.NewServer(Middleware(store, h, opts...))
	t.Cleanup(srv.Close)
	return &http.Client{Transport: &Transport{Base: &http.Transport{MaxIdleConnsPerHost: 32}}}, srv.URL
}

func httpAppend(ctx context.Context, c *http.Client, url string, tok uint64) error {
	req, err := http.NewRequestWithContext(WithToken(ctx, "ledger", tok), http.MethodPost, url+"/append", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := CheckResponse(resp); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

func httpWorkload(t *testing.T, b backend) ([]string, string) {
	c, url := startHTTP(t, b.store, b.write)
	outs := runWriters(t, defaultLoad, func(ctx context.Context, _ int, tok uint64) error {
		return httpAppend(ctx, c, url, tok)
	})
	applied, count, bad := b.result()
	if bad != nil {
		return bad, ""
	}
	return verdict(outs, applied, count)
}

func TestHTTPStatuses(t *testing.T) {
	l := &ledger{}
	write := appendFunc(func(_ context.Context, tok uint64) error { l.append(tok); return nil })
	c, url := startHTTP(t, NewMemoryStore(), write)
	ctx := context.Background()
	if err := httpAppend(ctx, c, url, 7); err != nil {
		t.Fatal(err)
	}
	err := httpAppend(ctx, c, url, 6)
	var se *StaleError
	if !errors.As(err, &se) || se.Token != 6 || se.Highest != 7 || se.Resource != "ledger" {
		t.Fatalf("stale request: %v, want StaleError{ledger, 6, 7}", err)
	}
	resp, err := http.Post(url+"/append", "text/plain", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no token: %s, want 400", resp.Status)
	}
	if fmt.Sprint(l.tokens) != "[7]" {
		t.Fatalf("ledger %v: a refused request's handler ran", l.tokens)
	}
}

// TestSQLStoreRollsBackFailedHandler: a handler that fails leaves neither
// its write nor the raised fence behind.
func TestSQLStoreRollsBackFailedHandler(t *testing.T) {
	d := sqliteDB()
	db := d.fresh(t)()
	g, err := NewGuard(db, SQLite)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := g.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	setupLedger(t, db)
	var fail atomic.Bool
	fail.Store(true)
	cc := startGRPC(t, NewSQLStore(g), func(ctx context.Context, tok uint64) error {
		tx, _ := TxFromContext(ctx)
		if err := ledgerAppend(ctx, tx, d.dialect.Rebind, tok); err != nil {
			return err
		}
		if fail.Load() {
			return status.Error(codes.Internal, "handler failed after writing")
		}
		return nil
	})
	if err := grpcAppend(ctx, cc, 9); status.Code(err) != codes.Internal {
		t.Fatalf("failing handler: %v", err)
	}
	fail.Store(false)
	if err := grpcAppend(ctx, cc, 5); err != nil {
		t.Fatalf("token 5 after a failed call with token 9: %v (the failed call's fence must be rolled back)", err)
	}
	applied, _, _ := readLedger(t, db)
	if fmt.Sprint(applied) != "[5]" {
		t.Fatalf("ledger %v, want [5]", applied)
	}
	var f int64
	if err := db.QueryRow("SELECT fence FROM lockraft_fences WHERE resource = 'ledger'").Scan(&f); err != nil || f != 5 {
		t.Fatalf("stored fence %d (%v), want 5", f, err)
	}
}
