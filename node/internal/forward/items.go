package forward

import (
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// ResultItem is the push item of a command's result; code is the wire code
// of res.Err (Config.ErrCode).
func ResultItem(cmd *lockfsm.Command, res lockfsm.Result, code uint32) *transportpb.PushItem {
	return &transportpb.PushItem{Item: &transportpb.PushItem_Result{Result: &transportpb.PushResult{
		Kind: uint32(cmd.Kind), Session: cmd.Session, Seq: cmd.Seq, Status: uint32(res.Status),
		ErrCode: code, Duplicate: res.Duplicate, Token: res.Token, HoldCount: res.HoldCount,
		Position: res.Position, HolderSession: res.Holder.Session, HolderOwner: res.Holder.Owner}}}
}

// PushedResult is the command (kind, session, seq) and result a push item
// carries; err is the error its code stands for. Out-of-range kinds and
// statuses become values no handler acts on.
func PushedResult(r *transportpb.PushResult, err error) (lockfsm.Command, lockfsm.Result) {
	cmd := lockfsm.Command{Kind: lockfsm.Kind(min(r.GetKind(), 255)), Session: r.GetSession(), Seq: r.GetSeq()}
	res := lockfsm.Result{Status: lockfsm.Status(min(r.GetStatus(), 255)), Err: err,
		Duplicate: r.GetDuplicate(), Token: r.GetToken(), HoldCount: r.GetHoldCount(), Position: r.GetPosition(),
		Holder: lockfsm.Holder{Session: r.GetHolderSession(), Owner: r.GetHolderOwner()}}
	return cmd, res
}

// EventItem is the push item of an event.
func EventItem(ev *lockfsm.Event) *transportpb.PushItem {
	return &transportpb.PushItem{Item: &transportpb.PushItem_Event{Event: &transportpb.PushEvent{
		Kind: uint32(ev.Kind), Reason: uint32(ev.Reason), FromQueue: ev.FromQueue, Session: ev.Session,
		Seq: ev.Seq, Token: ev.Token, LeaseMillis: ev.LeaseMillis, Name: ev.Name, Owner: ev.Owner,
		Mode: uint32(ev.Mode), Permits: ev.Permits, ExtraNames: ev.ExtraNames}}}
}

// PushedEvent is the event a push item carries. Out-of-range kinds,
// reasons and modes become values no handler acts on.
func PushedEvent(e *transportpb.PushEvent) lockfsm.Event {
	return lockfsm.Event{Kind: lockfsm.EventKind(min(e.GetKind(), 255)), Reason: lockfsm.Reason(min(e.GetReason(), 255)),
		FromQueue: e.GetFromQueue(), Session: e.GetSession(), Seq: e.GetSeq(), Token: e.GetToken(),
		LeaseMillis: e.GetLeaseMillis(), Name: e.GetName(), Owner: e.GetOwner(),
		Mode: lockfsm.Mode(min(e.GetMode(), 255)), Permits: e.GetPermits(), ExtraNames: e.GetExtraNames()}
}
