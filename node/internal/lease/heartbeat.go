package lease

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// Heartbeat extensions. Raft's ReadIndex heartbeats carry an 8-byte
// position (read_only.go: heartbeatCtx), which followers echo and the
// leader reads back with binary.LittleEndian.Uint64, i.e. its first 8 bytes
// only. A leader appends to every such heartbeat the sessions of all its
// unanswered confirmation rounds: a quorum's answer to a heartbeat of
// position P confirms exactly the rounds issued before raft built it, all
// of which were unanswered then, so every confirmed keepalive's session
// reached each member of the confirming quorum after the keepalive arrived
// (F1 in terms of sessions).
//
//	position (8 bytes), 'k', flags, uvarint count, count × uvarint session
//
// flags bit 0: contact reports wanted. A follower answers with the position
// and, if asked, its report instead of the echoed extension:
//
//	position (8 bytes), 'R', uvarint µs since any older leader, uvarint µs
//	since its start, uvarint count, count × (uvarint session, uvarint µs
//	since seen, uvarint µs since it applied the OpenSession)
//
// and the leader cuts the answer back to the position before raft sees it.
const (
	hbPosLen         = 8
	hbExtTag         = 'k'
	roundWantsReport = 1
	reportTag        = 'R'
)

// appendHeartbeatExt appends a heartbeat extension naming sessions, asking
// for contact reports if wantReports.
func appendHeartbeatExt(b []byte, wantReports bool, sessions []uint64) []byte {
	var flags byte
	if wantReports {
		flags |= roundWantsReport
	}
	b = append(b, hbExtTag, flags)
	b = protowire.AppendVarint(b, uint64(len(sessions)))
	for _, s := range sessions {
		b = protowire.AppendVarint(b, s)
	}
	return b
}

// parseHeartbeatExt reads a heartbeat context's extension; ok is false for
// a plain context (or anything else).
func parseHeartbeatExt(ctx []byte) (flags byte, sessions []uint64, ok bool) {
	if len(ctx) < hbPosLen+3 || ctx[hbPosLen] != hbExtTag {
		return 0, nil, false
	}
	flags = ctx[hbPosLen+1]
	p := ctx[hbPosLen+2:]
	cnt, k := protowire.ConsumeVarint(p)
	if k < 0 || cnt > uint64(len(p)) {
		return 0, nil, false
	}
	p = p[k:]
	sessions = make([]uint64, 0, cnt)
	for range cnt {
		v, k := protowire.ConsumeVarint(p)
		if k < 0 {
			return 0, nil, false
		}
		sessions = append(sessions, v)
		p = p[k:]
	}
	return flags, sessions, len(p) == 0
}

// SeeRound records a confirmation round this leader issues at now in term,
// for sessions' keepalives.
func (e *Engine) SeeRound(term uint64, sessions []uint64, now time.Time) {
	e.seen.see(term, sessions, now)
}

// SeeLeader records a message from a leader (a MsgHeartbeat, MsgApp or
// MsgSnap, before raft steps it): a heartbeat of confirmation rounds also
// names their sessions. Other messages are ignored.
func (e *Engine) SeeLeader(m *raftpb.Message, now time.Time) {
	switch m.GetType() {
	case raftpb.MessageType_MsgHeartbeat:
		if _, sessions, ok := parseHeartbeatExt(m.GetContext()); ok {
			e.seen.see(m.GetTerm(), sessions, now)
			return
		}
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgSnap:
	default:
		return
	}
	e.seen.any.record(m.GetTerm(), now)
}

// ReportsWanted reports whether this leader is collecting contact reports:
// its confirmation rounds ask for them (and it issues one even without
// keepalives waiting).
func (e *Engine) ReportsWanted() bool { return e.leader && e.lead.reports.wanted }

// HeartbeatExt is this turn's extension for the leader's ReadIndex
// heartbeats, given the sessions of every unanswered confirmation round
// (sorted and deduplicated in place): nil while an older member is known (a
// build before this extension may refuse a heartbeat context above 64
// bytes; without it a new leader gets no reports and keeps the bases it
// armed: expiry only comes later).
func (e *Engine) HeartbeatExt(sessions []uint64) []byte {
	if e.host.OlderMemberKnown() {
		return nil
	}
	slices.Sort(sessions)
	sessions = slices.Compact(sessions)
	return appendHeartbeatExt(nil, e.ReportsWanted(), sessions)
}

// ExtendHeartbeat appends ext (HeartbeatExt) to an outgoing ReadIndex
// heartbeat (a copy: raft may still hold the context).
func ExtendHeartbeat(m *raftpb.Message, ext []byte) {
	ctx := m.GetContext()
	if len(ctx) != hbPosLen || len(ext) == 0 {
		return
	}
	b := make([]byte, 0, hbPosLen+len(ext))
	m.Context = append(append(b, ctx...), ext...)
}

// AnswerHeartbeat replaces the echoed extension of this follower's answer
// to a heartbeat (a MsgHeartbeatResp) by its contact report, if the leader
// asked, or by nothing.
func (e *Engine) AnswerHeartbeat(m *raftpb.Message, now time.Time) {
	ctx := m.GetContext()
	flags, _, ok := parseHeartbeatExt(ctx)
	if !ok {
		return
	}
	b := make([]byte, hbPosLen, hbPosLen+64)
	copy(b, ctx[:hbPosLen])
	if flags&roundWantsReport != 0 {
		b = e.seen.appendReport(b, m.GetTerm(), now, e.opened)
	}
	m.Context = b
}

// TakeReport cuts a follower's answer to a heartbeat (a MsgHeartbeatResp
// received at now) back to raft's position and, on the leader, counts its
// contact report, if any.
func (e *Engine) TakeReport(m *raftpb.Message, now time.Time) {
	ctx := m.GetContext()
	if len(ctx) <= hbPosLen || ctx[hbPosLen] != reportTag {
		return
	}
	if e.leader {
		e.lead.onReport(e, m.GetFrom(), m.GetTerm(), ctx[hbPosLen:], now)
	}
	m.Context = ctx[:hbPosLen]
}
