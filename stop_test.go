package gpuwarden

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestStopTableRows holds every row to what the table promises: a source
// page, a known shutdown effect and action, and for a row with a gpuwarden
// client the API call and the state that confirms it.
func TestStopTableRows(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range StopSemanticsAll() {
		t.Run(s.Provider, func(t *testing.T) {
			if s.Provider != strings.ToLower(s.Provider) || s.Provider == "" {
				t.Errorf("provider %q: want a lower-case catalog name", s.Provider)
			}
			if seen[s.Provider] {
				t.Errorf("provider %q has two rows", s.Provider)
			}
			seen[s.Provider] = true
			if len(s.Sources) == 0 {
				t.Errorf("no source URL")
			}
			for _, src := range s.Sources {
				u, err := url.Parse(src)
				if err != nil || u.Scheme != "https" || u.Host == "" {
					t.Errorf("source %q: want an https URL", src)
				}
			}
			switch s.OSShutdown {
			case ShutdownStopsBilling, ShutdownKeepsBilling, ShutdownTerminates, ShutdownUnknown:
			default:
				t.Errorf("OSShutdown %q is not one of the effects", s.OSShutdown)
			}
			switch s.LosesData {
			case DataKept, DataPartial, DataLost, DataUnknown:
			default:
				t.Errorf("LosesData %q is not one of the values", s.LosesData)
			}
			if s.Action == "" {
				t.Errorf("no action: say %q when none is known", ActionNoneKnown)
			}
			if (s.Action == ActionTerminate || s.Action == ActionDelete) && s.LosesData != DataLost {
				t.Errorf("action %s loses the box, but LosesData = %s", s.Action, s.LosesData)
			}
			if s.Call.URL != "" && s.Call.Method == "" {
				t.Errorf("call %s has no method", s.Call.URL)
			}
			if s.Method != "" {
				if s.Call.URL == "" || s.Confirmed == "" || s.Identity == "" {
					t.Errorf("method %s: want the call, the confirmed state and the identity", s.Method)
				}
				if ok, why := StopsComputeBilling(s.Provider, s.Method); !ok {
					t.Errorf("StopsComputeBilling(%s, %s) = false (%s), want true for the provider's own method", s.Provider, s.Method, why)
				}
			}
			if slices.Contains(UnknownStopProviders, s.Provider) {
				t.Errorf("%s has a row and is also listed as unknown", s.Provider)
			}
		})
	}
}

// knownCatalogProviders reads the keys of catalog/read.go's knownProviders,
// so that a provider added to the catalog without stop semantics fails here.
func knownCatalogProviders(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "catalog/read.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "knownProviders" || len(vs.Values) != 1 {
			return true
		}
		lit, ok := vs.Values[0].(*ast.CompositeLit)
		if !ok {
			t.Fatalf("knownProviders is not a map literal")
		}
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			if b, ok := kv.Key.(*ast.BasicLit); ok && b.Kind == token.STRING {
				s, _ := strconv.Unquote(b.Value)
				names = append(names, s)
			}
		}
		return false
	})
	if len(names) == 0 {
		t.Fatal("found no knownProviders in catalog/read.go")
	}
	return names
}

// TestStopSemanticsCoverCatalog: every catalog provider has a row or is
// listed as unknown, and an unknown one never reads as stopping the bill.
func TestStopSemanticsCoverCatalog(t *testing.T) {
	for _, p := range knownCatalogProviders(t) {
		s, ok := StopSemanticsOf(p)
		unknown := slices.Contains(UnknownStopProviders, s.Provider)
		if !ok && !unknown {
			t.Errorf("catalog provider %q has no stop semantics row and is not in UnknownStopProviders", p)
		}
		if ok && unknown {
			t.Errorf("catalog provider %q has a row and is listed unknown", p)
		}
		if !ok {
			if s.OSShutdown != ShutdownUnknown || s.Action != ActionNoneKnown || s.LosesData != DataUnknown {
				t.Errorf("%s: unknown provider answered %+v, want unknown throughout", p, s)
			}
			for _, m := range []string{StopOSShutdown, StopCommand, StopAWS, ""} {
				if got, why := StopsComputeBilling(p, m); got {
					t.Errorf("StopsComputeBilling(%s, %q) = true (%s) for an unknown provider", p, m, why)
				}
			}
		}
	}
}

func TestStopsComputeBilling(t *testing.T) {
	tests := []struct {
		provider, method string
		want             bool
		why              string
	}{
		{"aws", StopOSShutdown, true, "stops the instance"},
		{"AWS", StopAWS, true, "stops compute billing"},
		{"gcp", StopOSShutdown, true, "stops the instance"},
		{"gcp", StopGCP, true, "stop"},
		{"azure", StopOSShutdown, false, "keeps azure billing"},
		{"azure", StopAzureDeallocate, true, "deallocate"},
		{"azure", StopAWS, false, "is not azure's stop"},
		{"lambda", StopOSShutdown, false, "keeps lambda billing"},
		{"lambda", StopLambdaTerminate, true, "terminate"},
		{"lambdalabs", StopLambdaTerminate, true, "terminate"},
		{"runpod", StopOSShutdown, false, "keeps runpod billing"},
		{"runpod", StopRunPod, true, "stop"},
		{"vast", StopVast, true, "stop"},
		{"hetzner", StopOSShutdown, false, "keeps hetzner billing"},
		{"hetzner", StopAWS, false, "no API client for hetzner"},
		{"nebius", StopOSShutdown, false, "reboots it"},
		{"crusoe", StopOSShutdown, false, "is unknown"},
		{"tensordock", StopOSShutdown, false, "not documented"},
		{"verda", StopOSShutdown, false, "not documented"},
		{"", StopOSShutdown, false, "not documented"},
		{"aws", StopCommand, false, "custom stop command"},
		{"aws", "", false, "no stop method"},
	}
	for _, tt := range tests {
		t.Run(tt.provider+"/"+tt.method, func(t *testing.T) {
			got, why := StopsComputeBilling(tt.provider, tt.method)
			if got != tt.want || !strings.Contains(why, tt.why) {
				t.Errorf("StopsComputeBilling(%q, %q) = %v, %q; want %v and a reason containing %q",
					tt.provider, tt.method, got, why, tt.want, tt.why)
			}
		})
	}
}

func TestStopSemanticsOf(t *testing.T) {
	tests := []struct {
		in, provider string
		ok           bool
		shutdown     ShutdownEffect
	}{
		{"azure", "azure", true, ShutdownKeepsBilling},
		{" DigitalOcean ", "do", true, ShutdownKeepsBilling},
		{"google", "gcp", true, ShutdownStopsBilling},
		{"verda", "datacrunch", false, ShutdownUnknown},
		{"nobody", "nobody", false, ShutdownUnknown},
	}
	for _, tt := range tests {
		got, ok := StopSemanticsOf(tt.in)
		if got.Provider != tt.provider || ok != tt.ok || got.OSShutdown != tt.shutdown {
			t.Errorf("StopSemanticsOf(%q) = %s, %v, %s; want %s, %v, %s",
				tt.in, got.Provider, ok, got.OSShutdown, tt.provider, tt.ok, tt.shutdown)
		}
	}
	// A caller may not change the table through a returned row.
	s, _ := StopSemanticsOf("aws")
	s.Sources[0] = "changed"
	if again, _ := StopSemanticsOf("aws"); again.Sources[0] == "changed" {
		t.Error("StopSemanticsOf returned the table's own slice")
	}
}

// TestStopOutcomeAnswer: the provider's answer in words, as the agent's log,
// the savings evidence and the fleet's stop views all print it.
func TestStopOutcomeAnswer(t *testing.T) {
	tests := []struct {
		name string
		in   StopOutcome
		want string
	}{
		{"azure", StopOutcome{HTTPStatus: 202, OperationID: "op-1", State: "PowerState/deallocated", Detail: "disks still bill"},
			"HTTP 202, operation op-1, state read back PowerState/deallocated, disks still bill"},
		{"state only", StopOutcome{State: "stopped"}, "state read back stopped"},
		{"nothing said: an OS shutdown", StopOutcome{Method: StopOSShutdown, Billing: NodeStopped}, ""},
	}
	for _, tt := range tests {
		if got := tt.in.Answer(); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}
