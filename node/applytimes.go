package node

import "time"

// applyTimes remembers, coarsely, when this replica applied which index, so
// that inspection can say since when a lock is held or a waiter waits
// (lockfsm has no clock: S7). Owned by the loop.
//
// A sample (index i, time t) is taken for the first entry of an apply batch
// once at least sampleEvery has passed since the previous sample. So every
// index between two neighbouring samples k and k+1 was applied in
// [t_k, t_k + sampleEvery): when answers to within sampleEvery (and
// interpolates inside that span, which is exact under steady traffic). When the
// buffer is full every other sample is dropped, so it covers the replica's
// whole life in bounded memory and older answers get coarser (the bound is
// then the gap to the next kept sample). Cost: one comparison per apply
// batch and a 16-byte append per second of activity.
type applyTimes struct {
	knownFrom uint64 // indexes below were applied before this process started (or came in a snapshot)
	idx       []uint64
	at        []time.Time
}

const (
	sampleEvery = 250 * time.Millisecond
	maxSamples  = 4096
)

// note records that index was applied at now (the first of a batch).
func (a *applyTimes) note(index uint64, now time.Time) {
	if index < a.knownFrom {
		return
	}
	if k := len(a.at); k > 0 && (now.Sub(a.at[k-1]) < sampleEvery || index <= a.idx[k-1]) {
		return
	}
	if len(a.idx) == maxSamples {
		j := 0
		for i := 0; i < len(a.idx); i += 2 {
			a.idx[j], a.at[j] = a.idx[i], a.at[i]
			j++
		}
		a.idx, a.at = a.idx[:j], a.at[:j]
	}
	a.idx = append(a.idx, index)
	a.at = append(a.at, now)
}

// when returns when this replica applied index, to within sampleEvery for
// recent indexes (interpolated between the neighbouring samples, which
// bound it); zero when unknown (applied before this process started,
// restored from a snapshot, or not applied yet). last and now are the last
// applied index and the current time, which bound indexes past the newest
// sample.
func (a *applyTimes) when(index, last uint64, now time.Time) time.Time {
	if index < a.knownFrom || len(a.idx) == 0 || index < a.idx[0] || index > last {
		return time.Time{}
	}
	lo, hi := 0, len(a.idx) // the last sample with idx <= index
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if a.idx[mid] <= index {
			lo = mid
		} else {
			hi = mid
		}
	}
	// index was applied in [at[lo], upper): before the next sample, and
	// within sampleEvery of this one (a batch later than that would have
	// taken a sample).
	i0, t0 := a.idx[lo], a.at[lo]
	i1, t1 := last+1, now
	if lo+1 < len(a.idx) {
		i1, t1 = a.idx[lo+1], a.at[lo+1]
	}
	span := min(t1.Sub(t0), sampleEvery)
	if i1 <= i0 || span <= 0 {
		return t0
	}
	return t0.Add(time.Duration(float64(span) * float64(index-i0) / float64(i1-i0)))
}

// restart forgets everything below from (after a snapshot restore: those
// entries were never applied here one by one).
func (a *applyTimes) restart(from uint64) {
	a.knownFrom = max(a.knownFrom, from)
}
