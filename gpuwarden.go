// Package gpuwarden holds the domain of the GPU rental guard: money, workloads,
// offers, the plan file and the application error. It imports only the standard
// library; every outside dependency lives in a package of its own.
package gpuwarden

// Version is the release of this build; the linker overrides it with
// -ldflags "-X github.com/gpuwarden/gpuwarden.Version=…".
var Version = "0.1.0-dev"

// Commit is the source revision of this build, set by the linker when known.
var Commit = ""

// DefaultHoursPerMonth is what clouds bill as one month (365 × 24 / 12); plan
// files may override it because some providers bill 720 or calendar months.
const DefaultHoursPerMonth = 730
