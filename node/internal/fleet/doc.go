// Package fleet is a lockraft node's cluster management: who is in the
// raft configuration and how it changes, apart from the lock path.
//
//   - Formation (formation.go): a gossip fleet's cluster is bootstrapped
//     once, by the founder whose name sorts first, after every founder
//     durably adopted its formation id; formation ids keep formed clusters
//     apart for good.
//   - Reconcile (reconcile.go): the leader applies the voter policy
//     (membership.PlanVoters) one configuration change at a time: adds
//     learners, promotes them, replaces dead voters, removes members that
//     left, and tells members removed while away (removed.go).
//   - The version gate (versiongate.go): whether every member runs a
//     version with the lock catalogue.
//   - Static member lists (staticlist.go): replicas given different lists
//     are different clusters, and say how their lists differ.
//   - Admission (members.go): who may send this node raft messages.
//   - The gossip goroutine (gossip.go): membership to the transport,
//     metadata announcements, formation attempts, reconcile wake-ups.
//
// A Fleet talks to its node only through Host, and keeps its own state.
// Threading: methods documented "(loop)" run on the node's loop goroutine
// only, which owns the reconcile state; Run is the gossip goroutine; the
// rest are safe on any goroutine (the formation id, the gate, the static
// check and the member set have their own locks).
package fleet
