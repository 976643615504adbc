package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/postgres"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/spf13/cobra"
)

// retainEvery is how often the server drops what is past retention.
const retainEvery = time.Hour

type serverFlags struct {
	db                   string
	addr                 string
	tlsCert, tlsKey      string
	allowedHosts         []string
	rate                 float64
	burst                float64
	maxBody              int64
	idleAfter, lostAfter time.Duration
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
a project and a role (agent, viewer, admin) and are stored hashed. On the first
start with no token, the server creates a fleet admin token and prints it once.
The dashboard is at / (sign in with a token); /metrics serves Prometheus.

--db is sqlite:PATH (default DATA_DIR/server.db) or a postgres:// URL; the
GPUWARDEN_DB environment variable sets it too, keeping a password off the
command line.

` + exitCodesHelp,
		Example: `  gpuwarden server
  gpuwarden server --db postgres://gpuwarden@db/gpuwarden --addr 0.0.0.0:8080 \
      --tls-cert /etc/gpuwarden/tls.crt --tls-key /etc/gpuwarden/tls.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("log-level") {
				a.log = a.logAt("info")
			}
			return a.runServer(cmd, &f)
		},
	}
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
	fl.DurationVar(&f.lostAfter, "lost-after", 10*time.Minute, "a silent box is lost (maybe still billing) after this long")
	return c
}

func (a *app) runServer(cmd *cobra.Command, f *serverFlags) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := a.log.With("component", "server")
	if f.maxBody < 1024 || f.rate < 0 || f.idleAfter <= 0 || f.lostAfter <= 0 {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--max-body must be at least 1024, --rate-limit ≥ 0, --idle-after and --lost-after positive")
	}
	store, where, err := openFleet(ctx, f.db, true)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := a.bootstrapAdmin(ctx, store); err != nil {
		return err
	}
	srv := gwhttp.NewFleetServer(store, a.log)
	srv.Now = a.now
	srv.AllowedHosts, srv.MaxBody = f.allowedHosts, f.maxBody
	srv.RatePerSec, srv.RateBurst = f.rate, f.burst
	srv.IdleAfter, srv.LostAfter = f.idleAfter, f.lostAfter
	addr, err := srv.Serve(ctx, f.addr, f.tlsCert, f.tlsKey)
	if err != nil {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--addr %s: %v", f.addr, err)
	}
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	log.Info("fleet server up", "url", scheme+"://"+addr+"/", "db", where)
	go retain(ctx, store, a.now, log)
	<-ctx.Done()
	err = srv.Wait()
	log.Info("fleet server stopped")
	return err
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

// bootstrapAdmin creates the fleet admin token on a server that has none,
// and prints its secret once: the only way in to a fresh server.
func (a *app) bootstrapAdmin(ctx context.Context, store gpuwarden.Fleet) error {
	ts, err := store.Tokens(ctx, gpuwarden.AllProjects)
	if err != nil || len(ts) > 0 {
		return err
	}
	t, secret, err := gwhttp.NewToken(gpuwarden.AllProjects, gpuwarden.RoleAdmin, "bootstrap", a.now())
	if err != nil {
		return err
	}
	if err := store.CreateToken(ctx, t); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "A fleet admin token was created (shown only this once; keep it in a password manager):\n\n  %s\n\n"+
		"Sign in to the dashboard with it, and create project tokens with `gpuwarden token create`.\n", secret)
	return nil
}

// openFleet opens the fleet ledger a --db value names and says where it
// is. Only the server creates the default database: another command that
// finds none was most likely meant to talk to a server.
func openFleet(ctx context.Context, db string, isServer bool) (gpuwarden.Fleet, string, error) {
	if db == "" {
		db = os.Getenv("GPUWARDEN_DB")
	}
	if db == "" {
		path := filepath.Join(defaultDataDir(), "server.db")
		if _, err := os.Stat(path); err != nil && !isServer {
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
