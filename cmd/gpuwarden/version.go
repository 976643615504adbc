package main

import (
	"fmt"
	"runtime"

	"github.com/gpuwarden/gpuwarden"
	"github.com/spf13/cobra"
)

// buildDate is the commit's date in RFC 3339, set by scripts/package.sh with
// -ldflags "-X main.buildDate=…". It is the commit's time, not the clock's,
// so that two builds of one commit give the same bytes.
var buildDate = ""

func versionString() string {
	s := "gpuwarden " + gpuwarden.Version
	if gpuwarden.Commit != "" {
		s += " (" + gpuwarden.Commit + ")"
	}
	if buildDate != "" {
		s += " built " + buildDate
	}
	return s + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

func (a *app) versionCommand() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:     "version",
		Short:   "Print the version of this build",
		Long:    "version prints the version, the commit, the commit's date, the Go version and the platform of this build.\n\n" + exitCodes("0  printed", "2  bad usage"),
		Example: "  gpuwarden version\n  gpuwarden version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(a.stdout, "version", map[string]string{"version": gpuwarden.Version, "commit": gpuwarden.Commit,
					"date": buildDate, "go": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH})
			}
			_, err := fmt.Fprintln(a.stdout, versionString())
			return err
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}
