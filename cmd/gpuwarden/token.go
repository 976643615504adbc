package main

import (
	"context"
	"fmt"
	nethttp "net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/spf13/cobra"
)

// fleetFlags say how a command reaches the fleet ledger: through a server
// with a token, or, on the server's own box, straight to its database.
type fleetFlags struct {
	db, server, token, tokenFile string
}

func (f *fleetFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.server, "server", "", "fleet server `URL` (default $GPUWARDEN_SERVER)")
	fl.StringVar(&f.token, "token", "", "API `TOKEN` (default $GPUWARDEN_TOKEN; --token-file keeps it out of ps)")
	fl.StringVar(&f.tokenFile, "token-file", "", "read the token from `FILE`")
	fl.StringVar(&f.db, "db", "", "use the fleet database directly instead of a server: sqlite:PATH or postgres://…")
}

// remote reports whether the command goes through a server.
func (f *fleetFlags) remote() bool {
	return f.db == "" && (f.server != "" || os.Getenv("GPUWARDEN_SERVER") != "")
}

// client builds the server client from the flags and the environment.
func (f *fleetFlags) client() (*gwhttp.Client, error) {
	server := f.server
	if server == "" {
		server = os.Getenv("GPUWARDEN_SERVER")
	}
	token, err := readToken(f.token, f.tokenFile)
	if err != nil {
		return nil, err
	}
	return gwhttp.NewClient(server, token, nil)
}

// readToken takes the token from the flag, the file or $GPUWARDEN_TOKEN.
func readToken(token, file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", gpuwarden.Errorf(gpuwarden.EInvalid, "--token-file: %v", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if token == "" {
		token = os.Getenv("GPUWARDEN_TOKEN")
	}
	if token == "" {
		return "", gpuwarden.Errorf(gpuwarden.EInvalid, "no token").
			WithHint("pass --token-file FILE or set GPUWARDEN_TOKEN; create one with `gpuwarden token create`")
	}
	return token, nil
}

func (a *app) tokenCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke the fleet server's API tokens",
		Long: `token manages the fleet server's API tokens. A token belongs to one project
(or "*", the whole fleet, for admins) and has one role:

  agent   registers boxes and writes the boxes it registered
  viewer  reads the project: nodes, events, reports, dashboard
  admin   everything in the project, including its tokens and budget

The secret is printed once, at creation, to stdout; the server keeps only its
SHA-256. Run it on the server's box with --db, or anywhere with --server and an
admin token. The first fleet admin token of a new database comes from the
server's first start (DATA_DIR/admin.token) or, for replicas and Kubernetes,
from ` + "`token create --bootstrap --db …`" + `.

` + exitCodes("0  done", "2  bad input or usage, a token the server refuses, or --bootstrap on a database that has tokens",
			"3  the server or database does not answer, or cannot take writes now", "4  internal error"),
		Example: `  gpuwarden token create --bootstrap --db "$GPUWARDEN_DB" > admin.token
  gpuwarden token create --db sqlite:/var/lib/gpuwarden/server.db --project ml --role agent --name daemonset
  gpuwarden token list --server https://fleet:8080 --token-file admin.token
  gpuwarden token revoke 3f9a0c1d2e4b5a69 --db sqlite:server.db`,
	}
	c.AddCommand(a.tokenCreateCommand(), a.tokenListCommand(), a.tokenRevokeCommand())
	return c
}

func (a *app) tokenCreateCommand() *cobra.Command {
	var f fleetFlags
	var project, role, name, output string
	var bootstrap bool
	c := &cobra.Command{
		Use:   "create",
		Short: "Create a token and print its secret once",
		Long: `create makes a token and prints its secret once, to stdout (the rest goes to
stderr), so that it can go straight into a file or a Secret.

--bootstrap creates the first fleet admin token (project "*", role admin) of a
database that holds no token at all, straight in the database (--db), in one
atomic step that a server starting at the same time cannot duplicate; on a
database with a token it refuses (exit 2). It is the way in to servers that
run with --no-bootstrap, such as replicas on Kubernetes.

` + exitCodes("0  created: the token is printed once", "2  bad input or usage, a token the server refuses, or --bootstrap on a database that has tokens",
			"3  the server or database does not answer, or cannot take writes now", "4  internal error"),
		Example: `  gpuwarden token create --db sqlite:server.db --project ml --role agent
  gpuwarden token create --server https://fleet:8080 --token-file admin.token --project ml --role viewer -o json
  gpuwarden token create --bootstrap --db "$GPUWARDEN_DB" > admin.token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "text", "json"); err != nil {
				return err
			}
			if bootstrap {
				if err := bootstrapFlags(cmd, &f, &project, &role, &name); err != nil {
					return err
				}
			} else if project == "" {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--project is required").
					WithHint("name the token's project, \"*\" for the whole fleet; or --bootstrap for the first admin token")
			}
			var created gwhttp.CreatedToken
			if f.remote() {
				cl, err := f.client()
				if err != nil {
					return err
				}
				body := map[string]string{"project": project, "role": role, "name": name}
				if err := cl.Do(cmd.Context(), nethttp.MethodPost, "/api/v1/tokens", nil, body, &created); err != nil {
					return err
				}
			} else {
				t, secret, err := gwhttp.NewToken(project, role, name, a.now())
				if err != nil {
					return err
				}
				// --bootstrap may make the database: it is the first step.
				store, _, err := openFleet(cmd.Context(), f.db, bootstrap)
				if err != nil {
					return err
				}
				defer store.Close()
				if bootstrap {
					ok, err := store.CreateFirstToken(cmd.Context(), t)
					if err != nil {
						return err
					}
					if !ok {
						return gpuwarden.Errorf(gpuwarden.EConflict, "the fleet database holds a token already: --bootstrap creates only the first").
							WithHint("create another admin token with an admin's: `gpuwarden token create --project '*' --role admin --server URL --token-file admin.token` (or --db on the database's box)")
					}
				} else if err := store.CreateToken(cmd.Context(), t); err != nil {
					return err
				}
				created = gwhttp.CreatedToken{Token: t, Secret: secret}
			}
			if output == "json" {
				return writeJSON(a.stdout, "token", created)
			}
			fmt.Fprintf(a.stderr, "token %s: role %s in project %s (the secret is shown only now)\n", created.ID, created.Role, created.Project)
			_, err := fmt.Fprintln(a.stdout, created.Secret)
			return err
		},
	}
	f.register(c)
	c.Flags().StringVar(&project, "project", "", "`NAME` of the project, or \"*\" for a fleet admin (required except with --bootstrap)")
	c.Flags().StringVar(&role, "role", gpuwarden.RoleAgent, "agent, viewer or admin")
	c.Flags().StringVar(&name, "name", "", "what the token is for, shown in lists")
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text (the secret alone) or json")
	c.Flags().BoolVar(&bootstrap, "bootstrap", false, "create the first fleet admin token of a database with none (needs --db)")
	return c
}

// bootstrapFlags checks and completes token create's flags for --bootstrap:
// the database, not a server (which takes no request without a token), and
// a fleet admin, the only token that can make the others.
func bootstrapFlags(cmd *cobra.Command, f *fleetFlags, project, role, name *string) error {
	if f.server != "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--bootstrap writes to the database, not through --server").
			WithHint("pass --db sqlite:PATH or --db postgres://… (or set GPUWARDEN_DB)")
	}
	if f.db == "" {
		f.db = os.Getenv("GPUWARDEN_DB")
	}
	if f.db == "" {
		// Not the environment's server: the default database, as the
		// server would open it.
		f.db = "sqlite:" + filepath.Join(defaultDataDir(), "server.db")
	}
	if *project != "" && *project != gpuwarden.AllProjects || cmd.Flags().Changed("role") && *role != gpuwarden.RoleAdmin {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--bootstrap creates a fleet admin token: no --project or --role but \"*\" and admin")
	}
	*project, *role = gpuwarden.AllProjects, gpuwarden.RoleAdmin
	if *name == "" {
		*name = "bootstrap"
	}
	return nil
}

func (a *app) tokenListCommand() *cobra.Command {
	var f fleetFlags
	var project, output string
	c := &cobra.Command{
		Use:     "list",
		Short:   "List tokens (never their secrets)",
		Example: `  gpuwarden token list --db sqlite:server.db --project ml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			var ts []gpuwarden.Token
			if f.remote() {
				cl, err := f.client()
				if err != nil {
					return err
				}
				if err := cl.Do(cmd.Context(), nethttp.MethodGet, "/api/v1/tokens", url.Values{"project": {project}}, nil, &ts); err != nil {
					return err
				}
			} else {
				store, _, err := openFleet(cmd.Context(), f.db, false)
				if err != nil {
					return err
				}
				defer store.Close()
				if project == "" {
					project = gpuwarden.AllProjects
				}
				if ts, err = store.Tokens(cmd.Context(), project); err != nil {
					return err
				}
			}
			if output == "json" {
				if ts == nil {
					ts = []gpuwarden.Token{}
				}
				return writeJSON(a.stdout, "tokens", map[string]any{"tokens": ts})
			}
			t := newTable(a.stdout)
			t.row("ID", "PROJECT", "ROLE", "NAME", "CREATED", "REVOKED")
			for _, tk := range ts {
				revoked := "-"
				if !tk.Revoked.IsZero() {
					revoked = tk.Revoked.Format(time.DateTime)
				}
				t.row(tk.ID, tk.Project, tk.Role, orDash(tk.Name), tk.Created.Format(time.DateTime), revoked)
			}
			return t.flush()
		},
	}
	f.register(c)
	c.Flags().StringVar(&project, "project", "", "only this project's tokens (default: all the token may see)")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

func (a *app) tokenRevokeCommand() *cobra.Command {
	var f fleetFlags
	c := &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke a token: it stops working at once on the server that revokes it",
		Example: `  gpuwarden token revoke 3f9a0c1d2e4b5a69 --db sqlite:server.db`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.remote() {
				cl, err := f.client()
				if err != nil {
					return err
				}
				if err := cl.Do(cmd.Context(), nethttp.MethodDelete, "/api/v1/tokens/"+url.PathEscape(args[0]), nil, nil, nil); err != nil {
					return err
				}
			} else if err := revokeInDB(cmd.Context(), f.db, args[0], a.now()); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "token %s revoked\n", args[0])
			return nil
		},
	}
	f.register(c)
	return c
}

func revokeInDB(ctx context.Context, db, id string, now time.Time) error {
	store, _, err := openFleet(ctx, db, false)
	if err != nil {
		return err
	}
	defer store.Close()
	return store.RevokeToken(ctx, id, now.UTC())
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
