package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/notify"
	"github.com/gpuwarden/gpuwarden/postgres"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// retainEvery is how often the server drops what is past retention.
const retainEvery = time.Hour

// adminTokenFile is where, in the server's data dir, the first start
// writes the bootstrap admin token: a file, because a token printed to
// stderr ends up in journald, `kubectl logs` and CI logs.
const adminTokenFile = "admin.token"

type serverFlags struct {
	db                   string
	addr                 string
	tlsCert, tlsKey      string
	allowedHosts         []string
	rate                 float64
	burst                float64
	maxBody              int64
	idleAfter, lostAfter time.Duration
	dataDir              string
	noBootstrap          bool
	webhooks             []string
	webhookFormat        string
	publicURL            string
}

func (a *app) serverCommand() *cobra.Command {
	var f serverFlags
	c := &cobra.Command{
		Use:   "server",
		Short: "Run the fleet server: the ledger agents report to, reports, dashboard",
		Long: `server is the fleet's ledger. Agents (` + "`gpuwarden up --server URL --token-file F`" + `)
register their box with its labels (owner, project, provider, region, price,
TTL), send a heartbeat every 15 s and ship their minutes and events; the
server keeps them in SQLite (the default) or PostgreSQL and answers:

  spend      per project, owner or provider against budget, with a forecast
  orphans    boxes with no owner, past their TTL, idle for hours, or silent
             while maybe still billing (weekly review as markdown)
  nodes      burn-in history, Xid/ECC, failed runs and error rate per node
  providers  provisioning time (mean, p50, p95, outliers), preemptions per
             100 h, failure rate
  heatmap    utilisation per GPU per hour
  cost       cost per epoch or per 1,000 requests, where jobs report progress

Every route but /healthz needs a token (` + "`gpuwarden token create`" + `); tokens belong to
a project and a role (agent, viewer, admin) and are stored hashed. The dashboard
is at / (sign in with a token); /metrics serves Prometheus.

Each --webhook URL (Slack, Teams, PagerDuty … as for ` + "`up`" + `) gets a monthly summary on
the 1st (UTC): last month's spend, what gpuwarden saved (confirmed and
estimated apart), the biggest saving and the biggest waste still billing.
The fleet ledger records what went out, so that a restart never sends it
twice and replicas on one database send it once.

The first token: the server binds --addr first (a port in use fails before
anything is created), then, if the database holds no token at all, creates
one fleet admin token and writes it to DATA_DIR/admin.token (mode 0600, never
over an existing file). The log names the file, never the token; the token is
printed only when stderr is a terminal. With --no-bootstrap it creates none:
create it once with ` + "`gpuwarden token create --bootstrap --db …`" + `, which
prints it to stdout (what Kubernetes and other replicated setups do).

Replicas: several servers may share one PostgreSQL database (migrations and
the bootstrap token are taken under advisory locks, so two starting at once
create one token). Each keeps tokens it read for up to 5 s, so a token revoked
through one replica is refused by the others within 5 s (at once by the one
that revoked it); --rate-limit and --rate-burst apply per replica, so N
replicas behind one Service allow a token up to N times the rate.

--db is sqlite:PATH (default DATA_DIR/server.db) or a postgres:// URL; the
GPUWARDEN_DB environment variable sets it too, keeping a password off the
command line.

` + exitCodes("0  stopped cleanly (SIGTERM, Ctrl-C)", "2  bad input or usage: a flag, --db, a busy --addr (nothing is created then), an admin.token with no token behind it",
			"3  the database does not answer", "4  internal error"),
		Example: `  gpuwarden server
  gpuwarden token create --bootstrap --db postgres://gpuwarden@db/gpuwarden > admin.token
  gpuwarden server --db postgres://gpuwarden@db/gpuwarden --addr 0.0.0.0:8080 --no-bootstrap \
      --tls-cert /etc/gpuwarden/tls.crt --tls-key /etc/gpuwarden/tls.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runServer(cmd, &f)
		},
	}
	serviceLogLevel(c)
	fl := c.Flags()
	fl.StringVar(&f.db, "db", "", "`DB`: sqlite:PATH or postgres://… (default $GPUWARDEN_DB, else sqlite:DATA_DIR/server.db)")
	fl.StringVar(&f.addr, "addr", gwhttp.DefaultFleetAddr, "`ADDR` to listen on")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate `FILE` (PEM); with --tls-key serves HTTPS")
	fl.StringVar(&f.tlsKey, "tls-key", "", "TLS private key `FILE` (PEM)")
	fl.StringSliceVar(&f.allowedHosts, "allowed-hosts", nil, "host `NAMES` accepted besides IPs and localhost (\"*\": any)")
	fl.Float64Var(&f.rate, "rate-limit", gwhttp.DefaultRatePerSec, "requests per second per token (0: no limit)")
	fl.Float64Var(&f.burst, "rate-burst", gwhttp.DefaultRateBurst, "requests a token may send at once above the rate")
	fl.Int64Var(&f.maxBody, "max-body", gwhttp.DefaultMaxBody, "largest request body in `BYTES`")
	fl.DurationVar(&f.idleAfter, "idle-after", 4*time.Hour, "an idle box becomes an orphan after this long")
	fl.DurationVar(&f.lostAfter, "lost-after", 10*time.Minute, "a silent box is lost (maybe still billing) after this long; until then no other box may register its node ID")
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "`DIR` of the default SQLite database and of the bootstrap admin.token")
	fl.StringArrayVar(&f.webhooks, "webhook", nil, "send the monthly savings summary to `URL` on the 1st; repeatable (docs/alerts.md)")
	fl.StringVar(&f.webhookFormat, "webhook-format", notify.FormatAuto, "webhook body: "+strings.Join(notify.Formats, ", ")+" (auto: from the URL)")
	fl.StringVar(&f.publicURL, "public-url", "", "the dashboard's `URL` as people open it, for the summary's link")
	fl.BoolVar(&f.noBootstrap, "no-bootstrap", false, "never create the first admin token: make it once with 'gpuwarden token create --bootstrap' (replicas, Kubernetes)")
	return c
}

func (a *app) runServer(cmd *cobra.Command, f *serverFlags) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := a.log.With("component", "server")
	if f.maxBody < 1024 || f.rate < 0 || f.idleAfter <= 0 || f.lostAfter <= 0 {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--max-body must be at least 1024, --rate-limit ≥ 0, --idle-after and --lost-after positive")
	}
	hooks, err := gwhttp.WebhookSummaryHooks(f.webhooks, f.webhookFormat, log)
	if err != nil {
		return err
	}
	// The port first: a server that cannot listen must not create a
	// database, and above all no token, that a retry would not show again.
	addr, err := reserveAddr(ctx, f.addr)
	if err != nil {
		return err
	}
	store, where, err := openFleetIn(ctx, f.db, f.dataDir, true)
	if err != nil {
		return err
	}
	defer store.Close()
	srv := gwhttp.NewFleetServer(store, a.log)
	srv.Now = a.now
	srv.AllowedHosts, srv.MaxBody = f.allowedHosts, f.maxBody
	srv.RatePerSec, srv.RateBurst = f.rate, f.burst
	srv.IdleAfter, srv.LostAfter = f.idleAfter, f.lostAfter
	if addr, err = srv.Serve(ctx, addr, f.tlsCert, f.tlsKey); err != nil {
		return addrError(f.addr, err)
	}
	if f.noBootstrap {
		err = warnIfNoToken(ctx, store, log)
	} else {
		err = a.bootstrapAdmin(ctx, store, f.dataDir, log)
	}
	if err != nil {
		stop()
		_ = srv.Wait()
		return err
	}
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	log.Info("fleet server up", "url", scheme+"://"+addr+"/", "db", where)
	go retain(ctx, store, a.now, log)
	if len(hooks) > 0 {
		// Last month's spend and savings, once, on the 1st (docs/alerts.md).
		ms := &gwhttp.MonthlySummaries{Server: srv, Hooks: hooks, Link: f.publicURL}
		go ms.Run(ctx)
	}
	<-ctx.Done()
	err = srv.Wait()
	log.Info("fleet server stopped")
	return err
}

// reserveAddr checks that addr can be listened on and returns the address
// to serve on: addr itself, or with port 0 the port the kernel picked, so
// that the server then listens where it checked. The check's listener is
// closed before the server listens; another process taking the port in
// between fails the server's own listen, still before any token exists.
func reserveAddr(ctx context.Context, addr string) (string, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", addrError(addr, err)
	}
	defer ln.Close()
	if host, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
			return net.JoinHostPort(host, strconv.Itoa(tcp.Port)), nil
		}
	}
	return addr, nil
}

// addrError says that the server cannot listen on addr, and what to do;
// an application error (a TLS key pair that does not load) says it itself.
func addrError(addr string, err error) error {
	var app *gpuwarden.Error
	if errors.As(err, &app) {
		return err
	}
	e := &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "--addr " + addr, Err: err}
	if errors.Is(err, syscall.EADDRINUSE) {
		return e.WithHint("another process listens on %s (a server already running?): stop it, or pass --addr HOST:PORT with a free port", addr)
	}
	return e.WithHint("pass --addr HOST:PORT, such as 127.0.0.1:8080 or 0.0.0.0:8080")
}

// retain drops old minutes, hours and events now and every hour.
func retain(ctx context.Context, store gpuwarden.Fleet, now func() time.Time, log interface{ Warn(string, ...any) }) {
	t := time.NewTicker(retainEvery)
	defer t.Stop()
	for {
		if err := store.Retain(ctx, now()); err != nil && ctx.Err() == nil {
			log.Warn("retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// bootstrapAdmin creates the first fleet admin token on a ledger that has
// none, the only way in to a fresh server, and writes it to
// dataDir/admin.token, never to the log: journald, `kubectl logs` and CI
// keep logs where anyone with access to them could read it. The token goes
// to a private temporary file first, so that one created in the ledger is
// never lost, and is linked into place, which fails rather than overwrite a
// file. Of servers starting together on one database only one creates it.
func (a *app) bootstrapAdmin(ctx context.Context, store gpuwarden.Fleet, dataDir string, log *slog.Logger) error {
	ts, err := store.Tokens(ctx, gpuwarden.AllProjects)
	if err != nil || len(ts) > 0 {
		return err
	}
	path, err := filepath.Abs(filepath.Join(dataDir, adminTokenFile))
	if err != nil {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--data-dir %s: %v", dataDir, err)
	}
	if _, err := os.Lstat(path); err == nil {
		// A server sharing this data dir and database may have just
		// written it: then the database holds its token now.
		if ts, err := store.Tokens(ctx, gpuwarden.AllProjects); err != nil || len(ts) > 0 {
			return err
		}
		return gpuwarden.Errorf(gpuwarden.EConflict, "the database holds no token, but %s exists: the token of another database, or of this one before it was emptied", path).
			WithHint("move %s away and start again, pass another --data-dir, or create the first token with `gpuwarden token create --bootstrap --db …`", path)
	}
	t, secret, err := gwhttp.NewToken(gpuwarden.AllProjects, gpuwarden.RoleAdmin, "bootstrap", a.now())
	if err != nil {
		return err
	}
	tmp, err := writePrivateTemp(filepath.Dir(path), secret+"\n")
	if err != nil {
		return &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "write the bootstrap admin token", Err: err,
			Hint: "pass --data-dir DIR that this user may write, or --no-bootstrap and create the token with `gpuwarden token create --bootstrap --db …`"}
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.Remove(tmp)
		}
	}()
	created, err := store.CreateFirstToken(ctx, t)
	if err != nil {
		return err
	}
	if !created {
		log.Info("another server created the first admin token", "data_dir", dataDir)
		return nil
	}
	if err := os.Link(tmp, path); err != nil {
		keep = true // the only copy of a token the ledger now holds
		return &gpuwarden.Error{Code: gpuwarden.EEnvironment, Message: "the first admin token was created, but not linked to " + path, Err: err,
			Hint: "it is in " + tmp + ": move it to a safe place; the next start creates none, since the database holds it"}
	}
	syncDir(filepath.Dir(path))
	log.Info("fleet admin token created", "file", path, "token_id", t.ID,
		"hint", "sign in to the dashboard with it; keep it in a password manager and delete the file")
	if writerIsTerminal(a.stderr) {
		fmt.Fprintf(a.stderr, "A fleet admin token was created and written to %s (mode 0600):\n\n  %s\n\n"+
			"Sign in to the dashboard with it, and create project tokens with `gpuwarden token create --token-file %s`.\n", path, secret, path)
	}
	return nil
}

// warnIfNoToken says, for a server that does not bootstrap, that nobody can
// use it until the first token is created.
func warnIfNoToken(ctx context.Context, store gpuwarden.Fleet, log *slog.Logger) error {
	ts, err := store.Tokens(ctx, gpuwarden.AllProjects)
	if err != nil || len(ts) > 0 {
		return err
	}
	log.Warn("the fleet ledger holds no token, and --no-bootstrap creates none: every request is refused",
		"hint", "create the first fleet admin token with `gpuwarden token create --bootstrap --db …`")
	return nil
}

// writePrivateTemp writes content to a new file in dir, mode 0600, synced,
// and returns its path; dir is created (0700) when missing.
func writePrivateTemp(dir, content string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+adminTokenFile+".*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = io.WriteString(f, content)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return "", err
	}
	return name, nil
}

// syncDir makes a new directory entry durable; a failure only weakens
// that, so it is ignored.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// writerIsTerminal reports whether w is a terminal: a person reading, not
// a log collector.
func writerIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// openFleet opens the fleet ledger a --db value names and says where it
// is. Only the server creates the default database: another command that
// finds none was most likely meant to talk to a server.
func openFleet(ctx context.Context, db string, isServer bool) (gpuwarden.Fleet, string, error) {
	return openFleetIn(ctx, db, defaultDataDir(), isServer)
}

// openFleetIn is openFleet with the default database in dataDir; create
// says whether a missing default database is created.
func openFleetIn(ctx context.Context, db, dataDir string, create bool) (gpuwarden.Fleet, string, error) {
	if db == "" {
		db = os.Getenv("GPUWARDEN_DB")
	}
	if db == "" {
		path := filepath.Join(dataDir, "server.db")
		if _, err := os.Stat(path); err != nil && !create {
			return nil, "", gpuwarden.Errorf(gpuwarden.EInvalid, "no fleet server named and no server database at %s", path).
				WithHint("pass --server URL with --token-file, or --db sqlite:PATH|postgres://… (or set GPUWARDEN_SERVER)")
		}
		db = "sqlite:" + path
	}
	switch {
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		f, err := postgres.OpenFleet(ctx, db)
		if err != nil {
			return nil, "", &gpuwarden.Error{Code: gpuwarden.EEnvironment, Message: "open the PostgreSQL fleet ledger", Err: err,
				Hint: "check the DSN, that the server runs and that the user may create tables"}
		}
		return f, "postgresql", nil
	case strings.HasPrefix(db, "sqlite:"):
		path := strings.TrimPrefix(db, "sqlite:")
		f, err := sqlite.OpenFleet(ctx, path)
		if err != nil {
			return nil, "", err
		}
		return f, db, nil
	}
	return nil, "", gpuwarden.Errorf(gpuwarden.EInvalid, "--db %q is neither sqlite:PATH nor postgres://…", redactDSN(db))
}

// redactDSN hides a password in a DSN before it is printed.
func redactDSN(db string) string {
	if at := strings.LastIndex(db, "@"); at > 0 {
		if scheme := strings.Index(db, "://"); scheme > 0 && scheme < at {
			return db[:scheme+3] + "…" + db[at:]
		}
	}
	return db
}
