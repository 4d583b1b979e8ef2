package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model of the whole catalogue, one partition per mutex name,
// read-write lock, semaphore, election and multi-name group (the names a
// group's multi-name locks take, with the single-name locks of those
// names). Unknown outcomes are handled as in the mutex model (model.go): a
// failed acquire that the applied log shows granted is an acquire pending
// forever plus a ghost release pending forever; a release of unknown
// outcome frees at any moment from the grant's return on.
//
// Where the history cannot tell whether requests were waiting, a try's
// "locked" is allowed whenever it could be right:
//
//	read-write   TryRLock locked: someone holds it (a writer, or readers
//	             with a writer possibly waiting); TryWLock locked: anyone holds.
//	semaphore    TryAcquire locked: fewer than k permits free, or any held
//	             (a request for more may be waiting at the head).
//	multi-name   a try locked: one of the group's names is held (a waiting
//	             multi-name lock heads a free name's queue only while
//	             another of its names is held).
//	election     campaigns always wait; Proclaim ok only by the leader.

// rwInput is a read-write lock operation.
type rwInput struct {
	Kind   OpKind
	Owner  string
	Shared bool
	Ghost  bool
}

// semInput is a semaphore operation.
type semInput struct {
	Kind    OpKind
	Owner   string
	Permits int
	Limit   int
	Ghost   bool
}

// multiInput is an operation on a multi-name group: a multi-name lock or a
// single-name lock of one of its names.
type multiInput struct {
	Kind  OpKind
	Owner string
	Names []string
	Ghost bool
}

// rwState: "" free, "W owner" a writer, "R a,b" readers (sorted).
func rwParse(s string) (writer string, readers []string) {
	switch {
	case strings.HasPrefix(s, "W "):
		return s[2:], nil
	case strings.HasPrefix(s, "R "):
		return "", strings.Split(s[2:], ",")
	}
	return "", nil
}

func rwFormat(writer string, readers []string) string {
	if writer != "" {
		return "W " + writer
	}
	if len(readers) == 0 {
		return ""
	}
	slices.Sort(readers)
	return "R " + strings.Join(readers, ",")
}

func rwStep(state string, in rwInput, out Outcome) (bool, string) {
	writer, readers := rwParse(state)
	holds := func() bool {
		if in.Shared {
			return slices.Contains(readers, in.Owner)
		}
		return writer == in.Owner
	}
	take := func() (bool, string) {
		if in.Shared {
			if writer != "" {
				return false, state
			}
			return true, rwFormat("", append(slices.Clone(readers), in.Owner))
		}
		if writer != "" || len(readers) > 0 {
			return false, state
		}
		return true, rwFormat(in.Owner, nil)
	}
	drop := func() string {
		if in.Shared {
			i := slices.Index(readers, in.Owner)
			return rwFormat("", slices.Delete(slices.Clone(readers), i, i+1))
		}
		return ""
	}
	return holdStep(state, in.Kind, out, writer != "" || len(readers) > 0, holds(), take, drop)
}

// holdStep is the step of every primitive's model but the mutex's (whose own step, model.go, is the same
// over a single holder): an acquire that returned ok takes the primitive (the step fails if the state
// does not allow it); a try's "locked" needs busy (the primitive was held); an acquire of unknown outcome
// takes it if it can, else changes nothing; a release that returned ok needs the owner to hold
// (holds) and drops the owner's hold; one of unknown outcome drops it if it is held.
func holdStep(state string, kind OpKind, out Outcome, busy, holds bool, take func() (bool, string),
	drop func() string) (bool, string) {
	switch {
	case kind != OpUnlock && out == OK:
		return take()
	case kind == OpTryLock && out == Locked:
		return busy, state
	case kind != OpUnlock: // unknown: takes it if it can
		if ok, s := take(); ok {
			return true, s
		}
		return true, state
	case out == OK:
		if !holds {
			return false, state
		}
		return true, drop()
	default: // Unlock unknown
		if holds {
			return true, drop()
		}
		return true, state
	}
}

// semState: "owner=k;..." sorted.
func semParse(s string) map[string]int {
	m := map[string]int{}
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		o, k, _ := strings.Cut(kv, "=")
		var n int
		fmt.Sscan(k, &n)
		m[o] = n
	}
	return m
}

// formatState writes a map state as "key=value;..." sorted by key.
func formatState[V any](m map[string]V) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s=%v;", k, m[k])
	}
	return b.String()
}

func semStep(state string, in semInput, out Outcome) (bool, string) {
	m := semParse(state)
	used := 0
	for _, k := range m {
		used += k
	}
	take := func() (bool, string) {
		if _, dup := m[in.Owner]; dup || used+in.Permits > in.Limit {
			return false, state
		}
		m[in.Owner] = in.Permits
		return true, formatState(m)
	}
	_, holds := m[in.Owner]
	drop := func() string {
		delete(m, in.Owner)
		return formatState(m)
	}
	return holdStep(state, in.Kind, out, used+in.Permits > in.Limit || used > 0, holds, take, drop)
}

// multiState: "name=owner;..." sorted.
func multiStep(state string, in multiInput, out Outcome) (bool, string) {
	m := map[string]string{}
	for _, kv := range strings.Split(state, ";") {
		if n, o, ok := strings.Cut(kv, "="); ok {
			m[n] = o
		}
	}
	holdsAll := func() bool {
		for _, n := range in.Names {
			if m[n] != in.Owner {
				return false
			}
		}
		return true
	}
	take := func() (bool, string) {
		for _, n := range in.Names {
			if m[n] != "" {
				return false, state
			}
		}
		for _, n := range in.Names {
			m[n] = in.Owner
		}
		return true, formatState(m)
	}
	drop := func() string {
		for _, n := range in.Names {
			delete(m, n)
		}
		return formatState(m)
	}
	return holdStep(state, in.Kind, out, len(m) > 0, holdsAll(), take, drop)
}

// CatalogueModel is the porcupine model of every primitive; partitions by
// the operation's Metadata (its partition key).
func CatalogueModel() porcupine.Model {
	mutex := MutexModel()
	return porcupine.Model{
		Partition: mutex.Partition,
		Init:      func() interface{} { return "" },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			out := output.(mutexOutput).Outcome
			switch in := input.(type) {
			case rwInput:
				return rwStep(state.(string), in, out)
			case semInput:
				return semStep(state.(string), in, out)
			case multiInput:
				return multiStep(state.(string), in, out)
			case mutexInput:
				if in.Kind == OpProclaim {
					// Ok only by the leader; a failed or unknown one
					// changes nothing.
					return out != OK || state.(string) == in.Owner, state
				}
			}
			return mutex.Step(state, input, output)
		},
		DescribeOperation: func(input, output interface{}) string {
			out := output.(mutexOutput).Outcome
			switch in := input.(type) {
			case rwInput:
				side := "W"
				if in.Shared {
					side = "R"
				}
				return fmt.Sprintf("%s%v(%s)%s -> %v", side, in.Kind, in.Owner, ghost(in.Ghost), out)
			case semInput:
				return fmt.Sprintf("%v(%s, %d of %d)%s -> %v", in.Kind, in.Owner, in.Permits, in.Limit, ghost(in.Ghost), out)
			case multiInput:
				return fmt.Sprintf("%v(%s, %v)%s -> %v", in.Kind, in.Owner, in.Names, ghost(in.Ghost), out)
			}
			return mutex.DescribeOperation(input, output)
		},
		DescribeState: func(state interface{}) string { return fmt.Sprintf("%q", state) },
	}
}

func ghost(g bool) string {
	if g {
		return " (ghost)"
	}
	return ""
}

// partitionKey is the porcupine partition an operation belongs to.
func partitionKey(op Op) string {
	switch op.Prim {
	case PrimRW:
		return "rw:" + op.Name
	case PrimSemaphore:
		return "sem:" + op.Name
	case PrimElection:
		return "el:" + op.Name
	case PrimMulti:
		return "grp:" + op.Group
	}
	return op.Name
}

// catalogueInput is the model input of op (ghost: the release paired with a
// pending-forever acquire).
func catalogueInput(op Op, kind OpKind, ghost bool) interface{} {
	switch op.Prim {
	case PrimRW:
		return rwInput{Kind: kind, Owner: op.Owner, Shared: op.Shared, Ghost: ghost}
	case PrimSemaphore:
		return semInput{Kind: kind, Owner: op.Owner, Permits: op.Permits, Limit: op.Limit, Ghost: ghost}
	case PrimMulti:
		return multiInput{Kind: kind, Owner: op.Owner, Names: op.Names, Ghost: ghost}
	}
	return mutexInput{Kind: kind, Owner: op.Owner, Ghost: ghost}
}

// LogOutcome is what the applied log shows of one owner's hold: whether it
// was ever granted and, when the run recorded it, by when (on the
// history's clock) a replica had applied the grant and the hold's end
// (zero: not recorded, or the hold never ended).
type LogOutcome struct {
	Granted            bool
	GrantedBy, EndedBy int64
}

// Outcomes gives the applied log's facts about an owner (AppliedLog.Outcomes).
// A nil Outcomes knows nothing: any owner may have been granted, no bounds.
type Outcomes func(owner string) LogOutcome

// GrantedOnly is an Outcomes that knows only whether an owner was granted
// (nil: any may have been).
func GrantedOnly(granted func(owner string) bool) Outcomes {
	if granted == nil {
		return nil
	}
	return func(owner string) LogOutcome { return LogOutcome{Granted: granted(owner)} }
}

// ToPorcupineCatalogue converts a history of any primitives, with what the
// applied log shows of the operations whose outcome the client did not
// learn (nil: nothing).
//
// Without times, such an acquire is pending forever (it may take the lock
// at any moment after its call, or never) with a ghost release pending
// forever, and a release of unknown outcome frees the lock at any moment
// after the grant returned. Each such operation multiplies the orders the
// checker must try; a few dozen on one read-write lock or semaphore, whose
// holders can coexist, put it beyond memory and time. So where the log
// recorded times they close the intervals: an acquire the log granted is an
// ok acquire returning when a replica first applied its grant, and the end
// of its hold (the ghost release, or the release whose answer the client
// did not get) an ok release returning when a replica first applied that
// end (its unlock or its session's expiry). These are times by which the
// effect had certainly happened: an entry is committed before any replica
// applies it, and the first replica to apply an entry had applied every
// earlier one, so the first-apply instants of the entries are a valid
// linearization of a correct history. A time earlier than the operation's
// call (a grant lost before the client's acquire returned) is not used.
func ToPorcupineCatalogue(ops []Op, outcomes Outcomes) []porcupine.Operation {
	var out []porcupine.Operation
	add := func(op Op, in interface{}, outc Outcome, call, ret int64) {
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: in, Output: mutexOutput{outc}, Call: call,
			Return: ret, Metadata: partitionKey(op)})
	}
	facts := func(owner string) LogOutcome {
		if outcomes == nil {
			return LogOutcome{Granted: true}
		}
		return outcomes(owner)
	}
	by := func(t, call int64) int64 {
		if t == 0 || t < call {
			return never
		}
		return t
	}
	for _, op := range ops {
		switch {
		case op.Kind == OpProclaim:
			if op.Outcome == OK {
				add(op, catalogueInput(op, OpProclaim, false), OK, op.Start, op.End)
			}
		case op.Outcome == OK || op.Outcome == Locked:
			if op.Kind == OpUnlock && op.Outcome != OK {
				continue
			}
			add(op, catalogueInput(op, op.Kind, false), op.Outcome, op.Start, op.End)
		case op.Kind == OpUnlock:
			from := op.HeldFrom
			if from == 0 {
				from = op.Start
			}
			if end := by(facts(op.Owner).EndedBy, from); end != never {
				add(op, catalogueInput(op, OpUnlock, false), OK, from, end)
			} else {
				add(op, catalogueInput(op, OpUnlock, false), Unknown, from, never)
			}
		default:
			f := facts(op.Owner)
			if !f.Granted {
				continue
			}
			grant, end := by(f.GrantedBy, op.Start), by(f.EndedBy, op.Start)
			if grant == never {
				add(op, catalogueInput(op, op.Kind, false), Unknown, op.Start, never)
				add(op, catalogueInput(op, OpUnlock, true), Unknown, op.Start, never)
				continue
			}
			add(op, catalogueInput(op, op.Kind, false), OK, op.Start, grant)
			if end != never {
				add(op, catalogueInput(op, OpUnlock, true), OK, op.Start, end)
			} else {
				add(op, catalogueInput(op, OpUnlock, true), Unknown, op.Start, never)
			}
		}
	}
	return out
}

// CheckCatalogue runs porcupine over a history of any primitives.
func CheckCatalogue(ops []Op, outcomes Outcomes, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(CatalogueModel(), ToPorcupineCatalogue(ops, outcomes), timeout)
}

// CheckCatalogueResult runs porcupine over a history of any primitives
// without the partial linearizations a visualization needs (far less
// memory: CheckCatalogue keeps, for every operation, the longest
// linearization that includes it).
func CheckCatalogueResult(ops []Op, outcomes Outcomes, timeout time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(CatalogueModel(), ToPorcupineCatalogue(ops, outcomes), timeout)
}
