package main

// Per-pod identity: each pod makes its own private key, in memory, and has
// cert-manager sign a certificate for it that names this member and its
// role (lockraft://<cluster>/<id>?role=voter|light). The key never leaves
// the process except into the pod's own memory-backed volume, where
// WithTLSFiles reads it; no Secret holds any member's key, and no pod can
// read another's. The request goes to the Kubernetes API as a cert-manager
// CertificateRequest, made with the pod's ServiceAccount token; cert-manager's
// approver-policy approves it only if the URI names the role that
// ServiceAccount may have (lockraft.yaml: voters' and light members'
// ServiceAccounts each get one CertificateRequestPolicy). Before the
// certificate's last third, the same is done again and the files replaced:
// WithTLSFiles picks up the new ones without a restart.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockraft/lockraft"
)

// ErrIdentity: the pod could not get its certificate.
var ErrIdentity = errors.New("member identity")

// kubeAPI is where and as whom the pod calls the Kubernetes API: in a pod,
// inClusterAPI reads the ServiceAccount's token, CA and namespace.
type kubeAPI struct {
	base      string // https://host:port
	token     string
	namespace string
	client    *http.Client
}

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func inClusterAPI() (*kubeAPI, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("%w: not in a pod (no KUBERNETES_SERVICE_HOST)", ErrIdentity)
	}
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	ns, err := os.ReadFile(filepath.Join(saDir, "namespace"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &kubeAPI{base: "https://" + strings.Trim(host, "[]") + ":" + port, token: strings.TrimSpace(string(token)),
		namespace: strings.TrimSpace(string(ns)),
		client:    &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}, nil
}

// identity is what the member asks cert-manager for.
type identity struct {
	api     *kubeAPI
	issuer  string // a cert-manager Issuer in the pod's namespace
	cluster string
	id      uint64
	role    string // voter or light
	pod     string
	dir     string // ca.pem, member.pem, member-key.pem (a memory-backed volume)
	ttl     time.Duration
}

func (i *identity) files() (ca, cert, key string) {
	return filepath.Join(i.dir, "ca.pem"), filepath.Join(i.dir, "member.pem"), filepath.Join(i.dir, "member-key.pem")
}

// issue makes a new key, has its certificate signed and writes the three
// files (each replaced atomically); it returns when the certificate ends.
func (i *identity) issue(ctx context.Context) (time.Time, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return time.Time{}, err
	}
	u, err := url.Parse(memberURI(i.cluster, i.id, i.role))
	if err != nil {
		return time.Time{}, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: fmt.Sprintf("lockraft %s %s", i.role, lockraft.MemberID(i.id))}, URIs: []*url.URL{u}}, key)
	if err != nil {
		return time.Time{}, err
	}
	certPEM, caPEM, err := i.api.certificateRequest(ctx, i.pod, i.issuer, i.ttl,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}))
	if err != nil {
		return time.Time{}, err
	}
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return time.Time{}, fmt.Errorf("%w: the issued certificate is not PEM", ErrIdentity)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if len(cert.URIs) != 1 || cert.URIs[0].String() != u.String() {
		return time.Time{}, fmt.Errorf("%w: the issued certificate names %v, not %s", ErrIdentity, cert.URIs, u)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return time.Time{}, err
	}
	caFile, certFile, keyFile := i.files()
	// Key first, certificate last: WithTLSFiles reloads when the certificate
	// changes, and must then find the key that goes with it.
	for _, f := range []struct {
		path string
		data []byte
	}{{caFile, caPEM}, {keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}, {certFile, certPEM}} {
		if err := writeAtomic(f.path, f.data); err != nil {
			return time.Time{}, err
		}
	}
	return cert.NotAfter, nil
}

// renew issues again in the last third of each certificate's life until ctx
// ends; a failed attempt is retried a minute later.
func (i *identity) renew(ctx context.Context, notAfter time.Time, logf func(string, ...any)) {
	for {
		wait := time.Until(notAfter) * 2 / 3
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		na, err := i.issue(ctx)
		for err != nil && ctx.Err() == nil {
			logf("renewing the member certificate failed; retrying in a minute", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Minute):
			}
			na, err = i.issue(ctx)
		}
		notAfter = na
	}
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// memberURI is the URI SAN naming member id of cluster with role (as
// lockraft.MemberURI and lockraft-certs write it: the id in 16 hex digits).
func memberURI(cluster string, id uint64, role string) string {
	return (&url.URL{Scheme: "lockraft", Host: cluster, Path: "/" + lockraft.MemberID(id).String(), RawQuery: "role=" + role}).String()
}

// certificateRequest creates a cert-manager CertificateRequest for csrPEM
// and waits until it is issued (or denied, or ctx ends).
func (k *kubeAPI) certificateRequest(ctx context.Context, pod, issuer string, ttl time.Duration, csrPEM []byte) (certPEM, caPEM []byte, err error) {
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "CertificateRequest",
		"metadata": map[string]any{"generateName": pod + "-", "labels": map[string]string{"app.kubernetes.io/name": "lockraft-example"}},
		"spec": map[string]any{
			"request":   base64.StdEncoding.EncodeToString(csrPEM),
			"issuerRef": map[string]string{"name": issuer, "kind": "Issuer", "group": "cert-manager.io"},
			"duration":  ttl.String(),
			"usages":    []string{"digital signature", "key encipherment", "server auth", "client auth"},
		},
	})
	path := "/apis/cert-manager.io/v1/namespaces/" + k.namespace + "/certificaterequests"
	var cr certReq
	if err := k.call(ctx, http.MethodPost, path, body, &cr); err != nil {
		return nil, nil, err
	}
	for {
		for _, c := range cr.Status.Conditions {
			switch {
			case c.Type == "Ready" && c.Status == "True" && cr.Status.Certificate != "":
				cert, err1 := base64.StdEncoding.DecodeString(cr.Status.Certificate)
				ca, err2 := base64.StdEncoding.DecodeString(cr.Status.CA)
				if err := errors.Join(err1, err2); err != nil || len(ca) == 0 {
					return nil, nil, fmt.Errorf("%w: CertificateRequest %s: certificate or CA missing or not base64", ErrIdentity, cr.Metadata.Name)
				}
				return cert, ca, nil
			case c.Type == "Denied" && c.Status == "True", c.Type == "InvalidRequest" && c.Status == "True",
				c.Type == "Ready" && c.Status == "False" && c.Reason == "Failed":
				return nil, nil, fmt.Errorf("%w: CertificateRequest %s: %s: %s", ErrIdentity, cr.Metadata.Name, c.Reason, c.Message)
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w: CertificateRequest %s not issued: %w", ErrIdentity, cr.Metadata.Name, ctx.Err())
		case <-time.After(time.Second): // the API's watch would do; a poll a second is simpler here
		}
		if err := k.call(ctx, http.MethodGet, path+"/"+cr.Metadata.Name, nil, &cr); err != nil {
			return nil, nil, err
		}
	}
}

type certReq struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Status struct {
		Certificate string `json:"certificate"`
		CA          string `json:"ca"`
		Conditions  []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

func (k *kubeAPI) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, k.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrIdentity, method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%w: %s %s: %s: %s", ErrIdentity, method, path, resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, out)
}

// memberID returns the raft id kept in path, making a random one (and
// keeping it) the first time: a voter keeps its id on its volume across
// restarts, as its data directory requires.
func memberID(path string) (uint64, error) {
	if b, err := os.ReadFile(path); err == nil {
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || id == 0 {
			return 0, fmt.Errorf("%w: %s does not hold a member id", ErrIdentity, path)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	var b [8]byte
	var id uint64
	for id == 0 { // 0 is raft's "none"; below 2^63, clear of raft's local ids
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		id = binary.BigEndian.Uint64(b[:]) >> 1
	}
	if err := writeAtomic(path, []byte(strconv.FormatUint(id, 10)+"\n")); err != nil {
		return 0, err
	}
	return id, nil
}
