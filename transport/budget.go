package transport

import (
	"context"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/status"
)

// Decode budgets
//
// What this node holds of what peers sent, between reading it and letting
// go of it, is bounded per peer and in total, in bytes, by weighted
// semaphores that are acquired before anything is decoded and released
// when the transport is done with it:
//
//   - a raft batch is charged decodeCost (its bytes, its messages, its
//     entries: limits.go) once it is read and before its messages are
//     decoded, until the Handler's Receive returns: at most peerRaftBudget
//     per peer, raftBudget in all;
//   - a call's request is charged its bytes once read and before it is
//     decoded, until the call's handler returns: at most peerCallBudget per
//     peer, callBudget in all. A peer's calls are read one at a time
//     (callReadsPerPeer), so while it waits for its budget it sends no more.
//
// Raft and calls have budgets of their own, so that calls (which every
// member and any certificate of the cluster may make) never hold up the
// voters' raft traffic. A peer over its budget waits (its stream stalls, and
// flow control stops it); it never makes another wait beyond the total. What
// gRPC holds before that is bounded by the caps on connections and streams
// (admission.go) and the stream window (serverStreamWindow).
//
// One charge larger than a budget is clipped to it, so it proceeds alone.

// admissionLimits are a Transport's admission caps and decode budgets.
// Defaults: defaultLimits; tests may set Config.limits.
type admissionLimits struct {
	conns int // accepted connections (Config.MaxConns)
	// handshakesPerSource: the connections of one source address (IPv6: its
	// /64) still in their handshake, once half the connections are taken
	// (0: no bound; slots.go).
	handshakesPerSource int
	connsPerPeer        int   // admitted connections of one member (TLS)
	calls               int32 // calls in flight, all peers
	callsPerPeer        int32 // calls in flight from one peer

	callReadsPerPeer int   // call requests of one peer read at once
	peerRaftBudget   int64 // bytes of raft batches being decoded and delivered, per peer
	raftBudget       int64 // the same, all peers
	peerCallBudget   int64 // bytes of call requests held, per peer
	callBudget       int64 // the same, all peers
}

// defaultLimits: a peer holds at most one raft batch of the largest size
// (4 MiB, decoding to at most about 20 MiB: limits.go) and 8 MiB of call
// requests; calls are capped at one connection's streams.
func defaultLimits(maxConns int) admissionLimits {
	return admissionLimits{
		conns:               maxConns,
		handshakesPerSource: handshakesPerSource(maxConns),
		connsPerPeer:        2,
		calls:               4096,
		callsPerPeer:        maxStreams,
		callReadsPerPeer:    1,
		peerRaftBudget:      24 << 20,
		raftBudget:          48 << 20,
		peerCallBudget:      8 << 20,
		callBudget:          32 << 20,
	}
}

// held is a charge on a peer's budget and on the total.
type held struct {
	peer, total *semaphore.Weighted
	np, nt      int64
}

// charge acquires n bytes of a peer's budget, then of the total, waiting
// until both have room or ctx ends; release gives them back.
func charge(ctx context.Context, peer, total *semaphore.Weighted, peerMax, totalMax, n int64) (held, error) {
	h := held{peer: peer, total: total, np: min(n, peerMax), nt: min(n, totalMax)}
	if err := peer.Acquire(ctx, h.np); err != nil {
		return held{}, status.FromContextError(err).Err()
	}
	if err := total.Acquire(ctx, h.nt); err != nil {
		peer.Release(h.np)
		return held{}, status.FromContextError(err).Err()
	}
	return h, nil
}

func (h held) release() {
	h.total.Release(h.nt)
	h.peer.Release(h.np)
}
