package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/lockraft/lockraft/internal/sqlserver"
)

// etcd: a 3-member cluster embedded in this process (go.etcd.io/etcd/server/v3/embed),
// default timings (100 ms heartbeat, 1 s election) and fsync on, used through
// client/v3/concurrency: one Session (lease) and one Mutex per caller.
func init() {
	register(systemFactory{
		name:          "etcd",
		available:     func() error { return nil },
		start:         func(dir string, ttl time.Duration) (system, error) { return startEtcd(dir, ttl) },
		crashTakeover: etcdCrashTakeover,
		failover:      etcdFailover,
	})
}

type etcdCluster struct {
	members   []*embed.Etcd
	endpoints []string
	clients   []*clientv3.Client // one per member, callers spread over them
	ttl       time.Duration
}

func startEtcd(dir string, ttl time.Duration) (*etcdCluster, error) {
	c := &etcdCluster{ttl: ttl}
	var cfgs []*embed.Config
	var initial []string
	for i := range 3 {
		pp, err := sqlserver.FreePort()
		if err != nil {
			return nil, err
		}
		cp, err := sqlserver.FreePort()
		if err != nil {
			return nil, err
		}
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		purl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pp))
		curl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", cp))
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
		cfg.InitialClusterToken = "bench"
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.LogLevel = "error"
		cfg.Logger = "zap"
		cfg.LogOutputs = []string{"/dev/null"}
		initial = append(initial, fmt.Sprintf("%s=%s", cfg.Name, purl))
		c.endpoints = append(c.endpoints, curl.String())
		cfgs = append(cfgs, cfg)
	}
	// Members must start together: each waits for the others to be reachable.
	var mu sync.Mutex
	var firstErr error
	c.members = make([]*embed.Etcd, 3)
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := embed.StartEtcd(cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			c.members[i] = e
		}()
	}
	wg.Wait()
	if firstErr != nil {
		c.stop()
		return nil, firstErr
	}
	for _, e := range c.members {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			c.stop()
			return nil, errors.New("etcd member not ready")
		}
	}
	for _, ep := range c.endpoints {
		cl, err := newEtcdClient([]string{ep})
		if err != nil {
			c.stop()
			return nil, err
		}
		c.clients = append(c.clients, cl)
	}
	return c, nil
}

func newEtcdClient(eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (*etcdCluster) inProcess() {}

func (c *etcdCluster) stop() {
	for _, cl := range c.clients {
		cl.Close()
	}
	for _, e := range c.members {
		if e != nil {
			e.Close()
		}
	}
}

func (c *etcdCluster) leader() int {
	for i, e := range c.members {
		if e != nil && e.Server.Leader() == e.Server.MemberID() {
			return i
		}
	}
	return -1
}

func (c *etcdCluster) caller(i int) (caller, error) {
	s, err := concurrency.NewSession(c.clients[i%len(c.clients)], concurrency.WithTTL(int(c.ttl.Seconds())))
	if err != nil {
		return nil, err
	}
	return &etcdCaller{s: s}, nil
}

type etcdCaller struct{ s *concurrency.Session }

func (c *etcdCaller) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.s.Orphan()
	c.s.Client().Revoke(ctx, c.s.Lease())
}

func (c *etcdCaller) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(c.s, "/locks/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

// etcdCrashTakeover: the holder's client goes away without revoking its
// session's lease (as a killed process would); a waiter on another member
// is granted once the lease's TTL runs out.
func etcdCrashTakeover(dir string, ttl time.Duration) (time.Duration, error) {
	c, err := startEtcd(dir, ttl)
	if err != nil {
		return 0, err
	}
	defer c.stop()
	hc, hs, err := c.holderSession(ttl)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
	defer cancel()
	if err := concurrency.NewMutex(hs, "/locks/s4/crash").Lock(ctx); err != nil {
		hc.Close()
		return 0, err
	}
	w, err := c.caller(1)
	if err != nil {
		hc.Close()
		return 0, err
	}
	defer w.close()
	got := waitGrant(ctx, w, "s4/crash")
	time.Sleep(300 * time.Millisecond) // the waiter is queued
	t0 := time.Now()
	hc.Close() // keepalives stop; the lease is not revoked
	return (<-got).since(t0)
}

// etcdFailover: stop the leader member; a client of the two others keeps
// asking for a lock; the time from the stop until one is granted.
func etcdFailover(dir string, graceful bool) (time.Duration, error) {
	c, err := startEtcd(dir, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.stop()
	ld := c.leader()
	if ld < 0 {
		return 0, errors.New("no leader")
	}
	var eps []string
	for i, ep := range c.endpoints {
		if i != ld {
			eps = append(eps, ep)
		}
	}
	cl, err := newEtcdClient(eps)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	s, err := concurrency.NewSession(cl, concurrency.WithTTL(10))
	if err != nil {
		return 0, err
	}
	defer s.Orphan()
	// warm the connection
	if err := pairEtcd(s, "s5/warm", 5*time.Second); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if graceful {
		// Close stops the client servers, hands leadership over
		// (TryTransferLeadershipOnShutdown) and stops; the Lock below runs
		// while it does.
		e := c.members[ld]
		c.members[ld] = nil
		closed := make(chan struct{})
		go func() { e.Close(); close(closed) }()
		defer func() { <-closed }()
	} else {
		// HardStop stops the member's raft without any handover, as a
		// crash does; c.stop closes what is left afterwards.
		c.members[ld].Server.HardStop()
	}
	for i := 0; time.Since(t0) < 30*time.Second; i++ {
		if err := pairEtcd(s, fmt.Sprintf("s5/%d", i), failoverAttempt); err == nil {
			return time.Since(t0), nil
		}
	}
	return 0, errTimeout
}

// holderSession is a session of ttl on a client of its own (on the first
// member), which a scenario closes to play a holder's process dying: its
// keepalives stop and its lease is not revoked.
func (c *etcdCluster) holderSession(ttl time.Duration) (*clientv3.Client, *concurrency.Session, error) {
	hc, err := newEtcdClient(c.endpoints[:1])
	if err != nil {
		return nil, nil, err
	}
	hs, err := concurrency.NewSession(hc, concurrency.WithTTL(int(ttl.Seconds())))
	if err != nil {
		hc.Close()
		return nil, nil, err
	}
	return hc, hs, nil
}

func pairEtcd(s *concurrency.Session, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m := concurrency.NewMutex(s, "/locks/"+name)
	if err := m.Lock(ctx); err != nil {
		return err
	}
	// Time to first grant is what we measure; the unlock is not timed.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Unlock(ctx)
	}()
	return nil
}
