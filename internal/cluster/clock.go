package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// SkewClock is a node.Clock whose two readings can be faulted separately, as
// on a real machine. A Go time.Time carries a wall reading (what the date
// says) and a monotonic reading (what Sub, Before and After compare when both
// Times have one, and what timers run on):
//
//   - the monotonic reading advances at a rate factor (SetRate; a rate skew
//     moves the wall reading with it) and can jump forward (Jump: both
//     readings; a monotonic clock never goes back);
//   - the wall reading is the monotonic one plus an offset that StepWall
//     moves by any amount, forward or backward (an NTP step, a VM resume, an
//     operator's date -s), without touching the monotonic reading.
//
// So code that keeps its deadlines as whole Times is unaffected by a wall
// step, and code that stores UnixNano and rebuilds Times with time.Unix (no
// monotonic reading: comparisons fall back to the wall clock) sees it.
//
// Its tickers and timers run on the virtual monotonic time: at rate 2 they
// fire twice as often in real time, a forward Jump fires the due ones at
// once, and a wall step fires nothing.
type SkewClock struct {
	mu         sync.Mutex
	anchorReal time.Time     // system reading at the last rate change
	anchorVirt time.Time     // virtual reading at the same moment
	rate       float64       // virtual monotonic time per real time
	wall       time.Duration // sum of the wall steps
	// changed is closed (and replaced) when the rate or the monotonic
	// offset changes, so that waiting timers recompute their wait.
	changed chan struct{}
}

// NewSkewClock returns a clock that starts equal to the system clock.
func NewSkewClock() *SkewClock {
	now := time.Now()
	return &SkewClock{anchorReal: now, anchorVirt: now, rate: 1, changed: make(chan struct{})}
}

// nowLocked is the virtual monotonic reading (with the unstepped wall
// reading) at system time real.
func (c *SkewClock) nowLocked(real time.Time) time.Time {
	el := real.Sub(c.anchorReal)
	return c.anchorVirt.Add(time.Duration(float64(el) * c.rate))
}

// Now returns the virtual time: the monotonic reading of the virtual clock
// and the wall reading moved by every StepWall so far.
func (c *SkewClock) Now() time.Time {
	c.mu.Lock()
	t, wall := c.nowLocked(time.Now()), c.wall
	c.mu.Unlock()
	return stepWall(t, wall)
}

// Jump moves the monotonic reading (and the wall reading with it) forward by
// d. Negative d is ignored: a monotonic clock never goes back.
func (c *SkewClock) Jump(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.anchorVirt = c.anchorVirt.Add(d)
	c.wakeLocked()
	c.mu.Unlock()
}

// maxWallOffset bounds the sum of the wall steps: a Time keeps its monotonic
// reading only while its wall reading lies between the years 1885 and 2157.
const maxWallOffset = 50 * 365 * 24 * time.Hour

// StepWall moves the wall reading by d, forward or backward, leaving the
// monotonic reading (and every ticker and timer) alone. The sum of the steps
// is kept within ±50 years.
func (c *SkewClock) StepWall(d time.Duration) {
	c.mu.Lock()
	c.wall = min(max(c.wall+d, -maxWallOffset), maxWallOffset)
	c.mu.Unlock()
}

// WallOffset is the sum of the wall steps so far.
func (c *SkewClock) WallOffset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// SetRate makes virtual time advance r times as fast as real time from now on.
func (c *SkewClock) SetRate(r float64) {
	if r <= 0 {
		r = 1e-3
	}
	c.mu.Lock()
	real := time.Now()
	c.anchorVirt = c.nowLocked(real)
	c.anchorReal = real
	c.rate = r
	c.wakeLocked()
	c.mu.Unlock()
}

func (c *SkewClock) wakeLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Rate is the current rate factor.
func (c *SkewClock) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

// NewTicker ticks every d of virtual time. Like time.Ticker it drops ticks a
// slow receiver misses.
func (c *SkewClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	ch := make(chan time.Time, 1)
	stop := make(chan struct{})
	var once sync.Once
	go func() {
		next := c.Now().Add(d)
		for {
			now := c.Now()
			if !now.Before(next) {
				select {
				case ch <- now:
				default:
				}
				next = next.Add(d)
				if !next.After(now) {
					next = now.Add(d)
				}
				continue
			}
			wait := time.Duration(float64(next.Sub(now)) / c.Rate())
			// Re-read the rate and offset at least every few ms so that
			// changes take effect promptly.
			wait = min(wait, 5*time.Millisecond)
			t := time.NewTimer(max(wait, 100*time.Microsecond))
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return
			}
		}
	}()
	return ch, func() { once.Do(func() { close(stop) }) }
}

// AfterFunc calls f in its own goroutine once d of virtual monotonic time
// has passed: a rate change or a forward Jump is taken into account at once,
// a wall step not at all. stop prevents the call if it has not started and
// reports whether it did, as time.Timer.Stop.
func (c *SkewClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	at := c.Now().Add(d)
	const (
		pending = iota
		fired
		stopped
	)
	var state atomic.Int32
	stopc := make(chan struct{})
	go func() {
		for {
			c.mu.Lock()
			now, rate, changed := c.nowLocked(time.Now()), c.rate, c.changed
			c.mu.Unlock()
			if !now.Before(at) {
				if state.CompareAndSwap(pending, fired) {
					f()
				}
				return
			}
			t := time.NewTimer(max(time.Duration(float64(at.Sub(now))/rate), 50*time.Microsecond))
			select {
			case <-t.C:
			case <-changed:
				t.Stop()
			case <-stopc:
				t.Stop()
				return
			}
		}
	}()
	return func() bool {
		if state.CompareAndSwap(pending, stopped) {
			close(stopc)
			return true
		}
		return false
	}
}

// timeLayout mirrors time.Time's fields. While the hasMonotonic bit of wall
// is set, ext holds the monotonic reading (nanoseconds since the process
// started) and wall the wall reading (time package, type Time). The array
// below stops the build if the size of time.Time ever changes; stepWall
// checks the rest on every call.
type timeLayout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

var _ = [1]struct{}{}[unsafe.Sizeof(time.Time{})-unsafe.Sizeof(timeLayout{})]

// stepWall returns t with its wall reading moved by d and its monotonic
// reading unchanged. Go has no public way to build such a Time: Add moves
// both readings and Round(0) drops the monotonic one. So it adds d to both
// and puts t's monotonic reading back through time.Time's layout, then
// checks the result through the public API and panics if the layout is not
// what it assumes (a Go release that changes time.Time must fail loudly
// here, not quietly stop modelling wall steps).
func stepWall(t time.Time, d time.Duration) time.Time {
	if d == 0 {
		return t
	}
	u := t.Add(d)
	(*timeLayout)(unsafe.Pointer(&u)).ext = (*timeLayout)(unsafe.Pointer(&t)).ext
	// u.Sub(t) compares monotonic readings only if both Times carry one:
	// 0 means u kept one, and it is t's; otherwise it would be d.
	if !u.Round(0).Equal(t.Round(0).Add(d)) || u.Sub(t) != 0 {
		panic(fmt.Sprintf("chaos: time.Time layout is not {wall, ext, loc} with ext the monotonic reading "+
			"(stepping %v by %v gave %v): SkewClock cannot model wall steps on this Go release", t, d, u))
	}
	return u
}

// Clock is a member's clock, as node.Clock is.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) (<-chan time.Time, func())
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// PhasedClock is the simulation's clock: the (fake) system time, with each
// ticker's ticks on multiples of its period plus an offset — the member's
// phase plus a few microseconds that depend on the period — so that no two
// tickers of different periods or members fire at the same instant, and a
// run's order of events depends only on its seed (not on which of a
// member's goroutines made its ticker first).
type PhasedClock struct {
	phase time.Duration
}

// NewPhasedClock returns a clock whose tickers are offset by phase.
func NewPhasedClock(phase time.Duration) *PhasedClock { return &PhasedClock{phase: phase} }

// Now is time.Now.
func (c *PhasedClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (c *PhasedClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// NewTicker ticks every d on its own phase. Like time.Ticker it drops ticks
// a slow receiver misses.
func (c *PhasedClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	off := c.phase + time.Duration(uint64(d)*0x9e3779b97f4a7c15>>54)*time.Microsecond
	ch := make(chan time.Time, 1)
	stop := make(chan struct{})
	go func() {
		now := time.Now()
		tm := time.NewTimer(d - time.Duration(now.UnixNano()%int64(d)) + off%d)
		defer tm.Stop()
		for {
			select {
			case at := <-tm.C:
				select {
				case ch <- at:
				default:
				}
				tm.Reset(d)
			case <-stop:
				return
			}
		}
	}()
	var once sync.Once
	return ch, func() { once.Do(func() { close(stop) }) }
}
