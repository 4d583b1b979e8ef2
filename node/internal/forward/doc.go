// Package forward is how a light member works through the leader, and how
// the leader serves it (membership/doc.go, "Fleet scale").
//
// A node with gossip but no raft state is not in the raft configuration: no
// leader replicates the log to it. It still serves Lock, TryLock and Unlock,
// by forwarding to the leader:
//
//   - Session: FwdOpen asks the leader to propose OpenSession with the
//     member's raft id and nonce; the reply carries the session id once the
//     entry is applied on the leader. The member keeps the session alive with
//     the ordinary Keepalive call (confirmed by a ReadIndex round, so S5
//     holds as on a raft member).
//   - Commands: the op registry is the raft member's (session, seq,
//     AckedBelow, retries, abandon → Cancel); only the last step differs:
//     the encoded command goes to the leader in a FwdPropose call (all
//     commands queued meanwhile share one call) and the leader proposes the
//     bytes verbatim once it has checked each is a command the member may
//     issue, for a session of the member's own (Host.CheckForwarded). They
//     carry the member's session and seq, so lockfsm applies a retry at most
//     once, across leader changes too (S6).
//   - Results and events: the leader, on applying a command of a session
//     whose node is not in the raft configuration, and on every event of
//     such a session, queues them for that member; one sender per member
//     sends the queue in FwdPush calls, which a member accepts only from
//     the leader it follows. A push that fails is dropped: the member
//     re-proposes an overdue command on its retry timer and gets the
//     retained result as a duplicate, and it asks the leader about its
//     queued Acquires (FwdStatus: granted with token T, still queued, or
//     gone) at once when it finds a leader, and then only every
//     SessionTTL/4 while it waits: a missed grant is re-learned that way,
//     and waiting costs the leader almost nothing (L4). Most results do not
//     need a push at all: the leader holds the FwdPropose call open until
//     they are applied (reply.go).
//   - Elections: a member's observers are served from the leader (Observe,
//     observe.go); every raft member keeps the recent changes of each
//     election for that (history.go).
//   - Leader: learned from the replies (a non-leader answers with its leader
//     hint); at first, and after a failed call, any alive member with raft
//     data is asked (Target).
//
// The leader's cost per light member is its keepalives (batched into the
// leader's confirmation rounds), the commands it makes and one idle push
// sender: no replica stream, no log copy.
//
// # Threads
//
// A State belongs to its node's loop goroutine: every method is called from
// the loop unless its comment says otherwise (Target, and the senders'
// work). The package starts no goroutine of its own. The network calls run
// on goroutines the node starts for it (Host.Go) and tracks until it
// stops; their answers come back to the loop through Host.Do and
// Host.TryDo. Two kinds of sender drain a queue on such a goroutine, one
// call at a time, all items queued meanwhile in one call, and exit when the
// queue is empty or the node stops (Config.Stop): the member's forwarded
// commands, and the leader's pushes to each light member.
package forward
