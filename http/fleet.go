package http

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	nethttp "net/http"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/prometheus/client_golang/prometheus"
)

// Fleet server limits. A batch of 500 minutes of an 8-GPU box is about
// 150 KB, so 1 MiB leaves room without letting one request pin memory.
const (
	DefaultFleetAddr  = "127.0.0.1:8080"
	DefaultMaxBody    = 1 << 20
	DefaultRatePerSec = 50
	DefaultRateBurst  = 200
	maxBatchItems     = 2000
	maxHeartbeatBatch = 256
)

// FleetServer is `gpuwarden server`: the API agents report to, the reports
// people read, the fleet dashboard and /metrics, over one Fleet ledger.
type FleetServer struct {
	// Now is the clock for LastSeen, reports and rate limits; tests set it.
	// Set fields before serving.
	Now func() time.Time
	// AllowedHosts are host names (no port) accepted in the Host header
	// besides IP literals and localhost; "*" accepts any.
	AllowedHosts []string
	// MaxBody caps a request body in bytes (413 beyond).
	MaxBody int64
	// RatePerSec and RateBurst limit requests per token (429 beyond);
	// RatePerSec zero turns the limit off.
	RatePerSec, RateBurst float64
	// IdleAfter and LostAfter tune the orphan report and the node states.
	IdleAfter, LostAfter time.Duration
	// FailRatePerSec and FailBurst limit, per client address, the failed
	// authentications (429 beyond, in place of 401); a valid credential
	// does not count. LookupRatePerSec and LookupBurst limit, per address,
	// the ledger reads for credentials the server does not know to exist
	// (429 beyond, before the read); a read that finds a valid one is
	// given back (see check). The address is the connection's: behind a
	// reverse proxy all clients share the proxy's. A zero rate turns its
	// limit off.
	FailRatePerSec, FailBurst     float64
	LookupRatePerSec, LookupBurst float64
	// SessionLifetime is how long a dashboard sign-in lasts, counted from
	// sign-in whatever the use; zero means DefaultSessionLifetime.
	SessionLifetime time.Duration

	store   gpuwarden.Fleet
	auth    *authenticator
	beats   *beatWriter
	nodes   *nodeOwners
	limits  *rateLimiter
	fails   *clientLimiter
	lookups *clientLimiter
	log     *slog.Logger
	mux     *nethttp.ServeMux
	metrics *fleetMetrics
	life    lifecycle
}

// NewFleetServer builds the server over a fleet ledger; a nil logger
// discards. Heartbeats are written by one goroutine started by Serve (or
// Start, for callers that run their own http.Server).
func NewFleetServer(store gpuwarden.Fleet, log *slog.Logger) *FleetServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &FleetServer{
		Now:        time.Now,
		MaxBody:    DefaultMaxBody,
		RatePerSec: DefaultRatePerSec,
		RateBurst:  DefaultRateBurst,
		IdleAfter:  4 * time.Hour,
		LostAfter:  10 * time.Minute,
		store:      store,
		log:        log.With("component", "server"),
		nodes:      &nodeOwners{store: store},
		metrics:    newFleetMetrics(),
	}
	s.auth = &authenticator{store: store, now: s.now}
	s.nodes.now = s.now
	s.limits = &rateLimiter{now: s.now}
	s.FailRatePerSec, s.FailBurst, s.SessionLifetime = DefaultFailRatePerSec, DefaultFailBurst, DefaultSessionLifetime
	s.fails = &clientLimiter{rateLimiter{now: s.now}}
	s.LookupRatePerSec, s.LookupBurst = DefaultLookupRatePerSec, DefaultLookupBurst
	s.lookups = &clientLimiter{rateLimiter{now: s.now}}
	s.beats = &beatWriter{store: store, now: s.now, in: make(chan beatRequest, 4*maxHeartbeatBatch), log: s.log, observe: s.metrics.observeBeats,
		stopped: make(chan struct{}), linger: beatLinger}
	s.routes()
	return s
}

func (s *FleetServer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// handler is an authenticated route: it gets the caller's scope.
type handler func(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error

// methods maps HTTP methods to a route's handlers, so that a wrong method
// gets a JSON 405 rather than ServeMux's plain text.
type methods map[string]handler

func (s *FleetServer) routes() {
	m := nethttp.NewServeMux()
	api := func(pattern string, ms methods) { m.Handle(pattern, s.authed(ms)) }
	api("/api/v1/whoami", methods{"GET": s.whoami})
	api("/api/v1/register", methods{"POST": s.register})
	api("/api/v1/heartbeat", methods{"POST": s.heartbeat})
	api("/api/v1/nodes", methods{"GET": s.listNodes})
	api("/api/v1/nodes/{id}", methods{"GET": s.getNode})
	api("/api/v1/nodes/{id}/batch", methods{"POST": s.batch})
	api("/api/v1/nodes/{id}/gone", methods{"POST": s.markGone})
	api("/api/v1/events", methods{"GET": s.listEvents})
	api("/api/v1/projects", methods{"GET": s.listProjects})
	api("/api/v1/projects/{name}", methods{"PUT": s.putProject})
	api("/api/v1/tokens", methods{"GET": s.listTokens, "POST": s.createToken})
	api("/api/v1/tokens/{id}", methods{"DELETE": s.revokeToken})
	api("/api/v1/reports/{name}", methods{"GET": s.report})
	api("/api/v1/savings", methods{"GET": s.listSavings})
	api("/metrics", methods{"GET": s.serveMetrics})
	m.HandleFunc("/healthz", s.healthz)
	m.HandleFunc("/readyz", s.readyz)
	s.dashboardRoutes(m)
	m.HandleFunc("/", func(w nethttp.ResponseWriter, r *nethttp.Request) {
		writeJSONError(w, nethttp.StatusNotFound, gpuwarden.Errorf(gpuwarden.ENotFound, "no such page: %s", r.URL.Path))
	})
	s.mux = m
}

// Handler returns the server's routes behind its security headers and host
// check. Start must have been called (Serve does) for heartbeats to be
// written.
func (s *FleetServer) Handler() nethttp.Handler {
	return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		securityHeaders(w.Header(), fleetContentSecurityPolicy)
		if !hostAllowed(r.Host, s.AllowedHosts) {
			writeJSONError(w, nethttp.StatusMisdirectedRequest, gpuwarden.Errorf(gpuwarden.EUnauthorized,
				"host %q is not served here", r.Host).WithHint("add the name to the server's --allowed-hosts"))
			return
		}
		defer func() {
			// A handler bug answers 500 as JSON; it never takes the server down.
			if v := recover(); v != nil {
				if v == nethttp.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeJSONError(w, nethttp.StatusInternalServerError, gpuwarden.Errorf(gpuwarden.EInternal, "internal error"))
			}
		}()
		s.mux.ServeHTTP(w, r)
	})
}

// fleetContentSecurityPolicy is the agent's policy, except that the login
// form posts to this server.
var fleetContentSecurityPolicy = strings.Replace(contentSecurityPolicy, "form-action 'none'", "form-action 'self'", 1)

// Start runs the heartbeat writer until ctx ends; it then commits what is
// queued, and later heartbeats are refused with 503.
func (s *FleetServer) Start(ctx context.Context) { go s.beats.run(ctx) }

// Serve starts the heartbeat writer and listens on addr, with TLS when
// certFile and keyFile are set, until ctx ends; it returns the address.
func (s *FleetServer) Serve(ctx context.Context, addr, certFile, keyFile string) (string, error) {
	var cfg *tls.Config
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return "", gpuwarden.Errorf(gpuwarden.EInvalid, "TLS needs both --tls-cert and --tls-key")
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return "", gpuwarden.Errorf(gpuwarden.EInvalid, "load TLS key pair %s, %s: %v", certFile, keyFile, err)
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	s.Start(ctx)
	return s.life.serve(ctx, addr, s.Handler(), cfg, s.log)
}

// Wait blocks until the server stopped; see Server.Wait.
func (s *FleetServer) Wait() error { return s.life.wait() }

// authed checks the caller (see identify: origin, limits, token or
// session), the token's rate limit and the method, then runs the route;
// every error becomes a JSON answer with its status.
func (s *FleetServer) authed(ms methods) nethttp.Handler {
	return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		c, err := s.identify(r)
		if err != nil {
			s.writeAuthError(w, err)
			return
		}
		t := c.token
		if wait, ok := s.limits.allow(t.ID, s.RatePerSec, s.RateBurst); !ok {
			w.Header().Set("Retry-After", fmt.Sprint(max(1, int(math.Ceil(wait.Seconds())))))
			writeJSONError(w, nethttp.StatusTooManyRequests, gpuwarden.Errorf(gpuwarden.EInvalid, "too many requests for token %s", t.ID).
				WithHint("retry after %s", wait.Round(time.Millisecond)))
			return
		}
		h, ok := ms[r.Method]
		if !ok && r.Method == nethttp.MethodHead {
			h, ok = ms[nethttp.MethodGet]
		}
		if !ok {
			allow := make([]string, 0, len(ms))
			for m := range ms {
				allow = append(allow, m)
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSONError(w, nethttp.StatusMethodNotAllowed, gpuwarden.Errorf(gpuwarden.EInvalid, "method %s is not allowed on %s", r.Method, r.URL.Path))
			return
		}
		if r.Body != nil {
			r.Body = nethttp.MaxBytesReader(w, r.Body, s.MaxBody)
		}
		if err := h(w, r, c.scope()); err != nil {
			s.writeError(w, err)
		}
	})
}

func (s *FleetServer) writeError(w nethttp.ResponseWriter, err error) {
	var tooBig *nethttp.MaxBytesError
	if errors.As(err, &tooBig) {
		writeJSONError(w, nethttp.StatusRequestEntityTooLarge, gpuwarden.Errorf(gpuwarden.EInvalid,
			"request body over %d bytes", tooBig.Limit).WithHint("send smaller batches"))
		return
	}
	code := statusOf(gpuwarden.ErrorCodeOf(err))
	if code >= 500 {
		s.log.Error("request failed", "error", err)
	}
	writeJSONError(w, code, err)
}

// decode reads one JSON value from the body. Unknown fields are accepted so
// that a newer agent can talk to an older server; trailing data is not.
func decode(r *nethttp.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var tooBig *nethttp.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "empty request body").WithHint("send a JSON object")
		}
		return gpuwarden.Errorf(gpuwarden.EInvalid, "request body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "request body: data after the JSON value")
	}
	return nil
}

func writeJSON(w nethttp.ResponseWriter, code int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// healthz is liveness only: the process serves. A database that fails
// must not get the server restarted, which cures nothing; readyz says it.
func (s *FleetServer) healthz(w nethttp.ResponseWriter, r *nethttp.Request) {
	_ = writeJSON(w, nethttp.StatusOK, map[string]string{"status": "ok"})
}

// readyz is readiness: a write committed to the ledger now. It fails (503
// unavailable, Retry-After) while writes fail, so that a load balancer
// sends agents to a replica that can store what they ship.
func (s *FleetServer) readyz(w nethttp.ResponseWriter, r *nethttp.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ready(ctx); err != nil {
		s.log.Warn("readiness check", "err", err)
		e := &gpuwarden.Error{Code: gpuwarden.EUnavailable, Message: "the ledger cannot take writes", Err: err,
			Hint: gpuwarden.ErrorHint(err)}
		writeJSONError(w, nethttp.StatusServiceUnavailable, e)
		return
	}
	_ = writeJSON(w, nethttp.StatusOK, map[string]string{"status": "ready"})
}

func (s *FleetServer) whoami(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	return writeJSON(w, nethttp.StatusOK, sc.Token)
}

// fleetMetrics are the server's own counters; the fleet's state is read
// from the ledger at each scrape.
type fleetMetrics struct {
	heartbeats prometheus.Counter
	ingest     prometheus.Histogram
	beatBatch  prometheus.Histogram
}

func newFleetMetrics() *fleetMetrics {
	return &fleetMetrics{
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuwarden_fleet_heartbeats_total",
			Help: "Heartbeats stored since the server started."}),
		ingest: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuwarden_fleet_ingest_seconds",
			Help: "Time to commit one agent batch.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		beatBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuwarden_fleet_heartbeat_commit_size",
			Help: "Heartbeats committed together in one transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
	}
}

func (m *fleetMetrics) observeBeats(n int) {
	m.heartbeats.Add(float64(n))
	m.beatBatch.Observe(float64(n))
}
