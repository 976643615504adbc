// Package packaging holds what turns the gpuwarden binary into release
// artifacts — the nfpm config of the .deb and .rpm, the systemd units, the
// installed config, the maintainer scripts — and the tests that build them
// all with scripts/package.sh and install each one (docs/packaging.md).
//
// The tools that package.sh runs (nfpm, cyclonedx-gomod, gwpack) live in
// the separate module packaging/tools, so that gpuwarden's own go.mod does
// not carry them.
package packaging
