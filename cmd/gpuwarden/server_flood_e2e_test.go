package main

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServerFloodFromOneAddressLetsValidTokensIn: on the real server, a
// flood of made-up tokens from 127.0.0.1 (every client of a NAT or proxy
// shares one address) is answered 429 once the address's budgets are spent;
// while it goes on, agents from the same address whose tokens were made
// straight in the database (as another replica or `token create --db`
// makes them: the server has never seen them, so none is cached) get in
// with their first request (issue #32 item 6: they got 429).
func TestServerFloodFromOneAddressLetsValidTokensIn(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "server.db")
	srv := startServer(t, dir, db)
	// Agents whose tokens the server has never seen: none is cached.
	var agents []string
	for range 10 {
		r := gw(t, dir, "token", "create", "--project", "ml", "--role", "agent", "--db", db)
		if r.code != 0 {
			t.Fatalf("token create --db: exit %d\n%s", r.code, r.stderr)
		}
		agents = append(agents, strings.TrimSpace(r.stdout))
	}

	get := func(token string) int {
		req, _ := http.NewRequest("GET", srv.url+"/api/v1/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	made := func() string {
		b := make([]byte, 40)
		_, _ = rand.Read(b)
		return "gw_" + hex.EncodeToString(b[:8]) + "_" + hex.EncodeToString(b[8:])
	}
	spent := make(chan struct{})
	stop := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if get(made()) == http.StatusTooManyRequests {
					once.Do(func() { close(spent) })
				}
			}
		}()
	}
	// Once the flood has spent the address's budget, and while it goes on,
	// each agent sends its first request from the same address.
	select {
	case <-spent:
	case <-time.After(time.Minute):
		close(stop)
		wg.Wait()
		t.Fatal("a minute of made-up tokens from one address, and not one 429")
	}
	for i, agent := range agents {
		if code := get(agent); code != 200 {
			t.Errorf("agent %d's first request, during the flood = %d, want 200", i, code)
		}
	}
	close(stop)
	wg.Wait()
}
