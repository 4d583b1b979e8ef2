package chaos

import (
	"sync"
	"time"
)

// SkewClock is a node.Clock over the system's monotonic clock with an offset
// and a rate factor that a fault schedule can change at run time. Now stays
// monotonic as long as jumps are forward (node.Clock requires it; a backward
// jump of a monotonic clock cannot happen on a real machine, so ClockJump
// only moves forward). Its tickers tick on virtual time: at rate 2 they fire
// twice as often in real time, and a forward jump fires at once.
type SkewClock struct {
	mu         sync.Mutex
	anchorReal time.Time // system reading at the last rate change
	anchorVirt time.Time // virtual reading at the same moment
	rate       float64
}

// NewSkewClock returns a clock that starts equal to the system clock.
func NewSkewClock() *SkewClock {
	now := time.Now()
	return &SkewClock{anchorReal: now, anchorVirt: now, rate: 1}
}

func (c *SkewClock) nowLocked(real time.Time) time.Time {
	el := real.Sub(c.anchorReal)
	return c.anchorVirt.Add(time.Duration(float64(el) * c.rate))
}

// Now returns the virtual time (it carries a monotonic reading).
func (c *SkewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked(time.Now())
}

// Jump moves the clock forward by d (negative d is ignored: see the type doc).
func (c *SkewClock) Jump(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.anchorVirt = c.anchorVirt.Add(d)
	c.mu.Unlock()
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
	c.mu.Unlock()
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
