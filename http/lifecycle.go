package http

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	nethttp "net/http"
	"sync"
	"time"
)

// lifecycle runs one net/http server in the background: the agent's and
// the fleet server's share it so that both shut down the same way.
type lifecycle struct {
	mu      sync.Mutex
	started bool
	done    chan struct{}
	err     error
}

// serve listens on addr (with TLS when tlsConfig is set) and serves h in
// the background until ctx ends, then shuts down within ShutdownTimeout; it
// returns the address it listens on, so that callers passing port 0 learn
// the port.
func (s *lifecycle) serve(ctx context.Context, addr string, h nethttp.Handler, tlsConfig *tls.Config, log *slog.Logger) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return "", errors.New("serve: server already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("serve: listen on %s: %w", addr, err)
	}
	srv := &nethttp.Server{
		Handler: h,
		// Slow-client limits: a loopback browser or scraper needs none of
		// these to be long, and a stuck client must not hold a goroutine.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      60 * time.Second, // 30 days of history is tens of MB
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Requests must not see ctx's cancellation, or shutting down would
		// cut in-flight answers instead of letting them finish.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	s.started = true
	s.done = make(chan struct{})
	actual := ln.Addr().String()
	log.Info("serving", "addr", actual)
	if tlsConfig != nil {
		srv.TLSConfig = tlsConfig
		ln = tls.NewListener(ln, tlsConfig)
	}
	go s.run(ctx, srv, ln, actual, log)
	return actual, nil
}

// run serves until ctx ends or serving fails, and records how it ended.
func (s *lifecycle) run(ctx context.Context, srv *nethttp.Server, ln net.Listener, addr string, log *slog.Logger) {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case e := <-errc:
		err = fmt.Errorf("serve on %s: %w", addr, e)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		if e := srv.Shutdown(sctx); e != nil {
			_ = srv.Close()
			err = fmt.Errorf("shut down %s: %w", addr, e)
			log.Warn("shutdown cut in-flight requests", "addr", addr, "error", e)
		}
		cancel()
		<-errc // Serve returns ErrServerClosed as soon as Shutdown begins
		log.Info("stopped", "addr", addr)
	}
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	close(s.done)
}

// wait blocks until the server has stopped and returns why; nil at once
// if serve never ran.
func (s *lifecycle) wait() error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	<-done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
