package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func registryCommand(args []string) error {
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen on this `address`")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("registry: unexpected argument %q", fs.Arg(0))}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	// The address is the one line a caller waits for; the registry then
	// lives until its standard input closes, so that it cannot outlive a
	// test that dies before it could stop it.
	fmt.Printf("listening on %s\n", ln.Addr())
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}
