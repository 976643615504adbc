package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/config"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func (a *app) initCommand() *cobra.Command {
	var (
		s              = config.DefaultStarter()
		kind, prec     string
		budget         string
		countries      string
		nonInteractive bool
		force          bool
	)
	c := &cobra.Command{
		Use:   "init [FILE]",
		Short: "Write a commented starter plan file",
		Long: `init writes a commented gpuwarden.yaml to FILE, or to standard output when no
FILE is given. On a terminal it asks for the main answers (Enter keeps the
default shown); flags set them without asking, and --non-interactive never asks.

` + exitCodes("0  the plan file was written", "2  bad input: a flag, or FILE exists and --force was not given", "4  internal error"),
		Example: `  gpuwarden init > gpuwarden.yaml
  gpuwarden init --non-interactive --kind inference --params-b 13 --precision int4 --work-hours 730 p.yaml
  gpuwarden init gpuwarden.yaml --budget 2000 --currency EUR --countries DE,FR`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !nonInteractive && isTerminal(a.stdin) {
				if err := a.ask(cmd, &s, &kind, &prec, &budget, &countries); err != nil {
					return err
				}
			}
			if err := applyStarterFlags(&s, kind, prec, budget, countries); err != nil {
				return err
			}
			if !cmd.Flags().Changed("name") && (cmd.Flags().Changed("kind") || cmd.Flags().Changed("params-b")) {
				s.Name = fmt.Sprintf("%s-%gb", s.Kind, s.ParamsB)
			}
			text := s.Render()
			if _, err := config.Parse("init", text); err != nil {
				return err
			}
			if len(args) == 0 {
				_, err := a.stdout.Write(text)
				return err
			}
			if err := writeNew(args[0], text, force); err != nil {
				return err
			}
			// Said on stderr, as preflight --fix says what it wrote: stdout
			// stays for what a script reads.
			fmt.Fprintf(a.stderr, "wrote %s: plan %s, every field commented; next: gpuwarden plan %s\n", args[0], s.Name, shellWord(args[0]))
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&s.Name, "name", s.Name, "name of the plan")
	fl.StringVar(&kind, "kind", string(s.Kind), "workload kind: inference, finetune-lora, finetune-qlora, finetune-full, pretrain, notebook, render")
	fl.Float64Var(&s.ParamsB, "params-b", s.ParamsB, "model parameters in billions")
	fl.StringVar(&prec, "precision", string(s.Precision), "weights precision: fp32, bf16, fp16, fp8, int8, int4, nf4")
	fl.Float64Var(&s.WorkHours, "work-hours", s.WorkHours, "hours of real work per month")
	fl.Float64Var(&s.IdleMinutes, "idle-minutes", s.IdleMinutes, "auto-shutdown after this many idle minutes (0 = none)")
	fl.StringVar(&budget, "budget", s.BudgetLimit.String(), "monthly budget limit (0 = none)")
	fl.StringVar((*string)(&s.Currency), "currency", string(s.Currency), "budget currency (ISO code)")
	fl.StringVar(&countries, "countries", strings.Join(s.Countries, ","), "allowed countries, comma-separated ISO codes or names (empty = anywhere)")
	fl.BoolVar(&nonInteractive, "non-interactive", false, "never prompt, even on a terminal")
	fl.BoolVar(&force, "force", false, "overwrite FILE if it exists")
	return c
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ask prompts for the answers whose flags were not given.
func (a *app) ask(cmd *cobra.Command, s *config.Starter, kind, prec, budget, countries *string) error {
	in := bufio.NewReader(a.stdin)
	prompt := func(flag, question string, value *string) error {
		if cmd.Flags().Changed(flag) {
			return nil
		}
		fmt.Fprintf(a.stderr, "%s [%s]: ", question, *value)
		line, err := in.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read answer: %w", err)
		}
		if v := strings.TrimSpace(line); v != "" {
			*value = v
		}
		return nil
	}
	num := func(flag, question string, value *float64) error {
		text := strconv.FormatFloat(*value, 'f', -1, 64)
		if err := prompt(flag, question, &text); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "%s: %q is not a number", flag, text)
		}
		*value = f
		return nil
	}
	steps := []func() error{
		func() error { return prompt("name", "Plan name", &s.Name) },
		func() error { return prompt("kind", "Workload kind", kind) },
		func() error { return num("params-b", "Parameters in billions", &s.ParamsB) },
		func() error { return prompt("precision", "Precision", prec) },
		func() error { return num("work-hours", "Hours of real work per month", &s.WorkHours) },
		func() error {
			return num("idle-minutes", "Auto-shutdown after idle minutes (0 = none)", &s.IdleMinutes)
		},
		func() error { return prompt("budget", "Monthly budget", budget) },
		func() error { return prompt("currency", "Currency", (*string)(&s.Currency)) },
		func() error {
			return prompt("countries", "Allowed countries (comma-separated, empty = anywhere)", countries)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

func applyStarterFlags(s *config.Starter, kind, prec, budget, countries string) error {
	s.Kind = gpuwarden.WorkloadKind(kind)
	if !s.Kind.Valid() {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--kind: unknown workload kind %q", kind).
			WithHint("one of: inference, finetune-lora, finetune-qlora, finetune-full, pretrain, notebook, render")
	}
	s.Precision = gpuwarden.Precision(prec)
	if _, err := s.Precision.BytesPerParam(); err != nil {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--precision: unknown precision %q", prec).WithHint("one of: fp32, bf16, fp16, fp8, int8, int4, nf4")
	}
	m, err := gpuwarden.ParseMicros(budget)
	if err != nil || m < 0 {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--budget: %q is not an amount", budget).WithHint("a plain number such as 500 or 1999.99")
	}
	s.BudgetLimit = m
	s.Currency = gpuwarden.Currency(strings.ToUpper(string(s.Currency)))
	codes, err := catalog.CountryCodes(countries)
	if err != nil {
		return flagError("--countries", err)
	}
	s.Countries = codes
	return nil
}

// writeNew writes a file, refusing to replace one unless forced; it writes a
// temporary file and renames it so a failure never leaves half a plan.
func writeNew(path string, data []byte, force bool) error {
	if _, err := os.Stat(path); err == nil && !force {
		return gpuwarden.Errorf(gpuwarden.EConflict, "%s already exists", path).WithHint("use --force to overwrite it")
	}
	tmp, err := os.CreateTemp(dirOf(path), ".gpuwarden-init-*")
	if err != nil {
		return &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "write " + path, Err: err}
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}
