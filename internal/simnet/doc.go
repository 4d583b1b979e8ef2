// Package simnet is an in-memory network that stands in for package
// transport's gRPC transport beneath a node (transport.Network), so that a
// whole cluster of real nodes (real raft, real bbolt files) runs in one
// process and, inside testing/synctest, as a simulation that one seed
// replays.
//
// One Network serves one cluster. Each node starts its endpoint with
// (*Network).Start, a transport.NewNetwork; its address is Addr(id), and
// its peers reach it once they AddPeer(id, Addr(id)).
//
// # What it models
//
//   - Raft messages (Send): deep-copied, so sender and receiver never share
//     memory; delayed per link; in order per link unless the link's policy
//     reorders; lost or duplicated as the policy says; handed to the
//     receiver's Receive in batches of one sender's messages due at one
//     instant. A message lost to a cut link, a closed endpoint or a wrong
//     address is reported to its sender (ReportUnreachable), as a broken
//     stream is.
//   - Snapshots (MsgSnap): the file travels with the message; the receiver
//     asks AcceptSnapshot, writes a temporary file in its SnapshotDir and
//     hands it to ReceiveSnapshot; the sender is told with ReportSnapshot
//     after the return delay (snapshot.go).
//   - The twelve typed calls (transport.Caller): deep-copied both ways, the
//     server's Handler method on a goroutine of its own with the caller's
//     deadline, errors mapped as transport maps them, so that errors.Is
//     works for the caller exactly as over gRPC (calls.go).
//   - The receiver's checks, as transport's server makes them: cluster id,
//     revocation (Revoke), the sender's role for raft traffic (voters only:
//     each endpoint has its Config.Role, PlaintextRole if zero, as its
//     certificate would say) and Config.AdmitRaft, formation id (a fresh
//     node adopts a formation only from raft traffic, never from a call),
//     the raft message types a remote peer may never send, the snapshot
//     header; refusals are counted under transport's kinds in the
//     receiver's refusal log (auth.go). A call's ctx carries its caller
//     (transport.CallerOf). PeerVersion learns a peer's Version from what
//     arrives from it; PeerRole is the role of the endpoint last started
//     under an id.
//   - Faults, per link and decided from the seed: partitions, isolation,
//     one-way blocks, a Policy of drop, duplicate, reorder and delay for
//     every link or one (faults.go); paused endpoints, whose deliveries
//     wait; closed endpoints and endpoints restarted under the same id.
//     Cuts are judged when something arrives (what is on the way when a
//     link is cut is lost), a policy when something is sent.
//
// # What it does not model
//
// No TLS: every sender is who it says, as in transport's plaintext mode. No
// byte-level limits (MaxMsgSize, QueueSize and the batch budgets; Send
// never drops for a full queue; MaxSnapshotSize is checked), no bandwidth
// (a snapshot of any size takes one delay), no connection setup, dial
// backoff, keepalives or idle timeouts, no one-snapshot-at-a-time per
// sender. Reports to the sender (ReportUnreachable for an unknown peer
// included) come from the network's goroutine, never from inside Send.
//
// # Determinism
//
// Every random decision derives from the seed through one PCG stream per
// link: per (from, to, channel), where raft messages, snapshot transfers
// and calls are separate channels. A link's draws are made by the
// goroutine that sends on it, a fixed number per message (link.go), so they
// do not depend on how sends on other links interleave. Everything the
// network does is an event in one queue ordered by (due time, from, to,
// channel, the link's sequence number), executed by one goroutine that
// sleeps on a timer until the next is due (schedule.go). Under synctest it
// waits Settle (one nanosecond) past the due time, which fake time reaches
// only once every goroutine of the bubble is durably blocked, and again
// before each further event: every event finds the bubble quiet, the
// queue's content at that point is decided, and a node is never handed two
// things at once to pick from at random. Fake time thus advances by the
// drawn delays plus a nanosecond per executed event. The network blocks
// only on timers, its own channels and WaitGroups, and holds its mutex
// briefly, so it never keeps the bubble from being idle.
//
// Determinism ends where the caller's begins: the order in which
// goroutines of one node call Send (or calls) on one link at the same
// instant is the caller's business, and so is a node's own use of
// randomness, map order or timers. An event due at the very nanosecond a
// node's timer fires races with it. Outside a bubble the network delivers
// as soon as events are due, without settling, and promises no order
// beyond each link's.
//
// The trace: every executed event (Event) can be seen through WithTrace,
// and TraceHash is a running hash over all of them, which two runs of one
// seed can compare.
package simnet
