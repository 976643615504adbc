package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// fuzzNames are the file names a fuzz input is read under, so that each
// format's provider inference, and its failure, is exercised.
var fuzzNames = []string{"prices.csv", "aws/vms.csv", "gcp/vms.csv", "vast/vms.csv", "aws.csv", "gcp.csv", "unknown.csv"}

// FuzzReadOffers feeds arbitrary bytes to ReadOffers: it must never panic,
// every error must be an EInvalid *gpuwarden.Error of a few lines at most
// (input it quotes is cut), and an error must come alone, without half the
// offers. testdata/fuzz/FuzzReadOffers keeps the rows and headers that were
// once misread or echoed whole.
func FuzzReadOffers(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*/*.csv")
	if err != nil {
		f.Fatal(err)
	}
	more, _ := filepath.Glob("testdata/skypilot/*/vms.csv")
	for i, path := range append(seeds, more...) {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(i))
	}
	// The snapshot's smallest files, in the format of their names.
	for _, cloud := range []string{"hyperbolic", "yotta"} {
		emb, err := unpack(cloud)
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(emb), uint8(slices.Index(fuzzNames, "aws/vms.csv")))
	}
	f.Add([]byte("provider,region,gpu,gpu_count,currency,on_demand_hourly\naws,us-east-1,T4,1,USD,1e-3\n"), uint8(0))
	f.Add([]byte("InstanceType,AcceleratorName,AcceleratorCount,Price,Region\n,A100,1,1,us-central1\n"), uint8(2))
	// Shell metacharacters and control characters in every cell that
	// names something, in each format (issue #32: a catalog cell ran as a
	// shell command through a launch template).
	for _, bad := range []string{"us-east-1'$(touch${IFS}PWNED)'", "x;reboot", "a`id`", "a\x1b[31mred", "-x", "a|b", "\"a\nb\""} {
		f.Add([]byte("provider,region,instance,gpu,gpu_count,currency,on_demand_hourly\naws,"+bad+",p5.48xlarge,H100,8,USD,98\n"), uint8(0))
		f.Add([]byte("provider,region,instance,gpu,gpu_count,currency,on_demand_hourly\naws,us-east-1,"+bad+",H100,8,USD,98\n"), uint8(0))
		f.Add([]byte("provider,region,instance,gpu,gpu_count,currency,on_demand_hourly\naws,us-east-1,p5.48xlarge,"+bad+",8,USD,98\n"), uint8(0))
		f.Add([]byte("InstanceType,AcceleratorName,AcceleratorCount,Price,Region\ngpu_1x_h100,H100,1,2.49,"+bad+"\n"), uint8(1))
		f.Add([]byte("InstanceType,AcceleratorName,AcceleratorCount,Price,Region\n"+bad+",H100,1,2.49,us-east-1\n"), uint8(3))
		f.Add([]byte("InstanceType,AcceleratorName,AcceleratorCount,Price,Region\ngpu_1x_h100,"+bad+",1,2.49,us-east-1\n"), uint8(1))
	}
	f.Fuzz(func(t *testing.T, in []byte, pick uint8) {
		name := fuzzNames[int(pick)%len(fuzzNames)]
		offers, warns, err := ReadOffers(name, bytes.NewReader(in))
		if err == nil {
			for _, o := range offers {
				if o.OnDemandHourly < 0 || o.SpotHourly < 0 || o.Monthly < 0 {
					t.Fatalf("negative price in %+v", o)
				}
				if o.GPUCount <= 0 {
					t.Fatalf("offer without GPUs: %+v", o)
				}
				// Names reach launch commands and tables: whatever a
				// cell held, only a name CheckName allows comes out.
				if err := checkOfferNames(&o); err != nil {
					t.Fatalf("offer read with a name that is not allowed: %v", err)
				}
			}
			return
		}
		if offers != nil || warns != nil {
			t.Fatalf("error %v came with %d offers and %d warnings", err, len(offers), len(warns))
		}
		var e *gpuwarden.Error
		if !errors.As(err, &e) || e.Code != gpuwarden.EInvalid {
			t.Fatalf("error %v (%T) is not an EInvalid *gpuwarden.Error", err, err)
		}
		if e.Hint == "" {
			t.Fatalf("error %v has no hint", err)
		}
		if len(e.Message) > 2000 {
			t.Fatalf("error message is %d bytes long: %.300s", len(e.Message), e.Message)
		}
	})
}

// FuzzAzurePage feeds arbitrary bytes as a Retail Prices answer: decoding
// may fail, but whatever azureCSV makes of the items must read back through
// ReadOffers without an error, since update stores that file for plan.
func FuzzAzurePage(f *testing.F) {
	for _, page := range []string{"page1.json", "page2.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "published", "azure", page))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"Items":[{"armSkuName":"Standard_NC4as_T4_v3","armRegionName":"x,\"y","type":"Consumption","unitOfMeasure":"1 Hour","retailPrice":1e-9,"currencyCode":"U\nSD"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p azurePage
		if json.Unmarshal(b, &p) != nil {
			return
		}
		out, n := azureCSV(p.Items, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
		if n == 0 {
			return
		}
		offers, _, err := ReadOffers("azure/prices.csv", bytes.NewReader(out))
		if err != nil {
			t.Fatalf("azureCSV wrote a file ReadOffers refuses: %v\n%s", err, out)
		}
		if len(offers) != n {
			t.Fatalf("azureCSV counted %d offers, the file holds %d", n, len(offers))
		}
	})
}
