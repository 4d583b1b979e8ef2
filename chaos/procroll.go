package chaos

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// ProcRolling restarts gossip-mode node processes one after another, under
// the workload: each member in turn is closed gracefully (node.Close: its
// locks released, leadership handed over, its place kept) and started again
// on its data directory and ports, as a StatefulSet update does. Besides the
// usual checks: no operation on a member that is not restarting fails with
// ErrUnavailable, ErrSessionExpired, ErrClosed or ErrRemoved, every member
// comes back as itself, and the voters are the same at the end (once,
// a plain Close used to remove the member for good).
const ProcRolling = "rolling"

// gossipSetup gives every slot a fixed gossip address next to its gRPC one.
func (r *procRun) gossipSetup() error {
	r.gossip = map[uint64]string{}
	for _, id := range r.ids() {
		host, _, _ := net.SplitHostPort(r.addrs[id])
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return err
		}
		r.gossip[id] = ln.Addr().String()
		ln.Close()
	}
	return nil
}

// gossipArgs are the child flags of gossip mode for slot id.
func (r *procRun) gossipArgs(id uint64) []string {
	if r.gossip == nil {
		return nil
	}
	var seeds []string
	for _, o := range r.ids() {
		if o != id {
			seeds = append(seeds, r.gossip[o])
		}
	}
	// Every slot is a founder: the fleet forms from all of them (formation
	// needs the named founders, the same list everywhere).
	var founders []string
	for _, o := range r.ids() {
		founders = append(founders, fmt.Sprintf("slot-%d", o))
	}
	return []string{"-gossip", r.gossip[id], "-seeds", strings.Join(seeds, ","), "-gname", fmt.Sprintf("slot-%d", id),
		"-founders", strings.Join(founders, ",")}
}

// conf asks slot id for its view of the configuration.
func (r *procRun) conf(ctx context.Context, id uint64) (confResp, error) {
	var c confResp
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := r.get(qctx, id, "/conf", &c)
	return c, err
}

// waitVoters waits until every slot reports the same voters, size of them,
// and can serve.
func (r *procRun) waitVoters(ctx context.Context, size int) ([]uint64, error) {
	var last []uint64
	for {
		var voters []uint64
		ok := true
		for _, id := range r.ids() {
			c, err := r.conf(ctx, id)
			if err != nil || !c.Ready || len(c.Voters) != size || (voters != nil && !slices.Equal(voters, c.Voters)) {
				ok = false
				if err == nil {
					last = c.Voters
				}
				break
			}
			voters = c.Voters
		}
		if ok {
			return voters, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("configuration never settled (last voters %016x): %w", last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// rollingWindow is when a slot was down for its restart (ns since epoch).
type rollingWindow struct {
	slot       uint64
	start, end int64
}

// rolling restarts every slot once, then again, until ctx ends.
func (r *procRun) rolling(ctx context.Context, applied map[string]int, viol func(string, ...any)) []rollingWindow {
	voters, err := r.waitVoters(ctx, r.cfg.Size)
	if err != nil {
		viol("rolling: %v", err)
		return nil
	}
	r.cfg.Logf("rolling: voters %016x", voters)
	// Operations before this moment ran while the fleet was still forming.
	windows := []rollingWindow{{slot: 0, start: 0, end: time.Since(r.epoch).Nanoseconds()}}
	ids := make(map[uint64]uint64) // slot -> raft id
	for _, id := range r.ids() {
		c, _ := r.conf(ctx, id)
		ids[id] = c.ID
	}
	for ctx.Err() == nil {
		for _, slot := range r.ids() {
			if ctx.Err() != nil {
				break
			}
			w := rollingWindow{slot: slot, start: time.Since(r.epoch).Nanoseconds()}
			var ok bool
			began := time.Now()
			if err := r.get(context.Background(), slot, "/close", &ok); err != nil {
				viol("rolling: Close of slot %d: %v", slot, err)
			}
			closed := time.Since(began)
			<-r.proc(slot).done
			if err := r.start(slot, false); err != nil {
				viol("rolling: restart of slot %d: %v", slot, err)
				return windows
			}
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			got, err := r.waitVoters(sctx, r.cfg.Size)
			cancel()
			w.end = time.Since(r.epoch).Nanoseconds()
			windows = append(windows, w)
			applied[ProcRolling]++
			c, _ := r.conf(context.Background(), slot)
			switch {
			case err != nil:
				viol("rolling: after restarting slot %d: %v", slot, err)
				return windows
			case !slices.Equal(got, voters):
				viol("rolling: voters %016x after restarting slot %d, were %016x", got, slot, voters)
			case c.ID != ids[slot]:
				viol("rolling: slot %d came back as raft id %016x, was %016x", slot, c.ID, ids[slot])
			}
			r.cfg.Logf("rolling: slot %d (raft id %016x) closed in %v, back serving after %v", slot, ids[slot],
				closed.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
			sleepCtx(ctx, 300*time.Millisecond) // traffic on the whole fleet
		}
	}
	return windows
}

// rollingVerdicts: an operation of a member that was not restarting must
// not fail because its session ended, it was removed or closed; failures for
// lack of a leader (a Lock's own timeout, 50 ms–1 s in this workload, ending
// during a leader's hand-over or an election; a TryLock past its bound) are
// the documented unavailability of a restart: counted in a note, with the
// longest.
func rollingVerdicts(ops []Op, windows []rollingWindow, viol func(string, ...any), note func(string)) {
	down := func(slot uint64, t int64) bool {
		for _, w := range windows {
			if (w.slot == slot || w.slot == 0) && t >= w.start && t <= w.end {
				return true
			}
		}
		return false
	}
	failed, unavailable := 0, 0
	var longest time.Duration
	for _, op := range ops {
		e := op.Err
		if e == "" || down(op.Node, op.Start) || down(op.Node, op.End) {
			continue
		}
		switch {
		case strings.Contains(e, "unavailable"):
			unavailable++
			longest = max(longest, time.Duration(op.End-op.Start))
			continue
		case strings.Contains(e, "session expired"), strings.Contains(e, "removed"), strings.Contains(e, "node closed"):
		default:
			continue // a Lock that timed out waiting, a TryLock that found it held
		}
		if failed++; failed <= 5 {
			viol("rolling: slot %d's %v of %s (%.3f–%.3fs) failed while it was not restarting: %s", op.Node, op.Kind, op.Name,
				float64(op.Start)/1e9, float64(op.End)/1e9, e)
		}
	}
	if failed > 5 {
		viol("rolling: %d operations failed in all", failed)
	}
	note(fmt.Sprintf("rolling: %d restarts (graceful Close, start on the same data directory and ports); %d operations of members not restarting ended with ErrUnavailable (no leader before their own timeout: the longest such call took %v)",
		max(0, len(windows)-1), unavailable, longest.Round(time.Millisecond)))
}
