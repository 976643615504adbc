package gpuwarden

import (
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	tests := []struct {
		kind, value string
		wantErr     string // "" for none
	}{
		{NameRegion, "us-east-1", ""},
		{NameRegion, "British Columbia", ""},
		{NameRegion, "FI - FIN-01", ""},
		{NameRegion, "Hafnarfjarðarkaupstaður", ""},
		{NameRegion, "Bács-Kiskun", ""},
		{NameRegion, "", ""},
		{NameZone, "us-central1-a", ""},
		{NameInstance, "p5.48xlarge", ""},
		{NameInstance, "Standard_NC24ads_A100_v4", ""},
		{NameInstance, "gpu_1x_h100_pcie", ""},
		{NameGPU, "RTX PRO 6000", ""},
		{NameGPU, "A100-80GB", ""},
		{NameProvider, "primeintellect", ""},
		{NameRegion, "us-east-1'$(touch${IFS}PWNED)'", `has "'"`},
		{NameRegion, "us-east-1;reboot", `has ";"`},
		{NameRegion, "a\nb", "U+000A"},
		{NameRegion, "a\x1b[31mb", "U+001B"},
		{NameRegion, "-us-east-1", "starts or ends"},
		{NameRegion, "us-east-1 ", "starts or ends"},
		{NameInstance, "p5 48xlarge", "a space"},
		{NameInstance, "VM.Standard.E5.Flex$_2_8", `has "$"`},
		{NameInstance, "--endpoint=x", "starts or ends"},
		{NameInstance, "p5.48xlargé", `has "é"`},
		{NameGPU, "H100`id`", "has \"`\""},
		{NameProvider, "aws|x", `has "|"`},
		{NameRegion, "\xff", "not valid UTF-8"},
		{NameRegion, strings.Repeat("a", 129), "at most 128"},
		{"colour", "x", "unknown kind"},
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+tt.value, func(t *testing.T) {
			err := CheckName(tt.kind, tt.value)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("CheckName(%q, %q) = %v, want nil", tt.kind, tt.value, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("CheckName(%q, %q) = %v, want an error with %q", tt.kind, tt.value, err, tt.wantErr)
			}
		})
	}
}

// FuzzCheckName holds the promise the launch renderer and `plan -o
// targets` rely on: a name that passes holds no byte a POSIX shell treats
// specially outside quotes except the space, and cannot start an option.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"us-east-1", "Bács-Kiskun", "a'b", "$(x)", "-x", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, kind := range []string{NameProvider, NameRegion, NameZone, NameInstance, NameGPU} {
			if CheckName(kind, s) != nil || s == "" {
				continue
			}
			if strings.ContainsAny(s, "'\"`$\\;&|<>(){}[]*?!#~\t\n\r\x00") || s[0] == '-' {
				t.Fatalf("CheckName(%q, %q) passed a shell metacharacter or an option", kind, s)
			}
		}
	})
}
