// Command sqlserver starts a throwaway PostgreSQL or MariaDB server on
// loopback (package internal/sqlserver), prints its URL, and stops it on
// SIGINT/SIGTERM or when stdin closes. For trying examples/cluster -db:
//
//	go run ./internal/sqlserver/cmd/sqlserver -db postgres
//	go run ./examples/cluster -db 'postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable'
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockraft/lockraft/internal/sqlserver"
)

func main() {
	kind := flag.String("db", "postgres", "postgres or mariadb")
	durable := flag.Bool("durable", true, "keep the server's default fsync at commit")
	flag.Parse()
	var s *sqlserver.Server
	var err error
	switch *kind {
	case "postgres":
		s, err = sqlserver.StartPostgres(sqlserver.Options{Durable: *durable})
	case "mariadb", "mysql":
		s, err = sqlserver.StartMariaDB(sqlserver.Options{Durable: *durable})
	default:
		err = fmt.Errorf("unknown -db %q", *kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s pid %d, data in %s\n%s\n", *kind, s.PID, s.Dir, s.URL)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
	case <-done:
	}
	s.Stop()
	fmt.Println("stopped")
}
