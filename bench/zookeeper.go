package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockraft/lockraft/internal/sqlserver"
)

// ZooKeeper 3.8 from Debian's zookeeper package: a 3-server ensemble on
// loopback (three JVMs, -Xmx256m each; this machine has the memory), each
// started by the bench as a child process with its data in a temp dir and
// default durability (forceSync=yes: a transaction is fsynced before it is
// acknowledged), stopped by PID. tickTime is 1000 ms (the sample config has
// 2000) so that the 3 s session timeout every system gets here is within
// the server's bounds (2–20 ticks); with 2000 the server would raise it to
// 4 s.
//
// The lock is Curator's InterProcessMutex recipe, through
// github.com/go-zookeeper/zk: create an ephemeral sequential znode under
// the lock's path (creating the parent as a container node when it is
// missing), list the children; the lowest sequence holds the lock; any
// other watches the znode just before its own and re-checks when it goes.
// Unlock deletes the caller's znode. Every caller is its own session
// (caller i connects to server i%3), as every caller of the other systems
// is its own owner.
func init() {
	register(systemFactory{
		name:          "zookeeper",
		available:     zkAvailable,
		start:         func(dir string, ttl time.Duration) (system, error) { return startZK(dir, ttl) },
		crashTakeover: zkCrashTakeover,
	})
}

const zkJar = "/usr/share/java/zookeeper.jar"

func zkAvailable() error {
	if _, err := os.Stat(zkJar); err != nil {
		return errors.New("ZooKeeper not found; install Debian's zookeeper package (apt-get install -y zookeeper)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		return errors.New("java not found; install Debian's zookeeper package (it depends on a JRE)")
	}
	return nil
}

type zkEnsemble struct {
	srvs  []*sqlserver.Process // each ends with SIGTERM, SIGKILL after 10 s
	addrs []string
	ttl   time.Duration
}

func startZK(dir string, ttl time.Duration) (*zkEnsemble, error) {
	e := &zkEnsemble{ttl: ttl}
	type ports struct{ client, quorum, election int }
	var ps []ports
	for range 3 {
		var p [3]int
		for j := range p {
			v, err := sqlserver.FreePort()
			if err != nil {
				return nil, err
			}
			p[j] = v
		}
		ps = append(ps, ports{p[0], p[1], p[2]})
		e.addrs = append(e.addrs, fmt.Sprintf("127.0.0.1:%d", p[0]))
	}
	var servers strings.Builder
	for i, p := range ps {
		fmt.Fprintf(&servers, "server.%d=127.0.0.1:%d:%d\n", i+1, p.quorum, p.election)
	}
	for i, p := range ps {
		d := filepath.Join(dir, fmt.Sprintf("zk%d", i+1))
		if err := os.MkdirAll(d, 0o755); err != nil {
			e.stop()
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(d, "myid"), []byte(strconv.Itoa(i+1)), 0o644); err != nil {
			e.stop()
			return nil, err
		}
		cfg := fmt.Sprintf("tickTime=1000\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"+
			"maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n%s", d, p.client, servers.String())
		cfgPath := filepath.Join(d, "zoo.cfg")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			e.stop()
			return nil, err
		}
		log, err := os.Create(filepath.Join(d, "server.log"))
		if err != nil {
			e.stop()
			return nil, err
		}
		cmd := exec.Command("java", "-Xmx256m", "-Dzookeeper.log.dir="+d, "-cp", zkJar,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		s, err := sqlserver.StartProcess(cmd, 10*time.Second)
		log.Close()
		if err != nil {
			e.stop()
			return nil, err
		}
		e.srvs = append(e.srvs, s)
	}
	// Ready when a write through every server succeeds.
	deadline := time.Now().Add(60 * time.Second)
	for i := range e.addrs {
		for {
			err := zkPing(e.addrs[i])
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				e.stop()
				return nil, fmt.Errorf("zookeeper ensemble not ready: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return e, nil
}

func zkPing(addr string) error {
	c, _, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogger(nopLogger{}), zk.WithLogInfo(false))
	if err != nil {
		return err
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.Create("/ping-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(3 * time.Second):
		return errors.New("no answer")
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func (e *zkEnsemble) stop() {
	var wg sync.WaitGroup
	for _, s := range e.srvs {
		wg.Go(s.End)
	}
	wg.Wait()
}

func (e *zkEnsemble) caller(i int) (caller, error) {
	return newZKCaller(e.addrs[i%len(e.addrs)], e.ttl, nil)
}

// zkCaller is one session. dialer, when set, is used to cut the session's
// connection in S4.
type zkCaller struct {
	c *zk.Conn
}

func newZKCaller(addr string, ttl time.Duration, dialer zk.Dialer) (*zkCaller, error) {
	if dialer == nil {
		dialer = net.DialTimeout
	}
	c, events, err := zk.Connect([]string{addr}, ttl, zk.WithLogger(nopLogger{}), zk.WithLogInfo(false), zk.WithDialer(dialer))
	if err != nil {
		return nil, err
	}
	// Wait for the session.
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events {
					}
				}()
				return &zkCaller{c: c}, nil
			}
		case <-timeout:
			c.Close()
			return nil, errors.New("zookeeper: no session after 15s")
		}
	}
}

func (z *zkCaller) close() { z.c.Close() }

var zkACL = zk.WorldACL(zk.PermAll)

func zkLockPath(name string) string { return "/locks/" + strings.ReplaceAll(name, "/", "_") }

// seq is the sequence suffix of a sequential znode's name.
func seq(node string) string { return node[len(node)-10:] }

func (z *zkCaller) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	dir := zkLockPath(name)
	node, err := z.c.Create(dir+"/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zkACL)
	if errors.Is(err, zk.ErrNoNode) {
		// Curator's creatingParentContainersIfNeeded.
		for _, p := range []string{"/locks", dir} {
			if _, err := z.c.CreateContainer(p, nil, zk.FlagContainer, zkACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				if _, err2 := z.c.Create(p, nil, 0, zkACL); err2 != nil && !errors.Is(err2, zk.ErrNodeExists) {
					return nil, err
				}
			}
		}
		node, err = z.c.Create(dir+"/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zkACL)
	}
	if err != nil {
		return nil, err
	}
	own := node[len(dir)+1:]
	unlock := func(context.Context) error { return z.c.Delete(node, -1) }
	for {
		kids, _, err := z.c.Children(dir)
		if err != nil {
			unlock(ctx)
			return nil, err
		}
		slices.SortFunc(kids, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
		i := slices.Index(kids, own)
		if i < 0 {
			return nil, errors.New("zookeeper: own lock node vanished (session lost)")
		}
		if i == 0 {
			return unlock, nil
		}
		exists, _, ch, err := z.c.ExistsW(dir + "/" + kids[i-1])
		if err != nil {
			unlock(ctx)
			return nil, err
		}
		if !exists {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			unlock(context.Background())
			return nil, context.Cause(ctx)
		}
	}
}

// zkCrashTakeover: the holder's session takes the lock and its connection
// is cut for good (every later dial fails, as for a dead process); the
// server expires the session after its timeout, deletes the ephemeral
// znode, and the waiter's watch fires.
func zkCrashTakeover(dir string, ttl time.Duration) (time.Duration, error) {
	e, ctx, end, err := freshFor(dir, ttl, startZK)
	if err != nil {
		return 0, err
	}
	defer end()
	var dead atomic.Bool
	var mu sync.Mutex
	var live []net.Conn
	dialer := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		if dead.Load() {
			return nil, io.EOF
		}
		c, err := net.DialTimeout(network, addr, timeout)
		if err == nil {
			mu.Lock()
			live = append(live, c)
			mu.Unlock()
		}
		return c, err
	}
	holder, err := newZKCaller(e.addrs[1], ttl, dialer)
	if err != nil {
		return 0, err
	}
	defer func() { go holder.close() }() // its session is gone; Close must not hold up the run
	if _, err := holder.lock(ctx, "s4/crash"); err != nil {
		return 0, err
	}
	w, err := newZKCaller(e.addrs[2], ttl, nil)
	if err != nil {
		return 0, err
	}
	defer w.close()
	got := waitGrant(ctx, w, "s4/crash")
	time.Sleep(300 * time.Millisecond) // the waiter is watching
	t0 := time.Now()
	dead.Store(true)
	mu.Lock()
	for _, c := range live {
		c.Close()
	}
	mu.Unlock()
	return (<-got).since(t0)
}
