// Package catalogtest serves published catalog files on loopback, as
// SkyPilot's catalog host and Azure's Retail Prices API do, for the tests of
// `catalog update` in catalog/ and cmd/gpuwarden alike.
package catalogtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server serves DIR/<cloud>/vms.csv under /catalogs/v8/ (ETag,
// Last-Modified, 304 on a match) and DIR/azure/page1.json and page2.json
// at /api/retail/prices, counting what it sends.
type Server struct {
	*httptest.Server
	mu          sync.Mutex
	requests    int
	conditional int
	bodyBytes   int
	override    map[string][]byte
}

// ModTime is the Last-Modified of every file the server sends.
var ModTime = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

// New starts a server over dir (a folder laid out as catalog/testdata/published).
func New(t testing.TB, dir string) *Server {
	t.Helper()
	s := &Server{override: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/catalogs/v8/", func(w http.ResponseWriter, r *http.Request) {
		cloud, file, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/catalogs/v8/"), "/")
		s.mu.Lock()
		s.requests++
		if r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Modified-Since") != "" {
			s.conditional++
		}
		body, ok := s.override[cloud]
		s.mu.Unlock()
		if !ok {
			var err error
			if strings.Contains(cloud+file, "..") {
				http.NotFound(w, r)
				return
			}
			if body, err = os.ReadFile(filepath.Join(dir, cloud, file)); err != nil {
				http.NotFound(w, r)
				return
			}
		}
		h := sha256.Sum256(body)
		w.Header().Set("ETag", `"`+hex.EncodeToString(h[:8])+`"`)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		cw := &countingWriter{ResponseWriter: w}
		http.ServeContent(cw, r, file, ModTime, bytes.NewReader(body))
		s.mu.Lock()
		s.bodyBytes += cw.n
		s.mu.Unlock()
	})
	mux.HandleFunc("/api/retail/prices", func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Query().Get("$filter"), "serviceName eq 'Virtual Machines'") {
			http.Error(w, "bad filter", http.StatusBadRequest)
			return
		}
		page := "page1.json"
		if r.URL.Query().Get("$skip") != "" {
			page = "page2.json"
		}
		b, err := os.ReadFile(filepath.Join(dir, "azure", page))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// The recorded answer links to the public host; point it here.
		b = bytes.ReplaceAll(b, []byte("https://prices.azure.com"), []byte(s.URL))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
	// Assigned before the server starts: the Azure handler reads s.URL.
	s.Server = httptest.NewUnstartedServer(mux)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// BaseURL is what `catalog update --from` takes.
func (s *Server) BaseURL() string { return s.URL + "/catalogs/v8" }

// AzureURL is what `catalog update --azure-url` takes.
func (s *Server) AzureURL() string { return s.URL + "/api/retail/prices" }

// Override serves body as cloud's vms.csv from now on, to model a change
// or a broken file.
func (s *Server) Override(cloud string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.override[cloud] = body
}

// Counts is what the server saw: requests to the catalog files, those
// that were conditional, and the body bytes it sent for them.
func (s *Server) Counts() (requests, conditional, body int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.conditional, s.bodyBytes
}

type countingWriter struct {
	http.ResponseWriter
	n int
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += n
	return n, err
}
