package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/lockraft/lockraft"
)

// startAdmin serves each node's admin handler on loopback (node i under
// /n<i>), as a service would mount it on its own mux, and prints the
// lockraftctl command to look at the cluster while the example runs. It
// returns the function that stops the server.
func startAdmin(nodes []*lockraft.Node) (stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	var paths []string
	for i, n := range nodes {
		p := fmt.Sprintf("/n%d", i+1)
		mux.Handle(p+"/", http.StripPrefix(p, n.AdminHandler()))
		paths = append(paths, p)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	base := "http://" + ln.Addr().String()
	fmt.Printf("admin: go run ./cmd/lockraftctl -endpoint %s%s status   (also lock stock/sku-a, members, locks; %s)\n",
		base, paths[0], strings.Join(paths[1:], ", ")+" for the other nodes")
	return func() { srv.Close() }, nil
}
