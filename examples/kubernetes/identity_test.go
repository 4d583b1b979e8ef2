package main

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/certgen"
)

// fakeCertManager is the Kubernetes API as far as -identity cert-manager
// uses it: CertificateRequests are signed by ca on the first GET after
// their creation, as cert-manager does once approver-policy approves.
type fakeCertManager struct {
	ca     *certgen.CA
	mu     sync.Mutex
	bodies []string          // every request body the API received
	csrs   map[string][]byte // name → CSR PEM
	uris   []string          // URI SANs signed
}

func (f *fakeCertManager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	f.bodies = append(f.bodies, string(body))
	const prefix = "/apis/cert-manager.io/v1/namespaces/ns/certificaterequests"
	if r.Header.Get("Authorization") != "Bearer sa-token" || !strings.HasPrefix(r.URL.Path, prefix) {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	switch r.Method {
	case http.MethodPost:
		var cr struct {
			Spec struct {
				Request string `json:"request"`
			} `json:"spec"`
		}
		json.Unmarshal(body, &cr)
		csr, _ := base64.StdEncoding.DecodeString(cr.Spec.Request)
		name := fmt.Sprintf("member-%d", len(f.csrs))
		f.csrs[name] = csr
		fmt.Fprintf(w, `{"metadata":{"name":%q}}`, name)
	case http.MethodGet:
		name := strings.TrimPrefix(r.URL.Path, prefix+"/")
		b, _ := pem.Decode(f.csrs[name])
		csr, err := x509.ParseCertificateRequest(b.Bytes)
		if err != nil || csr.CheckSignature() != nil {
			http.Error(w, "bad CSR", http.StatusBadRequest)
			return
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(len(f.uris) + 2)), Subject: pkix.Name{CommonName: csr.Subject.CommonName},
			URIs: csr.URIs, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca.Cert, csr.PublicKey, f.ca.Key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for _, u := range csr.URIs {
			f.uris = append(f.uris, u.String())
		}
		cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		fmt.Fprintf(w, `{"metadata":{"name":%q},"status":{"certificate":%q,"ca":%q,"conditions":[{"type":"Ready","status":"True"}]}}`,
			name, base64.StdEncoding.EncodeToString(cert), base64.StdEncoding.EncodeToString(f.ca.CertPEM))
	}
}

// TestMembersFormWithPodIdentity (S1, security): three members each make
// their own key and have it signed through the Kubernetes API as a
// cert-manager CertificateRequest naming their own random id and the voter
// role; no key is ever sent, each pod's files hold only its own key, and the
// members form a cluster and serve with those certificates.
func TestMembersFormWithPodIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a cluster with production gossip timing (seconds)")
	}
	ca, err := certgen.NewCA("cert-manager CA", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	fake := &fakeCertManager{ca: ca, csrs: map[string][]byte{}}
	srv := httptest.NewTLSServer(fake)
	defer srv.Close()
	api := &kubeAPI{base: srv.URL, token: "sa-token", namespace: "ns", client: srv.Client()}
	gossipKey := filepath.Join(t.TempDir(), "gossip.key")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	require.NoError(t, os.WriteFile(gossipKey, []byte(base64.StdEncoding.EncodeToString(key)), 0o600))
	certDirs := make([]string, 3)
	formMembers(t, "", func(i int, c *config) {
		certDirs[i] = t.TempDir()
		c.identity, c.api, c.role, c.certDir, c.idFile, c.gossipKey = "cert-manager", api, "voter", certDirs[i],
			filepath.Join(t.TempDir(), "member-id"), gossipKey
		c.certTTL = time.Hour
	})
	fake.mu.Lock()
	defer fake.mu.Unlock()
	require.Len(t, fake.uris, 3)
	for _, u := range fake.uris {
		require.Regexp(t, `^lockraft://k8s-test/[0-9a-f]{16}\?role=voter$`, u)
	}
	for _, b := range fake.bodies {
		require.NotContains(t, b, "PRIVATE KEY", "no key leaves its pod")
	}
	keys := map[string]bool{}
	for _, d := range certDirs {
		k, err := os.ReadFile(filepath.Join(d, "member-key.pem"))
		require.NoError(t, err)
		require.False(t, keys[string(k)], "each pod has a key of its own")
		keys[string(k)] = true
		ents, _ := os.ReadDir(d)
		require.Len(t, ents, 3, "ca.pem, member.pem, member-key.pem: its own only")
	}
}

// The id file keeps a member's id across restarts and is made at random,
// below 2^63, the first time.
func TestMemberIDKept(t *testing.T) {
	p := filepath.Join(t.TempDir(), "member-id")
	id, err := memberID(p)
	require.NoError(t, err)
	require.NotZero(t, id)
	require.Less(t, id, uint64(1)<<63)
	again, err := memberID(p)
	require.NoError(t, err)
	require.Equal(t, id, again)
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
	_, err = memberID(p)
	require.ErrorIs(t, err, ErrIdentity)
}
