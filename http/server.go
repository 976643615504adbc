package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	nethttp "net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// DefaultAddr is where the agent listens unless told otherwise: loopback
// only, because the dashboard shows spend and process names and has no login.
const DefaultAddr = "127.0.0.1:7070"

// ShutdownTimeout bounds a graceful shutdown: in-flight requests get this
// long to finish before their connections are closed, so that stopping the
// agent never waits on a slow browser.
const ShutdownTimeout = 2 * time.Second

// History query limits, in minutes: an hour by default because that is what
// the dashboard draws, at most 30 days because the ledger keeps no more.
const (
	DefaultHistoryMinutes = 60
	MaxHistoryMinutes     = 43200
)

// contentSecurityPolicy allows scripts and styles only from this server:
// no inline script can run, so an escaping bug cannot become script
// execution. SVG charts are markup, not images, and need no exception.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Server is the agent's local web face: JSON API, dashboard and /metrics,
// all read from the agent through functions on every request.
type Server struct {
	// Now is the clock for history windows; tests set it, production leaves
	// it at time.Now. Set fields before serving.
	Now func() time.Time
	// AllowedHosts are host names (no port) accepted in the Host header
	// besides IP literals and localhost; "*" accepts any. The default
	// refuses other names so that a web page cannot read the API through
	// DNS rebinding; set it when Prometheus scrapes the agent by name.
	AllowedHosts []string
	// Node is who pays for the box and where it runs (owner, project,
	// provider, region, instance), for gpuwarden_node_info.
	Node gpuwarden.Node
	// Savings is the agent's savings ledger, read by the dashboard, by
	// /metrics (gpuwarden_saved_total) and by /api/v1/savings; nil: none.
	Savings gpuwarden.SavingsLedger

	status  func() gpuwarden.AgentStatus
	history func(ctx context.Context, since time.Time) ([]gpuwarden.NodeSample, error)
	log     *slog.Logger
	metrics nethttp.Handler
	routes  map[string]nethttp.HandlerFunc

	life lifecycle
}

// NewServer builds a server over the agent's status and history; a nil
// logger discards, so that tests and tools need not build one.
func NewServer(status func() gpuwarden.AgentStatus, history func(ctx context.Context, since time.Time) ([]gpuwarden.NodeSample, error), log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		Now:     time.Now,
		status:  status,
		history: history,
		log:     log.With("component", "http"),
	}
	s.metrics = newMetricsHandler(status, func() gpuwarden.Node { return s.Node }, func() gpuwarden.SavingsLedger { return s.Savings }, s.log)
	s.routes = map[string]nethttp.HandlerFunc{
		"/":                   s.handleDashboard,
		"/api/v1/status":      s.handleStatus,
		"/api/v1/history":     s.handleHistory,
		"/api/v1/savings":     s.handleSavings,
		"/metrics":            s.metrics.ServeHTTP,
		"/assets/" + styleCSS: serveAsset(styleCSS, "text/css; charset=utf-8"),
		"/assets/" + scriptJS: serveAsset(scriptJS, "text/javascript; charset=utf-8"),
	}
	return s
}

// Handler returns the server's routes with its security headers, for
// callers that run their own http.Server; requests must name an allowed
// host, which httptest.NewRequest's default example.com is not.
func (s *Server) Handler() nethttp.Handler { return nethttp.HandlerFunc(s.serveHTTP) }

// serveHTTP routes by exact path: the API is small, and a table gives JSON
// 404 and 405 answers that ServeMux would write as plain text.
func (s *Server) serveHTTP(w nethttp.ResponseWriter, r *nethttp.Request) {
	h := w.Header()
	securityHeaders(h, contentSecurityPolicy)
	if !hostAllowed(r.Host, s.AllowedHosts) {
		writeJSONError(w, nethttp.StatusMisdirectedRequest, gpuwarden.Errorf(gpuwarden.EUnauthorized,
			"host %q is not served here", r.Host).WithHint("use 127.0.0.1 or localhost, or add the name to the server's allowed hosts"))
		return
	}
	route, ok := s.routes[r.URL.Path]
	if !ok {
		writeJSONError(w, nethttp.StatusNotFound, gpuwarden.Errorf(gpuwarden.ENotFound, "no such page: %s", r.URL.Path))
		return
	}
	if r.Method != nethttp.MethodGet && r.Method != nethttp.MethodHead {
		h.Set("Allow", "GET, HEAD")
		writeJSONError(w, nethttp.StatusMethodNotAllowed, gpuwarden.Errorf(gpuwarden.EInvalid, "method %s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	route(w, r)
}

// securityHeaders are on every answer: no sniffing, no framing, no
// referrer, and the content security policy given.
func securityHeaders(h nethttp.Header, csp string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// hostAllowed refuses Host names a DNS-rebinding page would send; IP
// literals and localhost cannot be rebound, so they always pass.
func hostAllowed(hostport string, allowed []string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" || net.ParseIP(host) != nil {
		return true
	}
	host = strings.ToLower(host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	for _, a := range allowed {
		if a == "*" || strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Server) handleStatus(w nethttp.ResponseWriter, r *nethttp.Request) {
	s.writeJSON(w, nethttp.StatusOK, s.status())
}

func (s *Server) handleHistory(w nethttp.ResponseWriter, r *nethttp.Request) {
	minutes, err := parseMinutes(r.URL.Query().Get("minutes"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	samples, err := s.history(r.Context(), s.now().Add(-time.Duration(minutes)*time.Minute))
	if err != nil {
		s.writeError(w, fmt.Errorf("read history: %w", err))
		return
	}
	if samples == nil {
		samples = []gpuwarden.NodeSample{} // [] rather than null, so clients can range without a check
	}
	s.writeJSON(w, nethttp.StatusOK, samples)
}

// parseMinutes reads the history window; an empty value means the default.
func parseMinutes(v string) (int, error) {
	if v == "" {
		return DefaultHistoryMinutes, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxHistoryMinutes {
		return 0, gpuwarden.Errorf(gpuwarden.EInvalid, "minutes must be a whole number from 1 to %d, not %q", MaxHistoryMinutes, v).
			WithHint("ask for example /api/v1/history?minutes=60")
	}
	return n, nil
}

// writeJSON encodes before writing, so that an encoding failure still gets
// a proper 500 rather than half a body under a 200.
func (s *Server) writeJSON(w nethttp.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.writeError(w, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// writeError maps an application error code to its HTTP status, the one
// place the API does so.
func (s *Server) writeError(w nethttp.ResponseWriter, err error) {
	code := statusOf(gpuwarden.ErrorCodeOf(err))
	if code >= 500 {
		s.log.Error("request failed", "error", err)
	}
	writeJSONError(w, code, err)
}

// statusOf is the one mapping from application error codes to HTTP statuses.
func statusOf(c gpuwarden.ErrorCode) int {
	switch c {
	case gpuwarden.EInvalid:
		return nethttp.StatusBadRequest
	case gpuwarden.ENotFound:
		return nethttp.StatusNotFound
	case gpuwarden.EUnauthorized:
		return nethttp.StatusUnauthorized
	case gpuwarden.EForbidden:
		return nethttp.StatusForbidden
	case gpuwarden.EConflict:
		return nethttp.StatusConflict
	case gpuwarden.EFinding:
		return nethttp.StatusUnprocessableEntity
	case gpuwarden.EEnvironment, gpuwarden.EUnavailable:
		return nethttp.StatusServiceUnavailable
	default:
		return nethttp.StatusInternalServerError
	}
}

// errorBody is the JSON every failed request answers with.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Hint  string `json:"hint,omitempty"`
}

// retryAfter is what a 503 asks a client to wait: agents back off on their
// own schedule, and a load balancer or script reads the header.
const retryAfter = "5"

func writeJSONError(w nethttp.ResponseWriter, status int, err error) {
	if status == nethttp.StatusServiceUnavailable {
		w.Header().Set("Retry-After", retryAfter)
	}
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(errorBody{
		Error: err.Error(),
		Code:  string(gpuwarden.ErrorCodeOf(err)),
		Hint:  gpuwarden.ErrorHint(err),
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// Serve listens on addr and serves in the background until ctx ends, then
// shuts down within ShutdownTimeout; it returns the address it listens on,
// so that callers passing port 0 learn the port. Wait reports how it ended.
func (s *Server) Serve(ctx context.Context, addr string) (string, error) {
	return s.life.serve(ctx, addr, s.Handler(), nil, s.log)
}

// Wait blocks until a server started with Serve has stopped and returns
// why: nil after a clean shutdown, an error when serving failed or when
// requests had to be cut off. It returns nil at once if Serve never ran.
func (s *Server) Wait() error { return s.life.wait() }
