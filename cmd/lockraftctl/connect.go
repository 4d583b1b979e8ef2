package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// How lockraftctl reaches an admin handler that serves only operators
// (lockraft.WithOperatorAuth): over HTTPS, with an operator's client
// certificate (lockraft-certs operator; -cert, -key) or a bearer token
// (-token-file, or $LOCKRAFT_TOKEN; never a flag, which other users of the
// host could read in the process list). The server's certificate is
// verified against -cacert (default: the system's roots). A token is sent
// only over HTTPS, or to a loopback address.

// credentials are the connection flags.
type credentials struct {
	caFile, certFile, keyFile, tokenFile string
}

// connect makes c's HTTP client from cr.
func (c *cli) connect(cr credentials) error {
	u, err := url.Parse(c.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-endpoint %q: want an http:// or https:// URL", c.endpoint)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cr.caFile != "" {
		pem, err := os.ReadFile(cr.caFile)
		if err != nil {
			return err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-cacert %s: no PEM certificate", cr.caFile)
		}
	}
	switch {
	case (cr.certFile == "") != (cr.keyFile == ""):
		return errors.New("-cert and -key go together")
	case cr.certFile != "":
		pair, err := tls.LoadX509KeyPair(cr.certFile, cr.keyFile)
		if err != nil {
			return err
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	token := os.Getenv("LOCKRAFT_TOKEN")
	if cr.tokenFile != "" {
		b, err := os.ReadFile(cr.tokenFile)
		if err != nil {
			return err
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("-token-file %s is empty", cr.tokenFile)
		}
	}
	if u.Scheme == "http" {
		if token != "" && !loopback(u.Hostname()) {
			return fmt.Errorf("refusing to send a bearer token over plain http to %s: use https", u.Host)
		}
		if len(tc.Certificates) > 0 || cr.caFile != "" {
			return errors.New("-cert, -key and -cacert need an https:// endpoint")
		}
	}
	c.token = token
	c.http = &http.Client{
		Transport: &http.Transport{
			Proxy:                  http.ProxyFromEnvironment,
			TLSClientConfig:        tc,
			ForceAttemptHTTP2:      true,
			TLSHandshakeTimeout:    c.timeout,
			ResponseHeaderTimeout:  c.timeout + answerMargin,
			MaxResponseHeaderBytes: 1 << 20,
			DialContext:            (&net.Dialer{Timeout: c.timeout, KeepAlive: 30 * time.Second}).DialContext,
		},
		// An answer is never followed elsewhere: a redirect would carry the
		// token to another host.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       c.timeout + 2*answerMargin,
	}
	return nil
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
