package ledgertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RequirePostgresEnv is the environment variable that turns a missing
// PostgreSQL from a skip into a failure, so that CI cannot pass by skipping.
const RequirePostgresEnv = "GPUWARDEN_POSTGRES_TESTS"

// server is the one PostgreSQL cluster of this test binary.
var server struct {
	once     sync.Once
	dir      string
	pgCtl    string
	asUser   []string // the runuser prefix when running as root
	adminDSN string
	skip     string // why there is no server, when the binaries are missing
	err      error
}

// StartPostgres returns the DSN of a new, empty database on a throwaway
// PostgreSQL cluster that this test binary starts on first use (from the
// system's initdb and pg_ctl) and StopPostgres stops; each call gets its own
// database so that tests share the server's start-up cost but not data.
func StartPostgres(t testing.TB) string {
	t.Helper()
	server.once.Do(startServer)
	if server.skip != "" {
		if os.Getenv(RequirePostgresEnv) == "1" {
			t.Fatalf("postgres tests required (%s=1): %s", RequirePostgresEnv, server.skip)
		}
		t.Skipf("%s; install it with `apt-get install postgresql` or set %s=1 to make this a failure", server.skip, RequirePostgresEnv)
	}
	if server.err != nil {
		t.Fatalf("start postgres: %v", server.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, server.adminDSN)
	if err != nil {
		t.Fatalf("connect to test postgres: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := "t_" + randomHex(8)
	// FILE_COPY: with fsync off it is faster than PostgreSQL 15's default
	// WAL_LOG for the near-empty template.
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" STRATEGY FILE_COPY"); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	return strings.Replace(server.adminDSN, "/postgres?", "/"+name+"?", 1)
}

// StopPostgres stops the cluster StartPostgres started and removes its
// directory; call it from TestMain after m.Run, since no single test owns
// the shared server.
func StopPostgres() {
	if server.dir == "" {
		return
	}
	cmd := exec.Command(server.pgCtl, "-D", filepath.Join(server.dir, "data"), "-m", "immediate", "-w", "stop")
	cmd = wrapUser(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "stop test postgres: %v\n%s", err, out)
	}
	_ = os.RemoveAll(server.dir)
	server.dir = ""
}

// findPostgres finds initdb and pg_ctl on PATH or, since Debian keeps them
// out of PATH, in the newest /usr/lib/postgresql/*/bin.
func findPostgres() (initdb, pgCtl string, ok bool) {
	initdb, err1 := exec.LookPath("initdb")
	pgCtl, err2 := exec.LookPath("pg_ctl")
	if err1 == nil && err2 == nil {
		return initdb, pgCtl, true
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "pg_ctl")
		if isExec(i) && isExec(p) {
			return i, p, true
		}
	}
	return "", "", false
}

// version is the major version in /usr/lib/postgresql/N/bin, 0 when none.
func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// wrapUser runs cmd as the postgres user when this process is root, because
// PostgreSQL refuses to run as root.
func wrapUser(cmd *exec.Cmd) *exec.Cmd {
	if len(server.asUser) == 0 {
		return cmd
	}
	args := append(append([]string(nil), server.asUser[1:]...), cmd.Args...)
	args[len(server.asUser)-1] = cmd.Path
	c := exec.Command(server.asUser[0], args...)
	c.Env = cmd.Env
	return c
}

func startServer() {
	initdb, pgCtl, ok := findPostgres()
	if !ok {
		server.skip = "initdb and pg_ctl not found on PATH or in /usr/lib/postgresql/*/bin"
		return
	}
	server.pgCtl = pgCtl
	dir, err := os.MkdirTemp("", "gpuwarden-pg-")
	if err != nil {
		server.err = err
		return
	}
	server.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			server.err = fmt.Errorf("running as root needs a postgres user: %w", err)
			return
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			server.err = err
			return
		}
		server.asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	port, err := freePort()
	if err != nil {
		server.err = err
		return
	}
	data := filepath.Join(dir, "data")
	// --no-sync and fsync=off: a throwaway cluster needs no durability, and
	// both save seconds per test binary.
	steps := [][]string{
		{initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"},
		{pgCtl, "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "30", "start", "-o",
			fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", port, dir)},
	}
	for _, s := range steps {
		out, err := wrapUser(exec.Command(s[0], s[1:]...)).CombinedOutput()
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			server.err = fmt.Errorf("%s: %w\n%s%s", filepath.Base(s[0]), err, out, log)
			return
		}
	}
	server.adminDSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// freePort asks the kernel for a loopback port no one listens on; another
// process could take it before the server does, which is rare enough for tests.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
