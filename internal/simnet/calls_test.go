package simnet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// allCalls makes each of the typed calls with a request of its own.
var allCalls = []struct {
	name string
	call func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error)
}{
	{"Keepalive", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.Keepalive(ctx, to, &transportpb.KeepaliveRequest{Session: 1})
	}},
	{"Renew", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.Renew(ctx, to, &transportpb.RenewRequest{Name: "lock", Token: 2})
	}},
	{"Removed", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.Removed(ctx, to, &transportpb.RemovedRequest{Term: 3, Voters: []uint64{1, 2}})
	}},
	{"Leave", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.Leave(ctx, to, &transportpb.LeaveRequest{})
	}},
	{"FwdOpen", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.FwdOpen(ctx, to, &transportpb.FwdOpenRequest{Nonce: 4})
	}},
	{"FwdPropose", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.FwdPropose(ctx, to, &transportpb.FwdProposeRequest{Commands: [][]byte{[]byte("cmd")}})
	}},
	{"FwdPush", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.FwdPush(ctx, to, &transportpb.FwdPushRequest{})
	}},
	{"FwdStatus", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.FwdStatus(ctx, to, &transportpb.FwdStatusRequest{Session: 5})
	}},
	{"Inspect", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.Inspect(ctx, to, &transportpb.InspectRequest{Name: "lock"})
	}},
	{"Form", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.Form(ctx, to, &transportpb.FormRequest{Formation: "f"})
	}},
	{"VersionGate", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.VersionGate(ctx, to, &transportpb.VersionGateRequest{})
	}},
	{"Observe", func(ctx context.Context, c transport.Caller, to uint64) (proto.Message, error) {
		return c.Observe(ctx, to, &transportpb.ObserveRequest{})
	}},
}

func TestEveryCallReachesItsHandlerMethod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 1, 2, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: 3 * time.Millisecond}))
		for i, c := range allCalls {
			resp, err := c.call(t.Context(), nodes[1].ep, 2)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := string(resp.ProtoReflect().Descriptor().Name()); got != c.name+"Response" {
				t.Fatalf("%s answered with a %s", c.name, got)
			}
			rec := nodes[2].rec.Calls()[i]
			if rec.Method != c.name || rec.From != 1 {
				t.Fatalf("call %d: the handler saw %s from %d, want %s from 1", i, rec.Method, rec.From, c.name)
			}
		}
	})
}

// handlerErrors are errors a Calls handler returns, and what the caller
// must see of each.
var handlerErrors = []struct {
	name  string
	err   error
	check func(error) bool
}{
	{"permission denied", fmt.Errorf("%w: session 7 is not yours", transport.ErrPermissionDenied), func(err error) bool {
		return errors.Is(err, transport.ErrPermissionDenied) && !errors.Is(err, transport.ErrClusterMismatch) &&
			!errors.Is(err, transport.ErrFormationMismatch)
	}},
	{"invalid request", fmt.Errorf("%w: empty name", transport.ErrInvalidRequest), func(err error) bool {
		return errors.Is(err, transport.ErrInvalidRequest)
	}},
	{"a status keeps its code", status.Error(codes.FailedPrecondition, "not the leader"), func(err error) bool {
		return status.Code(err) == codes.FailedPrecondition
	}},
	{"unauthenticated", status.Error(codes.Unauthenticated, "who are you"), func(err error) bool {
		return errors.Is(err, transport.ErrUnauthenticated)
	}},
	{"other errors are Unknown", errors.New("boom"), func(err error) bool {
		return status.Code(err) == codes.Unknown && strings.Contains(err.Error(), "boom")
	}},
	{"canceled", context.Canceled, func(err error) bool { return status.Code(err) == codes.Canceled }},
	{"deadline at the server", context.DeadlineExceeded, func(err error) bool {
		return errors.Is(err, context.DeadlineExceeded)
	}},
}

func TestCallErrorsAreMappedAsTransportMapsThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 2, 2)
		for _, c := range handlerErrors {
			nodes[2].rec.Call = func(context.Context, uint64, string, proto.Message) (proto.Message, error) { return nil, c.err }
			_, err := nodes[1].ep.Keepalive(t.Context(), 2, &transportpb.KeepaliveRequest{})
			if err == nil || !c.check(err) {
				t.Errorf("%s: the caller got %v", c.name, err)
			}
		}
	})
}

func TestCallsCopyRequestsAndAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 3, 2)
		kept := &transportpb.InspectResponse{Json: []byte(`{"a":1}`)}
		var seen *transportpb.InspectRequest
		nodes[2].rec.Call = func(_ context.Context, _ uint64, _ string, req proto.Message) (proto.Message, error) {
			seen = req.(*transportpb.InspectRequest)
			return kept, nil
		}
		req := &transportpb.InspectRequest{Name: "lock"}
		resp, err := nodes[1].ep.Inspect(t.Context(), 2, req)
		if err != nil {
			t.Fatal(err)
		}
		if seen == req || resp == kept {
			t.Fatal("a call shares its request or answer with the other end")
		}
		kept.Json[0] = 'X'
		req.Name = "changed"
		if string(resp.Json) != `{"a":1}` || seen.Name != "lock" {
			t.Fatalf("changes crossed the network: answer %q, request %q", resp.Json, seen.Name)
		}
		// A handler answering nil gives the caller an empty answer, as
		// gRPC's encoding of nil does.
		nodes[2].rec.Call = func(context.Context, uint64, string, proto.Message) (proto.Message, error) {
			return (*transportpb.InspectResponse)(nil), nil
		}
		if resp, err := nodes[1].ep.Inspect(t.Context(), 2, req); err != nil || resp == nil {
			t.Fatalf("nil answer: %v, %v", resp, err)
		}
	})
}

func TestCallFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := newCluster(t, 4, 3, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: time.Millisecond}))
		other := start(t, n, 4, func(c *transport.Config) { c.ClusterID = "another" })
		nodes[1].ep.AddPeer(4, Addr(4))
		ka := func(to uint64) error {
			_, err := nodes[1].ep.Keepalive(t.Context(), to, &transportpb.KeepaliveRequest{})
			return err
		}
		unavailable := func(what string, err error) {
			t.Helper()
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s: got %v, want codes.Unavailable", what, err)
			}
		}

		if err := ka(9); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Errorf("unknown peer: %v", err)
		}
		if err := ka(4); !errors.Is(err, transport.ErrClusterMismatch) {
			t.Errorf("another cluster: %v", err)
		}
		if other.ep.Refusals(refusedRPC) != 1 || len(other.rec.Calls()) != 0 {
			t.Errorf("another cluster's call: %d refusals, %d served", other.ep.Refusals(refusedRPC), len(other.rec.Calls()))
		}

		n.Block(1, 2)
		unavailable("cut link", ka(2))
		n.Heal()
		n.Block(2, 1) // the answer cannot come back: the handler ran
		unavailable("cut return link", ka(2))
		if len(nodes[2].rec.Calls()) != 1 {
			t.Errorf("the server served %d calls, want 1", len(nodes[2].rec.Calls()))
		}
		n.Heal()
		n.SetLinkPolicy(1, 2, Policy{Drop: 1})
		unavailable("lost", ka(2))
		n.SetPolicy(Policy{})
		nodes[1].ep.AddPeer(2, "elsewhere:1")
		unavailable("wrong address", ka(2))
		nodes[1].ep.AddPeer(2, Addr(2))
		if err := ka(2); err != nil {
			t.Errorf("after all that: %v", err)
		}

		_ = nodes[3].ep.Close()
		unavailable("closed endpoint", ka(3))
		_ = nodes[1].ep.Close()
		if err := ka(2); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("call from a closed endpoint: %v", err)
		}
	})
}

func TestCallsHonourTheirContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 5, 2, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: time.Millisecond}))
		served := make(chan error, 1)
		nodes[2].rec.Call = func(ctx context.Context, _ uint64, _ string, _ proto.Message) (proto.Message, error) {
			<-ctx.Done()
			served <- ctx.Err()
			return nil, ctx.Err()
		}

		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		began := time.Now()
		_, err := nodes[1].ep.Keepalive(ctx, 2, &transportpb.KeepaliveRequest{})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) != 50*time.Millisecond {
			t.Fatalf("after %v: %v, want context.DeadlineExceeded after 50ms", time.Since(began), err)
		}
		if err := <-served; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the server's context ended with %v", err)
		}

		ctx, cancel = context.WithCancel(t.Context())
		go func() {
			time.Sleep(10 * time.Millisecond)
			cancel()
		}()
		if _, err := nodes[1].ep.Keepalive(ctx, 2, &transportpb.KeepaliveRequest{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
		if err := <-served; !errors.Is(err, context.Canceled) {
			t.Fatalf("the server's context of a cancelled call ended with %v", err)
		}

		// Closing the server ends the calls it serves, and their callers
		// learn that the connection went away.
		done := make(chan error, 1)
		go func() {
			_, err := nodes[1].ep.Keepalive(t.Context(), 2, &transportpb.KeepaliveRequest{})
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		_ = nodes[2].ep.Close()
		if err := <-served; !errors.Is(err, context.Canceled) {
			t.Fatalf("closing the server ended its handler's context with %v", err)
		}
		if err := <-done; status.Code(err) != codes.Unavailable {
			t.Fatalf("caller of a closed server: %v, want codes.Unavailable", err)
		}
	})
}

func TestPeerVersionIsLearnedFromWhatArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 6, 3)
		if v, seen := nodes[1].ep.PeerVersion(2); seen || v != "" {
			t.Fatalf("before any traffic: %q, %v", v, seen)
		}
		if _, err := nodes[1].ep.Keepalive(t.Context(), 2, &transportpb.KeepaliveRequest{}); err != nil {
			t.Fatal(err)
		}
		if v, seen := nodes[2].ep.PeerVersion(1); !seen || v != "v1" {
			t.Fatalf("the server learned %q, %v from a call", v, seen)
		}
		if _, seen := nodes[1].ep.PeerVersion(2); seen {
			t.Fatal("the caller learned the server's version from an answer")
		}
		nodes[3].ep.Send([]*raftpb.Message{app(3, 1, 1)})
		time.Sleep(time.Millisecond)
		if v, seen := nodes[1].ep.PeerVersion(3); !seen || v != "v3" {
			t.Fatalf("learned %q, %v from a raft message", v, seen)
		}
	})
}
