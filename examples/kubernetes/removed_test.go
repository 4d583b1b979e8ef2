package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// TestRemovedMemberRejoins (L1 on Kubernetes): a member the cluster removes
// (here by the operator action) stops with ErrRemoved; with
// -rejoin-when-removed its process deletes its data directory and id file
// and exits with an error wrapping ErrRemoved, and started again on the
// same paths, as Kubernetes restarts the container, it joins as a new
// member and gets ready, with no one deleting anything by hand.
func TestRemovedMemberRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a cluster with production gossip timing (seconds)")
	}
	var ports []int
	var seeds []string
	for range 4 {
		p := freeGossipPort(t)
		ports = append(ports, p)
		seeds = append(seeds, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := t.TempDir()
	cfgOf := func(i int) config {
		return config{podIP: "127.0.0.1", httpAddr: "127.0.0.1:0", adminAddr: "127.0.0.1:0", gossipPort: ports[i],
			dataDir: filepath.Join(base, fmt.Sprint(i), "data"), idFile: filepath.Join(base, fmt.Sprint(i), "member-id"),
			seeds: strings.Join(seeds[:3], ","), expect: 3, cluster: "k8s-test", name: fmt.Sprintf("member-%d", i),
			founders: "member-0,member-1,member-2", hold: 10 * time.Millisecond, logLevel: "error",
			operator: true, rejoin: true}
	}
	type member struct {
		admin string
		done  chan error
	}
	start := func(i int) member {
		c := cfgOf(i)
		require.NoError(t, os.MkdirAll(filepath.Dir(c.idFile), 0o700))
		require.NoError(t, os.WriteFile(c.idFile, []byte("kept by the pod\n"), 0o600)) // -identity would keep its id here
		ready := make(chan string, 1)
		m := member{done: make(chan error, 1)}
		go func() { m.done <- run(ctx, c, ready) }()
		select {
		case a := <-ready:
			_, m.admin, _ = strings.Cut(a, " ")
		case err := <-m.done:
			t.Fatalf("member %d: %v", i, err)
		}
		return m
	}
	status := func(admin string) lockraft.StatusView {
		var st lockraft.StatusView
		_, body := httpGet("http://" + admin + "/lockraft/status")
		json.Unmarshal([]byte(body), &st)
		return st
	}
	var ms []member
	for i := range 4 {
		ms = append(ms, start(i))
	}
	for _, m := range ms {
		require.Eventually(t, func() bool { return status(m.admin).Ready }, 60*time.Second, 50*time.Millisecond)
	}
	victim := status(ms[3].admin).ID
	var leader string
	require.Eventually(t, func() bool {
		for _, m := range ms[:3] {
			if status(m.admin).IsLeader {
				leader = m.admin
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	// The leader adds the newcomer to the configuration (a learner) once it
	// has been healthy a while; only a member of it can be removed.
	require.Eventually(t, func() bool {
		resp, err := http.Post(fmt.Sprintf("http://%s/lockraft/members/remove?id=%s", leader, victim), "", nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 500*time.Millisecond, "removing member %s", victim)

	select {
	case err := <-ms[3].done:
		require.ErrorIs(t, err, lockraft.ErrRemoved)
	case <-time.After(60 * time.Second):
		t.Fatal("the removed member did not stop")
	}
	_, err := os.Stat(cfgOf(3).dataDir)
	require.True(t, errors.Is(err, os.ErrNotExist), "the removed member's data directory is gone: %v", err)
	_, err = os.Stat(cfgOf(3).idFile)
	require.True(t, errors.Is(err, os.ErrNotExist), "its id file is gone: %v", err)

	again := start(3) // the container's restart
	require.Eventually(t, func() bool { return status(again.admin).Ready }, 60*time.Second, 50*time.Millisecond,
		"the restarted member joins as a new one")
	require.NotEqual(t, victim, status(again.admin).ID)
	cancel()
	for _, m := range append(ms[:3], again) {
		<-m.done
	}
}
