package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/stretchr/testify/require"
)

func freeGossipPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			u.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMembersFormFromDNSSeeds (L1): three members of the example, started
// as the StatefulSet starts them (at once, each with the same seed list of
// DNS names, here "localhost" on each gossip port; real resolution), form
// one cluster, become ready on the admin handler's readiness path, serve
// /work with increasing fencing tokens and expose lockraft metrics; SIGTERM
// (context end) closes them.
func TestMembersFormFromDNSSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a cluster with production gossip timing (seconds)")
	}
	formMembers(t, "", nil)
}

// TestMembersFormWithTLS (S1, security): the same with the manifest's TLS
// setup: a -tls-dir holding the CA, a certificate per member named after the
// member (random raft ids, as the README's lockraft-certs commands make them)
// and a base64 gossip key.
func TestMembersFormWithTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a cluster with production gossip timing (seconds)")
	}
	dir := t.TempDir()
	ca, err := certgen.NewCA("test CA", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), ca.CertPEM, 0o600))
	for i := range 3 {
		cert, key, err := ca.Member("k8s-test", certgen.RandomID(), nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("member-%d.pem", i)), cert, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("member-%d-key.pem", i)), key, 0o600))
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gossip.key"), []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600))
	formMembers(t, dir, nil)
}

// formMembers starts three members and checks they form, get ready and serve.
// setup, if not nil, adjusts member i's configuration.
func formMembers(t *testing.T, tlsDir string, setup func(i int, c *config)) {
	ports := []int{freeGossipPort(t), freeGossipPort(t), freeGossipPort(t)}
	var seeds []string
	for _, p := range ports {
		seeds = append(seeds, net.JoinHostPort("localhost", strconv.Itoa(p)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	var addrs, admins []string
	for i := range 3 {
		ready := make(chan string, 1)
		c := config{podIP: "127.0.0.1", httpAddr: "127.0.0.1:0", adminAddr: "127.0.0.1:0", raftPort: 0, gossipPort: ports[i],
			dataDir: t.TempDir(), seeds: strings.Join(seeds, ","), expect: 3, cluster: "k8s-test",
			name: fmt.Sprintf("member-%d", i), founders: "member-0,member-1,member-2", tlsDir: tlsDir,
			hold: 10 * time.Millisecond, logLevel: "warn"}
		if setup != nil {
			setup(i, &c)
		}
		go func() { done <- run(ctx, c, ready) }()
		select {
		case a := <-ready:
			http, admin, _ := strings.Cut(a, " ")
			addrs, admins = append(addrs, http), append(admins, admin)
		case err := <-done:
			t.Fatalf("member %d: %v", i, err)
		}
	}
	defer func() {
		cancel()
		for range 3 {
			require.NoError(t, <-done)
		}
	}()
	for i, a := range admins {
		require.Eventually(t, func() bool {
			code, _ := httpGet("http://" + a + "/lockraft/readyz")
			return code == http.StatusOK
		}, 60*time.Second, 50*time.Millisecond, "member %s never ready", a)
		code, _ := httpGet("http://" + a + "/lockraft/healthz")
		require.Equal(t, http.StatusOK, code)
		code, _ = httpGet("http://" + addrs[i] + "/lockraft/status")
		require.Equal(t, http.StatusNotFound, code, "the admin handler is not on the service's port")
	}
	var last uint64
	for i := range 6 {
		code, body := httpGet("http://" + addrs[i%3] + "/work?name=orders/batch")
		require.Equal(t, http.StatusOK, code, body)
		var tok uint64
		_, err := fmt.Sscanf(body, "did orders/batch with token %d", &tok)
		require.NoError(t, err, body)
		require.Greater(t, tok, last, "fencing tokens increase across members")
		last = tok
	}
	code, body := httpGet("http://" + addrs[0] + "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `lockraft_operations_total{kind="lock",primitive="mutex",result="ok"}`)
	require.Contains(t, body, "lockraft_raft_term ")
	code, body = httpGet("http://" + admins[1] + "/lockraft/members")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 3, strings.Count(body, `"role": "voter"`), body)
}
