package chaos

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The mutex model, one partition per lock name. The state is the owner that
// holds the name ("" when free). Owners are unique per Acquire, so a hold is
// never reentrant.
//
//	Lock/TryLock ok      the name was free; now the owner holds it
//	TryLock locked       someone else held it
//	Unlock ok            the owner held it; now free
//	Lock unknown         S4: a failed Lock leaves nothing behind, but a grant
//	                     may race the caller giving up, and the node then
//	                     releases it in the background. Modelled as an op
//	                     pending forever that takes the name if free, paired
//	                     with a "ghost" Unlock pending forever: linearized
//	                     back to back they are "no effect"; apart, a
//	                     transient hold. Unknown Locks that the applied log
//	                     shows never granted are left out (no effect at all).
//	Unlock unknown       a release that timed out, or a hold lost to session
//	                     expiry or a crash: it frees the name if the owner
//	                     holds it, at any moment from the grant's return on.
type mutexInput struct {
	Kind  OpKind
	Owner string
	Ghost bool
}

type mutexOutput struct{ Outcome Outcome }

const never = math.MaxInt64

// MutexModel is the porcupine model.
func MutexModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range history {
				name := op.Metadata.(string)
				if _, ok := by[name]; !ok {
					order = append(order, name)
				}
				by[name] = append(by[name], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, n := range order {
				out = append(out, by[n])
			}
			return out
		},
		Init: func() interface{} { return "" },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			holder := state.(string)
			in := input.(mutexInput)
			out := output.(mutexOutput)
			switch {
			case in.Kind != OpUnlock && out.Outcome == OK:
				return holder == "", in.Owner
			case in.Kind == OpTryLock && out.Outcome == Locked:
				return holder != "" && holder != in.Owner, holder
			case in.Kind != OpUnlock: // unknown
				if holder == "" {
					return true, in.Owner
				}
				return true, holder
			case out.Outcome == OK:
				return holder == in.Owner, ""
			default: // Unlock unknown
				if holder == in.Owner {
					return true, ""
				}
				return true, holder
			}
		},
		DescribeOperation: func(input, output interface{}) string {
			in := input.(mutexInput)
			g := ""
			if in.Ghost {
				g = " (ghost)"
			}
			return fmt.Sprintf("%v(%s)%s -> %v", in.Kind, in.Owner, g, output.(mutexOutput).Outcome)
		},
		DescribeState: func(state interface{}) string { return fmt.Sprintf("holder=%q", state) },
	}
}

// ToPorcupine converts a history. granted says whether the applied log ever
// granted an owner (nil: assume it may have).
func ToPorcupine(ops []Op, granted func(owner string) bool) []porcupine.Operation {
	var out []porcupine.Operation
	add := func(client int, name string, in mutexInput, outc Outcome, call, ret int64) {
		out = append(out, porcupine.Operation{ClientId: client, Input: in, Output: mutexOutput{outc}, Call: call, Return: ret, Metadata: name})
	}
	for _, op := range ops {
		in := mutexInput{Kind: op.Kind, Owner: op.Owner}
		switch {
		case op.Outcome == OK || op.Outcome == Locked:
			if op.Kind == OpUnlock && op.Outcome != OK {
				continue
			}
			add(op.Client, op.Name, in, op.Outcome, op.Start, op.End)
		case op.Kind == OpUnlock:
			from := op.HeldFrom
			if from == 0 {
				from = op.Start
			}
			add(op.Client, op.Name, in, Unknown, from, never)
		default: // Lock/TryLock with unknown or pending outcome
			if granted != nil && !granted(op.Owner) {
				continue
			}
			add(op.Client, op.Name, in, Unknown, op.Start, never)
			add(op.Client, op.Name, mutexInput{Kind: OpUnlock, Owner: op.Owner, Ghost: true}, Unknown, op.Start, never)
		}
	}
	return out
}

// CheckLinearizable runs porcupine; the result is Ok, Illegal or Unknown
// (timed out).
func CheckLinearizable(ops []Op, granted func(string) bool, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(MutexModel(), ToPorcupine(ops, granted), timeout)
}
