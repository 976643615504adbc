package main

import (
	nethttp "net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/spf13/cobra"
)

func (a *app) projectCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "project",
		Short: "Set and list the fleet's projects and their monthly budgets",
		Long: `project sets a project's monthly budget on the fleet server; the spend report
and the dashboard compare each project's month-to-date spend and forecast with
it. A project exists as soon as a token names it; set its budget here.

` + exitCodes("0  done", "2  bad input or usage, or a token the server refuses", "3  the server or database does not answer, or cannot take writes now",
			"4  internal error"),
		Example: `  gpuwarden project set ml --budget 5000 --currency EUR --db sqlite:server.db
  gpuwarden project list --server https://fleet:8080 --token-file admin.token`,
	}
	c.AddCommand(a.projectSetCommand(), a.projectListCommand())
	return c
}

func (a *app) projectSetCommand() *cobra.Command {
	var f fleetFlags
	var budget, currency, output string
	c := &cobra.Command{
		Use:     "set NAME",
		Short:   "Create a project or change its monthly budget",
		Example: `  gpuwarden project set ml --budget 5000 --currency EUR --db sqlite:server.db`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			if err := gwhttp.ValidProject(args[0], false); err != nil {
				return err
			}
			m, err := gpuwarden.ParseMicros(budget)
			if err != nil || m < 0 {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--budget %q is not an amount such as 5000 or 5000.50", budget)
			}
			p := gpuwarden.Project{Name: args[0], Budget: gpuwarden.CentsOf(m), Currency: gpuwarden.Currency(strings.ToUpper(currency)),
				Created: a.now().UTC()}
			if f.remote() {
				cl, err := f.client()
				if err != nil {
					return err
				}
				if err := cl.Do(cmd.Context(), nethttp.MethodPut, "/api/v1/projects/"+url.PathEscape(p.Name), nil, p, &p); err != nil {
					return err
				}
			} else {
				store, _, err := openFleet(cmd.Context(), f.db, false)
				if err != nil {
					return err
				}
				defer store.Close()
				if err := store.PutProject(cmd.Context(), p); err != nil {
					return err
				}
			}
			return a.printProjects(output, []gpuwarden.Project{p})
		},
	}
	f.register(c)
	c.Flags().StringVar(&budget, "budget", "0", "monthly budget `AMOUNT` (0: none)")
	c.Flags().StringVar(&currency, "currency", "USD", "ISO 4217 `CODE` of the budget")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

func (a *app) projectListCommand() *cobra.Command {
	var f fleetFlags
	var output string
	c := &cobra.Command{
		Use:     "list",
		Short:   "List projects and budgets",
		Example: `  gpuwarden project list --db sqlite:server.db -o json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			var ps []gpuwarden.Project
			if f.remote() {
				cl, err := f.client()
				if err != nil {
					return err
				}
				if err := cl.Do(cmd.Context(), nethttp.MethodGet, "/api/v1/projects", nil, nil, &ps); err != nil {
					return err
				}
			} else {
				store, _, err := openFleet(cmd.Context(), f.db, false)
				if err != nil {
					return err
				}
				defer store.Close()
				if ps, err = store.Projects(cmd.Context()); err != nil {
					return err
				}
			}
			return a.printProjects(output, ps)
		},
	}
	f.register(c)
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

func (a *app) printProjects(output string, ps []gpuwarden.Project) error {
	if output == "json" {
		if ps == nil {
			ps = []gpuwarden.Project{}
		}
		return writeJSON(a.stdout, "projects", map[string]any{"projects": ps})
	}
	t := newTable(a.stdout)
	t.row("PROJECT", "BUDGET/MONTH", "CREATED")
	for _, p := range ps {
		budget := "-"
		if p.Budget > 0 {
			budget = p.Currency.Format(p.Budget)
		}
		t.row(p.Name, budget, p.Created.Format(time.DateOnly))
	}
	return t.flush()
}
