package report_test

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	. "github.com/gpuwarden/gpuwarden/report"
)

func TestSavingsSummary(t *testing.T) {
	events := ledgertest.SavingsFixture()
	type row struct {
		key   string
		total gpuwarden.Cents
		cur   gpuwarden.Currency
		n     int
	}
	tests := []struct {
		by      string
		want    []row
		wantErr bool
	}{
		{ByProject, []row{{None, 18060, "USD", 1}, {"ml", 24436, "USD", 3}, {"nlp", 498459, "USD", 2}, {"vision", 0, "EUR", 1}}, false},
		{ByOwner, []row{{None, 18060, "USD", 1}, {"ana", 0, "EUR", 1}, {"ana", 24436, "USD", 2}, {"bo", 0, "USD", 1}, {"cy", 498459, "USD", 2}}, false},
		{ByKind, []row{{"idle-stop", 24436, "USD", 3}, {"budget-stop", 499688, "USD", 1}, {"spot", -1229, "USD", 1}, {"orphan-ended", 18060, "USD", 1}, {"right-size", 0, "EUR", 1}}, false},
		{"provider", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.by, func(t *testing.T) {
			rows, err := SavingsSummary(events, tt.by)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
					t.Errorf("err %v is not EInvalid", err)
				}
				return
			}
			var got []row
			for _, r := range rows {
				got = append(got, row{r.Key, r.Total.Total, r.Total.Currency, r.Total.Events})
				if tt.by == ByKind && string(r.Kind) != r.Key {
					t.Errorf("row %s: kind %q", r.Key, r.Kind)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("rows %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("row %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestSavingsCSVAddsUp is "one row per event, and its total equals the
// dashboard's": the amount column of the CSV adds up to SumSavings.
func TestSavingsCSVAddsUp(t *testing.T) {
	events := ledgertest.SavingsFixture()
	events[0].Owner = "=cmd|' /C calc'!A0" // a label that a spreadsheet would run
	var b bytes.Buffer
	if err := WriteSavingsCSV(&b, events); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(events)+1 || strings.Join(recs[0], ",") != strings.Join(SavingsCSVHeader, ",") {
		t.Fatalf("%d rows, header %v; want a header and %d events", len(recs), recs[0], len(events))
	}
	amount := map[string]gpuwarden.Cents{}
	for _, r := range recs[1:] {
		var c gpuwarden.Cents
		if err := c.UnmarshalJSON([]byte(r[10])); err != nil {
			t.Fatalf("amount %q: %v", r[10], err)
		}
		amount[r[11]] += c
	}
	for _, tot := range gpuwarden.SumSavingsByCurrency(events) {
		if amount[string(tot.Currency)] != tot.Total {
			t.Errorf("%s: the CSV's amounts add to %d, the total is %d", tot.Currency, amount[string(tot.Currency)], tot.Total)
		}
	}
	if got := recs[1][4]; !strings.HasPrefix(got, "'=") {
		t.Errorf("a formula label went out as %q", got)
	}
	if got := recs[4][10]; got != "-12.29" {
		t.Errorf("a loss went out as %q, want -12.29 (a number)", got)
	}
}

func TestSavingsTableSaysNotSaved(t *testing.T) {
	r, err := Savings(ledgertest.SavingsFixture(), ledgertestMonth(), ledgertestMonth().AddDate(0, 1, 0), ByKind)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSavingsTable(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"not saved: idle stop gpu-b: provider kept billing: powered-off-still-billing", "$5,409.55 saved: $5,032.15 confirmed, $196.80 estimated, $180.60 attributed (6 events, 1 not saved)", "(1 event, 1 not saved)",
		"14.5 h × $3.28/h", "-$12.29", "attributed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	md := r.Markdown("Savings")
	if !strings.Contains(md, "not saved: provider kept billing") || !strings.Contains(md, "| idle stop |") {
		t.Errorf("markdown:\n%s", md)
	}
}

func ledgertestMonth() time.Time { return time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) }
