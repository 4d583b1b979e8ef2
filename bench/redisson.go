package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisson-watchdog: Redis (one redis-server, default persistence) with a
// lock that works the way Redisson's RLock does with no lease given, the
// form its users get by default: the lock is a hash {owner: hold count}
// with a TTL (the watchdog timeout, here the 3 s every system gets;
// Redisson's default is 30 s), acquired and released by Lua scripts; while
// it is held a watchdog re-arms the TTL every timeout/3 (an EVAL per held
// lock per period); a waiter subscribes to the lock's channel, and Unlock
// publishes there, so waiters do not poll (they also retry when the TTL the
// failed attempt returned runs out, which is how they get a crashed
// holder's lock). Written from Redisson's documented algorithm, not its
// code.
func init() {
	register(systemFactory{
		name:          "redisson-watchdog",
		available:     redisAvailable,
		start:         func(dir string, ttl time.Duration) (system, error) { return startRedisson(dir, ttl) },
		crashTakeover: redissonCrashTakeover,
	})
}

var (
	// KEYS[1] lock, ARGV[1] lease ms, ARGV[2] owner: nil when acquired
	// (or re-entered), else the lock's remaining TTL in ms.
	rsLock = redis.NewScript(`
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`)
	// KEYS[1] lock, KEYS[2] channel, ARGV[1] lease ms, ARGV[2] owner:
	// nil if not held by owner, 0 if still held (re-entered), 1 if released.
	rsUnlock = redis.NewScript(`
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], 'unlocked')
return 1`)
	// KEYS[1] lock, ARGV[1] lease ms, ARGV[2] owner: 1 if re-armed.
	rsRenew = redis.NewScript(`
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 1
end
return 0`)
)

// redissonSystem is the redis system (one server, one shared client pool)
// with Redisson's lock.
type redissonSystem struct{ *redisSystem }

func startRedisson(dir string, ttl time.Duration) (*redissonSystem, error) {
	r, err := startRedisSystem(dir, ttl, false)
	if err != nil {
		return nil, err
	}
	return &redissonSystem{r}, nil
}

func (r *redissonSystem) caller(int) (caller, error) {
	return &redissonCaller{cl: r.cl, ttl: r.ttl, id: randomToken()}, nil
}

// redissonCaller is one owner (Redisson: client id + thread id).
type redissonCaller struct {
	cl  *redis.Client
	ttl time.Duration
	id  string

	mu sync.Mutex
	ps *redis.PubSub // created at the first wait, reused
}

func (c *redissonCaller) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ps != nil {
		c.ps.Close()
	}
}

func channelOf(name string) string { return "redisson_lock__channel:{" + name + "}" }

// try runs the lock script: acquired, or the lock's remaining TTL.
func (c *redissonCaller) try(ctx context.Context, name string) (bool, time.Duration, error) {
	ms, err := rsLock.Run(ctx, c.cl, []string{name}, c.ttl.Milliseconds(), c.id).Int64()
	if errors.Is(err, redis.Nil) {
		return true, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	return false, time.Duration(ms) * time.Millisecond, nil
}

func (c *redissonCaller) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	ok, ttl, err := c.try(ctx, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		if err := c.wait(ctx, name, ttl); err != nil {
			return nil, err
		}
	}
	dog := c.startWatchdog(name)
	return func(ctx context.Context) error {
		dog.stop()
		_, err := rsUnlock.Run(ctx, c.cl, []string{name, channelOf(name)}, c.ttl.Milliseconds(), c.id).Int64()
		if errors.Is(err, redis.Nil) {
			return errors.New("lock was not held")
		}
		return err
	}, nil
}

// wait subscribes to the lock's channel, then retries at every message or
// when the TTL the last attempt saw runs out.
func (c *redissonCaller) wait(ctx context.Context, name string, ttl time.Duration) error {
	c.mu.Lock()
	if c.ps == nil {
		c.ps = c.cl.Subscribe(ctx)
	}
	ps := c.ps
	c.mu.Unlock()
	ch := channelOf(name)
	if err := ps.Subscribe(ctx, ch); err != nil {
		return err
	}
	defer ps.Unsubscribe(context.Background(), ch)
	for {
		ok, t, err := c.try(ctx, name)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if t < 0 { // no TTL (should not happen) or just expired
			t = time.Millisecond
		}
		ttl = t
		_, err = ps.ReceiveTimeout(ctx, ttl)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var ne interface{ Timeout() bool }
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return err
		}
	}
}

type watchdog struct {
	mu      sync.Mutex
	stopped bool
	t       *time.Timer
}

func (d *watchdog) stop() {
	d.mu.Lock()
	d.stopped = true
	if d.t != nil {
		d.t.Stop()
	}
	d.mu.Unlock()
}

// startWatchdog re-arms the lock's TTL every ttl/3 until stopped or the
// lock is gone.
func (c *redissonCaller) startWatchdog(name string) *watchdog {
	d := &watchdog{}
	var tick func()
	tick = func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		n, err := rsRenew.Run(ctx, c.cl, []string{name}, c.ttl.Milliseconds(), c.id).Int64()
		cancel()
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.stopped || err != nil || n != 1 {
			return
		}
		d.t = time.AfterFunc(c.ttl/3, tick)
	}
	d.mu.Lock()
	d.t = time.AfterFunc(c.ttl/3, tick)
	d.mu.Unlock()
	return d
}

// redissonCrashTakeover: the holder takes the lock (its watchdog running)
// and dies: the watchdog stops, nobody unlocks; the waiter, subscribed,
// gets no message and retries when the TTL it saw runs out, i.e. up to one
// watchdog period less than the full timeout after the death.
func redissonCrashTakeover(dir string, ttl time.Duration) (time.Duration, error) {
	r, ctx, end, err := freshFor(dir, ttl, startRedisson)
	if err != nil {
		return 0, err
	}
	defer end()
	holder := &redissonCaller{cl: newRedisClient(r.srv.addr), ttl: ttl, id: randomToken()}
	ok, _, err := holder.try(ctx, "s4/crash")
	if err != nil || !ok {
		return 0, errors.Join(errors.New("holder could not lock"), err)
	}
	dog := holder.startWatchdog("s4/crash")
	w := &redissonCaller{cl: r.cl, ttl: ttl, id: randomToken()}
	defer w.close()
	got := waitGrant(ctx, w, "s4/crash")
	time.Sleep(1500 * time.Millisecond) // the waiter waits; the watchdog has re-armed the TTL
	t0 := time.Now()
	dog.stop()
	holder.cl.Close()
	return (<-got).since(t0)
}
