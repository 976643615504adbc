package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Message is one line of the agent's socket protocol, newline-delimited
// JSON in both directions. The agent sends {"type":"notice","notice":{…}};
// a supervisor sends {"type":"job","job":"ID","state":"running"|
// "checkpointing"|"done"} and, with a store, {"type":"sync","job":"ID",
// "sync":{…}} after every upload.
type Message struct {
	Type   string                `json:"type"`
	Notice *gpuwarden.Notice     `json:"notice,omitempty"`
	Job    string                `json:"job,omitempty"`
	State  string                `json:"state,omitempty"`
	Sync   *gpuwarden.SyncReport `json:"sync,omitempty"`
}

// Socket is the agent's Unix socket: it relays notices to every connected
// supervisor and takes their job reports.
type Socket struct {
	// OnSync hears every durability report, for the agent's alerts.
	OnSync func(job string, st gpuwarden.SyncReport)
	// OnGone hears a supervisor's connection close: its run report, if it
	// wrote one, is in the ledger by then (it writes it before it exits).
	OnGone func()
	// Now is the clock the job reports are stamped with.
	Now func() time.Time

	ln   net.Listener
	jobs *Jobs
	log  *slog.Logger

	mu    sync.Mutex
	conns map[net.Conn]*json.Encoder
}

// ListenSocket opens the socket at path readable by the owner only. A
// socket a dead agent left is replaced; one that an agent still answers on
// is a conflict, left alone: removing it sent the live agent's jobs to the
// newcomer, and the live one stopped the box under them. The data dir's
// lock (LockDataDir) keeps a second agent from getting this far; this is
// the check for a socket that another lock does not cover.
func ListenSocket(path string, jobs *Jobs, log *slog.Logger) (*Socket, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, gpuwarden.Errorf(gpuwarden.EConflict, "an agent answers on the socket %s", path).
			WithHint("stop that agent first, or give this one its own --data-dir")
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return &Socket{ln: ln, jobs: jobs, log: log, Now: time.Now, conns: map[net.Conn]*json.Encoder{}}, nil
}

// Serve accepts supervisors until ctx ends.
func (s *Socket) Serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	}()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = json.NewEncoder(c)
		s.mu.Unlock()
		go s.read(c)
	}
}

// read takes a supervisor's job reports; its jobs end with its connection.
func (s *Socket) read(c net.Conn) {
	seen := map[string]bool{}
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
		for id := range seen {
			s.jobs.Forget(id)
		}
		if s.OnGone != nil {
			s.OnGone()
		}
	}()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var m Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Job == "" {
			s.log.Debug("ignore socket message", "line", sc.Text())
			continue
		}
		switch {
		case m.Type == "job":
			seen[m.Job] = m.State != JobDone
			s.jobs.Report(m.Job, m.State, s.Now())
		case m.Type == "sync" && m.Sync != nil:
			seen[m.Job] = true
			s.jobs.Sync(m.Job, *m.Sync, s.Now())
			if s.OnSync != nil {
				s.OnSync(m.Job, *m.Sync)
			}
		default:
			s.log.Debug("ignore socket message", "line", sc.Text())
		}
	}
}

// Connected is the number of supervisors connected now.
func (s *Socket) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Broadcast sends a message to every connected supervisor; a connection
// that cannot take it within a second is dropped.
func (s *Socket) Broadcast(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, enc := range s.conns {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if err := enc.Encode(m); err != nil {
			s.log.Warn("drop a supervisor that does not read", "err", err)
			c.Close()
			delete(s.conns, c)
		}
	}
}

// Listen connects to an agent's socket and calls fn for each message until
// ctx ends or the agent goes away; `gpuwarden run` and tests use it.
func Listen(ctx context.Context, path string, fn func(Message)) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("connect to the agent at %s: %w", path, err)
	}
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var m Message
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			fn(m)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

// Client is a supervisor's connection to the agent: it hears notices and
// reports its job's state, so the agent never stops the box mid-checkpoint.
type Client struct {
	conn net.Conn
	mu   sync.Mutex
	enc  *json.Encoder
}

// Dial connects to the agent's socket.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to the agent at %s: %w", path, err)
	}
	return &Client{conn: c, enc: json.NewEncoder(c)}, nil
}

// Report tells the agent a job's state: running, checkpointing or done.
func (c *Client) Report(job, state string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	return c.enc.Encode(Message{Type: "job", Job: job, State: state})
}

// ReportSync tells the agent what of a job's checkpoints is durable.
func (c *Client) ReportSync(job string, st gpuwarden.SyncReport) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	return c.enc.Encode(Message{Type: "sync", Job: job, Sync: &st})
}

// Notices delivers the agent's notices until ctx ends or the agent goes away.
func (c *Client) Notices(ctx context.Context, fn func(gpuwarden.Notice)) {
	go func() {
		<-ctx.Done()
		c.conn.Close()
	}()
	sc := bufio.NewScanner(c.conn)
	for sc.Scan() {
		var m Message
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Type == "notice" && m.Notice != nil {
			fn(*m.Notice)
		}
	}
}

// Close ends the connection; the agent forgets the jobs it reported.
func (c *Client) Close() error { return c.conn.Close() }
